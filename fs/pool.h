/* fs/pool: worker threads that materialize batch files into page-aligned
 * buffers, prefetch ahead of the readers, and keep everything under one
 * byte budget (DESIGN.md §6).
 *
 * A batch is addressed by its position pos = e * len + k in the stream of
 * all epochs (len = batches per epoch). */
#ifndef BFS_POOL_H
#define BFS_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "fs/dataset.h"
#include "fs/layout.h"
#include "fs/order.h"

struct bfs_batch; /* a materialized batch: refcounted, read-only */

struct bfs_pool_opts {
	unsigned workers;	 /* gather threads, >= 1 */
	unsigned prefetch;	 /* batches materialized ahead of readers */
	uint64_t budget_bytes;	 /* all batch buffers together */
	unsigned timeout_ms;	 /* longest wait of a read, > 0 */
	uint64_t epochs;	 /* prefetch stays below epoch 'epochs' */
	unsigned debug_delay_ms; /* sleep before each gather (tests only) */
	/* Called by the worker, without the pool's lock, holding a reference
	 * to b, right after a gather completes (b is READY). NULL: none. */
	void (*on_ready)(void *arg, struct bfs_batch *b, uint64_t e,
			 uint64_t k);
	void *on_ready_arg;
};

/* Counters since the pool was created (a snapshot; see bfs_pool_stats). */
struct bfs_pool_stats {
	uint64_t batches_materialized; /* gathers completed */
	uint64_t batches_served;       /* batches read to their end */
	uint64_t bytes_served;	       /* bytes handed to readers */
	uint64_t prefetch_hits;	       /* demanded batch was prefetched */
	uint64_t prefetch_misses;      /* demanded batch had to be queued */
	uint64_t prefetch_skipped;     /* prefetch dropped: budget full */
	uint64_t evictions;	       /* idle batches dropped for room */
	uint64_t cache_bytes;	       /* bytes of batch buffers now */
	uint64_t cache_batches;	       /* batch buffers now */
	uint64_t cache_budget_bytes;   /* --cache-mb */
	uint64_t worker_busy_ns;       /* time spent gathering */
	uint64_t read_wait_ns;	       /* time reads waited for batches */
	uint64_t timeouts;	       /* reads that gave up (EIO) */
	uint64_t errors;	       /* gathers that failed */
	uint64_t batches_pushed;       /* whole batches stored into the
					* kernel's page cache (also counted
					* in batches_served/bytes_served) */
	uint64_t page_cache_drops;     /* pushed batches invalidated to keep
					* the kernel's copy under its budget */
	uint64_t buffers_mapped;       /* fresh batch buffers mmap'd; every
					* other gather reused a spare */
	uint64_t batches_zero_copy;    /* batches served from the archive
					* mapping with no gather (also in
					* batches_served/bytes_served) */
	uint64_t workers, prefetch_depth;
};

struct bfs_pool;

/* A batch larger than the budget is still served, materialized alone;
 * by at most this factor: bfs_pool_check_budget refuses bigger ones. */
#define BFS_POOL_OVER_BUDGET 16u

/* 0 when the largest batch file of 'l' (l->max_file_size) is at most
 * BFS_POOL_OVER_BUDGET x budget_bytes; -EFBIG otherwise, with 'err'
 * naming the archive, the batch and the field that makes it big. */
int bfs_pool_check_budget(const struct bfs_layout *l, uint64_t budget_bytes,
			  struct bfs_error *err);

/* Start 'o->workers' threads (signals blocked in them). The pool borrows
 * ds, order and layout, which must outlive it. Returns 0 or -errno. */
int bfs_pool_create(struct bfs_pool **out, const struct bfs_dataset *ds,
		    struct bfs_order *order, const struct bfs_layout *layout,
		    const struct bfs_pool_opts *o);

/* Stop and join the workers, free every buffer. Batches still acquired
 * must have been released. Accepts NULL. */
void bfs_pool_destroy(struct bfs_pool *p);

/* Get batch k of epoch e, materializing it if needed (demand jumps ahead
 * of prefetch), and schedule the next 'prefetch' batches. Waits at most
 * timeout_ms. Returns 0 and a reference in *out, or -ENOENT (no such
 * batch), -ETIMEDOUT (not ready in time; a log line names epoch, batch
 * and first sample), -EIO / -ERANGE (the gather failed), -ENOMEM. */
int bfs_pool_acquire(struct bfs_pool *p, uint64_t e, uint64_t k,
		     struct bfs_batch **out);

/* bfs_pool_acquire without scheduling the prefetch window after the
 * batch: for re-reads of a batch whose readers have moved on (its pages
 * left the kernel's page cache), which must not re-gather its successors.
 * Same returns. */
int bfs_pool_acquire_alone(struct bfs_pool *p, uint64_t e, uint64_t k,
			   struct bfs_batch **out);

/* Drop a reference from bfs_pool_acquire. Accepts NULL. */
void bfs_pool_release(struct bfs_pool *p, struct bfs_batch *b);

/* Count 'bytes' about to be handed to a reader from b (call it before the
 * reply, while holding the reference, so stats are never behind what a
 * reader saw). 'last' = this reader has now read b to its end: b leaves
 * the cache (its buffer goes with the last reference). */
void bfs_pool_served(struct bfs_pool *p, struct bfs_batch *b, uint64_t bytes,
		     bool last);

/* b (referenced) was stored whole into the kernel's page cache: count it
 * served (batches_served, bytes_served, batches_pushed) and drop it from
 * the cache (its buffer goes with the last reference); a later read of it
 * re-gathers the same bytes. */
void bfs_pool_pushed(struct bfs_pool *p, struct bfs_batch *b);

/* Count a prefetch hit for a batch the reader found ready without asking
 * the pool: a worker had already pushed it into the page cache. */
void bfs_pool_note_hit(struct bfs_pool *p);

/* Count bytes handed to a reader without a pool buffer (served straight
 * from the archive mapping), and 'batches' more read to their end. */
void bfs_pool_note_served(struct bfs_pool *p, uint64_t bytes, uint64_t batches);

/* Count n pushed batches dropped from the kernel's page cache. */
void bfs_pool_note_drops(struct bfs_pool *p, uint64_t n);

/* The batch's bytes and size (the whole batch file). */
const void *bfs_batch_data(const struct bfs_batch *b);
uint64_t bfs_batch_size(const struct bfs_batch *b);

void bfs_pool_stats(struct bfs_pool *p, struct bfs_pool_stats *out);

#endif
