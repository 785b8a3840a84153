/* fs/pool: materialize batches on worker threads, prefetch, one budget.
 *
 * Model. Every batch the pool knows is a 'struct bfs_batch' in a hash
 * table keyed by its position (fs/order.h: batch identity; it comes
 * located, struct bfs_batch_loc, and keeps its id and rows). States:
 *   QUEUED  on the work queue (demand at the head, prefetch at the tail)
 *   BUSY    a worker is gathering it; its storage counts against the budget
 *   READY   bytes valid; on the LRU list while in the table
 *   FAILED  the gather failed; 'err' says why (removed from the table)
 * A batch leaves the table when its user drops it (bfs_pool_drop: read to
 * its end, or pushed whole into the kernel's page cache), at the release
 * of its last reference when asked (bfs_pool_release_last: passthrough
 * files), when it is evicted (LRU, idle = no reference) for room, or when
 * it failed. It is freed when it is out of the table and has no
 * reference, so storage in use by a reader is never freed.
 *
 * Work. A worker takes a batch off the queue and plans it once: its
 * samples (fs/order: the one call a batch costs it) and its file size
 * (fs/layout); the same plan then sizes its storage, is read ahead
 * (fs/readahead) and is gathered.
 *
 * Storage. Anonymous page-aligned buffers, or (opts.memfd, passthrough)
 * one fresh memfd per batch, written by fs/layout_fd (gathered and
 * written with one pwrite, or pwritev straight from the archive). A memfd
 * is never reused: a reader's mapping of it outlives the batch.
 *
 * Lanes. A multi-rank mount's order has one lane per rank, each read on
 * its own: a lane's positions are one range, its epochs one after
 * another (fs/order says where each lane ends: lane_end), and the
 * prefetch window, what has been scheduled (pf_upto) and the recent
 * acquires are kept per lane.
 *
 * Budget. cache_bytes = bytes of all storage (BUSY or READY, in the table
 * or still referenced; memfds count their pages, shmem_bytes). Before a
 * gather the worker makes room by evicting idle READY batches, least
 * recently used first (make_room): first those outside the prefetch
 * window of every recent reader (the last RECENT acquires of each lane),
 * e.g. a window prefetched after a peek at a far epoch that nobody reads
 * on, which would otherwise hold its room until the readers got there and
 * leave every prefetch without room; then those behind the gather in its
 * own lane (for a demand: any of its lane). A prefetch is dropped
 * when that is not enough; only a demand goes on to evict another lane's
 * window. So the budget is shared between ranks as windows: each rank
 * holds at most its window ahead, and a fast rank's prefetch never evicts
 * what a slow rank is about to read. A demanded batch is
 * gathered even when the budget cannot hold it (a batch larger than the
 * budget works, alone), so memory is bounded by budget + the batches
 * readers hold at this instant. Freed anonymous buffers are kept as spares
 * (at most workers + prefetch + 1, i.e. no more than were alive at once;
 * counted in cache_bytes) and reused for batches of the same size or
 * smaller; they are the first thing dropped for room. A fresh buffer costs
 * a page fault and a zeroed page per 4 KiB on its first gather
 * (buffers_mapped counts them). Memfd batches are descriptors too: with
 * opts.fds_bounded the batches held are bounded by the descriptor limit
 * (max_fds, read again when hit): idle ones are evicted for room, a
 * prefetch past it is dropped, a demand past it fails with -ENFILE.
 *
 * Prefetch. Each acquire of position pos queues pos+1 .. pos+prefetch
 * (across epochs, up to its lane's end), skipping what the table already
 * holds and what an earlier acquire already scheduled (pf_upto).
 *
 * Read-ahead (fs/readahead) and fetch (fs/fetch), handed in by the
 * composition root (the memory policy behind them is not the pool's
 * business). Each acquire tells the read-ahead where its lane's readers
 * are (bfs_readahead_follow), and its thread reads the rows of the
 * batches after it. Before a gather, the worker advises its batch's rows
 * and, for data that does not fit in memory, reads the rows of big
 * fields itself with O_DIRECT (bfs_fetch_rows, on a struct
 * bfs_fetch_rows of its own; never with opts.rows_in_place, which the
 * pool tells the fetch at create: bfs_fetch_serve_mapped). The rows a
 * gather reads in remote files are held around it (bfs_fetch_hold:
 * fetched where absent and waited for, within the read's deadline;
 * bfs_fetch_release after), on a struct bfs_fetch_hold per worker; a
 * hold that fails fails the batch. While the read-ahead thread
 * does not run (no reader, or the read-in of data that fits has ended),
 * a worker that gathered batch q advises the rows of batch
 * q + prefetch + 1, one window further. bfs_pool_advise, for batches
 * served from the archive itself (zero copy), gathers nothing: it moves
 * the readers' place and advises the rows of the batch and of its window.
 *
 * Hooks. prepare runs on the worker after a gather, before the batch is
 * READY (so what it prepares, e.g. a backing id, is there before any
 * reader sees the batch); on_ready runs after, holding a reference (push
 * mode queues an early push into the page cache; bfs_pool_hold keeps the
 * batch past the hook); on_free runs under the lock when a batch with a
 * tag is freed. No hook may wait on the kernel: a worker a reader waits
 * for must not wait on that reader.
 *
 * Lock order: one mutex (p->lock) protects every field marked [L] and every
 * batch's state/refs/links. Workers drop it while gathering. There is no
 * other lock, so no order to respect; bfs_order and bfs_dataset calls are
 * thread-safe on their own and are made without p->lock held.
 *
 * Wake-ups: an acquire waits for its batch on a condition of its own,
 * listed on p->waiters (a few: one per request waiting), so a batch
 * done wakes only the acquires waiting for it, and a batch nobody waits
 * for (prefetched) wakes nobody; a worker waits on p->work, signalled
 * once per batch queued.
 *
 * Interrupts (pool.h): an acquire waits for its batch until the deadline,
 * or until the flag its thread named (bfs_cancel_enter) is set and
 * bfs_pool_interrupt wakes every waiter: it returns -EINTR and leaves the
 * batch as it is (still demanded, queued or being gathered), so a later
 * acquire finds it ready; the waiters whose flag is not set wait on.
 *
 * Errors: a failed gather and a read that timed out are logged and kept
 * as the pool's last_error (time, epoch, batch, message; stats), with the
 * reason the gathering thread logged below (bfs_log_err_last). With debug
 * logging (-v), each batch materialized and evicted is logged with its
 * timing.
 *
 * Debug: BATCHFS_DEBUG_GATHER_DELAY_MS is read by the CLI into
 * opts.debug_delay_ms (workers sleep that long before each gather), so
 * tests can force a read timeout. */
