/* The cache of remote objects: bytes written read back through the
 * mapping, survive a remount, are keyed by object version; absent ranges
 * are found, waited for, failed; pins keep chunks from eviction (in other
 * processes too), eviction punches holes, the bound holds, next-use
 * eviction is Belady's and beats LRU; two processes writing one entry
 * agree; a crash never leaves a chunk marked present without its bytes;
 * no secret of a URL reaches a file. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>
#include <cmocka.h>

#include "fs/remote/cache.h"
#include "fs/remote/cache_impl.h"

#define SMALL 4096u /* chunk of most tests */

static char base[512];

static int setup(void **state)
{
	const char *tmp = getenv("BFS_TEST_TMP");

	snprintf(base, sizeof(base), "%s/cache-XXXXXX", tmp ? tmp : "/tmp");
	return mkdtemp(base) ? 0 : -1;
}

/* A fresh directory for one test. */
static const char *test_dir(const char *name)
{
	static char d[700];

	snprintf(d, sizeof(d), "%s/%s", base, name);
	return d;
}

/* The object's byte at offset x (never 0: a hole reads as 0). */
static uint8_t obj_byte(uint64_t x)
{
	return (uint8_t)((((x + 7) * 2654435761u) >> 16) | 1);
}

static void obj_fill(uint8_t *buf, uint64_t off, uint64_t len)
{
	for (uint64_t i = 0; i < len; i++)
		buf[i] = obj_byte(off + i);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static struct bfs_cache *cache_new(const char *dir, uint64_t limit,
				   uint32_t chunk, enum bfs_cache_policy p)
{
	struct bfs_cache_opts o = {.limit_bytes = limit,
				   .chunk_size = chunk,
				   .policy = p,
				   .evict_bytes = chunk};
	struct bfs_cache *c;
	struct bfs_error err = {{0}};

	assert_int_equal(bfs_cache_create(&c, dir, &o, &err), 0);
	return c;
}

static struct bfs_cache_key key_of(const char *url, const char *etag,
				   uint64_t size)
{
	return (struct bfs_cache_key){.url = url, .etag = etag, .size = size};
}

static struct bfs_cache_entry *entry_new(struct bfs_cache *c, const char *url,
					 const char *etag, uint64_t size)
{
	struct bfs_cache_key k = key_of(url, etag, size);
	struct bfs_cache_entry *e;
	struct bfs_error err = {{0}};

	assert_int_equal(bfs_cache_open(c, &k, &e, &err), 0);
	return e;
}

/* Write object bytes [off, off+len) into e. */
static int put(struct bfs_cache_entry *e, uint64_t off, uint64_t len)
{
	uint8_t *buf = malloc(len);
	int rc;

	obj_fill(buf, off, len);
	rc = bfs_cache_write(e, off, buf, len);
	free(buf);
	return rc;
}

/* Whether the mapping holds the object's bytes in [off, off+len). */
static bool mapped_equal(struct bfs_cache_entry *e, uint64_t off, uint64_t len)
{
	uint64_t size = bfs_cache_size(e);
	uint8_t *m =
	    mmap(NULL, size, PROT_READ, MAP_SHARED, bfs_cache_fd(e), 0);
	bool ok = m != MAP_FAILED;

	for (uint64_t i = off; ok && i < off + len; i++)
		ok = m[i] == obj_byte(i);
	if (m != MAP_FAILED)
		munmap(m, size);
	return ok;
}

static void default_dir_follows_xdg_then_home(void **state)
{
	char out[64];
	char *xdg[] = {"HOME=/home/u", "XDG_CACHE_HOME=/x/cache", NULL};
	char *rel[] = {"XDG_CACHE_HOME=relative", "HOME=/home/u", NULL};
	char *home[] = {"HOMEX=/no", "HOME=/home/u", NULL};
	char *none[] = {"PATH=/bin", NULL};
	char *relhome[] = {"HOME=rel", NULL};

	assert_int_equal(bfs_cache_default_dir(out, sizeof(out), xdg), 0);
	assert_string_equal(out, "/x/cache/batchfs");
	assert_int_equal(bfs_cache_default_dir(out, sizeof(out), rel), 0);
	assert_string_equal(out, "/home/u/.cache/batchfs");
	assert_int_equal(bfs_cache_default_dir(out, sizeof(out), home), 0);
	assert_string_equal(out, "/home/u/.cache/batchfs");
	assert_int_equal(bfs_cache_default_dir(out, sizeof(out), none),
			 -ENOENT);
	assert_int_equal(bfs_cache_default_dir(out, sizeof(out), relhome),
			 -ENOENT);
	assert_int_equal(bfs_cache_default_dir(out, 10, home), -ENAMETOOLONG);
}

static void public_url_drops_userinfo_query_fragment(void **state)
{
	char out[128];

	assert_int_equal(bfs_cache_url_public(out, sizeof(out),
					      "https://u:pw@h.example:8443/a/"
					      "b.pt?X-Amz-Signature=s#f"),
			 0);
	assert_string_equal(out, "https://h.example:8443/a/b.pt");
	assert_int_equal(
	    bfs_cache_url_public(out, sizeof(out), "s3://bucket/k/e/y"), 0);
	assert_string_equal(out, "s3://bucket/k/e/y");
	assert_int_equal(
	    bfs_cache_url_public(out, sizeof(out), "http://h/p@q?x=@y"), 0);
	assert_string_equal(out, "http://h/p@q");
	assert_int_equal(bfs_cache_url_public(out, 8, "https://host/long"),
			 -ENAMETOOLONG);
}

static void written_bytes_read_back_through_the_mapping(void **state)
{
	uint64_t size = 10 * SMALL + 123; /* a partial last chunk */
	struct bfs_cache *c = cache_new(test_dir("rw"), 0, SMALL, 0);
	struct bfs_cache_entry *e = entry_new(c, "https://h/o", "\"e1\"", size);
	struct stat st;

	assert_int_equal(bfs_cache_chunk(e), SMALL);
	assert_int_equal(fstat(bfs_cache_fd(e), &st), 0);
	assert_int_equal(st.st_size, size);
	assert_false(bfs_cache_present(e, 0, 1));
	assert_int_equal(put(e, 2 * SMALL, 3 * SMALL), 0);
	assert_int_equal(put(e, 10 * SMALL, 123), 0); /* the tail */
	assert_true(bfs_cache_present(e, 2 * SMALL + 5, 3 * SMALL - 5));
	assert_true(bfs_cache_present(e, 10 * SMALL, 123));
	assert_false(bfs_cache_present(e, SMALL, 2 * SMALL));
	assert_true(mapped_equal(e, 2 * SMALL, 3 * SMALL));
	assert_true(mapped_equal(e, 10 * SMALL, 123));
	/* not a chunk boundary, not whole chunks, past the end */
	assert_int_equal(put(e, 1, SMALL), -EINVAL);
	assert_int_equal(put(e, 0, SMALL + 1), -EINVAL);
	assert_int_equal(put(e, 10 * SMALL, 124), -EINVAL);
	/* the same key again: the same entry */
	assert_ptr_equal(entry_new(c, "https://h/o", "\"e1\"", size), e);
	bfs_cache_close(e);
	bfs_cache_close(e);
	bfs_cache_destroy(c);
}

static void a_remount_finds_what_was_fetched(void **state)
{
	const char *dir = test_dir("remount");
	uint64_t size = 64 * SMALL;
	struct bfs_cache *c = cache_new(dir, 0, SMALL, 0);
	struct bfs_cache_entry *e = entry_new(c, "https://h/o", "\"v\"", size);
	char name[65];

	assert_int_equal(put(e, 8 * SMALL, 8 * SMALL), 0);
	assert_int_equal(put(e, 63 * SMALL, SMALL), 0);
	snprintf(name, sizeof(name), "%s", bfs_cache_name(e));
	bfs_cache_destroy(c); /* closes e */

	/* another chunk size asked: the entry keeps its own */
	c = cache_new(dir, 0, 2 * SMALL, 0);
	e = entry_new(c, "https://h/o", "\"v\"", size);
	assert_string_equal(bfs_cache_name(e), name);
	assert_int_equal(bfs_cache_chunk(e), SMALL);
	assert_true(bfs_cache_present(e, 8 * SMALL, 8 * SMALL));
	assert_true(bfs_cache_present(e, 63 * SMALL, SMALL));
	assert_false(bfs_cache_present(e, 0, SMALL));
	assert_true(mapped_equal(e, 8 * SMALL, 8 * SMALL));
	bfs_cache_close(e);
	bfs_cache_destroy(c);
}

/* An entry from an earlier run is used only when its files are the
 * mounter's alone: one with a second link, or group or world writable,
 * is not (removed, started afresh); nor is a directory others may write
 * (but one of ours that is sticky). */
static void an_entry_not_ours_alone_is_not_used(void **state)
{
	const char *dir = test_dir("trust");
	uint64_t size = 8 * SMALL;
	struct bfs_cache *c = cache_new(dir, 0, SMALL, 0);
	struct bfs_cache_entry *e = entry_new(c, "https://h/t", "\"t\"", size);
	char name[65], p[1024], q[1024];
	struct bfs_error err = {{0}};
	struct stat st;

	assert_int_equal(put(e, 0, size), 0);
	snprintf(name, sizeof(name), "%s", bfs_cache_name(e));
	bfs_cache_destroy(c);
	snprintf(p, sizeof(p), "%s/%s.data", dir, name);
	snprintf(q, sizeof(q), "%s/extra-link", dir);
	assert_int_equal(link(p, q), 0);
	c = cache_new(dir, 0, SMALL, 0);
	e = entry_new(c, "https://h/t", "\"t\"", size);
	assert_false(bfs_cache_present(e, 0, SMALL));
	assert_int_equal(fstat(bfs_cache_fd(e), &st), 0);
	assert_int_equal(st.st_nlink, 1);
	assert_int_equal(put(e, 0, size), 0);
	bfs_cache_destroy(c);
	snprintf(p, sizeof(p), "%s/%s.map", dir, name);
	assert_int_equal(chmod(p, 0620), 0);
	c = cache_new(dir, 0, SMALL, 0);
	e = entry_new(c, "https://h/t", "\"t\"", size);
	assert_false(bfs_cache_present(e, 0, SMALL));
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	bfs_cache_destroy(c);

	assert_int_equal(chmod(dir, 0770), 0);
	assert_int_equal(bfs_cache_create(&c, dir, NULL, &err), -EPERM);
	assert_non_null(strstr(err.msg, "chmod go-w"));
	assert_int_equal(chmod(dir, 01777), 0);
	c = cache_new(dir, 0, SMALL, 0);
	bfs_cache_destroy(c);
	assert_int_equal(chmod(dir, 0700), 0);
}

static bool file_exists(const char *dir, const char *name, const char *ext)
{
	char p[1024];

	snprintf(p, sizeof(p), "%s/%s.%s", dir, name, ext);
	return access(p, F_OK) == 0;
}

static void another_etag_is_another_entry_and_the_old_one_goes(void **state)
{
	const char *dir = test_dir("etag");
	struct bfs_cache *c = cache_new(dir, 0, SMALL, 0);
	struct bfs_cache_entry *a = entry_new(c, "https://h/o", "\"1\"", SMALL);
	struct bfs_cache_entry *b, *d;
	struct bfs_cache_key lm = {.url = "https://h/o",
				   .last_modified = "Tue, 1 Oct 2024",
				   .size = SMALL};
	struct bfs_cache_key none = {.url = "https://h/o", .size = SMALL};
	struct bfs_error err = {{0}};
	char old[65];

	assert_int_equal(put(a, 0, SMALL), 0);
	snprintf(old, sizeof(old), "%s", bfs_cache_name(a));
	/* open at once: both kept */
	b = entry_new(c, "https://h/o", "\"2\"", SMALL);
	assert_string_not_equal(bfs_cache_name(b), old);
	assert_false(bfs_cache_present(b, 0, SMALL));
	assert_true(file_exists(dir, old, "data"));
	/* another size is another version too */
	d = entry_new(c, "https://h/o", "\"2\"", 2 * SMALL);
	assert_string_not_equal(bfs_cache_name(d), bfs_cache_name(b));
	bfs_cache_close(d);
	bfs_cache_close(a);
	bfs_cache_close(b);
	/* the URL's version opened now replaces the others nobody has */
	b = entry_new(c, "https://h/o", "\"2\"", SMALL);
	assert_false(file_exists(dir, old, "data"));
	assert_false(file_exists(dir, old, "map"));
	assert_false(file_exists(dir, old, "meta"));
	bfs_cache_close(b);
	/* Last-Modified without an ETag keys it; neither is refused */
	assert_int_equal(bfs_cache_open(c, &lm, &a, &err), 0);
	bfs_cache_close(a);
	assert_int_equal(bfs_cache_open(c, &none, &a, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "ETag"));
	bfs_cache_destroy(c);
}

static void missing_ranges_are_merged_absent_chunks(void **state)
{
	uint64_t size = 10 * SMALL + 100;
	struct bfs_cache *c = cache_new(test_dir("missing"), 0, SMALL, 0);
	struct bfs_cache_entry *e = entry_new(c, "https://h/m", "\"x\"", size);
	struct bfs_cache_range r[8];

	/* present: 0, 3, 4, 8 */
	assert_int_equal(put(e, 0, SMALL), 0);
	assert_int_equal(put(e, 3 * SMALL, 2 * SMALL), 0);
	assert_int_equal(put(e, 8 * SMALL, SMALL), 0);
	assert_int_equal(bfs_cache_missing(e, 0, size, r, 8), 3);
	assert_int_equal(r[0].off, SMALL);
	assert_int_equal(r[0].len, 2 * SMALL);
	assert_int_equal(r[1].off, 5 * SMALL);
	assert_int_equal(r[1].len, 3 * SMALL);
	assert_int_equal(r[2].off, 9 * SMALL);
	assert_int_equal(r[2].len, SMALL + 100); /* cut at the end */
	/* a range inside: whole chunks of it */
	assert_int_equal(bfs_cache_missing(e, SMALL + 10, 10, r, 8), 1);
	assert_int_equal(r[0].off, SMALL);
	assert_int_equal(r[0].len, SMALL);
	assert_int_equal(bfs_cache_missing(e, 3 * SMALL, 2 * SMALL, r, 8), 0);
	/* more ranges than room: the count, the first ones filled */
	assert_int_equal(bfs_cache_missing(e, 0, size, r, 1), 3);
	assert_int_equal(r[0].off, SMALL);
	assert_int_equal(r[0].len, 2 * SMALL);
	assert_int_equal(bfs_cache_missing(e, 0, size + 1, r, 8), -EINVAL);
	bfs_cache_close(e);
	bfs_cache_destroy(c);
}

struct later {
	struct bfs_cache_entry *e;
	uint64_t off, len;
	int fail; /* errno to fail with instead of writing */
};

static void *write_later(void *arg)
{
	struct later *l = arg;

	usleep(30000);
	if (l->fail)
		bfs_cache_fail(l->e, l->off, l->len, l->fail);
	else
		assert_int_equal(put(l->e, l->off, l->len), 0);
	return NULL;
}

static void wait_returns_when_written_failed_or_late(void **state)
{
	struct bfs_cache *c = cache_new(test_dir("wait"), 0, SMALL, 0);
	struct bfs_cache_entry *e =
	    entry_new(c, "https://h/w", "\"x\"", 8 * SMALL);
	struct later l = {.e = e, .off = 2 * SMALL, .len = 2 * SMALL};
	pthread_t t;

	assert_int_equal(bfs_cache_wait(e, 2 * SMALL, 10, now_ns() + 20000000),
			 -ETIMEDOUT);
	assert_int_equal(bfs_cache_pin(e, 2 * SMALL, 2 * SMALL), 0);
	pthread_create(&t, NULL, write_later, &l);
	assert_int_equal(
	    bfs_cache_wait(e, 2 * SMALL, 2 * SMALL, now_ns() + 60000000000u),
	    0);
	pthread_join(t, NULL);
	assert_true(mapped_equal(e, 2 * SMALL, 2 * SMALL));
	bfs_cache_unpin(e, 2 * SMALL, 2 * SMALL);

	/* a failure wakes the waiter with its error, until cleared */
	l = (struct later){.e = e, .off = 5 * SMALL, .len = SMALL, .fail = EIO};
	pthread_create(&t, NULL, write_later, &l);
	assert_int_equal(
	    bfs_cache_wait(e, 5 * SMALL, SMALL, now_ns() + 60000000000u), -EIO);
	pthread_join(t, NULL);
	assert_int_equal(bfs_cache_wait(e, 5 * SMALL, 1, 0), -EIO);
	bfs_cache_fail(e, 5 * SMALL, SMALL, 0);
	assert_int_equal(bfs_cache_wait(e, 5 * SMALL, 1, 0), -ETIMEDOUT);
	bfs_cache_fail(e, 5 * SMALL, SMALL, EIO);
	assert_int_equal(put(e, 5 * SMALL, SMALL), 0); /* clears it */
	assert_int_equal(bfs_cache_wait(e, 5 * SMALL, SMALL, 0), 0);
	bfs_cache_close(e);
	bfs_cache_destroy(c);
}

static uint64_t allocated(struct bfs_cache_entry *e)
{
	struct stat st;

	fdatasync(bfs_cache_fd(e));
	assert_int_equal(fstat(bfs_cache_fd(e), &st), 0);
	return (uint64_t)st.st_blocks * 512;
}

static void eviction_punches_holes_but_never_a_pinned_chunk(void **state)
{
	uint32_t chunk = BFS_CACHE_CHUNK_DEFAULT;
	uint64_t size = 32 * (uint64_t)chunk;
	struct bfs_cache *c = cache_new(test_dir("punch"), 0, chunk, 0);
	struct bfs_cache_entry *e = entry_new(c, "https://h/p", "\"x\"", size);
	uint64_t full;
	uint8_t *m;

	assert_int_equal(put(e, 0, size), 0);
	full = allocated(e);
	assert_true(full >= size);
	assert_int_equal(bfs_cache_pin(e, 0, 4 * chunk), 1);
	assert_int_equal(bfs_cache_evict(e, 0, 4 * chunk), 0);
	assert_true(bfs_cache_present(e, 0, 4 * chunk));
	/* chunks 2..5: 2 and 3 pinned, 4 and 5 go */
	assert_int_equal(bfs_cache_evict(e, 2 * chunk, 4 * chunk), 2 * chunk);
	assert_true(bfs_cache_present(e, 0, 4 * chunk));
	assert_false(bfs_cache_present(e, 4 * chunk, 1));
	assert_false(bfs_cache_present(e, 5 * chunk, 1));
	bfs_cache_unpin(e, 0, 4 * chunk);
	assert_int_equal(bfs_cache_evict(e, 0, 16 * chunk), 14 * chunk);
	assert_false(bfs_cache_present(e, 0, 1));
	assert_true(bfs_cache_present(e, 16 * chunk, 16 * chunk));
	assert_true(allocated(e) <= full - 16 * (uint64_t)chunk);
	/* the holes read as zeros; the rest is intact */
	m = mmap(NULL, size, PROT_READ, MAP_SHARED, bfs_cache_fd(e), 0);
	assert_true(m != MAP_FAILED);
	assert_int_equal(m[0], 0);
	assert_int_equal(m[16 * chunk - 1], 0);
	munmap(m, size);
	assert_true(mapped_equal(e, 16 * chunk, 16 * chunk));
	bfs_cache_close(e);
	bfs_cache_destroy(c);
}

static void the_bound_holds_and_pinned_chunks_refuse_room(void **state)
{
	struct bfs_cache *c =
	    cache_new(test_dir("bound"), 8 * SMALL, SMALL, BFS_CACHE_LRU);
	struct bfs_cache_entry *e =
	    entry_new(c, "https://h/b", "\"x\"", 32 * SMALL);
	struct bfs_cache_stats st;

	for (uint64_t i = 0; i < 32; i++) {
		assert_int_equal(put(e, i * SMALL, SMALL), 0);
		bfs_cache_stats(c, &st);
		assert_true(st.present_bytes <= 8 * SMALL);
	}
	/* LRU: the last 8 written are there */
	assert_true(bfs_cache_present(e, 24 * SMALL, 8 * SMALL));
	assert_int_equal(bfs_cache_pin(e, 24 * SMALL, 8 * SMALL), 1);
	assert_int_equal(put(e, 0, SMALL), -ENOBUFS);
	assert_false(bfs_cache_present(e, 0, SMALL));
	bfs_cache_unpin(e, 24 * SMALL, 8 * SMALL);
	assert_int_equal(put(e, 0, SMALL), 0);
	/* more than the bound at once */
	assert_int_equal(put(e, 8 * SMALL, 9 * SMALL), -ENOBUFS);
	bfs_cache_stats(c, &st);
	assert_int_equal(st.evicted_chunks, 32 - 8 + 1);
	bfs_cache_close(e);
	bfs_cache_destroy(c);
}

/* A cache on a tmpfs of 64 pages, unbounded, under an object twice its
 * size: every write finds room (the bound follows the disk, evicting),
 * the disk never holds more than it can, what was written last reads
 * back, and the bound in force says the disk's. Needs root (skipped
 * where a tmpfs cannot be mounted). */
static void a_full_disk_is_evicted_for_and_the_bound_follows_it(void **state)
{
	const char *dir = test_dir("full");
	struct bfs_cache *c;
	struct bfs_cache_entry *e;
	struct bfs_cache_stats st;

	mkdir(dir, 0700);
	if (mount("tmpfs", dir, "tmpfs", 0, "size=262144,mode=0700") < 0) {
		print_message("cannot mount a tmpfs: %s\n", strerror(errno));
		skip();
	}
	c = cache_new(dir, 0, SMALL, BFS_CACHE_LRU);
	e = entry_new(c, "https://h/full", "\"f\"", 128 * SMALL);
	for (uint64_t i = 0; i < 128; i++)
		assert_int_equal(put(e, i * SMALL, SMALL), 0);
	assert_true(mapped_equal(e, 120 * SMALL, 8 * SMALL));
	bfs_cache_stats(c, &st);
	assert_true(st.evicted_chunks > 0);
	assert_true(st.limit_bytes > 0 && st.limit_bytes <= 64 * SMALL);
	assert_true(st.present_bytes <= st.limit_bytes);
	assert_true(bfs_cache_bound_by_disk(c));
	bfs_cache_close(e);
	bfs_cache_destroy(c);
	umount2(dir, MNT_DETACH);
}

static void a_write_never_evicts_what_is_needed_sooner(void **state)
{
	struct bfs_cache *c =
	    cache_new(test_dir("sooner"), 2 * SMALL, SMALL, BFS_CACHE_NEXT_USE);
	struct bfs_cache_entry *e =
	    entry_new(c, "https://h/s", "\"x\"", 4 * SMALL);

	bfs_cache_next_use(e, 0, SMALL, 5);
	bfs_cache_next_use(e, SMALL, SMALL, 6);
	assert_int_equal(put(e, 0, 2 * SMALL), 0);
	bfs_cache_next_use(e, 2 * SMALL, SMALL, 10);
	assert_int_equal(put(e, 2 * SMALL, SMALL), -ENOBUFS);
	assert_true(bfs_cache_present(e, 0, 2 * SMALL));
	bfs_cache_next_use(e, 2 * SMALL, SMALL, 3);
	assert_int_equal(put(e, 2 * SMALL, SMALL), 0);
	assert_true(bfs_cache_present(e, 0, SMALL));	  /* 5 kept */
	assert_false(bfs_cache_present(e, SMALL, SMALL)); /* 6 went */
	/* once 'now' passes 5, chunk 0's use is stale: it may go */
	bfs_cache_set_now(c, 6);
	bfs_cache_next_use(e, 3 * SMALL, SMALL, 7);
	assert_int_equal(put(e, 3 * SMALL, SMALL), 0);
	assert_false(bfs_cache_present(e, 0, SMALL));
	bfs_cache_close(e);
	bfs_cache_destroy(c);
}

/* Uses told in any order keep the earliest (next_use_sooner). A write for
 * a reader waiting now (write_for) may evict what is needed later, where
 * a write at the chunk's own next use may not, and leaves that use as it
 * was (a later use planned for the chunk still counts). */
static void a_readers_write_makes_room_and_keeps_the_planned_use(void **state)
{
	struct bfs_cache *c =
	    cache_new(test_dir("for"), 2 * SMALL, SMALL, BFS_CACHE_NEXT_USE);
	struct bfs_cache_entry *e =
	    entry_new(c, "https://h/f", "\"x\"", 4 * SMALL);
	uint8_t buf[SMALL];

	bfs_cache_set_now(c, 4);
	bfs_cache_next_use_sooner(e, 0, SMALL, 12);
	bfs_cache_next_use_sooner(e, 0, SMALL, 9); /* the earliest wins */
	bfs_cache_next_use_sooner(e, 0, SMALL, 15);
	bfs_cache_next_use(e, SMALL, SMALL, 20);
	assert_int_equal(put(e, 0, 2 * SMALL), 0);
	bfs_cache_next_use(e, 2 * SMALL, SMALL, 30);
	assert_int_equal(put(e, 2 * SMALL, SMALL), -ENOBUFS);
	obj_fill(buf, 2 * SMALL, SMALL);
	assert_int_equal(bfs_cache_write_for(e, 2 * SMALL, buf, SMALL, 4), 0);
	assert_true(bfs_cache_present(e, 0, SMALL));	  /* 9 kept */
	assert_false(bfs_cache_present(e, SMALL, SMALL)); /* 20 went */
	assert_true(mapped_equal(e, 2 * SMALL, SMALL));
	/* chunk 2 still counts as needed at 30: a use at 25 may push it out,
	 * not chunk 0 (needed at 9) */
	bfs_cache_next_use(e, 3 * SMALL, SMALL, 25);
	assert_int_equal(put(e, 3 * SMALL, SMALL), 0);
	assert_false(bfs_cache_present(e, 2 * SMALL, SMALL));
	assert_true(bfs_cache_present(e, 0, SMALL));
	bfs_cache_close(e);
	bfs_cache_destroy(c);
}

/* Run seq[0..n) of chunk accesses through a cache of 'cap' chunks: a miss
 * writes the chunk; each access tells its next use (NEXT_USE) and counts
 * as a use (pin). Returns the hits; *victims_of_3: present after step 3. */
static uint64_t run_seq(const char *name, enum bfs_cache_policy p,
			const uint64_t *seq, size_t n, uint64_t universe,
			uint64_t cap, bool *present_after3)
{
	struct bfs_cache *c = cache_new(test_dir(name), cap * SMALL, SMALL, p);
	struct bfs_cache_entry *e =
	    entry_new(c, "https://h/seq", "\"x\"", universe * SMALL);
	uint64_t hits = 0;

	for (size_t i = 0; i < n; i++) {
		uint64_t x = seq[i], nx = BFS_CACHE_NEVER;

		for (size_t j = i + 1; j < n && nx == BFS_CACHE_NEVER; j++)
			if (seq[j] == x)
				nx = j;
		bfs_cache_set_now(c, i);
		if (bfs_cache_present(e, x * SMALL, SMALL)) {
			hits++;
		} else {
			bfs_cache_next_use(e, x * SMALL, SMALL, i);
			assert_int_equal(put(e, x * SMALL, SMALL), 0);
		}
		bfs_cache_next_use(e, x * SMALL, SMALL, nx);
		assert_true(bfs_cache_pin(e, x * SMALL, SMALL) == 1);
		bfs_cache_unpin(e, x * SMALL, SMALL);
		if (i == 3 && present_after3)
			for (uint64_t y = 0; y < universe; y++)
				present_after3[y] =
				    bfs_cache_present(e, y * SMALL, SMALL);
	}
	bfs_cache_close(e);
	bfs_cache_destroy(c);
	return hits;
}

static void next_use_and_lru_choose_different_victims(void **state)
{
	/* A B A C B, room for 2: at C, LRU drops B (used before A), next
	 * use drops A (not needed again) and so hits B. */
	const uint64_t seq[] = {0, 1, 0, 2, 1};
	bool lru[3], nu[3];
	uint64_t h;

	assert_int_equal(run_seq("v-lru", BFS_CACHE_LRU, seq, 5, 3, 2, lru), 1);
	assert_true(lru[0] && !lru[1] && lru[2]);
	assert_int_equal(run_seq("v-nu", BFS_CACHE_NEXT_USE, seq, 5, 3, 2, nu),
			 2);
	assert_true(!nu[0] && nu[1] && nu[2]);
	assert_int_equal(bfs_cache_simulate(seq, 5, 3, 2, BFS_CACHE_LRU, &h),
			 0);
	assert_int_equal(h, 1);
	assert_int_equal(
	    bfs_cache_simulate(seq, 5, 3, 2, BFS_CACHE_NEXT_USE, &h), 0);
	assert_int_equal(h, 2);
}

static void next_use_reaches_beladys_bound_and_beats_lru(void **state)
{
	enum { U = 64, EPOCHS = 4, CAP = 16 };
	uint64_t seq[U * EPOCHS], lru, nu, sim_lru, sim_nu;
	unsigned r = 12345;

	/* shuffled epochs, as a sampler reads them */
	for (int ep = 0; ep < EPOCHS; ep++) {
		uint64_t *p = seq + ep * U;

		for (uint64_t i = 0; i < U; i++)
			p[i] = i;
		for (uint64_t i = U - 1; i > 0; i--) {
			uint64_t j = (uint64_t)rand_r(&r) % (i + 1), t = p[i];

			p[i] = p[j];
			p[j] = t;
		}
	}
	lru = run_seq("r-lru", BFS_CACHE_LRU, seq, U * EPOCHS, U, CAP, NULL);
	nu = run_seq("r-nu", BFS_CACHE_NEXT_USE, seq, U * EPOCHS, U, CAP, NULL);
	assert_int_equal(bfs_cache_simulate(seq, U * EPOCHS, U, CAP,
					    BFS_CACHE_LRU, &sim_lru),
			 0);
	assert_int_equal(bfs_cache_simulate(seq, U * EPOCHS, U, CAP,
					    BFS_CACHE_NEXT_USE, &sim_nu),
			 0);
	print_message("hits of %d: next use %llu (Belady %llu), LRU %llu "
		      "(simulated %llu)\n",
		      U * EPOCHS, (unsigned long long)nu,
		      (unsigned long long)sim_nu, (unsigned long long)lru,
		      (unsigned long long)sim_lru);
	assert_int_equal(nu, sim_nu);
	assert_int_equal(lru, sim_lru);
	assert_true(nu > lru);
}

/* A planned use that passes leaves the chunk's following one: read at 5
 * and planned again at 9, chunk 0 is kept after 5 over chunk 1 (needed
 * at 20), where one next use (stale after 5) made it the first to go. */
static void a_passed_use_leaves_the_following_planned_one(void **state)
{
	struct bfs_cache *c =
	    cache_new(test_dir("plan"), 2 * SMALL, SMALL, BFS_CACHE_NEXT_USE);
	struct bfs_cache_entry *e =
	    entry_new(c, "https://h/p", "\"x\"", 4 * SMALL);

	assert_int_equal(bfs_cache_plan(e, 0, SMALL, 9), 0); /* any order */
	assert_int_equal(bfs_cache_plan(e, 0, SMALL, 5), 0);
	assert_int_equal(bfs_cache_plan(e, 0, SMALL, 5), 0); /* once */
	assert_int_equal(bfs_cache_plan(e, SMALL, SMALL, 20), 0);
	assert_int_equal(bfs_cache_plan_uses(e), 3);
	assert_int_equal(put(e, 0, 2 * SMALL), 0);
	bfs_cache_set_now(c, 6); /* chunk 0 was read at 5 */
	assert_int_equal(bfs_cache_plan(e, 2 * SMALL, SMALL, 7), 0);
	assert_int_equal(put(e, 2 * SMALL, SMALL), 0);
	assert_true(bfs_cache_present(e, 0, SMALL));	  /* needed at 9 */
	assert_false(bfs_cache_present(e, SMALL, SMALL)); /* at 20: went */
	assert_int_equal(bfs_cache_plan_uses(e), 3);	  /* 5 dropped */
	/* past 9 nothing more is planned for chunk 0: it goes first */
	bfs_cache_set_now(c, 10);
	assert_int_equal(bfs_cache_plan(e, 3 * SMALL, SMALL, 11), 0);
	assert_int_equal(put(e, 3 * SMALL, SMALL), 0);
	assert_false(bfs_cache_present(e, 0, SMALL));
	assert_int_equal(bfs_cache_plan(e, 4 * SMALL, SMALL, 11), -EINVAL);
	bfs_cache_close(e);
	bfs_cache_destroy(c);
}

/* A gather's write: bytes [off, off+len) needed at 'pos' (now). */
static int gather_put(struct bfs_cache_entry *e, uint64_t off, uint64_t len,
		      uint64_t pos)
{
	uint8_t *buf = malloc(len);
	int rc;

	obj_fill(buf, off, len);
	rc = bfs_cache_write_for(e, off, buf, len, pos);
	free(buf);
	return rc;
}

/* A known order read batch by batch, each batch's chunks pinned, the
 * absent ones written as a gather does (needed now), then unpinned, the cache
 * told batch b's uses at b: with the uses of the next 'horizon' batches planned
 * (bfs_cache_plan), or only those of the next 'horizon' batches told as
 * next uses (bfs_cache_next_use_sooner: what the read-ahead's window
 * told before plans). seq[0..n) is the batches' chunks, at[b] where
 * batch b starts (at[nb] = n). Returns the hits. */
static uint64_t run_batches(const char *name, const uint64_t *seq,
			    const size_t *at, size_t nb, uint64_t universe,
			    uint64_t cap, size_t horizon, bool plan)
{
	struct bfs_cache *c =
	    cache_new(test_dir(name), cap * SMALL, SMALL, BFS_CACHE_NEXT_USE);
	struct bfs_cache_entry *e =
	    entry_new(c, "https://h/b", "\"x\"", universe * SMALL);
	uint64_t hits = 0;
	size_t told = 0; /* batches told */

	for (size_t b = 0; b < nb; b++) {
		bfs_cache_set_now(c, b);
		for (; told < nb && told <= b + horizon; told++)
			for (size_t i = at[told]; i < at[told + 1]; i++)
				if (plan)
					assert_int_equal(
					    bfs_cache_plan(e, seq[i] * SMALL,
							   SMALL, told),
					    0);
				else
					bfs_cache_next_use_sooner(
					    e, seq[i] * SMALL, SMALL, told);
		for (size_t i = at[b]; i < at[b + 1]; i++)
			hits += bfs_cache_pin(e, seq[i] * SMALL, SMALL) == 1;
		for (size_t i = at[b]; i < at[b + 1]; i++)
			if (!bfs_cache_present(e, seq[i] * SMALL, SMALL))
				assert_int_equal(
				    gather_put(e, seq[i] * SMALL, SMALL, b), 0);
		for (size_t i = at[b]; i < at[b + 1]; i++)
			bfs_cache_unpin(e, seq[i] * SMALL, SMALL);
	}
	bfs_cache_close(e);
	bfs_cache_destroy(c);
	return hits;
}

static int chunk_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Shuffled epochs of rows, ROWS a chunk, in batches of BATCH rows, a
 * cache of a quarter of the object: planning the uses of the next batches
 * (a few times the cache's chunks) reaches at least 0.9 of Belady's hits
 * on the same chunk sequence (bfs_cache_simulate, knowing all of it);
 * telling only each chunk's earliest use within the same batches (one
 * next use, stale once it passes) stays well below. */
static void planned_uses_reach_beladys_hits_batch_by_batch(void **state)
{
	enum { U = 512, ROWS = 8, N = U * ROWS, BATCH = 32, EPOCHS = 3 };
	enum { NB = EPOCHS * (N / BATCH), CAP = U / 4 };
	uint64_t *seq = malloc((size_t)EPOCHS * N * sizeof(*seq));
	size_t at[NB + 1], n = 0, nb = 0;
	uint64_t perm[N], plan, sooner, belady;
	size_t horizon;
	unsigned r = 4242;

	assert_non_null(seq);
	for (int ep = 0; ep < EPOCHS; ep++) {
		for (uint64_t i = 0; i < N; i++)
			perm[i] = i;
		for (uint64_t i = N - 1; i > 0; i--) {
			uint64_t j = (uint64_t)rand_r(&r) % (i + 1),
				 t = perm[i];

			perm[i] = perm[j];
			perm[j] = t;
		}
		for (uint64_t k = 0; k < N; k += BATCH) {
			uint64_t b[BATCH];

			at[nb++] = n;
			for (uint64_t i = 0; i < BATCH; i++)
				b[i] = perm[k + i] / ROWS;
			qsort(b, BATCH, sizeof(*b), chunk_cmp);
			for (size_t i = 0; i < BATCH; i++) /* each chunk once */
				if (i == 0 || b[i] != b[i - 1])
					seq[n++] = b[i];
		}
	}
	at[nb] = n;
	/* about 8 times the cache's chunks of uses ahead */
	horizon = (size_t)(8 * CAP / ((double)n / (double)nb));
	assert_int_equal(
	    bfs_cache_simulate(seq, n, U, CAP, BFS_CACHE_NEXT_USE, &belady), 0);
	plan = run_batches("h-plan", seq, at, nb, U, CAP, horizon, true);
	sooner = run_batches("h-sooner", seq, at, nb, U, CAP, horizon, false);
	print_message("hits of %zu: planned %zu batches ahead %llu, told "
		      "once %llu, Belady %llu\n",
		      n, horizon, (unsigned long long)plan,
		      (unsigned long long)sooner, (unsigned long long)belady);
	assert_true(plan * 10 >= belady * 9);
	assert_true(sooner * 10 < belady * 9);
	free(seq);
}

/* fork: run fn(arg) in a child that exits with its result (no cmocka in
 * the child), dies with the test and within a minute in any case (a
 * failed assertion of the parent must not leave it waiting). */
static pid_t child(int (*fn)(void *), void *arg)
{
	pid_t p = fork();

	assert_true(p >= 0);
	if (p == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		alarm(60);
		_exit(fn(arg));
	}
	return p;
}

static int child_status(pid_t p)
{
	int st;

	assert_int_equal(waitpid(p, &st, 0), p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

struct writer {
	const char *dir;
	uint64_t chunks;
	int order; /* 0 forward, 1 backward, 2 shuffled */
	int go_fd; /* read a byte before starting */
};

static int write_all(void *arg)
{
	struct writer *w = arg;
	struct bfs_cache_opts o = {.chunk_size = SMALL};
	struct bfs_cache_key k =
	    key_of("https://h/shared", "\"s\"", w->chunks * SMALL);
	struct bfs_cache *c;
	struct bfs_cache_entry *e;
	unsigned r = (unsigned)getpid();
	char b;

	if (bfs_cache_create(&c, w->dir, &o, NULL) < 0 ||
	    bfs_cache_open(c, &k, &e, NULL) < 0 || read(w->go_fd, &b, 1) != 1)
		return 1;
	for (uint64_t i = 0; i < w->chunks; i++) {
		uint64_t x = w->order == 0   ? i
			     : w->order == 1 ? w->chunks - 1 - i
					     : (uint64_t)rand_r(&r) % w->chunks;

		if (put(e, x * SMALL, SMALL) < 0)
			return 2;
	}
	bfs_cache_close(e);
	bfs_cache_destroy(c);
	return 0;
}

static void two_processes_writing_one_entry_agree(void **state)
{
	const char *dir = test_dir("shared");
	struct writer w[3] = {
	    {dir, 256, 0, -1}, {dir, 256, 1, -1}, {dir, 256, 2, -1}};
	int go[2];
	pid_t p[3];
	struct bfs_cache *c;
	struct bfs_cache_entry *e;

	assert_int_equal(pipe(go), 0);
	for (int i = 0; i < 3; i++) {
		w[i].go_fd = go[0];
		p[i] = child(write_all, &w[i]);
	}
	assert_int_equal(write(go[1], "xxx", 3), 3);
	for (int i = 0; i < 3; i++)
		assert_int_equal(child_status(p[i]), 0);
	close(go[0]);
	close(go[1]);
	c = cache_new(dir, 0, SMALL, 0);
	e = entry_new(c, "https://h/shared", "\"s\"", 256 * SMALL);
	assert_true(bfs_cache_present(e, 0, 256 * SMALL));
	assert_true(mapped_equal(e, 0, 256 * SMALL));
	bfs_cache_close(e);
	bfs_cache_destroy(c);
}

struct pinner {
	const char *dir;
	int ready_fd, go_fd;
};

/* Pin chunks 0..3 of the shared object, say so, wait, unpin. */
static int pin_and_hold(void *arg)
{
	struct pinner *pn = arg;
	struct bfs_cache_opts o = {.chunk_size = SMALL};
	struct bfs_cache_key k = key_of("https://h/pin", "\"p\"", 8 * SMALL);
	struct bfs_cache *c;
	struct bfs_cache_entry *e;
	char b;

	if (bfs_cache_create(&c, pn->dir, &o, NULL) < 0 ||
	    bfs_cache_open(c, &k, &e, NULL) < 0 ||
	    bfs_cache_pin(e, 0, 4 * SMALL) != 1 ||
	    write(pn->ready_fd, "r", 1) != 1 || read(pn->go_fd, &b, 1) != 1)
		return 1;
	bfs_cache_unpin(e, 0, 4 * SMALL);
	bfs_cache_close(e);
	bfs_cache_destroy(c);
	return 0;
}

static void another_process_pin_keeps_its_chunks(void **state)
{
	const char *dir = test_dir("xpin");
	struct bfs_cache *c = cache_new(dir, 0, SMALL, 0);
	struct bfs_cache_entry *e =
	    entry_new(c, "https://h/pin", "\"p\"", 8 * SMALL);
	int ready[2], go[2];
	struct pinner pn = {.dir = dir};
	pid_t p;
	char b;

	assert_int_equal(put(e, 0, 8 * SMALL), 0);
	assert_int_equal(pipe(ready), 0);
	assert_int_equal(pipe(go), 0);
	pn.ready_fd = ready[1];
	pn.go_fd = go[0];
	p = child(pin_and_hold, &pn);
	assert_int_equal(read(ready[0], &b, 1), 1);
	assert_int_equal(bfs_cache_evict(e, 0, 8 * SMALL), 4 * SMALL);
	assert_true(bfs_cache_present(e, 0, 4 * SMALL));
	assert_true(mapped_equal(e, 0, 4 * SMALL));
	assert_int_equal(write(go[1], "g", 1), 1);
	assert_int_equal(child_status(p), 0);
	assert_int_equal(bfs_cache_evict(e, 0, 8 * SMALL), 4 * SMALL);
	assert_false(bfs_cache_present(e, 0, 1));
	for (int i = 0; i < 2; i++) {
		close(ready[i]);
		close(go[i]);
	}
	bfs_cache_close(e);
	bfs_cache_destroy(c);
}

/* Write chunk 1 of the pinned object after a moment. */
static int write_chunk1_later(void *arg)
{
	struct bfs_cache_opts o = {.chunk_size = SMALL};
	struct bfs_cache_key k = key_of("https://h/pin", "\"p\"", 8 * SMALL);
	struct bfs_cache *c;
	struct bfs_cache_entry *e;

	if (bfs_cache_create(&c, arg, &o, NULL) < 0 ||
	    bfs_cache_open(c, &k, &e, NULL) < 0)
		return 1;
	usleep(30000);
	return put(e, SMALL, SMALL) < 0 ? 2 : 0;
}

static void a_writer_in_another_process_wakes_the_waiter(void **state)
{
	const char *dir = test_dir("xwake");
	struct bfs_cache *c = cache_new(dir, 0, SMALL, 0);
	struct bfs_cache_entry *e =
	    entry_new(c, "https://h/pin", "\"p\"", 8 * SMALL);
	pid_t p;

	assert_int_equal(bfs_cache_pin(e, SMALL, SMALL), 0);
	p = child(write_chunk1_later, (void *)dir);
	assert_int_equal(
	    bfs_cache_wait(e, SMALL, SMALL, now_ns() + 60000000000u), 0);
	assert_true(mapped_equal(e, SMALL, SMALL));
	bfs_cache_unpin(e, SMALL, SMALL);
	assert_int_equal(child_status(p), 0);
	bfs_cache_close(e);
	bfs_cache_destroy(c);
}

static void die(void *arg, uint64_t off, uint64_t len)
{
	raise(SIGKILL);
}

struct crasher {
	const char *dir;
	const char *boot;
	int what;     /* 0 die between data and bit, 1 die holding a pin,
			 2 write and evict until killed, 3 exit without close */
	int ready_fd; /* 2: a byte written once the entry is open */
};

static int crash(void *arg)
{
	struct crasher *cr = arg;
	struct bfs_cache_opts o = {.chunk_size = SMALL, .boot_id = cr->boot};
	struct bfs_cache_key k = key_of("https://h/crash", "\"c\"", 16 * SMALL);
	struct bfs_cache *c;
	struct bfs_cache_entry *e;
	unsigned r = (unsigned)getpid();

	if (cr->what == 0) {
		o.after_data = die;
	}
	if (bfs_cache_create(&c, cr->dir, &o, NULL) < 0 ||
	    bfs_cache_open(c, &k, &e, NULL) < 0)
		return 1;
	switch (cr->what) {
	case 0:
		put(e, 3 * SMALL, SMALL);
		return 2; /* not reached */
	case 1:
		if (put(e, 5 * SMALL, SMALL) < 0 ||
		    bfs_cache_pin(e, 5 * SMALL, SMALL) != 1)
			return 3;
		raise(SIGKILL);
		return 4;
	case 2:
		if (write(cr->ready_fd, "r", 1) != 1)
			return 6;
		for (;;) {
			uint64_t x = (uint64_t)rand_r(&r) % 16;

			if (rand_r(&r) % 3)
				put(e, x * SMALL, SMALL);
			else
				bfs_cache_evict(e, x * SMALL, SMALL);
		}
	default:
		if (put(e, 0, 4 * SMALL) < 0)
			return 5;
		return 0; /* no close: the entry stays DIRTY */
	}
}

static void a_crash_never_leaves_a_chunk_present_without_its_bytes(void **state)
{
	const char *dir = test_dir("crash");
	struct crasher cr = {.dir = dir};
	struct bfs_cache *c;
	struct bfs_cache_entry *e;
	unsigned r = 99;
	int ready[2];

	/* killed after the data, before the bit: absent after restart */
	cr.what = 0;
	assert_int_equal(child_status(child(crash, &cr)), 128 + SIGKILL);
	c = cache_new(dir, 0, SMALL, 0);
	e = entry_new(c, "https://h/crash", "\"c\"", 16 * SMALL);
	assert_false(bfs_cache_present(e, 3 * SMALL, 1));
	assert_int_equal(put(e, 3 * SMALL, SMALL), 0);
	assert_true(mapped_equal(e, 3 * SMALL, SMALL));
	bfs_cache_close(e);
	bfs_cache_destroy(c);

	/* killed holding a pin: the pin dies with it */
	cr.what = 1;
	assert_int_equal(child_status(child(crash, &cr)), 128 + SIGKILL);
	c = cache_new(dir, 0, SMALL, 0);
	e = entry_new(c, "https://h/crash", "\"c\"", 16 * SMALL);
	assert_int_equal(bfs_cache_evict(e, 5 * SMALL, SMALL), SMALL);
	bfs_cache_close(e);
	bfs_cache_destroy(c);

	/* killed at random points of writes and evictions: every chunk
	 * present holds the object's bytes */
	cr.what = 2;
	assert_int_equal(pipe(ready), 0);
	cr.ready_fd = ready[1];
	for (int i = 0; i < 20; i++) {
		pid_t p = child(crash, &cr);
		char b;

		assert_int_equal(read(ready[0], &b, 1), 1);
		usleep((unsigned)(rand_r(&r) % 5000));
		kill(p, SIGKILL);
		assert_int_equal(child_status(p), 128 + SIGKILL);
		c = cache_new(dir, 0, SMALL, 0);
		e = entry_new(c, "https://h/crash", "\"c\"", 16 * SMALL);
		for (uint64_t x = 0; x < 16; x++)
			if (bfs_cache_present(e, x * SMALL, SMALL))
				assert_true(mapped_equal(e, x * SMALL, SMALL));
		bfs_cache_close(e);
		bfs_cache_destroy(c);
	}
	close(ready[0]);
	close(ready[1]);
}

static void an_entry_left_unsynced_is_dropped_after_a_reboot(void **state)
{
	const char *dir = test_dir("reboot");
	struct crasher cr = {.dir = dir, .boot = "boot-A", .what = 3};
	struct bfs_cache_opts o = {.chunk_size = SMALL};
	struct bfs_cache_key k = key_of("https://h/crash", "\"c\"", 16 * SMALL);
	struct bfs_cache *c;
	struct bfs_cache_entry *e;

	/* a process that died in this boot: what it wrote is there */
	assert_int_equal(child_status(child(crash, &cr)), 0);
	o.boot_id = "boot-A";
	assert_int_equal(bfs_cache_create(&c, dir, &o, NULL), 0);
	assert_int_equal(bfs_cache_open(c, &k, &e, NULL), 0);
	assert_true(bfs_cache_present(e, 0, 4 * SMALL));
	bfs_cache_close(e); /* synced: CLEAN */
	bfs_cache_destroy(c);
	/* closed cleanly: kept across a reboot */
	o.boot_id = "boot-B";
	assert_int_equal(bfs_cache_create(&c, dir, &o, NULL), 0);
	assert_int_equal(bfs_cache_open(c, &k, &e, NULL), 0);
	assert_true(bfs_cache_present(e, 0, 4 * SMALL));
	bfs_cache_close(e);
	bfs_cache_destroy(c);
	/* left DIRTY, then a reboot: dropped, holes only */
	assert_int_equal(child_status(child(crash, &cr)), 0);
	o.boot_id = "boot-C";
	assert_int_equal(bfs_cache_create(&c, dir, &o, NULL), 0);
	assert_int_equal(bfs_cache_open(c, &k, &e, NULL), 0);
	assert_false(bfs_cache_present(e, 0, SMALL));
	assert_true(allocated(e) == 0);
	bfs_cache_close(e);
	bfs_cache_destroy(c);
}

static int open_and_exit(void *arg)
{
	struct bfs_cache_entry **out = arg;
	struct bfs_cache_opts o = {.chunk_size = SMALL};
	struct bfs_cache_key k = key_of("https://h/ev", "\"e\"", 4 * SMALL);
	struct bfs_cache *c;

	if (bfs_cache_create(&c, test_dir("evictor"), &o, NULL) < 0 ||
	    bfs_cache_open(c, &k, out, NULL) < 0)
		return 255;
	return (int)(*out)->slot; /* exits holding it: dies */
}

static void a_dead_evictor_does_not_block_writers(void **state)
{
	struct bfs_cache *c = cache_new(test_dir("evictor"), 0, SMALL, 0);
	struct bfs_cache_entry *e =
	    entry_new(c, "https://h/ev", "\"e\"", 4 * SMALL);
	struct bfs_cache_entry *ce;
	int slot = child_status(child(open_and_exit, &ce));
	struct later l = {.off = 2 * SMALL, .len = SMALL};
	struct timespec dl;
	pthread_t t;

	assert_true(slot >= 0 && slot < BFS_CACHE_USERS_MAX);
	assert_int_not_equal(slot, (int)e->slot);
	/* as if it died punching chunk 2: a write goes on (within 30 s) */
	e->words[2] = W_EVICTING | ((uint32_t)slot << W_SLOT_SHIFT);
	l.e = e;
	pthread_create(&t, NULL, write_later, &l);
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 30;
	assert_int_equal(pthread_timedjoin_np(t, NULL, &dl), 0);
	assert_true(bfs_cache_present(e, 2 * SMALL, SMALL));
	assert_int_equal(e->words[2], W_PRESENT);
	bfs_cache_close(e);
	bfs_cache_destroy(c);
}

/* Every byte of every file in dir, searched for s. */
static bool dir_contains(const char *dir, const char *s)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	bool found = false;

	assert_non_null(d);
	while (!found && (de = readdir(d))) {
		char p[1024], buf[1 << 16];
		int fd;
		ssize_t n;

		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		fd = open(p, O_RDONLY);
		if (fd < 0)
			continue;
		while (!found && (n = read(fd, buf, sizeof(buf) - 1)) > 0)
			found = memmem(buf, (size_t)n, s, strlen(s)) != NULL;
		close(fd);
	}
	closedir(d);
	return found;
}

static void no_secret_of_a_url_reaches_the_metadata(void **state)
{
	const char *dir = test_dir("secret");
	struct bfs_cache *c = cache_new(dir, 0, SMALL, 0);
	struct bfs_cache_entry *e = entry_new(
	    c,
	    "https://alice:hunter2@store.example/bucket/data.pt?"
	    "X-Amz-Credential=AKIDEXAMPLE&X-Amz-Signature=deadbeef#frag",
	    "\"etag\nwith a newline\"", 2 * SMALL);

	assert_int_equal(put(e, 0, SMALL), 0);
	bfs_cache_close(e);
	bfs_cache_destroy(c);
	assert_false(dir_contains(dir, "hunter2"));
	assert_false(dir_contains(dir, "alice"));
	assert_false(dir_contains(dir, "AKIDEXAMPLE"));
	assert_false(dir_contains(dir, "deadbeef"));
	assert_false(dir_contains(dir, "X-Amz"));
	assert_false(dir_contains(dir, "frag"));
	assert_true(dir_contains(dir, "url https://store.example/bucket/"
				      "data.pt\n"));
	/* one line per value: the server's newline is escaped */
	assert_true(dir_contains(dir, "etag \"etag\\nwith a newline\"\n"));
	/* and the metadata says what it is */
	assert_true(dir_contains(dir, "batchfs cache entry, format 1\n"));
}

/* The query names the object (hashed, never stored); the parameters
 * that sign a presigned URL do not: one entry across re-signings. */
static void the_query_but_its_signature_is_in_the_key(void **state)
{
	const char *dir = test_dir("query");
	struct bfs_cache *c = cache_new(dir, 0, SMALL, 0);
	struct bfs_cache_entry *a =
	    entry_new(c, "https://h/d.pt?f=one1", "\"e\"", 2 * SMALL);
	struct bfs_cache_entry *b =
	    entry_new(c, "https://h/d.pt?f=two2", "\"e\"", 2 * SMALL);
	struct bfs_cache_entry *p =
	    entry_new(c,
		      "https://h/d.pt?X-Amz-Date=20260101T000000Z&f=one1&"
		      "x-amz-signature=abc&X-Amz-Expires=60#frag",
		      "\"e\"", 2 * SMALL);
	struct bfs_cache_entry *n =
	    entry_new(c, "https://h/d.pt", "\"e\"", 2 * SMALL);
	struct bfs_cache_entry *s = entry_new(
	    c, "https://h/d.pt?X-Amz-Signature=abc&&", "\"e\"", 2 * SMALL);
	struct bfs_cache_key k = {.url = "https://h/d.pt",
				  .query = "f=two2#x",
				  .etag = "\"e\"",
				  .size = 2 * SMALL};
	struct bfs_cache_entry *q;
	struct bfs_error err = {{0}};

	assert_int_equal(bfs_cache_open(c, &k, &q, &err), 0);
	assert_string_not_equal(bfs_cache_name(a), bfs_cache_name(b));
	assert_string_equal(bfs_cache_name(a), bfs_cache_name(p));
	assert_string_equal(bfs_cache_name(b), bfs_cache_name(q));
	assert_string_not_equal(bfs_cache_name(a), bfs_cache_name(n));
	assert_string_equal(bfs_cache_name(n), bfs_cache_name(s));
	assert_true(bfs_cache_query_signing("X-AMZ-SIGNATURE", 15));
	assert_false(bfs_cache_query_signing("X-Amz-Signature2", 16));
	assert_false(bfs_cache_query_signing("versionId", 9));
	assert_int_equal(put(a, 0, SMALL), 0);
	assert_false(bfs_cache_present(b, 0, SMALL));
	/* both stay: neither is the other's old version */
	bfs_cache_close(a);
	bfs_cache_close(p);
	bfs_cache_close(b);
	bfs_cache_close(q);
	a = entry_new(c, "https://h/d.pt?f=one1", "\"e\"", 2 * SMALL);
	assert_true(bfs_cache_present(a, 0, SMALL));
	bfs_cache_close(a);
	bfs_cache_close(n);
	bfs_cache_close(s);
	bfs_cache_destroy(c);
	assert_false(dir_contains(dir, "one1"));
	assert_false(dir_contains(dir, "two2"));
	assert_false(dir_contains(dir, "f="));
	assert_true(dir_contains(dir, "query-sha256 "));
}

static void set_age(const char *dir, const char *name, time_t t)
{
	char p[1024];
	struct timespec ts[2] = {{t, 0}, {t, 0}};

	snprintf(p, sizeof(p), "%s/%s.map", dir, name);
	assert_int_equal(utimensat(AT_FDCWD, p, ts, 0), 0);
}

static void past_the_bound_unused_entries_go_oldest_first(void **state)
{
	const char *dir = test_dir("gc");
	struct bfs_cache *c = cache_new(dir, 0, SMALL, 0), *c2;
	struct bfs_cache_entry *e[4], *held;
	char names[4][65], url[32];

	for (int i = 0; i < 4; i++) {
		snprintf(url, sizeof(url), "https://h/obj%d", i);
		e[i] = entry_new(c, url, "\"x\"", 64 * SMALL);
		assert_int_equal(put(e[i], 0, 64 * SMALL), 0);
		snprintf(names[i], 65, "%s", bfs_cache_name(e[i]));
	}
	/* obj0 stays open in another mount */
	c2 = cache_new(dir, 0, SMALL, 0);
	held = entry_new(c2, "https://h/obj0", "\"x\"", 64 * SMALL);
	for (int i = 0; i < 4; i++)
		bfs_cache_close(e[i]);
	bfs_cache_destroy(c);
	for (int i = 0; i < 4; i++)
		set_age(dir, names[i], 1000000 + i); /* obj0 oldest */
	/* a bound of about two entries: obj1 and obj2 go, obj0 is in use */
	c = cache_new(dir, 2 * 64 * SMALL + 64 * SMALL / 2, SMALL, 0);
	assert_true(file_exists(dir, names[0], "data"));
	assert_false(file_exists(dir, names[1], "data"));
	assert_false(file_exists(dir, names[2], "data"));
	assert_true(file_exists(dir, names[3], "data"));
	bfs_cache_destroy(c);
	bfs_cache_close(held);
	bfs_cache_destroy(c2);
	/* stray files of a crash go too */
	{
		char p[1024];
		int fd;

		snprintf(p, sizeof(p), "%s/%s.meta.tmp", dir, names[3]);
		fd = open(p, O_CREAT | O_WRONLY, 0600);
		assert_true(fd >= 0);
		close(fd);
		c = cache_new(dir, 0, SMALL, 0);
		assert_int_equal(access(p, F_OK), -1);
		bfs_cache_destroy(c);
	}
}

static void options_out_of_range_are_refused(void **state)
{
	struct bfs_cache *c;
	struct bfs_cache_opts o = {.chunk_size = 3000};
	struct bfs_error err = {{0}};

	assert_int_equal(bfs_cache_create(&c, test_dir("opts"), &o, &err),
			 -EINVAL);
	assert_non_null(strstr(err.msg, "power of two"));
	o = (struct bfs_cache_opts){.limit_bytes = 100};
	err.msg[0] = 0;
	assert_int_equal(bfs_cache_create(&c, test_dir("opts"), &o, &err),
			 -EINVAL);
	assert_non_null(strstr(err.msg, test_dir("opts")));
	assert_int_equal(
	    bfs_cache_create(&c, "/proc/no/such/dir", NULL, &err) < 0, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(default_dir_follows_xdg_then_home),
	    cmocka_unit_test(public_url_drops_userinfo_query_fragment),
	    cmocka_unit_test(written_bytes_read_back_through_the_mapping),
	    cmocka_unit_test(a_remount_finds_what_was_fetched),
	    cmocka_unit_test(an_entry_not_ours_alone_is_not_used),
	    cmocka_unit_test(
		another_etag_is_another_entry_and_the_old_one_goes),
	    cmocka_unit_test(missing_ranges_are_merged_absent_chunks),
	    cmocka_unit_test(wait_returns_when_written_failed_or_late),
	    cmocka_unit_test(eviction_punches_holes_but_never_a_pinned_chunk),
	    cmocka_unit_test(the_bound_holds_and_pinned_chunks_refuse_room),
	    cmocka_unit_test(a_write_never_evicts_what_is_needed_sooner),
	    cmocka_unit_test(
		a_full_disk_is_evicted_for_and_the_bound_follows_it),
	    cmocka_unit_test(
		a_readers_write_makes_room_and_keeps_the_planned_use),
	    cmocka_unit_test(next_use_and_lru_choose_different_victims),
	    cmocka_unit_test(next_use_reaches_beladys_bound_and_beats_lru),
	    cmocka_unit_test(a_passed_use_leaves_the_following_planned_one),
	    cmocka_unit_test(planned_uses_reach_beladys_hits_batch_by_batch),
	    cmocka_unit_test(two_processes_writing_one_entry_agree),
	    cmocka_unit_test(another_process_pin_keeps_its_chunks),
	    cmocka_unit_test(a_writer_in_another_process_wakes_the_waiter),
	    cmocka_unit_test(
		a_crash_never_leaves_a_chunk_present_without_its_bytes),
	    cmocka_unit_test(an_entry_left_unsynced_is_dropped_after_a_reboot),
	    cmocka_unit_test(a_dead_evictor_does_not_block_writers),
	    cmocka_unit_test(no_secret_of_a_url_reaches_the_metadata),
	    cmocka_unit_test(the_query_but_its_signature_is_in_the_key),
	    cmocka_unit_test(past_the_bound_unused_entries_go_oldest_first),
	    cmocka_unit_test(options_out_of_range_are_refused),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
