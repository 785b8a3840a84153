/* fs/fetch over fs/reader's backends (io_uring and threads) and over a
 * backend of the test's own:
 * - data that does not fit: the rows of the big field (>= 32 KiB a row,
 *   rows not page-aligned here) read with O_DIRECT equal the file's bytes,
 *   in any order and repeated, the small field is left to the mapping,
 *   and stats and 'why' say so (not the file's last row: the read of its
 *   last page, past the end of the file, comes back short and the batch
 *   is gathered from the mapping);
 * - data that fits, or batches served from the mapping (zero copy): no
 *   field is read by the gathers, 'why' says nothing of O_DIRECT;
 * - a backend whose reads fail makes bfs_fetch_rows -EIO, and so does a
 *   file cut short under fs/reader's O_DIRECT reads;
 * - reads ahead go to the backend, and fs/reader's leave the pages in the
 *   page cache; --reader none reads nothing and says so;
 * - a batch read ahead is the pages its rows touch that the backend
 *   picks, sorted and merged where they touch, range by range until
 *   told to stop, or all at once where the backend takes a batch's
 *   ranges together; planned batches go to the backend's plan, nothing
 *   read; where a file is held, the read-ahead is told to read on after
 *   the read-in and at most an epoch ahead;
 * - a pool handed the fetch gathers batches equal to the layout's, the
 *   big rows read by the gathers (none when served from the mapping). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fs/dataset.h"
#include "fs/fetch.h"
#include "fs/pool.h"
#include "fs/reader.h"
#include "tests/lib/fixture.h"

#define N	   40
#define ROW	   ((48u << 10) + 100) /* rows not page-aligned */
#define ZROW	   1000u	       /* rows the gathers read buffered */
#define LIVENESS_S 30		       /* a bound on waits, not a measure */

/* The same files twice: a test cuts short_fx's x.npy short. */
static struct tf_fixture data_fx, short_fx;

/* Byte j of row i of x. */
static uint8_t xbyte(size_t i, size_t j)
{
	return (uint8_t)(i * 131 + j * 7 + (j >> 9));
}

static void fill_x(void *x, size_t n)
{
	for (size_t k = 0; k < n; k++)
		((uint8_t *)x)[k] = xbyte(k / ROW, k % ROW);
}

/* Byte j of row i of z. */
static uint8_t zbyte(size_t i, size_t j)
{
	return (uint8_t)(i * 29 + j * 3 + 1);
}

static void fill_z(void *z, size_t n)
{
	for (size_t k = 0; k < n; k++)
		((uint8_t *)z)[k] = zbyte(k / ZROW, k % ZROW);
}

static void fill_y(void *y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		((int64_t *)y)[i] = 1000 + (int64_t)i;
}

/* A directory of x.npy (uint8 [N, ROW]), y.npy (int64 [N]) and z.npy
 * (uint8 [N, ZROW]), twice; each test opens its own datasets of them. */
static int setup(void **state)
{
	const struct tf_field fields[] = {
	    {"x", BFS_DT_UINT8, 2, {N, ROW}, .fill = fill_x},
	    {"y", BFS_DT_INT64, 1, {N}, .fill = fill_y},
	    {"z", BFS_DT_UINT8, 2, {N, ZROW}, .fill = fill_z},
	};
	const struct tf_spec spec = {.format = TF_NPY,
				     .name = "fetch",
				     .fields = fields,
				     .nfields = 3,
				     .write_only = true};

	return tf_setup(&data_fx, &spec) ? -1 : tf_setup(&short_fx, &spec);
}

static int teardown(void **state)
{
	tf_teardown(&data_fx);
	return tf_teardown(&short_fx);
}

static struct bfs_dataset *open_dir(const char *d)
{
	struct bfs_dataset *ds = NULL;
	struct bfs_error err = {{0}};

	if (bfs_dataset_open(&ds, &d, 1, &err))
		fail_msg("open %s: %s", d, err.msg);
	return ds;
}