#include "fs/pool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "fs/layout_fd.h"
#include "fs/log.h"
#include "fs/size.h"

#define NBUCKETS   4096u
#define MAX_SPARES 16u /* bounded further by workers + prefetch + 1 */
#define RECENT	   8u  /* acquires whose prefetch windows are kept */

enum bstate { B_QUEUED, B_BUSY, B_READY, B_FAILED };

struct bfs_batch {
	struct bfs_batch_loc at; /* which batch: id, position, rows */
	uint64_t size;		 /* file size */
	uint64_t map_size;	 /* size rounded to pages */
	uint64_t ready_ns;	 /* [L] when it became READY (monotonic) */
	void *buf;		 /* mmap'd, page aligned; NULL until BUSY */
	int fd;			 /* memfd batches (opts.memfd): else -1 */
	_Atomic int tag;	 /* the user's (bfs_batch_tag), 0 = none */
	enum bstate state;	 /* [L] */
	int err;		 /* [L] when FAILED */
	unsigned refs;		 /* [L] acquirers waiting or reading */
	bool in_table;		 /* [L] */
	bool demanded;		 /* [L] a reader asked for it (else prefetch) */
	struct bfs_batch *hnext; /* [L] hash chain */
	struct bfs_batch *prev, *next; /* [L] queue (QUEUED) or LRU (READY) */
};

struct list {
	struct bfs_batch *head, *tail;
};

/* An acquire waiting for its batch: woken alone when that batch is done
 * (on p->waiters while it waits). */
struct waiter {
	pthread_cond_t cond;	    /* p->clock's clock */
	struct bfs_batch *b;	    /* the batch it waits for */
	struct waiter *prev, *next; /* [L] */
};

struct bfs_pool {
	const struct bfs_dataset *ds;
	struct bfs_order *order;
	const struct bfs_layout *layout;
	struct bfs_pool_opts o;
	size_t lanes;	    /* ranks served, each read on its own */
	uint64_t *lane_end; /* [lanes] past each lane's last position */
	uint64_t rows_max;  /* samples of the largest batch */

	pthread_mutex_t lock;
	pthread_cond_t work;	  /* [L] queue not empty or stop */
	pthread_cond_t stopping;  /* [L] stop (cuts debug_delay short) */
	pthread_condattr_t clock; /* the waits' clock: CLOCK_MONOTONIC */
	struct waiter *waiters;	  /* [L] acquires waiting, each for one batch */
	bool stop;		  /* [L] */
	struct bfs_batch *table[NBUCKETS]; /* [L] */
	struct list queue;		   /* [L] QUEUED batches */
	struct list lru;		   /* [L] READY in table, MRU at head */
	uint64_t *pf_upto; /* [L] per lane: highest pos prefetched + 1 */
	/* [L] per lane, RECENT slots: positions of its last acquires + 1 */
	uint64_t *recent;
	uint64_t *recent_at;		 /* [L] per lane: its next slot */
	void *spare[MAX_SPARES];	 /* [L] freed buffers kept for reuse */
	uint64_t spare_size[MAX_SPARES]; /* [L] their sizes */
	unsigned nspare;		 /* [L] */
	struct bfs_pool_stats st;	 /* [L] */

