/* gather_bench: microbenchmark of fs/dataset on one thread.
 * `gather_bench [-b BATCH] [-n BATCHES] [-r REPEATS] ARCHIVE...` opens the
 * archives as one dataset, makes every row resident (one sequential
 * gather of all samples), then times batches of uniformly random sample
 * indices (fixed xorshift seed) the way a pool worker materializes them:
 *   gather  bfs_dataset_gather of every field into a reused buffer
 *   advise  fs/readahead's advice on the batch's indices
 *   both    advise then gather (what fs/pool does per batch)
 * and prints, for each, the median over REPEATS of rows per second of this
 * thread's CPU time (a row = one sample, all fields): on a shared machine
 * that is steadier than wall time and is what "per worker core" means.
 * Not a test: it asserts nothing, exits 1 on error. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fs/dataset.h"
#include "fs/readahead.h"

enum mode { M_GATHER, M_ADVISE, M_BOTH, M_N };

static const char *const mode_name[M_N] = {"gather", "advise", "both"};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Gather all fields of idx[0..n) into buf; 0 or -errno. */
static int gather_all(const struct bfs_dataset *ds, const uint64_t *idx,
		      size_t n, uint8_t *buf)
{
	for (size_t f = 0; f < bfs_dataset_nfields(ds); f++) {
		int rc = bfs_dataset_gather(ds, f, idx, n, buf);
		if (rc)
			return rc;
		buf += n * bfs_dataset_field(ds, f)->row_bytes;
	}
	return 0;
}

/* One timed run of 'batches' batches in mode m; rows/s or < 0 on error. */
static double run(const struct bfs_dataset *ds, struct bfs_readahead *ra,
		  enum mode m, size_t batch, size_t batches, uint64_t *idx,
		  uint8_t *buf, uint64_t seed)
{
	uint64_t N = bfs_dataset_samples(ds), s = seed;
	double t0 = now_s();

	for (size_t k = 0; k < batches; k++) {
		for (size_t i = 0; i < batch; i++)
			idx[i] = xorshift(&s) % N;
		if (m != M_GATHER)
			bfs_readahead_rows(ra, idx, batch);
		if (m != M_ADVISE && gather_all(ds, idx, batch, buf))
			return -1;
	}
	return (double)(batch * batches) / (now_s() - t0);
}

int main(int argc, char **argv)
{
	struct bfs_dataset *ds = NULL;
	struct bfs_readahead *ra = NULL;
	struct bfs_error err = {{0}};
	size_t batch = 256, batches = 20000, reps = 5, row = 0;
	uint64_t *idx = NULL;
	uint8_t *buf = NULL;
	int opt, rc = 1;

	while ((opt = getopt(argc, argv, "b:n:r:")) != -1) {
		if (opt == 'b')
			batch = strtoul(optarg, NULL, 10);
		else if (opt == 'n')
			batches = strtoul(optarg, NULL, 10);
		else if (opt == 'r')
			reps = strtoul(optarg, NULL, 10);
		else
			goto usage;
	}
	if (optind >= argc || !batch || !batches || !reps)
		goto usage;
	if (bfs_dataset_open(&ds, (const char *const *)argv + optind,
			     (size_t)(argc - optind), &err)) {
		fprintf(stderr, "gather_bench: %s\n", err.msg);
		return 1;
	}
	for (size_t f = 0; f < bfs_dataset_nfields(ds); f++)
		row += bfs_dataset_field(ds, f)->row_bytes;
	idx = malloc(batch * sizeof(*idx));
	buf = malloc(batch * row + 1);
	if (!idx || !buf || !bfs_dataset_samples(ds) ||
	    bfs_readahead_create(&ra, ds, &(struct bfs_readahead_opts){0}))
		goto out;
	/* Make the data resident: every sample once, in order. */
	for (uint64_t i = 0; i < bfs_dataset_samples(ds);) {
		size_t n = 0;
		for (; n < batch && i < bfs_dataset_samples(ds); n++)
			idx[n] = i++;
		if (gather_all(ds, idx, n, buf))
			goto out;
	}
	printf("samples %" PRIu64 ", %zu bytes per sample, batch %zu, "
	       "%zu batches x %zu repeats\n",
	       bfs_dataset_samples(ds), row, batch, batches, reps);
	for (int m = 0; m < M_N; m++) {
		double r[64];
		size_t nr = reps < 64 ? reps : 64;
		for (size_t j = 0; j < nr; j++) {
			r[j] = run(ds, ra, (enum mode)m, batch, batches, idx,
				   buf, 0x9E3779B97F4A7C15ull + j);
			if (r[j] < 0)
				goto out;
		}
		qsort(r, nr, sizeof(r[0]), cmp_double);
		printf("%-7s %8.3f M rows/cpu-s (median; min %.3f max %.3f)\n",
		       mode_name[m], r[nr / 2] / 1e6, r[0] / 1e6,
		       r[nr - 1] / 1e6);
	}
	rc = 0;
out:
	if (rc)
		fprintf(stderr, "gather_bench: failed\n");
	free(idx);
	free(buf);
	bfs_readahead_destroy(ra);
	bfs_dataset_close(ds);
	return rc;
usage:
	fprintf(stderr, "usage: gather_bench [-b BATCH] [-n BATCHES] "
			"[-r REPEATS] ARCHIVE...\n");
	return 2;
}
