/* make bench-loader: the loader's throughput against its ceilings, all
 * measured in the same run (targets and method: loader/README.md,
 * "Benchmark").
 *
 * CPU part (always): plain read() of the same files into one page-aligned,
 * pre-faulted buffer, one file after the other (the baseline), against the
 * loader in CPU mode (next/release until EOF) — page cache warm. Prints
 * GB/s for both and the ratio (goal G12: >= 0.95). Median of --reps runs.
 * The CPU-mode rate over the steady window (after the first --skip
 * batches, see struct bench_run) is Rf, the read-only rate the GPU part
 * compares E with.
 *
 * GPU part (bench_gpu.c): only when a CUDA driver and a device are present;
 * otherwise one "GPU part: skipped (no CUDA driver/GPU)" line.
 *
 * Files: --total-mb / --batch-mb files are written to --dir (reused when
 * their size matches); with --existing 1, the batch_K files already in
 * --dir are used (e.g. a batchfs mount's epoch/0, to measure through FUSE),
 * up to --total-mb.
 *
 * Usage: bench_loader [--total-mb N] [--batch-mb N] [--dir D] [--reps N]
 *          [--readers N] [--slots N] [--chunk-kb N] [--skip N] [--device N]
 *          [--peak-mb N] [--peak-copies N] [--spin-us N] [--verify-every N]
 *          [--existing 1]
 *        bench_loader --print-ptx     (the spin kernel, for ptxas) */
#include "loader/bench/bench.h"
#include "tests/loader/st_write.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

double bench_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

double bench_median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	return v[n / 2];
}

/* Create (or reuse) nb files of batch bytes; returns the size of one. */
static size_t make_files(const char *dir, int nb, size_t batch)
{
	size_t rows = (batch - 4096) / 4096;
	unsigned char *d = malloc(rows * 4096);
	struct st_tensor t = {"x", "U8", 2, {rows, 4096}, d, rows * 4096};
	char path[4200];
	struct stat sb;

	mkdir(dir, 0755);
	st_fill(d, rows * 4096, 1);
	for (int k = 0; k < nb; k++) {
		snprintf(path, sizeof(path), "%s/batch_%d", dir, k);
		/* the batch index is in the header: files differ */
		if (stat(path, &sb) != 0 ||
		    (size_t)sb.st_size != 4096 + rows * 4096)
			st_write(path, &t, 1, 0, (unsigned)k, 0);
	}
	free(d);
	return 4096 + rows * 4096;
}

/* --existing: the batch_K files already in dir (e.g. a batchfs mount's
 * epoch/0), up to total bytes. Sets c->nb, file_bytes (the largest) and
 * bytes; returns 0 or -1 when there is no batch_0. */
static int scan_files(struct bench_cfg *c, double total)
{
	char path[4200];
	struct stat sb;

	c->nb = 0;
	c->file_bytes = 0;
	c->bytes = 0;
	for (;;) {
		snprintf(path, sizeof(path), "%s/batch_%d", c->dir, c->nb);
		if (c->bytes >= total || stat(path, &sb) != 0)
			break;
		if ((size_t)sb.st_size > c->file_bytes)
			c->file_bytes = (size_t)sb.st_size;
		c->bytes += (double)sb.st_size;
		c->nb++;
	}
	return c->nb > 0 ? 0 : -1;
}

/* Baseline: read() every file whole into buf. Seconds. */
static double plain_read(const char *dir, int nb, unsigned char *buf,
			 size_t cap)
{
	char path[4200];
	double t0 = bench_now();

	for (int k = 0; k < nb; k++) {
		snprintf(path, sizeof(path), "%s/batch_%d", dir, k);
		int fd = open(path, O_RDONLY);
		ssize_t r;
		size_t got = 0;
		while (fd >= 0 && (r = read(fd, buf + got, cap - got)) > 0)
			got += (size_t)r;
		if (fd >= 0)
			close(fd);
	}
	return bench_now() - t0;
}

int bench_run_loader(const struct bfs_loader_opts *o, void *stream,
		     unsigned skip, const struct bench_hooks *h,
		     struct bench_run *r)
{
	struct bfs_loader *L;
	struct bfs_loader_batch b;
	struct bfs_loader_stats st = {0};
	double t0 = bench_now(), t1, tw, t2, wbytes = 0, tn, *lat;
	unsigned k = 0, nlat = 0;
	int rc;

