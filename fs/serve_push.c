/* fs/serve_push: push mode (serve.h): its page-cache ledger and the one
 * thread that talks to the kernel's page cache. A way of serving
 * (serve_impl.h): it calls the pool, the order and serve_batch.c, never
 * the core; the core reaches it through its table (bfs_serve_push_ops).
 *
 * Push mode stores each batch whole into the kernel's page cache (the
 * adapter's store callback: FUSE's notify_store) when it is opened, or
 * earlier, right after a worker gathered it, when the kernel already knows
 * its inode (looked up, listed with readdirplus). read() and mmap() faults
 * are then page-cache hits with no round trip, and the pool drops its
 * copy. If the kernel loses pages, READs come and the pool gathers the same
 * bytes again (batches are pure functions of dataset, options, rank, epoch
 * and batch).
 *
 * The kernel's thread. A store (and an invalidation) locks each page it
 * touches, and waits for a page that a READ in flight holds locked until
 * that READ is answered: by a FUSE thread. Were stores made on FUSE
 * threads, enough of them waiting at once would leave no thread to answer
 * the READs they wait for, and the mount would hang for good (every
 * thread in D state in the kernel). So no FUSE thread and no worker ever
 * calls store or inval: they queue the work for this one thread, which
 * makes every such call, and nobody waits on it without a bound (an open
 * waits at most PUSH_WAIT_S for its batch's store, then lets READs serve
 * it). At unmount the adapter keeps answering requests until the thread
 * is out of the kernel (bfs_serve_stop_kernel, bfs_serve_kernel_busy).
 *
 * The ledger is a FIFO of the batches pushed (keyed by their position,
 * fs/order.h: batch identity), with their sizes and how many files have them
 * open. It answers "is this batch already in the kernel?" (a second open,
 * concurrent or later, does not gather and push again) and keeps the
 * kernel's copies under a byte budget (--page-cache-mb): past it, the
 * oldest batches nobody has open are invalidated, so the page cache does
 * not grow with every epoch read. Each entry has an id of its own: a file
 * closes the entry it opened, never a later entry of the same batch.
 *
 * Lock: pb->lock guards the ledger and the queue; no kernel call, no pool
 * call is made with it held. */
#include "fs/serve_impl.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>

#include "fs/log.h"

#define PUSHED_MAX  4096u	/* batches tracked at once */
#define TRIM_BATCH  64u		/* invalidations per trim round */
#define STORE_CHUNK (64u << 20) /* bytes per notify_store (u32 lengths) */
#define PUSH_WAIT_S 2		/* an open waits this long for a push */
#define QUEUE_MAX   256u	/* stores queued for the kernel's thread */

struct pushed_entry {
	uint64_t key; /* the batch's position + 1; 0: forgotten (a failed
		       * push) */
	uint64_t id;  /* this entry's own number, never reused */
	uint64_t bytes;
	unsigned opens;
	bool pushing; /* queued, not stored yet: opens wait (pushed_enter) */
};

struct push_job {
	struct bfs_batch *b;	 /* a reference the job holds */
	struct bfs_batch_id bid; /* which batch */
	uint64_t id;		 /* its ledger entry */
};

struct bfs_pushed {
	struct bfs_serve_base *s; /* the mount's (the way's base) */
	pthread_mutex_t lock;
	pthread_cond_t stored; /* [L] some entry stopped 'pushing' */
	pthread_cond_t work;   /* [L] a job, a trim or stop for the thread */
	uint64_t budget;
	uint64_t bytes;			      /* [L] sum of entries */
	uint64_t next_id;		      /* [L] */
	unsigned head, count;		      /* [L] oldest at head */
	struct pushed_entry ring[PUSHED_MAX]; /* [L] */
	struct push_job queue[QUEUE_MAX];     /* [L] */
	unsigned qhead, qcount;		      /* [L] */
	bool trim;			      /* [L] a trim was asked for */
	bool stop;			      /* [L] no new kernel call */
	bool in_kernel;			      /* [L] a call is in flight */
	bool started;
	pthread_t thread;
};

static void *kernel_thread(void *arg);

/* The ledger, kept under 'budget' bytes, and the kernel's thread, into
 * *out (set before the thread starts; a half-made one is destroyed by
 * pushed_destroy). 0 or -errno. */