/* The field named 'name'. */
static size_t field(const struct bfs_dataset *ds, const char *name)
{
	for (size_t f = 0; f < bfs_dataset_nfields(ds); f++)
		if (!strcmp(bfs_dataset_field(ds, f)->name, name))
			return f;
	fail_msg("no field %s", name);
	return 0;
}

/* fs/reader's backend of 'kind' over ds (skips where io_uring cannot be
 * set up, or where this file system has no O_DIRECT and 'direct' asks
 * for it), made into a fetch. */
static struct bfs_fetch *fetch_of(const struct bfs_dataset *ds,
				  enum bfs_reader_kind kind, bool direct)
{
	struct bfs_fetch_backend *be;
	struct bfs_fetch *f;
	int rc = bfs_reader_backend(&be, ds, kind, direct);

	if (rc < 0 && kind == BFS_READER_IO_URING) {
		print_message("io_uring cannot be set up here\n");
		skip();
	}
	assert_int_equal(rc, 0);
	if (direct && !be->rows) {
		be->ops->destroy(be);
		print_message("no O_DIRECT on this file system\n");
		skip();
	}
	assert_int_equal(bfs_fetch_create(&f, ds, be), 0);
	return f;
}

/* ---- rows read by the gathers ---------------------------------------- */

static void rows_read_direct_equal_the_bytes(enum bfs_reader_kind kind)
{
	/* not the last row: its last page ends past the end of the file,
	 * so that read comes back short (-EIO: gathered from the mapping) */
	static const uint64_t idx[] = {38, 0, 17, 17, 5, 37, 1};
	const size_t n = sizeof(idx) / sizeof(idx[0]);
	struct bfs_dataset *ds = open_dir(data_fx.path);
	struct bfs_fetch *f = fetch_of(ds, kind, true);
	size_t fx = field(ds, "x"), fy = field(ds, "y"), fz = field(ds, "z");
	struct bfs_fetch_rows *w = bfs_fetch_rows_open(f);
	struct bfs_fetch_stats st;
	bfs_layout_rows have;

	assert_true(bfs_fetch_field(f, fx));
	assert_false(bfs_fetch_field(f, fy)); /* labels stay mapped */
	assert_true(bfs_fetch_field(f, fz));  /* read buffered */
	assert_non_null(w);
	for (int round = 0; round < 2; round++) { /* its memory reused */
		assert_int_equal(bfs_fetch_rows(f, w, idx, n, &have), 0);
		assert_non_null(have);
		assert_null(have[fy]);
		for (size_t r = 0; r < n; r++) {
			const uint8_t *row = have[fx][r];

			const uint8_t *zrow = have[fz][r];

			for (size_t j = 0; j < ROW; j++)
				if (row[j] != xbyte(idx[r], j))
					fail_msg("row %llu byte %zu",
						 (unsigned long long)idx[r], j);
			for (size_t j = 0; j < ZROW; j++)
				if (zrow[j] != zbyte(idx[r], j))
					fail_msg("z row %llu byte %zu",
						 (unsigned long long)idx[r], j);
		}
	}
	bfs_fetch_stats(f, &st);
	assert_string_equal(st.backend, bfs_reader_kind_name(kind));
	assert_int_equal(st.rows, 2 * 2 * n); /* x and z, twice */
	/* x's pages, z's rows exactly */
	assert_true(st.bytes >= 2 * n * (ROW + ZROW) &&
		    st.bytes < 2 * n * (ROW + 8192 + ZROW));
	assert_non_null(strstr(st.why, "; rows of >= 32 KiB read with "
				       "O_DIRECT by the gathers, of >= 512 "
				       "bytes buffered"));
	bfs_fetch_rows_close(w);
	bfs_fetch_destroy(f);
	bfs_dataset_close(ds);
}

static void rows_read_direct_io_uring(void **state)
{
	rows_read_direct_equal_the_bytes(BFS_READER_IO_URING);
}

static void rows_read_direct_threads(void **state)
{
	rows_read_direct_equal_the_bytes(BFS_READER_THREADS);
}

