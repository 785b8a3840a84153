/* fs/readahead over a real file whose pages the test drops from the page
 * cache (skipped where they stay, as on tmpfs):
 * - advice: rows not resident are advised and are resident after it;
 *   rows of chunks found resident are not advised, and the answer is
 *   remembered (a chunk evicted right after still counts as resident)
 *   until it is a second old, when the chunk is looked at again;
 * - the fields the gathers read themselves (fs/fetch) are not advised;
 * - the read-ahead thread follows a lane: told the readers are at batch
 *   K, it reads the rows of batches K+1 .. K+W (W: its byte budget over
 *   a batch's pages) and no other, and reads on when they move; it
 *   follows each lane of a multi-rank order apart;
 * - once the read-in of data that fits (fs/memory) has ended it reads
 *   nothing more;
 * - without a fetch (or without a read-ahead) nothing is read ahead and
 *   the stats say "none". */
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
#include "fs/memory.h"
#include "fs/readahead.h"
#include "fs/reader.h"
#include "tests/lib/fixture.h"

#define N	   64
#define ROW	   (64u << 10) /* x's rows: page-aligned, 16 pages */
#define B	   4	       /* rows a batch */
#define LIVENESS_S 30	       /* a bound on waits, not a measurement */

static struct tf_fixture data_fx; /* each test opens its own dataset */

static void fill_x(void *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		((uint8_t *)x)[i] = (uint8_t)(i * 13 + i / 4096);
}

static void fill_y(void *y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		((int64_t *)y)[i] = (int64_t)i;
}

/* "readahead": x.npy (uint8 [N, ROW], page-aligned) and y.npy (int64
 * [N]). */
static int setup(void **state)
{
	const struct tf_field fields[] = {
	    {"x", BFS_DT_UINT8, 2, {N, ROW}, .fill = fill_x, .align = 4096},
	    {"y", BFS_DT_INT64, 1, {N}, .fill = fill_y},
	};
	const struct tf_spec spec = {.format = TF_NPY,
				     .name = "readahead",
				     .fields = fields,
				     .nfields = 2,
				     .write_only = true};

	return tf_setup(&data_fx, &spec);
}

static int teardown(void **state)
{
	return tf_teardown(&data_fx);
}

static struct bfs_dataset *open_data(void)
{
	const char *p = data_fx.path;
	struct bfs_dataset *ds = NULL;
	struct bfs_error err = {{0}};

	if (bfs_dataset_open(&ds, &p, 1, &err))
		fail_msg("open %s: %s", p, err.msg);
	return ds;
}

static size_t field(const struct bfs_dataset *ds, const char *name)
{
	for (size_t f = 0; f < bfs_dataset_nfields(ds); f++)
		if (!strcmp(bfs_dataset_field(ds, f)->name, name))
			return f;
	fail_msg("no field %s", name);
	return 0;
}

/* Whether the pages of row i of field f are resident (mincore: nothing
 * is touched). */
static bool row_resident(const struct bfs_dataset *ds, size_t f, uint64_t i)
{
	struct bfs_extent x;
	const uint8_t *map;
	uint64_t a, e;
	unsigned char vec[64];
	bool all;

	assert_int_equal(bfs_dataset_extent(ds, f, i, &x), 0);
	map = bfs_dataset_file(ds, x.file)->map;
	a = x.off & ~(uint64_t)4095;
	e = (x.off + x.len + 4095) & ~(uint64_t)4095;
	all = (e - a) / 4096 <= sizeof(vec) &&
	      mincore((void *)(map + a), (size_t)(e - a), vec) == 0;
	for (size_t p = 0; all && p < (e - a) / 4096; p++)
		all = vec[p] & 1;
	return all;
}

/* Read every file of ds through a descriptor of the test's: resident. */
static void read_all_files(const struct bfs_dataset *ds)
{
	static char buf[1 << 16];

	for (size_t i = 0; i < bfs_dataset_nfiles(ds); i++) {
		int fd = open(bfs_dataset_file(ds, i)->path, O_RDONLY);

		assert_true(fd >= 0);
		while (read(fd, buf, sizeof(buf)) > 0)
			;
		close(fd);
	}
}

/* Drop every file of ds from the page cache; skips the test where x's
 * rows stay resident. Every page is read first: a read still in flight
 * (an earlier test's advice) keeps its pages locked, which the drop
 * skips and mincore counts absent until the read ends, and a read of
 * those pages waits for it. */
static void evict_all(const struct bfs_dataset *ds)
{
	read_all_files(ds);
	for (size_t i = 0; i < bfs_dataset_nfiles(ds); i++) {
		int fd = open(bfs_dataset_file(ds, i)->path, O_RDONLY);

		assert_true(fd >= 0);
		fdatasync(fd); /* dirty pages stay */
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
	for (uint64_t i = 0; i < N; i++)
		if (row_resident(ds, field(ds, "x"), i)) {
			print_message("the page cache keeps the file here\n");
			skip();
		}
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void pause_ms(long ms)
{
	nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000000}, NULL);
}

