/* fs/remote/cache: chunks (the directory and entries: cache.c; fs/README.md:
 * remote objects: the cache).
 *
 * A chunk's state is one word in the entry's shared map (cache_impl.h),
 * changed only by compare-and-swap, so threads and processes agree:
 *   write   pin (waiting while the chunk is being evicted), pwrite the
 *           bytes, then set W_PRESENT: a word never says present before
 *           its bytes are in the file; a writer killed before that leaves
 *           it absent, a torn pwrite included. Two writers of one chunk
 *           (threads or mounts) both write the object version's bytes:
 *           identical, so a reader of the mapping sees the same bytes
 *           whichever store it meets.
 *   read    pin, wait for W_PRESENT, read the mapping, unpin.
 *   evict   only from W_PRESENT with no pin: one CAS clears W_PRESENT and
 *           sets W_EVICTING (with our slot), then the hole is punched,
 *           then W_EVICTING is cleared. A pin taken after the CAS sees the
 *           chunk absent; a writer waits until the punch is over (or its
 *           evictor's slot lock is gone: a dead process), so a punch
 *           never removes bytes a word says are present.
 *   wait    set W_WAITERS, sleep on the word (a futex on a shared file
 *           mapping: writers of other processes wake us); whoever changes
 *           a word with W_WAITERS clears it and wakes everyone.
 *
 * Eviction. Bounded, a write first makes room for its absent chunks
 * (room_locked): while the bytes present in the handle's entries, plus
 * those being written, plus these would pass the bound, a round scans
 * every chunk of the open entries for unpinned present ones and evicts
 * the best victims, at least opts.evict_bytes: by next use (the earlier
 * of the use told and the first use planned, cache_plan.c; the furthest
 * first; stale or unknown ones before any known one, least recently used
 * first among them), never one needed as soon as or sooner than the
 * chunks written; or by least recent use. bfs_cache_make_room makes the
 * same room for a fetch ahead before it is sent.
 *
 * A full disk. The bound is bytes, the disk may hold fewer: where a
 * write's bytes would not fit its free space, the bound in force is
 * lowered to what the disk holds (disk_check); a write that finds it
 * full even so (ENOSPC, EDQUOT) lowers it to the bytes present, evicts
 * as for room and writes again (write_all). Never raised again. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fs/remote/cache.h"
#include "fs/remote/cache_impl.h"
#include "fs/log.h"

static uint32_t wload(const uint32_t *w)
{
	return __atomic_load_n(w, __ATOMIC_SEQ_CST);
}

/* *w from *old to new: true; else false with *old the current value. */
static bool wcas(uint32_t *w, uint32_t *old, uint32_t new)
{
	return __atomic_compare_exchange_n(w, old, new, false, __ATOMIC_SEQ_CST,
					   __ATOMIC_SEQ_CST);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Sleep while *w == val, until woken or deadline (CLOCK_MONOTONIC ns).
 * Not FUTEX_PRIVATE: the word is in a shared file mapping. */
static void futex_wait(uint32_t *w, uint32_t val, uint64_t deadline_ns)
{
	struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000u),
			      .tv_nsec = (long)(deadline_ns % 1000000000u)};

	syscall(SYS_futex, w, FUTEX_WAIT_BITSET, val,
		deadline_ns == UINT64_MAX ? NULL : &ts, NULL,
		FUTEX_BITSET_MATCH_ANY);
}

