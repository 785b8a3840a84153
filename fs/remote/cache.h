/* fs/remote/cache: the local disk cache of remote objects (fs/README.md: remote
 * objects: the cache).
 *
 * A remote object (s3://, https://) is read like a local archive: its bytes
 * live in a sparse local file of the object's size, mapped read-only by the
 * source layer. Which of its bytes are there is tracked per chunk (a fixed
 * power of two, 64 KiB by default) in a persistent word array, so a later
 * mount of the same object version (same URL, ETag or Last-Modified, size)
 * finds what an earlier one fetched. The fetch room fills chunks with
 * bfs_cache_write before a gather needs them; a gather pins the chunks it
 * reads, waits until they are present, reads them from the mapping and
 * unpins: a hole reads as zeros, so a gather must never read a chunk it
 * has not seen present under its pin.
 *
 * Bounded (opts.limit_bytes, --cache-gb), a write makes room by evicting
 * unpinned chunks: those needed furthest in the future (the caller says
 * when each chunk is next needed: bfs_cache_next_use, bfs_cache_set_now,
 * and every use it knows: bfs_cache_plan; Belady's rule), or the least
 * recently used (for comparison).
 *
 * Several processes (mounts) may open one entry at once: every per-chunk
 * state change is one atomic operation on a word in a shared mapping
 * (present, evicting, pins), so pins are seen across processes and an
 * eviction never punches a chunk another mount reads; writers of one
 * chunk write identical bytes (the key pins the object version). A
 * 'struct bfs_cache' must not be used across fork().
 *
 * Thread-safe: every function may be called from any thread, except
 * bfs_cache_destroy and bfs_cache_close of an entry in use. */
#ifndef BFS_CACHE_H
#define BFS_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/error.h"

/* Chunk size of new entries unless the options say otherwise, and its
 * bounds (a power of two; at least a page, so holes can be punched). */
#define BFS_CACHE_CHUNK_DEFAULT (64u << 10)
#define BFS_CACHE_CHUNK_MIN	(4u << 10)
#define BFS_CACHE_CHUNK_MAX	(64u << 20)

/* The share of the free space a bound taken from it (limit_from_free)
 * may fill: the rest is left to whatever else writes there. */
#define BFS_CACHE_FREE_SHARE_NUM 4
#define BFS_CACHE_FREE_SHARE_DEN 5

/* Most processes (handles) that may have one entry open at once. */
#define BFS_CACHE_USERS_MAX 64

/* bfs_cache_next_use: not known to be needed again. */
#define BFS_CACHE_NEVER UINT64_MAX

enum bfs_cache_policy {
	BFS_CACHE_NEXT_USE = 0, /* evict what is needed furthest ahead */
	BFS_CACHE_LRU,		/* evict the least recently used */
};

struct bfs_cache_opts {
	/* Bytes present across the entries this handle has open (--cache-gb);
	 * 0: no bound. Also what the directory is trimmed to: entries no
	 * process has open are removed, oldest first, while the directory
	 * holds more (bfs_cache_gc). At least one chunk when set. */
	uint64_t limit_bytes;
	/* With limit_bytes 0: the bound taken from the directory's
	 * filesystem at creation instead of none: BFS_CACHE_FREE_SHARE of its
	 * free space (statvfs's f_bavail: what an unprivileged user may
	 * take), plus what the cache's files take there already (they may be
	 * reused or collected), rounded down to a chunk, at least one. */
	bool limit_from_free;
	/* Chunk size of entries this handle creates (an existing entry keeps
	 * its own); 0: BFS_CACHE_CHUNK_DEFAULT. */
	uint32_t chunk_size;
	enum bfs_cache_policy policy;
	/* Bytes one eviction round frees at least (the victims are found by
	 * a scan of every chunk of the open entries; freeing more per round
	 * scans less often); 0: limit_bytes / 64, at least one chunk. */
	uint64_t evict_bytes;
	/* Longest wait for the directory's lock (other processes opening,
	 * closing, collecting); 0: 10000 ms. */
	unsigned lock_timeout_ms;
	/* Tests: the boot id entries are stamped with (NULL: the kernel's,
	 * /proc/sys/kernel/random/boot_id), to play a reboot; and a hook run
	 * after a write's data is in the file and before its chunks are
	 * marked present (a crash there leaves them absent). */
	const char *boot_id;
	void (*after_data)(void *arg, uint64_t off, uint64_t len);
	void *hook_arg;
};