	if ((rc = bfs_loader_open(&L, o)) < 0) {
		fprintf(stderr, "bench: loader open: %s\n",
			bfs_loader_strerror(rc));
		return -1;
	}
	lat = calloc(bfs_loader_count(L) + 1, sizeof(*lat));
	t1 = tw = bench_now();
	while (tn = bench_now(), (rc = bfs_loader_next(L, &b, stream)) == 0) {
		double n = (double)b.nbytes;
		if (lat && k >= skip)
			lat[nlat++] = bench_now() - tn;
		if (h && h->step && (rc = h->step(h->arg, &b, stream)) < 0)
			break;
		if ((rc = bfs_loader_release(L, &b, stream)) < 0)
			break;
		if (++k == skip) {
			if (h && h->sync && (rc = h->sync(h->arg, stream)) < 0)
				break;
			tw = bench_now();
		} else if (k > skip) {
			wbytes += n;
		}
	}
	if (rc == BFS_LOADER_EOF && h && h->sync)
		rc = h->sync(h->arg, stream) < 0 ? -1 : BFS_LOADER_EOF;
	t2 = bench_now();
	if (rc != BFS_LOADER_EOF)
		fprintf(stderr, "bench: run failed: %s %s\n",
			bfs_loader_strerror(rc), bfs_loader_errmsg(L));
	bfs_loader_stats(L, &st);
	bfs_loader_close(L);
	*r = (struct bench_run){.open_close = bench_now() - t0,
				.next_eof = t2 - t1,
				.window = t2 - tw,
				.window_bytes = wbytes,
				.copy_cpu = (double)st.copy_cpu_ns / 1e9,
				.open_eof = t2 - t0};
	if (lat && nlat) {
		bench_median(lat, (int)nlat); /* sorts */
		r->next_p50 = lat[nlat / 2];
		r->next_p99 = lat[(nlat * 99) / 100 < nlat ? (nlat * 99) / 100
							   : nlat - 1];
	}
	free(lat);
	return rc == BFS_LOADER_EOF ? 0 : -1;
}

/* Command-line values (defaults: make bench-loader's). */
struct args {
	long total_mb, batch_mb, reps, readers, slots, chunk_kb, skip, device,
	    peak_mb, peak_copies, spin_us, verify_every, existing;
	const char *dir;
};

/* --name value pairs into c and *out; returns 0, or 2 on a bad argument. */
static int parse_args(int argc, char **argv, struct bench_cfg *c,
		      struct args *out)
{
	struct args a = {.total_mb = 1024,
			 .batch_mb = 64,
			 .reps = 5,
			 .skip = -1,
			 .peak_mb = 64,
			 .peak_copies = 32,
			 .verify_every = 8,
			 .dir = "/tmp/bfs-bench-loader"};
	const struct {
		const char *name;
		long *v;
	} opt[] = {
	    {"--total-mb", &a.total_mb}, {"--batch-mb", &a.batch_mb},
	    {"--reps", &a.reps},	 {"--readers", &a.readers},
	    {"--slots", &a.slots},	 {"--chunk-kb", &a.chunk_kb},
	    {"--skip", &a.skip},	 {"--device", &a.device},
	    {"--peak-mb", &a.peak_mb},	 {"--peak-copies", &a.peak_copies},
	    {"--spin-us", &a.spin_us},	 {"--verify-every", &a.verify_every},
	    {"--existing", &a.existing}, {"--dir", NULL}};
	const unsigned nopt = sizeof(opt) / sizeof(opt[0]);