static int pushed_create(struct bfs_pushed **out, struct bfs_serve_base *s,
			 uint64_t budget)
{
	struct bfs_pushed *pb = calloc(1, sizeof(*pb));
	sigset_t all, old;
	int rc;

	*out = pb;
	if (!pb)
		return -ENOMEM;
	pb->s = s;
	pthread_mutex_init(&pb->lock, NULL);
	pthread_cond_init(&pb->stored, NULL);
	pthread_cond_init(&pb->work, NULL);
	pb->budget = budget;
	/* asynchronous signals belong to the FUSE loop */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	rc = -pthread_create(&pb->thread, NULL, kernel_thread, pb);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pb->started = rc == 0;
	return rc;
}

/* Stop the thread: queued stores are dropped (their batches released:
 * the pool must still be there), and workers that push from then on
 * find the ledger closed. Accepts NULL. */
static void pushed_stop(struct bfs_pushed *pb)
{
	if (!pb)
		return;
	pthread_mutex_lock(&pb->lock);
	pb->stop = true;
	pthread_cond_broadcast(&pb->work);
	pthread_mutex_unlock(&pb->lock);
	if (pb->started)
		pthread_join(pb->thread, NULL);
	pb->started = false;
}

/* Stop, then free (after the pool: its workers call into the ledger).
 * Accepts NULL. */
static void pushed_destroy(struct bfs_pushed *pb)
{
	if (!pb)
		return;
	pushed_stop(pb);
	pthread_cond_destroy(&pb->work);
	pthread_cond_destroy(&pb->stored);
	pthread_mutex_destroy(&pb->lock);
	free(pb);
}

/* The entry of key, newest first (recent batches are the usual hits). [L] */
static struct pushed_entry *find_key(struct bfs_pushed *pb, uint64_t key)
{
	for (unsigned i = pb->count; i-- > 0;) {
		struct pushed_entry *x = &pb->ring[(pb->head + i) % PUSHED_MAX];

		if (x->key == key)
			return x;
	}
	return NULL;
}

/* The entry numbered id, if it is still on record. [L] */
static struct pushed_entry *find_id(struct bfs_pushed *pb, uint64_t id)
{
	for (unsigned i = pb->count; i-- > 0;) {
		struct pushed_entry *x = &pb->ring[(pb->head + i) % PUSHED_MAX];

		if (x->id == id)
			return x;
	}
	return NULL;
}

/* Record batch key, 'opens' = 1 for an open handle, 0 for a worker
 * pushing ahead of any open; *id is the entry's. Returns 1: new entry,
 * the caller has the batch pushed (push_queue); 0: already pushed, or
 * being pushed (an open waits for that, PUSH_WAIT_S at most: its reads
 * would otherwise be READs racing the store); -ENOSPC: no slot (workers
 * leave a quarter of the slots to opens), nothing tracked: READs serve. */
static int pushed_enter(struct bfs_pushed *pb, uint64_t key, uint64_t bytes,
			unsigned opens, uint64_t *id)
{
	struct pushed_entry *x;
	int rc = 0;

	pthread_mutex_lock(&pb->lock);
	x = find_key(pb, key);
	if (x) {
		x->opens += opens;
		*id = x->id;
	} else if (pb->stop ||
		   pb->count >= (opens ? PUSHED_MAX : PUSHED_MAX / 4 * 3)) {
		rc = -ENOSPC;
	} else {
		x = &pb->ring[(pb->head + pb->count++) % PUSHED_MAX];
		*x = (struct pushed_entry){.key = key,
					   .id = ++pb->next_id,
					   .bytes = bytes,
					   .opens = opens,
					   .pushing = true};
		pb->bytes += bytes;
		*id = x->id;
		rc = 1;
	}
	pthread_mutex_unlock(&pb->lock);
	return rc;
}

/* Wait, PUSH_WAIT_S at most, until entry id is no longer being pushed. */
static void pushed_wait(struct bfs_pushed *pb, uint64_t id)
{
	struct pushed_entry *x;
	struct timespec until;

	pthread_mutex_lock(&pb->lock);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += PUSH_WAIT_S;
	while ((x = find_id(pb, id)) && x->pushing)
		if (pthread_cond_timedwait(&pb->stored, &pb->lock, &until))
			break; /* bounded: READs serve the batch */
	pthread_mutex_unlock(&pb->lock);
}

