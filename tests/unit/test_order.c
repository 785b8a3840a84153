/* fs/order: torch's randperm through the engine, batch arithmetic, random
 * access, thread safety, validation messages, and the input files.
 *
 * Values from torch 1.13.1 (/usr/bin/python3):
 *   for s in [0, 42, 2**32+42]:
 *       print(torch.randperm(10,
 * generator=torch.Generator().manual_seed(s)).tolist()) p =
 * torch.randperm(10**8, generator=torch.Generator().manual_seed(12345))
 *   p.numpy().astype('<u4').tofile('perm.u4')
 * and FNV-1a 64 (offset 0xcbf29ce484222325, prime 0x100000001b3) over the
 * bytes of perm.u4 (each value as little-endian uint32) = 0x8ec63e7f1936d92d,
 * computed with a 5-line C loop over the file.
 * The sampler form RandomSampler(ds, num_samples=n, generator=g) draws
 * nothing before its randperm, so epoch 0 is torch.randperm(n, g) itself. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs/order_input.h"
#include "tests/lib/fixture.h"

/* White-box: the engine itself, to reach its static torch >= 2.7 shuffle
 * (only used for n >= 214748364, too large for a unit test through the
 * public API). The core library's copy is then not linked. */
#include "fs/order.c"

/* Batch k of epoch e (of lane 0). */
#define ID(e, k) ((struct bfs_batch_id){.epoch = (e), .batch = (k)})

static struct bfs_order *make(const struct bfs_order_opts *o)
{
	struct bfs_error err = {{0}};
	struct bfs_order *ord = NULL;
	int rc = bfs_order_create(&ord, o, &err);

	if (rc)
		fail_msg("bfs_order_create: %s", err.msg);
	return ord;
}

static struct bfs_order_opts perm_opts(uint64_t n, uint64_t seed, uint64_t bs)
{
	struct bfs_order_opts o = {
	    .sampler = BFS_SAMPLER_RANDOM,
	    .n = n,
	    .num_samples = n,
	    .batch_size = bs,
	    .seed = seed,
	    .compat = BFS_TORCH_1_13,
	};
	return o;
}

static void randperm_of_ten_matches_torch(void **state)
{
	static const struct {
		uint64_t seed, p[10];
	} k[] = {
	    {0, {4, 1, 7, 5, 3, 9, 0, 8, 6, 2}},
	    {42, {2, 6, 1, 8, 4, 5, 0, 9, 3, 7}},
	    {(1ull << 32) + 42, {2, 6, 1, 8, 4, 5, 0, 9, 3, 7}},
	};
	uint64_t idx[10];

	for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++) {
		struct bfs_order_opts o = perm_opts(10, k[i].seed, 10);
		struct bfs_order *ord = make(&o);

		assert_int_equal(bfs_order_batch(ord, ID(0, 0), idx), 0);
		assert_memory_equal(idx, k[i].p, sizeof(idx));
		bfs_order_destroy(ord);
	}
}

static void randperm_of_1e8_hashes_like_torch(void **state)
{
	const uint64_t n = 100000000, bs = 1 << 20;
	struct bfs_order_opts o = perm_opts(n, 12345, bs);
	struct bfs_order *ord = make(&o);
	uint64_t *idx = malloc(bs * sizeof(*idx)), h = 0xcbf29ce484222325ull;

	assert_non_null(idx);
	for (uint64_t k = 0; k < bfs_order_len(ord); k++) {
		uint64_t rows = bfs_order_batch_rows(ord, k);

		assert_int_equal(bfs_order_batch(ord, ID(0, k), idx), 0);
		for (uint64_t r = 0; r < rows; r++)
			for (int b = 0; b < 4; b++)
				h = (h ^ ((idx[r] >> (8 * b)) & 0xff)) *
				    0x100000001b3ull;
	}
	assert_int_equal(h, 0x8ec63e7f1936d92dull);
	free(idx);
	bfs_order_destroy(ord);
}

/* WeightedRandomSampler([0.5, 2, 0, 1.5], num_samples=1, generator=
 * manual_seed(s)), epochs 0..2, as torch 1.13 (multinomial's cumulative
 * search) and torch 2.13 (argmax of w / Exp(1), 2n words an epoch) gave
 * them for seeds 0..11. */
static void one_weighted_draw_per_epoch_follows_the_torch_version(void **st)
{
	static const double w[] = {0.5, 2.0, 0.0, 1.5};
	static const uint8_t want[2][12][3] = {
	    {{3, 3, 1},
	     {0, 1, 1},
	     {3, 0, 3},
	     {0, 1, 3},
	     {1, 3, 0},
	     {3, 1, 1},
	     {1, 3, 3},
	     {1, 1, 3},
	     {3, 1, 0},
	     {1, 3, 1},
	     {3, 1, 3},
	     {1, 3, 3}},
	    {{1, 3, 3},
	     {0, 1, 3},
	     {1, 3, 1},
	     {0, 3, 3},
	     {1, 1, 0},
	     {1, 0, 3},
	     {3, 1, 3},
	     {1, 3, 3},
	     {3, 3, 1},
	     {3, 3, 3},
	     {1, 1, 3},
	     {0, 1, 1}},
	};
	static const enum bfs_torch_compat model[2] = {BFS_TORCH_1_13,
						       BFS_TORCH_2_7};

	for (int m = 0; m < 2; m++)
		for (uint64_t s = 0; s < 12; s++) {
			struct bfs_order_opts o = {
			    .sampler = BFS_SAMPLER_WEIGHTED,
			    .n = 4,
			    .batch_size = 1,
			    .seed = s,
			    .weights = w,
			    .weights_len = 4,
			    .num_samples = 1,
			    .compat = model[m],
			};
			struct bfs_order *ord = make(&o);
			uint64_t idx;

			for (uint64_t e = 0; e < 3; e++) {
				assert_int_equal(
				    bfs_order_batch(ord, ID(e, 0), &idx), 0);
				assert_int_equal(idx, want[m][s][e]);
			}
			assert_int_equal(bfs_order_torch_differs(ord), 1);
			bfs_order_destroy(ord);
		}
}

