/* fs/mt19937 draws the same words as torch's CPU generator.
 *
 * Expected values come from torch 1.13.1 (/usr/bin/python3), by:
 *   import torch
 *   def r(g): return torch.empty((),
 * dtype=torch.int64).random_(generator=g).item() for s in [0, 1, 42, 2**32+42,
 * 2**64-1]: g = torch.Generator().manual_seed(s); print(s, [r(g) for _ in
 * range(3)]) g = torch.Generator(); print([r(g) for _ in range(2)])      #
 * default seed g = torch.Generator().manual_seed(5); torch.randperm(1000,
 * generator=g) print(r(g))                                  # after 999 words
 *   g = torch.Generator().manual_seed(42); torch.randperm(701, generator=g)
 *   h = 0xcbf29ce484222325                       # FNV-1a 64 of get_state()
 *   for x in g.get_state().numpy().tobytes(): h = ((h ^ x) * 0x100000001b3) %
 * 2**64 random_() on int64 is random64() & INT64_MAX (2 words). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <string.h>

#include "fs/mt19937.h"

static uint64_t random_int64(struct bfs_mt *mt)
{
	return bfs_mt_random64(mt) & INT64_MAX;
}

static void seeds_give_torchs_first_words(void **state)
{
	static const struct {
		uint64_t seed, w[3];
	} k[] = {
	    {0,
	     {900450186894289455ull, 3969543146641149120ull,
	      1895649597198586619ull}},
	    {1,
	     {7692698082559361259ull, 4064269471072392264ull,
	      2109959069025161ull}},
	    {42,
	     {6909045637428952499ull, 8314211556539077902ull,
	      4279532810384561223ull}},
	    /* manual_seed keeps only the low 32 bits: same as 42. */
	    {(1ull << 32) + 42,
	     {6909045637428952499ull, 8314211556539077902ull,
	      4279532810384561223ull}},
	    {UINT64_MAX,
	     {1800993050274709794ull, 7607120784305990727ull,
	      5331760257347419712ull}},
	};
	struct bfs_mt mt;

	for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++) {
		bfs_mt_seed(&mt, k[i].seed);
		assert_int_equal(mt.seed, k[i].seed);
		for (int j = 0; j < 3; j++)
			assert_int_equal(random_int64(&mt), k[i].w[j]);
	}
}

static void fresh_generator_default_seed_matches_torch(void **state)
{
	struct bfs_mt mt;

	bfs_mt_seed(&mt, 67280421310721ull); /* default_rng_seed_val */
	assert_int_equal(random_int64(&mt), 883951781600517636ull);
	assert_int_equal(random_int64(&mt), 8022553047373130764ull);
}

static void skip_equals_drawing_and_torch(void **state)
{
	struct bfs_mt a, b;
	uint64_t counts[] = {0, 1, 622, 623, 624, 625, 999, 1247, 1248, 5000};

	bfs_mt_seed(&a, 5);
	bfs_mt_skip(&a, 999); /* randperm(1000) */
	assert_int_equal(random_int64(&a), 4942324445916526122ull);
	for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
		bfs_mt_seed(&a, 11);
		bfs_mt_seed(&b, 11);
		bfs_mt_random(&a); /* start mid-block as well */
		bfs_mt_random(&b);
		bfs_mt_skip(&a, counts[i]);
		for (uint64_t w = 0; w < counts[i]; w++)
			bfs_mt_random(&b);
		assert_int_equal(a.left, b.left);
		assert_int_equal(a.next, b.next);
		assert_memory_equal(a.state, b.state, sizeof(a.state));
		assert_int_equal(bfs_mt_random(&a), bfs_mt_random(&b));
	}
}