	struct bfs_readahead *ra; /* o.readahead (borrowed), or NULL */
	pthread_t *threads;
	unsigned nthreads;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CLOCK_MONOTONIC 'ms' milliseconds from now (the waits' clock). */
static struct timespec deadline_in(unsigned ms)
{
	struct timespec dl;

	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += ms / 1000;
	dl.tv_nsec += (long)(ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	return dl;
}

/* Log "epoch E batch K: msg" as an error and keep it as last_error. [L] */
static void note_error(struct bfs_pool *p, struct bfs_batch_id id,
		       const char *msg)
{
	struct bfs_pool_error *le = &p->st.last_error;
	size_t n = sizeof(le->msg);
	struct timespec ts;
	char name[80];

	bfs_order_batch_name(p->order, id, name, sizeof(name));
	bfs_log(BFS_LOG_ERR, "pool", "%s: %s", name, msg);
	clock_gettime(CLOCK_REALTIME, &ts);
	le->time_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	le->epoch = id.epoch;
	le->rank = bfs_order_ranked(p->order)
		       ? (int64_t)bfs_order_rank_of_lane(p->order, id.lane)
		       : -1;
	le->batch = id.batch;
	if (snprintf(le->msg, n, "%s", msg) >= (int)n)
		memcpy(le->msg + n - 4, "...", 4);
	for (char *c = le->msg; *c; c++)
		if (*c == '\n' || *c == '\t')
			*c = ' ';
}

void bfs_pool_note_error(struct bfs_pool *p, struct bfs_batch_id id,
			 const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&p->lock);
	note_error(p, id, msg);
	pthread_mutex_unlock(&p->lock);
}

static void list_push_head(struct list *l, struct bfs_batch *b)
{
	b->prev = NULL;
	b->next = l->head;
	if (l->head)
		l->head->prev = b;
	else
		l->tail = b;
	l->head = b;
}

static void list_push_tail(struct list *l, struct bfs_batch *b)
{
	b->next = NULL;
	b->prev = l->tail;
	if (l->tail)
		l->tail->next = b;
	else
		l->head = b;
	l->tail = b;
}

static void list_del(struct list *l, struct bfs_batch *b)
{
	if (b->prev)
		b->prev->next = b->next;
	else
		l->head = b->next;
	if (b->next)
		b->next->prev = b->prev;
	else
		l->tail = b->prev;
	b->prev = b->next = NULL;
}

static struct bfs_batch **bucket(struct bfs_pool *p, uint64_t pos)
{
	return &p->table[(pos * 0x9E3779B97F4A7C15ull >> 40) % NBUCKETS];
}

static struct bfs_batch *find(struct bfs_pool *p, uint64_t pos)
{
	for (struct bfs_batch *b = *bucket(p, pos); b; b = b->hnext)
		if (b->at.pos == pos)
			return b;
	return NULL;
}

/* Free a batch that is out of the table with no reference. Its buffer is
 * kept as a spare (still counted in cache_bytes) when there is a slot:
 * reusing it spares the next gather the page faults and zeroing of a
 * fresh mapping. [L] */
static void batch_free(struct bfs_pool *p, struct bfs_batch *b)
{
	if (p->o.on_free && atomic_load(&b->tag))
		p->o.on_free(p->o.hook_arg, b);
	if (b->fd >= 0) { /* a memfd: never reused (mappings outlive it) */
		close(b->fd);
		p->st.cache_batches--;
		p->st.cache_bytes -= b->map_size;
		p->st.shmem_bytes -= b->map_size;
	} else if (b->buf) {
		p->st.cache_batches--;
		if (p->nspare < MAX_SPARES &&
		    p->nspare <= p->o.workers + p->o.prefetch) {
			p->spare[p->nspare] = b->buf;
			p->spare_size[p->nspare++] = b->map_size;
		} else {
			munmap(b->buf, b->map_size);
			p->st.cache_bytes -= b->map_size;
		}
	}
	free(b);
}

/* Unmap spare i. [L] */
static void drop_spare(struct bfs_pool *p, unsigned i)
{
	munmap(p->spare[i], p->spare_size[i]);
	p->st.cache_bytes -= p->spare_size[i];
	p->spare[i] = p->spare[--p->nspare];
	p->spare_size[i] = p->spare_size[p->nspare];
}

/* Give b a spare buffer: one of its exact size, else the smallest larger
 * one (b then owns and accounts that size), so the short last batch of an
 * epoch does not map a fresh buffer. Returns false when none fits. [L] */
static bool take_spare(struct bfs_pool *p, struct bfs_batch *b)
{
	unsigned best = p->nspare;

	for (unsigned i = 0; i < p->nspare; i++) {
		if (p->spare_size[i] < b->map_size)
			continue;
		if (best == p->nspare || p->spare_size[i] < p->spare_size[best])
			best = i;
		if (p->spare_size[i] == b->map_size)
			break;
	}
	if (best == p->nspare)
		return false;
	b->buf = p->spare[best];
	b->map_size = p->spare_size[best];
	p->spare[best] = p->spare[--p->nspare];
	p->spare_size[best] = p->spare_size[p->nspare];
	return true;
}

/* Take b out of the table (and its list); free it if nobody holds it. [L] */
static void unlink_batch(struct bfs_pool *p, struct bfs_batch *b)
{
	struct bfs_batch **pp = bucket(p, b->at.pos);

	if (!b->in_table)
		return;
	while (*pp != b)
		pp = &(*pp)->hnext;
	*pp = b->hnext;
	b->in_table = false;
	if (b->state == B_QUEUED)
		list_del(&p->queue, b);
	else if (b->state == B_READY)
		list_del(&p->lru, b);
	if (b->refs == 0 && b->state != B_BUSY)
		batch_free(p, b);
}

/* A new QUEUED batch 'at', in the table, its size not known yet (the
 * worker measures it: next_job). NULL on ENOMEM. [L] */
static struct bfs_batch *batch_new(struct bfs_pool *p,
				   const struct bfs_batch_loc *at, bool demand)
{
	struct bfs_batch *b = calloc(1, sizeof(*b));
	struct bfs_batch **pp = bucket(p, at->pos);

	if (!b)
		return NULL;
	b->at = *at;
	b->state = B_QUEUED;
	b->fd = -1;
	b->in_table = true;
	b->demanded = demand;
	b->hnext = *pp;
	*pp = b;
	if (demand)
		list_push_head(&p->queue, b);
	else
		list_push_tail(&p->queue, b);
	pthread_cond_signal(&p->work);
	return b;
}

/* Whether b lies in the prefetch window of one of the last RECENT
 * acquires in its lane (a reader is on its way there). [L] */
static bool in_a_window(const struct bfs_pool *p, const struct bfs_batch *b)
{
	const uint64_t *r = &p->recent[b->at.id.lane * RECENT];
	uint64_t pos = b->at.pos;

	for (unsigned i = 0; i < RECENT; i++)
		if (r[i] && pos >= r[i] && pos - r[i] < p->o.prefetch)
			return true;
	return false;
}

/* Whether idle batch b may go for a gather of batch 'at' (NULL: none, to
 * get back under budget) in eviction pass 'pass' (make_room). [L] */
static bool evictable(const struct bfs_pool *p, const struct bfs_batch *b,
		      const struct bfs_batch_loc *at, bool demand, int pass)
{
	bool mine = !at || b->at.id.lane == at->id.lane;

	if (b->refs)
		return false;
	switch (pass) {
	case 0: /* nobody is on the way there */
		return !in_a_window(p, b);
	case 1: /* its own lane's: behind a prefetch, any for a demand */
		return mine && (demand || (at && b->at.pos < at->pos));
	default: /* a demand's last resort: another rank's window */
		return demand;
	}
}

/* How many memfd batches the descriptor limit leaves room for: the soft
 * RLIMIT_NOFILE less a quarter of it, 256 at most, for the sources, the
 * session, the log and the gathers' own reads; 0 (no bound) when it
 * cannot be read. One getrlimit: cheap enough to call again whenever the
 * bound is hit. */
static uint64_t fds_of_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return 0;
	if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (1u << 30))
		return 1u << 30;
	return rl.rlim_cur - (rl.rlim_cur / 4 < 256 ? rl.rlim_cur / 4 : 256);
}

/* The descriptor bound read again from the limit, which may have moved
 * since (prlimit --nofile on the daemon). [L] */
static void fds_refresh(struct bfs_pool *p)
{
	if (p->o.memfd && p->o.fds_bounded)
		p->st.max_fds = fds_of_limit();
}

/* Whether 'batches' more batches fit the descriptors in memfd mode (a
 * batch each); the bound is read again before saying no. [L] */
