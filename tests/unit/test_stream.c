/* fs/stream: where each batch of an epoch's stream starts, against a
 * brute-force sum of bfs_layout_file_size:
 * - fixed layouts whose batch 0 header ends a few bytes under the 4096
 *   boundary, so that two-digit epoch and batch numbers would spill it:
 *   every batch but the last has one size, and the arithmetic offsets are
 *   the sums, for epochs 0, 9, 10, 11, 123 and on a multi-rank order;
 * - ragged layouts (an archive this test writes, tests/lib/fixture),
 *   shuffled, over epochs that outnumber the tables kept; a measurement
 *   that fails is made again by the next caller;
 * - a multi-rank order of 6 lanes read round robin, and from 8 threads at
 *   once: each epoch's table is measured once, not once per read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/layout.h"
#include "fs/stream.h"
#include "tests/lib/fixture.h"

static struct bfs_order *make_order(struct bfs_order_opts *o)
{
	struct bfs_order *ord = NULL;
	struct bfs_error err = {{0}};

	if (bfs_order_create(&ord, o, &err))
		fail_msg("order: %s", err.msg);
	return ord;
}

/* Every offset and every batch's bounds of the stream of epoch e of
 * lane 'lane' of s equal the sums of the layout's batch sizes; past its
 * end, and past the order's epochs, there is nothing. */
static void check_epoch(struct bfs_streams *s, const struct bfs_layout *l,
			struct bfs_order *o, size_t lane, uint64_t e)
{
	uint64_t len = bfs_order_len(o), at = 0, off, from, to;
	struct bfs_batch_id id = {.lane = lane, .epoch = e}, got;
	struct bfs_batch_loc loc;

	for (uint64_t b = 0; b <= len; b++) {
		uint64_t size = 0;

		id.batch = b;
		assert_int_equal(bfs_stream_offset(s, id, &off), 0);
		if (off != at)
			fail_msg("lane %zu epoch %llu batch %llu: offset %llu, "
				 "the batches before it add up to %llu",
				 lane, (unsigned long long)e,
				 (unsigned long long)b, (unsigned long long)off,
				 (unsigned long long)at);
		if (b == len)
			break;
		assert_int_equal(bfs_order_locate(o, id, &loc), 0);
		assert_int_equal(bfs_layout_file_size(l, o, &loc, &size), 0);
		for (uint64_t x = at; x < at + size; x += size - 1) {
			got = (struct bfs_batch_id){.lane = lane, .epoch = e};
			assert_int_equal(
			    bfs_stream_locate(s, &got, x, &from, &to), 0);
			assert_int_equal(got.batch, b);
			assert_int_equal(from, at);
			assert_int_equal(to, at + size);
			if (size == 1)
				break;
		}
		at += size;
	}
	got = (struct bfs_batch_id){.lane = lane, .epoch = e};
	assert_int_equal(bfs_stream_locate(s, &got, at, &from, &to), -ENOENT);
	id.batch = len + 1;
	assert_int_equal(bfs_stream_offset(s, id, &off), -ENOENT);
	id = (struct bfs_batch_id){.lane = lane, .epoch = bfs_order_epochs(o)};
	assert_int_equal(bfs_stream_offset(s, id, &off), -ENOENT);
	assert_int_equal(bfs_stream_locate(s, &id, 0, &from, &to), -ENOENT);
}

/* ---- fixed layouts at the 4096 boundary ------------------------------ */

static char name[4096];
static struct bfs_field f_x = {.name = name,
			       .dtype = BFS_DT_FLOAT32,
			       .ndim = 1,
			       .shape = {3},
			       .row_bytes = 12};
static struct bfs_field f_y = {.name = "y",
			       .dtype = BFS_DT_INT64,
			       .ndim = 0,
			       .shape = {0},
			       .row_bytes = 8};

/* A layout of f_x and f_y whose batch of 'rows' rows has, for epoch 0
 * batch 0, 8 + JSON = 'end' bytes of header. */
static void layout_ending_at(struct bfs_layout *l, uint64_t rows, size_t end)
{
	const struct bfs_field *fs[] = {&f_x, &f_y};

	for (size_t len = 1; len < sizeof(name) - 1; len++) {
		size_t json;

		memset(name, 'n', len);
		name[len] = '\0';
		assert_int_equal(
		    bfs_layout_init_fields(l, fs, 2, rows, NULL, NULL), 0);
		json =
		    bfs_layout_json(l, (struct bfs_batch_id){0}, rows, NULL, 0);
		if (json + 8 == end)
			return;
		bfs_layout_fini(l);
	}
	fail_msg("no name length ends the header at %zu", end);
}

