/* fs/remote/object_fetch: fetching a remote object's chunks into its cache
 * entry, and the pins and waits of its users (object.h; fs/README.md:
 * remote sources).
 *
 * Fetching. A range's chunks are walked in order: a chunk present is
 * skipped, an absent one is claimed (its in-flight mark set, its failure
 * cleared) unless a request of ours is fetching it already. Claimed
 * chunks make runs; a run is extended over a gap of at most merge_gap
 * absent chunks that can be claimed too (one request instead of two:
 * cheaper than two round trips for a few chunks nobody asked for), and
 * cut into requests of at most request_max bytes. Each request (a job)
 * reads into a buffer of its own; its bytes in flight are counted and
 * bounded (a gather's request may take twice the bound, so the read-ahead
 * cannot shut gathers out).
 *
 * Storing. fs/remote calls a job's 'done' on its thread, which must not
 * block: the job goes on a list, and the store thread writes its bytes
 * into the cache (bfs_cache_write: present, waiters woken) or fails its
 * chunks (bfs_cache_fail), then lifts their in-flight marks under the
 * object's lock (claims take the same lock): so a chunk that has failed
 * is never in flight, and a fetch again clears the failure of a fetch
 * that is over, never of one that is running. A chunk evicted before
 * its mark came off is failed with AGAIN as the mark comes off (unmark):
 * its waiters fetch it again.
 *
 * A full disk. Bytes that cannot be stored where the bound in force is
 * the disk's (fs/remote/cache: bfs_cache_bound_by_disk) are not thrown away
 * when a gather pins their chunks: they are laid over the readers'
 * mapping (anonymous memory, bounded by mem_max) and marked in memory
 * (o->mem), the waiters woken; a wait takes such a chunk for present, a
 * fetch never claims it, and the last unpin maps the cache file back
 * over it.
 *
 * Fetching ahead (bfs_object_ahead). Each range's chunks are told their
 * next use first (bfs_cache_next_use_sooner); what is absent is fetched
 * only where the cache can make room for it beside what is in flight
 * (room_ahead). Ranges needed more than 'far' from now (the readers'
 * clock) are joined over gaps of up to far_gap (widen, set by
 * bfs_objects_far_gap) while the cache's bound holds every object.
 * bfs_object_plan only tells the cache a later use, fetching nothing.
 *
 * Waits (bfs_object_wait): a chunk failed with AGAIN is fetched again as
 * often as that happens, one that failed otherwise once more (not a
 * replaced object's -ESTALE), within the deadline; then the reason is
 * explained in the error.
 *
 * Lock order: os->lock, then o->lock (object_impl.h says what each
 * guards). */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fs/log.h"
#include "fs/remote/object_impl.h"

#define MOD "object"

/* A chunk's failure that only says "fetch it again": its request is
 * over and it is absent (unmark). No request fails with it (store). */
#define AGAIN EAGAIN

/* Bytes of chunk c of o (the last one may be short). */
static uint64_t chunk_len(const struct bfs_object *o, uint64_t c)
{
	uint64_t at = c << o->shift;

	return o->size - at < o->chunk ? o->size - at : o->chunk;
}

/* ---- storing --------------------------------------------------------- */

/* Lift the in-flight marks of [off, off + len) of o, its request over.
 * A chunk that is then neither present, nor in memory, nor failed was
 * stored and evicted before the mark came off (nothing pinned it yet):
 * a gather that pinned it meanwhile saw it in flight and sent nothing,
 * so it is failed with AGAIN, which sends its waiters to fetch it
 * (wait_one); a later fetch clears that. [o->lock] */
static void unmark(struct bfs_object *o, uint64_t off, uint64_t len)
{
	for (uint64_t c = off >> o->shift;
	     c < o->nchunks && (c << o->shift) < off + len; c++) {
		uint64_t at = c << o->shift;
		uint64_t n = chunk_len(o, c);

		o->flight[c] = 0;
		if (!o->mem[c] && bfs_cache_wait(o->e, at, n, 0) == -ETIMEDOUT)
			bfs_cache_fail(o->e, at, n, AGAIN);
	}
}

/* The log line of a replaced object, once. */
static void say_stale(struct bfs_object *o, const struct bfs_error *err)
{
	if (atomic_exchange(&o->said_stale, true))
		return;
	bfs_log(BFS_LOG_ERR, MOD,
		"%s: replaced since it was mounted (%s): batches that need "
		"bytes not in the cache yet fail with EIO; remount to read "
		"the new version",
		o->name, err->msg);
}