/* The push of entry id is over: stored, or not (the entry is forgotten:
 * the kernel holds none or part of it, READs serve the rest). Waiting
 * opens go on. */
static void pushed_done(struct bfs_pushed *pb, uint64_t id, bool stored)
{
	struct pushed_entry *x;

	pthread_mutex_lock(&pb->lock);
	x = find_id(pb, id);
	if (x) {
		x->pushing = false;
		if (!stored) {
			pb->bytes -= x->bytes;
			x->key = 0; /* a hole, trimmed in turn */
		}
	}
	pthread_cond_broadcast(&pb->stored);
	pthread_mutex_unlock(&pb->lock);
}

/* A file on entry id closes: the kernel's thread trims the page cache. */
static void pushed_close(struct bfs_pushed *pb, uint64_t id)
{
	struct pushed_entry *x;

	pthread_mutex_lock(&pb->lock);
	x = find_id(pb, id);
	if (x && x->opens)
		x->opens--;
	pb->trim = true;
	pthread_cond_signal(&pb->work);
	pthread_mutex_unlock(&pb->lock);
}

/* Hand the store of b (batch bid, entry id; the reference passes to the
 * job) to the kernel's thread. false when the queue is full or stopping:
 * the caller still holds b, and the entry is forgotten. */
static bool push_queue(struct bfs_pushed *pb, struct bfs_batch *b,
		       struct bfs_batch_id bid, uint64_t id)
{
	bool queued;

	pthread_mutex_lock(&pb->lock);
	queued = !pb->stop && pb->qcount < QUEUE_MAX;
	if (queued) {
		pb->queue[(pb->qhead + pb->qcount++) % QUEUE_MAX] =
		    (struct push_job){.b = b, .bid = bid, .id = id};
		pthread_cond_signal(&pb->work);
	}
	pthread_mutex_unlock(&pb->lock);
	if (!queued)
		pushed_done(pb, id, false);
	return queued;
}

/* Take the oldest entries nobody has open off the record until it is
 * under budget (and a quarter of the slots are free); their keys go to
 * 'keys' for invalidation. Open ones, and ones still being pushed, move
 * to the tail. Returns how many. [L] */
static unsigned pushed_trim(struct bfs_pushed *pb, uint64_t *keys)
{
	unsigned n = 0;

	for (unsigned seen = 0, len = pb->count;
	     seen < len && n < TRIM_BATCH &&
	     (pb->bytes > pb->budget || pb->count > PUSHED_MAX / 4 * 3);
	     seen++) {
		struct pushed_entry x = pb->ring[pb->head];

		pb->head = (pb->head + 1) % PUSHED_MAX;
		pb->count--;
		if (x.opens || x.pushing) { /* keep it, newest */
			pb->ring[(pb->head + pb->count++) % PUSHED_MAX] = x;
			continue;
		}
		if (x.key) {
			pb->bytes -= x.bytes;
			keys[n++] = x.key;
		}
	}
	return n;
}

/* Store the whole batch bid (b) into the kernel's page cache, in chunks
 * (the store message has 32-bit lengths): the one place that stores, for
 * a push at open and a worker's early push alike, on the kernel's thread
 * only. */
static int store_batch(struct bfs_serve_base *s, struct bfs_batch_id bid,
		       const struct bfs_batch *b)
{
	const char *data = bfs_batch_data(b);
	uint64_t size = bfs_batch_size(b);
	int rc = 0;

	for (uint64_t off = 0; rc == 0 && off < size; off += STORE_CHUNK)
		rc = s->k.store(s->k.arg, bid, off, data + off,
				size - off < STORE_CHUNK ? size - off
							 : STORE_CHUNK);
	return rc;
}

/* The kernel's thread runs a job: stored, the pool drops its copy; not,
 * the entry is forgotten and READs serve the batch. */