/* What names an object version. */
struct bfs_cache_key {
	/* The object's URL. Userinfo and fragment are not part of the key;
	 * its query string is taken from 'query', or else from the URL
	 * (after its '?'). For s3:// the caller passes the endpoint's URL of
	 * the object, so that two stores' bucket/key are two objects. */
	const char *url;
	/* The query string (after the '?', up to a '#' or the end; NULL:
	 * the URL's own, if any). Its parameters, in order, are part of the
	 * key, but for those that sign a presigned URL (X-Amz-Signature,
	 * X-Amz-Date, ...: bfs_cache_query_signing); only hashed, never
	 * stored in clear (it may hold secrets). */
	const char *query;
	const char *etag;	   /* as the server sent it; NULL or "": none */
	const char *last_modified; /* used only without an ETag */
	uint64_t size;		   /* the object's size in bytes */
};

struct bfs_cache_range {
	uint64_t off, len;
};

struct bfs_cache_stats {
	uint64_t entries;	 /* open in this handle */
	uint64_t present_bytes;	 /* in them (other mounts' writes too) */
	uint64_t limit_bytes;	 /* 0: none */
	uint64_t written_bytes;	 /* by bfs_cache_write */
	uint64_t hit_chunks;	 /* pinned and present */
	uint64_t miss_chunks;	 /* pinned and absent */
	uint64_t evicted_chunks; /* holes punched */
	uint64_t evicted_bytes;	 /* their bytes */
	uint64_t evict_rounds;	 /* scans for victims */
	uint64_t
	    removed_entries; /* files of other versions or past the bound */
};

struct bfs_cache;
struct bfs_cache_entry;

/* The default cache directory for the environment 'envp' (environ's
 * form, "NAME=value" strings, NULL-terminated): $XDG_CACHE_HOME/batchfs
 * where XDG_CACHE_HOME is an absolute path, else $HOME/.cache/batchfs.
 * Into out (len bytes). Returns 0, -ENOENT (no usable HOME either) or
 * -ENAMETOOLONG. */
int bfs_cache_default_dir(char *out, size_t len, char *const envp[]);

/* 'url' without userinfo, query string and fragment ("https://u:p@h/a?x"
 * -> "https://h/a"), into out (len bytes). What may be shown of a URL.
 * Returns 0 or -ENAMETOOLONG. */
int bfs_cache_url_public(char *out, size_t len, const char *url);

/* Whether query parameter 'name' (its 'n' bytes, as written: not
 * percent-decoded) is one that signs a presigned URL and names nothing
 * (X-Amz-Algorithm, -Credential, -Date, -Expires, -Security-Token,
 * -Signature, -SignedHeaders; any case): left out of the cache key. */
bool bfs_cache_query_signing(const char *name, size_t n);

/* A handle on the cache directory 'dir' (created, with its parents, mode
 * 0700, when missing) for one mount. The directory must be this user's
 * alone (fs/trust.h: owned by the effective uid, not group or world
 * writable unless sticky; not a symlink): else -EPERM (-ELOOP), the
 * message saying what to do. Collects the directory's garbage
 * (bfs_cache_gc). Returns 0 or -errno, with 'err' (may be NULL) naming
 * the directory and the reason. */
int bfs_cache_create(struct bfs_cache **out, const char *dir,
		     const struct bfs_cache_opts *o, struct bfs_error *err);

/* The bound in force (bytes; 0: none): opts.limit_bytes, or the one
 * taken from the free space (limit_from_free), lowered where a write
 * found the filesystem full (ENOSPC, EDQUOT: then the bytes present at
 * that time, said in the log). */
uint64_t bfs_cache_limit(struct bfs_cache *c);

/* Whether the bound in force is the disk's: taken from the free space
 * (limit_from_free) or lowered where a write found the filesystem full;
 * not one the caller chose. */
bool bfs_cache_bound_by_disk(struct bfs_cache *c);

/* Close the entries still open and free. Accepts NULL. */
void bfs_cache_destroy(struct bfs_cache *c);

