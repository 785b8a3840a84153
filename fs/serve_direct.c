/* fs/serve_direct: direct mode (serve.h): batch files opened with direct
 * I/O, each READ replied from the plain pool's buffer of its batch, or
 * straight from the archive mapping (zero copy, below); mmap(MAP_SHARED)
 * fails. In every other mode it serves the batch files opened with
 * O_DIRECT (serve.c: batch_way), from the plain pool (base->plain: no
 * memfd, no hook). A way of serving (serve_impl.h): it calls the pool,
 * the dataset and serve_batch.c, never the core; the core reaches it
 * through its table (bfs_serve_direct_ops), and the check after each
 * zero-copy reply is its 'done'.
 *
 * Zero copy. When every row of every field is stored as served
 * (C-contiguous, little-endian, in no remote file but a sealed one:
 * bfs_dataset_row; a batch with rows of an object not sealed yet is
 * gathered), a
 * READ of [off, off+n) of a batch is a list of slices: the file's
 * rendered header and the rows in the archive's read-only mapping. The
 * kernel's copy into the reader's
 * pages is the only copy (no gather into a pool buffer). Slices adjacent in
 * memory merge (sequential order: one slice per field). A file is served
 * this way when a READ of ZC_READ_MAX bytes cannot need more than
 * ZC_MAX_IOV slices, and the rows average ZC_MIN_SLICE bytes (small slices
 * cost the kernel a page pin each: measured 4x slower than one gathered
 * buffer for 784-byte rows; fs/README.md); otherwise, and for a READ that
 * would need more, the pool's gathered buffer serves it. Prefetch becomes
 * read-ahead: an open advises its batch and the pool's window after it
 * (madvise), so cold rows are read ahead with no buffer held.
 *
 * Faults: before each reply that touches rows, the archives' sizes and
 * mtimes are checked against those rows (bfs_dataset_check): a truncated
 * or modified one gives EIO. If one shrinks between the check and the
 * reply, the kernel's copy from the slices faults inside the kernel: the
 * reply's writev fails with EFAULT (no signal reaches the daemon) and the
 * kernel ends the READ with EIO. This process never touches the rows.
 *
 * What zero copy cannot do: catch a source rewritten in place while the
 * kernel copies from it. The copy is the reply itself, and once it is
 * written the reader has the bytes. So the check is made again after the
 * reply (direct_done): a change there is logged and kept as
 * last_error, naming the batch whose reply may hold rows of both
 * versions, and every later batch that reads the file fails with EIO.
 * Without zero copy (BATCHFS_DEBUG_NO_ZERO_COPY, or any other mode) the
 * gather's check after its copy fails the batch itself; fs/README.md
 * (a source that changes) has what that costs. */
#include "fs/serve_impl.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "fs/log.h"

#define MOD "serve"

#define ZC_MAX_IOV   (BFS_SERVE_MAX_IOV - 1) /* IOV_MAX minus the header */
#define ZC_READ_MAX  (1u << 20) /* largest READ (libfuse 3.14: 256 pages) */
#define ZC_MIN_SLICE 4096u	/* mean bytes per row slice worth it */

/* The way's state. */
struct direct {
	bool zero_copy; /* slices of the archive (for files that allow) */
	int max_iov;	/* slices per READ */
};

struct bfs_zc {
	uint64_t rows, data_off;
	uint64_t *idx;	     /* [rows] sample indices of the batch */
	const uint8_t **row; /* [nfields][rows] in file order */
	char head[];	     /* data_off header bytes, then idx and row */
};

/* Whether zero copy can serve this dataset at all: every field stored as
 * served (a remote file's rows may be, once its object is sealed: until
 * then its batches are gathered, zc_open). */
static bool zc_eligible(const struct bfs_serve_base *s)
{
	const struct bfs_dataset *ds = s->ds;

	if (bfs_layout_mean_slice(s->layout) < ZC_MIN_SLICE)
		return false;
	for (size_t i = 0; i < bfs_dataset_nshards(ds); i++) {
		struct bfs_shard_info si;

		bfs_dataset_shard(ds, i, &si);
		for (size_t f = 0; si.samples && f < bfs_dataset_nfields(ds);
		     f++) {
			const void *p;

			int rc = bfs_dataset_row(ds, f, si.first_sample, &p);

			if (rc < 0 && rc != -EAGAIN)
				return false;
		}
	}
	return true;
}

