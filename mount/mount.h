/* mount/: what the FUSE ops (ops.c) and the CLI (cmd_mount.c) share. */
#ifndef BFS_MOUNT_H
#define BFS_MOUNT_H

#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "fs/dataset.h"
#include "fs/layout.h"
#include "fs/order.h"
#include "fs/pool.h"
#include "fs/tree.h"

/* Everything a mounted session serves. Set up before the FUSE loop
 * starts (the zc_* fields and zero_copy by the FUSE init handler, before
 * any other request), read-only while it runs except zc_advised (atomic)
 * and the handle list (handles_lock); the objects inside are thread-safe. */
struct bfs_mount {
	struct bfs_dataset *ds;
	struct bfs_order *order;
	struct bfs_layout layout;
	struct bfs_pool *pool;
	struct bfs_tree *tree;
	enum bfs_serve {
		BFS_SERVE_PUSH,	  /* default: page cache, filled at open */
		BFS_SERVE_CACHE,  /* page cache, filled by kernel READs */
		BFS_SERVE_DIRECT, /* direct I/O: no page cache, no mmap */
	} serve;
	struct fuse_session *se; /* for notify_store / notify_inval */
	/* Set by the FUSE init handler (see ops.c, zero copy): batch rows
	 * are replied straight from the archive mapping; zc_ahead batches
	 * after an opened one are advised (madvise) instead of gathered. */
	bool zero_copy;
	bool zc_no_check; /* tests: skip the size check, let the kernel fault */
	unsigned zc_ahead;
	unsigned zc_max_iov; /* slices per READ reply (tests may lower it) */
	_Atomic uint64_t zc_advised; /* stream positions advised, exclusive */
	struct bfs_pushed *pushed;   /* BFS_SERVE_PUSH: batches in the kernel */
	/* Open file handles, freed by RELEASE; those the kernel never
	 * released (files still open at unmount) are freed at teardown. */
	pthread_mutex_t handles_lock;
	struct bfs_handle *handles; /* handles_lock */
};

/* Set up the (empty) list of open handles; call before the FUSE loop. */
void bfs_mount_handles_init(struct bfs_mount *m);
/* Free the handles left open when the FUSE loop has ended. */
void bfs_mount_handles_free(struct bfs_mount *m);

/* The record of batches pushed into the kernel's page cache, kept under
 * 'budget_bytes' by invalidating the oldest closed ones. 0 or -ENOMEM. */
int bfs_pushed_create(struct bfs_pushed **out, uint64_t budget_bytes);
/* Accepts NULL. */
void bfs_pushed_destroy(struct bfs_pushed *pb);

/* Pool on_ready callback (arg: struct bfs_mount) in push mode: a batch
 * just gathered whose inode the kernel already knows (looked up, listed
 * with readdirplus) is stored into the page cache before anyone opens it;
 * otherwise its open pushes it. */
void bfs_mount_on_ready(void *arg, struct bfs_batch *b, uint64_t e, uint64_t k);

/* The FUSE low-level operations; userdata is a struct bfs_mount. */
extern const struct fuse_lowlevel_ops bfs_mount_ops;

#endif
