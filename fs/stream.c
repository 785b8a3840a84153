/* fs/stream: offsets of batches within an epoch's stream.
 *
 * Fixed layouts (no ragged field): every batch but the last has one size,
 * the layout's size for its rows whatever the epoch and batch numbers
 * (fs/layout.h: the data starts where 20-digit numbers would put it), so
 * batch k starts at k x that size; nothing is stored. Create checks the
 * invariant on the first and last batches of epoch 0 and of the widest
 * epoch number.
 *
 * Ragged layouts: an epoch's len + 1 offsets are measured with
 * bfs_layout_file_size (O(samples)) into a table, and tables are kept for
 * the epochs in flight: 2 per lane + 2 (a rank reading epoch N and asking
 * for N + 1, for every lane of a multi-rank mount), allocated as they are
 * first needed; the least recently used ready table goes.
 *
 * Thread-safety: one mutex over the slots, held only to look up, claim
 * and publish them (and for a binary search of a ready table). A table is
 * measured outside it by the thread that claimed its slot (state
 * MEASURING); others asking for that epoch wait on 'ready', others
 * proceed. A failed measurement frees its slot and wakes the waiters, who
 * try again (each then measures, or fails, itself). */
#include "fs/stream.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

enum slot_state { FREE, MEASURING, READY };

struct slot {
	enum slot_state state;
	uint64_t e, stamp;
	uint64_t *off; /* [len + 1] when READY */
};

struct bfs_streams {
	const struct bfs_layout *l;
	struct bfs_order *order;
	uint64_t len;	/* batches per epoch */
	uint64_t first; /* fixed layouts: the size of every batch but the
			 * last */
	uint64_t last;	/* ... and of the last */
	bool fixed;
	size_t nslots; /* ragged: 2 per lane + 2 */
	pthread_mutex_t lock;
	pthread_cond_t ready; /* a slot left MEASURING */
	struct slot *slots;   /* [lock] [nslots], allocated when first
			       * needed */
	uint64_t clock;	      /* [lock] */
	uint64_t measured;    /* [lock] tables measured, for tests */
};

/* Fixed layouts: the sizes of every batch but the last, and of the last,
 * from the layout; and the check that the order's batches have them. */
static int fixed_sizes(struct bfs_streams *s)
{
	uint64_t rows = bfs_order_batch_rows(s->order, 0);
	uint64_t ks[3] = {0, s->len - 1, s->len - 1}, es[2] = {0, UINT64_MAX};
	uint64_t size;
	int rc = 0;

	s->first = bfs_layout_size(s->l, 0, 0, rows);
	s->last = bfs_layout_size(s->l, 0, 0,
				  bfs_order_batch_rows(s->order, s->len - 1));
	if (s->len > 1)
		ks[1] = s->len - 2; /* the last one of full size */
	for (int i = 0; i < 2 && !rc; i++)
		for (int j = 0; j < 3 && !rc; j++) {
			rc = bfs_layout_file_size(s->l, s->order, es[i], ks[j],
						  &size);
			/* a layout bug: a stream's offsets would be wrong */
			assert(rc || size == (ks[j] + 1 < s->len ? s->first
								 : s->last));
		}
	return rc;
}

int bfs_streams_create(struct bfs_streams **out, const struct bfs_layout *l,
		       struct bfs_order *order)
{
	struct bfs_streams *s = calloc(1, sizeof(*s));
	int rc = 0;

	*out = NULL;
	if (!s)
		return -ENOMEM;
	s->l = l;
	s->order = order;
	s->len = bfs_order_len(order);
	s->fixed = l->nragged == 0;
	s->nslots = 2 * bfs_order_lanes(order) + 2;
	if (s->fixed && s->len)
		rc = fixed_sizes(s);
	if (rc) {
		free(s);
		return rc;
	}
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->ready, NULL);
	*out = s;
	return 0;
}

