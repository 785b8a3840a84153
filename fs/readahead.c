/* fs/readahead: which batches to read ahead of the readers, and when
 * (readahead.h; fs/README.md: cold data, with the figures).
 *
 * The read-ahead thread keeps, per lane of the order, where its stream is
 * (follow: the readers' latest batch + 1) and the next batch to read
 * (next), and reads up to 'window' batches ahead of each stream, a batch
 * of each lane in turn: each batch's samples handed to fs/fetch
 * (bfs_fetch_ahead_rows) with when the batch is next needed, on a clock
 * of batches the readers moved to (clock, told to the fetch by
 * bfs_fetch_now); the fetch finds the pages its rows touch and its
 * backend picks and reads those worth reading (a local file's not known
 * resident; a remote file's all). It sleeps until a stream moves so far
 * that its lead is down to half the window. Once the read-in of
 * fs/memory has ended it reads nothing more, unless the fetch says to
 * read on (bfs_fetch_reads_after_read_in: files fs/memory never reads
 * in): it checks before each batch, and follow no longer wakes it (it
 * sleeps until destroy). The window is at most what the fetch caps it at
 * (bfs_fetch_window_cap: an epoch, for remote files). Where the fetch
 * plans (bfs_fetch_plans, opts.plan_bytes), batches up to a horizon past
 * the window are planned first (bfs_fetch_plan_rows: uses told, nothing
 * read).
 *
 * Advice (bfs_readahead_rows) goes to the fetch too (bfs_fetch_advise),
 * whose backend knows what is resident; without a fetch of the caller's,
 * the read-ahead makes one of its own over fs/reader's "none" backend,
 * which advises and reads nothing. Here are only the counters.
 *
 * Thread-safety: the counters are relaxed atomics (statistics); follow,
 * next, planned, turn and clock are under ra->lock (the thread waits on
 * 'moved'), never held across a read; the rest is immutable after
 * creation. */
#include "fs/readahead.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/log.h"
#include "fs/reader.h"

struct bfs_readahead {
	const struct bfs_dataset *ds;
	struct bfs_memory *memory; /* the read-in; NULL: none */
	struct bfs_fetch *fetch;   /* advises, reads ahead */
	bool own;		   /* fetch is ours: the caller gave none */
	_Atomic uint64_t rows_resident, rows_advised, rows_read;
	_Atomic uint64_t batches_read;
	atomic_bool stop;

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

/* What the fetch found of rows, into the counters. */
static void count(struct bfs_readahead *ra, const struct bfs_fetch_tally *t)
{
	atomic_fetch_add_explicit(&ra->rows_resident, t->resident,
				  memory_order_relaxed);
	atomic_fetch_add_explicit(&ra->rows_advised, t->advised,
				  memory_order_relaxed);
}

void bfs_readahead_rows(struct bfs_readahead *ra, const uint64_t *idx, size_t n)
{
	struct bfs_fetch_tally t = {0};

	if (!ra)
		return;
	bfs_fetch_advise(ra->fetch, idx, n, &t);
	count(ra, &t);
}

/* ---- reading ahead of the readers ------------------------------------ */

/* The samples of the batch at position 'pos' into idx: how many (0: none
 * there). */
static uint64_t batch_at(struct bfs_readahead *ra, uint64_t pos, uint64_t *idx)
{
	struct bfs_batch_loc at;

	if (bfs_order_locate_pos(ra->order, pos, &at) < 0 ||
	    bfs_order_batch(ra->order, at.id, idx) < 0)
		return 0;
	return at.rows;
}

/* Read batch pos ahead, next needed at 'when' (plan: only tell the fetch
 * when, nothing read). */
static void read_batch(struct bfs_readahead *ra, uint64_t pos, uint64_t when,
		       bool plan, uint64_t *idx)
{
	uint64_t rows = batch_at(ra, pos, idx);
	struct bfs_fetch_tally t = {0};
	size_t n;

	if (plan) {
		bfs_fetch_plan_rows(ra->fetch, idx, rows, when, &t);
		count(ra, &t);
		return;
	}
	n = bfs_fetch_ahead_rows(ra->fetch, idx, rows, when, &ra->stop, &t);
	count(ra, &t);
	atomic_fetch_add_explicit(&ra->rows_read, n, memory_order_relaxed);
	atomic_fetch_add_explicit(&ra->batches_read, 1, memory_order_relaxed);
}

/* Whether the thread reads on: before the read-in of fs/memory ended, or
 * after it where the fetch says so. */
static bool reads_on(const struct bfs_readahead *ra)
{
	return bfs_fetch_reads_after_read_in(ra->fetch) ||
	       !bfs_memory_read_in(ra->memory);
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
 * stop or once the read-in ended (unless the fetch reads on after it).
 * Lanes take turns, a batch each. [lock] */
static uint64_t next_ahead(struct bfs_readahead *ra, uint64_t *when, bool *plan)
{
	for (;;) {
		if (atomic_load(&ra->stop) || !reads_on(ra))
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
	sigset_t all;

	sigfillset(&all); /* reads fail, they do not fault */
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	pthread_mutex_lock(&ra->lock);
	while (idx && (pos = next_ahead(ra, &when, &plan)) != UINT64_MAX) {
		pthread_mutex_unlock(&ra->lock);
		read_batch(ra, pos, when, plan, idx);
		pthread_mutex_lock(&ra->lock);
	}
	pthread_mutex_unlock(&ra->lock);
	free(idx);
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

	if (!o->plan_bytes || !bfs_fetch_plans(ra->fetch))
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
	uint64_t bytes = o->bytes, per, cap;
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
	cap = bfs_fetch_window_cap(ra->fetch, bfs_order_len(o->order));
	if (ra->window > cap)
		ra->window = cap;
	if (ra->window < 2)
		ra->window = 2;
	ra->horizon = plan_horizon(ra, o);
	n = snprintf(ra->why, sizeof(ra->why),
		     "; up to %llu batches ahead%s (%llu MiB)%s",
		     (unsigned long long)ra->window,
		     ra->lanes > 1 ? " of each rank" : "",
		     (unsigned long long)(bytes >> 20),
		     o->memory && bfs_memory_reading_in(o->memory) &&
			     !bfs_fetch_reads_after_read_in(ra->fetch)
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
	return ra && ra->ahead_up && reads_on(ra);
}

/* ---- creation ------------------------------------------------------------ */

int bfs_readahead_create(struct bfs_readahead **out,
			 const struct bfs_dataset *ds,
			 const struct bfs_readahead_opts *o)
{
	struct bfs_readahead *ra = calloc(1, sizeof(*ra));
	int rc = 0;

	*out = NULL;
	if (!ra)
		return -ENOMEM;
	pthread_mutex_init(&ra->lock, NULL);
	pthread_cond_init(&ra->moved, NULL);
	ra->ds = ds;
	ra->memory = o->memory;
	ra->fetch = o->fetch;
	if (!ra->fetch) { /* advice only: the "none" backend's */
		struct bfs_fetch_backend *be;

		ra->own = true;
		rc = bfs_reader_backend(&be, ds, BFS_READER_NONE, false);
		if (rc == 0)
			rc = bfs_fetch_create(&ra->fetch, ds, be);
		if (rc < 0)
			goto err_destroy;
	}
	if (o->order && bfs_fetch_reads_ahead(ra->fetch))
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
	if (ra->own)
		bfs_fetch_destroy(ra->fetch);
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
	if (!ra->own)
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