/* torch >= 2.7 randperm_cpu for n >= UINT32_MAX / 20, transcribed:
 *   for i in 0..n-1: z = random64() % (i + 1); r[i] = i; r[i] = r[z];
 *                    r[z] = i; */
static void inside_out_shuffle_matches_torchs_loop(void **state)
{
	const uint64_t n = 5000;
	int64_t *ref = calloc(n, sizeof(*ref));
	uint32_t *a32 = calloc(n, sizeof(*a32));
	uint64_t *a64 = calloc(n, sizeof(*a64));
	struct bfs_mt g, g32, g64;

	bfs_mt_seed(&g, 3);
	g32 = g64 = g;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t z = bfs_mt_random64(&g) % (i + 1);

		ref[i] = (int64_t)i;
		ref[i] = ref[z];
		ref[z] = (int64_t)i;
	}
	inside_out(a32, 1, n, &g32);
	inside_out(a64, 0, n, &g64);
	for (uint64_t i = 0; i < n; i++) {
		assert_int_equal(a32[i] ^ i, ref[i]);
		assert_int_equal(a64[i] ^ i, ref[i]);
	}
	/* 2n words, as perm_words() charges the epoch. */
	bfs_mt_skip(&g32, 0);
	assert_memory_equal(&g32, &g, sizeof(g));
	assert_int_equal(LARGE_PERM_N, UINT32_MAX / 20);
	free(ref);
	free(a32);
	free(a64);
}

static void len_and_rows_follow_drop_last(void **state)
{
	struct bfs_order_opts o = {.n = 10, .batch_size = 4};
	struct bfs_order *ord = make(&o);
	uint64_t idx[4];

	assert_int_equal(bfs_order_len(ord), 3);
	assert_int_equal(bfs_order_batch_rows(ord, 0), 4);
	assert_int_equal(bfs_order_batch_rows(ord, 2), 2);
	assert_int_equal(bfs_order_batch_rows(ord, 3), 0);
	assert_int_equal(bfs_order_batch(ord, ID(0, 2), idx), 0);
	assert_int_equal(idx[0], 8);
	assert_int_equal(idx[1], 9);
	assert_int_equal(bfs_order_batch(ord, ID(0, 3), idx), -ENOENT);
	bfs_order_destroy(ord);
	o.drop_last = true;
	o.sampler = BFS_SAMPLER_RANDOM;
	ord = make(&o);
	assert_int_equal(bfs_order_len(ord), 2);
	assert_int_equal(bfs_order_batch_rows(ord, 1), 4);
	assert_int_equal(bfs_order_batch(ord, ID(5, 2), idx), -ENOENT);
	bfs_order_destroy(ord);
	/* Distributed with fewer samples than ranks, drop_last: nothing. */
	o.sampler = BFS_SAMPLER_DISTRIBUTED;
	o.n = 3;
	o.world_size = 8;
	o.rank = 7;
	ord = make(&o);
	assert_int_equal(bfs_order_len(ord), 0);
	bfs_order_destroy(ord);
}

/* All batches of epochs [0, epochs) into out[e][k * bs + r]. */
static void all_batches(struct bfs_order *ord, uint64_t epochs, uint64_t bs,
			uint64_t *out)
{
	uint64_t per_epoch = bfs_order_len(ord) * bs;

	for (uint64_t e = 0; e < epochs; e++)
		for (uint64_t k = 0; k < bfs_order_len(ord); k++)
			assert_int_equal(
			    bfs_order_batch(ord, ID(e, k),
					    out + e * per_epoch + k * bs),
			    0);
}

static void epoch_7_batch_3_cold_equals_sequential(void **state)
{
	struct bfs_order_opts o = {
	    .sampler = BFS_SAMPLER_RANDOM,
	    .n = 5003,
	    .batch_size = 64,
	    .seed = 99,
	};
	struct bfs_order *seq = make(&o), *cold = make(&o);
	uint64_t *all = calloc(8 * bfs_order_len(seq) * 64, sizeof(*all));
	uint64_t idx[64];

	all_batches(seq, 8, 64, all);
	assert_int_equal(bfs_order_batch(cold, ID(7, 3), idx), 0);
	assert_memory_equal(idx, all + 7 * bfs_order_len(seq) * 64 + 3 * 64,
			    sizeof(idx));
	/* Going back to epoch 2 after the cache moved on still agrees. */
	for (uint64_t e = 3; e < 7; e++)
		assert_int_equal(bfs_order_batch(cold, ID(e, 0), idx), 0);
	assert_int_equal(bfs_order_batch(cold, ID(2, 5), idx), 0);
	assert_memory_equal(idx, all + 2 * bfs_order_len(seq) * 64 + 5 * 64,
			    sizeof(idx));
	free(all);
	bfs_order_destroy(seq);
	bfs_order_destroy(cold);
}

