/* tools/mount_compose: the composition root of `batchfs mount`, and the
 * interface between it and the command line (tools/cmd_mount.c).
 *
 * The command line parses and checks the options into a struct
 * mount_opts and hands it to bfs_mount_compose, which builds what is
 * mounted from it (dataset, layout, order), decides who may read the
 * mount, opens the log and runs the session (mount/mount.h), building the
 * serve and the namespace in the daemon. The command line knows nothing
 * of the model; this knows nothing of getopt. */
#ifndef BFS_TOOLS_MOUNT_COMPOSE_H
#define BFS_TOOLS_MOUNT_COMPOSE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "fs/layout.h"
#include "fs/order.h"
#include "fs/reader.h"
#include "fs/serve.h"
#include "tools/mount_log.h"
#include "tools/mount_perm.h"

#define MAX_SOURCES   4096
#define MAX_RANKS     4096 /* ranks one mount serves (--ranks) */
#define MAX_O_ARGS    64   /* -o arguments of one command line */
#define MAX_O_SOURCES 256  /* -o source=PATH options (fstab's shards) */

/* The options of one `batchfs mount`: filled in and checked by the
 * command line, then the composition root's (the fields at the end). */
struct mount_opts {
	const char *sources[MAX_SOURCES];
	size_t nsources;
	char source_label[PATH_MAX + 64]; /* sources[0] (+ N more shards) */
	const char *mountpoint;
	uint64_t batch_size, epochs, seed, num_samples, cache_mb, pc_mb;
	unsigned workers, prefetch, timeout_s, fuse_threads;
	uint32_t world_size, rank;
	const char *ranks_arg; /* --ranks, expanded into ranks[] */
	uint32_t ranks[MAX_RANKS];
	size_t nranks;
	bool have_rank;
	bool shuffle, have_seed, drop_last, replacement, foreground, verbose;
	bool have_prefetch, have_world, have_pc;
	bool have_compat;    /* --torch-compat or --torch-version given */
	bool torch_verified; /* the orders of torch_version were checked */
	const char *torch_version; /* --torch-version (NULL: not given) */
	bool sampler_drop_last, persistent_workers;
	/* --resume-at E:S[:W] (fs/order.h: opts.resume) */
	bool resume;
	uint64_t resume_epoch, resume_pos;
	uint32_t resume_world;
	const char *resume_arg;
	enum bfs_serve_mode serve;
	enum bfs_reader_kind reader; /* --reader */
	enum bfs_torch_compat compat;
	const char *subset, *weights, *gen_state, *rng_state, *log_file;
	const char *fields; /* --fields */
	/* Remote sources: --s3-endpoint (NULL: the AWS settings'), --cache-dir
	 * (NULL: the default), --cache-gb in bytes (0: no bound). */
	const char *s3_endpoint, *cache_dir;
	uint64_t cache_bytes;
	char fuse_o[1024];	      /* user's -o options, comma-joined */
	struct bfs_mount_owner owner; /* --owner */
	struct bfs_ragged_opt ragged[BFS_LAYOUT_MAX_RAGGED]; /* --pad/--pack */
	size_t nragged;
	char ragged_line[512]; /* them, for README (cut when long) */
	/* The command line's own: the copies of -o arguments that options
	 * given as -o KEY=VALUE point into, and the sources -o source=
	 * added (after the SOURCE operands). */
	char *o_copies[MAX_O_ARGS];
	size_t no_copies;
	const char *o_sources[MAX_O_SOURCES];
	size_t no_sources;

	/* Set by the composition root (seed too, when it draws one). */
	size_t hidden;		    /* entries the mount hides in MOUNTPOINT */
	char summary[PATH_MAX * 2]; /* the line printed once mounted */
	const char *seed_source;    /* see struct bfs_tree_info */
	struct bfs_mount_log log;   /* where the daemon logs */
	char line[2048];	    /* the options as one line, for README */
	struct bfs_perm perm;	    /* who may read the nodes */
	char fsname[PATH_MAX];	    /* the first source's absolute path:
				     * mount tables show it (findmnt) */
};

/* The options in DataLoader's terms, for fs/order's rules. */
static inline struct bfs_order_request request_of(const struct mount_opts *m)
{
	return (struct bfs_order_request){
	    .shuffle = m->shuffle,
	    .replacement = m->replacement,
	    .num_samples = m->num_samples,
	    .subset = m->subset != NULL,
	    .weights = m->weights != NULL,
	    .distributed = m->have_world,
	    .have_seed = m->have_seed,
	    .generator_state = m->gen_state != NULL,
	    .global_generator = m->rng_state != NULL,
	    .have_compat = m->have_compat,
	    .persistent_workers = m->persistent_workers,
	    .sampler_drop_last = m->sampler_drop_last,
	};
}

/* Mount what the checked options 'm' ask for on m->mountpoint (resolved,
 * checked by bfs_mountinfo_check_target): draw the seed if none was
 * given, build the model (a bad archive or option exits 1 or 2 in the
 * foreground), decide who may read the mount (tools/mount_perm.c), check
 * that /dev/fuse can be opened, only then open the daemon's log (a mount
 * refused before creates none) and run the session. 'usage' prints the
 * command's usage, for the option values only the model can refuse (an
 * order PyTorch would not draw). Returns the exit status: 0 once mounted
 * (in the daemon: once unmounted), 1 on a bad archive or a mount failure,
 * 2 on bad usage, the reason printed. The model and the log are closed
 * when it returns; m's --pad/--pack options stay the caller's. */
int bfs_mount_compose(struct mount_opts *m, void (*usage)(FILE *));

#endif
