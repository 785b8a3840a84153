/* fs/serve_push: the push mode's page-cache ledger (serve_impl.h).
 *
 * Push mode stores each batch whole into the kernel's page cache (the
 * adapter's store callback: FUSE's notify_store) when it is opened, or
 * earlier, by the worker that gathered it, when the kernel already knows
 * its inode (looked up, listed with readdirplus). read() and mmap() faults
 * are then page-cache hits with no round trip, and the pool drops its
 * copy. If the kernel loses pages, READs come and the pool gathers the same
 * bytes again (batches are pure functions of dataset, options, epoch and
 * batch).
 *
 * The ledger is a FIFO of the batches pushed (keyed by their position in
 * the stream of epochs), with their sizes and
 * how many files have them open. It answers "is this batch already in the
 * kernel?" (a second open, concurrent or later, does not gather and push
 * again) and keeps the kernel's copies under a byte budget
 * (--page-cache-mb): past it, the oldest batches nobody has open are
 * invalidated (the inval callback), so the page cache does not grow with
 * every epoch read. */
#include "fs/serve_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "fs/log.h"

#define PUSHED_MAX  4096u	/* batches tracked at once */
#define TRIM_BATCH  64u		/* invalidations per trim call */
#define STORE_CHUNK (64u << 20) /* bytes per notify_store (u32 lengths) */
#define PUSH_WAIT_S 2		/* an open waits this long for a push */

struct pushed_entry {
	uint64_t key; /* the batch's pos + 1 (e * len + k + 1); 0: forgotten
		       * (a failed push) */
	uint64_t bytes;
	unsigned opens;
	bool pushing; /* entered, not stored yet: opens wait (pushed_enter) */
};

struct bfs_pushed {
	pthread_mutex_t lock;
	pthread_cond_t stored; /* [L] some entry stopped 'pushing' */
	uint64_t budget;
	uint64_t len;			      /* batches per epoch */
	uint64_t bytes;			      /* [L] sum of entries */
	unsigned head, count;		      /* [L] oldest at head */
	struct pushed_entry ring[PUSHED_MAX]; /* [L] */
};

int bfs_pushed_create(struct bfs_pushed **out, uint64_t budget, uint64_t len)
{
	struct bfs_pushed *pb = calloc(1, sizeof(*pb));

	*out = pb;
	if (!pb)
		return -ENOMEM;
	pthread_mutex_init(&pb->lock, NULL);
	pthread_cond_init(&pb->stored, NULL);
	pb->budget = budget;
	pb->len = len ? len : 1;
	return 0;
}

void bfs_pushed_destroy(struct bfs_pushed *pb)
{
	if (!pb)
		return;
	pthread_cond_destroy(&pb->stored);
	pthread_mutex_destroy(&pb->lock);
	free(pb);
}

/* The entry of key, newest first (recent batches are the usual hits). [L] */
static struct pushed_entry *pushed_find(struct bfs_pushed *pb, uint64_t key)
{
	for (unsigned i = pb->count; i-- > 0;) {
		struct pushed_entry *x = &pb->ring[(pb->head + i) % PUSHED_MAX];

		if (x->key == key)
			return x;
	}
	return NULL;
}

/* Record batch key, 'opens' = 1 for an open handle, 0 for a worker
 * pushing ahead of any open. Returns 1: new entry, the caller pushes the
 * batch (then pushed_stored); 0: already pushed; -ENOSPC: no slot
 * (workers leave a quarter of the slots to opens), nothing tracked: READs
 * serve. An open that finds the batch still being pushed waits for the
 * store: were it to return, its reads would be READs locking the pages the
 * store then waits for, answered only by another FUSE thread (none once
 * the loop stops at SIGTERM: the daemon hung). The wait is bounded
 * (PUSH_WAIT_S), so opens never hold every FUSE thread. */
static int pushed_enter(struct bfs_pushed *pb, uint64_t key, uint64_t bytes,
			unsigned opens)
{
	struct pushed_entry *x;
	struct timespec until;
	int rc = 0;

	pthread_mutex_lock(&pb->lock);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += PUSH_WAIT_S;
	while (opens && (x = pushed_find(pb, key)) && x->pushing)
		if (pthread_cond_timedwait(&pb->stored, &pb->lock, &until))
			break; /* bounded: FUSE threads must not all wait */
	x = pushed_find(pb, key);
	if (x) {
		x->opens += opens;
	} else if (pb->count >= (opens ? PUSHED_MAX : PUSHED_MAX / 4 * 3)) {
		rc = -ENOSPC;
	} else {
		x = &pb->ring[(pb->head + pb->count++) % PUSHED_MAX];
		*x = (struct pushed_entry){.key = key,
					   .bytes = bytes,
					   .opens = opens,
					   .pushing = true};
		pb->bytes += bytes;
		rc = 1;
	}
	pthread_mutex_unlock(&pb->lock);
	return rc;
}

/* The push of key entered by pushed_enter is over (stored or failed):
 * opens waiting for it go on. */
static void pushed_stored(struct bfs_pushed *pb, uint64_t key)
{
	struct pushed_entry *x;

	pthread_mutex_lock(&pb->lock);
	x = pushed_find(pb, key);
	if (x)
		x->pushing = false;
	pthread_cond_broadcast(&pb->stored);
	pthread_mutex_unlock(&pb->lock);
}

/* A handle of key closes; 'failed' = its push failed: forget the entry
 * (the kernel holds none or part of it; READs serve the rest). */
