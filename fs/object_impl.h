/* fs/object: what object.c (the set, its objects, their client and
 * store thread) and object_fetch.c (fetching, storing, pins, waits)
 * share. Private to the room. */
#ifndef BFS_OBJECT_IMPL_H
#define BFS_OBJECT_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "fs/object.h"

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
	atomic_bool said_stale;	      /* its replacement was logged */
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
	uint64_t limit, request_max, merge_gap, flight_max;
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
