/* fs/pool: worker threads that materialize batch files into page-aligned
 * buffers or memfds, prefetch ahead of the readers, and keep everything
 * under one byte budget (fs/README.md: workers, prefetch and the budget).
 *
 * A batch comes located by the order (struct bfs_batch_loc: its id, its
 * position, its rows; fs/order.h: batch identity). The pool keys batches
 * by position and reads ahead along it: the batches after a batch are the
 * positions after it, up to the end of its lane (a multi-rank mount's
 * rank), across epochs; each lane has its own prefetch window. */
#ifndef BFS_POOL_H
#define BFS_POOL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "fs/dataset.h"
#include "fs/fetch.h"
#include "fs/layout.h"
#include "fs/layout_fd.h"
#include "fs/order.h"
#include "fs/readahead.h"

struct bfs_batch; /* a materialized batch: refcounted, read-only */

struct bfs_pool_opts {
	unsigned workers;	 /* gather threads, >= 1 */
	unsigned prefetch;	 /* batches materialized ahead of readers */
	uint64_t budget_bytes;	 /* all batch buffers together */
	unsigned timeout_ms;	 /* longest wait of a read, > 0 */
	unsigned debug_delay_ms; /* sleep before each gather (tests only) */
	/* Batches live in fresh memfds (bfs_batch_fd), never reused: a
	 * reader's mapping of one outlives it (passthrough). Otherwise in
	 * anonymous memory (bfs_batch_data), reused through spares. */
	bool memfd;
	/* memfd batches: bound the most held at once (each is a descriptor
	 * of the daemon's) by its RLIMIT_NOFILE less a reserve (stats:
	 * max_fds), read again when stats are read and when the bound is
	 * hit, so that a limit changed under the daemon (prlimit) is
	 * followed. Idle ones are evicted for room, a prefetch past it is
	 * dropped; a demand past it (readers hold every one open) fails with
	 * -ENFILE, said in the log and last_error. */
	bool fds_bounded;
	/* How a memfd batch is written (fs/layout_fd). */
	enum bfs_layout_fd_how memfd_write;
	/* Cold data (fs/README.md), made by the composition root, borrowed
	 * (they must outlive the pool); NULL: none. The read-ahead is told
	 * where each lane's readers are and advises the rows of batches
	 * about to be gathered; the fetch reads the rows of big fields for
	 * the gathers, when the data does not fit in memory. */
	struct bfs_readahead *readahead;
	struct bfs_fetch *fetch;
	/* Batches are served straight from the archive mapping (zero copy):
	 * their rows are read ahead into the page cache, never read by the
	 * gathers with O_DIRECT (the pool tells the fetch so at creation:
	 * bfs_fetch_serve_mapped). */
	bool rows_in_place;
	/* Called by the worker, without the pool's lock, right after a
	 * gather succeeded and before b is ready for anyone: what must be
	 * there before a reader sees the batch (a backing id). It must not
	 * wait for a reader. NULL: none. */
	void (*prepare)(void *arg, struct bfs_batch *b,
			const struct bfs_batch_loc *at);
	/* Called by the worker, without the pool's lock and holding a
	 * reference, once b is ready: what may overlap readers (queueing an
	 * early push into the page cache; bfs_pool_hold keeps b past the
	 * call). It must not wait on the kernel or a reader. NULL: none. */
	void (*on_ready)(void *arg, struct bfs_batch *b,
			 const struct bfs_batch_loc *at);
	/* Called, under the pool's lock (keep it short), when a batch with a
	 * tag is freed: undoes prepare (drops the backing id). */
	void (*on_free)(void *arg, struct bfs_batch *b);
	void *hook_arg;
};

/* A batch that a reader could not have: when, which, why. */
#define BFS_POOL_ERROR_MAX 200
struct bfs_pool_error {
	uint64_t time_ns;	      /* CLOCK_REALTIME; 0: no error yet */
	uint64_t epoch, batch;	      /* its id's: the rank's epoch */
	int64_t rank;		      /* a multi-rank mount's rank; else -1 */
	char msg[BFS_POOL_ERROR_MAX]; /* one line, cut to fit */
};