static bool fds_fit(struct bfs_pool *p, uint64_t batches)
{
	if (!p->o.memfd || !p->o.fds_bounded)
		return true;
	if (p->st.max_fds && p->st.cache_batches + batches <= p->st.max_fds)
		return true;
	fds_refresh(p);
	return !p->st.max_fds || p->st.cache_batches + batches <= p->st.max_fds;
}

/* Whether 'need' more bytes and 'batches' more batches fit: the byte
 * budget, and in memfd mode the descriptors. [L] */
static bool fits(struct bfs_pool *p, uint64_t need, uint64_t batches)
{
	return p->st.cache_bytes + need <= p->o.budget_bytes &&
	       fds_fit(p, batches);
}

/* Evict idle READY batches until 'need' more bytes and 'batches' more
 * batches fit, in three passes over the LRU list (least recently used
 * first): batches outside every recent reader's window; then batches of
 * the gather's own lane (rank) behind it (a prefetch) or anywhere in it
 * (a demand); then, for a demand only, any idle batch. So one rank's
 * prefetch never evicts what another rank is about to read, and its
 * demand does only when nothing else is left. Returns whether they
 * fit. [L] */
static bool make_room(struct bfs_pool *p, uint64_t need, uint64_t batches,
		      const struct bfs_batch_loc *at, bool demand)
{
	for (int pass = 0; pass < 3; pass++) {
		struct bfs_batch *b = p->lru.tail;

		while (!fits(p, need, batches)) {
			struct bfs_batch *prev;
			char name[80];

			if (p->nspare) { /* spares go first */
				drop_spare(p, p->nspare - 1);
				continue;
			}
			if (!b)
				break;
			prev = b->prev;
			if (evictable(p, b, at, demand, pass)) {
				if (bfs_log_wants(BFS_LOG_DEBUG)) {
					bfs_order_batch_name(p->order, b->at.id,
							     name,
							     sizeof(name));
					bfs_log(
					    BFS_LOG_DEBUG, "pool",
					    "%s: evicted for room, %.3f ms "
					    "after it was materialized",
					    name,
					    (double)(now_ns() - b->ready_ns) /
						1e6);
				}
				unlink_batch(p, b); /* may become a spare */
				p->st.evictions++;
			}
			b = prev;
		}
	}
	return fits(p, need, batches);
}

/* What one worker keeps from one batch to the next. Between taking a
 * batch and finishing it, idx[0..b->at.rows) are that batch's samples: its
 * plan, made once (next_job) and used to size, read ahead and gather it. */
struct worker {
	uint64_t *idx;
	uint64_t idx_cap;
	struct bfs_layout_fd fdw;     /* memfd batches (passthrough) */
	struct bfs_fetch_rows *fetch; /* rows it reads itself, or NULL */
	struct bfs_fetch_hold *hold;  /* rows of remote files, or NULL */
};

/* Ask the kernel to read the rows of the position one prefetch window
 * after 'done' ahead (madvise of the rows not resident): workers keep
 * this window one prefetch window ahead of their gathers, so cold rows
 * arrive before a gather needs them. Within done's lane. Without the
 * lock; w->idx is free between gathers. */
static void advise_ahead(struct bfs_pool *p, const struct bfs_batch_loc *done,
			 struct worker *w)
{
	uint64_t pos = done->pos + p->o.prefetch + 1;
	struct bfs_batch_loc at;

	if (bfs_readahead_reads(p->ra) || pos >= p->lane_end[done->id.lane] ||
	    bfs_order_locate_pos(p->order, pos, &at) < 0 ||
	    at.rows > w->idx_cap ||
	    bfs_order_batch(p->order, at.id, w->idx) < 0)
		return;
	bfs_readahead_rows(p->ra, w->idx, at.rows);
}

/* b's storage: a fresh anonymous buffer (unless a spare was taken) or a
 * fresh memfd; *fresh says one was made. Without the lock. */
