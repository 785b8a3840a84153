/* fs/readahead: what is resident, and what to read ahead of the readers
 * (readahead.h; fs/README.md: cold data, with the figures).
 *
 * Residency. madvise(MADV_WILLNEED) starts reads of cold rows ahead of a
 * gather; on rows already in the page cache it is pure cost (it once took
 * 42 % of the daemon's CPU). So each mapped file has one word per 2 MiB
 * CHUNK: the first time a row of a chunk is advised (and again once the
 * answer is older than WINDOW = 1 s) one mincore() over the chunk says
 * whether all its pages are resident; rows in resident chunks are not
 * advised, rows in other chunks are (coalesced page ranges), so cold data
 * is still read ahead, and an evicted chunk is advised again within a
 * window. A word is tick << 1 | resident, 0 = never looked at. Once
 * every chunk of every mapped file is known resident (data that fits,
 * read in), one word says so for the window (ra->all, checked at most
 * once a tick, by one caller): a batch's rows then cost no lookup at all
 * (per row, the lookups took about 8 % of the daemon's CPU serving small
 * rows; tools/bench/RESULTS.md).
 *
 * The read-ahead thread keeps, per lane of the order, where its stream is
 * (follow: the readers' latest batch + 1) and the next batch to read
 * (next), and reads up to 'window' batches ahead of each stream, a batch
 * of each lane in turn: each batch's rows not known resident, as page
 * ranges sorted by file and offset and merged where they touch, handed
 * to fs/fetch (bfs_fetch_ahead). It sleeps until a stream moves so far
 * that its lead is down to half the window. Once the read-in of fs/memory
 * has ended it reads nothing more (unless some file is remote): it checks
 * before each batch, and follow no longer wakes it (it sleeps until
 * destroy).
 *
 * Remote files (those fs/fetch holds: bfs_fetch_held) have no residency
 * words and are never advised: the thread hands each batch's ranges in
 * them (ragged fields' too, by their spans) to the fetch at once
 * (bfs_fetch_ahead_ranges) with when the batch is next needed, on a
 * clock of batches the readers moved to (ra->clock, told to the fetch by
 * bfs_fetch_now). The window is then at most an epoch. Where the fetch
 * plans (bfs_fetch_plans, opts.plan_bytes), batches up to a horizon past
 * the window are planned first (bfs_fetch_plan_ranges: uses told,
 * nothing read).
 *
 * The fields whose rows the gathers read themselves (fs/fetch:
 * bfs_fetch_field) are neither advised nor read ahead.
 *
 * Thread-safety: the words and counters are relaxed atomics (hints and
 * statistics; threads racing on one chunk store the same kind of
 * answer); follow, next, planned, turn and clock are under ra->lock (the
 * thread waits on 'moved'), never held across a read; the rest is
 * immutable after creation. */
#include "fs/readahead.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fs/log.h"

#define CHUNK	  ((uint64_t)2 << 20)
#define TICK_NS	  125000000ull /* 1/8 s */
#define TICK_MASK 0x7fffffffu
#define WINDOW	  8u /* ticks: 1 s */

/* The residency words of one mapped file. */
struct chunks {
	_Atomic uint32_t *w; /* NULL for files given in memory */
	size_t n;
};

struct bfs_readahead {
	const struct bfs_dataset *ds;
	struct bfs_memory *memory; /* the read-in; NULL: none */
	struct bfs_fetch *fetch;   /* reads ahead; NULL: none */
	struct chunks *files;	   /* [bfs_dataset_nfiles] */
	size_t nfiles;
	/* tick << 1 | 1: every chunk was resident at that tick; tick << 1:
	 * not (or being checked) at that tick; 0: never checked */
	_Atomic uint32_t all;
	_Atomic uint64_t rows_resident, rows_advised, rows_read;
	_Atomic uint64_t batches_read;
	atomic_bool stop;

	bool remote; /* some file is held by fs/fetch (a remote one) */

