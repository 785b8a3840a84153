/* tools/mount_log: the daemon's log file (mount_log.h).
 *
 * The sink's descriptor is set once by bfs_mount_log_start, before the
 * daemon starts a thread, and only read afterwards (the fs/log.h
 * contract), so it needs no lock. Each line goes out in one write() with
 * O_APPEND, so lines of concurrent threads (and of several daemons
 * sharing a file) never interleave. */
#include "tools/mount_log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fs/log.h"
#include "fs/trust.h"

static int sink_fd = -1;

/* Tests (BATCHFS_DEBUG_STOP=log): stop this process (SIGSTOP) where 'at'
 * is the point named, for a test to change the files under it and then
 * SIGCONT it. */
static void debug_stop(const char *at)
{
	const char *want = getenv("BATCHFS_DEBUG_STOP");

	if (want && !strcmp(want, at))
		raise(SIGSTOP);
}

static void file_sink(enum bfs_log_level level, const char *line)
{
	char buf[1200], when[32] = "";
	struct timespec ts;
	struct tm tm;
	int n;

	clock_gettime(CLOCK_REALTIME, &ts);
	if (gmtime_r(&ts.tv_sec, &tm))
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	n = snprintf(buf, sizeof(buf), "%s.%03ldZ %s\n", when,
		     ts.tv_nsec / 1000000, line);
	if (n >= (int)sizeof(buf)) {
		n = (int)sizeof(buf);
		buf[n - 1] = '\n';
	}
	if (n > 0 && write(sink_fd, buf, (size_t)n) < 0) {
		/* nowhere left to report it */
	}
}

/* "/mnt/cifar" -> "mnt-cifar.log", one name per mountpoint: '/' becomes
 * '-'; '-', '%', '~' and bytes that are not printable ASCII become %XX
 * ("/a-b" is "a%2Db.log", "/a/b" is "a-b.log"); "/" itself is
 * "%2F.log". A name that would not fit in 'len' is cut and ends with
 * "~" and 16 hex digits of a hash of the whole path. */
static void name_of(const char *mnt, char *out, size_t len)
{
	const unsigned char *p = (const unsigned char *)mnt;
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
	size_t n = 0, keep = len - 22;	    /* room for "~" 16 ".log" NUL */
	bool cut = false;

	for (const unsigned char *q = p; *q; q++)
		h = (h ^ *q) * 0x100000001b3ull;
	while (*p == '/')
		p++;
	if (!*p)
		n = (size_t)snprintf(out, len, "%%2F");
	for (; *p; p++) {
		bool plain = *p > ' ' && *p < 0x7f && !strchr("-%~", *p);

		if (n + (plain || *p == '/' ? 1 : 3) > keep) {
			cut = true;
			break;
		}
		if (*p == '/')
			out[n++] = '-';
		else if (plain)
			out[n++] = (char)*p;
		else
			n += (size_t)snprintf(out + n, len - n, "%%%02X", *p);
	}
	if (cut)
		n += (size_t)snprintf(out + n, len - n, "~%016" PRIx64, h);
	snprintf(out + n, len - n, ".log");
}

/* Open 'path' for appending: the descriptor, or -errno. */
static int open_append(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

	return fd >= 0 ? fd : -errno;
}

/* Whether directory st may hold our log: ours (or root's), and nobody
 * else may add or replace its entries (bfs_trust_dir). */
static bool dir_usable(const struct stat *st)
{
	return bfs_trust_dir(st, geteuid(), true);
}

/* Open (create) log 'name' for appending in directory 'leaf' of
 * 'parent', creating 'leaf' (0700) when missing: the descriptor, or
 * -errno. Every step holds what the last one checked, so a directory
 * or file swapped for a symlink (or another) after its check is never
 * followed: 'leaf' is opened with O_NOFOLLOW and checked (dir_usable) on
 * its descriptor, the file is opened under that descriptor with
 * O_NOFOLLOW and must be a regular file of ours with one link (not
 * someone's file or hard link planted in a sticky directory). */