static int make_storage(struct bfs_pool *p, struct bfs_batch *b, bool *fresh)
{
	*fresh = false;
	if (p->o.memfd) {
		b->fd = memfd_create("batchfs-batch",
				     MFD_CLOEXEC | MFD_ALLOW_SEALING);
		*fresh = b->fd >= 0;
		return b->fd >= 0 ? 0 : -errno;
	}
	if (b->buf)
		return 0;
	b->buf = mmap(NULL, b->map_size, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (b->buf == MAP_FAILED) {
		b->buf = NULL;
		return -ENOMEM;
	}
	*fresh = true;
	return 0;
}

/* Tests: wait opts.debug_delay_ms before a gather, or until the pool
 * stops (bfs_pool_destroy does not wait out the delay). */
static void debug_delay(struct bfs_pool *p)
{
	struct timespec dl = deadline_in(p->o.debug_delay_ms);

	pthread_mutex_lock(&p->lock);
	while (!p->stop &&
	       pthread_cond_timedwait(&p->stopping, &p->lock, &dl) != ETIMEDOUT)
		;
	pthread_mutex_unlock(&p->lock);
}

/* Gather b (its plan: w->idx, its rows held) into its storage. */
static int gather_held(struct bfs_pool *p, struct bfs_batch *b,
		       struct worker *w)
{
	bfs_layout_rows have = NULL;
	int rc;

	bfs_readahead_rows(p->ra, w->idx, b->at.rows);
	if (w->fetch && bfs_fetch_rows(p->o.fetch, w->fetch, w->idx, b->at.rows,
				       &have) == 0) {
		/* read before this check: a change would show in it */
		rc = bfs_dataset_check(p->ds, w->idx, b->at.rows);
		if (rc < 0)
			return rc;
	}
	if (b->fd < 0)
		return bfs_layout_fill_from(p->layout, p->ds, b->at.id, w->idx,
					    b->at.rows, b->size, have, b->buf);
	return bfs_layout_fd_write(&w->fdw, b->at.id, w->idx, b->at.rows,
				   b->size, have, b->fd);
}

/* Gather b (its plan: w->idx) into its storage, without the lock: its
 * rows in remote files held first (fetched if need be, within the read's
 * deadline: fs/fetch), then let go. Returns 0 or -errno. */
static int gather(struct bfs_pool *p, struct bfs_batch *b, struct worker *w)
{
	int rc;

	if (p->o.debug_delay_ms)
		debug_delay(p);
	rc = bfs_fetch_hold(p->o.fetch, w->hold, w->idx, b->at.rows,
			    now_ns() + (uint64_t)p->o.timeout_ms * 1000000u);
	if (rc)
		return rc;
	rc = gather_held(p, b, w);
	bfs_fetch_release(p->o.fetch, w->hold);
	return rc;
}

/* Gather b; a memfd is then sealed: nobody (a reader mapping it through
 * passthrough included) can change or resize a batch others read. */
static int gather_sealed(struct bfs_pool *p, struct bfs_batch *b,
			 struct worker *w)
{
	int rc = gather(p, b, w);

	if (rc == 0 && b->fd >= 0 &&
	    fcntl(b->fd, F_ADD_SEALS,
		  F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
		rc = -errno;
	return rc;
}

/* Wake the acquires waiting for b (every waiting acquire: b NULL). [L] */
static void wake(struct bfs_pool *p, const struct bfs_batch *b)
{
	for (struct waiter *w = p->waiters; w; w = w->next)
		if (!b || w->b == b)
			pthread_cond_signal(&w->cond);
}

/* The end of a gather of b that took 'ns': READY (the ready hook ran
 * already) or FAILED, its waiters woken (only they: a batch done wakes
 * no acquire that waits for another). [L] */
static void finish(struct bfs_pool *p, struct bfs_batch *b, int rc, uint64_t ns)
{
	char why[700], name[80];

	/* now, as b may be freed below; they run once the lock is let go,
	 * and see b's state then */
	wake(p, b);

	if (rc == 0) {
		if (bfs_log_wants(BFS_LOG_DEBUG)) {
			bfs_order_batch_name(p->order, b->at.id, name,
					     sizeof(name));
			bfs_log(BFS_LOG_DEBUG, "pool",
				"%s: materialized in %.3f ms (%llu bytes, %s)",
				name, (double)ns / 1e6,
				(unsigned long long)b->size,
				b->demanded ? "demanded" : "prefetched");
		}
		b->state = B_READY;
		b->ready_ns = now_ns();
		p->st.batches_materialized++;
		if (b->in_table)
			list_push_head(&p->lru, b);
		else if (b->refs == 0) /* dropped meanwhile (pushed ahead) */
			batch_free(p, b);
	} else {
		const char *cause = bfs_log_err_last();
		struct bfs_dataset_fault f;
		char off[40] = "";

		if (rc == -ENFILE || rc == -EMFILE) { /* not the data's */
			p->st.fd_limit_hits++;
			fds_refresh(p); /* a limit lowered under us */
			rc = -ENFILE;
			snprintf(
			    why, sizeof(why),
			    "no file descriptor for its memfd: the daemon "
			    "holds %llu batches (at most %llu, from its "
			    "descriptor limit) and readers have them open; "
			    "close batch files, or raise the daemon's "
			    "limit (ulimit -Hn)",
			    (unsigned long long)p->st.cache_batches,
			    (unsigned long long)p->st.max_fds);
		} else if (rc == -EIO && bfs_dataset_fault(&f) == 0) {
			/* an archive that could not be read: where */
			if (f.offset != BFS_NO_OFFSET)
				snprintf(off, sizeof(off), " at offset %llu",
					 (unsigned long long)f.offset);
			snprintf(why, sizeof(why),
				 "gather failed: %s (sample %llu, %s%s%s)",
				 strerror(-rc), (unsigned long long)f.sample,
				 f.path, off,
				 f.changed ? " changed under the mount" : "");
		} else {
			snprintf(why, sizeof(why), "gather failed: %s%s%s%s",
				 strerror(-rc), *cause ? " (" : "", cause,
				 *cause ? ")" : "");
		}
		note_error(p, b->at.id, why);
		b->state = B_FAILED;
		b->err = rc;
		p->st.errors++;
		if (b->in_table)
			unlink_batch(p, b); /* frees if unreferenced */
		else if (b->refs == 0)
			batch_free(p, b);
	}
}

/* b's plan into w: its samples (w->idx) and its file size (a ragged
 * batch reads its samples' offsets). 0 or -errno. Without the lock. */
static int plan(struct bfs_pool *p, struct bfs_batch *b, struct worker *w,
		uint64_t *size)
{
	struct bfs_layout_dims d;
	int rc;

	if (b->at.rows > w->idx_cap) {
		uint64_t *n = realloc(w->idx, b->at.rows * sizeof(*w->idx));

		if (!n)
			return -ENOMEM;
		w->idx = n;
		w->idx_cap = b->at.rows;
	}
	rc = bfs_order_batch(p->order, b->at.id, w->idx);
	if (rc == 0)
		rc = bfs_layout_measure(p->layout, w->idx, b->at.rows, &d);
	if (rc == 0)
		*size = bfs_layout_size_dims(p->layout, &d);
	return rc;
}

/* Plan b, just taken off the queue, without the lock (the order may
 * compute its epoch, a ragged batch reads offsets): meanwhile b is BUSY,
 * off every list, waited for and never freed. 0, or the -errno with which
 * b then failed. [L] */
static int plan_batch(struct bfs_pool *p, struct bfs_batch *b, struct worker *w)
{
	uint64_t size = 0;
	int rc;

	b->state = B_BUSY;
	pthread_mutex_unlock(&p->lock);
	rc = plan(p, b, w, &size);
	pthread_mutex_lock(&p->lock);
	if (rc < 0) {
		finish(p, b, rc, 0);
		return rc;
	}
	b->size = size;
	b->map_size = (size + 4095) & ~(uint64_t)4095;
	return 0;
}

/* Pick the next batch to gather, plan it into w and reserve its budget;
 * NULL = stop. [L] */
static struct bfs_batch *next_job(struct bfs_pool *p, struct worker *w)
{
	for (;;) {
		struct bfs_batch *b;

		while (!p->stop && !p->queue.head)
			pthread_cond_wait(&p->work, &p->lock);
		if (p->stop)
			return NULL;
		b = p->queue.head;
		list_del(&p->queue, b);
		if (plan_batch(p, b, w) < 0)
			continue; /* FAILED: its waiters have the error */
		if (!p->o.memfd && take_spare(p, b)) { /* counted already */
			b->state = B_BUSY;
			p->st.cache_batches++;
			return b;
		}
		if (!make_room(p, b->map_size, 1, &b->at, b->demanded) &&
		    !b->demanded) {
			/* Prefetch with no room: forget it; a read re-queues */
			p->st.prefetch_skipped++;
			b->state = B_FAILED; /* not on any list now */
			unlink_batch(p, b);
			continue;
		}
		if (!fds_fit(p, 1)) { /* readers hold every descriptor */
			finish(p, b, -ENFILE, 0);
			continue;
		}
		b->state = B_BUSY;
		p->st.cache_bytes += b->map_size;
		p->st.cache_batches++;
		return b;
	}
}

/* Drop a reference to b, freeing b when it was the last and b is out of
 * the table; then get back under budget, which a demand larger than the
 * room may have exceeded. [L] */
static void put_ref(struct bfs_pool *p, struct bfs_batch *b)
{
	if (--b->refs == 0 && !b->in_table)
		batch_free(p, b);
	if (!fits(p, 0, 0))
		make_room(p, 0, 0, NULL, true);
}

/* Run on_ready for b, just made READY (and kept: in the table or
 * referenced), holding a reference and not the lock. [L] on entry and
 * exit. */
static void ready_hook(struct bfs_pool *p, struct bfs_batch *b)
{
	b->refs++;
	pthread_mutex_unlock(&p->lock);
	p->o.on_ready(p->o.hook_arg, b, &b->at);
	pthread_mutex_lock(&p->lock);
	put_ref(p, b);
}

static void *worker_main(void *arg)
{
	struct bfs_pool *p = arg;
	struct worker w = {0};
	sigset_t all;

	bfs_layout_fd_init(&w.fdw, p->layout, p->ds, p->o.memfd_write);
	w.fetch = bfs_fetch_rows_open(p->o.fetch);
	w.hold = bfs_fetch_hold_open(p->o.fetch);
	/* Asynchronous signals belong to the FUSE loop; faults must stay
	 * deliverable here: a SIGBUS from an archive truncated under a
	 * gather goes to fs/dataset's guard, while a blocked one makes the
	 * kernel kill the whole process with no word (it forces the
	 * default action on a blocked synchronous fault). */
	sigfillset(&all);
	sigdelset(&all, SIGBUS);
	sigdelset(&all, SIGSEGV);
	sigdelset(&all, SIGFPE);
	sigdelset(&all, SIGILL);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	pthread_mutex_lock(&p->lock);
	for (;;) {
		struct bfs_batch *b = next_job(p, &w);
		bool fresh, hook;
		uint64_t t0;
		int rc;

		if (!b)
			break;
		pthread_mutex_unlock(&p->lock);
		t0 = now_ns();
		bfs_log_err_reset();
		rc = make_storage(p, b, &fresh);
		if (!rc)
			rc = gather_sealed(p, b, &w);
		advise_ahead(p, &b->at, &w);
		if (!rc && p->o.prepare) /* b is BUSY: nobody frees it */
			p->o.prepare(p->o.hook_arg, b, &b->at);
		pthread_mutex_lock(&p->lock);
		p->st.buffers_mapped += fresh;
		if (b->fd >= 0)
			p->st.shmem_bytes += b->map_size;
		else if (!b->buf) { /* no storage: the budget was reserved */
			p->st.cache_bytes -= b->map_size;
			p->st.cache_batches--;
		}
		t0 = now_ns() - t0;
		p->st.worker_busy_ns += t0;
		/* finish frees b if nobody wants it: decide before */
		hook = !rc && p->o.on_ready && (b->in_table || b->refs);
		finish(p, b, rc, t0);
		if (hook)
			ready_hook(p, b);
	}
	pthread_mutex_unlock(&p->lock);
	free(w.idx);
	bfs_layout_fd_fini(&w.fdw);
	bfs_fetch_rows_close(w.fetch);
	bfs_fetch_hold_close(w.hold);
	return NULL;
}

/* A byte count for messages: "4.0 TiB", "512 MiB", "900 bytes". */
static const char *human(char *buf, size_t len, uint64_t n)
{
	static const char *const unit[] = {"KiB", "MiB", "GiB",
					   "TiB", "PiB", "EiB"};
	double v = (double)n;
	int u = -1;

	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	if (u < 0)
		snprintf(buf, len, "%llu bytes", (unsigned long long)n);
	else
		snprintf(buf, len, "%.1f %s", v, unit[u]);
	return buf;
}

int bfs_pool_check_budget(const struct bfs_layout *l, uint64_t budget_bytes,
			  struct bfs_error *err)
{
	const struct bfs_layout_field *big = bfs_layout_largest(l);
	char a[32], b[32], c[32];
	uint64_t cap;

	if (bfs_size_mul(budget_bytes, BFS_POOL_OVER_BUDGET, &cap) ||
	    l->max_file_size <= cap)
		return 0;
	return bfs_error_set(
	    err, -EFBIG, l->source, BFS_NO_OFFSET,
	    "a batch of %llu samples is %s (field '%s': %s per sample), "
	    "more than %u x the memory budget of %s (--cache-mb): use a "
	    "smaller --batch-size or a larger --cache-mb",
	    (unsigned long long)l->rows_max,
	    human(a, sizeof(a), l->max_file_size), big ? big->f->name : "?",
	    human(b, sizeof(b), big ? big->f->row_bytes : 0),
	    BFS_POOL_OVER_BUDGET, human(c, sizeof(c), budget_bytes));
}

int bfs_pool_create(struct bfs_pool **out, const struct bfs_dataset *ds,
		    struct bfs_order *order, const struct bfs_layout *layout,
		    const struct bfs_pool_opts *o)
{
	struct bfs_pool *p = calloc(1, sizeof(*p));
	int rc = 0;

	*out = NULL;
	if (!p)
		return -ENOMEM;
	p->ds = ds;
	p->order = order;
	p->layout = layout;
	p->o = *o;
	if (p->o.workers < 1)
		p->o.workers = 1;
	p->lanes = bfs_order_lanes(order);
	p->rows_max = bfs_order_batch_rows(order, 0);

	p->st.cache_budget_bytes = o->budget_bytes;
	fds_refresh(p); /* st.max_fds: 0 unless bounded */
	p->st.workers = p->o.workers;
	p->st.prefetch_depth = o->prefetch;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->work, NULL);
	pthread_condattr_init(&p->clock);
	pthread_condattr_setclock(&p->clock, CLOCK_MONOTONIC);
	pthread_cond_init(&p->stopping, &p->clock);
	p->threads = calloc(p->o.workers, sizeof(*p->threads));
	p->pf_upto = calloc(p->lanes, sizeof(*p->pf_upto));
	p->recent = calloc(p->lanes * RECENT, sizeof(*p->recent));
	p->recent_at = calloc(p->lanes, sizeof(*p->recent_at));
	p->lane_end = calloc(p->lanes, sizeof(*p->lane_end));
	if (!p->threads || !p->pf_upto || !p->recent || !p->recent_at ||
	    !p->lane_end) {
		rc = -ENOMEM;
		goto err_destroy;
	}
	for (size_t l = 0; l < p->lanes; l++)
		p->lane_end[l] = bfs_order_lane_end(order, l);
	p->ra = o->readahead;
	if (o->rows_in_place) /* before any gather or read ahead */
		bfs_fetch_serve_mapped(o->fetch);
	for (; p->nthreads < p->o.workers; p->nthreads++) {
		rc = -pthread_create(&p->threads[p->nthreads], NULL,
				     worker_main, p);
		if (rc < 0)
			goto err_destroy;
	}
	*out = p;
	return 0;
err_destroy:
	bfs_pool_destroy(p);
	return rc;
}

void bfs_pool_destroy(struct bfs_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->work);
	pthread_cond_broadcast(&p->stopping);
	pthread_mutex_unlock(&p->lock);
	for (unsigned i = 0; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	for (unsigned i = 0; i < NBUCKETS; i++) {
		while (p->table[i]) {
			struct bfs_batch *b = p->table[i];

			b->refs = 0;
			if (b->state == B_BUSY)
				b->state = B_FAILED;
			unlink_batch(p, b);
		}
	}
	while (p->nspare)
		drop_spare(p, p->nspare - 1);
	free(p->threads);
	free(p->pf_upto);
	free(p->recent);
	free(p->recent_at);
	free(p->lane_end);
	pthread_cond_destroy(&p->stopping);
	pthread_cond_destroy(&p->work);
	pthread_condattr_destroy(&p->clock);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

/* The part of the prefetch window after batch 'at' not scheduled yet, as
 * positions [*from, *to), and record it scheduled. Continuing the window:
 * only its new end. Behind it (a reader went back) or past it (a jump
 * ahead): the whole window, where the caller skips what is already
 * there. The window stays in at's lane (its rank's epochs). [L] */
static void window(struct bfs_pool *p, const struct bfs_batch_loc *at,
		   uint64_t *from, uint64_t *to)
{
	uint64_t end = p->lane_end[at->id.lane];
	uint64_t *upto = &p->pf_upto[at->id.lane];

	*from = at->pos + 1;
	*to = at->pos + 1 + p->o.prefetch;
	if (*to > end)
		*to = end;
	if (*upto > *from && *upto <= *to)
		*from = *upto;
	if (*to > *upto)
		*upto = *to;
}

/* Queue the prefetch window after batch 'at', skipping what the table
 * holds. [L] */
static void schedule(struct bfs_pool *p, const struct bfs_batch_loc *at)
{
	struct bfs_batch_loc q;
	uint64_t from, to;

	window(p, at, &from, &to);
	for (uint64_t pos = from; pos < to; pos++) {
		if (find(p, pos) || bfs_order_locate_pos(p->order, pos, &q) < 0)
			continue; /* held, or a hole (a resumed epoch's end) */
		if (!batch_new(p, &q, false))
			break;
	}
}

/* Whether 'at' names a batch of the pool's order (one it located). */
static bool known(const struct bfs_pool *p, const struct bfs_batch_loc *at)
{
	return at->id.lane < p->lanes && at->pos < p->lane_end[at->id.lane];
}

void bfs_pool_advise(struct bfs_pool *p, const struct bfs_batch_loc *at,
		     const uint64_t *idx)
{
	uint64_t from, to, n = 0;
	struct bfs_batch_loc q;
	uint64_t *more;

	if (!known(p, at))
		return;
	bfs_readahead_follow(p->ra, at);
	bfs_readahead_rows(p->ra, idx, at->rows);
	pthread_mutex_lock(&p->lock);
	window(p, at, &from, &to);
	pthread_mutex_unlock(&p->lock);
	more = from < to
		   ? malloc((p->rows_max ? p->rows_max : 1) * sizeof(*more))
		   : NULL;
	for (uint64_t pos = from; more && pos < to; pos++, n++)
		if (bfs_order_locate_pos(p->order, pos, &q) == 0 &&
		    bfs_order_batch(p->order, q.id, more) == 0)
			bfs_readahead_rows(p->ra, more, q.rows);
	free(more);
	pthread_mutex_lock(&p->lock);
	p->st.batches_advised += n;
	pthread_mutex_unlock(&p->lock);
}

/* Note a read that timed out: epoch, batch and its first sample. Called
 * without the lock (it recomputes the batch's indices). */
static void log_timeout(struct bfs_pool *p, const struct bfs_batch_loc *at)
{
	uint64_t rows = at->rows;
	uint64_t *idx = malloc((rows ? rows : 1) * sizeof(*idx));
	long long first = -1;

	if (idx && bfs_order_batch(p->order, at->id, idx) == 0 && rows)
		first = (long long)idx[0];
	free(idx);
	bfs_pool_note_error(p, at->id,
			    "not ready after %u ms (sample %lld first of %llu "
			    "samples): read fails with EIO",
			    p->o.timeout_ms, first, (unsigned long long)rows);
}

/* Count the acquire in the prefetch stats and make b demanded. [L] */
static void note_demand(struct bfs_pool *p, struct bfs_batch *b)
{
	if (b->demanded)
		return;
	b->demanded = true;
	if (b->state == B_QUEUED) {
		p->st.prefetch_misses++;
		list_del(&p->queue, b);
		list_push_head(&p->queue, b);
	} else {
		p->st.prefetch_hits++;
	}
}

/* The flag of the request this thread serves (bfs_cancel_enter), or
 * NULL: thread-local, so that no call between the adapter and acquire
 * carries it (fs/pool.h: interrupts). */
static _Thread_local struct bfs_cancel *thread_cancel;

void bfs_cancel_enter(struct bfs_cancel *c)
{
	thread_cancel = c;
}

void bfs_cancel_leave(void)
{
	thread_cancel = NULL;
}

static bool cancelled(void)
{
	return thread_cancel && atomic_load(&thread_cancel->set);
}

void bfs_pool_interrupt(struct bfs_pool *p)
{
	/* under the lock: a waiter looks at its flag, then waits, without
	 * letting go of it in between, so the wake-up cannot fall there */
	pthread_mutex_lock(&p->lock);
	wake(p, NULL);
	pthread_mutex_unlock(&p->lock);
}

/* Wait until b is READY or FAILED, the deadline dl passed or this
 * thread's request was interrupted: on a condition of its own, on
 * p->waiters meanwhile. [L] */
static void wait_for(struct bfs_pool *p, struct bfs_batch *b,
		     const struct timespec *dl)
{
	struct waiter w = {.b = b, .next = p->waiters};

	if (b->state != B_QUEUED && b->state != B_BUSY)
		return;
	pthread_cond_init(&w.cond, &p->clock);
	if (w.next)
		w.next->prev = &w;
	p->waiters = &w;
	while ((b->state == B_QUEUED || b->state == B_BUSY) && !cancelled() &&
	       pthread_cond_timedwait(&w.cond, &p->lock, dl) != ETIMEDOUT)
		;
	if (w.prev)
		w.prev->next = w.next;
	else
		p->waiters = w.next;
	if (w.next)
		w.next->prev = w.prev;
	pthread_cond_destroy(&w.cond);
}

static int acquire(struct bfs_pool *p, const struct bfs_batch_loc *at,
		   bool prefetch, struct bfs_batch **out)
{
	uint64_t t0 = now_ns();
	struct timespec dl;
	struct bfs_batch *b;
	int rc = 0;

	*out = NULL;
	if (!known(p, at))
		return -ENOENT;
	if (prefetch) /* the readers are here: read the batches after it */
		bfs_readahead_follow(p->ra, at);
	dl = deadline_in(p->o.timeout_ms);
	pthread_mutex_lock(&p->lock);
	b = find(p, at->pos);
	if (!b) {
		b = batch_new(p, at, true);
		p->st.prefetch_misses++;
	} else {
		note_demand(p, b);
	}
	if (prefetch) {
		/* pos + 1: the window's first position; 0 = an empty slot */
		size_t l = at->id.lane;

		p->recent[l * RECENT + p->recent_at[l]++ % RECENT] =
		    at->pos + 1;
		schedule(p, at);
	}
	if (!b) {
		rc = -ENOMEM;
		goto out_unlock;
	}
	b->refs++;
	wait_for(p, b, &dl);
	if (b->state == B_READY) {
		if (b->in_table) { /* most recently used */
			list_del(&p->lru, b);
			list_push_head(&p->lru, b);
		}
		*out = b;
	} else {
		/* interrupted: b stays queued or gathering, for later
		 * readers (a demand still: it keeps its place) */
		rc = b->state == B_FAILED ? b->err
		     : cancelled()	  ? -EINTR
					  : -ETIMEDOUT;
		if (rc == -ETIMEDOUT)
			p->st.timeouts++;
		if (--b->refs == 0 && !b->in_table && b->state != B_BUSY)
			batch_free(p, b);
	}
	p->st.read_wait_ns += now_ns() - t0;
out_unlock:
	pthread_mutex_unlock(&p->lock);
	if (rc == -ETIMEDOUT)
		log_timeout(p, at);
	return rc;
}

int bfs_pool_acquire(struct bfs_pool *p, const struct bfs_batch_loc *at,
		     struct bfs_batch **out)
{
	return acquire(p, at, true, out);
}

int bfs_pool_acquire_alone(struct bfs_pool *p, const struct bfs_batch_loc *at,
			   struct bfs_batch **out)
{
	return acquire(p, at, false, out);
}

void bfs_pool_release(struct bfs_pool *p, struct bfs_batch *b)
{
	if (!b)
		return;
	pthread_mutex_lock(&p->lock);
	put_ref(p, b);
	pthread_mutex_unlock(&p->lock);
}

void bfs_pool_hold(struct bfs_pool *p, struct bfs_batch *b)
{
	pthread_mutex_lock(&p->lock);
	b->refs++;
	pthread_mutex_unlock(&p->lock);
}

void bfs_pool_release_last(struct bfs_pool *p, struct bfs_batch *b)
{
	if (!b)
		return;
	pthread_mutex_lock(&p->lock);
	if (b->refs == 1)
		unlink_batch(p, b); /* b->refs > 0: freed by put_ref */
	put_ref(p, b);
	pthread_mutex_unlock(&p->lock);
}

void bfs_pool_drop(struct bfs_pool *p, struct bfs_batch *b)
{
	pthread_mutex_lock(&p->lock);
	unlink_batch(p, b); /* BUSY or referenced: freed later */
	pthread_mutex_unlock(&p->lock);
}

const void *bfs_batch_data(const struct bfs_batch *b)
{
	return b->buf;
}

int bfs_batch_fd(const struct bfs_batch *b)
{
	return b->fd;
}

int bfs_batch_tag(const struct bfs_batch *b)
{
	return atomic_load(&b->tag);
}

bool bfs_batch_set_tag(struct bfs_batch *b, int tag)
{
	int none = 0;

	return atomic_compare_exchange_strong(&b->tag, &none, tag);
}

uint64_t bfs_batch_size(const struct bfs_batch *b)
{
	return b->size;
}

void bfs_pool_stats(struct bfs_pool *p, struct bfs_pool_stats *out)
{
	pthread_mutex_lock(&p->lock);
	fds_refresh(p); /* the limit now, not at start */
	*out = p->st;
	pthread_mutex_unlock(&p->lock);
	bfs_readahead_stats(p->ra, &out->ra);
}