/* Most slices a READ of ZC_READ_MAX bytes of a 'rows' batch can need. */
static uint64_t worst_slices(const struct bfs_layout *l, uint64_t rows)
{
	uint64_t n = 1; /* the header */

	for (size_t i = 0; i < l->nfields; i++) {
		uint64_t rb = l->fields[i].f->row_bytes;
		uint64_t sl = rb ? ZC_READ_MAX / rb + 2 : 0;

		n += sl < rows ? sl : rows;
	}
	return n;
}

/* After a reply of rows from the archive (r->zc_rows): the same check
 * again; a source that changed meanwhile is logged and kept as
 * last_error, naming f's batch. */
static void direct_done(struct bfs_serve_way *w, struct bfs_serve_reply *r)
{
	struct bfs_serve_base *s = w->base;
	struct bfs_file *f = r->file;

	if (!r->zc_rows) /* the reply is written: was the source steady? */
		return;
	r->zc_rows = false;
	if (bfs_dataset_check(s->ds, f->zc->idx, (size_t)f->zc->rows) < 0)
		bfs_pool_note_error(
		    s->plain, f->at.id,
		    "replied straight from the archive while a source "
		    "changed: the reader may have rows of both versions "
		    "(zero copy checks before and after its reply, not "
		    "during the kernel's copy); later batches fail with EIO");
}

static void direct_free(struct bfs_serve_way *w, struct bfs_file *f)
{
	free(f->zc);
	f->zc = NULL;
}

/* Plan f's slices (f->zc), or leave it NULL when a READ could need too
 * many slices or a row needs a gather. 0 or -errno. */
static int zc_open(struct bfs_serve_base *s, struct bfs_file *f)
{
	const struct bfs_layout *l = s->layout;
	uint64_t rows = f->at.rows;
	uint64_t data = bfs_layout_data_offset(l, rows);
	struct bfs_zc *z;
	int rc = 0;

	if (worst_slices(l, rows) > ZC_MAX_IOV)
		return 0;
	z = malloc(sizeof(*z) + data + rows * sizeof(uint64_t) +
		   l->nfields * rows * sizeof(void *));
	if (!z)
		return -ENOMEM;
	z->rows = rows;
	z->data_off = data; /* a multiple of 4096: idx stays aligned */
	z->idx = (uint64_t *)(z->head + data);
	z->row = (const uint8_t **)(z->idx + rows);
	rc = bfs_order_batch(s->order, f->at.id, z->idx);
	for (size_t i = 0; rc == 0 && i < l->nfields; i++)
		for (uint64_t r = 0; rc == 0 && r < rows; r++)
			rc = bfs_dataset_row(
			    s->ds, l->fields[i].ds_index, z->idx[r],
			    (const void **)&z->row[i * rows + r]);
	if (rc < 0) {
		free(z);
		return rc == -ENOTSUP || rc == -EAGAIN ? 0 : rc;
	}
	bfs_layout_header(l, f->at.id, rows, z->head);
	f->zc = z;
	bfs_pool_advise(s->plain, &f->at, z->idx);
	return 0;
}

/* Append [p, p+len) to r's slices, merged with the last one when
 * adjacent. false when a new slice does not fit under 'max'. */
static bool add(struct bfs_serve_reply *r, int max, const void *p, size_t len)
{
	struct iovec *last = r->iovcnt ? &r->iov[r->iovcnt - 1] : NULL;

	if (last && (const char *)last->iov_base + last->iov_len == p) {
		last->iov_len += len;
		return true;
	}
	if (r->iovcnt == max)
		return false;
	r->iov[r->iovcnt].iov_base = (void *)p;
	r->iov[r->iovcnt++].iov_len = len;
	return true;
}

/* The slices of bytes [off, end) of z's batch into r, at most 'max'.
 * Returns where they end (< end when more slices were needed). */
static uint64_t slices(const struct bfs_layout *l, const struct bfs_zc *z,
		       uint64_t off, uint64_t end, struct bfs_serve_reply *r,
		       int max)
{
	uint64_t fstart = z->data_off, p = off;

	if (p < z->data_off) {
		uint64_t n = (end < z->data_off ? end : z->data_off) - p;

		add(r, max, z->head + p, (size_t)n);
		p += n;
	}
	for (size_t i = 0; i < l->nfields && fstart < end; i++) {
		uint64_t rb = l->fields[i].f->row_bytes;
		uint64_t fend = fstart + z->rows * rb;
		uint64_t stop = end < fend ? end : fend;

		while (p < stop) {
			uint64_t q = (p - fstart) / rb, w = (p - fstart) % rb;
			uint64_t n = rb - w < stop - p ? rb - w : stop - p;

			if (!add(r, max, z->row[i * z->rows + q] + w,
				 (size_t)n))
				return p;
			p += n;
		}
		fstart = fend;
	}
	return p;
}

