/* fs/fetch: reads of row ranges of a dataset's files (fetch.h;
 * fs/README.md: cold data).
 *
 * The backend is the composition root's choice (fs/reader's, on local
 * files; fs/fetch_remote's where a file is remote, over a local one); its
 * name is the reader of stats and dataset.json, and its 'why', with what
 * this room adds, says how rows are read. Advice, the readers' clock
 * (bfs_fetch_now) and the remote counters go to the backend as they are,
 * where it has them.
 *
 * Reads ahead (bfs_fetch_ahead_rows) and planned uses
 * (bfs_fetch_plan_rows) of a batch: the pages each row touches, field by
 * field (not those the gathers read; ragged ones by their spans, only
 * where some file is held: elsewhere they are never read ahead), go to
 * the backend's pick, which keeps those to read; what it keeps is sorted
 * and merged where it touches, as a gather's holds are, then handed to
 * the backend. Where some file is held (a remote object's cache, never
 * read in by fs/memory), the read-ahead is told to go on after the
 * read-in and to read at most an epoch ahead.
 *
 * Holds (files whose bytes are not always there: the backend's held,
 * remote files): bfs_fetch_hold lists, in the thread's struct
 * bfs_fetch_hold, the byte ranges a gather's rows touch in those files
 * (every field, ragged ones by their spans), sorts and merges them, and
 * has the backend make them present and keep them so until
 * bfs_fetch_release. A file may stop needing holds (a remote object all
 * in the cache, sealed there), never the other way: once none needs
 * them (none_held), a hold is one atomic load.
 *
 * Rows read by the gathers (data that does not fit, a backend that reads
 * rows: be->rows): fields of rows of FETCH_BUFFERED_MIN bytes or more,
 * stored as served in every shard, into memory of the thread's (struct
 * bfs_fetch_rows, reused by its next batch). Rows of FETCH_MIN bytes or
 * more: each read covers the pages a row touches, read with O_DIRECT
 * into page-aligned memory, and the row is found at its offset within
 * them. Smaller ones: each row's bytes read through the page cache
 * (buffered), where rows sharing a page find it; never mapped, so the
 * kernel neither maps nor unmaps a page of them in this process (the
 * mapping's faults, fault-around and reclaim's unmapping and TLB
 * shootdowns cost more CPU than the reads: fs/README.md). Labels and
 * other small fields stay mapped. None once bfs_fetch_serve_mapped said
 * batches are served from the mappings.
 *
 * Thread-safety: rows, bytes, none_held and mapped are atomics; a struct
 * bfs_fetch_rows or bfs_fetch_hold is its thread's own; the backend's
 * operations are thread-safe (fetch.h); the rest is immutable after
 * creation. */
#include "fs/fetch.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "fs/log.h"

#define FETCH_MIN	   ((uint64_t)32 << 10) /* rows the gathers read: O_DIRECT */
#define FETCH_BUFFERED_MIN ((uint64_t)512) /* ... buffered, below FETCH_MIN */

struct bfs_fetch {
	const struct bfs_dataset *ds;
	struct bfs_fetch_backend *be; /* NULL: none */
	bool *direct;		      /* [nfields] read by the gathers; NULL */
	/* [2][nfields] the fields advised: while the gathers read some
	 * (fixed, not direct), then once served mapped (fixed) */
	bool *advised;
	bool held;	       /* some file is held (or was, at creation) */
	atomic_bool none_held; /* no file is held now, nor will be again */
	atomic_bool mapped;    /* bfs_fetch_serve_mapped: none is read */
	_Atomic uint64_t rows, bytes;
};

/* One gathering thread's reads and the memory they land in. */
struct bfs_fetch_rows {
	uint8_t *buf; /* page-aligned, 'cap' bytes */
	size_t cap;
	struct bfs_fetch_range *reads;
	const void **rowp;	 /* [nfields * rows] */
	const void *const **tab; /* [nfields]: rowp's rows, or NULL */
	size_t rows_cap;
};

