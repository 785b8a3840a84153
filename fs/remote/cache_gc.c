/* fs/remote/cache: collecting the cache directory's garbage (the directory and
 * entries: cache.c; fs/README.md: remote objects: the cache).
 *
 * Under the directory lock (no process can open or close an entry
 * meanwhile), an entry is unused when an exclusive flock on its map file
 * succeeds (users hold a shared one) or it has no map file. Unused, it is
 * removed at once when it is another version of a URL being opened (the
 * object was replaced: the same public URL and query hash), when its metadata
 * is missing (a creation cut short), and, while the directory holds more than
 * the bound (the bytes its files take on disk), oldest first (the map file's
 * mtime: touched at every open and close). Stray temporary files of a crashed
 * metadata write go too. Removal unlinks the map last, holding its lock, so a
 * removal cut short leaves an entry without metadata: removed next time.
 * Files that are not the cache's are left alone. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/remote/cache.h"
#include "fs/remote/cache_impl.h"

/* The "url" line of NAME.meta, escaped, into out, and its
 * "query-sha256" line into q ("" where none): 0 or -errno. */
static int meta_url(struct bfs_cache *c, const char *name, char *out,
		    size_t len, char q[65])
{
	char path[96], buf[META_MAX];
	const char *p;
	int fd;
	ssize_t n;

	snprintf(path, sizeof(path), "%s.meta", name);
	fd = openat(c->dir_fd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n < 0)
		return -EIO;
	buf[n] = 0;
	q[0] = 0;
	p = strstr(buf, "\nquery-sha256 ");
	if (p)
		snprintf(q, 65, "%.*s", (int)strcspn(p + 14, "\n"), p + 14);
	p = strstr(buf, "\nurl ");
	if (!p)
		return -ENOENT;
	p += 5;
	snprintf(out, len, "%.*s", (int)strcspn(p, "\n"), p);
	return 0;
}

struct gc_item {
	char name[65];
	uint64_t bytes;
	struct timespec mtime;
	bool unused;
};