/* Data that fits (the backend asked for no O_DIRECT), or batches served
 * from the mapping: the gathers read nothing themselves. */
static void no_rows_when_the_data_fits_or_is_served_mapped(void **state)
{
	struct bfs_dataset *ds = open_dir(data_fx.path);
	struct bfs_fetch *f = fetch_of(ds, BFS_READER_THREADS, false);
	struct bfs_fetch_stats st;

	assert_false(bfs_fetch_field(f, field(ds, "x")));
	assert_null(bfs_fetch_rows_open(f));
	bfs_fetch_stats(f, &st);
	assert_null(strstr(st.why, "O_DIRECT"));
	bfs_fetch_destroy(f);

	f = fetch_of(ds, BFS_READER_THREADS, true);
	bfs_fetch_serve_mapped(f);
	assert_false(bfs_fetch_field(f, field(ds, "x")));
	assert_null(bfs_fetch_rows_open(f));
	bfs_fetch_stats(f, &st);
	assert_string_equal(st.backend, "threads");
	assert_null(strstr(st.why, "O_DIRECT"));
	bfs_fetch_destroy(f);
	bfs_dataset_close(ds);
}

/* ---- a backend of the test's own ------------------------------------- */

struct fake {
	struct bfs_fetch_backend be; /* first */
	int read_alls, aheads;
	size_t ahead_file;
	uint64_t ahead_off, ahead_len;
	bool *destroyed;
};

static int fake_read_all(struct bfs_fetch_backend *be,
			 const struct bfs_fetch_range *r, size_t n)
{
	((struct fake *)be)->read_alls++;
	return -EIO;
}

static void fake_ahead(struct bfs_fetch_backend *be, size_t file, uint64_t off,
		       uint64_t len, uint64_t when)
{
	struct fake *fk = (struct fake *)be;

	fk->aheads++;
	fk->ahead_file = file;
	fk->ahead_off = off;
	fk->ahead_len = len;
}

static void fake_stats(struct bfs_fetch_backend *be,
		       struct bfs_fetch_backend_stats *out)
{
	*out = (struct bfs_fetch_backend_stats){.in_flight = 3, .bytes = 7};
}

static void fake_destroy(struct bfs_fetch_backend *be)
{
	*((struct fake *)be)->destroyed = true;
	free(be);
}

static const struct bfs_fetch_ops fake_ops = {
    .name = "fake",
    .read_all = fake_read_all,
    .ahead = fake_ahead,
    .stats = fake_stats,
    .destroy = fake_destroy,
};

static void a_failing_backend_gives_eio(void **state)
{
	static const uint64_t idx[] = {3, 4};
	struct bfs_dataset *ds = open_dir(data_fx.path);
	struct fake *fk = calloc(1, sizeof(*fk));
	bool destroyed = false;
	struct bfs_fetch_stats st;
	struct bfs_fetch_rows *w;
	struct bfs_fetch *f;
	bfs_layout_rows have;

	assert_non_null(fk);
	fk->be = (struct bfs_fetch_backend){
	    .ops = &fake_ops, .rows = true, .ahead = true};
	snprintf(fk->be.why, sizeof(fk->be.why), "a fake");
	fk->destroyed = &destroyed;
	assert_int_equal(bfs_fetch_create(&f, ds, &fk->be), 0);
	w = bfs_fetch_rows_open(f);
	assert_non_null(w);
	assert_int_equal(bfs_fetch_rows(f, w, idx, 2, &have), -EIO);
	assert_null(have);
	assert_int_equal(fk->read_alls, 1);
	assert_true(bfs_fetch_reads_ahead(f));
	bfs_fetch_ahead(f, 1, 4096, 8192, 0);
	assert_int_equal(fk->aheads, 1);
	assert_int_equal(fk->ahead_file, 1);
	assert_int_equal(fk->ahead_off, 4096);
	assert_int_equal(fk->ahead_len, 8192);
	bfs_fetch_stats(f, &st);
	assert_string_equal(st.backend, "fake");
	assert_string_equal(st.why, "a fake; rows of >= 32 KiB read with "
				    "O_DIRECT by the gathers, of >= 512 "
				    "bytes buffered");
	assert_int_equal(st.rows, 0);
	assert_int_equal(st.ahead_in_flight, 3);
	assert_int_equal(st.ahead_bytes, 7);
	bfs_fetch_rows_close(w);
	bfs_fetch_destroy(f);
	assert_true(destroyed);
	bfs_dataset_close(ds);
}

