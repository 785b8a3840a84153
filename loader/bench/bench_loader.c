/* make bench-loader: the loader's throughput against its ceilings, all
 * measured in the same run (research/gpu-loader.md §4).
 *
 * CPU part (always): plain read() of the same files into one page-aligned,
 * pre-faulted buffer, one file after the other (the baseline), against the
 * loader in CPU mode (next/release until EOF) — page cache warm. Prints
 * GB/s for both and the ratio (goal G12: >= 0.95). Median of --reps runs.
 *
 * GPU part (only when a CUDA driver and device are present): pinned
 * cuMemcpyHtoDAsync peak P from one registered buffer (64 MiB x 32) against
 * the loader in CUDA mode (file -> device, E); prints both and E/P.
 * Otherwise it prints that it skipped.
 *
 * Usage: bench_loader [--total-mb N] [--batch-mb N] [--dir D] [--reps N]
 *                     [--readers N] [--slots N] [--chunk-kb N] */
#include "loader/batchfs_loader.h"
#include "tests/loader/st_write.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef BFS_HAVE_CUDA_H
#include <cuda.h>
#endif

static double now(void)
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

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	return v[n / 2];
}

/* Create (or reuse) nb files of batch bytes; returns the total bytes. */
static double make_files(const char *dir, int nb, size_t batch)
{
	size_t rows = (batch - 4096) / 4096;
	unsigned char *d = malloc(rows * 4096);
	struct st_tensor t = {"x", "U8", 2, {rows, 4096}, d, rows * 4096};
	double total = 0;
	char path[4200];
	struct stat sb;

	mkdir(dir, 0755);
	st_fill(d, rows * 4096, 1);
	for (int k = 0; k < nb; k++) {
		snprintf(path, sizeof(path), "%s/batch_%d", dir, k);
		if (stat(path, &sb) != 0 ||
		    (size_t)sb.st_size != 4096 + rows * 4096)
			st_write(path, &t, 1, 0, (unsigned)k, 0);
		total += (double)(4096 + rows * 4096);
	}
	free(d);
	return total;
}

/* Baseline: read() every file whole into buf. Seconds. */
static double plain_read(const char *dir, int nb, unsigned char *buf,
			 size_t cap)
{
	char path[4200];
	double t0 = now();

	for (int k = 0; k < nb; k++) {
		snprintf(path, sizeof(path), "%s/batch_%d", dir, k);
		int fd = open(path, O_RDONLY);
		ssize_t r;
		size_t got = 0;
		while ((r = read(fd, buf + got, cap - got)) > 0)
			got += (size_t)r;
		close(fd);
	}
	return now() - t0;
}

/* The loader until EOF; *steady = seconds from the first next() to EOF. */
static double via_loader(struct bfs_loader_opts *o, double *steady)
{
	struct bfs_loader *L;
	struct bfs_loader_batch b;
	double t0 = now(), t1;
	int rc;

	if (bfs_loader_open(&L, o) < 0) {
		fprintf(stderr, "bench: open failed\n");
		exit(1);
	}
	t1 = now();
	while ((rc = bfs_loader_next(L, &b, NULL)) == 0)
		bfs_loader_release(L, &b, NULL);
	*steady = now() - t1;
	if (rc != BFS_LOADER_EOF) {
		fprintf(stderr, "bench: %s\n", bfs_loader_errmsg(L));
		exit(1);
	}
	bfs_loader_close(L);
	return now() - t0;
}

