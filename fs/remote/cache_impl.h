/* fs/remote/cache: what cache.c (the directory, entries, their files) and
 * cache_chunk.c (chunks: presence, pins, writes, waits, eviction) share.
 * Private to the room. */
#ifndef BFS_CACHE_IMPL_H
#define BFS_CACHE_IMPL_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "fs/remote/cache.h"

/* The map file: a header page, then one 32-bit word per chunk, shared
 * (MAP_SHARED) by every process that has the entry open. A word:
 *   W_PRESENT   the chunk's bytes are in the data file (persistent)
 *   W_EVICTING  its hole is being punched (W_PRESENT is clear), by the
 *               user in slot W_SLOT (whose lock says whether it lives)
 *   W_WAITERS   someone sleeps on the word (futex): wake them on change
 *   W_PINS      pins: readers reading it, writers writing it
 * Every change is one compare-and-swap of the whole word. Pins, W_EVICTING
 * and W_WAITERS mean nothing once no process has the entry open: the
 * first opener after that clears them (recover_words). */
#define W_PRESENT    (1u << 31)
#define W_EVICTING   (1u << 30)
#define W_WAITERS    (1u << 29)
#define W_SLOT_SHIFT 23
#define W_SLOT	     (63u << W_SLOT_SHIFT)
#define W_PINS	     ((1u << W_SLOT_SHIFT) - 1)
_Static_assert(BFS_CACHE_USERS_MAX - 1 <= (W_SLOT >> W_SLOT_SHIFT),
	       "a user's slot must fit in a word");

/* The users' slot locks: bytes SLOT_BASE + slot of the map file (past
 * its end: they lock nothing of it). */
#define SLOT_BASE ((off_t)1 << 40)
/* The most a NAME.meta file holds. */
#define META_MAX (16u << 10)

#define BFS_CACHE_FORMAT 1
#define HDR_MAGIC	 "BFSCACHE"
#define HDR_PAGE	 4096

/* state: the files may be behind the words (DIRTY, since boot_id's boot:
 * in another boot, a machine crash may have lost data whose bits were
 * kept), or are in sync (CLEAN), or must be thrown away (DISCARD: a sync
 * failed). */
enum { HDR_CLEAN = 1, HDR_DIRTY = 2, HDR_DISCARD = 3 };

struct cache_hdr {
	char magic[8];	  /* HDR_MAGIC, written last at creation */
	uint32_t version; /* BFS_CACHE_FORMAT */
	uint32_t chunk;	  /* bytes per chunk, a power of two */
	uint64_t size;	  /* the object's bytes */
	uint64_t nchunks;
	uint8_t key[32]; /* SHA-256 of the key (the file's name) */
	uint32_t state;	 /* HDR_* */
	char boot_id[44];
	uint64_t present; /* bytes present: atomic; recounted when recovered */
};
_Static_assert(sizeof(struct cache_hdr) <= HDR_PAGE, "header in a page");

/* A planned use (cache_plan.c): a position, the next node of its chunk's
 * list (0: none). */
struct bfs_cache_use {
	uint64_t pos;
	uint32_t next;
};

struct bfs_cache_entry {
	struct bfs_cache *cache;
	struct bfs_cache_entry *next_entry; /* cache->lock */
	unsigned refs;			    /* cache->lock */
	char name[65];			    /* hex SHA-256 of the key */
	char *data_path;
	char *url;	/* public URL, for the directory's garbage */
	char query[65]; /* the query's hash (cache.c: query_hash); "" */
	int data_fd, map_fd;
	bool made;     /* a file of it made anew at this open */
	unsigned slot; /* our user slot (an OFD lock on the map file) */
	struct cache_hdr *hdr;
	uint32_t *words; /* hdr + HDR_PAGE, nchunks of them */
	size_t map_len;
	uint64_t size, nchunks;
	uint32_t chunk;
	unsigned shift;
	/* In-process, per chunk, relaxed atomics: next use + 1 (0: not
	 * known), last use (cache->clock; 0: never), a failure's errno. */
	uint64_t *next1, *last;
	uint8_t *err;
	/* Planned uses (cache_plan.c), under plan_lock: per chunk the head
	 * of its sorted list (NULL until a first use is planned; published
	 * once, heads stored atomically: read without the lock to see
	 * whether a chunk has any), the nodes, the free ones. */
	pthread_mutex_t plan_lock;
	uint32_t *plan_head;
	struct bfs_cache_use *plan;
	size_t plan_cap;
	uint32_t plan_free;
	uint64_t plan_used;
};

struct bfs_cache {
	char *dir;
	int dir_fd;
	int lock_fd; /* DIR/.lock: flock'd around opens, closes, collection */
	struct bfs_cache_opts o;
	char boot_id[44];
	pthread_mutex_t lock; /* entries, reserved, eviction rounds */
	struct bfs_cache_entry *entries;
	uint64_t reserved; /* bytes being written (lock) */
	/* The bytes present when a write last found the filesystem full
	 * (ENOSPC, EDQUOT): a bound learned from the disk, below o.limit_bytes
	 * or where there is none (lock; 0: not learned). */
	uint64_t disk_limit;
	uint64_t now;		   /* bfs_cache_set_now (atomic) */
	uint64_t clock;		   /* LRU stamps (atomic) */
	struct bfs_cache_stats st; /* counters: atomic adds */
};

/* cache.c: the directory lock (waits up to opts.lock_timeout_ms:
 * -ETIMEDOUT). */
int bfs_cache_dir_lock(struct bfs_cache *c);
void bfs_cache_dir_unlock(struct bfs_cache *c);

/* cache_gc.c: collect under the directory lock; 'url' (escaped, as in
 * the metadata), 'query' (its query's hash, "" for none) and 'keep' (a
 * name): the entry being opened, whose other versions go. Returns the
 * entries removed or -errno. */
int bfs_cache_gc_locked(struct bfs_cache *c, const char *url, const char *query,
			const char *keep);

/* cache_gc.c: the bytes the entries' files take on disk (0 when the
 * directory cannot be read). */
uint64_t bfs_cache_dir_bytes(struct bfs_cache *c);

/* cache_plan.c: the earliest planned use of chunk c not before 'now'
 * (BFS_CACHE_NEVER: none), the earlier ones dropped; freeing an entry's
 * plan (and its lock). */
uint64_t bfs_cache_planned(struct bfs_cache_entry *e, uint64_t c, uint64_t now);
void bfs_cache_plan_free(struct bfs_cache_entry *e);

/* cache_chunk.c */
void bfs_cache_recover_words(struct bfs_cache_entry *e);
uint64_t bfs_cache_chunk_bytes(const struct bfs_cache_entry *e, uint64_t c);

#endif