	for (int i = 1; i < argc; i += 2) {
		unsigned n = 0;
		while (n < nopt && strcmp(argv[i], opt[n].name))
			n++;
		if (n == nopt || i + 1 >= argc) {
			fprintf(stderr, "bench_loader: bad argument %s\n",
				argv[i]);
			return 2;
		}
		if (opt[n].v)
			*opt[n].v = strtol(argv[i + 1], NULL, 0);
		else
			a.dir = argv[i + 1];
	}
	if (a.reps < 1 || a.reps > 16 || a.batch_mb < 1 ||
	    (!a.existing && a.total_mb < a.batch_mb) || a.peak_mb < 1 ||
	    a.peak_copies < 1 || a.verify_every < 1 || a.readers < 0 ||
	    a.slots < 0 || a.chunk_kb < 0 || a.device < 0 || a.spin_us < 0) {
		fprintf(stderr, "bench_loader: bad values (see the comment at "
				"the top of loader/bench/bench_loader.c)\n");
		return 2;
	}
	*c = (struct bench_cfg){.dir = a.dir,
				.nb = (int)(a.total_mb / a.batch_mb),
				.reps = (int)a.reps,
				.o = {.readers = (unsigned)a.readers,
				      .slots = (unsigned)a.slots,
				      .chunk = (size_t)a.chunk_kb << 10,
				      .device = (int)a.device},
				.device = (int)a.device,
				.peak_mb = (unsigned)a.peak_mb,
				.peak_copies = (unsigned)a.peak_copies,
				.spin_us = (unsigned)a.spin_us,
				.verify_every = (unsigned)a.verify_every};
	*out = a;
	/* default: the ring's depth, so the window starts with a full ring */
	c->skip = a.skip >= 0 ? (unsigned)a.skip
		  : a.slots   ? (unsigned)a.slots
			      : 3;
	return 0;
}

int main(int argc, char **argv)
{
	struct bench_cfg c;
	struct args a;
	int rc;
	double tr[16], tl[16], ts[16], rf[16];
	struct bench_run run;
	unsigned char *buf;

	setvbuf(stdout, NULL, _IOLBF, 0); /* lines in order with stderr */
	if (argc == 2 && !strcmp(argv[1], "--print-ptx")) {
		fputs(bench_spin_ptx, stdout);
		return 0;
	}
	if ((rc = parse_args(argc, argv, &c, &a)) != 0)
		return rc;
	if (a.existing) {
		if (scan_files(&c, (double)a.total_mb * (1 << 20)) < 0) {
			fprintf(stderr, "bench_loader: no %s/batch_0\n", c.dir);
			return 2;
		}
	} else {
		c.file_bytes =
		    make_files(c.dir, c.nb, (size_t)a.batch_mb << 20);
		c.bytes = (double)c.nb * (double)c.file_bytes;
	}
	if (c.skip > (unsigned)c.nb / 2)
		c.skip = (unsigned)c.nb / 2;
	c.o.dir = c.dir;
	c.o.mode = BFS_LOADER_CPU;
	buf = aligned_alloc(4096, (c.file_bytes + 4095) / 4096 * 4096);
	memset(buf, 0, c.file_bytes);
	plain_read(c.dir, c.nb, buf, c.file_bytes); /* warm up */

	for (int r = 0; r < c.reps; r++) {
		tr[r] =
		    c.bytes / plain_read(c.dir, c.nb, buf, c.file_bytes) / 1e9;
		if (bench_run_loader(&c.o, NULL, c.skip, NULL, &run) < 0)
			return 1;
		tl[r] = c.bytes / run.open_close / 1e9;
		ts[r] = c.bytes / run.next_eof / 1e9;
		rf[r] = run.window_bytes / run.window / 1e9;
	}
	free(buf);
	printf("bench-loader: %d files, %.1f MiB each at most, in %s "
	       "(page cache warm), median of %d\n",
	       c.nb, (double)c.file_bytes / (1 << 20), c.dir, c.reps);
	printf("plain read() into one buffer:    %6.2f GB/s\n",
	       bench_median(tr, c.reps));
	printf("loader CPU mode, next..EOF:      %6.2f GB/s  ratio %.3f "
	       "(target >= 0.95)\n",
	       bench_median(ts, c.reps),
	       bench_median(ts, c.reps) / bench_median(tr, c.reps));
	printf("loader CPU mode, open..close:    %6.2f GB/s  ratio %.3f\n",
	       bench_median(tl, c.reps),
	       bench_median(tl, c.reps) / bench_median(tr, c.reps));
	fflush(stdout);
	return bench_gpu_part(&c, bench_median(rf, c.reps));
}