static void pushed_close(struct bfs_pushed *pb, uint64_t key, bool failed)
{
	struct pushed_entry *x;

	pthread_mutex_lock(&pb->lock);
	x = pushed_find(pb, key);
	if (x && x->opens)
		x->opens--;
	if (x && failed) {
		pb->bytes -= x->bytes;
		*x = (struct pushed_entry){0}; /* a hole, trimmed in turn */
	}
	pthread_mutex_unlock(&pb->lock);
}

/* Take the oldest entries nobody has open off the record until it is
 * under budget (and a quarter of the slots are free); their keys go to
 * 'keys' for invalidation. Open ones move to the tail. Returns how many. */
static unsigned pushed_trim(struct bfs_pushed *pb, uint64_t *keys)
{
	unsigned n = 0;

	pthread_mutex_lock(&pb->lock);
	for (unsigned seen = 0, len = pb->count;
	     seen < len && n < TRIM_BATCH &&
	     (pb->bytes > pb->budget || pb->count > PUSHED_MAX / 4 * 3);
	     seen++) {
		struct pushed_entry x = pb->ring[pb->head];

		pb->head = (pb->head + 1) % PUSHED_MAX;
		pb->count--;
		if (x.opens) { /* still open: keep it, newest */
			pb->ring[(pb->head + pb->count++) % PUSHED_MAX] = x;
			continue;
		}
		pb->bytes -= x.bytes;
		if (x.key)
			keys[n++] = x.key;
	}
	pthread_mutex_unlock(&pb->lock);
	return n;
}

/* Invalidate what pushed_trim says is over budget. Called with no lock
 * held: the kernel waits on pages locked by a READ in flight, which a FUSE
 * thread answers. */
static void trim_page_cache(struct bfs_serve *s)
{
	uint64_t keys[TRIM_BATCH];
	unsigned n = pushed_trim(s->pushed, keys);

	for (unsigned i = 0; i < n; i++) {
		uint64_t pos = keys[i] - 1;
		int rc = s->k.inval(s->k.arg, pos / s->pushed->len,
				    pos % s->pushed->len);

		/* -ENOENT: the kernel forgot the inode, pages and all */
		if (rc == 0 || rc == -ENOENT)
			atomic_fetch_add(&s->c.drops, 1);
	}
}

/* The ledger's key of batch k of epoch e. */
static uint64_t key_of(const struct bfs_pushed *pb, uint64_t e, uint64_t k)
{
	return e * pb->len + k + 1;
}

/* Store the whole batch k of epoch e (b) into the kernel's page cache, in
 * chunks (the store message has 32-bit lengths). */
static int store_batch(struct bfs_serve *s, uint64_t e, uint64_t k,
		       const struct bfs_batch *b)
{
	const char *data = bfs_batch_data(b);
	uint64_t size = bfs_batch_size(b);
	int rc = 0;

	for (uint64_t off = 0; rc == 0 && off < size; off += STORE_CHUNK)
		rc = s->k.store(s->k.arg, e, k, off, data + off,
				size - off < STORE_CHUNK ? size - off
							 : STORE_CHUNK);
	return rc;
}

/* Push b (batch k of epoch e, referenced or BUSY; NULL: it could not be
 * had), just entered in the ledger: stored, the pool drops its copy; not,
 * the entry is forgotten and READs serve the batch. Then keep the page
 * cache under budget. Returns whether b was stored. */
static bool push_entered(struct bfs_serve *s, uint64_t e, uint64_t k,
			 struct bfs_batch *b)
{
	uint64_t key = key_of(s->pushed, e, k);
	bool stored = b && store_batch(s, e, k, b) == 0;

	if (stored) {
		char name[80];

		bfs_order_batch_name(s->order, e, k, name, sizeof(name));
		bfs_log(BFS_LOG_DEBUG, "serve",
			"%s: served (%llu bytes), pushed whole into the page "
			"cache",
			name, (unsigned long long)bfs_batch_size(b));
		atomic_fetch_add(&s->c.pushed, 1);
		atomic_fetch_add(&s->c.served, 1);
		atomic_fetch_add(&s->c.bytes, bfs_batch_size(b));
		bfs_pool_drop(s->pool, b);
	} else {
		pushed_close(s->pushed, key, true);
	}
	pushed_stored(s->pushed, key);
	trim_page_cache(s);
	return stored;
}

void bfs_serve_push_ready(void *arg, struct bfs_batch *b, uint64_t e,
			  uint64_t k)
{
	struct bfs_serve *s = arg;

	/* A failed store is usually -ENOENT: the kernel has no inode yet */
	if (pushed_enter(s->pushed, key_of(s->pushed, e, k), bfs_batch_size(b),
			 0) > 0)
		push_entered(s, e, k, b);
}

int bfs_serve_push_open(struct bfs_serve *s, struct bfs_file *f)
{
	struct bfs_batch *b = NULL;
	int rc =
	    pushed_enter(s->pushed, key_of(s->pushed, f->e, f->k), f->size, 1);

	f->push_open = rc >= 0;
	if (rc == 0) /* in the page cache already: ready before it was asked */
		atomic_fetch_add(&s->c.pushed_hits, 1);
	if (rc <= 0)
		return 0;
	rc = bfs_pool_acquire(s->pool, f->e, f->k, &b);
	/* b: NULL when rc < 0 */
	f->push_open = push_entered(s, f->e, f->k, b);
	bfs_pool_release(s->pool, b);
	if (f->push_open)
		atomic_store(&f->consumed, true); /* counted whole */
	return rc;
}

void bfs_serve_push_release(struct bfs_serve *s, struct bfs_file *f)
{
	pushed_close(s->pushed, key_of(s->pushed, f->e, f->k), false);
	trim_page_cache(s); /* RELEASE is asynchronous: no reader waits */
}