/* ---- residency and advice ------------------------------------------- */

static void advised_rows_become_resident(void **state)
{
	static const uint64_t idx[] = {3, 40};
	struct bfs_dataset *ds = open_data();
	size_t fx = field(ds, "x");
	struct bfs_readahead_stats st;
	struct bfs_readahead *ra;
	bool both = false;

	evict_all(ds);
	assert_int_equal(
	    bfs_readahead_create(&ra, ds, &(struct bfs_readahead_opts){0}), 0);
	bfs_readahead_rows(ra, idx, 2);
	bfs_readahead_stats(ra, &st);
	/* x's rows, evicted; y's page may stay (the dataset read its
	 * header through the mapping, which holds it) */
	assert_int_equal(st.rows_advised + st.rows_resident, 4);
	assert_true(st.rows_advised >= 2);
	for (int t = 0; t < LIVENESS_S * 100 && !both; t++) {
		both = row_resident(ds, fx, 3) && row_resident(ds, fx, 40);
		if (!both)
			pause_ms(10);
	}
	assert_true(both);
	assert_false(row_resident(ds, fx, 20)); /* not asked for */
	bfs_readahead_destroy(ra);
	bfs_dataset_close(ds);
}

static void resident_chunks_are_remembered_for_a_second(void **state)
{
	static const uint64_t idx[] = {5, 50};
	struct bfs_dataset *ds = open_data();
	struct bfs_readahead_stats st;
	struct bfs_readahead *ra;
	double t0;

	read_all_files(ds);
	assert_int_equal(
	    bfs_readahead_create(&ra, ds, &(struct bfs_readahead_opts){0}), 0);
	t0 = now_s();
	bfs_readahead_rows(ra, idx, 2); /* looks: resident */
	bfs_readahead_stats(ra, &st);
	assert_int_equal(st.rows_resident, 4);
	assert_int_equal(st.rows_advised, 0);
	evict_all(ds);
	bfs_readahead_rows(ra, idx, 2); /* remembered: not looked at */
	bfs_readahead_stats(ra, &st);
	if (now_s() - t0 < 0.5) { /* else the answer may have aged out */
		assert_int_equal(st.rows_resident, 8);
		assert_int_equal(st.rows_advised, 0);
	}
	pause_ms(1300); /* the answer is older than a second */
	bfs_readahead_rows(ra, idx, 2);
	bfs_readahead_stats(ra, &st);
	assert_true(st.rows_advised >= 2); /* looked again: cold */
	bfs_readahead_destroy(ra);
	bfs_dataset_close(ds);
}

/* Rows the gathers read with O_DIRECT (fs/fetch) are not advised. */
static void rows_the_gathers_read_are_not_advised(void **state)
{
	static const uint64_t idx[] = {7, 8, 9};
	struct bfs_dataset *ds = open_data();
	struct bfs_fetch_backend *be;
	struct bfs_readahead_stats st;
	struct bfs_readahead *ra;
	struct bfs_fetch *f;

	assert_int_equal(bfs_reader_backend(&be, ds, BFS_READER_THREADS, true),
			 0);
	if (!be->rows) {
		be->ops->destroy(be);
		print_message("no O_DIRECT on this file system\n");
		skip();
	}
	assert_int_equal(bfs_fetch_create(&f, ds, be), 0);
	assert_true(bfs_fetch_field(f, field(ds, "x")));
	assert_int_equal(bfs_readahead_create(
			     &ra, ds, &(struct bfs_readahead_opts){.fetch = f}),
			 0);
	bfs_readahead_rows(ra, idx, 3);
	bfs_readahead_stats(ra, &st);
	assert_int_equal(st.rows_advised + st.rows_resident, 3); /* y only */
	assert_false(bfs_readahead_reads(ra)); /* no order: no thread */
	bfs_readahead_destroy(ra);
	bfs_fetch_destroy(f);
	bfs_dataset_close(ds);
}

/* ---- the read-ahead thread ---------------------------------------------- */

/* The pages one batch's rows take in the budget (readahead.c's
 * batch_pages: a row of len bytes touches len / 4096 + 2 pages at most):
 * x 18 pages, y 2, a row. */
#define BATCH_PAGES ((uint64_t)B * (18 + 2) * 4096)
#define WINDOW	    3 /* batches: the budget below */

struct rig {
	struct bfs_dataset *ds;
	struct bfs_order *order;
	struct bfs_fetch *fetch;
	struct bfs_readahead *ra;
};