/* fs/reader's O_DIRECT reads of rows past a file cut short: -EIO. */
static void a_file_cut_short_gives_eio(void **state)
{
	static const uint64_t ok[] = {0, 1}, gone[] = {2, 30};
	struct bfs_dataset *ds = open_dir(short_fx.path);
	struct bfs_fetch *f = fetch_of(ds, BFS_READER_THREADS, true);
	struct bfs_fetch_rows *w = bfs_fetch_rows_open(f);
	size_t fx = field(ds, "x");
	struct bfs_extent x;
	bfs_layout_rows have;
	char p[sizeof(short_fx.path) + 8];

	assert_non_null(w);
	assert_int_equal(bfs_dataset_extent(ds, fx, 2, &x), 0);
	snprintf(p, sizeof(p), "%s/x.npy", short_fx.path);
	/* rows 2.. gone, from the page row 2 starts on */
	assert_int_equal(truncate(p, (off_t)((x.off + 4095) & ~4095ull)), 0);
	assert_int_equal(bfs_fetch_rows(f, w, gone, 2, &have), -EIO);
	assert_null(have);
	assert_int_equal(bfs_fetch_rows(f, w, ok, 2, &have), 0);
	assert_int_equal(((const uint8_t *)have[fx][1])[5], xbyte(1, 5));
	bfs_fetch_rows_close(w);
	bfs_fetch_destroy(f);
	bfs_dataset_close(ds);
}

/* ---- reading ahead ------------------------------------------------------- */

/* Whether the pages of bytes [off, off + len) of file i are resident. */
static bool resident(const struct bfs_dataset *ds, size_t i, uint64_t off,
		     uint64_t len)
{
	const uint8_t *map = bfs_dataset_file(ds, i)->map;
	uint64_t a = off & ~(uint64_t)4095, e = (off + len + 4095) & ~4095ull;
	unsigned char vec[256];
	bool all = (e - a) / 4096 <= sizeof(vec) &&
		   mincore((void *)(map + a), (size_t)(e - a), vec) == 0;

	for (size_t p = 0; all && p < (e - a) / 4096; p++)
		all = vec[p] & 1;
	return all;
}

/* Drop the file's pages from the page cache; false if they stay. */
static bool evict(const struct bfs_dataset *ds, size_t i, uint64_t off,
		  uint64_t len)
{
	int fd = open(bfs_dataset_file(ds, i)->path, O_RDONLY);

	assert_true(fd >= 0);
	fdatasync(fd);
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
	return !resident(ds, i, off, len);
}

static void reads_ahead_leave_pages_resident(void **state)
{
	struct bfs_dataset *ds = open_dir(data_fx.path);
	struct bfs_fetch *f = fetch_of(ds, BFS_READER_THREADS, false);
	size_t fx = field(ds, "x");
	struct bfs_fetch_stats st;
	struct bfs_extent x;

	assert_int_equal(bfs_dataset_extent(ds, fx, 9, &x), 0);
	if (!evict(ds, x.file, x.off, x.len)) {
		print_message("the page cache keeps the file here\n");
		skip();
	}
	assert_true(bfs_fetch_reads_ahead(f));
	bfs_fetch_ahead(
	    f, x.file, x.off & ~4095ull,
	    ((x.off + x.len + 4095) & ~4095ull) - (x.off & ~4095ull), 0);
	for (int t = 0; t < LIVENESS_S * 100; t++) {
		bfs_fetch_stats(f, &st);
		if (!st.ahead_in_flight && resident(ds, x.file, x.off, x.len))
			break;
		nanosleep(&(struct timespec){0, 10000000}, NULL);
	}
	assert_int_equal(st.ahead_in_flight, 0);
	assert_true(st.ahead_bytes >= x.len);
	assert_true(resident(ds, x.file, x.off, x.len));
	bfs_fetch_destroy(f);
	bfs_dataset_close(ds);
}