	/* The read-ahead thread (when fs/fetch reads ahead). */
	char why[BFS_READAHEAD_WHY]; /* its part of how rows are read */
	struct bfs_order *order;     /* the batches, by position */
	uint64_t window; /* batches read ahead of each lane's readers */
	pthread_t ahead;
	bool ahead_up;
	pthread_mutex_t lock;
	pthread_cond_t moved; /* [lock] readers moved, or stop */
	/* The readers of each lane of the order (a multi-rank mount's
	 * ranks), followed apart: a lane's positions are one range, which
	 * ends at lane_end (fs/order). */
	size_t lanes;
	uint64_t *lane_end; /* past each lane's last position */
	uint64_t *follow;   /* [lock] the readers' position + 1; 0: none */
	uint64_t *next;	    /* [lock] the next position to read ahead */
	/* Batches planned ahead of each lane's readers (opts.plan_bytes;
	 * 0: none), and the next position to plan. */
	uint64_t horizon;
	uint64_t *planned; /* [lock] */
	size_t turn;	   /* [lock] the lane looked at first */
	uint64_t clock;	   /* [lock] batches the readers moved to */
};

/* ---- advice ------------------------------------------------------------ */

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
static int range_resident(const struct bfs_readahead *ra, size_t i,
			  uint64_t off, uint64_t end, uint32_t tick, size_t pg)
{
	const struct chunks *m = &ra->files[i];
	const struct bfs_source_file *fl = bfs_dataset_file(ra->ds, i);

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
static bool all_resident(struct bfs_readahead *ra, uint32_t tick, size_t pg)
{
	uint32_t st = atomic_load_explicit(&ra->all, memory_order_relaxed);
	uint32_t age = (tick - (st >> 1)) & TICK_MASK;

	if (st && (st & 1) && age < WINDOW)
		return true;
	if ((st && age == 0) ||
	    !atomic_compare_exchange_strong(&ra->all, &st, tick << 1))
		return false; /* looked at (or being looked at) this tick */
	for (size_t i = 0; i < ra->nfiles; i++) {
		const struct chunks *m = &ra->files[i];
		const struct bfs_source_file *fl = bfs_dataset_file(ra->ds, i);

		for (size_t c = 0; m->w && c < m->n; c++)
			if (!chunk_resident(fl, m, c, tick, pg))
				return false;
	}
	atomic_store_explicit(&ra->all, tick << 1 | 1u, memory_order_relaxed);
	return true;
}

void bfs_readahead_rows(struct bfs_readahead *ra, const uint64_t *idx, size_t n)
{
	long pgl = sysconf(_SC_PAGESIZE);
	uint64_t pg = pgl >= 4096 ? (uint64_t)pgl : 4096, mask = pg - 1;
	uint32_t tick;

	if (!ra)
		return;
	tick = advise_tick();
	if (all_resident(ra, tick, (size_t)pg)) {
		uint64_t rows = 0;

		for (size_t f = 0; f < bfs_dataset_nfields(ra->ds); f++)
			rows += bfs_dataset_field(ra->ds, f)->ragged ||
					bfs_fetch_field(ra->fetch, f)
				    ? 0
				    : n;
		atomic_fetch_add_explicit(&ra->rows_resident, rows,
					  memory_order_relaxed);
		return;
	}
	for (size_t f = 0; f < bfs_dataset_nfields(ra->ds); f++) {
		const uint8_t *lo = NULL, *hi = NULL; /* pending, coalesced */

		if (bfs_dataset_field(ra->ds, f)->ragged ||
		    bfs_fetch_field(ra->fetch, f))
			continue; /* read by the gather itself */
		for (size_t i = 0; i < n; i++) {
			struct bfs_extent x;
			const uint8_t *map;
			uint64_t a, e;

			if (bfs_dataset_extent(ra->ds, f, idx[i], &x) < 0 ||
			    !x.len || bfs_fetch_held(ra->fetch, x.file))
				continue; /* remote: fetched, never advised */
			map = bfs_dataset_file(ra->ds, x.file)->map;
			a = x.off & ~mask;
			e = (x.off + x.len + mask) & ~mask;
			if (range_resident(ra, x.file, a, e, tick,
					   (size_t)pg)) {
				atomic_fetch_add_explicit(&ra->rows_resident, 1,
							  memory_order_relaxed);
				continue;
			}
			atomic_fetch_add_explicit(&ra->rows_advised, 1,
						  memory_order_relaxed);
			if (hi && map + a <= hi && map + e >= lo) {
				lo = map + a < lo ? map + a : lo;
				hi = map + e > hi ? map + e : hi;
				continue;
			}
			if (hi)
				madvise((void *)lo, (size_t)(hi - lo),
					MADV_WILLNEED);
			lo = map + a;
			hi = map + e;
		}
		if (hi)
			madvise((void *)lo, (size_t)(hi - lo), MADV_WILLNEED);
	}
}

/* ---- reading ahead of the readers ------------------------------------ */

/* A page range of one file to read. */
struct span {
	size_t file;
	uint64_t off, end;
};

static int span_cmp(const void *a, const void *b)
{
	const struct span *x = a, *y = b;

	if (x->file != y->file)
		return x->file < y->file ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/* Field f's rows of samples idx[0..rows) as page ranges into sp + *n:
 * those not known resident (a remote file's all: fs/fetch says what it
 * has). A ragged field only in remote files (spans: its offsets). */
static void plan_field(struct bfs_readahead *ra, size_t f, const uint64_t *idx,
		       uint64_t rows, struct bfs_span *spans, struct span *sp,
		       size_t *n, uint32_t tick)
{
	bool ragged = bfs_dataset_field(ra->ds, f)->ragged;

	if (bfs_fetch_field(ra->fetch, f) ||
	    (ragged && (!ra->remote ||
			bfs_dataset_spans(ra->ds, f, idx, rows, spans) < 0)))
		return;
	for (uint64_t i = 0; i < rows; i++) {
		struct bfs_extent x;
		uint64_t a, e;
		bool held;

		if ((ragged ? bfs_dataset_span_extent(ra->ds, f, idx[i],
						      &spans[i], &x)
			    : bfs_dataset_extent(ra->ds, f, idx[i], &x)) < 0 ||
		    !x.len)
			continue;
		held = bfs_fetch_held(ra->fetch, x.file);
		if (!held && (ragged || !ra->files[x.file].w))
			continue;
		a = x.off & ~(uint64_t)4095;
		e = (x.off + x.len + 4095) & ~(uint64_t)4095;
		if (!held && range_resident(ra, x.file, a, e, tick, 4096)) {
			atomic_fetch_add_explicit(&ra->rows_resident, 1,
						  memory_order_relaxed);
			continue;
		}
		if (held && e > bfs_dataset_file(ra->ds, x.file)->size)
			e = bfs_dataset_file(ra->ds, x.file)->size;
		sp[(*n)++] = (struct span){x.file, a, e};
	}
}

/* The rows of the batch at position 'pos' that are not known resident,
 * as page ranges into sp (room for rows * fields), sorted by file and
 * offset and merged where they touch. Returns how many. */
static size_t plan_batch(struct bfs_readahead *ra, uint64_t pos, uint64_t *idx,
			 struct bfs_span *spans, struct span *sp)
{
	uint32_t tick = advise_tick();
	struct bfs_batch_loc at;
	size_t n = 0, m = 0;

	if (bfs_order_locate_pos(ra->order, pos, &at) < 0 ||
	    bfs_order_batch(ra->order, at.id, idx) < 0)
		return 0;
	for (size_t f = 0; f < bfs_dataset_nfields(ra->ds); f++)
		plan_field(ra, f, idx, at.rows, spans, sp, &n, tick);
	qsort(sp, n, sizeof(*sp), span_cmp);
	for (size_t i = 0; i < n; i++) {
		if (m && sp[m - 1].file == sp[i].file &&
		    sp[i].off <= sp[m - 1].end) {
			if (sp[i].end > sp[m - 1].end)
				sp[m - 1].end = sp[i].end;
			continue;
		}
		sp[m++] = sp[i];
	}
	return m;
}

/* Read batch pos's rows that are not resident, next needed at 'when'
 * (remote files: the batch's ranges at once, their neighbours merge). */
static void read_batch(struct bfs_readahead *ra, uint64_t pos, uint64_t when,
		       uint64_t *idx, struct bfs_span *spans, struct span *sp)
{
	size_t n = plan_batch(ra, pos, idx, spans, sp);

	atomic_fetch_add_explicit(&ra->rows_read, n, memory_order_relaxed);
	if (ra->remote) {
		struct bfs_fetch_range *r = malloc((n ? n : 1) * sizeof(*r));

		for (size_t i = 0; r && i < n; i++)
			r[i] = (struct bfs_fetch_range){
			    sp[i].file, sp[i].off, sp[i].end - sp[i].off, NULL};
		if (r && !atomic_load(&ra->stop))
			bfs_fetch_ahead_ranges(ra->fetch, r, n, when);
		free(r);
	}
	for (size_t i = 0; !ra->remote && i < n && !atomic_load(&ra->stop); i++)
		bfs_fetch_ahead(ra->fetch, sp[i].file, sp[i].off,
				sp[i].end - sp[i].off, 0);
	atomic_fetch_add_explicit(&ra->batches_read, 1, memory_order_relaxed);
}

/* Plan batch pos: its ranges told to the fetch, needed at 'when',
 * nothing read. */
static void plan_ahead(struct bfs_readahead *ra, uint64_t pos, uint64_t when,
		       uint64_t *idx, struct bfs_span *spans, struct span *sp)
{
	size_t n = plan_batch(ra, pos, idx, spans, sp);
	struct bfs_fetch_range *r = malloc((n ? n : 1) * sizeof(*r));

	for (size_t i = 0; r && i < n; i++)
		r[i] = (struct bfs_fetch_range){sp[i].file, sp[i].off,
						sp[i].end - sp[i].off, NULL};
	if (r && n)
		bfs_fetch_plan_ranges(ra->fetch, r, n, when);
	free(r);
}

/* The next position of lane l to plan (within the horizon after its
 * readers), or UINT64_MAX; *when as lane_ahead's. [lock] */
static uint64_t lane_plan(struct bfs_readahead *ra, size_t l, uint64_t *when)
{
	uint64_t *p = &ra->planned[l];

	if (!ra->horizon || !ra->follow[l])
		return UINT64_MAX;
	if (*p < ra->follow[l])
		*p = ra->follow[l]; /* behind the readers: skip */
	if (*p >= ra->follow[l] + ra->horizon || *p >= ra->lane_end[l])
		return UINT64_MAX;
	*when = ra->clock + (*p + 1 - ra->follow[l]) * (uint64_t)ra->lanes;
	return (*p)++;
}

/* The next position of lane l to read ahead, or UINT64_MAX when the
 * window after its readers is read; *when: when it is needed on the
 * clock. [lock] */
static uint64_t lane_ahead(struct bfs_readahead *ra, size_t l, uint64_t *when)
{
	uint64_t end = ra->lane_end[l];

	if (ra->follow[l] && ra->next[l] < ra->follow[l])
		ra->next[l] = ra->follow[l]; /* behind the readers: skip */
	if (ra->follow[l] && ra->next[l] < ra->follow[l] + ra->window &&
	    ra->next[l] < end) {
		*when = ra->clock +
			(ra->next[l] + 1 - ra->follow[l]) * (uint64_t)ra->lanes;
		return ra->next[l]++;
	}
	return UINT64_MAX;
}

/* The next position to plan (*plan set: one within the horizon after a
 * lane's readers not planned yet), else to read ahead, waiting until
 * there is one within the window after a lane's readers; UINT64_MAX at
 * stop or once the read-in ended (unless remote files are read: those
 * are never read in). Lanes take turns, a batch each. [lock] */
static uint64_t next_ahead(struct bfs_readahead *ra, uint64_t *when, bool *plan)
{
	for (;;) {
		if (atomic_load(&ra->stop) ||
		    (!ra->remote && bfs_memory_read_in(ra->memory)))
			return UINT64_MAX;
		*plan = true; /* first: the fetches store at known uses */
		for (size_t l = 0; l < ra->lanes; l++) {
			uint64_t pos = lane_plan(ra, l, when);

			if (pos != UINT64_MAX)
				return pos;
		}
		*plan = false;
		for (size_t i = 0; i < ra->lanes; i++) {
			size_t l = (ra->turn + i) % ra->lanes;
			uint64_t pos = lane_ahead(ra, l, when);

			if (pos != UINT64_MAX) {
				ra->turn = l + 1;
				return pos;
			}
		}
		pthread_cond_wait(&ra->moved, &ra->lock);
	}
}

static void *ahead_main(void *arg)
{
	struct bfs_readahead *ra = arg;
	uint64_t rows = bfs_order_batch_rows(ra->order, 0), pos, when = 0;
	bool plan = false;
	uint64_t *idx = malloc((rows ? rows : 1) * sizeof(*idx));
	struct bfs_span *spans = malloc((rows ? rows : 1) * sizeof(*spans));
	struct span *sp =
	    malloc((rows ? rows : 1) * (bfs_dataset_nfields(ra->ds) + 1) *
		   sizeof(*sp));
	sigset_t all;

	sigfillset(&all); /* reads fail, they do not fault */
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	pthread_mutex_lock(&ra->lock);
	while (idx && sp && spans &&
	       (pos = next_ahead(ra, &when, &plan)) != UINT64_MAX) {
		pthread_mutex_unlock(&ra->lock);
		if (plan)
			plan_ahead(ra, pos, when, idx, spans, sp);
		else
			read_batch(ra, pos, when, idx, spans, sp);
		pthread_mutex_lock(&ra->lock);
	}
	pthread_mutex_unlock(&ra->lock);
	free(idx);
	free(spans);
	free(sp);
	return NULL;
}

/* The thread is woken when the readers went back, or when what it has
 * read ahead of them is down to half the window: one wake-up per half
 * window of batches, not one per batch. */
void bfs_readahead_follow(struct bfs_readahead *ra,
			  const struct bfs_batch_loc *at)
{
	uint64_t pos = at->pos;
	size_t l = at->id.lane;

	if (!bfs_readahead_reads(ra) || l >= ra->lanes ||
	    pos >= ra->lane_end[l])
		return;
	pthread_mutex_lock(&ra->lock);
	if (pos + 1 < ra->follow[l])
		ra->next[l] = ra->planned[l] = pos + 1; /* went back: follow */
	if (ra->follow[l] != pos + 1) {
		ra->follow[l] = pos + 1;
		ra->clock++;
		bfs_fetch_now(ra->fetch, ra->clock);
		if (ra->next[l] <= ra->follow[l] + ra->window / 2)
			pthread_cond_signal(&ra->moved);
	}
	pthread_mutex_unlock(&ra->lock);
}

/* Bytes of granules of g bytes one batch of 'rows' rows touches, where
 * a row of len bytes touches len / g + 'extra' of them (2: at most, as
 * it may straddle; 1: on average; a ragged row: its field's bytes per
 * sample on average); never more than the files hold. */
static uint64_t batch_bytes(const struct bfs_dataset *ds, uint64_t rows,
			    uint64_t g, uint64_t extra)
{
	uint64_t n = 0, samples = bfs_dataset_samples(ds);

	for (size_t f = 0; f < bfs_dataset_nfields(ds); f++) {
		const struct bfs_field *fl = bfs_dataset_field(ds, f);
		struct bfs_extent x;

		if (fl->ragged && samples)
			n += (fl->total / samples * fl->row_bytes / g + extra) *
			     g;
		else if (bfs_dataset_extent(ds, f, 0, &x) == 0)
			n += (x.len / g + extra) * g;
	}
	n = n * rows;
	return n < bfs_dataset_bytes(ds) ? n : bfs_dataset_bytes(ds);
}

/* The horizon of plans (opts.plan_bytes): batches of each lane whose
 * uses come to about 'bytes', at least the window, at most two epochs. */
static uint64_t plan_horizon(struct bfs_readahead *ra,
			     const struct bfs_readahead_opts *o)
{
	uint64_t per = batch_bytes(ra->ds, bfs_order_batch_rows(o->order, 0),
				   o->granule ? o->granule : 4096, 1);
	uint64_t h = per ? o->plan_bytes / per / ra->lanes : 0;

	if (!o->plan_bytes || !bfs_fetch_plans(o->fetch))
		return 0;
	if (h > 2 * bfs_order_len(o->order))
		h = 2 * bfs_order_len(o->order);
	return h > ra->window ? h : ra->window;
}

/* Start the read-ahead thread of o->order's batches, up to o->bytes of
 * pages ahead of the readers (0: a quarter of the memory available, 256
 * MiB at most), shared between the lanes. 0 or -errno. */
static int start_ahead(struct bfs_readahead *ra,
		       const struct bfs_readahead_opts *o)
{
	uint64_t bytes = o->bytes, per;
	int n;

	ra->order = o->order;
	ra->lanes = bfs_order_lanes(o->order);
	ra->lane_end = calloc(ra->lanes, sizeof(*ra->lane_end));
	ra->follow = calloc(ra->lanes, sizeof(*ra->follow));
	ra->next = calloc(ra->lanes, sizeof(*ra->next));
	ra->planned = calloc(ra->lanes, sizeof(*ra->planned));
	if (!ra->lane_end || !ra->follow || !ra->next || !ra->planned)
		return -ENOMEM;
	for (size_t l = 0; l < ra->lanes; l++)
		ra->lane_end[l] = bfs_order_lane_end(o->order, l);
	if (!bytes) {
		uint64_t avail = o->memory ? bfs_memory_avail(o->memory)
					   : bfs_memory_available(NULL);

		bytes = avail / 4 < (256ull << 20) ? avail / 4 : 256ull << 20;
	}
	per = batch_bytes(ra->ds, bfs_order_batch_rows(o->order, 0),
			  o->granule ? o->granule : 4096, 2);
	ra->window = per ? bytes / per / ra->lanes : 2; /* shared fairly */
	if (ra->remote && ra->window > bfs_order_len(o->order))
		ra->window = bfs_order_len(o->order); /* an epoch fetches all */
	if (ra->window < 2)
		ra->window = 2;
	ra->horizon = plan_horizon(ra, o);
	n = snprintf(ra->why, sizeof(ra->why),
		     "; up to %llu batches ahead%s (%llu MiB)%s",
		     (unsigned long long)ra->window,
		     ra->lanes > 1 ? " of each rank" : "",
		     (unsigned long long)(bytes >> 20),
		     o->memory && bfs_memory_reading_in(o->memory) &&
			     !ra->remote
			 ? " until the read-in at mount ends"
			 : "");
	if (ra->horizon && n > 0 && (size_t)n < sizeof(ra->why))
		snprintf(ra->why + n, sizeof(ra->why) - (size_t)n,
			 ", next uses planned %llu batches ahead",
			 (unsigned long long)ra->horizon);
	ra->ahead_up = pthread_create(&ra->ahead, NULL, ahead_main, ra) == 0;
	return ra->ahead_up ? 0 : -EAGAIN;
}

bool bfs_readahead_reads(const struct bfs_readahead *ra)
{
	return ra && ra->ahead_up &&
	       (ra->remote || !bfs_memory_read_in(ra->memory));
}

/* ---- creation ------------------------------------------------------------ */

int bfs_readahead_create(struct bfs_readahead **out,
			 const struct bfs_dataset *ds,
			 const struct bfs_readahead_opts *o)
{
	struct bfs_readahead *ra = calloc(1, sizeof(*ra));
	int rc = -ENOMEM;

	*out = NULL;
	if (!ra)
		return -ENOMEM;
	pthread_mutex_init(&ra->lock, NULL);
	pthread_cond_init(&ra->moved, NULL);
	ra->ds = ds;
	ra->memory = o->memory;
	ra->fetch = o->fetch;
	ra->nfiles = bfs_dataset_nfiles(ds);
	ra->files = calloc(ra->nfiles ? ra->nfiles : 1, sizeof(*ra->files));
	if (!ra->files)
		goto err_destroy;
	for (size_t i = 0; i < ra->nfiles; i++) {
		const struct bfs_source_file *fl = bfs_dataset_file(ds, i);
		struct chunks *m = &ra->files[i];

		if (bfs_fetch_held(o->fetch, i))
			ra->remote = true; /* fetched: no residency words */
		if (fl->fd < 0 || bfs_fetch_held(o->fetch, i))
			continue; /* in memory: nothing to read ahead */
		m->n = (size_t)((fl->size + CHUNK - 1) / CHUNK);
		m->w = calloc(m->n ? m->n : 1, sizeof(*m->w));
		if (!m->w)
			goto err_destroy;
	}
	rc = 0;
	if (o->order && bfs_fetch_reads_ahead(o->fetch))
		rc = start_ahead(ra, o);
	if (rc < 0)
		goto err_destroy;
	*out = ra;
	return 0;
err_destroy:
	bfs_readahead_destroy(ra);
	return rc;
}

void bfs_readahead_destroy(struct bfs_readahead *ra)
{
	if (!ra)
		return;
	atomic_store(&ra->stop, true);
	if (ra->ahead_up) {
		pthread_mutex_lock(&ra->lock);
		pthread_cond_broadcast(&ra->moved);
		pthread_mutex_unlock(&ra->lock);
		pthread_join(ra->ahead, NULL);
	}
	free(ra->lane_end);
	free(ra->follow);
	free(ra->next);
	free(ra->planned);
	pthread_cond_destroy(&ra->moved);
	pthread_mutex_destroy(&ra->lock);
	for (size_t i = 0; ra->files && i < ra->nfiles; i++)
		free((void *)ra->files[i].w);
	free(ra->files);
	free(ra);
}

void bfs_readahead_stats(struct bfs_readahead *ra,
			 struct bfs_readahead_stats *out)
{
	struct bfs_fetch_stats f = {.backend = "none"};

	memset(out, 0, sizeof(*out));
	out->reader = "none";
	if (!ra)
		return;
	if (ra->fetch)
		bfs_fetch_stats(ra->fetch, &f);
	out->warm_bytes = bfs_memory_read_in_bytes(ra->memory);
	out->rows_resident = atomic_load(&ra->rows_resident);
	out->rows_advised = atomic_load(&ra->rows_advised);
	out->rows_read = atomic_load(&ra->rows_read);
	out->batches_read = atomic_load(&ra->batches_read);
	out->reads_in_flight = f.ahead_in_flight;
	out->bytes_read = f.ahead_bytes;
	out->rows_fetched = f.rows;
	out->bytes_fetched = f.bytes;
	out->reader = f.backend;
	out->objects = f.objects;
	if (snprintf(out->reader_why, sizeof(out->reader_why), "%s%s", f.why,
		     ra->why) >= (int)sizeof(out->reader_why))
		bfs_log_ellipsize(out->reader_why, sizeof(out->reader_why));
	if (ra->ahead_up) {
		pthread_mutex_lock(&ra->lock);
		for (size_t l = 0; l < ra->lanes; l++)
			if (ra->follow[l] && ra->next[l] > ra->follow[l] &&
			    ra->next[l] - ra->follow[l] > out->distance)
				out->distance = ra->next[l] - ra->follow[l];
		pthread_mutex_unlock(&ra->lock);
	}
}