/* ds (its rows evicted, with 'evict'), a shuffled order of 'lanes'
 * lanes (a DistributedSampler of that many ranks, served in one mount)
 * with batches of B, fs/reader's threads to read ahead, and a read-ahead
 * of 'batches' batches' pages. */
static void rig_up(struct rig *r, size_t lanes, struct bfs_memory *m,
		   bool evict, uint64_t batches)
{
	static const uint32_t ranks[] = {0, 1};
	struct bfs_order_opts oo = {
	    .sampler = lanes > 1 ? BFS_SAMPLER_DISTRIBUTED : BFS_SAMPLER_RANDOM,
	    .n = N,
	    .batch_size = B,
	    .seed = 11,
	    .shuffle = true,
	    .world_size = (uint32_t)lanes,
	    .ranks = lanes > 1 ? ranks : NULL,
	    .nranks = lanes > 1 ? lanes : 0,
	    .epochs = 2};
	struct bfs_fetch_backend *be;

	memset(r, 0, sizeof(*r));
	r->ds = open_data();
	if (evict)
		evict_all(r->ds);
	assert_int_equal(bfs_order_create(&r->order, &oo, NULL), 0);
	assert_int_equal(
	    bfs_reader_backend(&be, r->ds, BFS_READER_THREADS, false), 0);
	assert_int_equal(bfs_fetch_create(&r->fetch, r->ds, be), 0);
	assert_int_equal(
	    bfs_readahead_create(
		&r->ra, r->ds,
		&(struct bfs_readahead_opts){.order = r->order,
					     .memory = m,
					     .fetch = r->fetch,
					     .bytes = batches * BATCH_PAGES}),
	    0);
}

static void rig_down(struct rig *r)
{
	bfs_readahead_destroy(r->ra);
	bfs_fetch_destroy(r->fetch);
	bfs_order_destroy(r->order);
	bfs_dataset_close(r->ds);
}

/* Tell the read-ahead that lane l's readers are at its batch k of epoch
 * 0. */
static void follow(struct rig *r, size_t lane, uint64_t k)
{
	struct bfs_batch_loc at;
	struct bfs_batch_id id = {.lane = lane, .epoch = 0, .batch = k};

	assert_int_equal(bfs_order_locate(r->order, id, &at), 0);
	bfs_readahead_follow(r->ra, &at);
}

/* Wait until the thread has read 'batches' batches and every read is
 * done. */
static void wait_read(struct rig *r, uint64_t batches)
{
	struct bfs_readahead_stats st;

	for (int t = 0; t < LIVENESS_S * 100; t++) {
		bfs_readahead_stats(r->ra, &st);
		if (st.batches_read >= batches && !st.reads_in_flight)
			break;
		pause_ms(10);
	}
	assert_int_equal(st.batches_read, batches);
	assert_int_equal(st.reads_in_flight, 0);
}

/* Whether every x row of lane l's batch k (epoch 0) is resident; *none:
 * whether none is. */
static bool batch_resident(struct rig *r, size_t lane, uint64_t k, bool *none)
{
	struct bfs_batch_id id = {.lane = lane, .epoch = 0, .batch = k};
	size_t fx = field(r->ds, "x");
	uint64_t idx[B];
	bool all = true;

	*none = true;
	assert_int_equal(bfs_order_batch(r->order, id, idx), 0);
	for (int i = 0; i < B; i++) {
		bool res = row_resident(r->ds, fx, idx[i]);

		all &= res;
		*none &= !res;
	}
	return all;
}

static void the_thread_reads_the_batches_after_the_readers(void **state)
{
	struct bfs_readahead_stats st;
	struct rig r;
	bool none;

	rig_up(&r, 1, NULL, true, WINDOW);
	assert_true(bfs_readahead_reads(r.ra));
	bfs_readahead_stats(r.ra, &st);
	assert_string_equal(st.reader, "threads");
	assert_non_null(strstr(st.reader_why, "; up to 3 batches ahead"));
	assert_int_equal(st.batches_read, 0); /* nobody read yet */
	follow(&r, 0, 0);
	wait_read(&r, WINDOW);
	bfs_readahead_stats(r.ra, &st);
	assert_int_equal(st.distance, WINDOW);
	assert_true(st.bytes_read >= WINDOW * B * ROW);
	for (uint64_t k = 1; k <= WINDOW; k++)
		assert_true(batch_resident(&r, 0, k, &none));
	batch_resident(&r, 0, 0, &none); /* the readers' own: not read */
	assert_true(none);
	batch_resident(&r, 0, WINDOW + 1, &none); /* past the budget */
	assert_true(none);
	/* The readers move on by two: two more batches. */
	follow(&r, 0, 2);
	wait_read(&r, WINDOW + 2);
	for (uint64_t k = WINDOW + 1; k <= WINDOW + 2; k++)
		assert_true(batch_resident(&r, 0, k, &none));
	batch_resident(&r, 0, WINDOW + 3, &none);
	assert_true(none);
	rig_down(&r);
}