#ifdef BFS_HAVE_CUDA_H
/* P: pinned HtoD peak, 64 MiB x 32 on one stream. GB/s, or -1. */
static double pinned_peak(void *dl)
{
	CUresult (*init)(unsigned) = (CUresult(*)(unsigned))dlsym(dl, "cuInit");
	CUresult (*get)(CUdevice *, int) =
	    (CUresult(*)(CUdevice *, int))dlsym(dl, "cuDeviceGet");
	CUresult (*retain)(CUcontext *, CUdevice) = (CUresult(*)(
	    CUcontext *, CUdevice))dlsym(dl, "cuDevicePrimaryCtxRetain");
	CUresult (*setcur)(CUcontext) =
	    (CUresult(*)(CUcontext))dlsym(dl, "cuCtxSetCurrent");
	CUresult (*reg)(void *, size_t, unsigned) = (CUresult(*)(
	    void *, size_t, unsigned))dlsym(dl, "cuMemHostRegister_v2");
	CUresult (*alloc)(CUdeviceptr *, size_t) =
	    (CUresult(*)(CUdeviceptr *, size_t))dlsym(dl, "cuMemAlloc_v2");
	CUresult (*h2d)(CUdeviceptr, const void *, size_t, CUstream) =
	    (CUresult(*)(CUdeviceptr, const void *, size_t, CUstream))dlsym(
		dl, "cuMemcpyHtoDAsync_v2");
	CUresult (*sync)(CUstream) =
	    (CUresult(*)(CUstream))dlsym(dl, "cuStreamSynchronize");
	size_t n = 64u << 20;
	void *h = aligned_alloc(4096, n);
	CUdeviceptr d;
	CUcontext ctx;
	CUdevice dev;
	double t0;

	if (!init || init(0) || get(&dev, 0) || retain(&ctx, dev) ||
	    setcur(ctx) || !h || reg(h, n, CU_MEMHOSTREGISTER_PORTABLE) ||
	    alloc(&d, n))
		return -1;
	memset(h, 1, n);
	h2d(d, h, n, NULL);
	sync(NULL);
	t0 = now();
	for (int i = 0; i < 32; i++)
		h2d(d, h, n, NULL);
	sync(NULL);
	return 32.0 * (double)n / (now() - t0) / 1e9;
}
#endif

static void gpu_part(struct bfs_loader_opts o, double bytes, int reps)
{
#ifdef BFS_HAVE_CUDA_H
	void *dl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	struct bfs_loader *L;
	double p, e[16], steady;

	o.mode = BFS_LOADER_CUDA;
	if (!dl || bfs_loader_open(&L, &o) < 0) {
		printf("GPU part: skipped (no CUDA driver/GPU)\n");
		return;
	}
	bfs_loader_close(L);
	p = pinned_peak(dl);
	for (int r = 0; r < reps; r++) {
		via_loader(&o, &steady);
		e[r] = bytes / steady / 1e9;
	}
	printf("GPU pinned HtoD peak P:          %6.2f GB/s\n", p);
	printf("loader file->device E:           %6.2f GB/s\n",
	       median(e, reps));
	printf("ratio E/P:                       %6.3f\n", median(e, reps) / p);
	printf("(step time with a spin kernel: not implemented)\n");
#else
	printf("GPU part: skipped (built without cuda.h)\n");
#endif
}

int main(int argc, char **argv)
{
	const char *dir = "/tmp/bfs-bench-loader";
	int total_mb = 1024, batch_mb = 64, reps = 5, nb;
	unsigned readers = 0, slots = 0, chunk_kb = 0;
	double bytes, tr[16], tl[16], ts[16], steady;
	unsigned char *buf;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--total-mb"))
			total_mb = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--batch-mb"))
			batch_mb = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--dir"))
			dir = argv[i + 1];
		else if (!strcmp(argv[i], "--reps"))
			reps = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--readers"))
			readers = (unsigned)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--slots"))
			slots = (unsigned)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--chunk-kb"))
			chunk_kb = (unsigned)atoi(argv[i + 1]);
	}
	if (reps < 1 || reps > 16 || batch_mb < 1 || total_mb < batch_mb)
		return 2;
	nb = total_mb / batch_mb;
	bytes = make_files(dir, nb, (size_t)batch_mb << 20);
	buf = aligned_alloc(4096, (size_t)batch_mb << 20);
	memset(buf, 0, (size_t)batch_mb << 20);
	plain_read(dir, nb, buf, (size_t)batch_mb << 20); /* warm the cache */

	struct bfs_loader_opts o = {.dir = dir,
				    .mode = BFS_LOADER_CPU,
				    .readers = readers,
				    .slots = slots,
				    .chunk = (size_t)chunk_kb << 10};
	for (int r = 0; r < reps; r++) {
		tr[r] = bytes /
			plain_read(dir, nb, buf, (size_t)batch_mb << 20) / 1e9;
		tl[r] = bytes / via_loader(&o, &steady) / 1e9;
		ts[r] = bytes / steady / 1e9;
	}
	printf("bench-loader: %d files x %d MiB in %s (page cache warm), "
	       "median of %d\n",
	       nb, batch_mb, dir, reps);
	printf("plain read() into one buffer:    %6.2f GB/s\n",
	       median(tr, reps));
	printf("loader CPU mode, next..EOF:      %6.2f GB/s  ratio %.3f\n",
	       median(ts, reps), median(ts, reps) / median(tr, reps));
	printf("loader CPU mode, open..close:    %6.2f GB/s  ratio %.3f\n",
	       median(tl, reps), median(tl, reps) / median(tr, reps));
	gpu_part(o, bytes, reps);
	free(buf);
	return 0;
}
