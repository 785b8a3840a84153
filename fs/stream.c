/* fs/stream: offsets of batches within an epoch's stream.
 *
 * Fixed layouts (no ragged field): batch k starts at k x size(0), the
 * last batch may be shorter; nothing is stored. Ragged layouts: an
 * epoch's len + 1 offsets are measured with bfs_layout_file_size and kept
 * in one of SLOTS tables (least recently used goes); a table being
 * measured is measured by one thread while others wait for it.
 *
 * Thread-safety: one mutex over the slots; measuring runs under it (it is
 * the only cost, once per epoch, and readers of that epoch need it). */
#include "fs/stream.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#define SLOTS 4

struct slot {
	bool used;
	uint64_t e, stamp;
	uint64_t *off; /* [len + 1] */
};

struct bfs_streams {
	const struct bfs_layout *l;
	struct bfs_order *order;
	uint64_t len;	/* batches per epoch */
	uint64_t first; /* fixed layouts: the size of every batch but the
			 * last */
	uint64_t last;	/* ... and of the last */
	bool fixed;
	pthread_mutex_t lock;
	struct slot slots[SLOTS]; /* [lock] ragged layouts */
	uint64_t clock;		  /* [lock] */
};

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
	if (s->fixed && s->len)
		rc = bfs_layout_file_size(l, order, 0, 0, &s->first);
	if (!rc && s->fixed && s->len)
		rc = bfs_layout_file_size(l, order, 0, s->len - 1, &s->last);
	if (rc) {
		free(s);
		return rc;
	}
	pthread_mutex_init(&s->lock, NULL);
	*out = s;
	return 0;
}

void bfs_streams_destroy(struct bfs_streams *s)
{
	if (!s)
		return;
	for (int i = 0; i < SLOTS; i++)
		free(s->slots[i].off);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

/* Epoch e's offsets table (ragged layouts), measured if no slot holds
 * it. [lock] */
static int table(struct bfs_streams *s, uint64_t e, const uint64_t **out)
{
	struct slot *sl = NULL;
	uint64_t *off;
	int rc = 0;

	for (int i = 0; i < SLOTS; i++) {
		struct slot *c = &s->slots[i];

		if (c->used && c->e == e) {
			c->stamp = ++s->clock;
			*out = c->off;
			return 0;
		}
		if (!sl || !c->used || (sl->used && c->stamp < sl->stamp))
			sl = c;
	}
	off = malloc((s->len + 1) * sizeof(*off));
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
	free(sl->off);
	sl->used = true;
	sl->e = e;
	sl->off = off;
	sl->stamp = ++s->clock;
	*out = off;
	return 0;
}

int bfs_stream_offset(struct bfs_streams *s, uint64_t e, uint64_t k,
		      uint64_t *off)
{
	const uint64_t *t;
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
		*off = t[k];
	pthread_mutex_unlock(&s->lock);
	return rc;
}

int bfs_stream_locate(struct bfs_streams *s, uint64_t e, uint64_t x,
		      uint64_t *k, uint64_t *start, uint64_t *end)
{
	const uint64_t *t;
	uint64_t lo = 0, hi = s->len;
	int rc;

	if (s->fixed) {
		uint64_t size = (s->len - 1) * s->first + s->last;

		if (!s->len || x >= size)
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
	if (!rc && x >= t[s->len])
		rc = -ENOENT;
	while (!rc && hi - lo > 1) { /* the last k with t[k] <= x */
		uint64_t mid = lo + (hi - lo) / 2;

		if (t[mid] <= x)
			lo = mid;
		else
			hi = mid;
	}
	if (!rc) {
		*k = lo;
		*start = t[lo];
		*end = t[lo + 1];
	}
	pthread_mutex_unlock(&s->lock);
	return rc;
}
