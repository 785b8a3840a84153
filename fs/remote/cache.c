/* fs/remote/cache: the cache directory, its entries and their files (chunks:
 * cache_chunk.c; fs/README.md: remote objects: the cache).
 *
 * Files. An entry is three files in the directory, named by the SHA-256
 * of its key (URL without userinfo and fragment; the query's parameters
 * but those that sign a presigned URL, hashed only; ETag, else
 * Last-Modified; size), in hex:
 *   NAME.data  the object's bytes: sparse, of the object's size
 *   NAME.map   a header page (format, chunk size, size, the key's hash,
 *              the sync state), then a word per chunk (cache_impl.h)
 *   NAME.meta  the key in clear (the public URL, the query's hash, the
 *              validator, the size), for people and for finding a URL's
 *              old versions
 * and DIR/.lock serializes opens, closes and collection between
 * processes (flock, bounded wait).
 *
 * Trust. The directory must be ours alone (dir_check), and so must every
 * file of an entry an earlier run left (open_file: a regular file of
 * ours, not group or world writable, one link, not a symlink): its words
 * say which bytes are there, and those are served. What fails is
 * removed and made anew (O_EXCL), the entry started empty.
 *
 * Users. A process that has an entry open holds a shared flock on its map
 * file, and an OFD lock on one byte past its end (its slot, named in the
 * words it marks evicting, so others can tell a dead evictor). Under the
 * directory lock, an exclusive flock that succeeds proves nobody else has
 * the entry open: the opener then checks and recovers it (pins and
 * evicting marks of dead processes cleared, the bytes present recounted)
 * or starts it afresh (a damaged or foreign header, a data file of
 * another size, files a machine crash may have left behind their words);
 * the collector then may remove it; the closer then syncs it.
 *
 * Crash safety. Within one boot the page cache holds both files: a chunk's
 * data is written (pwrite) before its word says present, so a process
 * killed at any point leaves each chunk present and right, or absent.
 * Across a machine crash the two files may reach the disk in any order,
 * so the first opener marks the entry DIRTY with the boot's id (synced
 * before any write), and the last closer syncs the data, then the words,
 * then marks it CLEAN: an entry found DIRTY from another boot is thrown
 * away (refetched), never trusted. No fdatasync per write: the cost lands
 * once, at the last close.
 *
 * Lock order: cache->lock, then the directory lock. */
#include "fs/remote/cache.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "fs/remote/cache_impl.h"
#include "fs/log.h"
#include "fs/trust.h"

static const char *env_get(char *const envp[], const char *name)
{
	size_t n = strlen(name);

	for (size_t i = 0; envp && envp[i]; i++)
		if (!strncmp(envp[i], name, n) && envp[i][n] == '=')
			return envp[i] + n + 1;
	return NULL;
}

int bfs_cache_default_dir(char *out, size_t len, char *const envp[])
{
	const char *x = env_get(envp, "XDG_CACHE_HOME");
	const char *h = env_get(envp, "HOME");
	int n;

	/* The XDG spec: a relative XDG_CACHE_HOME is invalid, ignored. */
	if (x && x[0] == '/')
		n = snprintf(out, len, "%s/batchfs", x);
	else if (h && h[0] == '/')
		n = snprintf(out, len, "%s/.cache/batchfs", h);
	else
		return -ENOENT;
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int bfs_cache_url_public(char *out, size_t len, const char *url)
{
	const char *p = strstr(url, "://");
	const char *auth = p ? p + 3 : url;
	size_t auth_end = strcspn(auth, "/?#");
	const char *at = memrchr(auth, '@', auth_end);
	size_t head = (size_t)(auth - url), n = 0;

	if (len == 0)
		return -ENAMETOOLONG;
	/* scheme://, then the authority after any userinfo, then the path */
	if (head >= len)
		return -ENAMETOOLONG;
	memcpy(out, url, head);
	n = head;
	for (const char *s = at ? at + 1 : auth; *s && *s != '?' && *s != '#';
	     s++) {
		if (n + 1 >= len)
			return -ENAMETOOLONG;
		out[n++] = *s;
	}
	out[n] = 0;
	return 0;
}

/* Milliseconds of CLOCK_MONOTONIC. */
static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* The directory lock, waiting up to lock_timeout_ms. */
int bfs_cache_dir_lock(struct bfs_cache *c)
{
	uint64_t end = now_ms() + c->o.lock_timeout_ms;

	while (flock(c->lock_fd, LOCK_EX | LOCK_NB) < 0) {
		if (errno != EWOULDBLOCK && errno != EINTR)
			return -errno;
		if (now_ms() >= end)
			return -ETIMEDOUT;
		usleep(5000);
	}
	return 0;
}

void bfs_cache_dir_unlock(struct bfs_cache *c)
{
	flock(c->lock_fd, LOCK_UN);
}

static void read_boot_id(char *out, size_t len, const char *forced)
{
	int fd;
	ssize_t n = 0;

	out[0] = 0;
	if (forced) {
		snprintf(out, len, "%s", forced);
		return;
	}
	fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, out, len - 1);
		close(fd);
	}
	out[n > 0 ? n : 0] = 0;
	out[strcspn(out, "\n")] = 0;
}