/* Bytes [off, off + len) that could not be stored (rc): the last
 * failure of o says so. [o->lock] */
static void unstored(struct bfs_object *o, uint64_t off, uint64_t len, int rc)
{
	bfs_error_set(&o->last, rc, o->name, BFS_NO_OFFSET,
		      "bytes %" PRIu64 "-%" PRIu64
		      ": cannot be stored in the cache: %s",
		      off, off + len - 1,
		      rc == -ENOBUFS && bfs_cache_bound_by_disk(o->os->cache)
			  ? "its bound (what its filesystem's free space "
			    "holds) is full of bytes needed sooner or in use: "
			    "make room on it, or choose another --cache-dir"
		      : rc == -ENOBUFS ? "its bound (--cache-gb) is full of "
					 "bytes needed sooner or in use"
		      : rc == -ENOSPC || rc == -EDQUOT
			  ? "the cache directory's filesystem is full, and "
			    "what is in the cache is in use or needed sooner"
			  : strerror(-rc));
}

/* ---- bytes served from memory (the disk full) ------------------------ */

/* Errors of a store that say there is no room (on the disk, or in a
 * bound taken from it). */
static bool no_room(int rc)
{
	return rc == -ENOSPC || rc == -EDQUOT || rc == -ENOBUFS;
}

static uint64_t page_up(uint64_t n)
{
	long pg = sysconf(_SC_PAGESIZE);
	uint64_t p = pg > 0 ? (uint64_t)pg : 4096;

	return (n + p - 1) & ~(p - 1);
}

/* The cache file mapped again over chunk [off, off + len) of o's
 * mapping (what it showed before lay_over). 0 or -errno. */
static int lift(struct bfs_object *o, uint64_t off, uint64_t len)
{
	if (mmap(o->map + off, (size_t)page_up(len), PROT_READ,
		 MAP_SHARED | MAP_FIXED, bfs_cache_fd(o->e),
		 (off_t)off) != MAP_FAILED)
		return 0;
	bfs_log(BFS_LOG_ERR, MOD,
		"%s: bytes %" PRIu64 "-%" PRIu64
		": cannot map its cache file again: %s (kept in memory)",
		o->name, off, off + len - 1, strerror(errno));
	return -errno;
}

/* Bytes 'buf' of chunk [off, off + len) laid over o's mapping: anonymous
 * memory, read-only once filled. No reader reads the chunk meanwhile (it
 * is absent: nobody has seen it there). 0 or -errno. */