static void jump_ahead_equals_twisting_through(void **state)
{
	static const uint64_t J[] = {
	    0,	     1,	       623,	   624,	      625,	  19937,
	    1000003, 12345678, 1ull << 26, 200000017, 1ull << 28,
	};

	for (size_t i = 0; i < sizeof(J) / sizeof(J[0]); i++) {
		struct bfs_mt a, b;
		uint64_t left = J[i];

		bfs_mt_seed(&a, 42 + i);
		for (size_t k = 0; k < 1 + 37 * i; k++)
			bfs_mt_random(&a); /* any position in a block */
		b = a;
		assert_int_equal(bfs_mt_jump(&a, J[i]), 0);
		while (left) { /* reference: twists only */
			uint64_t step = left < 1000000 ? left : 1000000;

			bfs_mt_skip(&b, step);
			left -= step;
		}
		for (int k = 0; k < 3000; k++)
			assert_int_equal(bfs_mt_random(&a), bfs_mt_random(&b));
	}
}

static void exported_state_imports_to_the_same_stream(void **state)
{
	struct bfs_mt a, b;
	uint8_t blob[BFS_MT_STATE_BYTES], again[BFS_MT_STATE_BYTES];
	struct bfs_error err = {{0}};

	bfs_mt_seed(&a, 42);
	bfs_mt_skip(&a, 700);
	bfs_mt_export(&a, blob);
	assert_int_equal(bfs_mt_import(&b, blob, sizeof(blob), "x", &err), 0);
	bfs_mt_export(&b, again);
	assert_memory_equal(blob, again, sizeof(blob));
	assert_int_equal(b.seed, 42);
	for (int i = 0; i < 2000; i++)
		assert_int_equal(bfs_mt_random(&a), bfs_mt_random(&b));
	/* The legacy 5048-byte layout is accepted too. */
	assert_int_equal(
	    bfs_mt_import(&b, blob, BFS_MT_STATE_LEGACY_BYTES, "x", &err), 0);
}

static void export_is_byte_identical_to_torch_get_state(void **state)
{
	struct bfs_mt mt;
	uint8_t blob[BFS_MT_STATE_BYTES];
	uint64_t h = 0xcbf29ce484222325ull;

	bfs_mt_seed(&mt, 42);
	bfs_mt_skip(&mt, 700);
	bfs_mt_export(&mt, blob);
	for (size_t i = 0; i < sizeof(blob); i++)
		h = (h ^ blob[i]) * 0x100000001b3ull;
	assert_int_equal(h, 0x2708a9269c1d3272ull);
}

static void invalid_states_are_refused_with_the_reason(void **state)
{
	struct bfs_mt a, b;
	uint8_t blob[BFS_MT_STATE_BYTES];
	struct bfs_error err = {{0}};

	bfs_mt_seed(&a, 1);
	bfs_mt_export(&a, blob);
	assert_int_equal(bfs_mt_import(&b, blob, 100, "st.bin", &err), -EINVAL);
	assert_non_null(strstr(err.msg, "st.bin: generator state is 100 "
					"bytes"));
	memset(&err, 0, sizeof(err));
	blob[8] = 0; /* left = 0 */
	assert_int_equal(bfs_mt_import(&b, blob, sizeof(blob), "st.bin", &err),
			 -EINVAL);
	assert_non_null(strstr(err.msg, "offset 8: 'left' is 0"));
	memset(&err, 0, sizeof(err));
	bfs_mt_export(&a, blob);
	blob[12] = 0; /* seeded = 0 */
	assert_int_equal(bfs_mt_import(&b, blob, sizeof(blob), "st.bin", &err),
			 -EINVAL);
	assert_non_null(strstr(err.msg, "not seeded"));
	memset(&err, 0, sizeof(err));
	bfs_mt_export(&a, blob);
	blob[8] = 100; /* left 100 with next 600: reads past the state */
	blob[16] = 600 & 0xff;
	blob[17] = 600 >> 8;
	assert_int_equal(bfs_mt_import(&b, blob, sizeof(blob), "st.bin", &err),
			 -EINVAL);
	assert_non_null(strstr(err.msg, "offset 16"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(seeds_give_torchs_first_words),
	    cmocka_unit_test(fresh_generator_default_seed_matches_torch),
	    cmocka_unit_test(skip_equals_drawing_and_torch),
	    cmocka_unit_test(jump_ahead_equals_twisting_through),
	    cmocka_unit_test(exported_state_imports_to_the_same_stream),
	    cmocka_unit_test(export_is_byte_identical_to_torch_get_state),
	    cmocka_unit_test(invalid_states_are_refused_with_the_reason),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