static int open_in(const char *parent, const char *leaf, const char *name)
{
	int pfd = open(parent, O_PATH | O_DIRECTORY | O_CLOEXEC), dfd = -1;
	int fd = -1, rc = 0;
	struct stat st;

	if (pfd < 0)
		return -errno;
	if (mkdirat(pfd, leaf, 0700) < 0 && errno != EEXIST)
		rc = -errno;
	if (rc == 0) {
		dfd = openat(pfd, leaf,
			     O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (dfd < 0 || fstat(dfd, &st) < 0)
			rc = -errno;
		else if (!dir_usable(&st))
			rc = -EPERM;
	}
	if (rc == 0) {
		debug_stop("log");
		fd = openat(dfd, name,
			    O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW |
				O_NONBLOCK | O_CLOEXEC,
			    0644);
		if (fd < 0 || fstat(fd, &st) < 0)
			rc = -errno;
		else if (!S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
			 st.st_nlink != 1)
			rc = -EPERM;
		else if (fcntl(fd, F_SETFL, O_APPEND) < 0) /* blocking */
			rc = -errno;
	}
	if (rc < 0 && fd >= 0)
		close(fd);
	if (dfd >= 0)
		close(dfd);
	close(pfd);
	return rc < 0 ? rc : fd;
}

/* The default log: the first directory that works. 0 or -errno (of the
 * last try). */
static int open_default(struct bfs_mount_log *l, const char *mountpoint)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	char parents[3][3000], leaves[3][32], name[NAME_MAX];
	int rc = -ENOENT, nd = 0;

	if (xdg && xdg[0] == '/' && strlen(xdg) < sizeof(parents[0])) {
		snprintf(parents[nd], sizeof(parents[0]), "%s", xdg);
		snprintf(leaves[nd++], sizeof(leaves[0]), "batchfs");
	}
	if (geteuid() == 0) {
		snprintf(parents[nd], sizeof(parents[0]), "/run");
		snprintf(leaves[nd++], sizeof(leaves[0]), "batchfs");
	}
	snprintf(parents[nd], sizeof(parents[0]), "/tmp");
	snprintf(leaves[nd++], sizeof(leaves[0]), "batchfs-%u",
		 (unsigned)geteuid());
	name_of(mountpoint, name, sizeof(name));
	for (int i = 0; i < nd; i++) {
		rc = open_in(parents[i], leaves[i], name);
		if (rc >= 0) {
			snprintf(l->path, sizeof(l->path), "%.2999s/%.31s/%s",
				 parents[i], leaves[i], name);
			l->fd = rc;
			return 0;
		}
	}
	return rc;
}

int bfs_mount_log_open(struct bfs_mount_log *l, const char *file,
		       bool foreground, const char *mountpoint)
{
	int rc;

	l->fd = -1;
	if (!file && foreground) {
		snprintf(l->path, sizeof(l->path), "stderr");
		return 0;
	}
	if (!file) {
		rc = open_default(l, mountpoint);
		if (rc == 0)
			return 0;
		fprintf(stderr,
			"batchfs mount: cannot open a log file in "
			"$XDG_RUNTIME_DIR/batchfs, /run/batchfs or "
			"/tmp/batchfs-%u (%s): give one with --log-file "
			"FILE, or stay in the foreground with -f\n",
			(unsigned)geteuid(), strerror(-rc));
		return 1;
	}
	rc = open_append(file);
	if (rc < 0) {
		fprintf(stderr, "batchfs mount: --log-file %s: %s\n", file,
			strerror(-rc));
		return 1;
	}
	l->fd = rc;
	if (!realpath(file, l->path))
		snprintf(l->path, sizeof(l->path), "%s", file);
	return 0;
}

void bfs_mount_log_start(const struct bfs_mount_log *l, bool verbose)
{
	sink_fd = l->fd;
	bfs_log_setup(verbose ? BFS_LOG_DEBUG : BFS_LOG_INFO,
		      l->fd >= 0 ? file_sink : NULL);
}
