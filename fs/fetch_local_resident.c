/* fs/fetch_local_resident: what of a dataset's local files is resident,
 * for fs/reader's fetch backends (reader_impl.h: bfs_resident; fetch_local.c
 * hands advice and the read-ahead's choice of rows here; fs/README.md:
 * cold data).
 *
 * madvise(MADV_WILLNEED) starts reads of cold rows ahead of a gather; on
 * rows already in the page cache it is pure cost (it once took 42 % of
 * the daemon's CPU). So each mapped file has one word per 2 MiB CHUNK:
 * the first time a row of a chunk is looked at (and again once the
 * answer is older than WINDOW = 1 s) one mincore() over the chunk says
 * whether all its pages are resident; rows in resident chunks are not
 * advised nor read ahead, rows in other chunks are (advice: coalesced
 * page ranges), so cold data is still read ahead, and an evicted chunk
 * is advised again within a window. A word is tick << 1 | resident, 0 =
 * never looked at. Once every chunk of every mapped file is known
 * resident (data that fits, read in), one word says so for the window
 * (all, checked at most once a tick, by one caller): a batch's rows then
 * cost no lookup at all (per row, the lookups took about 8 % of the
 * daemon's CPU serving small rows; tools/bench/RESULTS.md).
 *
 * Files in memory (fd < 0) have no words and count as resident; remote
 * files (their source names an object: fs/fetch_remote's, which never
 * hands their rows here) have none either and are never advised.
 *
 * Thread-safety: the words are relaxed atomics (hints; threads racing on
 * one chunk store the same kind of answer); the rest is immutable after
 * creation. */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fs/dataset.h"
#include "fs/reader_impl.h"

#define CHUNK	  ((uint64_t)2 << 20)
#define TICK_NS	  125000000ull /* 1/8 s */
#define TICK_MASK 0x7fffffffu
#define WINDOW	  8u /* ticks: 1 s */

/* The residency words of one file. */
struct chunks {
	_Atomic uint32_t *w; /* NULL for files in memory, or remote */
	size_t n;
	bool remote; /* another backend's: never advised nor read */
};

struct bfs_resident {
	const struct bfs_dataset *ds;
	struct chunks *files; /* [nfiles] */
	size_t nfiles;
	/* tick << 1 | 1: every chunk was resident at that tick; tick << 1:
	 * not (or being checked) at that tick; 0: never checked */
	_Atomic uint32_t all;
};

int bfs_resident_create(struct bfs_resident **out, const struct bfs_dataset *ds)
{
	struct bfs_resident *r = calloc(1, sizeof(*r));

	*out = NULL;
	if (!r)
		return -ENOMEM;
	r->ds = ds;
	r->nfiles = bfs_dataset_nfiles(ds);
	r->files = calloc(r->nfiles ? r->nfiles : 1, sizeof(*r->files));
	if (!r->files)
		goto err_destroy;
	for (size_t i = 0; i < r->nfiles; i++) {
		const struct bfs_source_file *fl = bfs_dataset_file(ds, i);
		struct chunks *m = &r->files[i];

		m->remote = bfs_source_file_remote(fl);
		if (!bfs_source_file_local(fl))
			continue; /* nothing to read ahead */
		m->n = (size_t)((fl->size + CHUNK - 1) / CHUNK);
		m->w = calloc(m->n ? m->n : 1, sizeof(*m->w));
		if (!m->w)
			goto err_destroy;
	}
	*out = r;
	return 0;
err_destroy:
	bfs_resident_destroy(r);
	return -ENOMEM;
}

void bfs_resident_destroy(struct bfs_resident *r)
{
	if (!r)
		return;
	for (size_t i = 0; r->files && i < r->nfiles; i++)
		free((void *)r->files[i].w);
	free(r->files);
	free(r);
}

/* A coarse clock for the residency words: ticks of TICK_NS, 31 bits. */
static uint32_t advise_tick(void)
{
	struct timespec ts;
	uint64_t ns;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	return (uint32_t)(ns / TICK_NS) & TICK_MASK;
}

/* 1 if chunk c of file fl was found fully resident within the last WINDOW
 * ticks; otherwise looks again (one mincore over the chunk) unless it was
 * found cold within the window, and remembers the answer. */
static int chunk_resident(const struct bfs_source_file *fl,
			  const struct chunks *m, size_t c, uint32_t tick,
			  size_t pg)
{
	uint32_t st = atomic_load_explicit(&m->w[c], memory_order_relaxed);
	unsigned char vec[CHUNK / 4096];
	uint64_t off = (uint64_t)c * CHUNK;
	size_t len, np;
	int res;

	if (st && ((tick - (st >> 1)) & TICK_MASK) < WINDOW)
		return (int)(st & 1);
	len = (size_t)(fl->size - off < CHUNK ? fl->size - off : CHUNK);
	np = (len + pg - 1) / pg;
	res = np <= sizeof(vec) &&
	      mincore((void *)(fl->map + off), len, vec) == 0;
	for (size_t i = 0; res && i < np; i++)
		res = vec[i] & 1;
	atomic_store_explicit(&m->w[c], tick << 1 | (uint32_t)res,
			      memory_order_relaxed);
	return res;
}