static bool is_hex_name(const char *s, size_t n)
{
	if (n != 64)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') ||
		      (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

/* Allocated bytes of NAME.map, .data and .meta; the map's mtime. */
static uint64_t entry_bytes(struct bfs_cache *c, const char *name,
			    struct timespec *mtime)
{
	static const char *const ext[] = {"map", "data", "meta"};
	uint64_t b = 0;

	for (int i = 0; i < 3; i++) {
		char path[96];
		struct stat st;

		snprintf(path, sizeof(path), "%s.%s", name, ext[i]);
		if (fstatat(c->dir_fd, path, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		b += (uint64_t)st.st_blocks * 512;
		if (i == 0)
			*mtime = st.st_mtim;
	}
	return b;
}

/* Remove entry NAME if nobody has it open: 1 removed, 0 in use. */
static int entry_remove(struct bfs_cache *c, const char *name)
{
	static const char *const ext[] = {"meta", "data", "map"};
	char path[96];
	int fd;

	snprintf(path, sizeof(path), "%s.map", name);
	fd = openat(c->dir_fd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) < 0) {
		close(fd);
		return 0;
	}
	for (int i = 0; i < 3; i++) {
		snprintf(path, sizeof(path), "%s.%s", name, ext[i]);
		unlinkat(c->dir_fd, path, 0);
	}
	if (fd >= 0)
		close(fd);
	__atomic_add_fetch(&c->st.removed_entries, 1, __ATOMIC_RELAXED);
	return 1;
}

/* Whether NAME is unused (an exclusive flock on its map succeeds, or it
 * has no map: then nobody can use it either). */
static bool entry_unused(struct bfs_cache *c, const char *name)
{
	char path[96];
	int fd;
	bool unused;

	snprintf(path, sizeof(path), "%s.map", name);
	fd = openat(c->dir_fd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT;
	unused = flock(fd, LOCK_EX | LOCK_NB) == 0;
	close(fd);
	return unused;
}

static int gc_cmp_age(const void *a, const void *b)
{
	const struct gc_item *x = a, *y = b;

	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
	if (x->mtime.tv_nsec != y->mtime.tv_nsec)
		return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
	return 0;
}

/* The entries of the directory (each name once), into *out. */
static int gc_list(struct bfs_cache *c, struct gc_item **out, size_t *n)
{
	int fd = openat(c->dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);
	struct gc_item *v = NULL;
	size_t cap = 0;
	struct dirent *de;

	*n = 0;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	while ((de = readdir(d))) {
		const char *dot = strchr(de->d_name, '.');
		size_t len = dot ? (size_t)(dot - de->d_name) : 0;
		bool seen = false;

		size_t all = strlen(de->d_name);

		if (dot && is_hex_name(de->d_name, len) && all > 4 &&
		    !strcmp(de->d_name + all - 4, ".tmp")) {
			unlinkat(c->dir_fd, de->d_name, 0); /* a crash's */
			continue;
		}
		if (!dot || !is_hex_name(de->d_name, len) ||
		    (strcmp(dot, ".map") && strcmp(dot, ".data") &&
		     strcmp(dot, ".meta")))
			continue;
		for (size_t i = 0; i < *n && !seen; i++)
			seen = !strncmp(v[i].name, de->d_name, 64);
		if (seen)
			continue;
		if (*n == cap) {
			struct gc_item *nv;

			cap = cap ? 2 * cap : 16;
			nv = realloc(v, cap * sizeof(*v));
			if (!nv) {
				closedir(d);
				free(v);
				return -ENOMEM;
			}
			v = nv;
		}
		memset(&v[*n], 0, sizeof(v[*n]));
		memcpy(v[*n].name, de->d_name, 64);
		(*n)++;
	}
	closedir(d);
	*out = v;
	return 0;
}

/* Collect, under the directory lock: entries of 'url' other than 'keep'
 * (replaced versions) and stray files at once, then unused entries,
 * oldest first, while the directory holds more than the bound. */
int bfs_cache_gc_locked(struct bfs_cache *c, const char *url, const char *query,
			const char *keep)
{
	struct gc_item *v = NULL;
	size_t n;
	uint64_t total = 0;
	int removed = 0, rc = gc_list(c, &v, &n);

	if (rc < 0)
		return rc;
	for (size_t i = 0; i < n; i++) {
		char u[4096], q[65];

		v[i].bytes = entry_bytes(c, v[i].name, &v[i].mtime);
		v[i].unused = (!keep || strcmp(v[i].name, keep)) &&
			      entry_unused(c, v[i].name);
		if (v[i].unused &&
		    (meta_url(c, v[i].name, u, sizeof(u), q) < 0 ||
		     (url && !strcmp(u, url) && !strcmp(q, query)))) {
			/* no metadata (half made), or another version */
			removed += entry_remove(c, v[i].name);
			v[i].unused = false;
			continue;
		}
		total += v[i].bytes;
	}
	if (n)
		qsort(v, n, sizeof(*v), gc_cmp_age);
	for (size_t i = 0; i < n && c->o.limit_bytes; i++) {
		if (total <= c->o.limit_bytes)
			break;
		if (v[i].unused && entry_remove(c, v[i].name)) {
			total -= v[i].bytes;
			removed++;
		}
	}
	free(v);
	return removed;
}

uint64_t bfs_cache_dir_bytes(struct bfs_cache *c)
{
	struct gc_item *v = NULL;
	uint64_t total = 0;
	size_t n = 0;

	if (gc_list(c, &v, &n) < 0)
		return 0;
	for (size_t i = 0; i < n; i++)
		total += entry_bytes(c, v[i].name, &v[i].mtime);
	free(v);
	return total;
}

int bfs_cache_gc(struct bfs_cache *c)
{
	int rc = bfs_cache_dir_lock(c);

	if (rc < 0)
		return rc;
	rc = bfs_cache_gc_locked(c, NULL, NULL, NULL);
	bfs_cache_dir_unlock(c);
	return rc;
}
