/* fs/remote/object: what object.c (the set, its objects, their client and
 * store thread) and object_fetch.c (fetching, storing, pins, waits)
 * share. Private to the room. */
#ifndef BFS_OBJECT_IMPL_H
#define BFS_OBJECT_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "fs/remote/object.h"

struct bfs_object {
	struct bfs_objects *os;
	struct bfs_object *next; /* os->lock */
	struct bfs_remote_obj *ro;
	struct bfs_cache_entry *e;
	char *url; /* as given: the lookup key; may hold a secret (wiped) */
	char name[1024];
	uint64_t size, nchunks;
	uint32_t chunk;
	unsigned shift;
	pthread_mutex_t lock;
	uint8_t *flight;	      /* [nchunks], lock: being fetched */
	struct bfs_cache_range *kept; /* lock: pinned while open */
	size_t nkept, kept_cap;	      /* lock */
	struct bfs_error last;	      /* lock: the last fetch failed so */
	/* Bytes served without being cached (the disk full): per chunk,
	 * whether its bytes are in memory, an anonymous mapping laid over
	 * its pages of 'map' (set under lock, read atomically by waiters);
	 * 'map' the readers' mapping of the cache file (bfs_object_map;
	 * NULL: none, or more than one: nothing is laid over). */
	uint8_t *mem;
	char *map;
	bool maps_many;
	atomic_bool said_stale; /* its replacement was logged */
	/* sealed: pinned whole until closed, every byte present
	 * (bfs_object_seal); unsealable: never to be (bigger than half the
	 * cache's bound); sealing: a thread is trying (one at a time), or
	 * it is done. */
	atomic_bool sealed, unsealable, sealing;
};

/* One request: its bytes, then the store. */
struct job {
	struct bfs_remote_req req;
	struct bfs_object *o;
	struct job *next; /* os->lock: the landed list */
	bool demand;
};

struct bfs_objects {
	struct bfs_remote_opts ropt; /* strings: copies owned below */
	char *s3_endpoint, *home, *ca_file, *dir;
	char **envp;
	struct bfs_remote *r;		/* NULL while suspended */
	struct bfs_remote_stats before; /* clients stopped so far */
	struct bfs_cache *cache;
	bool limit_free; /* the cache's bound is from the free space */
	uint64_t request_max, merge_gap, flight_max;
	uint64_t far_gap, far; /* bfs_objects_far_gap; 0: none */
	pthread_mutex_t lock;
	pthread_cond_t room;	    /* lock: bytes in flight went down */
	pthread_cond_t landed;	    /* lock: a job landed, or stop */
	struct job *head, *tail;    /* lock: landed, to store */
	uint64_t flight_bytes;	    /* lock */
	bool stop;		    /* lock: the store thread ends */
	pthread_t store;	    /* while store_up */
	bool store_up;		    /* the mount's thread only */
	struct bfs_object *objects; /* lock */
	_Atomic uint64_t now;
	_Atomic uint64_t nobjects, fetches, fetch_bytes, fetch_failed;
	_Atomic uint64_t held_bytes, waits;
	/* bytes of chunks in memory now (object_fetch.c: spill), at most
	 * mem_max; bytes served so since creation */
	_Atomic uint64_t mem_bytes, mem_served;
	uint64_t mem_max;
	atomic_bool said_mem;
};

static inline uint64_t bfs_object_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void bfs_object_count(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* object_fetch.c: the store thread (started and stopped by object.c). */
void *bfs_object_store_main(void *arg);

#endif
