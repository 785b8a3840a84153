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
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fs/log.h"

static int sink_fd = -1;

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

/* The default log: the first directory that works. 0 or -errno (of the
 * last try). */
static int open_default(struct bfs_mount_log *l, const char *mountpoint)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	char dirs[3][PATH_MAX - NAME_MAX - 1], name[NAME_MAX];
	int rc = -ENOENT, nd = 0;

	if (xdg && xdg[0] == '/')
		snprintf(dirs[nd++], sizeof(dirs[0]), "%s/batchfs", xdg);
	if (geteuid() == 0)
		snprintf(dirs[nd++], sizeof(dirs[0]), "/run/batchfs");
	snprintf(dirs[nd++], sizeof(dirs[0]), "/tmp/batchfs-%u",
		 (unsigned)geteuid());
	name_of(mountpoint, name, sizeof(name));
	for (int i = 0; i < nd; i++) {
		struct stat st;

		if (mkdir(dirs[i], 0700) < 0 && errno != EEXIST) {
			rc = -errno;
			continue;
		}
		/* a directory of ours, not someone's trap in /tmp */
		if (lstat(dirs[i], &st) < 0 || !S_ISDIR(st.st_mode) ||
		    st.st_uid != geteuid()) {
			rc = -EPERM;
			continue;
		}
		snprintf(l->path, sizeof(l->path), "%.3800s/%s", dirs[i], name);
		rc = open_append(l->path);
		if (rc >= 0) {
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