static void cold_epoch_500_equals_walking_there(void **state)
{
	/* 2 * 10^6 words per epoch: epoch 500 is reached by one jump-ahead
	 * on the cold engine, by 500 twisting skips on the walking one. */
	struct bfs_order_opts o = perm_opts(1000000, 77, 256);
	struct bfs_order *walk, *cold;
	uint64_t a[256], b[256];

	o.num_samples = 0;
	walk = make(&o);
	cold = make(&o);
	for (uint64_t e = 0; e <= 500; e++)
		assert_int_equal(bfs_order_batch(walk, ID(e, 0), a), 0);
	assert_int_equal(bfs_order_batch(cold, ID(500, 0), b), 0);
	assert_memory_equal(a, b, sizeof(a));
	assert_int_equal(bfs_order_batch(walk, ID(500, 1000), a), 0);
	assert_int_equal(bfs_order_batch(cold, ID(500, 1000), b), 0);
	assert_memory_equal(a, b, sizeof(a));
	bfs_order_destroy(walk);
	bfs_order_destroy(cold);
}

struct worker {
	struct bfs_order *ord;
	uint64_t *out;
	unsigned seed;
};

#define T_EPOCHS 6
#define T_BS	 1000

/* Walks every (epoch, batch) in a thread-specific shuffled order. */
static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint64_t len = bfs_order_len(w->ord), total = T_EPOCHS * len;
	uint64_t *jobs = malloc(total * sizeof(*jobs));

	for (uint64_t j = 0; j < total; j++)
		jobs[j] = j;
	for (uint64_t j = total - 1; j > 0; j--) {
		uint64_t z = rand_r(&w->seed) % (j + 1), t = jobs[j];

		jobs[j] = jobs[z];
		jobs[z] = t;
	}
	for (uint64_t j = 0; j < total; j++) {
		uint64_t e = jobs[j] / len, k = jobs[j] % len;

		if (bfs_order_batch(w->ord, ID(e, k),
				    w->out + (e * len + k) * T_BS))
			break;
	}
	free(jobs);
	return NULL;
}