static void futex_wake(uint32_t *w)
{
	syscall(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

uint64_t bfs_cache_chunk_bytes(const struct bfs_cache_entry *e, uint64_t c)
{
	uint64_t off = c << e->shift;

	return e->size - off < e->chunk ? e->size - off : e->chunk;
}

/* Chunks [*first, *end) covering [off, off+len): 0, or -EINVAL past the
 * object. */
static int chunks_of(const struct bfs_cache_entry *e, uint64_t off,
		     uint64_t len, uint64_t *first, uint64_t *end)
{
	if (off > e->size || len > e->size - off)
		return -EINVAL;
	*first = off >> e->shift;
	*end = len ? ((off + len - 1) >> e->shift) + 1 : *first;
	return 0;
}

void bfs_cache_recover_words(struct bfs_cache_entry *e)
{
	uint64_t present = 0;

	for (uint64_t c = 0; c < e->nchunks; c++) {
		e->words[c] &= W_PRESENT;
		if (e->words[c])
			present += bfs_cache_chunk_bytes(e, c);
	}
	__atomic_store_n(&e->hdr->present, present, __ATOMIC_SEQ_CST);
}

/* Clear 'bits' and W_WAITERS in chunk c's word, setting 'set'; wake the
 * waiters. Returns the old word. */
static uint32_t word_update(struct bfs_cache_entry *e, uint64_t c,
			    uint32_t bits, uint32_t set)
{
	uint32_t w = wload(&e->words[c]);

	while (!wcas(&e->words[c], &w, ((w & ~(bits | W_WAITERS)) | set)))
		;
	if (w & W_WAITERS)
		futex_wake(&e->words[c]);
	return w;
}

static void set_present(struct bfs_cache_entry *e, uint64_t c)
{
	uint32_t w = word_update(e, c, 0, W_PRESENT);

	if (!(w & W_PRESENT))
		__atomic_add_fetch(&e->hdr->present,
				   bfs_cache_chunk_bytes(e, c),
				   __ATOMIC_SEQ_CST);
}

/* Whether the user in 'slot' still has the entry open (holds its lock). */
static bool slot_alive(struct bfs_cache_entry *e, unsigned slot)
{
	struct flock fl = {.l_type = F_WRLCK,
			   .l_whence = SEEK_SET,
			   .l_start = SLOT_BASE + slot,
			   .l_len = 1};

	if (slot == e->slot)
		return true; /* one of our threads */
	return fcntl(e->map_fd, F_OFD_GETLK, &fl) < 0 || fl.l_type != F_UNLCK;
}

/* Sleep on chunk c's word (value w, without W_WAITERS yet) until it
 * changes or deadline. */
static void word_sleep(struct bfs_cache_entry *e, uint64_t c, uint32_t w,
		       uint64_t deadline_ns)
{
	if (!(w & W_WAITERS)) {
		if (!wcas(&e->words[c], &w, w | W_WAITERS))
			return; /* changed: look again */
		w |= W_WAITERS;
	}
	futex_wait(&e->words[c], w, deadline_ns);
}

/* Pin chunk c for writing: wait while it is being evicted (taking over
 * from an evictor that died). 0 or -EOVERFLOW. */
static int pin_for_write(struct bfs_cache_entry *e, uint64_t c)
{
	uint32_t w = wload(&e->words[c]);

	for (;;) {
		if (w & W_EVICTING) {
			unsigned slot = (w & W_SLOT) >> W_SLOT_SHIFT;

			if (!slot_alive(e, slot)) {
				/* its punch may be half done: still absent */
				uint32_t old = w;

				if (wcas(&e->words[c], &w,
					 w & ~(W_EVICTING | W_SLOT |
					       W_WAITERS))) {
					if (old & W_WAITERS)
						futex_wake(&e->words[c]);
					w = old &
					    ~(W_EVICTING | W_SLOT | W_WAITERS);
				}
				continue;
			}
			word_sleep(e, c, w, now_ns() + 50000000u);
			w = wload(&e->words[c]);
			continue;
		}
		if ((w & W_PINS) == W_PINS)
			return -EOVERFLOW;
		if (wcas(&e->words[c], &w, w + 1))
			return 0;
	}
}

/* Pin chunk c: 1 present, 0 absent, -EOVERFLOW. */
static int pin_chunk(struct bfs_cache_entry *e, uint64_t c)
{
	uint32_t w = wload(&e->words[c]);

	do {
		if ((w & W_PINS) == W_PINS)
			return -EOVERFLOW;
	} while (!wcas(&e->words[c], &w, w + 1));
	return (w & W_PRESENT) != 0;
}

static void unpin_chunk(struct bfs_cache_entry *e, uint64_t c)
{
	uint32_t w = wload(&e->words[c]);

	do {
		if (!(w & W_PINS)) {
			bfs_log(BFS_LOG_ERR, "cache",
				"%s: chunk %llu unpinned but not pinned",
				e->url, (unsigned long long)c);
			return;
		}
	} while (!wcas(&e->words[c], &w, w - 1));
}

bool bfs_cache_pinned(struct bfs_cache_entry *e, uint64_t off, uint64_t len)
{
	uint64_t c, end;

	if (chunks_of(e, off, len, &c, &end) < 0)
		return false;
	for (; c < end; c++)
		if (wload(&e->words[c]) & W_PINS)
			return true;
	return false;
}

bool bfs_cache_present(struct bfs_cache_entry *e, uint64_t off, uint64_t len)
{
	uint64_t c, end;

	if (chunks_of(e, off, len, &c, &end) < 0)
		return false;
	for (; c < end; c++)
		if (!(wload(&e->words[c]) & W_PRESENT))
			return false;
	return true;
}

int64_t bfs_cache_missing(struct bfs_cache_entry *e, uint64_t off, uint64_t len,
			  struct bfs_cache_range *out, size_t max)
{
	uint64_t c, end;
	int64_t n = 0;
	bool open_run = false;

	if (chunks_of(e, off, len, &c, &end) < 0)
		return -EINVAL;
	for (; c < end; c++) {
		if (wload(&e->words[c]) & W_PRESENT) {
			open_run = false;
			continue;
		}
		if (open_run) {
			if ((size_t)n <= max)
				out[n - 1].len += bfs_cache_chunk_bytes(e, c);
			continue;
		}
		if ((size_t)n < max)
			out[n] = (struct bfs_cache_range){
			    c << e->shift, bfs_cache_chunk_bytes(e, c)};
		n++;
		open_run = true;
	}
	return n;
}

int bfs_cache_pin(struct bfs_cache_entry *e, uint64_t off, uint64_t len)
{
	struct bfs_cache *ca = e->cache;
	uint64_t first, end, hit = 0;
	uint64_t stamp = __atomic_add_fetch(&ca->clock, 1, __ATOMIC_RELAXED);

	if (chunks_of(e, off, len, &first, &end) < 0)
		return -EINVAL;
	for (uint64_t c = first; c < end; c++) {
		int rc = pin_chunk(e, c);

		if (rc < 0) {
			while (c-- > first)
				unpin_chunk(e, c);
			return rc;
		}
		hit += (uint64_t)rc;
		__atomic_store_n(&e->last[c], stamp, __ATOMIC_RELAXED);
	}
	__atomic_add_fetch(&ca->st.hit_chunks, hit, __ATOMIC_RELAXED);
	__atomic_add_fetch(&ca->st.miss_chunks, end - first - hit,
			   __ATOMIC_RELAXED);
	return hit == end - first;
}

void bfs_cache_unpin(struct bfs_cache_entry *e, uint64_t off, uint64_t len)
{
	uint64_t c, end;

	if (chunks_of(e, off, len, &c, &end) < 0)
		return;
	for (; c < end; c++)
		unpin_chunk(e, c);
}

int bfs_cache_wait(struct bfs_cache_entry *e, uint64_t off, uint64_t len,
		   uint64_t deadline_ns)
{
	uint64_t c, end;

	if (chunks_of(e, off, len, &c, &end) < 0)
		return -EINVAL;
	for (; c < end; c++) {
		for (;;) {
			uint32_t w = wload(&e->words[c]);
			int error;

			if (w & W_PRESENT)
				break;
			error = __atomic_load_n(&e->err[c], __ATOMIC_SEQ_CST);
			if (error)
				return -error;
			if (now_ns() >= deadline_ns)
				return -ETIMEDOUT;
			if (!(w & W_WAITERS)) {
				/* then look at err again before sleeping:
				 * bfs_cache_fail sets it, then clears
				 * W_WAITERS (Dekker's order) */
				wcas(&e->words[c], &w, w | W_WAITERS);
				continue;
			}
			futex_wait(&e->words[c], w, deadline_ns);
		}
	}
	return 0;
}

void bfs_cache_fail(struct bfs_cache_entry *e, uint64_t off, uint64_t len,
		    int error)
{
	uint64_t c, end;

	if (chunks_of(e, off, len, &c, &end) < 0)
		return;
	for (; c < end; c++) {
		__atomic_store_n(&e->err[c],
				 (uint8_t)(error > 255 ? EIO : error),
				 __ATOMIC_SEQ_CST);
		if (error && (__atomic_fetch_and(&e->words[c], ~W_WAITERS,
						 __ATOMIC_SEQ_CST) &
			      W_WAITERS))
			futex_wake(&e->words[c]);
	}
}

void bfs_cache_next_use(struct bfs_cache_entry *e, uint64_t off, uint64_t len,
			uint64_t pos)
{
	uint64_t c, end;

	if (chunks_of(e, off, len, &c, &end) < 0)
		return;
	for (; c < end; c++)
		__atomic_store_n(&e->next1[c],
				 pos == BFS_CACHE_NEVER ? 0 : pos + 1,
				 __ATOMIC_RELAXED);
}

void bfs_cache_set_now(struct bfs_cache *c, uint64_t pos)
{
	__atomic_store_n(&c->now, pos, __ATOMIC_RELAXED);
}

void bfs_cache_next_use_sooner(struct bfs_cache_entry *e, uint64_t off,
			       uint64_t len, uint64_t pos)
{
	uint64_t now = __atomic_load_n(&e->cache->now, __ATOMIC_RELAXED);
	uint64_t c, end, want = pos == BFS_CACHE_NEVER ? 0 : pos + 1;

	if (chunks_of(e, off, len, &c, &end) < 0 || !want)
		return;
	for (; c < end; c++) {
		uint64_t n1 = __atomic_load_n(&e->next1[c], __ATOMIC_RELAXED);

		do { /* known, not stale, and as soon: kept */
			if (n1 && n1 - 1 >= now && n1 <= want)
				break;
		} while (!__atomic_compare_exchange_n(&e->next1[c], &n1, want,
						      false, __ATOMIC_RELAXED,
						      __ATOMIC_RELAXED));
	}
}

/* When chunk c is next needed, as the policy sees it: the earlier of its
 * next use and its first planned use not before now; BFS_CACHE_NEVER
 * when neither is known (or both are stale). */
static uint64_t next_of(struct bfs_cache_entry *e, uint64_t c, uint64_t now)
{
	uint64_t n1 = __atomic_load_n(&e->next1[c], __ATOMIC_RELAXED);
	uint64_t told = n1 == 0 || n1 - 1 < now ? BFS_CACHE_NEVER : n1 - 1;
	uint64_t planned = bfs_cache_planned(e, c, now);

	return planned < told ? planned : told;
}

/* Evict chunk c if present and unpinned: its bytes, 0 (it was not), or
 * -errno (the punch failed; the chunk is absent all the same). */
static int64_t evict_chunk(struct bfs_cache_entry *e, uint64_t c)
{
	struct bfs_cache *ca = e->cache;
	uint64_t bytes = bfs_cache_chunk_bytes(e, c);
	uint32_t w = wload(&e->words[c]);
	int rc;

	do {
		if ((w & (W_PRESENT | W_EVICTING | W_PINS)) != W_PRESENT)
			return 0;
	} while (!wcas(&e->words[c], &w,
		       (w & ~(W_PRESENT | W_SLOT)) | W_EVICTING |
			   ((uint32_t)e->slot << W_SLOT_SHIFT)));
	__atomic_sub_fetch(&e->hdr->present, bytes, __ATOMIC_SEQ_CST);
	rc = fallocate(e->data_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		       (off_t)(c << e->shift), (off_t)bytes);
	if (rc < 0)
		rc = -errno;
	word_update(e, c, W_EVICTING | W_SLOT, 0);
	if (rc < 0) {
		bfs_log(BFS_LOG_WARN, "cache", "%s: punching a hole: %s",
			e->url, strerror(-rc));
		return rc;
	}
	__atomic_add_fetch(&ca->st.evicted_chunks, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&ca->st.evicted_bytes, bytes, __ATOMIC_RELAXED);
	return (int64_t)bytes;
}

int64_t bfs_cache_evict(struct bfs_cache_entry *e, uint64_t off, uint64_t len)
{
	uint64_t c, end;
	int64_t total = 0;

	if (chunks_of(e, off, len, &c, &end) < 0)
		return -EINVAL;
	for (; c < end; c++) {
		int64_t n = evict_chunk(e, c);

		if (n < 0)
			return n;
		total += n;
	}
	return total;
}

/* A candidate victim: (a, b) larger = evicted sooner. */
struct victim {
	uint64_t a, b;
	struct bfs_cache_entry *e;
	uint64_t c;
};

static bool stronger(const struct victim *x, const struct victim *y)
{
	return x->a != y->a ? x->a > y->a : x->b > y->b;
}

/* Min-heap (the weakest on top) of the k strongest victims seen. */
static void heap_offer(struct victim *h, size_t *n, size_t k,
		       const struct victim *v)
{
	size_t i;

	if (*n < k) {
		for (i = (*n)++; i && stronger(&h[(i - 1) / 2], v);
		     i = (i - 1) / 2)
			h[i] = h[(i - 1) / 2];
		h[i] = *v;
		return;
	}
	if (!stronger(v, &h[0]))
		return;
	for (i = 0;;) {
		size_t l = 2 * i + 1, m = l;

		if (l >= *n)
			break;
		if (l + 1 < *n && stronger(&h[l], &h[l + 1]))
			m = l + 1;
		if (!stronger(v, &h[m]))
			break;
		h[i] = h[m];
		i = m;
	}
	h[i] = *v;
}

static int victim_cmp(const void *x, const void *y)
{
	return stronger(x, y) ? -1 : stronger(y, x) ? 1 : 0;
}

/* One round: evict the best victims for at least 'target' bytes, none
 * needed at or before 'pos' (BFS_CACHE_NEVER: any). The bytes evicted. */
static uint64_t evict_round(struct bfs_cache *ca, uint64_t target, uint64_t pos)
{
	uint64_t now = __atomic_load_n(&ca->now, __ATOMIC_RELAXED);
	uint32_t small = BFS_CACHE_CHUNK_MAX;
	size_t k, n = 0;
	uint64_t freed = 0;
	struct victim *h;

	for (struct bfs_cache_entry *e = ca->entries; e; e = e->next_entry)
		small = e->chunk < small ? e->chunk : small;
	k = (size_t)(target / small) + 1;
	h = malloc(k * sizeof(*h));
	if (!h)
		return 0;
	__atomic_add_fetch(&ca->st.evict_rounds, 1, __ATOMIC_RELAXED);
	for (struct bfs_cache_entry *e = ca->entries; e; e = e->next_entry) {
		for (uint64_t c = 0; c < e->nchunks; c++) {
			uint32_t w =
			    __atomic_load_n(&e->words[c], __ATOMIC_RELAXED);
			struct victim v = {.e = e, .c = c};

			if ((w & (W_PRESENT | W_EVICTING | W_PINS)) !=
			    W_PRESENT)
				continue;
			v.b = UINT64_MAX -
			      __atomic_load_n(&e->last[c], __ATOMIC_RELAXED);
			if (ca->o.policy == BFS_CACHE_NEXT_USE) {
				v.a = next_of(e, c, now);
				if (pos != BFS_CACHE_NEVER && v.a <= pos)
					continue;
			}
			heap_offer(h, &n, k, &v);
		}
	}
	qsort(h, n, sizeof(*h), victim_cmp);
	for (size_t i = 0; i < n && freed < target; i++) {
		int64_t b = evict_chunk(h[i].e, h[i].c);

		freed += b > 0 ? (uint64_t)b : 0;
	}
	free(h);
	return freed;
}

static uint64_t present_total(struct bfs_cache *ca)
{
	uint64_t t = 0;

	for (struct bfs_cache_entry *e = ca->entries; e; e = e->next_entry)
		t += __atomic_load_n(&e->hdr->present, __ATOMIC_SEQ_CST);
	return t;
}

/* The bound in force: opts.limit_bytes, or what the disk was found to
 * hold when a write found it full, whichever is smaller; 0: none.
 * [ca->lock] */
static uint64_t limit_locked(const struct bfs_cache *ca)
{
	uint64_t limit = ca->o.limit_bytes, disk = ca->disk_limit;

	return disk && (!limit || disk < limit) ? disk : limit;
}

/* Where 'need' more bytes would not fit on the cache's filesystem now,
 * the bound lowered to what it can hold (the bytes present and being
 * written, plus its free space: statvfs's f_bavail), if that is less: a
 * disk smaller than the bound, or filled by others, is evicted for
 * before a write finds it full. Never raised again (a quota, EDQUOT, is
 * not in f_bavail: a bound learned from one must stay). Said in the log
 * the first time. [ca->lock] */
static void disk_check(struct bfs_cache *ca, uint64_t need)
{
	struct statvfs sv;
	uint64_t used = present_total(ca) + ca->reserved, room;
	uint64_t limit = limit_locked(ca);

	if (fstatvfs(ca->dir_fd, &sv) < 0)
		return;
	room = used + (uint64_t)sv.f_bavail * sv.f_frsize;
	if (used + need <= room || (limit && room >= limit))
		return;
	if (!ca->disk_limit)
		bfs_log(BFS_LOG_WARN, "cache",
			"%s: its filesystem holds %llu bytes of the cache "
			"at most now (its free space and what the cache "
			"holds), %s: that is its bound from now on (make "
			"room on it, or choose another --cache-dir)",
			ca->dir, (unsigned long long)room,
			limit ? "less than its bound" : "and it has none");
	ca->disk_limit = room ? room : 1;
}

/* Room for 'need' more bytes next needed at 'pos', under ca->lock. */
static int room_locked(struct bfs_cache *ca, uint64_t need, uint64_t pos)
{
	uint64_t limit;

	disk_check(ca, need);
	limit = limit_locked(ca);
	if (!limit)
		return 0;
	if (need > limit)
		return -ENOBUFS;
	for (;;) {
		uint64_t total = present_total(ca) + ca->reserved, target;

		if (total + need <= limit)
			return 0;
		target = total + need - limit;
		if (target < ca->o.evict_bytes)
			target = ca->o.evict_bytes;
		if (evict_round(ca, target, pos) == 0)
			return -ENOBUFS;
	}
}

int bfs_cache_make_room(struct bfs_cache *ca, uint64_t bytes, uint64_t pos)
{
	int rc;

	pthread_mutex_lock(&ca->lock);
	rc = room_locked(ca, bytes, pos);
	pthread_mutex_unlock(&ca->lock);
	return rc;
}

static bool disk_full(int rc)
{
	return rc == -ENOSPC || rc == -EDQUOT;
}

/* A write of e found its filesystem full ('rc' at offset 'at', with
 * 'left' bytes of it still to write, next needed at 'pos'): the bound lowered
 * to the bytes present now (the disk holds no more: later writes make room
 * before they write), said once per lowering, then victims evicted by the
 * policy for at least 'left' bytes. The bytes evicted: 0, nothing could
 * go (all else pinned or needed sooner). */
static uint64_t room_on_disk(struct bfs_cache_entry *e, int rc, uint64_t at,
			     uint64_t left, uint64_t pos)
{
	struct bfs_cache *ca = e->cache;
	uint64_t present, freed, target = left;

	pthread_mutex_lock(&ca->lock);
	present = present_total(ca);
	if (!ca->disk_limit || present < ca->disk_limit) {
		ca->disk_limit = present ? present : 1;
		bfs_log(BFS_LOG_WARN, "cache",
			"%s: offset %llu: cannot be written: %s: the cache "
			"directory's filesystem is full with %llu bytes of "
			"this mount's cache in it: its bound is now %llu "
			"bytes (make room on it, or choose another "
			"--cache-dir)",
			e->data_path, (unsigned long long)at, strerror(-rc),
			(unsigned long long)present,
			(unsigned long long)ca->disk_limit);
	}
	if (target < ca->o.evict_bytes)
		target = ca->o.evict_bytes;
	freed = evict_round(ca, target, pos);
	pthread_mutex_unlock(&ca->lock);
	return freed;
}

/* pwrite all of [off, off + len) from buf. A full filesystem (ENOSPC,
 * EDQUOT) makes room by eviction and tries again, as long as a round
 * evicts something. 0 or -errno. */
static int write_all(struct bfs_cache_entry *e, uint64_t off, const void *buf,
		     uint64_t len, uint64_t pos)
{
	uint64_t done = 0;

	while (done < len) {
		ssize_t n = pwrite(e->data_fd, (const char *)buf + done,
				   len - done, (off_t)(off + done));
		int rc = n < 0 ? -errno : n == 0 ? -EIO : 0;

		if (rc == -EINTR)
			continue;
		if (disk_full(rc) &&
		    room_on_disk(e, rc, off + done, len - done, pos))
			continue;
		if (rc)
			return rc;
		done += (uint64_t)n;
	}
	return 0;
}

static void unpin_chunks(struct bfs_cache_entry *e, uint64_t c, uint64_t end)
{
	for (; c < end; c++)
		unpin_chunk(e, c);
}

int bfs_cache_write(struct bfs_cache_entry *e, uint64_t off, const void *buf,
		    uint64_t len)
{
	return bfs_cache_write_for(e, off, buf, len, BFS_CACHE_NEVER);
}

int bfs_cache_write_for(struct bfs_cache_entry *e, uint64_t off,
			const void *buf, uint64_t len, uint64_t pos)
{
	struct bfs_cache *ca = e->cache;
	uint64_t first, end, need = 0;
	uint64_t now = __atomic_load_n(&ca->now, __ATOMIC_RELAXED), stamp;
	int rc = 0;

	if (chunks_of(e, off, len, &first, &end) < 0 || !len ||
	    (off & (e->chunk - 1)) ||
	    ((len & (e->chunk - 1)) && off + len != e->size))
		return -EINVAL;
	for (uint64_t c = first; c < end; c++) {
		rc = pin_for_write(e, c);
		if (rc < 0) {
			unpin_chunks(e, first, c);
			return rc;
		}
		if (!(wload(&e->words[c]) & W_PRESENT))
			need += bfs_cache_chunk_bytes(e, c);
		if (next_of(e, c, now) < pos)
			pos = next_of(e, c, now);
	}
	if (need) {
		pthread_mutex_lock(&ca->lock);
		rc = room_locked(ca, need, pos);
		if (rc == 0)
			ca->reserved += need;
		pthread_mutex_unlock(&ca->lock);
		if (rc < 0)
			goto out_unpin;
	}
	rc = write_all(e, off, buf, len, pos);
	if (rc == 0 && ca->o.after_data)
		ca->o.after_data(ca->o.hook_arg, off, len);
	stamp = __atomic_add_fetch(&ca->clock, 1, __ATOMIC_RELAXED);
	for (uint64_t c = first; c < end && rc == 0; c++) {
		set_present(e, c);
		__atomic_store_n(&e->err[c], 0, __ATOMIC_SEQ_CST);
		__atomic_store_n(&e->last[c], stamp, __ATOMIC_RELAXED);
	}
	if (rc == 0)
		__atomic_add_fetch(&ca->st.written_bytes, len,
				   __ATOMIC_RELAXED);
	if (need) {
		pthread_mutex_lock(&ca->lock);
		ca->reserved -= need;
		pthread_mutex_unlock(&ca->lock);
	}
out_unpin:
	unpin_chunks(e, first, end);
	return rc;
}

bool bfs_cache_bound_by_disk(struct bfs_cache *ca)
{
	bool disk;

	pthread_mutex_lock(&ca->lock);
	disk = ca->o.limit_from_free ||
	       (ca->disk_limit && limit_locked(ca) == ca->disk_limit);
	pthread_mutex_unlock(&ca->lock);
	return disk;
}

#define LOAD(f) __atomic_load_n(&ca->st.f, __ATOMIC_RELAXED)

void bfs_cache_stats(struct bfs_cache *ca, struct bfs_cache_stats *st)
{
	pthread_mutex_lock(&ca->lock);
	st->entries = ca->st.entries;
	st->present_bytes = present_total(ca);
	st->limit_bytes = limit_locked(ca);
	pthread_mutex_unlock(&ca->lock);
	st->written_bytes = LOAD(written_bytes);
	st->hit_chunks = LOAD(hit_chunks);
	st->miss_chunks = LOAD(miss_chunks);
	st->evicted_chunks = LOAD(evicted_chunks);
	st->evicted_bytes = LOAD(evicted_bytes);
	st->evict_rounds = LOAD(evict_rounds);
	st->removed_entries = LOAD(removed_entries);
}

/* --- the bound a policy can reach ----------------------------------- */

/* Pop the largest 'a' of the max-heap h[0..*n). */
static struct victim max_pop(struct victim *h, size_t *n)
{
	struct victim top = h[0], v = h[--*n];
	size_t j = 0;

	for (;;) {
		size_t l = 2 * j + 1, m = l;

		if (l >= *n)
			break;
		if (l + 1 < *n && h[l + 1].a > h[l].a)
			m = l + 1;
		if (h[m].a <= v.a)
			break;
		h[j] = h[m];
		j = m;
	}
	if (*n)
		h[j] = v;
	return top;
}

/* Belady's optimum: on a miss with the cache full, evict the chunk whose
 * next access is furthest (a max-heap of (next access, chunk), entries
 * made stale by a later access skipped). */
static int simulate_next_use(const uint64_t *seq, size_t n, uint64_t universe,
			     uint64_t capacity, uint64_t *hits)
{
	size_t *nxt = malloc((n ? n : 1) * sizeof(*nxt));
	size_t *seen = malloc(universe * sizeof(*seen));
	size_t *cur = malloc(universe * sizeof(*cur));
	bool *in = calloc(universe, sizeof(*in));
	struct victim *h = malloc((n ? n : 1) * sizeof(*h));
	size_t hn = 0;
	uint64_t count = 0;
	int rc = 0;

	if (!nxt || !seen || !cur || !in || !h) {
		rc = -ENOMEM;
		goto out;
	}
	for (uint64_t x = 0; x < universe; x++)
		seen[x] = n;
	for (size_t i = n; i-- > 0;) {
		nxt[i] = seen[seq[i]];
		seen[seq[i]] = i;
	}
	for (size_t i = 0; i < n; i++) {
		uint64_t x = seq[i];
		struct victim v = {.a = nxt[i], .c = x};
		size_t j;

		if (in[x]) {
			(*hits)++;
		} else {
			while (count == capacity) {
				struct victim top = max_pop(h, &hn);

				if (in[top.c] && cur[top.c] == top.a) {
					in[top.c] = false;
					count--;
				}
			}
			in[x] = true;
			count++;
		}
		cur[x] = nxt[i];
		for (j = hn++; j && h[(j - 1) / 2].a < v.a; j = (j - 1) / 2)
			h[j] = h[(j - 1) / 2];
		h[j] = v;
	}
out:
	free(nxt);
	free(seen);
	free(cur);
	free(in);
	free(h);
	return rc;
}

/* Least recently used: a list through prev/next arrays, most recent at
 * the head. */
static int simulate_lru(const uint64_t *seq, size_t n, uint64_t universe,
			uint64_t capacity, uint64_t *hits)
{
	uint64_t *prev = malloc(universe * sizeof(*prev));
	uint64_t *next = malloc(universe * sizeof(*next));
	bool *in = calloc(universe, sizeof(*in));
	uint64_t head = UINT64_MAX, tail = UINT64_MAX, count = 0;
	int rc = 0;

	if (!prev || !next || !in) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		uint64_t x = seq[i];

		if (in[x]) {
			(*hits)++;
			/* unlink */
			if (prev[x] != UINT64_MAX)
				next[prev[x]] = next[x];
			else
				head = next[x];
			if (next[x] != UINT64_MAX)
				prev[next[x]] = prev[x];
			else
				tail = prev[x];
		} else if (count == capacity) {
			uint64_t t = tail;

			in[t] = false;
			tail = prev[t];
			if (tail != UINT64_MAX)
				next[tail] = UINT64_MAX;
			else
				head = UINT64_MAX;
		} else {
			count++;
		}
		in[x] = true;
		prev[x] = UINT64_MAX;
		next[x] = head;
		if (head != UINT64_MAX)
			prev[head] = x;
		head = x;
		if (tail == UINT64_MAX)
			tail = x;
	}
out:
	free(prev);
	free(next);
	free(in);
	return rc;
}

int bfs_cache_simulate(const uint64_t *seq, size_t n, uint64_t universe,
		       uint64_t capacity, enum bfs_cache_policy policy,
		       uint64_t *hits)
{
	*hits = 0;
	if (!capacity || !universe)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (seq[i] >= universe)
			return -EINVAL;
	return policy == BFS_CACHE_LRU
		   ? simulate_lru(seq, n, universe, capacity, hits)
		   : simulate_next_use(seq, n, universe, capacity, hits);
}
