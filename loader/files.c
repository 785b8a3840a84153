/* The list of batch files a loader reads: an epoch directory's batch_K
 * files in numeric order, or the caller's explicit list; each stat()ed
 * once, so a file that shrinks later ends in a short read, never in a
 * silently shorter batch. No state of its own. */
#include "loader/internal.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>

const char *bfs_loader_errstr(int rc)
{
	const char *s = strerrordesc_np(-rc);
	return s ? s : "unknown error";
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* "batch_<decimal>" without leading zeros → *k. */
static int batch_number(const char *name, uint64_t *k)
{
	const char *p = name + 6;

	if (strncmp(name, "batch_", 6) != 0 || !*p || (p[0] == '0' && p[1]))
		return 0;
	for (*k = 0; *p; p++) {
		if (*p < '0' || *p > '9' || *k > (UINT64_MAX - 9) / 10)
			return 0;
		*k = *k * 10 + (uint64_t)(*p - '0');
	}
	return 1;
}

/* The numbers of the batch_K files of 'dir', sorted, into *ks / *n. */
static int scan_dir(const struct bfs_loader_logger *lg, const char *dir,
		    uint64_t **ks, uint64_t *n)
{
	size_t cap = 0;
	struct dirent *e;
	DIR *d = opendir(dir);
	uint64_t k;
	int rc = 0;

	*ks = NULL;
	*n = 0;
	if (!d) {
		rc = -errno;
		bfs_loader_log(lg, BFS_LOADER_LOG_ERR, "%s: %s", dir,
			       bfs_loader_errstr(rc));
		return rc;
	}
	while (rc == 0 && (e = readdir(d)) != NULL) {
		if (!batch_number(e->d_name, &k))
			continue;
		if (*n == cap) {
			void *q =
			    realloc(*ks, (cap ? cap * 2 : 64) * sizeof(k));
			if (!q) {
				rc = -ENOMEM;
				break;
			}
			*ks = q;
			cap = cap ? cap * 2 : 64;
		}
		(*ks)[(*n)++] = k;
	}
	closedir(d);
	if (rc == 0 && *n)
		qsort(*ks, (size_t)*n, sizeof(k), cmp_u64);
	return rc;
}

/* Whether directory 'root' is the root of a batchfs mount of several
 * ranks (it has dataset.json and rank/): then the lowest rank it serves
 * into *rank. */
static int multi_rank_root(const char *root, unsigned long *rank)
{
	char path[PATH_MAX];
	struct dirent *e;
	struct stat sb;
	DIR *d;
	int found = 0;

	if (snprintf(path, sizeof(path), "%s/dataset.json", root) >=
		(int)sizeof(path) ||
	    stat(path, &sb) < 0 || !S_ISREG(sb.st_mode))
		return 0;
	d = snprintf(path, sizeof(path), "%s/rank", root) < (int)sizeof(path)
		? opendir(path)
		: NULL;
	while (d && (e = readdir(d))) {
		char *end;
		unsigned long r = strtoul(e->d_name, &end, 10);

		if (e->d_name[0] >= '0' && e->d_name[0] <= '9' && !*end &&
		    (!found || r < *rank)) {
			*rank = r;
			found = 1;
		}
	}
	if (d)
		closedir(d);
	return found;
}

/* When 'dir', which holds no batch files, is in a batchfs mount of
 * several ranks (its root, rank/R, or epoch/N as a mount of one rank has
 * it: the root up to two levels above), log where the batches are:
 * ROOT/rank/R/epoch/N. */
static void rank_hint(const struct bfs_loader_logger *lg, const char *dir)
{
	char root[PATH_MAX];
	unsigned long rank = 0;

	snprintf(root, sizeof(root), "%s", dir);
	for (int up = 0; up <= 2; up++) {
		char *slash;

		while ((slash = strrchr(root, '/')) && slash != root &&
		       !slash[1])
			*slash = '\0'; /* trailing slashes */
		if (multi_rank_root(root, &rank)) {
			bfs_loader_log(lg, BFS_LOADER_LOG_ERR,
				       "%s: the batchfs mount at %s serves "
				       "several ranks, each in rank/R/: open "
				       "one rank's epoch, e.g. %s/rank/%lu/"
				       "epoch/0",
				       dir, root, root, rank);
			return;
		}
		slash = strrchr(root, '/');
		if (!slash || slash == root)
			return;
		*slash = '\0';
	}
}

/* fl->names from the arguments: the list as given, or batch_0..batch_{n-1}
 * of dir. */
static int list_names(const struct bfs_loader_logger *lg, const char *dir,
		      const char *const *files, struct bfs_loader_files *fl)
{
	uint64_t *ks = NULL, n = 0;
	int rc = 0;

	if (files) {
		while (files[n])
			n++;
	} else {
		rc = scan_dir(lg, dir, &ks, &n);
		for (uint64_t i = 0; rc == 0 && i < n; i++)
			if (ks[i] != i) {
				bfs_loader_log(lg, BFS_LOADER_LOG_ERR,
					       "%s: batch_%llu is missing", dir,
					       (unsigned long long)i);
				rc = -ENOENT;
			}
	}
	if (rc == 0 && n == 0) {
		bfs_loader_log(lg, BFS_LOADER_LOG_ERR, "%s: no batch files",
			       dir ? dir : "file list");
		rc = -ENOENT;
	}
	if (rc == -ENOENT && !files)
		rank_hint(lg, dir);
	if (rc == 0 && !(fl->names = calloc((size_t)n + 1, sizeof(char *))))
		rc = -ENOMEM;
	for (uint64_t i = 0; rc == 0 && i < n; i++) {
		int w = files ? asprintf(&fl->names[i], "%s", files[i])
			      : asprintf(&fl->names[i], "%s/batch_%llu", dir,
					 (unsigned long long)i);
		if (w < 0) {
			fl->names[i] = NULL;
			rc = -ENOMEM;
		}
	}
	fl->n = rc == 0 ? n : 0;
	free(ks);
	return rc;
}

#define FUSE_SUPER_MAGIC 0x65735546

/* Whether path lives on a FUSE file system. Only there is O_DIRECT asked
 * for: a batchfs mount serves an O_DIRECT open by its fastest path, while
 * on a disk file system it would bypass the page cache (hot files read
 * from the disk again). A statfs that fails counts as "not FUSE". */
static bool on_fuse(const char *path)
{
	struct statfs fs;

	return statfs(path, &fs) == 0 &&
	       (unsigned long)fs.f_type == FUSE_SUPER_MAGIC;
}

/* fl->sizes, fl->fuse and fl->max: stat() of each file, statfs() of the
 * first file of each device. */
static int stat_files(const struct bfs_loader_logger *lg,
		      struct bfs_loader_files *fl)
{
	struct stat sb;
	dev_t dev = 0;
	bool fuse = false, seen = false;

	fl->max = 1;
	fl->sizes = calloc((size_t)fl->n, sizeof(*fl->sizes));
	fl->fuse = calloc((size_t)fl->n + 1, 1);
	if (!fl->sizes || !fl->fuse)
		return -ENOMEM;
	for (uint64_t i = 0; i < fl->n; i++) {
		if (stat(fl->names[i], &sb) < 0) {
			int rc = -errno;
			bfs_loader_log(lg, BFS_LOADER_LOG_ERR, "%s: %s",
				       fl->names[i], bfs_loader_errstr(rc));
			return rc;
		}
		if (!S_ISREG(sb.st_mode)) {
			bfs_loader_log(lg, BFS_LOADER_LOG_ERR,
				       "%s: not a regular file", fl->names[i]);
			return -EINVAL;
		}
		if (!seen || sb.st_dev != dev) {
			dev = sb.st_dev;
			fuse = on_fuse(fl->names[i]);
			seen = true;
		}
		fl->fuse[i] = fuse;
		fl->sizes[i] = (uint64_t)sb.st_size;
		if (fl->sizes[i] > fl->max)
			fl->max = fl->sizes[i];
	}
	return 0;
}

int bfs_loader_files_list(const struct bfs_loader_logger *lg, const char *dir,
			  const char *const *files,
			  struct bfs_loader_files *out)
{
	int rc;

	memset(out, 0, sizeof(*out));
	rc = list_names(lg, dir, files, out);
	if (rc == 0)
		rc = stat_files(lg, out);
	if (rc < 0)
		bfs_loader_files_free(out);
	return rc;
}

void bfs_loader_files_free(struct bfs_loader_files *fl)
{
	for (uint64_t i = 0; fl->names && fl->names[i]; i++)
		free(fl->names[i]);
	free(fl->names);
	free(fl->sizes);
	free(fl->fuse);
	memset(fl, 0, sizeof(*fl));
}