static void four_threads_get_the_sequential_answer(void **state)
{
	struct bfs_order_opts o = perm_opts(200003, 5, T_BS);
	struct bfs_order *ref, *shared;
	struct worker w[4];
	pthread_t th[4];
	uint64_t len, *want;

	o.num_samples = 0; /* shuffle form: 2 words + tail per epoch */
	ref = make(&o);
	shared = make(&o);
	len = bfs_order_len(ref);
	want = calloc(T_EPOCHS * len * T_BS, sizeof(*want));
	all_batches(ref, T_EPOCHS, T_BS, want);
	for (int i = 0; i < 4; i++) {
		w[i].ord = shared;
		w[i].seed = (unsigned)i + 1;
		w[i].out = calloc(T_EPOCHS * len * T_BS, sizeof(uint64_t));
		pthread_create(&th[i], NULL, worker_main, &w[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		assert_memory_equal(w[i].out, want,
				    T_EPOCHS * len * T_BS * sizeof(*want));
		free(w[i].out);
	}
	free(want);
	bfs_order_destroy(ref);
	bfs_order_destroy(shared);
}

static void expect_refusal(struct bfs_order_opts *o, const char *needle)
{
	struct bfs_error err = {{0}};
	struct bfs_order *ord = NULL;

	assert_int_equal(bfs_order_create(&ord, o, &err), -EINVAL);
	assert_null(ord);
	if (!strstr(err.msg, needle))
		fail_msg("message '%s' lacks '%s'", err.msg, needle);
}

/* ---- batch identity: ids, positions, lanes and ranks ---- */

/* The position after pos to check in a lane's [first, end): every one
 * (span 0), or the first and the last 'span' ones only. */
static uint64_t next_checked(uint64_t pos, uint64_t first, uint64_t end,
			     uint64_t span)
{
	if (!span || pos + 1 < first + span || end - pos <= span + 1)
		return pos + 1;
	return end - span;
}

/* Every position of ord round-trips to its id and back, the id's lane is
 * the lane whose range holds it, positions are lane-major (the next
 * position is the next batch of the lane, across epochs, until the lane
 * ends), epoch serials number the lanes' epochs the same way, and ids
 * and positions one past each edge name nothing. 'all': walk every
 * position (else the first and last two epochs of each lane only). */
static void expect_identity(const struct bfs_order *ord, bool all)
{
	uint64_t len = bfs_order_len(ord), epochs = bfs_order_epochs(ord);
	size_t lanes = bfs_order_lanes(ord);
	uint64_t n = bfs_order_positions(ord);
	struct bfs_batch_loc at;
	struct bfs_batch_id id;

	assert_int_equal(n, lanes * epochs * len);
	assert_true(n < UINT64_MAX);
	for (size_t l = 0; l < lanes; l++) {
		uint64_t first = l ? bfs_order_lane_end(ord, l - 1) : 0;
		uint64_t end = bfs_order_lane_end(ord, l);

		assert_int_equal(end - first, epochs * len);
		for (uint64_t pos = first; pos < end;
		     pos = next_checked(pos, first, end, all ? 0 : 2 * len)) {
			id = bfs_order_id(ord, pos);
			assert_int_equal(id.lane, l);
			assert_int_equal(bfs_order_lane_of(ord, pos), l);
			assert_true(bfs_order_has(ord, id));
			assert_int_equal(bfs_order_pos(ord, id), pos);
			assert_int_equal(bfs_order_locate(ord, id, &at), 0);
			assert_int_equal(at.pos, pos);
			assert_int_equal(at.rows,
					 bfs_order_batch_rows(ord, id.batch));
			assert_int_equal(bfs_order_locate_pos(ord, pos, &at),
					 0);
			assert_memory_equal(&at.id, &id, sizeof(id));
			assert_int_equal(bfs_order_epoch_serial(ord, id),
					 l * epochs + id.epoch);
			if (pos + 1 < end) { /* the next batch of the lane */
				struct bfs_batch_id next =
				    bfs_order_id(ord, pos + 1);

				assert_int_equal(next.lane, l);
				assert_int_equal(next.epoch * len + next.batch,
						 id.epoch * len + id.batch + 1);
			}
		}
		assert_int_equal(bfs_order_epoch_of_serial(
				     ord, l * epochs + epochs - 1, &id),
				 0);
		assert_int_equal(id.lane, l);
		assert_int_equal(id.epoch, epochs - 1);
		assert_int_equal(id.batch, 0);
		/* one past each edge of the lane's id */
		id = (struct bfs_batch_id){.lane = l, .epoch = epochs};
		assert_false(bfs_order_has(ord, id));
		assert_int_equal(bfs_order_pos(ord, id), UINT64_MAX);
		assert_int_equal(bfs_order_locate(ord, id, &at), -ENOENT);
		id = (struct bfs_batch_id){.lane = l, .batch = len};
		assert_int_equal(bfs_order_locate(ord, id, &at), -ENOENT);
		assert_int_equal(bfs_order_batch((struct bfs_order *)ord, id,
						 (uint64_t[1]){0}),
				 -ENOENT);
	}
	id = (struct bfs_batch_id){.lane = lanes};
	assert_int_equal(bfs_order_locate(ord, id, &at), -ENOENT);
	assert_int_equal(bfs_order_locate_pos(ord, n, &at), -ENOENT);
	assert_false(bfs_order_has(ord, bfs_order_id(ord, n)));
	assert_int_equal(bfs_order_epoch_of_serial(ord, lanes * epochs, &id),
			 -ENOENT);
	assert_int_equal(bfs_order_lane_end(ord, lanes - 1), n);
}

static void ids_and_positions_round_trip_on_one_and_many_lanes(void **state)
{
	static const uint32_t ranks[] = {1, 3, 4};
	struct bfs_order_opts one = {.n = 10, .batch_size = 4, .epochs = 3};
	struct bfs_order_opts many = {.sampler = BFS_SAMPLER_DISTRIBUTED,
				      .n = 23,
				      .batch_size = 2,
				      .world_size = 5,
				      .shuffle = true,
				      .seed = 3,
				      .ranks = ranks,
				      .nranks = 3,
				      .epochs = 4};
	struct bfs_order *ord = make(&one);

	assert_int_equal(bfs_order_epochs(ord), 3);
	assert_int_equal(bfs_order_positions(ord), 9);
	assert_false(bfs_order_ranked(ord));
	expect_identity(ord, true);
	/* pos = (lane x epochs + epoch) x len + batch */
	assert_int_equal(bfs_order_pos(ord, ID(2, 1)), 7);
	bfs_order_destroy(ord);

	ord = make(&many);
	assert_int_equal(bfs_order_len(ord), 3); /* 5 samples per rank */
	assert_int_equal(bfs_order_positions(ord), 3 * 4 * 3);
	expect_identity(ord, true);
	assert_int_equal(bfs_order_pos(ord, (struct bfs_batch_id){2, 1, 2}),
			 (2 * 4 + 1) * 3 + 2);
	assert_int_equal(bfs_order_lane_end(ord, 0), 12);
	bfs_order_destroy(ord);

	/* no epochs given, one lane: as many as positions number */
	one.epochs = 0;
	ord = make(&one);
	assert_int_equal(bfs_order_epochs(ord), (UINT64_MAX - 1) / 3);
	expect_identity(ord, false);
	bfs_order_destroy(ord);

	/* a single rank served through --ranks is a lane too */
	many.nranks = 1;
	many.ranks = ranks + 1;
	ord = make(&many);
	assert_true(bfs_order_ranked(ord));
	expect_identity(ord, true);
	bfs_order_destroy(ord);
}

/* Lane l serves the l-th rank given (in increasing order); a rank not
 * served has no lane; messages name the rank, not the lane. */
static void lanes_map_to_ranks_and_back(void **state)
{
	static const uint32_t ranks[] = {1, 3, 4};
	struct bfs_order_opts o = {.sampler = BFS_SAMPLER_DISTRIBUTED,
				   .n = 20,
				   .batch_size = 2,
				   .world_size = 5,
				   .ranks = ranks,
				   .nranks = 3,
				   .epochs = 4};
	struct bfs_order *ord = make(&o);
	char name[64];
	size_t lane = 99;

	assert_int_equal(bfs_order_lanes(ord), 3);
	for (size_t l = 0; l < 3; l++) {
		assert_int_equal(bfs_order_rank_of_lane(ord, l), ranks[l]);
		assert_int_equal(bfs_order_lane_of_rank(ord, ranks[l], &lane),
				 0);
		assert_int_equal(lane, l);
	}
	for (uint64_t r = 0; r < 8; r++)
		if (r != 1 && r != 3 && r != 4)
			assert_int_equal(bfs_order_lane_of_rank(ord, r, &lane),
					 -ENOENT);
	bfs_order_batch_name(ord, (struct bfs_batch_id){1, 2, 0}, name,
			     sizeof(name));
	assert_string_equal(name, "rank 3 epoch 2 batch 0");
	bfs_order_destroy(ord);
	o.nranks = 0; /* one rank: lane 0 serves opts.rank */
	o.rank = 2;
	ord = make(&o);
	assert_int_equal(bfs_order_rank_of_lane(ord, 0), 2);
	assert_int_equal(bfs_order_lane_of_rank(ord, 2, &lane), 0);
	assert_int_equal(lane, 0);
	assert_int_equal(bfs_order_lane_of_rank(ord, 1, &lane), -ENOENT);
	bfs_order_batch_name(ord, ID(2, 0), name, sizeof(name));
	assert_string_equal(name, "epoch 2 batch 0");
	bfs_order_destroy(ord);
}

/* Epoch e of lane l of a multi-rank engine is epoch e of its rank: the
 * same samples, batch for batch, as a one-rank engine of that rank (what
 * a --rank R mount serves), for shuffled and sequential orders, with and
 * without drop_last, over several epochs. */
static void a_lanes_epochs_are_its_ranks_epochs(void **state)
{
	static const uint32_t ranks[] = {0, 2, 3};
	for (int v = 0; v < 4; v++) {
		struct bfs_order_opts o = {.sampler = BFS_SAMPLER_DISTRIBUTED,
					   .n = 29,
					   .batch_size = 3,
					   .world_size = 4,
					   .shuffle = v & 1,
					   .drop_last = v & 2,
					   .seed = 17,
					   .ranks = ranks,
					   .nranks = 3,
					   .epochs = 6};
		struct bfs_order *many = make(&o);

		for (size_t l = 0; l < 3; l++) {
			struct bfs_order_opts r = o;
			struct bfs_order *one;

			r.nranks = 0;
			r.ranks = NULL;
			r.rank = ranks[l];
			one = make(&r);
			assert_int_equal(bfs_order_len(one),
					 bfs_order_len(many));
			for (uint64_t e = 0; e < 6; e++)
				for (uint64_t k = 0; k < bfs_order_len(one);
				     k++) {
					uint64_t a[3], b[3];
					struct bfs_batch_id id = {l, e, k};

					assert_int_equal(
					    bfs_order_batch(many, id, a), 0);
					assert_int_equal(
					    bfs_order_batch(one, ID(e, k), b),
					    0);
					assert_memory_equal(
					    a, b,
					    bfs_order_batch_rows(one, k) *
						sizeof(*a));
				}
			bfs_order_destroy(one);
		}
		bfs_order_destroy(many);
	}
}

/* Several ranks need their epochs, given in increasing order, and no more
 * epochs than 64-bit positions number. */
static void ranks_and_epochs_are_checked(void **state)
{
	static const uint32_t up[] = {0, 2}, down[] = {2, 0}, twice[] = {1, 1};
	struct bfs_order_opts o = {.sampler = BFS_SAMPLER_DISTRIBUTED,
				   .n = 20,
				   .batch_size = 2,
				   .world_size = 4,
				   .ranks = up,
				   .nranks = 2};
	struct bfs_order *ord;

	expect_refusal(&o, "2 ranks need their epochs");
	o.epochs = 3;
	o.ranks = down;
	expect_refusal(&o, "rank 0 after a rank no smaller");
	o.ranks = twice;
	expect_refusal(&o, "rank 1 after a rank no smaller");
	o.ranks = up;
	o.epochs = UINT64_MAX / 4; /* x 2 lanes x 5 batches: too many */
	expect_refusal(&o, "more batches than 64-bit positions number");
	o.epochs = (UINT64_MAX - 1) / 10; /* the most that fit */
	ord = make(&o);
	expect_identity(ord, false);
	bfs_order_destroy(ord);
}

static void bad_options_are_refused_like_pytorch(void **state)
{
	int64_t sub[] = {0, 5, 10};
	double w[4] = {1, 2, NAN, 1}, zero[4] = {0};
	uint8_t blob[10] = {0};
	struct bfs_order_opts o = {.n = 10, .batch_size = 0};

	expect_refusal(&o, "batch_size should be a positive integer");
	o.batch_size = 2;
	o.sampler = BFS_SAMPLER_DISTRIBUTED;
	o.world_size = 4;
	o.rank = 4;
	expect_refusal(&o, "Invalid rank 4, rank should be in the interval "
			   "[0, 3]");
	o.sampler = BFS_SAMPLER_SUBSET;
	o.subset = sub;
	o.subset_len = 3;
	expect_refusal(&o, "index 10 at position 2 is outside the dataset");
	o.sampler = BFS_SAMPLER_WEIGHTED;
	o.n = 4;
	o.weights = w;
	o.weights_len = 4;
	expect_refusal(&o, "needs num_samples >= 1");
	o.num_samples = 3;
	expect_refusal(&o, "weight 2 is nan");
	w[2] = -1;
	expect_refusal(&o, "weight 2 is -1");
	o.weights = zero;
	expect_refusal(&o, "sum of probabilities <= 0");
	o.weights = w;
	w[2] = 1;
	o.weights_len = 3;
	expect_refusal(&o, "3 weights for a dataset of 4 samples");
	o.weights_len = 4;
	o.sampler = BFS_SAMPLER_RANDOM;
	o.n = 0;
	expect_refusal(&o, "num_samples should be a positive integer");
	o.n = 4;
	o.generator_state = blob;
	o.generator_state_len = sizeof(blob);
	expect_refusal(&o, "generator state is 10 bytes");
	o.sampler = BFS_SAMPLER_DISTRIBUTED;
	o.rank = 0;
	expect_refusal(&o, "a generator state has no use");
}

static void weights_beyond_2_pow_24_are_refused(void **state)
{
	size_t n = (1u << 24) + 1;
	double *w = calloc(n, sizeof(*w));
	struct bfs_order_opts o = {
	    .sampler = BFS_SAMPLER_WEIGHTED,
	    .n = n,
	    .batch_size = 1,
	    .num_samples = 5,
	    .weights = w,
	    .weights_len = n,
	};

	w[0] = 1;
	expect_refusal(&o, "number of categories cannot exceed 2^24");
	free(w);
}

static void describe_writes_the_pytorch_call(void **state)
{
	struct bfs_order_opts o = {
	    .sampler = BFS_SAMPLER_RANDOM,
	    .n = 100,
	    .batch_size = 256,
	    .seed = 7,
	};
	struct bfs_order *ord = make(&o);
	char buf[512];

	bfs_order_describe(ord, buf, sizeof(buf));
	assert_string_equal(buf, "DataLoader(ds, batch_size=256, shuffle=True, "
				 "drop_last=False, generator=torch.Generator()."
				 "manual_seed(7))");
	bfs_order_destroy(ord);
	o.replacement = true;
	o.num_samples = 30;
	o.drop_last = true;
	ord = make(&o);
	bfs_order_describe(ord, buf, sizeof(buf));
	assert_string_equal(buf,
			    "DataLoader(ds, batch_size=256, drop_last=True, "
			    "sampler=RandomSampler(ds, replacement=True, "
			    "num_samples=30, generator=torch.Generator()."
			    "manual_seed(7)))");
	/* Truncation reports the full length, like snprintf. */
	assert_int_equal(bfs_order_describe(ord, buf, 8), strlen(buf));
	assert_string_equal(buf, "DataLoa");
	bfs_order_destroy(ord);
}

/* The input files' directory (a test's *state). */
static int files_setup(void **state)
{
	static struct tf_fixture fx;

	*state = &fx;
	return tf_setup(&fx, NULL);
}

static int files_teardown(void **state)
{
	return tf_teardown(*state);
}

/* [data, data+len) as file 'name' in fixture fx's directory. */
static char *write_file(const struct tf_fixture *fx, const char *name,
			const void *data, size_t len)
{
	static char path[400];
	FILE *f;

	assert_non_null(tf_path(fx, name, path, sizeof(path)));
	f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, len, f), len);
	fclose(f);
	return path;
}