/* 1 if every chunk that bytes [off, end) of file i touch is known
 * resident (offsets page-aligned). */
static int range_resident(const struct bfs_resident *r, size_t i, uint64_t off,
			  uint64_t end, uint32_t tick, size_t pg)
{
	const struct chunks *m = &r->files[i];
	const struct bfs_source_file *fl = bfs_dataset_file(r->ds, i);

	if (!m->w)
		return 1; /* a file in memory: nothing to read ahead */
	for (size_t c = off / CHUNK; c <= (end - 1) / CHUNK; c++)
		if (!chunk_resident(fl, m, c, tick, pg))
			return 0;
	return 1;
}

/* Whether every chunk of every mapped file is known resident within the
 * window (all_of: each chunk's word, refreshed where stale). One caller a
 * tick looks; the others meanwhile take the rows one by one. */
static bool all_resident(struct bfs_resident *r, uint32_t tick, size_t pg)
{
	uint32_t st = atomic_load_explicit(&r->all, memory_order_relaxed);
	uint32_t age = (tick - (st >> 1)) & TICK_MASK;

	if (st && (st & 1) && age < WINDOW)
		return true;
	if ((st && age == 0) ||
	    !atomic_compare_exchange_strong(&r->all, &st, tick << 1))
		return false; /* looked at (or being looked at) this tick */
	for (size_t i = 0; i < r->nfiles; i++) {
		const struct chunks *m = &r->files[i];
		const struct bfs_source_file *fl = bfs_dataset_file(r->ds, i);

		for (size_t c = 0; m->w && c < m->n; c++)
			if (!chunk_resident(fl, m, c, tick, pg))
				return false;
	}
	atomic_store_explicit(&r->all, tick << 1 | 1u, memory_order_relaxed);
	return true;
}

/* Field f's rows of idx[0..n) not known resident advised, coalesced into
 * page ranges where they touch. */
static void advise_field(struct bfs_resident *r, size_t f, const uint64_t *idx,
			 size_t n, uint32_t tick, uint64_t pg,
			 struct bfs_fetch_tally *out)
{
	const uint8_t *lo = NULL, *hi = NULL; /* pending, coalesced */
	uint64_t mask = pg - 1;

	for (size_t i = 0; i < n; i++) {
		struct bfs_extent x;
		const uint8_t *map;
		uint64_t a, e;

		if (bfs_dataset_extent(r->ds, f, idx[i], &x) < 0 || !x.len ||
		    r->files[x.file].remote)
			continue; /* remote: fetched, never advised */
		map = bfs_dataset_file(r->ds, x.file)->map;
		a = x.off & ~mask;
		e = (x.off + x.len + mask) & ~mask;
		if (range_resident(r, x.file, a, e, tick, (size_t)pg)) {
			out->resident++;
			continue;
		}
		out->advised++;
		if (hi && map + a <= hi && map + e >= lo) {
			lo = map + a < lo ? map + a : lo;
			hi = map + e > hi ? map + e : hi;
			continue;
		}
		if (hi)
			madvise((void *)lo, (size_t)(hi - lo), MADV_WILLNEED);
		lo = map + a;
		hi = map + e;
	}
	if (hi)
		madvise((void *)lo, (size_t)(hi - lo), MADV_WILLNEED);
}

void bfs_resident_advise(struct bfs_resident *r, const uint64_t *idx, size_t n,
			 const bool *fields, struct bfs_fetch_tally *out)
{
	long pgl = sysconf(_SC_PAGESIZE);
	uint64_t pg = pgl >= 4096 ? (uint64_t)pgl : 4096;
	uint32_t tick = advise_tick();
	size_t nf = bfs_dataset_nfields(r->ds);

	if (all_resident(r, tick, (size_t)pg)) {
		for (size_t f = 0; f < nf; f++)
			out->resident += fields[f] ? n : 0;
		return;
	}
	for (size_t f = 0; f < nf; f++)
		if (fields[f])
			advise_field(r, f, idx, n, tick, pg, out);
}

size_t bfs_resident_pick(struct bfs_resident *r, struct bfs_fetch_range *rg,
			 size_t n, bool ragged, uint64_t *resident)
{
	uint32_t tick = advise_tick();
	size_t m = 0;

	for (size_t i = 0; i < n; i++) {
		size_t file = rg[i].file;

		if (ragged || !r->files[file].w)
			continue; /* in memory, remote, or offsets needed */
		if (range_resident(r, file, rg[i].off, rg[i].off + rg[i].len,
				   tick, 4096)) {
			(*resident)++;
			continue;
		}
		rg[m++] = rg[i];
	}
	return m;
}