static void reader_none_reads_nothing(void **state)
{
	struct bfs_dataset *ds = open_dir(data_fx.path);
	struct bfs_fetch_backend *be;
	struct bfs_fetch_stats st;
	struct bfs_fetch *f;

	assert_int_equal(bfs_reader_backend(&be, ds, BFS_READER_NONE, true), 0);
	assert_false(be->rows);
	assert_false(be->ahead);
	assert_int_equal(bfs_fetch_create(&f, ds, be), 0);
	assert_false(bfs_fetch_reads_ahead(f));
	assert_null(bfs_fetch_rows_open(f));
	bfs_fetch_stats(f, &st);
	assert_string_equal(st.backend, "none");
	assert_string_equal(st.why, "none: rows are only advised (madvise)");
	bfs_fetch_destroy(f);
	bfs_fetch_destroy(NULL);
	assert_false(bfs_fetch_reads_ahead(NULL));
	assert_false(bfs_fetch_field(NULL, 0));
	assert_null(bfs_fetch_rows_open(NULL));
	bfs_dataset_close(ds);
}

/* ---- a batch read ahead, over a backend of the test's own ------------- */

/* Picks x's pages only (y's rows count as resident), records what it is
 * handed; 'held': every file is held, batches go at once. */
struct picky {
	struct bfs_fetch_backend be; /* first */
	size_t xfile;
	struct bfs_fetch_range got[16];
	size_t n, calls, plans;
	uint64_t when;
};

static size_t picky_pick(struct bfs_fetch_backend *be,
			 struct bfs_fetch_range *r, size_t n, bool ragged,
			 uint64_t *resident)
{
	struct picky *pk = (struct picky *)be;
	size_t m = 0;

	for (size_t i = 0; i < n; i++)
		if (r[i].file == pk->xfile)
			r[m++] = r[i];
		else
			(*resident)++;
	return m;
}

static void picky_ahead(struct bfs_fetch_backend *be, size_t file, uint64_t off,
			uint64_t len, uint64_t when)
{
	struct picky *pk = (struct picky *)be;

	if (pk->n < 16)
		pk->got[pk->n++] =
		    (struct bfs_fetch_range){file, off, len, NULL, false};
	pk->calls++;
	pk->when = when;
}

static void picky_ranges(struct bfs_fetch_backend *be,
			 const struct bfs_fetch_range *r, size_t n,
			 uint64_t when)
{
	struct picky *pk = (struct picky *)be;

	for (size_t i = 0; i < n && pk->n < 16; i++)
		pk->got[pk->n++] = r[i];
	pk->calls++;
	pk->when = when;
}

static void picky_plan(struct bfs_fetch_backend *be,
		       const struct bfs_fetch_range *r, size_t n, uint64_t when)
{
	((struct picky *)be)->plans += n;
}

static int picky_hold(struct bfs_fetch_backend *be,
		      const struct bfs_fetch_range *r, size_t n,
		      uint64_t deadline_ns)
{
	return 0;
}

static bool picky_held(struct bfs_fetch_backend *be, size_t file)
{
	return true;
}

static void picky_destroy(struct bfs_fetch_backend *be)
{
	free(be);
}

static const struct bfs_fetch_ops picky_ops = {
    .name = "picky",
    .ahead = picky_ahead,
    .pick = picky_pick,
    .stats = fake_stats,
    .destroy = picky_destroy,
};

static const struct bfs_fetch_ops picky_held_ops = {
    .name = "picky-held",
    .ahead = picky_ahead,
    .ahead_ranges = picky_ranges,
    .pick = picky_pick,
    .plan_ranges = picky_plan,
    .hold = picky_hold,
    .held = picky_held,
    .stats = fake_stats,
    .destroy = picky_destroy,
};

