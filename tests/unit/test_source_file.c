/* A source's files (fs/source.h: struct bfs_source_file), without a
 * server:
 * - a local file is mapped whole and read-only, its descriptor and what
 *   it is (device, inode, mtime, mode) recorded, its tensor's data inside
 *   the mapping; ensuring its bytes does nothing; bfs_source_reopen gives
 *   a descriptor of its own on the same file;
 * - a URL is refused where no set of objects is given, named without its
 *   query;
 * - a URL's file is its object's cache file (fs/object), named without
 *   its query, of the object's kind and size: only its structure is
 *   fetched at open and readable in the mapping, a row's page faults
 *   (read(2) of it: EFAULT) until it is ensured, and the whole mapping is
 *   readable once unguarded.
 * The object's requests go to the fake transport of fake_remote.h (as
 * test_object's): a thread of the test answers each with the bytes of a
 * .npy file it holds in memory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/remote/object.h"
#include "fs/remote/remote.h"
#include "fs/remote/remote_impl.h"
#include "fs/source.h"
#include "tests/lib/fixture.h"
#include "tests/lib/npy_header.h"
#include "tests/unit/fake_remote.h"

#define ROWS	  64
#define ROW	  4096u /* bytes of a row of x: uint8 [ROWS, ROW] */
#define CHUNK	  4096u
#define MEM_LIMIT ((uint64_t)64 << 20)
#define URL	  "https://fake.example/d/x.npy"
#define SECRET	  "X-Amz-Signature=S3CR3T"

static struct tf_fixture fx; /* the directory: x.npy, the cache */

/* x.npy: its bytes (header, then rows), the header's length. */
static uint8_t *npy;
static size_t npy_size, npy_hdr;

static uint8_t row_byte(uint64_t i, uint64_t j)
{
	return (uint8_t)(i * 37 + j * 11 + 1);
}

/* ---- the fake transport (fake_remote.h): a thread answers ------------ */

static pthread_t server;

/* Bytes of x.npy, for an answer. */
static void npy_fill(uint8_t *buf, uint64_t off, uint64_t len)
{
	memcpy(buf, npy + off, len);
}

/* The server: each request gets its bytes of x.npy. */
static void *server_main(void *arg)
{
	struct bfs_remote_req *q;

	while ((q = fake_remote_next()))
		fake_remote_complete(q, 0);
	return NULL;
}

/* ---- the files ------------------------------------------------------- */

static int setup(void **state)
{
	int64_t shape[2] = {ROWS, ROW};
	char path[600];
	ssize_t h;
	FILE *f;

	if (tf_setup(&fx, NULL))
		return -1;
	npy = malloc(4096 + (size_t)ROWS * ROW);
	if (!npy)
		return -1;
	h = ta_npy_header((char *)npy, 4096, BFS_DT_UINT8, 2, shape, 64);
	if (h < 0)
		return -1;
	npy_hdr = (size_t)h;
	for (uint64_t i = 0; i < ROWS; i++)
		for (uint64_t j = 0; j < ROW; j++)
			npy[npy_hdr + i * ROW + j] = row_byte(i, j);
	npy_size = npy_hdr + (size_t)ROWS * ROW;
	snprintf(path, sizeof(path), "%s/x.npy", fx.dir);
	f = fopen(path, "wb");
	if (!f || fwrite(npy, 1, npy_size, f) != npy_size || fclose(f))
		return -1;
	fake_remote.size = npy_size;
	fake_remote.fill = npy_fill;
	return pthread_create(&server, NULL, server_main, NULL) ? -1 : 0;
}

static int teardown(void **state)
{
	pthread_mutex_lock(&fake_remote.lock);
	fake_remote.stop = true;
	pthread_cond_broadcast(&fake_remote.cond);
	pthread_mutex_unlock(&fake_remote.lock);
	pthread_join(server, NULL);
	free(npy);
	return tf_teardown(&fx);
}

/* Whether read(2) may read byte p (the kernel says EFAULT where the page
 * is not readable, without a signal). */
static bool readable(const uint8_t *p)
{
	int fds[2];
	char c;
	bool ok;

	assert_int_equal(pipe(fds), 0);
	ok = write(fds[1], p, 1) == 1;
	if (!ok)
		assert_int_equal(errno, EFAULT);
	else
		assert_int_equal(read(fds[0], &c, 1), 1);
	close(fds[0]);
	close(fds[1]);
	return ok;
}