static void
fixed_offsets_are_sums_when_numbers_cross_the_4096_boundary(void **state)
{
	static const uint64_t epochs[] = {0, 9, 10, 11, 123};

	for (size_t end = 4090; end <= 4096; end++) {
		struct bfs_order_opts oo = {.sampler = BFS_SAMPLER_SEQUENTIAL,
					    .n = 2 * 25 + 1,
					    .batch_size = 2};
		struct bfs_order *o = make_order(&oo);
		uint64_t size0, size;
		struct bfs_streams *s;
		struct bfs_batch_loc at;
		struct bfs_layout l;

		layout_ending_at(&l, 2, end);
		assert_int_equal(bfs_streams_create(&s, &l, o), 0);
		assert_int_equal(
		    bfs_order_locate(o, (struct bfs_batch_id){0}, &at), 0);
		assert_int_equal(bfs_layout_file_size(&l, o, &at, &size0), 0);
		for (size_t i = 0; i < sizeof(epochs) / sizeof(epochs[0]);
		     i++) {
			for (uint64_t k = 0; k + 1 < bfs_order_len(o); k++) {
				struct bfs_batch_id id = {.epoch = epochs[i],
							  .batch = k};

				assert_int_equal(bfs_order_locate(o, id, &at),
						 0);
				assert_int_equal(
				    bfs_layout_file_size(&l, o, &at, &size), 0);
				assert_int_equal(size, size0);
			}
			check_epoch(s, &l, o, 0, epochs[i]);
		}
		assert_int_equal(bfs_streams_measured(s), 0); /* arithmetic */
		bfs_streams_destroy(s);
		bfs_layout_fini(&l);
		bfs_order_destroy(o);
	}
}

static void fixed_offsets_of_a_multi_rank_order_are_sums(void **state)
{
	static const uint32_t ranks[] = {0, 1, 2};
	struct bfs_order_opts oo = {.sampler = BFS_SAMPLER_DISTRIBUTED,
				    .n = 3 * 2 * 12,
				    .batch_size = 2,
				    .world_size = 3,
				    .shuffle = true,
				    .seed = 4,
				    .ranks = ranks,
				    .nranks = 3,
				    .epochs = 12};
	struct bfs_order *o = make_order(&oo);
	struct bfs_streams *s;
	struct bfs_layout l;

	layout_ending_at(&l, 2, 4096);
	bfs_layout_bind_order(&l, o);
	assert_int_equal(bfs_streams_create(&s, &l, o), 0);
	for (size_t lane = 0; lane < 3; lane++)
		for (uint64_t e = 8; e < 12; e++)
			check_epoch(s, &l, o, lane, e);
	bfs_streams_destroy(s);
	bfs_layout_fini(&l);
	bfs_order_destroy(o);
}

/* ---- ragged layouts --------------------------------------------------- */

#define N 60 /* samples */

static int64_t offs[N + 1];
static int16_t vals[N * 9];
static int64_t lab[N];

/* "r.pt" in a fixture of its own: t.values int16 [total] of random
 * lengths 0..8 per sample, t.offsets, label int64 [N]. Opened as a
 * dataset, with the layout of 'order's batch size and that order. */
static void ragged_dataset(struct tf_fixture *fx,
			   const struct bfs_order_opts *order)
{
	unsigned seed = 7;

	for (int i = 0; i < N; i++) {
		seed = seed * 1103515245u + 12345u;
		offs[i + 1] = offs[i] + (seed >> 16) % 9;
		lab[i] = i;
	}
	for (int64_t i = 0; i < offs[N]; i++)
		vals[i] = (int16_t)i;
	{
		const struct tf_field fields[] = {
		    {"t.values", BFS_DT_INT16, 1, {offs[N]}, .data = vals},
		    {"label", BFS_DT_INT64, 1, {N}, .data = lab},
		    {"t.offsets", BFS_DT_INT64, 1, {N + 1}, .data = offs},
		};
		const struct tf_spec spec = {.name = "r.pt",
					     .fields = fields,
					     .nfields = 3,
					     .order = *order};

		if (tf_setup(fx, &spec))
			fail_msg("%s", fx->err.msg);
	}
}

static void ragged_offsets_are_sums_over_more_epochs_than_tables(void **state)
{
	const struct bfs_order_opts oo = {
	    .sampler = BFS_SAMPLER_RANDOM, .n = N, .batch_size = 7, .seed = 3};
	struct tf_fixture fx;
	struct bfs_streams *s;

	ragged_dataset(&fx, &oo);
	assert_int_equal(bfs_streams_create(&s, &fx.layout, fx.order), 0);
	for (int round = 0; round < 2; round++)
		for (uint64_t e = 0; e < 6; e++) /* 4 tables: 1 lane */
			check_epoch(s, &fx.layout, fx.order, 0, e);
	bfs_streams_destroy(s);
	tf_teardown(&fx);
}

/* A measurement that fails (here: the archive's mtime moved, as a write
 * in place moves it, so reading its offsets is -EIO) frees its table:
 * the call fails, and once the archive is as opened again the epoch is
 * measured anew, and right. */