static void input_files_load_text_npy_and_state(void **state)
{
	static const char npy_hdr[] =
	    "\x93NUMPY\x01\x00\x76\x00{'descr': '<i4', 'fortran_order': "
	    "False, 'shape': (3,), }";
	char npy[128 + 12] = {0}, *path;
	int32_t vals[3] = {7, -1, 300000};
	struct bfs_error err = {{0}};
	int64_t *idx;
	double *w;
	uint8_t *st;
	size_t n;

	path = write_file(*state, "i.txt", "3\n  14 \n\n15\n", 12);
	assert_int_equal(bfs_order_load_indices(path, &idx, &n, &err), 0);
	assert_int_equal(n, 3);
	assert_int_equal(idx[2], 15);
	free(idx);
	path = write_file(*state, "bad.txt", "3\n1x\n", 5);
	assert_int_equal(bfs_order_load_indices(path, &idx, &n, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "bad.txt: line 2: '1x' is not an "
					"integer"));
	memset(&err, 0, sizeof(err));
	memset(npy, ' ', 128);
	memcpy(npy, npy_hdr, sizeof(npy_hdr) - 1);
	npy[127] = '\n';
	memcpy(npy + 128, vals, sizeof(vals));
	path = write_file(*state, "i.npy", npy, 128 + sizeof(vals));
	assert_int_equal(bfs_order_load_indices(path, &idx, &n, &err), 0);
	assert_int_equal(n, 3);
	assert_int_equal(idx[0], 7);
	assert_int_equal(idx[1], -1);
	assert_int_equal(idx[2], 300000);
	free(idx);
	assert_int_equal(bfs_order_load_weights(path, &w, &n, &err), -EINVAL);
	assert_non_null(strstr(err.msg, ".npy holds integers, expected "
					"floats"));
	memset(&err, 0, sizeof(err));
	path = write_file(*state, "short.npy", npy, 128 + 4);
	assert_int_equal(bfs_order_load_indices(path, &idx, &n, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "short.npy"));
	path = write_file(*state, "w.txt", "0.5\n1e-3\n", 9);
	assert_int_equal(bfs_order_load_weights(path, &w, &n, &err), 0);
	assert_int_equal(n, 2);
	assert_true(w[1] == 1e-3);
	free(w);
	memset(&err, 0, sizeof(err));
	path =
	    write_file(*state, "s.bin", "abc", 3); /* a state has 5056 bytes */
	assert_int_equal(bfs_order_load_state(path, &st, &n, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "s.bin: 3 bytes; a generator state "
					"is the 5056 bytes of"));
	memset(&err, 0, sizeof(err));
	{
		char blob[5057];

		memset(blob, 'x', sizeof(blob));
		path = write_file(*state, "s.bin", blob, 5056);
		assert_int_equal(bfs_order_load_state(path, &st, &n, &err), 0);
		assert_int_equal(n, 5056);
		assert_memory_equal(st, blob, 5056);
		free(st);
		path = write_file(*state, "s.bin", blob, 5057);
		assert_int_equal(bfs_order_load_state(path, &st, &n, &err),
				 -EFBIG);
		assert_non_null(strstr(err.msg, "s.bin: 5057 bytes; "));
	}
	memset(&err, 0, sizeof(err));
	assert_int_equal(bfs_order_load_state("/nonexistent/x", &st, &n, &err),
			 -ENOENT);
	assert_non_null(strstr(err.msg, "/nonexistent/x: cannot open"));
}

