/* tools/mount_log: where a mount's daemon logs (fs/log.h's sink).
 *
 * --log-file FILE, else stderr with -f, else a file the user can find,
 * named after the mountpoint ("/mnt/cifar" -> "mnt-cifar.log"; '-' and
 * other bytes that '/' could be confused with are escaped as %XX, so two
 * mountpoints never share a file) in the first usable of
 * $XDG_RUNTIME_DIR/batchfs/, /run/batchfs/ and /tmp/batchfs-UID/: one
 * that is (or is made) a directory of this user's or root's, that nobody
 * else may write unless it is sticky, opened without following a symlink;
 * the file is opened under that descriptor, without following a symlink,
 * and must be a regular file of this user's with one link (root run with
 * a user's XDG_RUNTIME_DIR, as by sudo -E, is never led elsewhere by a
 * swap; BATCHFS_DEBUG_STOP=log stops the process (SIGSTOP) between the
 * directory's check and the file's open, for a test to try one). The
 * file is opened (appending) once the dataset and options are known to
 * be good, right before the mount, so a mount refused earlier creates no
 * log, and one that cannot be written fails the mount; a mount that
 * fails after that writes its reason into it. The mount's dataset.json
 * ("log"), README and success line name it. Each line is
 * "2025-05-01T12:00:00.123Z batchfs[module]: message" (UTC), the message
 * escaped by bfs_log (fs/log.h). */
#ifndef BFS_TOOLS_MOUNT_LOG_H
#define BFS_TOOLS_MOUNT_LOG_H

#include <limits.h>
#include <stdbool.h>

struct bfs_mount_log {
	int fd;		     /* the file; -1: stderr */
	char path[PATH_MAX]; /* the file's path, or "stderr" */
};

/* Choose and open the log of a mount on 'mountpoint' (resolved): 'file'
 * (--log-file, may be NULL), 'foreground' (-f). 0, or 1 after printing
 * why it cannot be opened. */
int bfs_mount_log_open(struct bfs_mount_log *l, const char *file,
		       bool foreground, const char *mountpoint);

/* From now on, bfs_log lines go to l (debug lines too when 'verbose').
 * Call once in the daemon, before its threads start; l must stay. */
void bfs_mount_log_start(const struct bfs_mount_log *l, bool verbose);

#endif