static struct bfs_fetch *picky_fetch(const struct bfs_dataset *ds,
				     const struct bfs_fetch_ops *ops,
				     struct picky **out)
{
	struct picky *pk = calloc(1, sizeof(*pk));
	struct bfs_extent x;
	struct bfs_fetch *f;

	assert_non_null(pk);
	assert_int_equal(bfs_dataset_extent(ds, field(ds, "x"), 0, &x), 0);
	pk->xfile = x.file;
	pk->be = (struct bfs_fetch_backend){.ops = ops, .ahead = true};
	assert_int_equal(bfs_fetch_create(&f, ds, &pk->be), 0);
	*out = pk;
	return f;
}

/* The pages x's rows i .. j touch (rows in one file, back to back). */
static struct bfs_fetch_range x_pages(const struct bfs_dataset *ds, uint64_t i,
				      uint64_t j)
{
	struct bfs_extent a, b;
	uint64_t lo, hi;

	assert_int_equal(bfs_dataset_extent(ds, field(ds, "x"), i, &a), 0);
	assert_int_equal(bfs_dataset_extent(ds, field(ds, "x"), j, &b), 0);
	lo = a.off & ~(uint64_t)4095;
	hi = (b.off + b.len + 4095) & ~(uint64_t)4095;
	return (struct bfs_fetch_range){a.file, lo, hi - lo, NULL, false};
}

static void a_batch_ahead_is_the_picked_pages_sorted_and_merged(void **state)
{
	static const uint64_t idx[] = {20, 5, 3, 4};
	struct bfs_dataset *ds = open_dir(data_fx.path);
	struct bfs_fetch_range one = x_pages(ds, 3, 5),
			       two = x_pages(ds, 20, 20);
	struct bfs_fetch_tally t = {0};
	atomic_bool stop = false;
	struct picky *pk;
	struct bfs_fetch *f = picky_fetch(ds, &picky_ops, &pk);

	assert_false(bfs_fetch_reads_after_read_in(f));
	assert_int_equal(bfs_fetch_window_cap(f, 7), UINT64_MAX);
	assert_false(bfs_fetch_plans(f));
	assert_int_equal(bfs_fetch_ahead_rows(f, idx, 4, 9, &stop, &t), 2);
	assert_int_equal(t.resident, 8); /* y's and z's rows, left out */
	assert_int_equal(pk->calls, 2);	 /* range by range */
	assert_int_equal(pk->got[0].file, one.file);
	assert_int_equal(pk->got[0].off, one.off);
	assert_int_equal(pk->got[0].len, one.len);
	assert_int_equal(pk->got[1].off, two.off);
	assert_int_equal(pk->got[1].len, two.len);
	assert_int_equal(pk->when, 9);
	atomic_store(&stop, true); /* the read-ahead is being destroyed */
	bfs_fetch_ahead_rows(f, idx, 4, 10, &stop, &t);
	assert_int_equal(pk->calls, 2);
	bfs_fetch_plan_rows(f, idx, 4, 11, &t); /* plans nothing */
	assert_int_equal(pk->plans, 0);
	bfs_fetch_destroy(f);
	bfs_dataset_close(ds);
}

static void held_files_are_read_ahead_a_batch_at_once(void **state)
{
	static const uint64_t idx[] = {20, 5, 3, 4};
	struct bfs_dataset *ds = open_dir(data_fx.path);
	struct bfs_fetch_tally t = {0};
	atomic_bool stop = false;
	struct picky *pk;
	struct bfs_fetch *f = picky_fetch(ds, &picky_held_ops, &pk);

	assert_true(bfs_fetch_reads_after_read_in(f));
	assert_int_equal(bfs_fetch_window_cap(f, 7), 7);
	assert_true(bfs_fetch_plans(f));
	assert_int_equal(bfs_fetch_ahead_rows(f, idx, 4, 9, &stop, &t), 2);
	assert_int_equal(pk->calls, 1); /* all at once */
	assert_int_equal(pk->n, 2);
	assert_int_equal(pk->when, 9);
	bfs_fetch_plan_rows(f, idx, 4, 11, &t);
	assert_int_equal(pk->plans, 2);
	assert_int_equal(pk->calls, 1); /* nothing read */
	atomic_store(&stop, true);
	bfs_fetch_ahead_rows(f, idx, 4, 12, &stop, &t);
	assert_int_equal(pk->calls, 1);
	bfs_fetch_destroy(f);
	bfs_dataset_close(ds);
}

