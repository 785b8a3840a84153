/* fs/remote/object: a mount's remote objects (s3://, http://, https://), each
 * behind its entry in the local disk cache (fs/README.md: remote
 * sources).
 *
 * A set (struct bfs_objects) holds one client of fs/remote, one handle on
 * fs/remote/cache and what moves bytes from the one into the other:
 *
 *   fetch   the absent chunks of a few ranges, each claimed by one
 *           request at a time (an in-flight mark per chunk), runs of
 *           them merged where the gap between is small (merge_gap) and
 *           cut at request_max bytes, many requests in flight (at most
 *           flight_max bytes of them; a gather's may take twice that);
 *   store   a thread of the set writes what landed into the cache
 *           (bfs_cache_write), or marks its chunks failed (bfs_cache_fail:
 *           their waiters wake with the error), and only then lifts the
 *           chunks' in-flight marks: under the object's lock, a chunk is
 *           never both failed and in flight, so whoever fetches it again
 *           (clearing the failure) finds a failure only of a fetch that
 *           is over.
 *
 * Its users:
 *   the sources, at mount: bfs_object_keep fetches the ranges the
 *           parsers read (the structure) and pins them while the object
 *           is open, so they are never evicted (ragged offsets are read
 *           at every batch);
 *   the fetch room's backend (fs/fetch_remote): a gather pins the ranges
 *           of its rows (bfs_object_pin, which fetches what is absent at
 *           once), waits for them (bfs_object_wait, bounded, with one
 *           fetch again after a failure), reads the mapping, unpins; the
 *           read-ahead tells when ranges are next needed and fetches them
 *           ahead (bfs_object_ahead), the uses of batches further on
 *           (bfs_object_plan: remembered, not fetched), and where the
 *           readers are (bfs_objects_set_now): the cache evicts by next
 *           use. Once every byte of an object is there, a hold seals it
 *           (bfs_object_seal: pinned whole until closed), and its rows
 *           are read from then on with no pin of their own.
 *
 * A replaced object (412: fs/remote's requests are conditional on the
 * version pinned at open) fails the fetches of what is not in the cache
 * yet, with -ESTALE, said once in the log; what is in the cache is of the
 * pinned version (its entry is keyed by it) and still served.
 *
 * Fork: threads do not survive it. bfs_objects_suspend stops the client
 * and the store thread before a fork; bfs_objects_resume in the process
 * that goes on (the daemon) starts new ones, the objects kept (their
 * pinned versions, their credentials, the cache entries and pins: the
 * parent that forked must _exit without closing them).
 *
 * Thread-safe after creation: every call from any thread but create,
 * destroy, open (the mount's thread, before serving), suspend and
 * resume. Lock order: a set's lock, then an object's (never the other
 * way); no lock is held across a wait on the network or the cache. */
#ifndef BFS_OBJECT_H
#define BFS_OBJECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/error.h"
#include "fs/remote/cache.h"
#include "fs/remote/object_stats.h"
#include "fs/remote/remote.h"

struct bfs_objects_opts {
	struct bfs_remote_opts remote; /* timeout_s: a request's deadline */
	const char *cache_dir; /* NULL: bfs_cache_default_dir(remote.envp) */
	uint64_t cache_bytes;  /* the bound (--cache-gb); 0: none, or: */
	bool cache_from_free;  /* 0: one from the free space (fs/remote/cache.h:
				* limit_from_free) */
	uint32_t chunk;	      /* of new entries; 0: fs/remote/cache's default */
	uint64_t request_max; /* bytes of one request; 0: 8 MiB */
	uint64_t merge_gap;   /* absent bytes fetched between two runs to
			       * make one request of them; 0: 256 KiB */
	uint64_t flight_max;  /* bytes in flight; 0: 128 MiB */
};

struct bfs_objects;
struct bfs_object;

/* The set: the cache directory opened (created), the client and the
 * store thread started. 0 or -errno with 'err' (the directory, libcurl,
 * a thread). */
int bfs_objects_create(struct bfs_objects **out,
		       const struct bfs_objects_opts *o, struct bfs_error *err);

/* Cancel the fetches in flight, close every object (their pins dropped,
 * their cache entries closed: the last process to close one syncs it)
 * and the cache, free. Accepts NULL. */
void bfs_objects_destroy(struct bfs_objects *os);

/* The session ended (unmounted): cancel the fetches in flight and fail
 * every later one at once (fs/remote's bfs_remote_cancel), so that a
 * gather waiting on a server that does not answer ends now with
 * -ECANCELED instead of at its deadline (--timeout, retries included).
 * Thread-safe; does not wait. bfs_objects_destroy still follows. */
void bfs_objects_abort(struct bfs_objects *os);

/* Before a fork: wait for the fetches in flight, stop the client and the
 * store thread. Nothing may be fetched until bfs_objects_resume. */
void bfs_objects_suspend(struct bfs_objects *os);
/* After it, in the process that goes on: a new client (same options) and
 * store thread, every object moved to them. 0 or -errno with 'err'. */
int bfs_objects_resume(struct bfs_objects *os, struct bfs_error *err);

/* The object at 'url' (as the user wrote it: it may hold a presigned
 * query, never shown): opened (fs/remote: one GET of byte 0, its size and
 * version pinned) and its cache entry opened (keyed by where requests go,
 * the version and the size), once per URL: the same object again for the
 * same URL. Owned by the set. 0, or -errno with 'err' naming the object:
 * fs/remote's (-ENOENT no such bucket or key, -EACCES credentials
 * refused, ...), -EINVAL an empty object or one whose version cannot be
 * pinned (neither ETag nor Last-Modified), fs/remote/cache's. */
int bfs_objects_open(struct bfs_objects *os, const char *url,
		     struct bfs_object **out, struct bfs_error *err);