static int lay_over(struct bfs_object *o, uint64_t off, const void *buf,
		    uint64_t len)
{
	size_t n = (size_t)page_up(len);
	void *m = mmap(o->map + off, n, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	int rc;

	if (m == MAP_FAILED) {
		rc = -errno;
		lift(o, off, len);
		return rc;
	}
	memcpy(m, buf, (size_t)len);
	if (mprotect(m, n, PROT_READ) == 0)
		return 0;
	rc = -errno;
	lift(o, off, len);
	return rc;
}

/* n more bytes in memory, within os->mem_max: whether taken. */
static bool mem_take(struct bfs_objects *os, uint64_t n)
{
	uint64_t was = atomic_load(&os->mem_bytes);

	do {
		if (was + n > os->mem_max)
			return false;
	} while (!atomic_compare_exchange_weak(&os->mem_bytes, &was, was + n));
	return true;
}

/* Chunk [at, at + n) of o, bytes 'buf', that could not be stored (rc):
 * laid over the mapping, marked in memory, its waiters woken. 0, or
 * -ENOMEM (the memory bound reached: o->last says so) or lay_over's
 * error. [o->lock] */
static int spill(struct bfs_object *o, uint64_t at, const void *buf, uint64_t n,
		 int rc)
{
	struct bfs_objects *os = o->os;
	int e;

	if (!mem_take(os, n)) {
		bfs_error_set(&o->last, rc, o->name, BFS_NO_OFFSET,
			      "bytes %" PRIu64 "-%" PRIu64
			      ": no room in the cache's filesystem, and the "
			      "%" PRIu64 " MiB for bytes served from memory "
			      "are in use",
			      at, at + n - 1, os->mem_max >> 20);
		return -ENOMEM;
	}
	e = lay_over(o, at, buf, n);
	if (e < 0) {
		atomic_fetch_sub(&os->mem_bytes, n);
		return e;
	}
	__atomic_store_n(&o->mem[at >> o->shift], 1, __ATOMIC_RELEASE);
	bfs_object_count(&os->mem_served, n);
	bfs_cache_fail(o->e, at, n, ENOSPC); /* wakes the waiters */
	return 0;
}

/* The chunks of [off, off + len) of job j that could not be stored (rc)
 * and are not in the cache: those a gather pins (waits for), where the
 * disk is what has no room and the memory bound allows, laid over the
 * readers' mapping, marked in memory and their waiters woken to read
 * them there (bfs_object_wait: a chunk in memory counts as there); the
 * rest failed with rc. Nothing else is kept: chunks nobody pins now are
 * fetched again by whoever needs them. [o->lock] */
static void spill_or_fail(struct bfs_object *o, const struct job *j,
			  uint64_t off, uint64_t len, int rc)
{
	struct bfs_objects *os = o->os;
	const struct bfs_remote_req *q = &j->req;
	bool may = no_room(rc) && o->map && !o->maps_many &&
		   page_up(o->chunk) == o->chunk &&
		   bfs_cache_bound_by_disk(os->cache);

	for (uint64_t c = off >> o->shift;
	     c < o->nchunks && (c << o->shift) < off + len; c++) {
		uint64_t at = c << o->shift;
		uint64_t n = chunk_len(o, c);

		if (o->mem[c] || bfs_cache_present(o->e, at, n))
			continue;
		if (may && bfs_cache_pinned(o->e, at, n) &&
		    spill(o, at, (const char *)q->buf + (at - q->off), n, rc) ==
			0)
			continue;
		bfs_cache_fail(o->e, at, n, -rc);
	}
	if (may && !atomic_exchange(&os->said_mem, true))
		bfs_log(BFS_LOG_WARN, MOD,
			"%s: the cache directory's filesystem has no room: "
			"bytes a gather waits for are served from memory "
			"without being cached (at most %" PRIu64
			" MiB at once)",
			o->name, os->mem_max >> 20);
}

/* After an unpin of r[0..n): its chunks in memory that nobody pins any
 * more get their cache file's pages back, their memory freed (a pin
 * taken meanwhile finds them absent and fetches them: claims take
 * o->lock too). */
static void drop_unpinned(struct bfs_object *o, const struct bfs_cache_range *r,
			  size_t n)
{
	if (!atomic_load(&o->os->mem_bytes))
		return;
	pthread_mutex_lock(&o->lock);
	for (size_t i = 0; i < n; i++) {
		uint64_t end = r[i].off + r[i].len;

		for (uint64_t c = r[i].off >> o->shift;
		     c < o->nchunks && (c << o->shift) < end; c++) {
			uint64_t at = c << o->shift;
			uint64_t len = chunk_len(o, c);

			if (!o->mem[c] || bfs_cache_pinned(o->e, at, len) ||
			    lift(o, at, len) < 0)
				continue;
			__atomic_store_n(&o->mem[c], 0, __ATOMIC_RELEASE);
			atomic_fetch_sub(&o->os->mem_bytes, len);
		}
	}
	pthread_mutex_unlock(&o->lock);
}

int bfs_object_read(struct bfs_object *o, void *buf, uint64_t off, uint64_t len)
{
	bool mem = false;

	if (atomic_load(&o->os->mem_bytes))
		for (uint64_t c = off >> o->shift;
		     !mem && c < o->nchunks && (c << o->shift) < off + len; c++)
			mem = __atomic_load_n(&o->mem[c], __ATOMIC_ACQUIRE);
	if (mem) {
		memcpy(buf, o->map + off, (size_t)len);
		return 0;
	}
	return pread(bfs_cache_fd(o->e), buf, (size_t)len, (off_t)off) ==
		       (ssize_t)len
		   ? 0
		   : -EIO;
}

/* ---- storing, continued ---------------------------------------------- */

/* Bytes of job j into the cache: a gather's as needed now (room is made
 * at the expense of whatever is needed later), the read-ahead's at their
 * own next use (they never push out what is needed sooner). */
static int put(struct bfs_object *o, const struct job *j, uint64_t off,
	       const void *buf, uint64_t len)
{
	uint64_t now = atomic_load_explicit(&o->os->now, memory_order_relaxed);

	return j->demand ? bfs_cache_write_for(o->e, off, buf, len, now)
			 : bfs_cache_write(o->e, off, buf, len);
}

/* A request whose bytes do not fit the cache's bound or its disk at
 * once: its chunks stored one by one, each that does not fit failed on
 * its own (a gather's chunks usually fit where the neighbours merged with
 * them do not), and each unmarked as soon as it is done with: a gather
 * may claim it again then, so nothing after may touch it. 0 when some
 * were stored, else the last chunk's error. */
static int store_chunks(struct bfs_object *o, const struct job *j)
{
	const struct bfs_remote_req *q = &j->req;
	int stored = 0, last = -ENOBUFS;

	for (uint64_t off = q->off; off < q->off + q->len; off += o->chunk) {
		uint64_t n = q->off + q->len - off < o->chunk
				 ? q->off + q->len - off
				 : o->chunk;
		int rc =
		    put(o, j, off, (const char *)q->buf + (off - q->off), n);

		stored += rc == 0;
		pthread_mutex_lock(&o->lock);
		if (rc) {
			last = rc;
			unstored(o, off, n, rc);
			spill_or_fail(o, j, off, n, rc);
		}
		unmark(o, off, n);
		pthread_mutex_unlock(&o->lock);
	}
	return stored ? 0 : last;
}

/* Store job j (landed): its bytes into the cache, or its chunks failed;
 * then the marks lifted. */
static void store(struct bfs_objects *os, struct job *j)
{
	struct bfs_object *o = j->o;
	struct bfs_remote_req *q = &j->req;
	int rc = q->result == -AGAIN ? -EIO : q->result;

	if (rc == 0)
		rc = put(o, j, q->off, q->buf, q->len);
	/* only the store's want of room (the transport's ENOSPC is its
	 * failure: the buffer holds nothing) */
	if (q->result == 0 && no_room(rc) && q->len > o->chunk) {
		rc = store_chunks(o, j); /* each chunk done with */
	} else {
		pthread_mutex_lock(&o->lock);
		if (rc && q->result == 0) { /* the store's */
			unstored(o, q->off, q->len, rc);
			spill_or_fail(o, j, q->off, q->len, rc);
		} else if (rc) {
			o->last = q->err;
			bfs_cache_fail(o->e, q->off, q->len, -rc);
		}
		unmark(o, q->off, q->len);
		pthread_mutex_unlock(&o->lock);
	}
	if (rc == -ESTALE)
		say_stale(o, &q->err);
	else if (rc && q->result)
		bfs_log(BFS_LOG_DEBUG, MOD, "%s", q->err.msg);
	bfs_object_count(rc ? &os->fetch_failed : &os->fetches, 1);
	if (!rc)
		bfs_object_count(&os->fetch_bytes, q->len);
	free(q->buf);
	pthread_mutex_lock(&os->lock);
	os->flight_bytes -= q->len;
	pthread_cond_broadcast(&os->room);
	pthread_mutex_unlock(&os->lock);
	free(j);
}

void *bfs_object_store_main(void *arg)
{
	struct bfs_objects *os = arg;
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	pthread_mutex_lock(&os->lock);
	for (;;) {
		struct job *j = os->head;

		if (!j && os->stop)
			break;
		if (!j) {
			pthread_cond_wait(&os->landed, &os->lock);
			continue;
		}
		os->head = j->next;
		if (!os->head)
			os->tail = NULL;
		pthread_mutex_unlock(&os->lock);
		store(os, j);
		pthread_mutex_lock(&os->lock);
	}
	pthread_mutex_unlock(&os->lock);
	return NULL;
}

/* fs/remote's thread: the job landed (or failed); must not block. */
static void landed(struct bfs_remote_req *q)
{
	struct job *j = q->arg;
	struct bfs_objects *os = j->o->os;

	pthread_mutex_lock(&os->lock);
	j->next = NULL;
	if (os->tail)
		os->tail->next = j;
	else
		os->head = j;
	os->tail = j;
	pthread_cond_signal(&os->landed);
	pthread_mutex_unlock(&os->lock);
}

/* ---- fetching -------------------------------------------------------- */

/* A request that cannot be sent (no memory, no client): its chunks
 * failed and unmarked, its bytes out of flight. */
static void unsent(struct bfs_object *o, uint64_t off, uint64_t len, int rc)
{
	struct bfs_objects *os = o->os;

	pthread_mutex_lock(&o->lock);
	bfs_error_set(&o->last, rc, o->name, BFS_NO_OFFSET,
		      "cannot request bytes %" PRIu64 "-%" PRIu64 ": %s", off,
		      off + len - 1, strerror(-rc));
	bfs_cache_fail(o->e, off, len, -rc);
	unmark(o, off, len);
	pthread_mutex_unlock(&o->lock);
	bfs_object_count(&os->fetch_failed, 1);
	pthread_mutex_lock(&os->lock);
	os->flight_bytes -= len;
	pthread_cond_broadcast(&os->room);
	pthread_mutex_unlock(&os->lock);
}

/* Request bytes [off, off + len) of o (claimed), in pieces of at most
 * request_max, each once there is room in flight. */
static void request(struct bfs_object *o, uint64_t off, uint64_t len,
		    bool demand)
{
	struct bfs_objects *os = o->os;

	while (len) {
		uint64_t n = len < os->request_max ? len : os->request_max;
		uint64_t cap = demand ? 2 * os->flight_max : os->flight_max;
		struct job *j = calloc(1, sizeof(*j));
		void *buf = malloc((size_t)n);
		int rc = -ENOMEM;

		pthread_mutex_lock(&os->lock);
		while (os->flight_bytes && os->flight_bytes + n > cap &&
		       !os->stop)
			pthread_cond_wait(&os->room, &os->lock);
		os->flight_bytes += n;
		pthread_mutex_unlock(&os->lock);
		if (j && buf) {
			j->o = o;
			j->demand = demand;
			j->req = (struct bfs_remote_req){.obj = o->ro,
							 .off = off,
							 .len = (size_t)n,
							 .buf = buf,
							 .done = landed,
							 .arg = j};
			rc = os->r ? bfs_remote_submit(&j->req) : -ECANCELED;
		}
		if (rc) { /* 'landed' will not be called */
			free(j);
			free(buf);
			unsent(o, off, n, rc);
		}
		off += n;
		len -= n;
	}
}

/* Chunk c absent and claimable: claim it (mark, failure cleared).
 * [o->lock] */
static bool claim(struct bfs_object *o, uint64_t c)
{
	uint64_t off = c << o->shift;
	uint64_t len = chunk_len(o, c);

	if (o->flight[c] || o->mem[c] || bfs_cache_present(o->e, off, len))
		return false;
	o->flight[c] = 1;
	bfs_cache_fail(o->e, off, len, 0);
	return true;
}

/* Whether chunks [a, b) can all be claimed (absent, not in flight).
 * [o->lock] */
static bool claimable(struct bfs_object *o, uint64_t a, uint64_t b)
{
	for (uint64_t c = a; c < b; c++)
		if (o->flight[c] || o->mem[c] ||
		    bfs_cache_present(o->e, c << o->shift, chunk_len(o, c)))
			return false;
	return true;
}

/* Fetch what is absent and not in flight of ranges r[0..n) (sorted by
 * offset, within the object): claimed runs, merged over gaps of at most
 * gap_bytes, then requested. */
static void fetch(struct bfs_object *o, const struct bfs_cache_range *r,
		  size_t n, bool demand, uint64_t gap_bytes)
{
	uint64_t gap = gap_bytes >> o->shift;
	uint64_t *runs = NULL; /* [a, b) pairs of chunks */
	size_t nruns = 0, cap = 0;
	bool open = false;

	pthread_mutex_lock(&o->lock);
	for (size_t i = 0; i < n; i++) {
		uint64_t c = r[i].off >> o->shift;
		uint64_t end =
		    r[i].len ? ((r[i].off + r[i].len - 1) >> o->shift) + 1 : c;

		for (; c < end && c < o->nchunks; c++) {
			uint64_t *last = open ? &runs[2 * nruns - 1] : NULL;

			if (last && c >= last[-1] && c < *last)
				continue; /* ranges overlap: claimed */
			if (!claim(o, c))
				continue;
			if (last && c >= *last &&
			    (c == *last ||
			     (c - *last <= gap && claimable(o, *last, c)))) {
				for (uint64_t g = *last; g < c; g++)
					claim(o, g);
				*last = c + 1;
				continue;
			}
			if (nruns == cap) {
				size_t more = cap * 2 + 8;
				uint64_t *nr =
				    realloc(runs, more * 2 * sizeof(*nr));

				if (!nr) { /* out of memory: not fetched */
					o->flight[c] = 0;
					break;
				}
				runs = nr;
				cap = more;
			}
			runs[2 * nruns] = c;
			runs[2 * nruns + 1] = c + 1;
			nruns++;
			open = true;
		}
	}
	pthread_mutex_unlock(&o->lock);
	for (size_t i = 0; i < nruns; i++) {
		uint64_t off = runs[2 * i] << o->shift;
		uint64_t end = runs[2 * i + 1] << o->shift;

		request(o, off, (end < o->size ? end : o->size) - off, demand);
	}
	free(runs);
}

/* Ranges r[0..n) cut to the object: false when one lies past it. */
static bool within(const struct bfs_object *o, const struct bfs_cache_range *r,
		   size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (r[i].off > o->size || r[i].len > o->size - r[i].off)
			return false;
	return true;
}

int bfs_object_pin(struct bfs_object *o, const struct bfs_cache_range *r,
		   size_t n)
{
	bool all = true;

	if (!within(o, r, n))
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		int rc = bfs_cache_pin(o->e, r[i].off, r[i].len);

		if (rc < 0) {
			bfs_object_unpin(o, r, i);
			return rc;
		}
		all = all && rc == 1;
	}
	if (!all) {
		bfs_object_count(&o->os->waits, 1);
		fetch(o, r, n, true, o->os->merge_gap);
	}
	return 0;
}