static void a_failed_measurement_is_made_again_later(void **state)
{
	const struct bfs_order_opts oo = {
	    .sampler = BFS_SAMPLER_RANDOM, .n = N, .batch_size = 7, .seed = 3};
	struct timespec moved[2], back[2];
	struct tf_fixture fx;
	struct bfs_streams *s;
	struct stat st;
	uint64_t off;

	ragged_dataset(&fx, &oo);
	assert_int_equal(stat(fx.path, &st), 0);
	back[0] = moved[0] = st.st_atim;
	back[1] = moved[1] = st.st_mtim;
	moved[1].tv_sec += 10;
	assert_int_equal(bfs_streams_create(&s, &fx.layout, fx.order), 0);
	assert_int_equal(utimensat(AT_FDCWD, fx.path, moved, 0), 0);
	assert_int_equal(
	    bfs_stream_offset(s, (struct bfs_batch_id){.epoch = 2, .batch = 1},
			      &off),
	    -EIO);
	assert_int_equal(bfs_streams_measured(s), 1);
	assert_int_equal(utimensat(AT_FDCWD, fx.path, back, 0), 0);
	check_epoch(s, &fx.layout, fx.order, 0, 2);
	assert_int_equal(bfs_streams_measured(s), 2);
	bfs_streams_destroy(s);
	tf_teardown(&fx);
}

/* ---- many lanes ------------------------------------------------------- */

#define LANES  6
#define EPOCHS 2 /* read by each lane */

struct lanes {
	struct tf_fixture fx; /* the ragged dataset, its layout and order */
	struct bfs_streams *s;
};

static void lanes_open(struct lanes *x)
{
	static const uint32_t ranks[LANES] = {0, 1, 2, 3, 4, 5};
	struct bfs_order_opts oo = {.sampler = BFS_SAMPLER_DISTRIBUTED,
				    .n = N,
				    .batch_size = 3,
				    .world_size = LANES,
				    .shuffle = true,
				    .seed = 11,
				    .ranks = ranks,
				    .nranks = LANES,
				    .epochs = 5};

	ragged_dataset(&x->fx, &oo);
	bfs_layout_bind_order(&x->fx.layout, x->fx.order);
	assert_int_equal(bfs_streams_create(&x->s, &x->fx.layout, x->fx.order),
			 0);
}

static void lanes_close(struct lanes *x)
{
	bfs_streams_destroy(x->s);
	tf_teardown(&x->fx);
}

static void six_lanes_read_round_robin_measure_each_epoch_once(void **state)
{
	struct lanes x;
	uint64_t off, from, to;

	lanes_open(&x);
	for (uint64_t e = 0; e < EPOCHS; e++)
		for (uint64_t b = 0; b < bfs_order_len(x.fx.order); b++)
			for (size_t lane = 0; lane < LANES; lane++) {
				struct bfs_batch_id id = {lane, e, b},
						    got = {lane, e, 0};

				assert_int_equal(
				    bfs_stream_offset(x.s, id, &off), 0);
				assert_int_equal(bfs_stream_locate(x.s, &got,
								   off, &from,
								   &to),
						 0);
				assert_int_equal(got.batch, b);
			}
	assert_int_equal(bfs_streams_measured(x.s), LANES * EPOCHS);
	for (size_t lane = 0; lane < LANES; lane++) /* and they are right */
		for (uint64_t e = 0; e < EPOCHS; e++)
			check_epoch(x.s, &x.fx.layout, x.fx.order, lane, e);
	assert_int_equal(bfs_streams_measured(x.s), LANES * EPOCHS);
	lanes_close(&x);
}

static void *reader(void *arg)
{
	struct lanes *x = arg;
	uint64_t off;

	for (uint64_t e = 0; e < EPOCHS; e++)
		for (size_t lane = 0; lane < LANES; lane++)
			for (uint64_t b = 0; b <= bfs_order_len(x->fx.order);
			     b++)
				if (bfs_stream_offset(
					x->s, (struct bfs_batch_id){lane, e, b},
					&off))
					return (void *)1;
	return NULL;
}

static void readers_of_one_epoch_at_once_wait_for_one_measurement(void **state)
{
	pthread_t t[8];
	struct lanes x;
	void *rc;

	lanes_open(&x);
	for (int i = 0; i < 8; i++)
		assert_int_equal(pthread_create(&t[i], NULL, reader, &x), 0);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(pthread_join(t[i], &rc), 0);
		assert_null(rc);
	}
	assert_int_equal(bfs_streams_measured(x.s), LANES * EPOCHS);
	for (size_t lane = 0; lane < LANES; lane++)
		for (uint64_t e = 0; e < EPOCHS; e++)
			check_epoch(x.s, &x.fx.layout, x.fx.order, lane, e);
	lanes_close(&x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(
		fixed_offsets_are_sums_when_numbers_cross_the_4096_boundary),
	    cmocka_unit_test(fixed_offsets_of_a_multi_rank_order_are_sums),
	    cmocka_unit_test(
		ragged_offsets_are_sums_over_more_epochs_than_tables),
	    cmocka_unit_test(a_failed_measurement_is_made_again_later),
	    cmocka_unit_test(
		six_lanes_read_round_robin_measure_each_epoch_once),
	    cmocka_unit_test(
		readers_of_one_epoch_at_once_wait_for_one_measurement),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