/* ---- the fields read by the gathers ------------------------------------ */

/* Whether field f's rows are read by the gathers: fixed, rows of
 * FETCH_BUFFERED_MIN bytes or more, stored as served in every shard. */
static bool fetchable(const struct bfs_dataset *ds, size_t f)
{
	const struct bfs_field *fl = bfs_dataset_field(ds, f);

	if (fl->ragged || fl->row_bytes < FETCH_BUFFERED_MIN)
		return false;
	for (size_t i = 0; i < bfs_dataset_nshards(ds); i++) {
		struct bfs_shard_info si;
		const void *p;

		bfs_dataset_shard(ds, i, &si);
		if (si.samples &&
		    bfs_dataset_row(ds, f, si.first_sample, &p) < 0)
			return false;
	}
	return true;
}

/* The fields the gathers read, into f->direct (NULL: none). 0 or
 * -ENOMEM. */
static int pick_direct(struct bfs_fetch *f)
{
	size_t nf = bfs_dataset_nfields(f->ds), any = 0;

	f->direct = calloc(nf ? nf : 1, sizeof(*f->direct));
	if (!f->direct)
		return -ENOMEM;
	for (size_t i = 0; i < nf; i++)
		any += f->direct[i] = fetchable(f->ds, i);
	if (!any) {
		free(f->direct);
		f->direct = NULL;
	}
	return 0;
}

/* The fields advised, into f->advised: fixed ones, but for those the
 * gathers read while they read them. 0 or -ENOMEM. */
static int pick_advised(struct bfs_fetch *f)
{
	size_t nf = bfs_dataset_nfields(f->ds);

	f->advised = calloc(nf ? 2 * nf : 1, sizeof(*f->advised));
	if (!f->advised)
		return -ENOMEM;
	for (size_t i = 0; i < nf; i++) {
		f->advised[nf + i] = !bfs_dataset_field(f->ds, i)->ragged;
		f->advised[i] =
		    f->advised[nf + i] && !(f->direct && f->direct[i]);
	}
	return 0;
}

bool bfs_fetch_field(const struct bfs_fetch *f, size_t field)
{
	return f && f->direct &&
	       !atomic_load_explicit(&f->mapped, memory_order_relaxed) &&
	       f->direct[field];
}

bool bfs_fetch_gathers_read(const struct bfs_fetch *f)
{
	return f && f->direct &&
	       !atomic_load_explicit(&f->mapped, memory_order_relaxed);
}

void bfs_fetch_serve_mapped(struct bfs_fetch *f)
{
	if (f)
		atomic_store(&f->mapped, true);
}

/* ---- the fetch ----------------------------------------------------------- */

int bfs_fetch_create(struct bfs_fetch **out, const struct bfs_dataset *ds,
		     struct bfs_fetch_backend *be)
{
	struct bfs_fetch *f = calloc(1, sizeof(*f));
	int rc = 0;

	*out = NULL;
	if (!f) {
		if (be)
			be->ops->destroy(be);
		return -ENOMEM;
	}
	f->ds = ds;
	f->be = be;
	for (size_t i = 0; i < bfs_dataset_nfiles(ds); i++)
		f->held |= bfs_fetch_held(f, i);
	if (be && be->rows)
		rc = pick_direct(f);
	if (rc == 0)
		rc = pick_advised(f);
	if (rc < 0) {
		bfs_fetch_destroy(f);
		return rc;
	}
	*out = f;
	return 0;
}

void bfs_fetch_destroy(struct bfs_fetch *f)
{
	if (!f)
		return;
	if (f->be) /* waits for the reads in flight */
		f->be->ops->destroy(f->be);
	free(f->direct);
	free(f->advised);
	free(f);
}

bool bfs_fetch_reads_ahead(const struct bfs_fetch *f)
{
	return f && f->be && f->be->ahead;
}

void bfs_fetch_ahead(struct bfs_fetch *f, size_t file, uint64_t off,
		     uint64_t len, uint64_t when)
{
	f->be->ops->ahead(f->be, file, off, len, when);
}