/* The entry of object version 'k': the one a previous mount (or another
 * process now) left, with what it holds, or a new empty one. The files
 * of another version of the same URL that nobody has open are removed.
 * Opening a key this handle has open returns the same entry (counted:
 * one bfs_cache_close each). Returns 0 or -errno: -EINVAL (no ETag nor
 * Last-Modified, or no URL), -EUSERS (BFS_CACHE_USERS_MAX processes have
 * it open), -ETIMEDOUT (the directory's lock), an I/O error; 'err' names
 * the file and the reason. */
int bfs_cache_open(struct bfs_cache *c, const struct bfs_cache_key *k,
		   struct bfs_cache_entry **out, struct bfs_error *err);

/* Drop one reference; the last one closes the entry (the last process to
 * close it syncs its files, so it survives a reboot). Accepts NULL. The
 * caller's pins must have been released. */
void bfs_cache_close(struct bfs_cache_entry *e);

/* The data file, open read-write, of the object's size: map it read-only
 * (MAP_SHARED sees writes). Owned by the entry: valid until close. */
int bfs_cache_fd(const struct bfs_cache_entry *e);
/* Its path (owned by the entry). */
const char *bfs_cache_path(const struct bfs_cache_entry *e);
/* The entry's name: the key's SHA-256, in hex (owned by the entry). */
const char *bfs_cache_name(const struct bfs_cache_entry *e);
uint64_t bfs_cache_size(const struct bfs_cache_entry *e);
uint32_t bfs_cache_chunk(const struct bfs_cache_entry *e);

/* The bytes of e present now, in every process (an atomic load). */
uint64_t bfs_cache_present_bytes(const struct bfs_cache_entry *e);

/* Whether every byte of [off, off+len) is present. */
bool bfs_cache_present(struct bfs_cache_entry *e, uint64_t off, uint64_t len);

/* The absent parts of [off, off+len), in whole chunks (the last one cut
 * at the object's end), neighbours merged, in order: the first 'max'
 * into out. Returns how many there are (may exceed max), or -EINVAL for
 * a range past the object. */
int64_t bfs_cache_missing(struct bfs_cache_entry *e, uint64_t off, uint64_t len,
			  struct bfs_cache_range *out, size_t max);

/* Store bytes [off, off+len) of the object from buf: off on a chunk
 * boundary, len whole chunks or up to the object's end. The data is in
 * the file before any of its chunks is marked present; then waiters are
 * woken and a failure recorded for these chunks (bfs_cache_fail) is
 * cleared. Bounded, it first makes room (bfs_cache_make_room, at the
 * earliest next use of these chunks). A filesystem found full (ENOSPC,
 * EDQUOT) lowers the bound to the bytes present (bfs_cache_limit) and
 * evicts as for room, then writes again, while a round evicts anything.
 * Returns 0 or -errno: -EINVAL, -ENOBUFS (no room: everything else is
 * pinned or needed sooner), -ENOSPC, -EDQUOT (full, and nothing more
 * could go) and other errors of pwrite. */
int bfs_cache_write(struct bfs_cache_entry *e, uint64_t off, const void *buf,
		    uint64_t len);

/* bfs_cache_write of chunks a reader needs at 'pos' (now, say), whatever
 * their own next use: room is made as for chunks needed at the earlier of
 * the two, and their next use stays what it was (a later use the caller
 * planned is kept). */
int bfs_cache_write_for(struct bfs_cache_entry *e, uint64_t off,
			const void *buf, uint64_t len, uint64_t pos);

/* Wait until every chunk of [off, off+len) is present: 0; or until
 * 'deadline_ns' (CLOCK_MONOTONIC; UINT64_MAX: none): -ETIMEDOUT; or until
 * one of them is failed (bfs_cache_fail): that -errno. Writers of other
 * processes wake it too (a futex on the shared word). */
int bfs_cache_wait(struct bfs_cache_entry *e, uint64_t off, uint64_t len,
		   uint64_t deadline_ns);

/* Record that the chunks of [off, off+len) could not be fetched ('error'
 * a positive errno, e.g. EIO): their waiters return -error at once, and
 * later ones too until they are written or the failure is cleared
 * (error 0: do it when fetching them again). This process only. */
void bfs_cache_fail(struct bfs_cache_entry *e, uint64_t off, uint64_t len,
		    int error);

/* Pin the chunks of [off, off+len) (counted; in every process): they are
 * not evicted until unpinned. Pin, then wait, then read the mapping, then
 * unpin. Counts as a use (LRU) and a hit or miss per chunk. Returns 1
 * when all are present, 0 when some are not, -EOVERFLOW (too many pins
 * on a chunk: none taken) or -EINVAL. */