static void run_job(struct bfs_pushed *pb, const struct push_job *j)
{
	struct bfs_serve_base *s = pb->s;
	bool stored = store_batch(s, j->bid, j->b) == 0;

	if (stored) {
		char name[80];

		if (bfs_log_wants(BFS_LOG_DEBUG)) {
			bfs_order_batch_name(s->order, j->bid, name,
					     sizeof(name));
			bfs_log(BFS_LOG_DEBUG, "serve",
				"%s: served (%llu bytes), pushed whole into "
				"the page cache",
				name, (unsigned long long)bfs_batch_size(j->b));
		}
		atomic_fetch_add(&s->c.pushed, 1);
		atomic_fetch_add(&s->c.served, 1);
		atomic_fetch_add(&s->c.bytes, bfs_batch_size(j->b));
		bfs_pool_drop(s->pool, j->b);
	}
	pushed_done(pb, j->id, stored);
	bfs_pool_release(s->pool, j->b);
}

/* Invalidate the batches of keys[0 .. n). */
static void run_trim(struct bfs_serve_base *s, const uint64_t *keys, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		int rc =
		    s->k.inval(s->k.arg, bfs_order_id(s->order, keys[i] - 1));

		/* -ENOENT: the kernel forgot the inode, pages and all */
		if (rc == 0 || rc == -ENOENT)
			atomic_fetch_add(&s->c.drops, 1);
	}
}

/* The one caller of store and inval: queued stores in order, and after
 * each (and at each release) the page cache trimmed to its budget. Until
 * stopped; jobs left then are dropped, their entries forgotten. */
static void *kernel_thread(void *arg)
{
	struct bfs_pushed *pb = arg;
	struct bfs_serve_base *s = pb->s;

	pthread_mutex_lock(&pb->lock);
	for (;;) {
		uint64_t keys[TRIM_BATCH];
		struct push_job j;
		unsigned n;

		while (!pb->stop && !pb->qcount && !pb->trim)
			pthread_cond_wait(&pb->work, &pb->lock);
		if (pb->stop)
			break;
		pb->in_kernel = true;
		if (pb->qcount) {
			j = pb->queue[pb->qhead];
			pb->qhead = (pb->qhead + 1) % QUEUE_MAX;
			pb->qcount--;
			pb->trim = true; /* after the store */
			pthread_mutex_unlock(&pb->lock);
			run_job(pb, &j);
			pthread_mutex_lock(&pb->lock);
		} else {
			n = pushed_trim(pb, keys);
			pb->trim = n == TRIM_BATCH; /* more to come */
			pthread_mutex_unlock(&pb->lock);
			run_trim(s, keys, n);
			pthread_mutex_lock(&pb->lock);
		}
		pb->in_kernel = false;
		pthread_cond_broadcast(&pb->stored); /* settle() waits */
	}
	while (pb->qcount) { /* stopped: what was queued is not pushed */
		struct push_job j = pb->queue[pb->qhead];

		pb->qhead = (pb->qhead + 1) % QUEUE_MAX;
		pb->qcount--;
		pthread_mutex_unlock(&pb->lock);
		pushed_done(pb, j.id, false);
		bfs_pool_release(s->pool, j.b);
		pthread_mutex_lock(&pb->lock);
	}
	pb->in_kernel = false;
	pthread_cond_broadcast(&pb->stored);
	pthread_mutex_unlock(&pb->lock);
	return NULL;
}

/* The ledger's key of batch 'at': its position + 1 (0 is no key). */
static uint64_t key_of(const struct bfs_batch_loc *at)
{
	return at->pos + 1;
}

/* Pool on_ready hook (early push): push b right after a worker gathered
 * it, before anyone opens it (when the kernel knows its inode). */
static void push_ready(void *arg, struct bfs_batch *b,
		       const struct bfs_batch_loc *at)
{
	struct bfs_serve_way *w = arg;
	struct bfs_pushed *pb = w->state;
	uint64_t id;

	/* A failed store is usually -ENOENT: the kernel has no inode yet */
	if (pushed_enter(pb, key_of(at), bfs_batch_size(b), 0, &id) <= 0)
		return;
	bfs_pool_hold(pb->s->pool, b);
	if (!push_queue(pb, b, at->id, id))
		bfs_pool_release(pb->s->pool, b);
}