bool bfs_fetch_plans(const struct bfs_fetch *f)
{
	return f && f->be && f->be->ops->plan_ranges;
}

bool bfs_fetch_reads_after_read_in(const struct bfs_fetch *f)
{
	return f && f->held &&
	       !atomic_load_explicit(&f->none_held, memory_order_relaxed);
}

uint64_t bfs_fetch_window_cap(const struct bfs_fetch *f, uint64_t epoch)
{
	return f && f->held ? epoch : UINT64_MAX;
}

void bfs_fetch_advise(struct bfs_fetch *f, const uint64_t *idx, size_t n,
		      struct bfs_fetch_tally *out)
{
	size_t nf;

	if (!f || !f->be || !f->be->ops->advise)
		return;
	nf = bfs_dataset_nfields(f->ds);
	f->be->ops->advise(f->be, idx, n,
			   f->advised + (bfs_fetch_gathers_read(f) ? 0 : nf),
			   out);
}

bool bfs_fetch_held(const struct bfs_fetch *f, size_t file)
{
	return f && f->be && f->be->ops->held && f->be->ops->hold &&
	       f->be->ops->held(f->be, file);
}

void bfs_fetch_now(struct bfs_fetch *f, uint64_t when)
{
	if (f && f->be && f->be->ops->now)
		f->be->ops->now(f->be, when);
}