void bfs_object_unpin(struct bfs_object *o, const struct bfs_cache_range *r,
		      size_t n)
{
	for (size_t i = 0; i < n; i++)
		bfs_cache_unpin(o->e, r[i].off, r[i].len);
	drop_unpinned(o, r, n);
}

bool bfs_object_sealed(struct bfs_object *o)
{
	return atomic_load_explicit(&o->sealed, memory_order_acquire);
}

bool bfs_object_sealable(struct bfs_object *o)
{
	uint64_t limit = bfs_cache_limit(o->os->cache);

	return !limit || o->size <= limit / 2;
}

bool bfs_object_seal(struct bfs_object *o)
{
	const struct bfs_cache_range whole = {0, o->size};
	int rc;

	if (bfs_object_sealed(o) ||
	    atomic_load_explicit(&o->unsealable, memory_order_relaxed))
		return bfs_object_sealed(o);
	if (!o->size || bfs_cache_present_bytes(o->e) < o->size)
		return false; /* a hint: the pin below decides */
	if (!bfs_object_sealable(o)) {
		atomic_store(&o->unsealable, true);
		return false;
	}
	if (atomic_exchange(&o->sealing, true))
		return bfs_object_sealed(o); /* another thread is at it */
	rc = bfs_cache_pin(o->e, 0, o->size);
	if (rc != 1) {
		if (rc == 0) /* a chunk went meanwhile */
			bfs_object_unpin(o, &whole, 1);
		atomic_store(&o->sealing, false);
		return false;
	}
	atomic_store_explicit(&o->sealed, true, memory_order_release);
	bfs_log(BFS_LOG_INFO, MOD,
		"%s: every byte is in the cache: kept there until unmounted, "
		"its rows read without pins of their own",
		o->name);
	return true;
}