void bfs_streams_destroy(struct bfs_streams *s)
{
	if (!s)
		return;
	for (size_t i = 0; s->slots && i < s->nslots; i++)
		free(s->slots[i].off);
	free(s->slots);
	pthread_cond_destroy(&s->ready);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

uint64_t bfs_streams_measured(struct bfs_streams *s)
{
	uint64_t n;

	pthread_mutex_lock(&s->lock);
	n = s->measured;
	pthread_mutex_unlock(&s->lock);
	return n;
}

/* Epoch e's offsets, measured: a fresh table of len + 1. 0 or -errno. */
static int measure(struct bfs_streams *s, uint64_t e, uint64_t **out)
{
	uint64_t *off = malloc((s->len + 1) * sizeof(*off));
	int rc = 0;

	if (!off)
		return -ENOMEM;
	off[0] = 0;
	for (uint64_t k = 0; k < s->len && !rc; k++) {
		uint64_t size;

		rc = bfs_layout_file_size(s->l, s->order, e, k, &size);
		off[k + 1] = off[k] + size;
	}
	if (rc) {
		free(off);
		return rc;
	}
	*out = off;
	return 0;
}

/* The slot to measure epoch e into: a free one, else the least recently
 * used ready one (its table freed), else NULL (all are being measured).
 * [lock] */
static struct slot *claim(struct bfs_streams *s)
{
	struct slot *best = NULL;

	for (size_t i = 0; i < s->nslots; i++) {
		struct slot *c = &s->slots[i];

		if (c->state == FREE)
			return c;
		if (c->state == READY && (!best || c->stamp < best->stamp))
			best = c;
	}
	if (best) {
		free(best->off);
		best->off = NULL;
		best->state = FREE;
	}
	return best;
}

/* Epoch e's ready slot (ragged layouts), measured if none holds it; *out
 * stays valid while the lock is held. [lock], dropped while measuring. */
static int table(struct bfs_streams *s, uint64_t e, const struct slot **out)
{
	struct slot *sl;
	uint64_t *off;
	int rc;

	if (!s->slots) {
		s->slots = calloc(s->nslots, sizeof(*s->slots));
		if (!s->slots)
			return -ENOMEM;
	}
	for (;;) {
		sl = NULL;
		for (size_t i = 0; i < s->nslots && !sl; i++)
			if (s->slots[i].state != FREE && s->slots[i].e == e)
				sl = &s->slots[i];
		if (sl && sl->state == READY) {
			sl->stamp = ++s->clock;
			*out = sl;
			return 0;
		}
		if (!sl) { /* else another thread measures it: wait */
			sl = claim(s);
			if (sl)
				break;
		}
		pthread_cond_wait(&s->ready, &s->lock);
	}
	sl->state = MEASURING;
	sl->e = e;
	pthread_mutex_unlock(&s->lock);
	rc = measure(s, e, &off);
	pthread_mutex_lock(&s->lock);
	s->measured++;
	if (rc) {
		sl->state = FREE;
	} else {
		sl->state = READY;
		sl->off = off;
		sl->stamp = ++s->clock;
		*out = sl;
	}
	pthread_cond_broadcast(&s->ready);
	return rc;
}

int bfs_stream_offset(struct bfs_streams *s, uint64_t e, uint64_t k,
		      uint64_t *off)
{
	const struct slot *t = NULL;
	int rc;

	if (k > s->len)
		return -ENOENT;
	if (s->fixed) {
		*off = k < s->len ? k * s->first
				  : (s->len - 1) * s->first + s->last;
		if (!s->len)
			*off = 0;
		return 0;
	}
	pthread_mutex_lock(&s->lock);
	rc = table(s, e, &t);
	if (!rc)
		*off = t->off[k];
	pthread_mutex_unlock(&s->lock);
	return rc;
}

int bfs_stream_locate(struct bfs_streams *s, uint64_t e, uint64_t x,
		      uint64_t *k, uint64_t *start, uint64_t *end)
{
	const struct slot *t = NULL;
	uint64_t lo = 0, hi = s->len;
	int rc;

	if (s->fixed) {
		uint64_t size;

		if (!s->len)
			return -ENOENT;
		size = (s->len - 1) * s->first + s->last;
		if (x >= size)
			return -ENOENT;
		*k = s->first ? x / s->first : 0;
		if (*k >= s->len)
			*k = s->len - 1;
		*start = *k * s->first;
		*end = *start + (*k + 1 < s->len ? s->first : s->last);
		return 0;
	}
	pthread_mutex_lock(&s->lock);
	rc = table(s, e, &t);
	if (!rc && x >= t->off[s->len])
		rc = -ENOENT;
	while (!rc && hi - lo > 1) { /* the last k with off[k] <= x */
		uint64_t mid = lo + (hi - lo) / 2;

		if (t->off[mid] <= x)
			lo = mid;
		else
			hi = mid;
	}
	if (!rc) {
		*k = lo;
		*start = t->off[lo];
		*end = t->off[lo + 1];
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}