/* Counters since the pool was created (a snapshot; see bfs_pool_stats). */
struct bfs_pool_stats {
	uint64_t batches_materialized; /* gathers completed */
	uint64_t prefetch_hits;	       /* demanded batch was prefetched */
	uint64_t prefetch_misses;      /* demanded batch had to be queued */
	uint64_t prefetch_skipped;     /* prefetch dropped: budget full */
	uint64_t evictions;	       /* idle batches dropped for room */
	uint64_t cache_bytes;	       /* bytes of batches held now */
	uint64_t cache_batches;	       /* batches held now */
	uint64_t cache_budget_bytes;   /* --cache-mb */
	uint64_t shmem_bytes;	       /* of cache_bytes, in memfds */
	uint64_t max_fds; /* the descriptor bound (opts.fds_bounded), 0: none */
	uint64_t fd_limit_hits;	       /* gathers refused: no descriptor */
	uint64_t worker_busy_ns;       /* time spent gathering */
	uint64_t read_wait_ns;	       /* time acquires waited */
	uint64_t timeouts;	       /* acquires that gave up */
	uint64_t errors;	       /* gathers that failed */
	uint64_t buffers_mapped;       /* fresh buffers or memfds made;
					* every other gather reused a spare */
	uint64_t batches_advised;      /* batches read ahead (advise) */
	struct bfs_readahead_stats ra; /* opts.readahead's (cold data) */
	uint64_t workers, prefetch_depth;
	struct bfs_pool_error last_error; /* the latest bfs_pool_note_error */
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
 * ds, order and layout, which must outlive it; its batches are the
 * order's (every lane, epochs 0 .. bfs_order_epochs - 1). Returns 0 or
 * -errno. */
int bfs_pool_create(struct bfs_pool **out, const struct bfs_dataset *ds,
		    struct bfs_order *order, const struct bfs_layout *layout,
		    const struct bfs_pool_opts *o);

/* Stop and join the workers, free every buffer. Batches still acquired
 * must have been released. Accepts NULL. */
void bfs_pool_destroy(struct bfs_pool *p);

/* Get batch 'at' (bfs_order_locate), materializing it if needed (demand
 * jumps ahead of prefetch), and schedule the next 'prefetch' batches of
 * its lane. Waits at most timeout_ms. Returns 0 and a reference in *out,
 * or -ENOENT (no such batch), -ETIMEDOUT (not ready in time; a log line
 * names the batch and its first sample), -EIO / -ERANGE (the gather
 * failed), -EINTR (the thread's bfs_cancel flag was set: below),
 * -ENOMEM. */
int bfs_pool_acquire(struct bfs_pool *p, const struct bfs_batch_loc *at,
		     struct bfs_batch **out);

/* bfs_pool_acquire without scheduling the prefetch window after the
 * batch: for re-reads of a batch whose readers have moved on, which must
 * not re-gather its successors. Same returns. */
int bfs_pool_acquire_alone(struct bfs_pool *p, const struct bfs_batch_loc *at,
			   struct bfs_batch **out);

/* Read ahead instead of gathering: advise the kernel (madvise WILLNEED,
 * fs/readahead) on the rows of batch 'at' (its samples idx[0 ..
 * at->rows), which the caller has) and of the prefetch window after it,
 * each batch once (the same window acquire would gather), in the caller's
 * thread. For batches served straight from the archive (zero copy). */
void bfs_pool_advise(struct bfs_pool *p, const struct bfs_batch_loc *at,
		     const uint64_t *idx);

/* Interrupts. A reader that gives up (its FUSE request interrupted by a
 * signal) must not wait on a worker: the thread serving it names the
 * request's flag with bfs_cancel_enter before a call that may acquire,
 * and bfs_cancel_leave after; whoever sets the flag then calls
 * bfs_pool_interrupt, and an acquire of that thread waiting for its batch
 * returns -EINTR (already set at the acquire: at once, unless the batch
 * is ready). The batch is not touched: its gather goes on, and a later
 * acquire finds it ready. The flag is the thread's own (thread-local,
 * not shared state): no signature between the adapter and the acquire
 * has to carry it, and a thread serves one request at a time. */
struct bfs_cancel {
	atomic_bool set;
};
void bfs_cancel_enter(struct bfs_cancel *c);
void bfs_cancel_leave(void);

/* Wake every acquire waiting in p, so that those whose flag is set return
 * -EINTR (the others wait on). Thread-safe; takes the pool's lock. */
void bfs_pool_interrupt(struct bfs_pool *p);

/* Drop a reference from bfs_pool_acquire. Accepts NULL. */
void bfs_pool_release(struct bfs_pool *p, struct bfs_batch *b);

/* One more reference to b, which the caller holds already (a hook's
 * batch kept past the hook); bfs_pool_release it. */
void bfs_pool_hold(struct bfs_pool *p, struct bfs_batch *b);

/* Drop a reference; if none is left, b also leaves the pool (a later
 * acquire materializes it again, identical). For batches whose last
 * reader is gone: passthrough files at their last release. Accepts NULL. */
void bfs_pool_release_last(struct bfs_pool *p, struct bfs_batch *b);

/* b (referenced) leaves the pool now: the next acquire of its position
 * materializes it again; b itself lives until its last reference goes.
 * For a batch read to its end or handed whole to the kernel. */
void bfs_pool_drop(struct bfs_pool *p, struct bfs_batch *b);

/* The batch's bytes (anonymous batches; NULL for memfd batches), its
 * memfd (-1 for anonymous ones) and its size (the whole batch file). */
const void *bfs_batch_data(const struct bfs_batch *b);
int bfs_batch_fd(const struct bfs_batch *b);
uint64_t bfs_batch_size(const struct bfs_batch *b);

/* An int the pool's user attaches to a batch (0 = none; passthrough: the
 * backing id), handed back to on_free. set succeeds (true) only when no
 * tag is set yet, so racing setters agree on one. */
int bfs_batch_tag(const struct bfs_batch *b);
bool bfs_batch_set_tag(struct bfs_batch *b, int tag);

void bfs_pool_stats(struct bfs_pool *p, struct bfs_pool_stats *out);

/* Batch id failed a reader: log "epoch E batch K: MESSAGE" ("rank R
 * epoch E ..." on a multi-rank mount) as an error and keep it as the
 * pool's last_error (stats). Thread-safe; takes the pool's lock (not to
 * be held). */
void bfs_pool_note_error(struct bfs_pool *p, struct bfs_batch_id id,
			 const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
