/* mount/internal.h: private to mount/ (ops.c, passthrough.c, session.c);
 * tools/ sees only mount/mount.h. */
#ifndef BFS_MOUNT_INTERNAL_H
#define BFS_MOUNT_INTERNAL_H

#include <fuse_lowlevel.h>
#include <stdatomic.h>
#include <stdint.h>

#include "mount/mount.h"

/* The custom-io hooks' state (passthrough.c). */
struct bfs_pt {
	int fd;		     /* the session's /dev/fuse descriptor */
	bool want;	     /* enable passthrough if the kernel offers it */
	bool ignore_offer;   /* tests: behave as if it were not offered */
	atomic_bool offered; /* INIT offered FUSE_PASSTHROUGH */
	atomic_bool enabled; /* our INIT reply enabled it */
	_Atomic uint64_t init_unique; /* the INIT request, to find its reply */
};

/* The userdata of the FUSE session: what the ops serve. serve and tree
 * are set before any request but INIT is answered, and are read-only
 * afterwards (they are thread-safe themselves). */
struct bfs_mount {
	struct bfs_serve *serve;
	struct bfs_tree *tree;
	struct fuse_session *se;
	struct bfs_pt pt;
};

/* The FUSE low-level operations (ops.c); userdata is a struct bfs_mount. */
extern const struct fuse_lowlevel_ops bfs_mount_ops;

/* Route the session's /dev/fuse traffic through the hooks of
 * passthrough.c (after fuse_session_mount). 0 or -errno. */
int bfs_pt_install(struct bfs_mount *m);

/* After INIT: whether passthrough works here (offered, enabled by our
 * reply, and a backing file can be registered): 0, or -errno with the
 * reason in 'why'. */
int bfs_pt_check(struct bfs_mount *m, char *why, size_t len);

/* fs/serve's backing-file callbacks (arg: struct bfs_mount). */
int bfs_pt_backing_open(void *arg, int fd);
void bfs_pt_backing_close(void *arg, int id);

/* fuse_reply_open with FOPEN_PASSTHROUGH and 'backing_id' added by the
 * writev hook (backing_id <= 0: a plain fuse_reply_open). */
int bfs_pt_reply_open(fuse_req_t req, const struct fuse_file_info *fi,
		      int backing_id);

#endif
