/* fs/stream: offsets of batches within an epoch's stream.
 *
 * Fixed layouts (no ragged field): every batch but the last has one size,
 * the layout's size for its rows (fs/layout.h: the data starts where
 * 20-digit epoch and batch numbers would put it, so sizes take no
 * numbers), so batch k starts at k x that size; nothing is stored.
 *
 * Ragged layouts: an epoch's len + 1 offsets are measured with
 * bfs_layout_file_size (O(samples)) into a table, keyed by the epoch's
 * lane and epoch (fs/order.h: batch identity), and tables are kept for
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

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

enum slot_state { FREE, MEASURING, READY };

struct slot {
	enum slot_state state;
	struct bfs_batch_id e; /* its epoch: lane, epoch (batch 0) */
	uint64_t stamp;
	uint64_t *off; /* [len + 1] when READY */
};

struct bfs_streams {
	const struct bfs_layout *l;
	struct bfs_order *order;
	uint64_t first; /* fixed layouts: the size of every batch but an
			 * epoch's last */
	bool fixed;
	size_t nslots; /* ragged: 2 per lane + 2 */
	pthread_mutex_t lock;
	pthread_cond_t ready; /* a slot left MEASURING */
	struct slot *slots;   /* [lock] [nslots], allocated when first
			       * needed */
	uint64_t clock;	      /* [lock] */
	uint64_t measured;    /* [lock] tables measured, for tests */
};

/* The epoch of id (lane and epoch: batch 0), when the order has it (an
 * epoch an elastic resume left without batches too: its stream is
 * empty), and its batches into *len. */
static bool epoch_of(const struct bfs_streams *s, struct bfs_batch_id id,
		     struct bfs_batch_id *e, uint64_t *len)
{
	*e = (struct bfs_batch_id){.lane = id.lane, .epoch = id.epoch};
	*len = bfs_order_epoch_len(s->order, id.epoch);
	return id.lane < bfs_order_lanes(s->order) &&
	       id.epoch < bfs_order_epochs(s->order);
}

/* Fixed layouts: the size of epoch e's last batch (of len), which may
 * have fewer rows than the others. */
static uint64_t fixed_last(const struct bfs_streams *s, struct bfs_batch_id e,
			   uint64_t len)
{
	e.batch = len - 1;
	return bfs_layout_size(s->l, bfs_order_rows(s->order, e));
}

int bfs_streams_create(struct bfs_streams **out, const struct bfs_layout *l,
		       struct bfs_order *order)
{
	struct bfs_streams *s = calloc(1, sizeof(*s));

	*out = NULL;
	if (!s)
		return -ENOMEM;
	s->l = l;
	s->order = order;
	s->fixed = l->nragged == 0;
	s->nslots = 2 * bfs_order_lanes(order) + 2;
	if (s->fixed)
		s->first = bfs_layout_size(l, bfs_order_batch_rows(order, 0));
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

/* Epoch e's offsets, measured: a fresh table of its len + 1. 0 or
 * -errno. */
static int measure(struct bfs_streams *s, struct bfs_batch_id e, uint64_t **out)
{
	uint64_t len = bfs_order_epoch_len(s->order, e.epoch);
	uint64_t *off = malloc((len + 1) * sizeof(*off));
	struct bfs_batch_loc at;
	int rc = 0;

	if (!off)
		return -ENOMEM;
	off[0] = 0;
	for (uint64_t k = 0; k < len && !rc; k++) {
		uint64_t size = 0;

		e.batch = k;
		rc = bfs_order_locate(s->order, e, &at);
		if (!rc)
			rc = bfs_layout_file_size(s->l, s->order, &at, &size);
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
static int table(struct bfs_streams *s, struct bfs_batch_id e,
		 const struct slot **out)
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
			if (s->slots[i].state != FREE &&
			    s->slots[i].e.lane == e.lane &&
			    s->slots[i].e.epoch == e.epoch)
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

int bfs_stream_offset(struct bfs_streams *s, struct bfs_batch_id id,
		      uint64_t *off)
{
	const struct slot *t = NULL;
	struct bfs_batch_id e;
	uint64_t k = id.batch, len;
	int rc;

	if (!epoch_of(s, id, &e, &len) || k > len)
		return -ENOENT;
	if (s->fixed) {
		*off = k < len ? k * s->first
			       : (len - 1) * s->first + fixed_last(s, e, len);
		if (!len)
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

int bfs_stream_locate(struct bfs_streams *s, struct bfs_batch_id *id,
		      uint64_t x, uint64_t *start, uint64_t *end)
{
	const struct slot *t = NULL;
	uint64_t lo = 0, hi, len, *k = &id->batch;
	struct bfs_batch_id e;
	int rc;

	if (!epoch_of(s, *id, &e, &len))
		return -ENOENT;
	hi = len;
	if (s->fixed) {
		uint64_t size, last;

		if (!len)
			return -ENOENT;
		last = fixed_last(s, e, len);
		size = (len - 1) * s->first + last;
		if (x >= size)
			return -ENOENT;
		*k = s->first ? x / s->first : 0;
		if (*k >= len)
			*k = len - 1;
		*start = *k * s->first;
		*end = *start + (*k + 1 < len ? s->first : last);
		return 0;
	}
	pthread_mutex_lock(&s->lock);
	rc = table(s, e, &t);
	if (!rc && x >= t->off[len])
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
