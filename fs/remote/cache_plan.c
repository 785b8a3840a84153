/* fs/remote/cache: a chunk's planned uses (cache.h: bfs_cache_plan;
 * fs/README.md: remote objects: the cache).
 *
 * Next use (bfs_cache_next_use, one position per chunk) knows only the
 * earliest use told: once it passes, the chunk looks not needed again,
 * and eviction takes it first, although a known order may use it again
 * soon. A plan keeps every use told of a chunk, in order, so that when
 * one passes the next is there: per chunk a sorted list of positions
 * (nodes of one array per entry, index 0 ending a list; freed nodes on a
 * free list). A use before now (bfs_cache_set_now) is dropped whenever
 * its chunk's list is looked at (telling more, eviction's question), so
 * a list holds the uses told since its chunk was last looked at: about
 * the uses of the batches the caller plans ahead (its horizon).
 *
 * Nothing is allocated until a first use is planned: an entry nobody
 * plans for (no bound, or the object fits) pays one load per question.
 *
 * Thread-safety: the lists under e->plan_lock; e->plan_head published
 * once (release), read without the lock to see whether there is a plan
 * at all. */
#include <errno.h>
#include <stdlib.h>

#include "fs/remote/cache.h"
#include "fs/remote/cache_impl.h"

/* Drop the uses of chunk c before 'now'. [plan_lock] */
static void drop_stale(struct bfs_cache_entry *e, uint64_t c, uint64_t now)
{
	uint32_t h = e->plan_head[c];

	while (h && e->plan[h].pos < now) {
		uint32_t next = e->plan[h].next;

		e->plan[h].next = e->plan_free;
		e->plan_free = h;
		e->plan_used--;
		h = next;
	}
	__atomic_store_n(&e->plan_head[c], h, __ATOMIC_RELAXED);
}

/* A free node, the array grown as needed (0: no memory). [plan_lock] */
static uint32_t node_new(struct bfs_cache_entry *e)
{
	uint32_t n = e->plan_free;

	if (!n) {
		size_t cap = e->plan_cap ? e->plan_cap * 2 : 1024;
		struct bfs_cache_use *p;

		if (cap > UINT32_MAX)
			return 0;
		p = realloc(e->plan, cap * sizeof(*p));
		if (!p)
			return 0;
		e->plan = p;
		for (size_t i = cap - 1; i >= (e->plan_cap ? e->plan_cap : 1);
		     i--) {
			p[i].next = e->plan_free;
			e->plan_free = (uint32_t)i;
		}
		e->plan_cap = cap;
		n = e->plan_free;
	}
	e->plan_free = e->plan[n].next;
	e->plan_used++;
	return n;
}

/* Use 'pos' of chunk c in its sorted list, once. The node is taken
 * first: taking one may move the array. [plan_lock] */
static void plan_one(struct bfs_cache_entry *e, uint64_t c, uint64_t pos)
{
	uint32_t n = node_new(e), *at = &e->plan_head[c];

	if (!n)
		return; /* out of memory: a use unknown */
	while (*at && e->plan[*at].pos < pos)
		at = &e->plan[*at].next;
	if (*at && e->plan[*at].pos == pos) { /* told already */
		e->plan[n].next = e->plan_free;
		e->plan_free = n;
		e->plan_used--;
		return;
	}
	e->plan[n].pos = pos;
	e->plan[n].next = *at;
	__atomic_store_n(at, n, __ATOMIC_RELAXED); /* maybe a head */
}

int bfs_cache_plan(struct bfs_cache_entry *e, uint64_t off, uint64_t len,
		   uint64_t pos)
{
	uint64_t now = __atomic_load_n(&e->cache->now, __ATOMIC_RELAXED);
	uint64_t first = off >> e->shift, end;
	int rc = 0;

	if (off > e->size || len > e->size - off)
		return -EINVAL;
	if (!len || pos == BFS_CACHE_NEVER || pos < now)
		return 0;
	end = ((off + len - 1) >> e->shift) + 1;
	pthread_mutex_lock(&e->plan_lock);
	if (!e->plan_head) {
		uint32_t *h = calloc(e->nchunks ? e->nchunks : 1, sizeof(*h));

		if (h)
			__atomic_store_n(&e->plan_head, h, __ATOMIC_RELEASE);
		else
			rc = -ENOMEM;
	}
	for (uint64_t c = first; rc == 0 && c < end; c++) {
		drop_stale(e, c, now);
		plan_one(e, c, pos);
	}
	pthread_mutex_unlock(&e->plan_lock);
	return rc;
}

uint64_t bfs_cache_planned(struct bfs_cache_entry *e, uint64_t c, uint64_t now)
{
	uint32_t *heads = __atomic_load_n(&e->plan_head, __ATOMIC_ACQUIRE);
	uint64_t pos = BFS_CACHE_NEVER;

	if (!heads || !__atomic_load_n(&heads[c], __ATOMIC_RELAXED))
		return BFS_CACHE_NEVER;
	pthread_mutex_lock(&e->plan_lock);
	drop_stale(e, c, now);
	if (heads[c])
		pos = e->plan[heads[c]].pos;
	pthread_mutex_unlock(&e->plan_lock);
	return pos;
}

uint64_t bfs_cache_plan_uses(struct bfs_cache_entry *e)
{
	uint64_t n;

	pthread_mutex_lock(&e->plan_lock);
	n = e->plan_used;
	pthread_mutex_unlock(&e->plan_lock);
	return n;
}

void bfs_cache_plan_free(struct bfs_cache_entry *e)
{
	free(e->plan_head);
	free(e->plan);
	pthread_mutex_destroy(&e->plan_lock);
}