/* Append to why[BFS_FETCH_WHY], cut visibly to fit. */
static void append(char *why, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void append(char *why, const char *fmt, ...)
{
	size_t n = strlen(why);
	va_list ap;
	int k;

	va_start(ap, fmt);
	k = vsnprintf(why + n, BFS_FETCH_WHY - n, fmt, ap);
	va_end(ap);
	if (k > 0 && (size_t)k >= BFS_FETCH_WHY - n)
		bfs_log_ellipsize(why, BFS_FETCH_WHY);
}

void bfs_fetch_stats(struct bfs_fetch *f, struct bfs_fetch_stats *out)
{
	struct bfs_fetch_backend_stats s = {0};

	out->backend = f->be ? f->be->ops->name : "none";
	out->why[0] = '\0';
	if (f->be) {
		f->be->ops->stats(f->be, &s);
		append(out->why, "%s", f->be->why);
	}
	if (f->direct && !atomic_load(&f->mapped))
		append(out->why,
		       "; rows of >= %llu KiB read with O_DIRECT by the "
		       "gathers, of >= %llu bytes buffered",
		       (unsigned long long)(FETCH_MIN >> 10),
		       (unsigned long long)FETCH_BUFFERED_MIN);
	if (f->be && f->be->no_ahead)
		append(out->why, "; %s", f->be->no_ahead);
	out->ahead_in_flight = s.in_flight;
	out->ahead_bytes = s.bytes;
	out->rows = atomic_load(&f->rows);
	out->bytes = atomic_load(&f->bytes);
	out->remote = f->be && f->be->ops->remote_stats;
	memset(&out->objects, 0, sizeof(out->objects));
	if (out->remote)
		f->be->ops->remote_stats(f->be, &out->objects);
}

/* ---- holds (files whose bytes are not always there) ------------------ */

/* A gathering thread's holds: the ranges held now (h->n), and room; the
 * read-ahead's pages of a batch (one on the stack a call). */
struct bfs_fetch_hold {
	struct bfs_fetch_range *r;
	size_t n, cap;
	struct bfs_span *spans;
	size_t spans_cap;
};

struct bfs_fetch_hold *bfs_fetch_hold_open(struct bfs_fetch *f)
{
	return f && f->held ? calloc(1, sizeof(struct bfs_fetch_hold)) : NULL;
}

void bfs_fetch_hold_close(struct bfs_fetch_hold *h)
{
	if (!h)
		return;
	free(h->r);
	free(h->spans);
	free(h);
}

static int range_cmp(const void *a, const void *b)
{
	const struct bfs_fetch_range *x = a, *y = b;

	if (x->file != y->file)
		return x->file < y->file ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/* Room for 'more' ranges in h. 0 or -ENOMEM. */
static int hold_room(struct bfs_fetch_hold *h, size_t more)
{
	struct bfs_fetch_range *r;

	if (h->n + more <= h->cap)
		return 0;
	r = realloc(h->r, (h->n + more) * 2 * sizeof(*r));
	if (!r)
		return -ENOMEM;
	h->r = r;
	h->cap = (h->n + more) * 2;
	return 0;
}

/* Ragged field fi's spans of idx[0..n), into h->spans. 0 or -errno. */
static int spans_of(struct bfs_fetch *f, struct bfs_fetch_hold *h, size_t fi,
		    const uint64_t *idx, size_t n)
{
	if (n > h->spans_cap) {
		free(h->spans);
		h->spans = malloc(n * sizeof(*h->spans));
		h->spans_cap = h->spans ? n : 0;
		if (!h->spans)
			return -ENOMEM;
	}
	return bfs_dataset_spans(f->ds, fi, idx, n, h->spans);
}

/* r[0..n) sorted by file and offset, merged where they touch: how many
 * are left. */
static size_t merge(struct bfs_fetch_range *r, size_t n)
{
	size_t m = 0;

	if (n < 2) /* r may be NULL when n is 0 (qsort's r must not be) */
		return n;
	qsort(r, n, sizeof(*r), range_cmp);
	for (size_t i = 0; i < n; i++) {
		struct bfs_fetch_range *p = m ? &r[m - 1] : NULL;

		if (p && p->file == r[i].file && r[i].off <= p->off + p->len) {
			uint64_t end = r[i].off + r[i].len;

			if (end > p->off + p->len)
				p->len = end - p->off;
			continue;
		}
		r[m++] = r[i];
	}
	return m;
}

/* The ranges field fi's rows of idx[0..n) touch in held files, into h. */
static int field_ranges(struct bfs_fetch *f, struct bfs_fetch_hold *h,
			size_t fi, const uint64_t *idx, size_t n)
{
	bool ragged = bfs_dataset_field(f->ds, fi)->ragged;
	int rc = hold_room(h, n);

	if (rc == 0 && ragged)
		rc = spans_of(f, h, fi, idx, n);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct bfs_extent x;

		rc = ragged ? bfs_dataset_span_extent(f->ds, fi, idx[i],
						      &h->spans[i], &x)
			    : bfs_dataset_extent(f->ds, fi, idx[i], &x);
		if (rc == 0 && x.len && bfs_fetch_held(f, x.file))
			h->r[h->n++] = (struct bfs_fetch_range){
			    x.file, x.off, x.len, NULL, false};
	}
	return rc;
}

/* Whether no file needs holding now (then none will again): looked up
 * file by file until it is so, then remembered. */
static bool none_held(struct bfs_fetch *f)
{
	if (atomic_load_explicit(&f->none_held, memory_order_acquire))
		return true; /* and the seals before it seen */
	for (size_t i = 0; i < bfs_dataset_nfiles(f->ds); i++)
		if (bfs_fetch_held(f, i))
			return false;
	atomic_store_explicit(&f->none_held, true, memory_order_release);
	return true;
}

int bfs_fetch_hold(struct bfs_fetch *f, struct bfs_fetch_hold *h,
		   const uint64_t *idx, size_t n, uint64_t deadline_ns)
{
	int rc = 0;

	if (!h)
		return 0;
	h->n = 0;
	if (none_held(f))
		return 0;
	for (size_t fi = 0; rc == 0 && fi < bfs_dataset_nfields(f->ds); fi++)
		rc = field_ranges(f, h, fi, idx, n);
	if (rc) {
		h->n = 0;
		return rc;
	}
	h->n = merge(h->r, h->n);
	rc = h->n ? f->be->ops->hold(f->be, h->r, h->n, deadline_ns) : 0;
	if (rc)
		h->n = 0;
	return rc;
}

void bfs_fetch_release(struct bfs_fetch *f, struct bfs_fetch_hold *h)
{
	if (!h || !h->n)
		return;
	f->be->ops->release(f->be, h->r, h->n);
	h->n = 0;
}

/* ---- reads ahead and plans of a batch ---------------------------------- */

/* The pages row x touches: [*a, *e). */
static void pages(const struct bfs_extent *x, uint64_t *a, uint64_t *e)
{
	*a = x->off & ~(uint64_t)4095;
	*e = (x->off + x->len + 4095) & ~(uint64_t)4095;
}

/* The pages field fi's rows of idx[0..n) touch, those the backend picks,
 * appended to h; rows left out as resident counted in *out. Not a field
 * the gathers read; a ragged one only where some file is held. */
static void ahead_field(struct bfs_fetch *f, struct bfs_fetch_hold *h,
			size_t fi, const uint64_t *idx, size_t n,
			struct bfs_fetch_tally *out)
{
	bool ragged = bfs_dataset_field(f->ds, fi)->ragged;
	size_t at = h->n;

	if (bfs_fetch_field(f, fi) || (ragged && !f->held) ||
	    hold_room(h, n) < 0 || (ragged && spans_of(f, h, fi, idx, n) < 0))
		return;
	for (size_t i = 0; i < n; i++) {
		struct bfs_extent x;
		uint64_t a, e;

		if ((ragged ? bfs_dataset_span_extent(f->ds, fi, idx[i],
						      &h->spans[i], &x)
			    : bfs_dataset_extent(f->ds, fi, idx[i], &x)) < 0 ||
		    !x.len)
			continue;
		pages(&x, &a, &e);
		h->r[h->n++] =
		    (struct bfs_fetch_range){x.file, a, e - a, NULL, false};
	}
	if (f->be->ops->pick)
		h->n = at + f->be->ops->pick(f->be, h->r + at, h->n - at,
					     ragged, &out->resident);
}

/* The pages of the rows of idx[0..n) to read ahead or plan, into h,
 * sorted and merged. */
static void ahead_pages(struct bfs_fetch *f, struct bfs_fetch_hold *h,
			const uint64_t *idx, size_t n,
			struct bfs_fetch_tally *out)
{
	h->n = 0;
	for (size_t fi = 0; fi < bfs_dataset_nfields(f->ds); fi++)
		ahead_field(f, h, fi, idx, n, out);
	h->n = merge(h->r, h->n);
}

size_t bfs_fetch_ahead_rows(struct bfs_fetch *f, const uint64_t *idx, size_t n,
			    uint64_t when, const atomic_bool *stop,
			    struct bfs_fetch_tally *out)
{
	const struct bfs_fetch_ops *ops = f->be->ops;
	struct bfs_fetch_hold h = {0};
	size_t m;

	ahead_pages(f, &h, idx, n, out);
	m = h.n;
	if (ops->ahead_ranges && !(stop && atomic_load(stop)))
		ops->ahead_ranges(f->be, h.r, m, when);
	for (size_t i = 0; !ops->ahead_ranges && i < m; i++) {
		if (stop && atomic_load(stop))
			break;
		ops->ahead(f->be, h.r[i].file, h.r[i].off, h.r[i].len, when);
	}
	free(h.r);
	free(h.spans);
	return m;
}

void bfs_fetch_plan_rows(struct bfs_fetch *f, const uint64_t *idx, size_t n,
			 uint64_t when, struct bfs_fetch_tally *out)
{
	struct bfs_fetch_hold h = {0};

	if (!bfs_fetch_plans(f))
		return;
	ahead_pages(f, &h, idx, n, out);
	if (h.n)
		f->be->ops->plan_ranges(f->be, h.r, h.n, when);
	free(h.r);
	free(h.spans);
}

/* ---- rows read by the gathers ------------------------------------------ */

struct bfs_fetch_rows *bfs_fetch_rows_open(struct bfs_fetch *f)
{
	if (!f || !f->direct || atomic_load(&f->mapped))
		return NULL;
	return calloc(1, sizeof(struct bfs_fetch_rows));
}

void bfs_fetch_rows_close(struct bfs_fetch_rows *w)
{
	if (!w)
		return;
	if (w->buf)
		munmap(w->buf, w->cap);
	free(w->reads);
	free(w->rowp);
	free(w->tab);
	free(w);
}

/* Room in w for n rows of every field, and 'bytes' of reads. */
static int fit(struct bfs_fetch_rows *w, size_t nf, size_t n, size_t bytes)
{
	if (n > w->rows_cap) {
		free(w->reads);
		free(w->rowp);
		w->reads = malloc(n * nf * sizeof(*w->reads));
		w->rowp = malloc(n * nf * sizeof(*w->rowp));
		w->rows_cap = w->reads && w->rowp ? n : 0;
	}
	if (!w->tab)
		w->tab = calloc(nf ? nf : 1, sizeof(*w->tab));
	if (bytes > w->cap) {
		if (w->buf)
			munmap(w->buf, w->cap);
		w->cap = (bytes + 4095) & ~(size_t)4095;
		w->buf = mmap(NULL, w->cap, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (w->buf == MAP_FAILED) {
			w->buf = NULL;
			w->cap = 0;
		}
	}
	return w->rows_cap >= n && w->tab && w->cap >= bytes ? 0 : -ENOMEM;
}

/* What a gather reads of row x: [*a, *e), whole pages for O_DIRECT
 * (a row of FETCH_MIN bytes or more), else the row's bytes; 'buffered'
 * says which. */
static void row_read(const struct bfs_extent *x, uint64_t *a, uint64_t *e,
		     bool *buffered)
{
	*buffered = x->len < FETCH_MIN;
	if (*buffered) {
		*a = x->off;
		*e = x->off + x->len;
	} else {
		pages(x, a, e);
	}
}

int bfs_fetch_rows(struct bfs_fetch *f, struct bfs_fetch_rows *w,
		   const uint64_t *idx, size_t n, bfs_layout_rows *have)
{
	size_t nf = bfs_dataset_nfields(f->ds), nr = 0, bytes = 0;
	int rc;

	*have = NULL;
	for (size_t i = 0; i < nf; i++) /* the memory needed */
		for (size_t r = 0; f->direct[i] && r < n; r++) {
			struct bfs_extent x;
			uint64_t a, e;
			bool buffered;

			if (bfs_dataset_extent(f->ds, i, idx[r], &x) < 0)
				return -ERANGE;
			row_read(&x, &a, &e, &buffered);
			if (!buffered) /* O_DIRECT: page-aligned memory */
				bytes = (bytes + 4095) & ~(size_t)4095;
			bytes += e - a;
		}
	rc = fit(w, nf, n, bytes);
	bytes = 0;
	for (size_t i = 0; rc == 0 && i < nf; i++) {
		w->tab[i] = f->direct[i] ? w->rowp + i * n : NULL;
		for (size_t r = 0; f->direct[i] && r < n; r++) {
			struct bfs_extent x;
			uint64_t a, e;
			bool buffered;

			bfs_dataset_extent(f->ds, i, idx[r], &x);
			row_read(&x, &a, &e, &buffered);
			if (!buffered)
				bytes = (bytes + 4095) & ~(size_t)4095;
			w->reads[nr++] = (struct bfs_fetch_range){
			    x.file, a, e - a, w->buf + bytes, buffered};
			w->rowp[i * n + r] = w->buf + bytes + (x.off - a);
			bytes += e - a;
		}
	}
	if (rc == 0)
		rc = f->be->ops->read_all(f->be, w->reads, nr);
	if (rc == 0) {
		atomic_fetch_add_explicit(&f->rows, nr, memory_order_relaxed);
		atomic_fetch_add_explicit(&f->bytes, bytes,
					  memory_order_relaxed);
		*have = (bfs_layout_rows)w->tab;
	}
	return rc;
}