static void a_local_file_is_mapped_whole_with_its_descriptor(void **state)
{
	char path[600];
	struct bfs_source_part part = {path, NULL};
	struct bfs_source *s = NULL;
	struct bfs_error err = {{0}};
	const struct bfs_source_file *f;
	struct stat st, fst, rst;
	int fd;

	snprintf(path, sizeof(path), "%s/x.npy", fx.dir);
	assert_int_equal(stat(path, &st), 0);
	if (bfs_source_open(&s, &part, 1, MEM_LIMIT, &err))
		fail_msg("open %s: %s", path, err.msg);
	assert_string_equal(bfs_source_kind_name(s->kind), "npy");
	assert_int_equal(s->nfiles, 1);
	f = &s->files[0];
	assert_string_equal(f->path, path);
	assert_null(f->remote);
	assert_false(f->guarded);
	assert_true(f->owned);
	assert_int_equal(f->size, npy_size);
	assert_memory_equal(f->map, npy, npy_size);
	/* what the file is */
	assert_true(f->fd >= 0);
	assert_int_equal(fstat(f->fd, &fst), 0);
	assert_int_equal(fst.st_ino, st.st_ino);
	assert_int_equal(f->ino, st.st_ino);
	assert_int_equal(f->dev, st.st_dev);
	assert_int_equal(f->mtime.tv_sec, st.st_mtim.tv_sec);
	assert_int_equal(f->mtime.tv_nsec, st.st_mtim.tv_nsec);
	assert_int_equal(f->mode, st.st_mode & 07777);
	assert_int_equal(f->uid, st.st_uid);
	/* its tensor over the mapping */
	assert_int_equal(s->ntensors, 1);
	assert_string_equal(s->tensors[0].name, "x");
	assert_int_equal(s->tensors[0].file, 0);
	assert_ptr_equal(s->tensors[0].data, f->map + npy_hdr);
	assert_int_equal(s->tensors[0].data_bytes, (uint64_t)ROWS * ROW);
	assert_int_equal(s->samples, ROWS);
	/* nothing to ensure of a local file */
	assert_int_equal(bfs_source_ensure(s, 0, 0, npy_size, &err), 0);
	/* a descriptor of its own on the same file */
	fd = bfs_source_reopen(f->fd, 0);
	assert_true(fd >= 0);
	assert_true(fd != f->fd);
	assert_int_equal(fstat(fd, &rst), 0);
	assert_int_equal(rst.st_ino, st.st_ino);
	assert_int_equal(rst.st_dev, st.st_dev);
	close(fd);
	assert_int_equal(bfs_source_reopen(-1, 0), -1);
	bfs_source_close(s);
}

static void a_url_is_refused_without_a_set_of_objects(void **state)
{
	struct bfs_source_part part = {URL "?" SECRET, NULL};
	struct bfs_source *s = NULL;
	struct bfs_error err = {{0}};

	assert_int_equal(bfs_source_open(&s, &part, 1, MEM_LIMIT, &err),
			 -EINVAL);
	assert_null(s);
	assert_non_null(strstr(err.msg, URL));
	assert_non_null(strstr(err.msg, "only batchfs mount reads those"));
	assert_null(strstr(err.msg, "S3CR3T"));
}

static void
a_url_file_is_its_objects_cache_file_guarded_but_its_structure(void **state)
{
	char cache[600];
	struct bfs_objects_opts oo = {.cache_dir = cache, .chunk = CHUNK};
	struct bfs_source_part part = {URL "?" SECRET, NULL};
	struct bfs_objects *os = NULL;
	struct bfs_source *s = NULL;
	struct bfs_error err = {{0}};
	const struct bfs_source_file *f;
	const uint64_t row = 20, at = npy_hdr + row * ROW;
	struct stat fst, ost;

	snprintf(cache, sizeof(cache), "%s/cache", fx.dir);
	if (bfs_objects_create(&os, &oo, &err))
		fail_msg("bfs_objects_create: %s", err.msg);
	if (bfs_source_open_in(&s, &part, 1, MEM_LIMIT, os, &err))
		fail_msg("open %s: %s", URL, err.msg);
	assert_string_equal(bfs_source_kind_name(s->kind), "npy");
	assert_string_equal(s->path, URL);
	assert_int_equal(s->nfiles, 1);
	f = &s->files[0];
	assert_string_equal(f->path, URL); /* no query */
	assert_non_null(f->remote);
	assert_string_equal(bfs_object_name(f->remote), URL);
	assert_int_equal(f->size, npy_size);
	assert_int_equal(bfs_object_size(f->remote), npy_size);
	/* its descriptor: the cache file's, one of its own */
	assert_true(f->fd >= 0);
	assert_true(f->fd != bfs_object_fd(f->remote));
	assert_int_equal(fstat(f->fd, &fst), 0);
	assert_int_equal(fstat(bfs_object_fd(f->remote), &ost), 0);
	assert_int_equal(fst.st_ino, ost.st_ino);
	assert_int_equal(fst.st_dev, ost.st_dev);
	assert_int_equal(fst.st_size, npy_size);
	assert_string_equal(s->tensors[0].name, "x");
	assert_ptr_equal(s->tensors[0].data, f->map + npy_hdr);
	assert_int_equal(s->samples, ROWS);
	/* only the structure was fetched, and is readable */
	pthread_mutex_lock(&fake_remote.lock);
	assert_true(fake_remote.nsent >= 1);
	for (size_t i = 0; i < fake_remote.nsent && i < FAKE_REMOTE_MAX; i++)
		assert_true(fake_remote.sent[i].off + fake_remote.sent[i].len <=
			    CHUNK);
	pthread_mutex_unlock(&fake_remote.lock);
	assert_true(f->guarded);
	assert_true(readable(f->map));
	assert_memory_equal(f->map, npy, npy_hdr);
	/* a row's page faults until it is ensured */
	assert_false(readable(f->map + at));
	assert_int_equal(bfs_source_ensure(s, 0, at, ROW, &err), 0);
	assert_true(readable(f->map + at));
	assert_memory_equal(f->map + at, npy + at, ROW);
	/* unguarded: the whole mapping readable (holes read as zeros) */
	assert_false(readable(f->map + npy_size - 1));
	bfs_source_unguard(s);
	assert_false(f->guarded);
	assert_true(readable(f->map + npy_size - 1));
	bfs_source_close(s);
	bfs_objects_destroy(os);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(a_local_file_is_mapped_whole_with_its_descriptor),
	    cmocka_unit_test(a_url_is_refused_without_a_set_of_objects),
	    cmocka_unit_test(
		a_url_file_is_its_objects_cache_file_guarded_but_its_structure),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