/* For a wait of [off, off + len) of o that ran out: the first chunk
 * of it still missing and why, into out ("" when none is). */
static void missing(struct bfs_object *o, uint64_t off, uint64_t len, char *out,
		    size_t size)
{
	out[0] = 0;
	for (uint64_t c = off >> o->shift;
	     c < o->nchunks && (c << o->shift) < off + len; c++) {
		uint64_t at = c << o->shift;
		uint64_t n = chunk_len(o, c);
		int rc = __atomic_load_n(&o->mem[c], __ATOMIC_ACQUIRE)
			     ? 0
			     : bfs_cache_wait(o->e, at, n, 0);
		bool flying;

		if (rc == 0)
			continue;
		pthread_mutex_lock(&o->lock);
		flying = o->flight[c];
		pthread_mutex_unlock(&o->lock);
		snprintf(out, size, "; chunk at byte %" PRIu64 ": %s", at,
			 flying		    ? "its request still in flight"
			 : rc == -ETIMEDOUT ? "absent, and no request for it"
					    : strerror(-rc));
		return;
	}
}

/* Why the wait for [off, off + len) of o ended with rc: the last
 * failure of a fetch of o, or that the deadline passed ('late'). */
static void explain(struct bfs_object *o, int rc, bool late, uint64_t off,
		    uint64_t len, struct bfs_error *err)
{
	struct bfs_error last;
	char which[96] = "";

	if (!err)
		return;
	pthread_mutex_lock(&o->lock);
	last = o->last;
	pthread_mutex_unlock(&o->lock);
	if (!late && last.msg[0]) {
		*err = last;
		return;
	}
	if (late)
		missing(o, off, len, which, sizeof(which));
	bfs_error_set(err, rc, o->name, BFS_NO_OFFSET,
		      "bytes %" PRIu64 "-%" PRIu64 " %s%s%s%s%s", off,
		      off + len - 1,
		      late ? "not fetched within the read's deadline"
			   : "could not be fetched",
		      which, last.msg[0] ? " (last failure: " : "", last.msg,
		      last.msg[0] ? ")" : "");
}

