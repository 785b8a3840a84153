/* mount/: the FUSE adapter (mount/README.md). `batchfs mount`'s
 * composition root (tools/mount_compose.c) builds the model (dataset,
 * layout, order) and calls bfs_mount_run, which mounts, answers the
 * kernel's INIT (where the serving mode is decided: passthrough needs the
 * kernel's offer and the right to register backing files), lets the
 * caller build what is served for that mode, serves until unmounted, and
 * tears down in order. This header has no FUSE type in it. */
#ifndef BFS_MOUNT_H
#define BFS_MOUNT_H

#include <stdbool.h>
#include <stddef.h>

#include "fs/serve.h"
#include "fs/tree.h"

/* What the session serves; it owns both once start returned them, and
 * destroys them (serve first: its workers talk to the session) before it
 * unmounts. */
struct bfs_mount_served {
	struct bfs_serve *serve;
	struct bfs_tree *tree;
};

struct bfs_mount_params {
	const char *mountpoint; /* an existing directory */
	const char *fuse_opts;	/* the user's -o options, comma-joined */
	const char *fsname;	/* what mount tables show as the source
				 * (findmnt's SOURCE): the first source's
				 * path, any bytes; NULL: "batchfs" */
	unsigned fuse_threads;
	bool foreground;  /* else: daemonize (see bfs_mount_run) */
	bool log_failure; /* also bfs_log why the mount failed (the log is a
			   * file, not the stderr the reason is printed on) */
	enum bfs_serve_mode serve; /* BFS_SERVE_AUTO, or a forced mode */
	/* In the serving process, once the kernel's INIT is answered: build
	 * what is served in 'mode' ('why': the reason it was chosen), with
	 * 'kernel' for fs/serve. 0, or -errno with a one-line reason in msg
	 * (the mount then fails, exit 1, nothing left mounted). */
	int (*start)(void *arg, enum bfs_serve_mode mode, const char *why,
		     const struct bfs_serve_kernel *kernel,
		     struct bfs_mount_served *out, char *msg, size_t len);
	/* In the serving process, right before the mount is reported ready
	 * (the daemon detaches its standard streams here). May be NULL. */
	void (*ready)(void *arg);
	/* In the serving process, once the loop has ended (unmounted, or a
	 * signal), before what is served is destroyed: end what would keep
	 * its workers waiting (remote fetches in flight), so the daemon
	 * exits now rather than at their deadlines. May be NULL. */
	void (*stop)(void *arg);
	void *arg;
};

/* Whether this process may open /dev/fuse, as the mount will (directly
 * for root, through fusermount3 as this user otherwise). 0, or -errno
 * with a one-line reason in msg that says what is wrong and what to do
 * (the device is missing, its mode shuts this user out, a container does
 * not pass it on). */
int bfs_mount_check_device(char *msg, size_t len);

/* Mount p->mountpoint and serve it until it is unmounted (SIGTERM,
 * SIGINT and SIGHUP unmount cleanly). Unless p->foreground, the process
 * forks: the parent exits 0 once the filesystem is ready and 1 (after
 * printing why) when it is not; the child serves and returns here at the
 * end. Returns the exit status: 0, 1 (mount or serving failure, printed,
 * and logged with p->log_failure), 2 (bad FUSE options). */
int bfs_mount_run(const struct bfs_mount_params *p);

#endif