/* The slices of [off, off+n) of f into r; 1 when they fit, 0 when the
 * READ needs the pool's buffer instead, -EIO when an archive shrank. */
static int zc_read(struct bfs_serve_base *s, int max, struct bfs_file *f,
		   uint64_t off, uint64_t n, struct bfs_serve_reply *r)
{
	const struct bfs_zc *z = f->zc;
	uint64_t end = off + n;

	if (slices(s->layout, z, off, end, r, max) < end) {
		r->iovcnt = 0; /* too many slices: the pool's buffer serves */
		return 0;
	}
	if (end > z->data_off && !s->o.zc_no_check) {
		static atomic_bool stopped;

		if (bfs_dataset_check(s->ds, z->idx, (size_t)z->rows) < 0)
			return -EIO;
		r->zc_rows = true;
		if (s->o.zc_debug_stop && !atomic_exchange(&stopped, true))
			raise(SIGSTOP); /* tests: change a source now */
	}
	if (bfs_serve_consumed(s, f, n))
		atomic_fetch_add(&s->c.zero_copy, 1);
	return 1;
}

/* Zero copy where the dataset allows it (logged: mount/session logs the
 * mode and why, this says how). */
static int direct_create(struct bfs_serve_way *w, struct bfs_pool_opts *po)
{
	const struct bfs_serve_opts *o = &w->base->o;
	struct direct *d = calloc(1, sizeof(*d));

	w->state = d;
	if (!d)
		return -ENOMEM;
	/* Batch files opened O_DIRECT on a mount of another mode: zero copy
	 * would switch the whole mount's fetch to serving mapped rows
	 * (bfs_fetch_serve_mapped), which for data that does not fit takes
	 * the gathers' own O_DIRECT reads from every mode: then these are
	 * replied from gathered buffers too. */
	d->zero_copy =
	    o->zero_copy && zc_eligible(w->base) &&
	    (o->mode == BFS_SERVE_DIRECT || !bfs_fetch_gathers_read(po->fetch));
	d->max_iov = o->zc_max_iov && o->zc_max_iov < ZC_MAX_IOV
			 ? (int)o->zc_max_iov
			 : ZC_MAX_IOV;
	po->rows_in_place = d->zero_copy;
	if (d->zero_copy)
		bfs_log(BFS_LOG_INFO, MOD,
			"direct I/O (--serve direct, or batch files opened "
			"O_DIRECT): batches whose rows allow it are replied "
			"straight from the archive (zero copy)");
	return 0;
}

static void direct_destroy(struct bfs_serve_way *w)
{
	free(w->state);
	w->state = NULL;
}

static int direct_open(struct bfs_serve_way *w, struct bfs_file *f,
		       struct bfs_serve_how *how)
{
	const struct direct *d = w->state;

	how->direct_io = true;
	return d->zero_copy ? zc_open(w->base, f) : 0;
}

/* Slices of the archive when f has them and they fit, else the pool's
 * buffer: for a zero-copy file gathered alone (one READ's worth: it does
 * not re-gather its successors). */
static int direct_read(struct bfs_serve_way *w, struct bfs_file *f,
		       uint64_t off, uint64_t n, struct bfs_serve_reply *r)
{
	const struct direct *d = w->state;
	int rc;

	atomic_fetch_add(&w->base->c.reads, 1);
	if (f->zc) {
		rc = zc_read(w->base, d->max_iov, f, off, n, r);
		if (rc != 0)
			return rc < 0 ? rc : 0;
	}
	return bfs_serve_read_buffer(w->base, w->base->plain, f, off, n,
				     f->zc != NULL, r);
}

const struct bfs_serve_ops bfs_serve_direct_ops = {
    .name = "direct",
    .create = direct_create,
    .destroy = direct_destroy,
    .open = direct_open,
    .read = direct_read,
    .done = direct_done,
    .free = direct_free,
};