/* Options that change nothing in the order are named, one line each,
 * and options that matter are not. */
static void options_that_change_nothing_are_named(void **state)
{
	static const struct {
		struct bfs_order_request r;
		const char *first; /* the start of the first line, or NULL */
		size_t n;
	} cases[] = {
	    {{.have_seed = true},
	     "--seed: no effect: the order is sequential",
	     1},
	    {{.have_seed = true, .distributed = true},
	     "--seed: no effect: DistributedSampler without --shuffle",
	     1},
	    {{.have_seed = true, .shuffle = true, .generator_state = true},
	     "--seed: no effect: the generator starts from the "
	     "--generator-state file",
	     1},
	    {{.shuffle = true, .subset = true}, "--shuffle: no effect", 1},
	    {{.replacement = true, .weights = true},
	     "--replacement: no effect",
	     1},
	    {{.have_compat = true, .have_seed = true}, "--seed", 2},
	    {{.have_seed = true, .shuffle = true}, NULL, 0},
	    {{.have_seed = true, .shuffle = true, .distributed = true},
	     NULL,
	     0},
	    {{.have_compat = true, .replacement = true}, NULL, 0},
	    /* persistent workers change only an order drawn from the
	     * generator the base seed comes from */
	    {{.persistent_workers = true},
	     "--persistent-workers: no effect: this DataLoader draws its "
	     "base seed from torch's global generator",
	     1},
	    {{.persistent_workers = true, .shuffle = true, .num_samples = 5},
	     "--persistent-workers: no effect",
	     1},
	    {{.persistent_workers = true, .distributed = true, .shuffle = true},
	     "--persistent-workers: no effect",
	     1},
	    {{.persistent_workers = true, .shuffle = true}, NULL, 0},
	    {{.persistent_workers = true,
	      .shuffle = true,
	      .num_samples = 5,
	      .global_generator = true},
	     NULL,
	     0},
	};
	const char *msgs[8];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t n = bfs_order_request_unused(&cases[i].r, msgs, 8);

		assert_int_equal(n, cases[i].n);
		if (n)
			assert_true(!strncmp(msgs[0], cases[i].first,
					     strlen(cases[i].first)));
	}
	assert_int_equal(bfs_order_request_unused(&cases[5].r, msgs, 1), 1);
}

