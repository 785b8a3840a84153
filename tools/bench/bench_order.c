/* bench_order: timings of fs/order for tools/bench/bench_order.sh.
 *
 *   bench_order perm N SEED      build epoch 0's whole permutation of
 *                                DataLoader(shuffle=True) over N samples;
 *                                prints "perm_s SECONDS fnv HASH", HASH =
 *                                FNV-1a 64 over the permutation's values
 *                                as little-endian uint32 (N < 2^32)
 *   bench_order first N SEED E   time to batch 0 of epoch E (B = 256) on a
 *                                fresh engine (generator skip included),
 *                                then again once epoch E's generator state
 *                                is cached but its permutation is not
 *   bench_order hash FILE        FNV-1a 64 of FILE's bytes (for torch's
 *                                permutation written as '<u4')
 *
 * The permutation is taken in batches of 2^20 (the engine fills as far as
 * the batch asked for). Not a test: it asserts nothing. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fs/order.h"

#define PERM_BATCH (1u << 20)

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static struct bfs_order *make(uint64_t n, uint64_t seed, uint64_t bs)
{
	struct bfs_order_opts o = {
	    .sampler = BFS_SAMPLER_RANDOM,
	    .n = n,
	    .batch_size = bs,
	    .seed = seed,
	    .compat = BFS_TORCH_1_13,
	};
	struct bfs_error err = {{0}};
	struct bfs_order *ord;

	if (bfs_order_create(&ord, &o, &err)) {
		fprintf(stderr, "bench_order: %s\n", err.msg);
		exit(1);
	}
	return ord;
}

static int perm(uint64_t n, uint64_t seed)
{
	struct bfs_order *ord = make(n, seed, PERM_BATCH);
	uint64_t *idx = malloc(PERM_BATCH * sizeof(*idx));
	uint64_t h = 0xcbf29ce484222325ull;
	double t0, t;

	if (!idx)
		return 1;
	/* The last batch forces the whole permutation. */
	t0 = now();
	bfs_order_batch(
	    ord, (struct bfs_batch_id){.batch = bfs_order_len(ord) - 1}, idx);
	t = now() - t0;
	for (uint64_t k = 0; k < bfs_order_len(ord); k++) {
		uint64_t rows = bfs_order_batch_rows(ord, k);

		bfs_order_batch(ord, (struct bfs_batch_id){.batch = k}, idx);
		for (uint64_t r = 0; r < rows; r++)
			for (int b = 0; b < 4; b++)
				h = (h ^ ((idx[r] >> (8 * b)) & 0xff)) *
				    0x100000001b3ull;
	}
	printf("perm_s %.3f fnv %016" PRIx64 "\n", t, h);
	free(idx);
	bfs_order_destroy(ord);
	return 0;
}

static int first(uint64_t n, uint64_t seed, uint64_t e)
{
	struct bfs_order *ord = make(n, seed, 256);
	uint64_t idx[256];
	double t0, cold, warm;

	t0 = now();
	bfs_order_batch(ord, (struct bfs_batch_id){.epoch = e}, idx);
	cold = now() - t0;
	/* Push epoch e out of the 3-epoch cache, keeping its snapshot. */
	for (uint64_t x = 1; x <= 3; x++)
		bfs_order_batch(ord, (struct bfs_batch_id){.epoch = e + x},
				idx);
	t0 = now();
	bfs_order_batch(ord, (struct bfs_batch_id){.epoch = e}, idx);
	warm = now() - t0;
	printf("first_batch_cold_s %.3f first_batch_known_state_s %.6f "
	       "idx0 %" PRIu64 "\n",
	       cold, warm, idx[0]);
	bfs_order_destroy(ord);
	return 0;
}

static int hash_file(const char *path)
{
	static unsigned char buf[1 << 20];
	uint64_t h = 0xcbf29ce484222325ull;
	FILE *f = fopen(path, "rb");
	size_t got;

	if (!f)
		return 1;
	while ((got = fread(buf, 1, sizeof(buf), f)) > 0)
		for (size_t i = 0; i < got; i++)
			h = (h ^ buf[i]) * 0x100000001b3ull;
	fclose(f);
	printf("fnv %016" PRIx64 "\n", h);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "hash"))
		return hash_file(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "perm"))
		return perm(strtoull(argv[2], NULL, 0),
			    strtoull(argv[3], NULL, 0));
	if (argc == 5 && !strcmp(argv[1], "first"))
		return first(strtoull(argv[2], NULL, 0),
			     strtoull(argv[3], NULL, 0),
			     strtoull(argv[4], NULL, 0));
	fprintf(stderr, "usage: bench_order perm N SEED | first N SEED E | "
			"hash FILE\n");
	return 2;
}