/* ---- a pool handed the fetch ------------------------------------------- */

static void pool_gathers_with_the_fetch(bool in_place)
{
	struct bfs_dataset *ds = open_dir(data_fx.path);
	struct bfs_fetch *f = fetch_of(ds, BFS_READER_THREADS, true);
	struct bfs_order_opts oo = {.sampler = BFS_SAMPLER_RANDOM,
				    .n = N,
				    .batch_size = 8,
				    .seed = 4,
				    .epochs = 2};
	struct bfs_pool_opts po = {.workers = 2,
				   .prefetch = 2,
				   .budget_bytes = 64 << 20,
				   .timeout_ms = 30000,
				   .fetch = f,
				   .rows_in_place = in_place};
	struct bfs_order *order;
	struct bfs_layout l;
	struct bfs_pool *p;
	struct bfs_fetch_stats st;

	assert_int_equal(bfs_order_create(&order, &oo, NULL), 0);
	assert_int_equal(bfs_layout_init(&l, ds, 8, NULL), 0);
	bfs_layout_bind_order(&l, order);
	assert_int_equal(bfs_pool_create(&p, ds, order, &l, &po), 0);
	for (uint64_t k = 0; k < bfs_order_len(order); k++) {
		struct bfs_batch_id id = {.epoch = 1, .batch = k};
		uint64_t rows = bfs_order_batch_rows(order, k), idx[8];
		uint64_t size = bfs_layout_size(&l, rows);
		void *want = malloc(size);
		struct bfs_batch_loc at;
		struct bfs_batch *b;

		assert_int_equal(bfs_order_batch(order, id, idx), 0);
		assert_int_equal(
		    bfs_layout_fill(&l, ds, id, idx, rows, size, want), 0);
		assert_int_equal(bfs_order_locate(order, id, &at), 0);
		assert_int_equal(bfs_pool_acquire(p, &at, &b), 0);
		assert_int_equal(bfs_batch_size(b), size);
		assert_memory_equal(bfs_batch_data(b), want, size);
		bfs_pool_release(p, b);
		free(want);
	}
	bfs_pool_destroy(p);
	bfs_fetch_stats(f, &st);
	if (in_place)
		assert_int_equal(st.rows, 0);
	else /* all but the batch holding the last row (above) */
		assert_true(st.rows >= N - 8);
	bfs_layout_fini(&l);
	bfs_order_destroy(order);
	bfs_fetch_destroy(f);
	bfs_dataset_close(ds);
}

static void pool_reads_big_rows_through_the_fetch(void **state)
{
	pool_gathers_with_the_fetch(false);
}

static void pool_served_in_place_reads_none(void **state)
{
	pool_gathers_with_the_fetch(true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(rows_read_direct_io_uring),
	    cmocka_unit_test(rows_read_direct_threads),
	    cmocka_unit_test(no_rows_when_the_data_fits_or_is_served_mapped),
	    cmocka_unit_test(a_failing_backend_gives_eio),
	    cmocka_unit_test(a_file_cut_short_gives_eio),
	    cmocka_unit_test(reads_ahead_leave_pages_resident),
	    cmocka_unit_test(reader_none_reads_nothing),
	    cmocka_unit_test(
		a_batch_ahead_is_the_picked_pages_sorted_and_merged),
	    cmocka_unit_test(held_files_are_read_ahead_a_batch_at_once),
	    cmocka_unit_test(pool_reads_big_rows_through_the_fetch),
	    cmocka_unit_test(pool_served_in_place_reads_none),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