static int push_create(struct bfs_serve_way *w, struct bfs_pool_opts *po)
{
	struct bfs_pushed *pb;
	int rc = pushed_create(&pb, w->base, w->base->o.page_cache_bytes);

	w->state = pb;
	if (w->base->o.early_push)
		po->on_ready = push_ready;
	return rc;
}

static void push_stop(struct bfs_serve_way *w)
{
	pushed_stop(w->state); /* its jobs hold batches */
}

static void push_destroy(struct bfs_serve_way *w)
{
	pushed_destroy(w->state); /* workers pushed into it */
	w->state = NULL;
}

/* Push-mode release of f: its ledger entry closes, the page cache is
 * trimmed to its budget. */
static void push_release(struct bfs_serve_way *w, struct bfs_file *f)
{
	struct bfs_pushed *pb = w->state;

	if (f->push.open)
		pushed_close(pb, f->push.id);
	f->push.open = false;
}

/* Push-mode open of batch file f: have it stored whole into the page
 * cache unless it is there already, and wait for that (a bounded while:
 * READs serve what is not stored). 0 or -errno (the batch cannot be
 * had). */
static int push_open(struct bfs_serve_way *w, struct bfs_file *f,
		     struct bfs_serve_how *how)
{
	struct bfs_serve_base *s = w->base;
	struct bfs_pushed *pb = w->state;
	struct bfs_batch *b = NULL;
	int rc = pushed_enter(pb, key_of(&f->at), f->size, 1, &f->push.id);

	how->keep_cache = true; /* the pages pushed stay valid */
	f->push.open = rc >= 0;
	if (rc == 0) /* pushed or being pushed: ready before it was asked */
		atomic_fetch_add(&s->c.pushed_hits, 1);
	if (rc > 0) {
		rc = bfs_pool_acquire(s->pool, &f->at, &b);
		if (rc < 0)
			pushed_done(pb, f->push.id, false);
		else if (!push_queue(pb, b, f->at.id, f->push.id))
			bfs_pool_release(s->pool, b);
	}
	if (rc < 0 && rc != -ENOSPC) {
		push_release(w, f);
		return rc;
	}
	if (f->push.open) { /* else (-ENOSPC) READs serve it */
		pushed_wait(pb, f->push.id);
		atomic_store(&f->consumed, true); /* counted whole */
	}
	return 0;
}

/* A READ of a pushed batch: the kernel lost its pages (or never had them:
 * no slot, a failed store). The pool's buffer answers, gathered alone:
 * its successors are pushed, not read. */
static int push_read(struct bfs_serve_way *w, struct bfs_file *f, uint64_t off,
		     uint64_t n, struct bfs_serve_reply *r)
{
	atomic_fetch_add(&w->base->c.reads, 1);
	atomic_fetch_add(&w->base->c.refills, 1);
	return bfs_serve_read_buffer(w->base, w->base->pool, f, off, n, true,
				     r);
}

static void push_stop_kernel(struct bfs_serve_way *w)
{
	struct bfs_pushed *pb = w->state;

	pthread_mutex_lock(&pb->lock);
	pb->stop = true;
	pthread_cond_broadcast(&pb->work);
	pthread_mutex_unlock(&pb->lock);
}

static bool push_kernel_busy(struct bfs_serve_way *w)
{
	struct bfs_pushed *pb = w->state;
	bool busy;

	pthread_mutex_lock(&pb->lock);
	busy = pb->in_kernel || pb->qcount;
	pthread_mutex_unlock(&pb->lock);
	return busy;
}

static void push_settle(struct bfs_serve_way *w)
{
	struct bfs_pushed *pb = w->state;

	pthread_mutex_lock(&pb->lock);
	while (pb->in_kernel || pb->qcount || (pb->trim && !pb->stop))
		pthread_cond_wait(&pb->stored, &pb->lock);
	pthread_mutex_unlock(&pb->lock);
}

const struct bfs_serve_ops bfs_serve_push_ops = {
    .name = "push",
    .create = push_create,
    .stop = push_stop,
    .destroy = push_destroy,
    .stop_kernel = push_stop_kernel,
    .kernel_busy = push_kernel_busy,
    .settle = push_settle,
    .open = push_open,
    .read = push_read,
    .release = push_release,
};
