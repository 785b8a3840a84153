/* cache_sim: the hits a cache of a given size can reach on a sequence of
 * chunk accesses, by fs/remote/cache's own simulation (bfs_cache_simulate):
 * evicting by next use (Belady's optimum, knowing the whole sequence) and
 * the least recently used, each a miss always inserted.
 *
 *     cache_sim CAPACITY UNIVERSE [HORIZON...] < SEQUENCE
 *
 * CAPACITY: chunks the cache holds; UNIVERSE: chunks of the object(s)
 * (every access below it); SEQUENCE: the chunk numbers, one per line, in
 * access order. Prints one line:
 *
 *     accesses=N distinct=D next_use=H lru=H [horizon_K=H ...]
 *
 * Each HORIZON K adds the hits of next use known only K accesses ahead,
 * as fs/remote/cache evicts when its caller tells next uses that far (the
 * read-ahead's window): a chunk whose next use is further (or never) is
 * unknown, and unknown chunks go first, least recently used first; then
 * the known one needed furthest ahead. This one is ours, not fs/remote/cache's
 * (O(n log n), as fs/remote/cache's own).
 *
 * The remote part of `make bench` feeds it the chunks the batches of the
 * mount's order touch (from its index files) and compares the cache's
 * hits with these. A benchmark tool (built by `make bench`), not part of
 * batchfs. Exit 1 on bad input, 2 on bad usage. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/remote/cache.h"

#define NONE UINT64_MAX

/* A max-heap entry: chunk c next used at a (stale when c's next use has
 * moved since). */
struct use {
	uint64_t a, c;
};

static void heap_push(struct use *h, size_t *n, struct use v)
{
	size_t j;

	for (j = (*n)++; j && h[(j - 1) / 2].a < v.a; j = (j - 1) / 2)
		h[j] = h[(j - 1) / 2];
	h[j] = v;
}

static struct use heap_pop(struct use *h, size_t *n)
{
	struct use top = h[0], last = h[--*n];
	size_t j = 0;

	for (;;) {
		size_t k = 2 * j + 1;

		if (k >= *n)
			break;
		if (k + 1 < *n && h[k + 1].a > h[k].a)
			k++;
		if (h[k].a <= last.a)
			break;
		h[j] = h[k];
		j = k;
	}
	if (*n)
		h[j] = last;
	return top;
}

/* Unlink chunk x from the recency list of unknown chunks. */
static void unlink_lru(uint64_t *prev, uint64_t *next, uint64_t *head,
		       uint64_t *tail, uint64_t x)
{
	if (prev[x] != NONE)
		next[prev[x]] = next[x];
	else
		*head = next[x];
	if (next[x] != NONE)
		prev[next[x]] = prev[x];
	else
		*tail = prev[x];
}

/* The hits of next use known 'horizon' accesses ahead (see the top).
 * A cached chunk is unknown (on a recency list, most recent at head)
 * until access i + horizon is its next use, then known (in a max-heap by
 * next use; entries whose chunk has moved on are stale, skipped when
 * popped). O(n log n). */