/* bfs_cache_wait of pinned range r, where a chunk in memory counts as
 * there (its failure, ENOSPC, only woke the waiters). */
static int wait_range(struct bfs_object *o, const struct bfs_cache_range *r,
		      uint64_t deadline_ns)
{
	uint64_t end = r->off + r->len;
	int rc = bfs_cache_wait(o->e, r->off, r->len, deadline_ns);

	if (rc == 0 || !atomic_load(&o->os->mem_bytes))
		return rc;
	for (uint64_t at = r->off; at < end;) { /* chunk by chunk */
		uint64_t c = at >> o->shift;
		uint64_t next =
		    (c + 1) << o->shift < end ? (c + 1) << o->shift : end;

		rc = bfs_cache_wait(o->e, at, next - at, deadline_ns);
		if (rc && __atomic_load_n(&o->mem[c], __ATOMIC_ACQUIRE))
			rc = 0;
		if (rc)
			return rc;
		at = next;
	}
	return 0;
}

/* Wait for one pinned range: a chunk failed with AGAIN (unmark) is
 * fetched again, as often as that happens; one that failed otherwise,
 * once more. */
static int wait_one(struct bfs_object *o, const struct bfs_cache_range *r,
		    uint64_t deadline_ns, struct bfs_error *err)
{
	for (int again = 0;;) {
		int rc = wait_range(o, r, deadline_ns);
		bool late;

		if (rc == 0)
			return 0;
		late = bfs_object_now_ns() >= deadline_ns;
		if (!late && (rc == -AGAIN || (rc != -ESTALE && !again++))) {
			fetch(o, r, 1, true, o->os->merge_gap);
			continue;
		}
		explain(o, rc, late, r->off, r->len, err);
		return rc;
	}
}

