/* fs/readahead: one room for what is resident and what to read ahead
 * (fs/README.md: cold data) — the memory policy and the read-ahead of a
 * dataset's rows, between the dataset (which copies rows) and the pool
 * (which decides which batches come next).
 *
 * Memory policy, decided once at creation: data that fits in half the
 * memory available (the smaller of MemAvailable and what the memory
 * cgroups leave: a container's page cache counts against its limit) is
 * read in sequentially in the background (the read-in); data that does
 * not is marked for random access (a page fault reads its page, not the
 * device's read-ahead window around it).
 *
 * Read-ahead: bfs_readahead_rows asks the kernel (madvise WILLNEED) for
 * the rows of samples that a batch will need, skipping rows in 2 MiB
 * chunks already known resident (one mincore per chunk, remembered for a
 * second), so resident data costs almost nothing.
 *
 * Thread-safe: the residency words and counters are relaxed atomics. */
#ifndef BFS_READAHEAD_H
#define BFS_READAHEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/dataset.h"

struct bfs_readahead;

struct bfs_readahead_opts {
	/* Apply the memory policy (read in data that fits, mark the rest for
	 * random access). false: advice only (tests, measurements:
	 * BATCHFS_DEBUG_NO_WARM). */
	bool memory_policy;
};

/* Counters since creation. */
struct bfs_readahead_stats {
	uint64_t warm_bytes;	/* read in at creation (data that fits) */
	uint64_t rows_resident; /* rows found in memory when advised */
	uint64_t rows_advised;	/* rows the kernel was asked to read */
};

/* The read-ahead of 'ds' (borrowed; must outlive it): applies the memory
 * policy, logging what it decided, and starts the read-in thread when the
 * data fits. 0 or -errno. */
int bfs_readahead_create(struct bfs_readahead **out,
			 const struct bfs_dataset *ds,
			 const struct bfs_readahead_opts *o);

/* Stop the read-in (it checks between 32 MiB windows), free. Accepts
 * NULL. */
void bfs_readahead_destroy(struct bfs_readahead *ra);

/* Ask the kernel to read the rows of samples idx[0..n) (every fixed field;
 * ragged fields are not advised: that needs their offsets) that are not
 * known resident. Best effort, never fails; an index out of range is
 * skipped. */
void bfs_readahead_rows(struct bfs_readahead *ra, const uint64_t *idx,
			size_t n);

void bfs_readahead_stats(const struct bfs_readahead *ra,
			 struct bfs_readahead_stats *out);

#endif