static int horizon_hits(const uint64_t *seq, size_t n, uint64_t universe,
			uint64_t capacity, uint64_t horizon, uint64_t *hits)
{
	uint64_t *nxt = malloc((n ? n : 1) * sizeof(*nxt));
	uint64_t *cur = malloc(universe * sizeof(*cur));
	uint64_t *prev = malloc(universe * sizeof(*prev));
	uint64_t *next = malloc(universe * sizeof(*next));
	uint8_t *listed = calloc(universe, 1);
	struct use *h = malloc((n ? 2 * n : 1) * sizeof(*h)); /* 2 a step */
	uint64_t head = NONE, tail = NONE, count = 0;
	size_t hn = 0;
	int rc = -1;

	*hits = 0;
	if (!nxt || !cur || !prev || !next || !listed || !h)
		goto out;
	for (uint64_t x = 0; x < universe; x++)
		cur[x] = n; /* as next use seen so far: none */
	for (size_t i = n; i-- > 0;) {
		nxt[i] = cur[seq[i]];
		cur[seq[i]] = i;
	}
	for (uint64_t x = 0; x < universe; x++)
		cur[x] = NONE; /* not in the cache; else its next use */
	for (size_t i = 0; i < n; i++) {
		uint64_t x = seq[i];

		/* the chunk access i + horizon uses becomes known */
		if (horizon < n - i) {
			uint64_t j = i + horizon, y = seq[j];

			if (cur[y] == j && listed[y]) {
				unlink_lru(prev, next, &head, &tail, y);
				listed[y] = 0;
				heap_push(h, &hn, (struct use){j, y});
			}
		}
		if (cur[x] != NONE) {
			(*hits)++;
			if (listed[x])
				unlink_lru(prev, next, &head, &tail, x);
		} else if (count == capacity) {
			uint64_t v = tail; /* the least recent unknown one */

			if (v != NONE) {
				unlink_lru(prev, next, &head, &tail, v);
			} else { /* else the known one needed furthest ahead */
				while (hn) {
					struct use top = heap_pop(h, &hn);

					if (cur[top.c] == top.a &&
					    !listed[top.c]) {
						v = top.c;
						break;
					}
				}
			}
			listed[v] = 0;
			cur[v] = NONE;
		} else {
			count++;
		}
		cur[x] = nxt[i];
		listed[x] = nxt[i] > i + horizon;
		if (!listed[x]) {
			heap_push(h, &hn, (struct use){nxt[i], x});
			continue;
		}
		prev[x] = NONE;
		next[x] = head;
		if (head != NONE)
			prev[head] = x;
		head = x;
		if (tail == NONE)
			tail = x;
	}
	rc = 0;
out:
	free(nxt);
	free(cur);
	free(prev);
	free(next);
	free(listed);
	free(h);
	return rc;
}

int main(int argc, char **argv)
{
	uint64_t capacity, universe, hits[2], distinct = 0;
	uint64_t *seq = NULL;
	uint8_t *seen = NULL;
	size_t n = 0, cap = 0;
	int rc = 1;
	char line[64];

	if (argc < 3) {
		fprintf(stderr,
			"usage: cache_sim CAPACITY UNIVERSE [HORIZON...] "
			"< SEQUENCE\n");
		return 2;
	}
	capacity = strtoull(argv[1], NULL, 10);
	universe = strtoull(argv[2], NULL, 10);
	if (!capacity || !universe) {
		fprintf(stderr,
			"cache_sim: CAPACITY and UNIVERSE must be > 0\n");
		return 2;
	}
	while (fgets(line, sizeof(line), stdin)) {
		if (n == cap) {
			uint64_t *more;

			cap = cap ? 2 * cap : 1 << 16;
			more = realloc(seq, cap * sizeof(*seq));
			if (!more) {
				fprintf(stderr, "cache_sim: out of memory\n");
				goto out;
			}
			seq = more;
		}
		seq[n++] = strtoull(line, NULL, 10);
	}
	seen = calloc(universe, 1);
	if (!seen) {
		fprintf(stderr, "cache_sim: out of memory\n");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		if (seq[i] >= universe) {
			fprintf(stderr,
				"cache_sim: chunk %" PRIu64
				" is not below UNIVERSE %" PRIu64 "\n",
				seq[i], universe);
			goto out;
		}
		distinct += !seen[seq[i]];
		seen[seq[i]] = 1;
	}
	if (bfs_cache_simulate(seq, n, universe, capacity, BFS_CACHE_NEXT_USE,
			       &hits[0]) ||
	    bfs_cache_simulate(seq, n, universe, capacity, BFS_CACHE_LRU,
			       &hits[1])) {
		fprintf(stderr, "cache_sim: the simulation failed\n");
		goto out;
	}
	printf("accesses=%zu distinct=%" PRIu64 " next_use=%" PRIu64
	       " lru=%" PRIu64,
	       n, distinct, hits[0], hits[1]);
	for (int a = 3; a < argc; a++) {
		uint64_t k = strtoull(argv[a], NULL, 10), got;

		if (horizon_hits(seq, n, universe, capacity, k, &got)) {
			fprintf(stderr, "cache_sim: out of memory\n");
			goto out;
		}
		printf(" horizon_%" PRIu64 "=%" PRIu64, k, got);
	}
	printf("\n");
	rc = 0;
out:
	free(seen);
	free(seq);
	return rc;
}