int bfs_object_wait(struct bfs_object *o, const struct bfs_cache_range *r,
		    size_t n, uint64_t deadline_ns, struct bfs_error *err)
{
	int rc = 0;

	for (size_t i = 0; i < n && rc == 0; i++)
		rc = wait_one(o, &r[i], deadline_ns, err);
	return rc;
}

/* Ranges r[0..n) (sorted by offset) joined where less than 'gap' bytes
 * lie between, into out (n at most): the spans a far fetch claims whole,
 * but for the chunks present or in flight already, which split its runs
 * (fetch): so batches past the first few come in requests as large as
 * what is still absent between the chunks claimed before. How many. */
static size_t widen(const struct bfs_cache_range *r, size_t n, uint64_t gap,
		    struct bfs_cache_range *out)
{
	size_t m = 0;

	for (size_t i = 0; i < n; i++) {
		uint64_t end = m ? out[m - 1].off + out[m - 1].len : 0;

		if (m && r[i].off <= end + gap) {
			if (r[i].off + r[i].len > end)
				out[m - 1].len =
				    r[i].off + r[i].len - out[m - 1].off;
		} else {
			out[m++] = r[i];
		}
	}
	return m;
}

/* Whether the cache has room for the absent chunks of r[0..n), next
 * needed at 'when', beside the bytes in flight (they all land there),
 * made now by its policy without pushing out anything needed at or
 * before 'when' (bfs_cache_make_room). Else a fetch ahead of them would
 * only be thrown away when it lands (its store finds no room: a disk
 * found full lowers the bound far below the window the read-ahead was
 * given), and fetched again by the gather that needs them. */
static bool room_ahead(struct bfs_object *o, const struct bfs_cache_range *r,
		       size_t n, uint64_t when)
{
	struct bfs_objects *os = o->os;
	uint64_t absent = 0, flight;

	for (size_t i = 0; i < n; i++) {
		uint64_t c = r[i].off >> o->shift;
		uint64_t end =
		    r[i].len ? ((r[i].off + r[i].len - 1) >> o->shift) + 1 : c;

		for (; c < end && c < o->nchunks; c++) {
			uint64_t len = chunk_len(o, c);

			if (!bfs_cache_present(o->e, c << o->shift, len))
				absent += len;
		}
	}
	pthread_mutex_lock(&os->lock);
	flight = os->flight_bytes;
	pthread_mutex_unlock(&os->lock);
	return bfs_cache_make_room(os->cache, flight + absent, when) == 0;
}

