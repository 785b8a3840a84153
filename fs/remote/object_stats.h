/* fs/remote/object_stats: the counters of a mount's remote objects
 * (object.h: bfs_objects_stats), alone: the engine's stats carry them by
 * value (fs/fetch.h: the remote backend's counters, fs/readahead.h, the
 * stats file: fs/serve_stats.c) without the rest of the wing
 * (fs/README.md: the remote wing). Plain counters, no functions. */
#ifndef BFS_OBJECT_STATS_H
#define BFS_OBJECT_STATS_H

#include <stdint.h>

struct bfs_objects_stats {
	uint64_t objects;
	uint64_t sealed; /* of them all in the cache, kept there */
	/* fs/remote's client: HTTP requests sent (tries and opens), body
	 * bytes received, transfers on the wire, tries retried */
	uint64_t requests, bytes, in_flight, retries;
	uint64_t fetches;      /* ranges fetched into the cache */
	uint64_t fetch_bytes;  /* ... their bytes */
	uint64_t fetch_failed; /* ranges whose fetch failed */
	uint64_t flight_bytes; /* bytes being fetched now */
	uint64_t held_bytes;   /* bytes of rows pinned for gathers */
	uint64_t mem_bytes;    /* bytes served from memory, uncached (the
				* disk full), since creation */
	uint64_t waits;	       /* pins that found bytes absent */
	/* fs/remote/cache's */
	uint64_t hit_chunks, miss_chunks, evicted_chunks, evicted_bytes;
	uint64_t present_bytes, limit_bytes;
};

#endif
