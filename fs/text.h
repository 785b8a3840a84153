/* fs/text: the text files that describe a mount, README and dataset.json
 * (the top README: the namespace), rendered once when it is mounted. They
 * say what is mounted (sources, fields, sizes), the equivalent PyTorch
 * DataLoader, how the batches are served (the mode and why, as strings:
 * this room knows nothing of serving) and a numpy-only reader. */
#ifndef BFS_TEXT_H
#define BFS_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/dataset.h"
#include "fs/layout.h"
#include "fs/order.h"

/* What the text files describe besides the dataset itself. */
struct bfs_text_info {
	/* The paths as given: not read (dataset.json names each shard by
	 * its absolute path, from the dataset). */
	const char *const *sources;
	size_t nsources;
	uint64_t batch_size; /* --batch-size */
	uint64_t seed;
	bool shuffle; /* a random order at all */
	bool drop_last;
	/* Where the seed came from: "--seed", "getrandom" (a random sampler
	 * without --seed), "--generator-state", "default" (DistributedSampler's
	 * 0) or "unused" (sequential order). */
	const char *seed_source;
	const char *sampler; /* "sequential", "random", ... */
	const char *options; /* the mount options, one line */
	const char *mountpoint;
	const char *log;	/* where the daemon logs: a file, or "stderr" */
	const char *serve_mode; /* "passthrough", ... (NULL: "-") */
	const char *serve_why;	/* why that mode */
	const char *reader;	/* how rows are read ahead: "io_uring", ... */
	const char *reader_why; /* ... and why */
	/* Remote sources: the cache's directory and bound (0: none); NULL
	 * dir: no remote source. Sources are named by their URLs without
	 * query or userinfo (fs/remote: bfs_remote_url_display). */
	const char *cache_dir;
	uint64_t cache_bytes;
	/* --torch-version as given (NULL: none), and whether the golden
	 * tests ran against its MAJOR.MINOR (fs/order: bfs_torch_compat_of) */
	const char *torch_version;
	bool torch_verified;
};

/* README into *readme and dataset.json into *json, malloc'd strings the
 * caller frees: the epochs are the order's (bfs_order_epochs). Borrows
 * everything. 0 or -ENOMEM (both NULL). */
int bfs_text_render(const struct bfs_dataset *ds, struct bfs_order *order,
		    const struct bfs_layout *layout,
		    const struct bfs_text_info *in, char **readme, char **json);

#endif