/* The sampler and the seed's source follow PyTorch's rules: one sampler
 * (subset, then weights, then distributed, then any random option); a
 * random sampler without a seed draws one; DistributedSampler's default
 * seed is 0; nothing random, no seed used. */
static void the_sampler_and_seed_source_follow_torchs_rules(void **state)
{
	const struct {
		struct bfs_order_request r;
		enum bfs_sampler s;
		const char *source;
	} cases[] = {
	    {{0}, BFS_SAMPLER_SEQUENTIAL, "unused"},
	    {{.have_seed = true}, BFS_SAMPLER_SEQUENTIAL, "unused"},
	    {{.shuffle = true}, BFS_SAMPLER_RANDOM, "getrandom"},
	    {{.shuffle = true, .have_seed = true},
	     BFS_SAMPLER_RANDOM,
	     "--seed"},
	    {{.replacement = true}, BFS_SAMPLER_RANDOM, "getrandom"},
	    {{.shuffle = true, .generator_state = true},
	     BFS_SAMPLER_RANDOM,
	     "--generator-state"},
	    {{.shuffle = true, .global_generator = true},
	     BFS_SAMPLER_RANDOM,
	     "--rng-state"},
	    {{.subset = true, .weights = true},
	     BFS_SAMPLER_SUBSET,
	     "getrandom"},
	    {{.weights = true, .distributed = true},
	     BFS_SAMPLER_WEIGHTED,
	     "getrandom"},
	    {{.distributed = true}, BFS_SAMPLER_DISTRIBUTED, "unused"},
	    {{.distributed = true, .shuffle = true},
	     BFS_SAMPLER_DISTRIBUTED,
	     "default"},
	    {{.distributed = true, .shuffle = true, .have_seed = true},
	     BFS_SAMPLER_DISTRIBUTED,
	     "--seed"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(bfs_order_sampler_for(&cases[i].r),
				 cases[i].s);
		assert_string_equal(bfs_order_seed_source(&cases[i].r),
				    cases[i].source);
	}
	assert_string_equal(bfs_order_sampler_name(BFS_SAMPLER_WEIGHTED),
			    "weighted_random");
}

/* --num-samples says which sampler draws only with --shuffle or
 * --weights; SubsetRandomSampler and DistributedSampler have none; a
 * subset and weights are two samplers. Nothing falls back silently to a
 * random order. */
static void num_samples_alone_is_a_usage_error(void **state)
{
	const struct {
		struct bfs_order_request r;
		const char *needle; /* NULL: accepted */
	} cases[] = {
	    {{.num_samples = 5}, "--num-samples: needs --shuffle"},
	    {{.num_samples = 5, .replacement = true},
	     "--num-samples: needs --shuffle"},
	    {{.num_samples = 5, .subset = true},
	     "--num-samples: SubsetRandomSampler"},
	    {{.num_samples = 5, .distributed = true, .shuffle = true},
	     "--num-samples: DistributedSampler"},
	    {{.subset = true, .weights = true}, "--weights: cannot be"},
	    {{.num_samples = 5, .shuffle = true}, NULL},
	    {{.num_samples = 5, .weights = true}, NULL},
	    {{.shuffle = true}, NULL},
	    {{0}, NULL},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct bfs_error err = {{0}};
		int rc = bfs_order_request_check(&cases[i].r, &err);

		if (!cases[i].needle) {
			assert_int_equal(rc, 0);
			continue;
		}
		assert_int_equal(rc, -EINVAL);
		if (strncmp(err.msg, cases[i].needle, strlen(cases[i].needle)))
			fail_msg("case %zu: '%s' does not start with '%s'", i,
				 err.msg, cases[i].needle);
	}
}

/* --sampler-drop-last is DistributedSampler's drop_last: without a
 * world size there is no such sampler, and the refusal names
 * DataLoader's (--drop-last). */
static void the_samplers_drop_last_needs_a_world_size(void **state)
{
	struct bfs_order_request r = {.sampler_drop_last = true,
				      .shuffle = true};
	struct bfs_error err = {{0}};

	(void)state;
	assert_int_equal(bfs_order_request_check(&r, &err), -EINVAL);
	assert_string_equal(err.msg,
			    "--sampler-drop-last: DistributedSampler's "
			    "drop_last: needs --world-size (DataLoader's is "
			    "--drop-last)");
	r.distributed = true;
	assert_int_equal(bfs_order_request_check(&r, &err), 0);
}

/* An epoch with no batch is refused with the reason: an empty dataset,
 * or --drop-last with fewer samples than a batch (per rank). */
static void zero_batches_per_epoch_are_refused_with_the_reason(void **state)
{
	const struct {
		struct bfs_order_opts o;
		const char *needle; /* NULL: has batches */
	} cases[] = {
	    {{.n = 0, .batch_size = 4}, "0 samples in the dataset"},
	    {{.n = 3, .batch_size = 4, .drop_last = true},
	     "--drop-last drops the only, incomplete batch of 3 samples per "
	     "epoch (--batch-size 4): use a --batch-size of at most 3"},
	    {{.n = 3,
	      .batch_size = 1,
	      .drop_last = true,
	      .sampler_drop_last = true,
	      .sampler = BFS_SAMPLER_DISTRIBUTED,
	      .world_size = 8,
	      .rank = 7},
	     "0 per epoch (rank 7 of 8)"},
	    {{.n = 7,
	      .batch_size = 4,
	      .drop_last = true,
	      .sampler_drop_last = true,
	      .sampler = BFS_SAMPLER_DISTRIBUTED,
	      .world_size = 2},
	     "batch of 3 samples per epoch (rank 0 of 2) (--batch-size 4)"},
	    /* DDP's usual pair: the sampler pads 7 to 8, 4 per rank */
	    {{.n = 7,
	      .batch_size = 4,
	      .drop_last = true,
	      .sampler = BFS_SAMPLER_DISTRIBUTED,
	      .world_size = 2},
	     NULL},
	    {{.n = 3, .batch_size = 4}, NULL},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct bfs_error err = {{0}};
		struct bfs_order *ord = make(&cases[i].o);
		int rc = bfs_order_check_len(ord, "d.pt", &err);

		if (!cases[i].needle) {
			assert_int_equal(rc, 0);
		} else {
			assert_int_equal(rc, -EINVAL);
			assert_int_equal(
			    strncmp(err.msg, "d.pt: 0 batches", 15), 0);
			if (!strstr(err.msg, cases[i].needle))
				fail_msg("case %zu: '%s' lacks '%s'", i,
					 err.msg, cases[i].needle);
		}
		bfs_order_destroy(ord);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(randperm_of_ten_matches_torch),
	    cmocka_unit_test(randperm_of_1e8_hashes_like_torch),
	    cmocka_unit_test(
		one_weighted_draw_per_epoch_follows_the_torch_version),
	    cmocka_unit_test(inside_out_shuffle_matches_torchs_loop),
	    cmocka_unit_test(len_and_rows_follow_drop_last),
	    cmocka_unit_test(epoch_7_batch_3_cold_equals_sequential),
	    cmocka_unit_test(cold_epoch_500_equals_walking_there),
	    cmocka_unit_test(four_threads_get_the_sequential_answer),
	    cmocka_unit_test(bad_options_are_refused_like_pytorch),
	    cmocka_unit_test(weights_beyond_2_pow_24_are_refused),
	    cmocka_unit_test(describe_writes_the_pytorch_call),
	    cmocka_unit_test(the_sampler_and_seed_source_follow_torchs_rules),
	    cmocka_unit_test(options_that_change_nothing_are_named),
	    cmocka_unit_test_setup_teardown(input_files_load_text_npy_and_state,
					    files_setup, files_teardown),
	    cmocka_unit_test(num_samples_alone_is_a_usage_error),
	    cmocka_unit_test(the_samplers_drop_last_needs_a_world_size),
	    cmocka_unit_test(
		ids_and_positions_round_trip_on_one_and_many_lanes),
	    cmocka_unit_test(lanes_map_to_ranks_and_back),
	    cmocka_unit_test(a_lanes_epochs_are_its_ranks_epochs),
	    cmocka_unit_test(ranks_and_epochs_are_checked),
	    cmocka_unit_test(
		zero_batches_per_epoch_are_refused_with_the_reason),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