/* The cache directory and bound (bfs_cache_limit: 0 none; lowered where
 * the filesystem was found full), for the user; whether the bound was
 * taken from the free space. */
const char *bfs_objects_dir(const struct bfs_objects *os);
uint64_t bfs_objects_limit(const struct bfs_objects *os);
bool bfs_objects_limit_from_free(const struct bfs_objects *os);

/* Fetches ahead of what is needed more than 'after' past the readers
 * (on their clock, bfs_objects_set_now) merge runs over gaps of up to
 * 'gap' bytes (not merge_gap). For an order that reads nearly every
 * chunk of the objects each epoch while the cache holds them all: a gap
 * fetched early is needed later anyway, so batches past the first few
 * come in a few large requests instead of one per row, while the first
 * batches' requests stay as small as their rows. Call before serving. */
void bfs_objects_far_gap(struct bfs_objects *os, uint64_t gap, uint64_t after);

/* The readers are at 'when' (positions the caller counts: the
 * read-ahead's clock): next uses before it are stale. */
void bfs_objects_set_now(struct bfs_objects *os, uint64_t when);

/* ---- one object ---------------------------------------------------- */

/* Its name for users (no query, no userinfo), its size, its cache data
 * file (owned by the entry: dup it to keep it; map it read-only). */
const char *bfs_object_name(const struct bfs_object *o);
uint64_t bfs_object_size(const struct bfs_object *o);
int bfs_object_fd(const struct bfs_object *o);

/* The readers' mapping of the object's cache file (whole, read-only,
 * MAP_SHARED; at the mount's end the caller unmaps it): where the disk
 * holds no room for bytes a gather waits for, they are laid over their
 * pages in memory instead (fs/README.md: remote sources) until the last
 * pin of them goes. Without it (or with two mappings of one object)
 * such bytes fail their gathers. Call before serving. */
void bfs_object_map(struct bfs_object *o, const void *map);

/* Bytes [off, off + len) of the pinned, waited-for range into buf: from
 * the cache file, or from the mapping where some are in memory. 0 or
 * -EIO. */
int bfs_object_read(struct bfs_object *o, void *buf, uint64_t off,
		    uint64_t len);

/* Structure: bytes r[0..n) (each within the object) present now, and kept
 * so (pinned) while the object is open. Waits for the fetches, bounded
 * by the client's deadlines. 0 or -errno with 'err' (the request's
 * reason, naming the object). */
int bfs_object_keep(struct bfs_object *o, const struct bfs_cache_range *r,
		    size_t n, struct bfs_error *err);

/* A gather's rows: pin r[0..n) (sorted by offset); what is absent and
 * not being fetched is fetched at once, neighbours merged, and stored as
 * needed now (bfs_cache_write_for: what is needed later may make room;
 * the chunks keep the next use the read-ahead planned). 0, or
 * -EOVERFLOW (too many pins), -EINVAL: none taken. */
int bfs_object_pin(struct bfs_object *o, const struct bfs_cache_range *r,
		   size_t n);
/* Wait until the pinned r[0..n) is present: 0; -ETIMEDOUT at
 * 'deadline_ns' (CLOCK_MONOTONIC); or the error of its fetch (-EIO,
 * -ETIMEDOUT, -ESTALE: replaced, -ENOBUFS: the cache's bound cannot hold
 * it) once a second fetch (after a first one failed) failed too; 'err'
 * (may be NULL) says why, naming the object. The pins stay. */
int bfs_object_wait(struct bfs_object *o, const struct bfs_cache_range *r,
		    size_t n, uint64_t deadline_ns, struct bfs_error *err);
/* The gather read them: unpinned. */
void bfs_object_unpin(struct bfs_object *o, const struct bfs_cache_range *r,
		      size_t n);

/* Seal o when every byte of it is in the cache and the cache's bound is
 * at least twice its size (or there is none): pin it whole, once, until
 * it is closed, so nothing of it is evicted and its rows need no pin of
 * their own (a sealed object is read as a local file is; what is left
 * under the bound for other objects is at least half of it). true when
 * o is sealed, now or before. Cheap while it cannot be: one atomic load
 * of the bytes present, or of a flag once o is found too big (the bound
 * is never raised while the cache is open). */
bool bfs_object_seal(struct bfs_object *o);
/* Whether o could be sealed: the cache's bound (as it is now) is at
 * least twice its size, or there is none. When not, its chunks come and
 * go as the batches need them. */
bool bfs_object_sealable(struct bfs_object *o);
/* Whether o is sealed (an atomic load: once true, true until closed). */
bool bfs_object_sealed(struct bfs_object *o);

/* The read-ahead: r[0..n) (sorted by offset) is next needed at 'when';
 * fetch what is absent and not being fetched, neighbours merged. May
 * wait for room in flight. Never fails (a failed fetch is fetched again
 * by the gather that needs it). */
void bfs_object_ahead(struct bfs_object *o, const struct bfs_cache_range *r,
		      size_t n, uint64_t when);

/* The read-ahead's plan: r[0..n) is needed at 'when', beside the uses
 * planned before (bfs_cache_plan: the cache evicts by the earliest one
 * not passed); nothing is fetched. Never fails (a use not remembered
 * makes eviction worse, never wrong). */
void bfs_object_plan(struct bfs_object *o, const struct bfs_cache_range *r,
		     size_t n, uint64_t when);

/* ---- counters ------------------------------------------------------ */

/* struct bfs_objects_stats: object_stats.h. */
void bfs_objects_stats(struct bfs_objects *os, struct bfs_objects_stats *out);

/* The held bytes, counted by the caller (a gather's rows). */
void bfs_objects_count_held(struct bfs_objects *os, uint64_t bytes);

#endif