int bfs_cache_pin(struct bfs_cache_entry *e, uint64_t off, uint64_t len);
void bfs_cache_unpin(struct bfs_cache_entry *e, uint64_t off, uint64_t len);

/* Whether some chunk of [off, off+len) is pinned (by any process). */
bool bfs_cache_pinned(struct bfs_cache_entry *e, uint64_t off, uint64_t len);

/* Evict the present, unpinned chunks of [off, off+len): each is marked
 * absent first, then its bytes are punched out of the file. Returns the
 * bytes evicted, or -errno (the punch failed: the chunk stays absent). */
int64_t bfs_cache_evict(struct bfs_cache_entry *e, uint64_t off, uint64_t len);

/* The eviction policy's knowledge: the chunks of [off, off+len) are next
 * needed at position 'pos' (the caller's counter, e.g. a batch's place in
 * the order; BFS_CACHE_NEVER: not again). Set it before writing a chunk:
 * a write never evicts a chunk needed sooner than the ones it writes.
 * Positions before bfs_cache_set_now's are stale: such chunks count as
 * not needed again. In-process, not persistent; default: not known (such
 * chunks go first, least recently used first). */
void bfs_cache_next_use(struct bfs_cache_entry *e, uint64_t off, uint64_t len,
			uint64_t pos);
void bfs_cache_set_now(struct bfs_cache *c, uint64_t pos);

/* bfs_cache_next_use where it makes a chunk's next use sooner: a chunk
 * next needed at or before 'pos' (known and not stale) keeps that, so
 * the uses of a known order can be told in any order and the earliest
 * wins. */
void bfs_cache_next_use_sooner(struct bfs_cache_entry *e, uint64_t off,
			       uint64_t len, uint64_t pos);

/* The uses of a known order, told ahead: the chunks of [off, off+len)
 * are needed at 'pos' (on bfs_cache_next_use's positions), beside their
 * other planned uses. A chunk's next use, as eviction sees it, is the
 * earlier of bfs_cache_next_use's and its first planned use not before
 * now (bfs_cache_set_now): once a use passes, the following one counts,
 * so a chunk read now and planned again soon is not taken for one not
 * needed again. Uses before now are dropped as they are met; a list
 * holds about the uses of what the caller plans ahead, 16 bytes each,
 * nothing allocated until the first. Tell each use once per position
 * (a repeat is kept once). 0, -EINVAL (past the object) or -ENOMEM (a
 * use is then unknown: the policy is worse, never wrong). */
int bfs_cache_plan(struct bfs_cache_entry *e, uint64_t off, uint64_t len,
		   uint64_t pos);

/* Planned uses held now (all chunks of e; stale ones not yet dropped
 * included). */
uint64_t bfs_cache_plan_uses(struct bfs_cache_entry *e);

/* Make room for 'bytes' more under the bound, for chunks next needed at
 * 'pos' (BFS_CACHE_NEVER: unknown; then any chunk may go): evict by the
 * policy, at least opts.evict_bytes at a time. 0 when there is room (or
 * no bound), -ENOBUFS when the unpinned chunks needed later than 'pos'
 * cannot make it. */
int bfs_cache_make_room(struct bfs_cache *c, uint64_t bytes, uint64_t pos);

/* Remove what nobody has open: stray files, and, while the directory
 * holds more than opts.limit_bytes, whole entries, least recently used
 * first. Returns the entries removed or -errno. */
int bfs_cache_gc(struct bfs_cache *c);

void bfs_cache_stats(struct bfs_cache *c, struct bfs_cache_stats *st);

/* The bound a policy can reach: the hits of a cache of 'capacity' chunks
 * over the accesses seq[0..n) (chunk numbers below 'universe'), a miss
 * always inserting (no bypass), evicting by 'policy' (NEXT_USE: Belady's
 * optimum, knowing the whole sequence). Into *hits. Returns 0, -EINVAL or
 * -ENOMEM. The benchmark compares the cache's hits with it. */
int bfs_cache_simulate(const uint64_t *seq, size_t n, uint64_t universe,
		       uint64_t capacity, enum bfs_cache_policy policy,
		       uint64_t *hits);

#endif
