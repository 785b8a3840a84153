/* mount/: what the FUSE ops (ops.c) and the CLI (cmd_mount.c) share. */
#ifndef BFS_MOUNT_H
#define BFS_MOUNT_H

#include <fuse_lowlevel.h>
#include <stdbool.h>

#include "fs/dataset.h"
#include "fs/layout.h"
#include "fs/order.h"
#include "fs/pool.h"
#include "fs/tree.h"

/* Everything a mounted session serves. Set up before the FUSE loop
 * starts, read-only while it runs (the objects inside are thread-safe). */
struct bfs_mount {
	struct bfs_dataset *ds;
	struct bfs_order *order;
	struct bfs_layout layout;
	struct bfs_pool *pool;
	struct bfs_tree *tree;
	bool direct_io; /* --direct-io: batch files bypass the page cache */
};

/* The FUSE low-level operations; userdata is a struct bfs_mount. */
extern const struct fuse_lowlevel_ops bfs_mount_ops;

#endif