/* mkdir -p 'dir', new components mode 0700. */
static int mkdirs(const char *dir)
{
	char p[4096];
	size_t n = strlen(dir);
	struct stat st;

	if (n == 0 || n >= sizeof(p))
		return n ? -ENAMETOOLONG : -ENOENT;
	memcpy(p, dir, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (p[i] != '/' && p[i] != 0)
			continue;
		p[i] = 0;
		if (mkdir(p, 0700) < 0 && errno != EEXIST)
			return -errno;
		p[i] = i < n ? '/' : 0;
	}
	if (stat(dir, &st) < 0)
		return -errno;
	return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

/* The directory c->dir_fd must be ours alone (bfs_trust_dir: our euid's,
 * not group or world writable unless sticky): others could plant entries
 * in it, or replace ours. 0, or -EPERM with what to do. */
static int dir_check(struct bfs_cache *c, struct bfs_error *err)
{
	struct stat st;
	char who[64] = "";
	struct passwd pw, *pp = NULL;
	char pwbuf[1024];

	if (fstat(c->dir_fd, &st) < 0)
		return bfs_error_set(err, -errno, c->dir, BFS_NO_OFFSET, "%s",
				     strerror(errno));
	if (bfs_trust_dir(&st, geteuid(), false))
		return 0;
	if (st.st_uid != geteuid()) {
		if (getpwuid_r(st.st_uid, &pw, pwbuf, sizeof(pwbuf), &pp) ==
			0 &&
		    pp)
			snprintf(who, sizeof(who), " (%s)", pp->pw_name);
		return bfs_error_set(
		    err, -EPERM, c->dir, BFS_NO_OFFSET,
		    "the cache directory is owned by uid %u%s, not by this "
		    "user (uid %u): its entries could be planted; chown it "
		    "to uid %u, or choose another --cache-dir",
		    (unsigned)st.st_uid, who, (unsigned)geteuid(),
		    (unsigned)geteuid());
	}
	return bfs_error_set(err, -EPERM, c->dir, BFS_NO_OFFSET,
			     "the cache directory is writable by its group or "
			     "others "
			     "(mode %04o): its entries could be planted; "
			     "chmod go-w it, or choose another --cache-dir",
			     (unsigned)(st.st_mode & 07777));
}

/* Whether a failed open of an entry's file means that what has its name
 * is not a plain file of ours (a symlink, someone's file, a FIFO without
 * a reader): then it is removed and made anew. */
static bool open_refused(int e)
{
	return e == ELOOP || e == EACCES || e == EPERM || e == ENXIO ||
	       e == ETXTBSY || e == EWOULDBLOCK;
}

/* Open file 'name' of the directory: one an earlier run left, when it is
 * ours alone (bfs_trust_file: only this user could have written it), else
 * a new one, created (O_EXCL) mode 0600; *made says it is new. What has
 * the name and fails the check (a symlink, another's file, a hard link,
 * a group or world writable file) is logged and removed (the directory
 * is ours: we may), then made anew. Returns the descriptor or -errno. */
static int open_file(struct bfs_cache *c, const char *name, bool *made)
{
	struct stat st;

	*made = false;
	for (int tries = 0; tries < 4; tries++) {
		int fd = openat(c->dir_fd, name,
				O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		int e = fd < 0 ? errno : 0;

		if (fd < 0 && e == ENOENT) {
			fd = openat(c->dir_fd, name,
				    O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW |
					O_CLOEXEC,
				    0600);
			if (fd >= 0) {
				*made = true;
				return fd;
			}
			if (errno != EEXIST)
				return -errno;
			continue; /* made meanwhile: check it */
		}
		if (fd < 0 && !open_refused(e))
			return -e;
		if (fd >= 0 && fstat(fd, &st) < 0) {
			e = errno;
			close(fd);
			return -e;
		}
		if (fd >= 0 && bfs_trust_file(&st, geteuid())) {
			if (fcntl(fd, F_SETFL, 0) == 0) /* O_NONBLOCK off */
				return fd;
			e = errno;
			close(fd);
			return -e;
		}
		if (fd >= 0) {
			bfs_log(BFS_LOG_WARN, "cache",
				"%s/%s: not a file of this user's alone "
				"(owner uid %u, mode %04o, %u links): not "
				"used, removed",
				c->dir, name, (unsigned)st.st_uid,
				(unsigned)(st.st_mode & 07777),
				(unsigned)st.st_nlink);
			close(fd);
		} else {
			bfs_log(BFS_LOG_WARN, "cache",
				"%s/%s: cannot be opened as a file of this "
				"user's (%s): not used, removed",
				c->dir, name, strerror(e));
		}
		if (unlinkat(c->dir_fd, name, 0) < 0 && errno != ENOENT)
			return -errno;
	}
	return -EEXIST;
}

/* The bound from the free space of the directory's filesystem
 * (opts.limit_from_free): BFS_CACHE_FREE_SHARE of what is free, plus what
 * the cache's files take already, in whole chunks, at least one. 0 or
 * -errno (fstatvfs). */
static int limit_from_free(struct bfs_cache *c, struct bfs_error *err)
{
	struct statvfs sv;
	uint64_t free_b, held, bound;

	if (fstatvfs(c->dir_fd, &sv) < 0)
		return bfs_error_set(err, -errno, c->dir, BFS_NO_OFFSET,
				     "its free space: %s", strerror(errno));
	free_b = (uint64_t)sv.f_bavail * sv.f_frsize;
	held = bfs_cache_dir_bytes(c);
	bound =
	    free_b / BFS_CACHE_FREE_SHARE_DEN * BFS_CACHE_FREE_SHARE_NUM + held;
	bound &= ~(uint64_t)(c->o.chunk_size - 1);
	c->o.limit_bytes = bound > c->o.chunk_size ? bound : c->o.chunk_size;
	bfs_log(BFS_LOG_DEBUG, "cache",
		"%s: bound %llu bytes: %d/%d of the %llu bytes free on its "
		"filesystem, and the %llu its files take",
		c->dir, (unsigned long long)c->o.limit_bytes,
		BFS_CACHE_FREE_SHARE_NUM, BFS_CACHE_FREE_SHARE_DEN,
		(unsigned long long)free_b, (unsigned long long)held);
	return 0;
}

int bfs_cache_create(struct bfs_cache **out, const char *dir,
		     const struct bfs_cache_opts *o, struct bfs_error *err)
{
	struct bfs_cache *c = calloc(1, sizeof(*c));
	bool made;
	int rc;

	*out = NULL;
	if (!c)
		return -ENOMEM;
	c->dir_fd = c->lock_fd = -1;
	pthread_mutex_init(&c->lock, NULL);
	if (o)
		c->o = *o;
	if (!c->o.chunk_size)
		c->o.chunk_size = BFS_CACHE_CHUNK_DEFAULT;
	if (!c->o.lock_timeout_ms)
		c->o.lock_timeout_ms = 10000;
	if (c->o.chunk_size < BFS_CACHE_CHUNK_MIN ||
	    c->o.chunk_size > BFS_CACHE_CHUNK_MAX ||
	    (c->o.chunk_size & (c->o.chunk_size - 1))) {
		rc = bfs_error_set(err, -EINVAL, dir, BFS_NO_OFFSET,
				   "chunk size %u is not a power of two "
				   "from %u to %u",
				   c->o.chunk_size, BFS_CACHE_CHUNK_MIN,
				   BFS_CACHE_CHUNK_MAX);
		goto err_free;
	}
	if (c->o.limit_bytes && c->o.limit_bytes < c->o.chunk_size) {
		rc = bfs_error_set(err, -EINVAL, dir, BFS_NO_OFFSET,
				   "a bound of %llu bytes holds no chunk "
				   "(%u bytes)",
				   (unsigned long long)c->o.limit_bytes,
				   c->o.chunk_size);
		goto err_free;
	}
	read_boot_id(c->boot_id, sizeof(c->boot_id), c->o.boot_id);
	c->dir = strdup(dir);
	rc = c->dir ? mkdirs(dir) : -ENOMEM;
	if (rc < 0) {
		bfs_error_set(err, rc, dir, BFS_NO_OFFSET, "%s", strerror(-rc));
		goto err_free;
	}
	c->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (c->dir_fd < 0) {
		rc = bfs_error_set(err, -errno, dir, BFS_NO_OFFSET, "%s",
				   errno == ELOOP || errno == ENOTDIR
				       ? "a symbolic link: name the cache "
					 "directory itself (--cache-dir)"
				       : strerror(errno));
		goto err_free;
	}
	rc = dir_check(c, err);
	if (rc < 0)
		goto err_free;
	c->lock_fd = open_file(c, ".lock", &made);
	if (c->lock_fd < 0) {
		rc = bfs_error_set(err, c->lock_fd, dir, BFS_NO_OFFSET,
				   ".lock: %s", strerror(-c->lock_fd));
		goto err_free;
	}
	c->o.limit_from_free = c->o.limit_from_free && !c->o.limit_bytes;
	if (c->o.limit_from_free) {
		rc = limit_from_free(c, err);
		if (rc < 0)
			goto err_free;
	}
	if (!c->o.evict_bytes)
		c->o.evict_bytes = c->o.limit_bytes / 64;
	c->st.limit_bytes = c->o.limit_bytes;
	rc = bfs_cache_gc(c);
	if (rc < 0) {
		bfs_error_set(err, rc, dir, BFS_NO_OFFSET,
			      "collecting old entries: %s", strerror(-rc));
		goto err_free;
	}
	*out = c;
	return 0;
err_free:
	bfs_cache_destroy(c);
	return rc;
}

uint64_t bfs_cache_limit(struct bfs_cache *c)
{
	struct bfs_cache_stats st;

	bfs_cache_stats(c, &st);
	return st.limit_bytes;
}

void bfs_cache_destroy(struct bfs_cache *c)
{
	if (!c)
		return;
	while (c->entries) {
		bfs_log(BFS_LOG_WARN, "cache", "%s still open at the end",
			c->entries->name);
		c->entries->refs = 1;
		bfs_cache_close(c->entries);
	}
	if (c->lock_fd >= 0)
		close(c->lock_fd);
	if (c->dir_fd >= 0)
		close(c->dir_fd);
	pthread_mutex_destroy(&c->lock);
	free(c->dir);
	free(c);
}

bool bfs_cache_query_signing(const char *name, size_t n)
{
	static const char *const signing[] = {
	    "X-Amz-Algorithm",	  "X-Amz-Credential",	  "X-Amz-Date",
	    "X-Amz-Expires",	  "X-Amz-Security-Token", "X-Amz-Signature",
	    "X-Amz-SignedHeaders"};

	for (size_t i = 0; i < sizeof(signing) / sizeof(signing[0]); i++)
		if (strlen(signing[i]) == n &&
		    !strncasecmp(name, signing[i], n))
			return true;
	return false;
}

/* The query string of key k (after the '?', up to '#' or the end), its
 * length into *n; NULL: none. */
static const char *key_query(const struct bfs_cache_key *k, size_t *n)
{
	const char *q = k->query;

	if (!q) {
		q = strpbrk(k->url, "?#");
		q = q && *q == '?' ? q + 1 : NULL;
	}
	if (q)
		*n = strcspn(q, "#");
	return q;
}

/* Feed the parameters of k's query that name the object (in order, each
 * ended by a NUL; empty ones and the signing ones left out) to ctx:
 * whether one was fed, false where none or on a failure (*ok). */
static bool query_feed(EVP_MD_CTX *ctx, const struct bfs_cache_key *k, int *ok)
{
	size_t len = 0, at = 0;
	const char *q = key_query(k, &len);
	bool fed = false;

	while (q && at < len && *ok) {
		size_t n = strcspn(q + at, "&"), name;

		if (at + n > len)
			n = len - at;
		name = strcspn(q + at, "=&");
		if (name > n)
			name = n;
		if (n && !bfs_cache_query_signing(q + at, name)) {
			*ok = EVP_DigestUpdate(ctx, q + at, n) &&
			      EVP_DigestUpdate(ctx, "", 1);
			fed = true;
		}
		at += n + 1;
	}
	return fed;
}

/* The SHA-256 of k's query (what of it names the object), in hex, into
 * out: "" where none. For the metadata (which entries are versions of
 * one object): the query itself is never stored. */
static int query_hash(const struct bfs_cache_key *k, char out[65])
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	uint8_t raw[32];
	unsigned n = 0;
	int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) &&
		 EVP_DigestUpdate(ctx, "batchfs-cache-query 1", 22);
	bool fed = ok && query_feed(ctx, k, &ok);

	ok = ok && EVP_DigestFinal_ex(ctx, raw, &n) && n == 32;
	EVP_MD_CTX_free(ctx);
	out[0] = 0;
	if (!ok)
		return -EIO;
	for (int i = 0; fed && i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", raw[i]);
	return 0;
}

/* The key's hash (hex into name, raw into raw). The hashed bytes are
 * "batchfs-cache-key 2", the public URL, "etag" or "last-modified", the
 * validator and the size in decimal, then the query's parameters that
 * name the object, in order, each ended by a NUL: unambiguous. (Format 1
 * left the query out: two objects told apart by it shared an entry.) */
static int key_hash(const struct bfs_cache_key *k, const char *pub,
		    uint8_t raw[32], char name[65])
{
	bool etag = k->etag && k->etag[0];
	const char *kind = etag ? "etag" : "last-modified";
	const char *val = etag ? k->etag : k->last_modified;
	char size[24];
	const char *parts[] = {"batchfs-cache-key 2", pub, kind, val, size};
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned n = 0;
	int ok;

	snprintf(size, sizeof(size), "%llu", (unsigned long long)k->size);
	ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
	for (size_t i = 0; ok && i < sizeof(parts) / sizeof(parts[0]); i++)
		ok = EVP_DigestUpdate(ctx, parts[i], strlen(parts[i]) + 1);
	if (ok)
		query_feed(ctx, k, &ok);
	ok = ok && EVP_DigestFinal_ex(ctx, raw, &n) && n == 32;
	EVP_MD_CTX_free(ctx);
	if (!ok)
		return -EIO;
	for (int i = 0; i < 32; i++)
		snprintf(name + 2 * i, 3, "%02x", raw[i]);
	return 0;
}

/* Write NAME.meta (through a temporary file and a rename): the key in
 * clear but without secrets, every value escaped to one line. */
static int meta_write(struct bfs_cache_entry *e, const struct bfs_cache_key *k)
{
	struct bfs_cache *c = e->cache;
	bool etag = k->etag && k->etag[0];
	char tmp[96], path[96], val[1024], buf[META_MAX];
	int fd, n, rc = 0;

	bfs_log_escape(val, sizeof(val), etag ? k->etag : k->last_modified);
	n = snprintf(buf, sizeof(buf),
		     "batchfs cache entry, format %d\n"
		     "url %s\n%s%s%s%s %s\nsize %llu\nchunk %u\n",
		     BFS_CACHE_FORMAT, e->url,
		     e->query[0] ? "query-sha256 " : "", e->query,
		     e->query[0] ? "\n" : "", etag ? "etag" : "last-modified",
		     val, (unsigned long long)k->size, e->chunk);
	if (n < 0 || (size_t)n >= sizeof(buf))
		return -ENAMETOOLONG;
	snprintf(tmp, sizeof(tmp), "%s.meta.tmp", e->name);
	snprintf(path, sizeof(path), "%s.meta", e->name);
	unlinkat(c->dir_fd, tmp, 0); /* a crash's */
	fd = openat(c->dir_fd, tmp,
		    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (write(fd, buf, (size_t)n) != n)
		rc = -EIO;
	close(fd);
	if (!rc && renameat(c->dir_fd, tmp, c->dir_fd, path) < 0)
		rc = -errno;
	if (rc)
		unlinkat(c->dir_fd, tmp, 0);
	return rc;
}

static size_t map_len_of(uint64_t nchunks)
{
	uint64_t words = nchunks * sizeof(uint32_t);

	return HDR_PAGE + ((words + HDR_PAGE - 1) & ~(uint64_t)(HDR_PAGE - 1));
}

/* Whether the map file's header (read with pread) describes key 'raw' of
 * 'size' over a data file of that size; sets e's geometry from it. */
static bool header_valid(struct bfs_cache_entry *e, const uint8_t raw[32],
			 uint64_t size)
{
	struct cache_hdr h;
	struct stat ms, ds;

	if (pread(e->map_fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    memcmp(h.magic, HDR_MAGIC, 8) || h.version != BFS_CACHE_FORMAT ||
	    h.chunk < BFS_CACHE_CHUNK_MIN || h.chunk > BFS_CACHE_CHUNK_MAX ||
	    (h.chunk & (h.chunk - 1)) || h.size != size ||
	    h.nchunks != (size + h.chunk - 1) / h.chunk ||
	    memcmp(h.key, raw, 32) || fstat(e->map_fd, &ms) < 0 ||
	    fstat(e->data_fd, &ds) < 0 ||
	    (uint64_t)ms.st_size != map_len_of(h.nchunks) ||
	    (uint64_t)ds.st_size != size)
		return false;
	e->chunk = h.chunk;
	e->nchunks = h.nchunks;
	return true;
}

/* Start the entry afresh (we are its only user): empty files of the
 * right sizes, the header without its magic, then the magic. */
static int entry_init(struct bfs_cache_entry *e, const uint8_t raw[32])
{
	struct cache_hdr h = {.version = BFS_CACHE_FORMAT, .state = HDR_CLEAN};

	e->chunk = e->cache->o.chunk_size;
	e->nchunks = (e->size + e->chunk - 1) / e->chunk;
	h.chunk = e->chunk;
	h.size = e->size;
	h.nchunks = e->nchunks;
	memcpy(h.key, raw, 32);
	if (ftruncate(e->map_fd, 0) < 0 ||
	    ftruncate(e->map_fd, (off_t)map_len_of(e->nchunks)) < 0 ||
	    ftruncate(e->data_fd, 0) < 0 ||
	    ftruncate(e->data_fd, (off_t)e->size) < 0 ||
	    pwrite(e->map_fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    fdatasync(e->map_fd) < 0 || pwrite(e->map_fd, HDR_MAGIC, 8, 0) != 8)
		return -errno ? -errno : -EIO;
	return 0;
}

/* Take a free user slot: an OFD lock on a byte past the map. */
static int slot_take(struct bfs_cache_entry *e)
{
	for (unsigned i = 0; i < BFS_CACHE_USERS_MAX; i++) {
		struct flock fl = {.l_type = F_WRLCK,
				   .l_whence = SEEK_SET,
				   .l_start = SLOT_BASE + i,
				   .l_len = 1};

		if (fcntl(e->map_fd, F_OFD_SETLK, &fl) == 0) {
			e->slot = i;
			return 0;
		}
		if (errno != EAGAIN && errno != EACCES)
			return -errno;
	}
	return -EUSERS;
}

/* The files of entry e opened, checked or started afresh, locked as a
 * user and mapped; called under the directory lock. */
static int entry_attach(struct bfs_cache_entry *e, const uint8_t raw[32],
			struct bfs_error *err)
{
	struct bfs_cache *c = e->cache;
	bool alone, valid, made_map, made_data;
	char path[96];
	int rc;

	snprintf(path, sizeof(path), "%s.map", e->name);
	rc = e->map_fd = open_file(c, path, &made_map);
	if (rc >= 0) {
		snprintf(path, sizeof(path), "%s.data", e->name);
		rc = e->data_fd = open_file(c, path, &made_data);
	}
	if (rc < 0) {
		e->map_fd = e->map_fd < 0 ? -1 : e->map_fd;
		e->data_fd = -1;
		return bfs_error_set(err, rc, c->dir, BFS_NO_OFFSET, "%s: %s",
				     path, strerror(-rc));
	}
	e->made = made_map || made_data;
	alone = flock(e->map_fd, LOCK_EX | LOCK_NB) == 0;
	/* A file made anew holds nothing: the other one's words (or bytes)
	 * are not its. */
	valid = !e->made && header_valid(e, raw, e->size);
	if (alone) {
		struct cache_hdr h;

		if (valid && pread(e->map_fd, &h, sizeof(h), 0) > 0 &&
		    (h.state == HDR_DISCARD ||
		     (h.state == HDR_DIRTY &&
		      (strcmp(h.boot_id, c->boot_id) || !c->boot_id[0])))) {
			bfs_log(BFS_LOG_INFO, "cache",
				"%s: not synced before a reboot or a failed "
				"sync: fetched again",
				e->url);
			valid = false;
		}
		rc = valid ? 0 : entry_init(e, raw);
		if (rc < 0)
			return bfs_error_set(
			    err, rc, e->data_path, BFS_NO_OFFSET, "%s%s",
			    strerror(-rc),
			    rc == -ENOSPC || rc == -EDQUOT
				? ": the cache directory's filesystem is "
				  "full (make room on it, or choose another "
				  "--cache-dir)"
				: "");
	} else if (!valid) {
		return bfs_error_set(err, -EIO, e->data_path, BFS_NO_OFFSET,
				     "cache entry damaged while another "
				     "process has it open");
	}
	/* From exclusive to shared: nobody can take it meanwhile (they need
	 * the directory lock). */
	if (flock(e->map_fd, LOCK_SH) < 0)
		return bfs_error_set(err, -errno, e->data_path, BFS_NO_OFFSET,
				     "locking: %s", strerror(errno));
	rc = slot_take(e);
	if (rc == -EUSERS)
		return bfs_error_set(err, rc, e->data_path, BFS_NO_OFFSET,
				     "open by %d processes already",
				     BFS_CACHE_USERS_MAX);
	if (rc < 0)
		return bfs_error_set(err, rc, e->data_path, BFS_NO_OFFSET,
				     "locking: %s", strerror(-rc));
	e->map_len = map_len_of(e->nchunks);
	e->hdr = mmap(NULL, e->map_len, PROT_READ | PROT_WRITE, MAP_SHARED,
		      e->map_fd, 0);
	if (e->hdr == MAP_FAILED) {
		e->hdr = NULL;
		return bfs_error_set(err, -errno, e->data_path, BFS_NO_OFFSET,
				     "mapping its map file: %s",
				     strerror(errno));
	}
	e->words = (uint32_t *)((char *)e->hdr + HDR_PAGE);
	if (alone) {
		bfs_cache_recover_words(e);
		e->hdr->state = HDR_DIRTY;
		snprintf(e->hdr->boot_id, sizeof(e->hdr->boot_id), "%s",
			 c->boot_id);
		if (msync(e->hdr, HDR_PAGE, MS_SYNC) < 0)
			return bfs_error_set(err, -errno, e->data_path,
					     BFS_NO_OFFSET, "syncing: %s",
					     strerror(errno));
	}
	return 0;
}

static void entry_free(struct bfs_cache_entry *e)
{
	if (e->hdr)
		munmap(e->hdr, e->map_len);
	if (e->data_fd >= 0)
		close(e->data_fd);
	if (e->map_fd >= 0)
		close(e->map_fd); /* drops the flock and the slot */
	bfs_cache_plan_free(e);
	free(e->next1);
	free(e->last);
	free(e->err);
	free(e->data_path);
	free(e->url);
	free(e);
}

static struct bfs_cache_entry *entry_find(struct bfs_cache *c, const char *name)
{
	for (struct bfs_cache_entry *e = c->entries; e; e = e->next_entry)
		if (!strcmp(e->name, name))
			return e;
	return NULL;
}

int bfs_cache_open(struct bfs_cache *c, const struct bfs_cache_key *k,
		   struct bfs_cache_entry **out, struct bfs_error *err)
{
	char pub[4096], esc[4096], name[65], qhash[65];
	uint8_t raw[32];
	struct bfs_cache_entry *e;
	int rc;

	*out = NULL;
	if (!k->url || !k->url[0] ||
	    !((k->etag && k->etag[0]) ||
	      (k->last_modified && k->last_modified[0])))
		return bfs_error_set(err, -EINVAL, c->dir, BFS_NO_OFFSET,
				     "an object without ETag nor "
				     "Last-Modified cannot be cached");
	rc = bfs_cache_url_public(pub, sizeof(pub), k->url);
	if (rc < 0)
		return bfs_error_set(err, rc, c->dir, BFS_NO_OFFSET,
				     "URL too long");
	bfs_log_escape(esc, sizeof(esc), pub);
	rc = key_hash(k, pub, raw, name);
	if (rc == 0)
		rc = query_hash(k, qhash);
	if (rc < 0)
		return bfs_error_set(err, rc, c->dir, BFS_NO_OFFSET,
				     "hashing the key failed");
	pthread_mutex_lock(&c->lock);
	e = entry_find(c, name);
	if (e) {
		e->refs++;
		pthread_mutex_unlock(&c->lock);
		*out = e;
		return 0;
	}
	e = calloc(1, sizeof(*e));
	if (!e) {
		pthread_mutex_unlock(&c->lock);
		return -ENOMEM;
	}
	memcpy(e->name, name, sizeof(name));
	e->cache = c;
	e->refs = 1;
	e->map_fd = e->data_fd = -1;
	pthread_mutex_init(&e->plan_lock, NULL);
	e->size = k->size;
	e->url = strdup(esc);
	memcpy(e->query, qhash, sizeof(qhash));
	if (asprintf(&e->data_path, "%s/%s.data", c->dir, e->name) < 0)
		e->data_path = NULL;
	if (!e->url || !e->data_path) {
		rc = -ENOMEM;
		goto err_free;
	}
	rc = bfs_cache_dir_lock(c);
	if (rc < 0) {
		bfs_error_set(err, rc, c->dir, BFS_NO_OFFSET,
			      "waiting for the cache directory's lock: %s",
			      strerror(-rc));
		goto err_free;
	}
	rc = entry_attach(e, raw, err);
	if (rc == 0) {
		char mp[96];

		snprintf(mp, sizeof(mp), "%s.meta", e->name);
		if (e->made ||
		    faccessat(c->dir_fd, mp, F_OK, AT_SYMLINK_NOFOLLOW) < 0)
			rc = meta_write(e, k);
		if (rc < 0)
			bfs_error_set(err, rc, e->data_path, BFS_NO_OFFSET,
				      "writing its metadata: %s",
				      strerror(-rc));
		futimens(e->map_fd, NULL); /* its age, for collection */
	}
	if (rc == 0)
		bfs_cache_gc_locked(c, e->url, e->query, e->name);
	bfs_cache_dir_unlock(c);
	if (rc < 0)
		goto err_free;
	e->next1 = calloc(e->nchunks ? e->nchunks : 1, sizeof(uint64_t));
	e->last = calloc(e->nchunks ? e->nchunks : 1, sizeof(uint64_t));
	e->err = calloc(e->nchunks ? e->nchunks : 1, 1);
	if (!e->next1 || !e->last || !e->err) {
		rc = -ENOMEM;
		goto err_free;
	}
	for (unsigned s = e->chunk; s > 1; s >>= 1)
		e->shift++;
	e->next_entry = c->entries;
	c->entries = e;
	c->st.entries++;
	pthread_mutex_unlock(&c->lock);
	*out = e;
	return 0;
err_free:
	pthread_mutex_unlock(&c->lock);
	entry_free(e);
	return rc;
}

/* The last user's close: data, then words, then the CLEAN state, each
 * synced before the next is written. */
static void entry_sync(struct bfs_cache_entry *e)
{
	if (fdatasync(e->data_fd) < 0 ||
	    msync(e->hdr, e->map_len, MS_SYNC) < 0) {
		bfs_log(BFS_LOG_WARN, "cache",
			"%s: syncing: %s: its bytes will be fetched again",
			e->url, strerror(errno));
		e->hdr->state = HDR_DISCARD;
	} else {
		e->hdr->state = HDR_CLEAN;
	}
	msync(e->hdr, HDR_PAGE, MS_SYNC);
}

void bfs_cache_close(struct bfs_cache_entry *e)
{
	struct bfs_cache *c;
	struct bfs_cache_entry **p;

	if (!e)
		return;
	c = e->cache;
	pthread_mutex_lock(&c->lock);
	if (--e->refs) {
		pthread_mutex_unlock(&c->lock);
		return;
	}
	for (p = &c->entries; *p != e; p = &(*p)->next_entry)
		;
	*p = e->next_entry;
	c->st.entries--;
	if (bfs_cache_dir_lock(c) == 0) {
		/* Exclusive: we are the last user (nobody can open meanwhile).
		 */
		if (flock(e->map_fd, LOCK_EX | LOCK_NB) == 0)
			entry_sync(e);
		futimens(e->map_fd, NULL);
		entry_free(e);
		bfs_cache_dir_unlock(c);
	} else {
		entry_free(e); /* stays DIRTY: trusted in this boot only */
	}
	pthread_mutex_unlock(&c->lock);
}

int bfs_cache_fd(const struct bfs_cache_entry *e)
{
	return e->data_fd;
}

const char *bfs_cache_path(const struct bfs_cache_entry *e)
{
	return e->data_path;
}

const char *bfs_cache_name(const struct bfs_cache_entry *e)
{
	return e->name;
}

uint64_t bfs_cache_size(const struct bfs_cache_entry *e)
{
	return e->size;
}

uint64_t bfs_cache_present_bytes(const struct bfs_cache_entry *e)
{
	return __atomic_load_n(&e->hdr->present, __ATOMIC_ACQUIRE);
}

uint32_t bfs_cache_chunk(const struct bfs_cache_entry *e)
{
	return e->chunk;
}