/* Whether the cache's bound (as it is now: a disk found full lowers it)
 * holds every object of the set: wide gaps far ahead only then. */
static bool cache_holds_all(struct bfs_objects *os)
{
	uint64_t limit = bfs_cache_limit(os->cache), total = 0;

	if (!limit)
		return true;
	pthread_mutex_lock(&os->lock);
	for (struct bfs_object *x = os->objects; x; x = x->next)
		total += x->size;
	pthread_mutex_unlock(&os->lock);
	return total <= limit;
}

void bfs_object_ahead(struct bfs_object *o, const struct bfs_cache_range *r,
		      size_t n, uint64_t when)
{
	struct bfs_objects *os = o->os;
	struct bfs_cache_range *wide = NULL;
	bool all = true;
	uint64_t now;

	if (!within(o, r, n))
		return;
	for (size_t i = 0; i < n; i++) {
		bfs_cache_next_use_sooner(o->e, r[i].off, r[i].len, when);
		all = all && bfs_cache_present(o->e, r[i].off, r[i].len);
	}
	if (all)
		return;
	now = atomic_load_explicit(&os->now, memory_order_relaxed);
	if (os->far_gap && when != BFS_CACHE_NEVER && when > now + os->far &&
	    cache_holds_all(os) && (wide = malloc(n * sizeof(*wide)))) {
		n = widen(r, n, os->far_gap, wide);
		r = wide;
	}
	if (room_ahead(o, r, n, when))
		fetch(o, r, n, false, os->merge_gap);
	free(wide);
}

void bfs_object_plan(struct bfs_object *o, const struct bfs_cache_range *r,
		     size_t n, uint64_t when)
{
	if (!within(o, r, n))
		return;
	for (size_t i = 0; i < n; i++)
		bfs_cache_plan(o->e, r[i].off, r[i].len, when);
}

static int by_off(const void *a, const void *b)
{
	const struct bfs_cache_range *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

int bfs_object_keep(struct bfs_object *o, const struct bfs_cache_range *r,
		    size_t n, struct bfs_error *err)
{
	uint64_t wait_ns = (uint64_t)(o->os->ropt.timeout_s * 3e9) +
			   (uint64_t)10e9; /* the client's deadlines first */
	size_t pinned = 0;
	int rc = 0;

	pthread_mutex_lock(&o->lock);
	if (o->nkept + n > o->kept_cap) {
		size_t cap = (o->nkept + n) * 2;
		struct bfs_cache_range *k = realloc(o->kept, cap * sizeof(*k));

		if (!k)
			rc = -ENOMEM;
		else {
			o->kept = k;
			o->kept_cap = cap;
		}
	}
	pthread_mutex_unlock(&o->lock);
	for (; rc == 0 && pinned < n; pinned++) {
		rc = bfs_cache_pin(o->e, r[pinned].off, r[pinned].len);
		rc = rc < 0 ? rc : 0;
	}
	if (rc && pinned)
		pinned--; /* the one that failed took none */
	if (rc == 0) {	  /* in order: neighbours merge */
		struct bfs_cache_range *sorted = malloc(n * sizeof(*r));

		if (sorted) {
			memcpy(sorted, r, n * sizeof(*r));
			qsort(sorted, n, sizeof(*r), by_off);
		}
		fetch(o, sorted ? sorted : r, n, true, o->os->merge_gap);
		free(sorted);
	}
	if (rc == 0)
		rc = bfs_object_wait(o, r, n, bfs_object_now_ns() + wait_ns,
				     err);
	if (rc) {
		for (size_t i = 0; i < pinned; i++)
			bfs_cache_unpin(o->e, r[i].off, r[i].len);
		if (rc == -ENOMEM || rc == -EOVERFLOW || rc == -EINVAL)
			bfs_error_set(err, rc, o->name, BFS_NO_OFFSET,
				      "cannot keep its structure in the "
				      "cache: %s",
				      strerror(-rc));
		return rc;
	}
	pthread_mutex_lock(&o->lock);
	memcpy(o->kept + o->nkept, r, n * sizeof(*r));
	o->nkept += n;
	pthread_mutex_unlock(&o->lock);
	return 0;
}