static void each_lane_is_followed_apart(void **state)
{
	struct bfs_readahead_stats st;
	struct rig r;
	bool none;

	rig_up(&r, 2, NULL, true, 4); /* shared: 2 batches a lane */
	bfs_readahead_stats(r.ra, &st);
	assert_non_null(
	    strstr(st.reader_why, "; up to 2 batches ahead of each rank"));
	follow(&r, 1, 0); /* only rank 1's readers read */
	wait_read(&r, 2);
	assert_true(batch_resident(&r, 1, 1, &none));
	assert_true(batch_resident(&r, 1, 2, &none));
	batch_resident(&r, 1, 3, &none);
	assert_true(none);
	for (uint64_t k = 0; k < 3; k++) {
		batch_resident(&r, 0, k, &none);
		assert_true(none);
	}
	follow(&r, 0, 0); /* now rank 0's too */
	wait_read(&r, 4);
	assert_true(batch_resident(&r, 0, 1, &none));
	assert_true(batch_resident(&r, 0, 2, &none));
	rig_down(&r);
}

static void nothing_is_read_once_the_read_in_ended(void **state)
{
	struct bfs_dataset *ds = open_data();
	char meminfo[300], text[] = "MemAvailable: 1048576 kB\n";
	struct bfs_memory_files files = {.meminfo = meminfo,
					 .cgroup = "/nonexistent",
					 .mountinfo = "/nonexistent"};
	struct bfs_readahead_stats st;
	struct bfs_memory *m;
	struct rig r;
	FILE *f;

	assert_non_null(tf_path(&data_fx, "meminfo", meminfo, sizeof(meminfo)));
	f = fopen(meminfo, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(
	    bfs_memory_create(
		&m, ds,
		&(struct bfs_memory_opts){.policy = true, .files = &files}),
	    0);
	assert_true(bfs_memory_reading_in(m));
	for (int t = 0; t < LIVENESS_S * 100 && !bfs_memory_read_in(m); t++)
		pause_ms(10);
	assert_true(bfs_memory_read_in(m));
	rig_up(&r, 1, m, false, WINDOW);
	bfs_readahead_stats(r.ra, &st);
	assert_non_null(
	    strstr(st.reader_why, " until the read-in at mount ends"));
	assert_int_equal(st.warm_bytes, bfs_dataset_bytes(ds));
	assert_false(bfs_readahead_reads(r.ra));
	follow(&r, 0, 0);
	bfs_readahead_stats(r.ra, &st);
	assert_int_equal(st.batches_read, 0);
	assert_int_equal(st.rows_read, 0);
	rig_down(&r);
	bfs_memory_destroy(m);
	bfs_dataset_close(ds);
}

static void without_a_fetch_nothing_is_read_ahead(void **state)
{
	struct bfs_dataset *ds = open_data();
	struct bfs_readahead_stats st;
	struct bfs_readahead *ra;
	struct bfs_order *order;
	struct bfs_order_opts oo = {.sampler = BFS_SAMPLER_RANDOM,
				    .n = N,
				    .batch_size = B,
				    .epochs = 1};

	assert_int_equal(bfs_order_create(&order, &oo, NULL), 0);
	assert_int_equal(
	    bfs_readahead_create(&ra, ds,
				 &(struct bfs_readahead_opts){.order = order}),
	    0);
	assert_false(bfs_readahead_reads(ra));
	bfs_readahead_stats(ra, &st);
	assert_string_equal(st.reader, "none");
	assert_string_equal(st.reader_why, "");
	bfs_readahead_destroy(ra);
	bfs_readahead_stats(NULL, &st);
	assert_string_equal(st.reader, "none");
	assert_int_equal(st.batches_read, 0);
	assert_false(bfs_readahead_reads(NULL));
	bfs_readahead_rows(NULL, (const uint64_t[]){1}, 1);
	bfs_readahead_destroy(NULL);
	bfs_order_destroy(order);
	bfs_dataset_close(ds);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(advised_rows_become_resident),
	    cmocka_unit_test(resident_chunks_are_remembered_for_a_second),
	    cmocka_unit_test(rows_the_gathers_read_are_not_advised),
	    cmocka_unit_test(the_thread_reads_the_batches_after_the_readers),
	    cmocka_unit_test(each_lane_is_followed_apart),
	    cmocka_unit_test(nothing_is_read_once_the_read_in_ended),
	    cmocka_unit_test(without_a_fetch_nothing_is_read_ahead),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
