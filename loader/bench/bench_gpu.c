/* bench_loader's GPU part (targets: loader/README.md, "Benchmark").
 *
 * Measured in one run, on device --device (default 0):
 *   verify  every --verify-every-th batch (and the last) copied back with
 *           cuMemcpyDtoH equals its file; a mismatch fails the bench.
 *   P       pinned H2D peak: --peak-copies x --peak-mb cuMemcpyHtoDAsync
 *           from one registered buffer, wall time to cuStreamSynchronize,
 *           median of 3 trials.
 *   Pp      pageable H2D: 8 synchronous cuMemcpyHtoD from malloc'ed memory.
 *   E       file -> device: the loader in CUDA mode, next/release on the
 *           consumer stream to EOF, steady window (struct bench_run),
 *           ended by a cuStreamSynchronize. Target E / min(Rf, P) >= 0.9.
 *   T_c     a spin kernel (PTX below, %globaltimer) launched once per
 *           window batch on the consumer stream, back to back, alone.
 *           Each spins 1.2 x file bytes / E ns unless --spin-us is given.
 *   step    the same loop with the loader: next, the kernel, release, all
 *           on the consumer stream; window time. Target step / T_c <= 1.05.
 *           Also the copy thread's CPU time over the run (open to EOF),
 *           in % of a core: it must sleep while the GPU works (<= 5).
 *   ready   the step loop again, waiting for each kernel before the next
 *           next() (as a step that reads its loss does): next()'s wall
 *           time per call in the window, p50 and p99, when the loader had
 *           the kernel's time to get the batch ready.
 *
 * The driver is dlopen'ed here too ("libcuda.so.1", or
 * $BATCHFS_LOADER_LIBCUDA like the library), so the bench shares the
 * library's instance of it; the entry points are the versioned symbols
 * cuda.h names (12.0 ABI). No cuda.h at build time: the part is skipped. */
#include "loader/bench/bench.h"

#include <errno.h>
#include <stdio.h>

#ifndef BFS_HAVE_CUDA_H
int bench_gpu_part(const struct bench_cfg *c, double rf)
{
	(void)c;
	(void)rf;
	printf("GPU part: skipped (built without cuda.h)\n");
	return 0;
}
const char bench_spin_ptx[] = "";
#else

#include "loader/bench/spin_ptx.h"

#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char bench_spin_ptx[] = BFS_SPIN_PTX;

/* Driver entry points the bench uses (the fake driver in
 * tests/loader/fake_libcuda.c implements each one). */
#define DRV(X)                                                                 \
	X(Init, "cuInit", (unsigned))                                          \
	X(DriverGetVersion, "cuDriverGetVersion", (int *))                     \
	X(DeviceGetCount, "cuDeviceGetCount", (int *))                         \
	X(DeviceGet, "cuDeviceGet", (CUdevice *, int))                         \
	X(DeviceGetName, "cuDeviceGetName", (char *, int, CUdevice))           \
	X(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain",                        \
	  (CUcontext *, CUdevice))                                             \
	X(PrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", (CUdevice))       \
	X(CtxSetCurrent, "cuCtxSetCurrent", (CUcontext))                       \
	X(MemHostRegister, "cuMemHostRegister_v2", (void *, size_t, unsigned)) \
	X(MemHostUnregister, "cuMemHostUnregister", (void *))                  \
	X(MemAlloc, "cuMemAlloc_v2", (CUdeviceptr *, size_t))                  \
	X(MemFree, "cuMemFree_v2", (CUdeviceptr))                              \
	X(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2",                             \
	  (CUdeviceptr, const void *, size_t, CUstream))                       \
	X(MemcpyHtoD, "cuMemcpyHtoD_v2", (CUdeviceptr, const void *, size_t))  \
	X(MemcpyDtoH, "cuMemcpyDtoH_v2", (void *, CUdeviceptr, size_t))        \
	X(StreamCreate, "cuStreamCreate", (CUstream *, unsigned))              \
	X(StreamDestroy, "cuStreamDestroy_v2", (CUstream))                     \
	X(StreamSynchronize, "cuStreamSynchronize", (CUstream))                \
	X(ModuleLoadDataEx, "cuModuleLoadDataEx",                              \
	  (CUmodule *, const void *, unsigned, CUjit_option *, void **))       \
	X(ModuleGetFunction, "cuModuleGetFunction",                            \
	  (CUfunction *, CUmodule, const char *))                              \
	X(ModuleUnload, "cuModuleUnload", (CUmodule))                          \
	X(LaunchKernel, "cuLaunchKernel",                                      \
	  (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,       \
	   unsigned, unsigned, CUstream, void **, void **))                    \
	X(GetErrorName, "cuGetErrorName", (CUresult, const char **))

struct gpu {
#define MEMBER(f, sym, args) CUresult(*f) args;
	DRV(MEMBER)
#undef MEMBER
	CUdevice dev;
	CUcontext ctx;
	CUstream s; /* the consumer stream */
	CUmodule mod;
	CUfunction spin;
	unsigned long long spin_ns; /* kernel argument of the step hook */
	const struct bench_cfg *c;
	unsigned char *vbuf[2]; /* verify: device copy, file */
	int verified;
};

/* Print "GPU part: FAILED: what: CUDA_ERROR_X (n)" for a failed call. */
static int ck(struct gpu *g, CUresult r, const char *what)
{
	const char *s = NULL;
	if (r == CUDA_SUCCESS)
		return 0;
	if (g->GetErrorName(r, &s) != CUDA_SUCCESS || !s)
		s = "?";
	printf("GPU part: FAILED: %s: %s (%d)\n", what, s, (int)r);
	return -EIO;
}

/* One result line: label padded to a column, value, unit and note. */
static void row(const char *label, double v, const char *unit_note)
{
	printf("%-36s %8.3f %s\n", label, v, unit_note);
}

/* dlopen + resolve + init + device count. Returns 0, or -ENODEV with the
 * reason in 'why' (no driver, stub, no device): the part is skipped. */
static int drv_open(struct gpu *g, int device, char *why, size_t whylen)
{
	const char *lib = getenv("BATCHFS_LOADER_LIBCUDA");
	void *dl =
	    dlopen(lib && *lib ? lib : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	void *fn;
	int n = 0;
	CUresult r;

	if (!dl) {
		snprintf(why, whylen, "%s", dlerror());
		return -ENODEV;
	}
#define LOAD(f, sym, args)                                                     \
	if (!(fn = dlsym(dl, sym))) {                                          \
		snprintf(why, whylen, "driver lacks %s", sym);                 \
		return -ENODEV;                                                \
	}                                                                      \
	memcpy(&g->f, &fn, sizeof(fn));
	DRV(LOAD)
#undef LOAD
	if ((r = g->Init(0)) != CUDA_SUCCESS ||
	    (r = g->DeviceGetCount(&n)) != CUDA_SUCCESS || device >= n) {
		snprintf(why, whylen, "cuInit/cuDeviceGetCount: %d, %d devices",
			 (int)r, n);
		return -ENODEV;
	}
	return 0;
}

/* Context, consumer stream, spin kernel (plus one short launch, which
 * also loads the module lazily). Returns 0 or -EIO (printed). */
static int gpu_setup(struct gpu *g, int device)
{
	char log[4096] = "", name[128] = "?";
	CUjit_option opt[2] = {CU_JIT_ERROR_LOG_BUFFER,
			       CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
	void *val[2] = {log, (void *)(uintptr_t)sizeof(log)};
	unsigned long long ns = 1000;
	void *args[] = {&ns};
	int ver = 0, rc;

	if ((rc = ck(g, g->DeviceGet(&g->dev, device), "cuDeviceGet")) ||
	    (rc = ck(g, g->PrimaryCtxRetain(&g->ctx, g->dev),
		     "cuDevicePrimaryCtxRetain")))
		return rc;
	if ((rc = ck(g, g->CtxSetCurrent(g->ctx), "cuCtxSetCurrent")) ||
	    (rc = ck(g, g->StreamCreate(&g->s, CU_STREAM_NON_BLOCKING),
		     "cuStreamCreate")))
		return rc;
	g->DeviceGetName(name, sizeof(name), g->dev);
	g->DriverGetVersion(&ver);
	printf("GPU part: device %d \"%s\", driver %d.%d\n", device, name,
	       ver / 1000, ver % 1000 / 10);
	rc = ck(g, g->ModuleLoadDataEx(&g->mod, bench_spin_ptx, 2, opt, val),
		"cuModuleLoadDataEx(spin kernel PTX)");
	if (rc) {
		printf("JIT log: %s\n", log);
		return rc;
	}
	if ((rc = ck(g, g->ModuleGetFunction(&g->spin, g->mod, BFS_SPIN_ENTRY),
		     "cuModuleGetFunction")) ||
	    (rc = ck(g,
		     g->LaunchKernel(g->spin, 1, 1, 1, 1, 1, 1, 0, g->s, args,
				     NULL),
		     "cuLaunchKernel")))
		return rc;
	return ck(g, g->StreamSynchronize(g->s), "cuStreamSynchronize");
}

static void gpu_teardown(struct gpu *g)
{
	if (g->mod)
		g->ModuleUnload(g->mod);
	if (g->s)
		g->StreamDestroy(g->s);
	if (g->ctx)
		g->PrimaryCtxRelease(g->dev);
}

static int hook_sync(void *arg, void *stream)
{
	struct gpu *g = arg;
	return ck(g, g->StreamSynchronize((CUstream)stream),
		  "cuStreamSynchronize");
}

/* Step hook: the spin kernel, ordered after the batch's copy. */
static int hook_spin(void *arg, const struct bfs_loader_batch *b, void *stream)
{
	struct gpu *g = arg;
	void *args[] = {&g->spin_ns};
	(void)b;
	return ck(g,
		  g->LaunchKernel(g->spin, 1, 1, 1, 1, 1, 1, 0,
				  (CUstream)stream, args, NULL),
		  "cuLaunchKernel");
}

/* Step hook of the "ready" run: the spin kernel, then wait for it, as a
 * training step that reads its loss does; the loader reads on meanwhile,
 * so the next next() finds its batch ready. */
static int hook_spin_wait(void *arg, const struct bfs_loader_batch *b,
			  void *stream)
{
	int rc = hook_spin(arg, b, stream);
	return rc ? rc : hook_sync(arg, stream);
}

/* Step hook of the verify pass: every verify_every-th and the last batch,
 * copied back, must equal its file. */
static int hook_verify(void *arg, const struct bfs_loader_batch *b,
		       void *stream)
{
	struct gpu *g = arg;
	const struct bench_cfg *c = g->c;
	char path[4200];
	ssize_t got;
	int fd, rc;

	if (b->index % c->verify_every && b->index + 1 != (uint64_t)c->nb)
		return 0;
	if (b->nbytes > c->file_bytes) {
		printf("verify: batch_%llu: %llu bytes, more than the files\n",
		       (unsigned long long)b->index,
		       (unsigned long long)b->nbytes);
		return -EIO;
	}
	if ((rc = hook_sync(arg, stream)) ||
	    (rc = ck(g, g->MemcpyDtoH(g->vbuf[0], b->dev, b->nbytes),
		     "cuMemcpyDtoH")))
		return rc;
	snprintf(path, sizeof(path), "%s/batch_%llu", c->dir,
		 (unsigned long long)b->index);
	fd = open(path, O_RDONLY);
	got = fd < 0 ? -1 : pread(fd, g->vbuf[1], b->nbytes, 0);
	if (fd >= 0)
		close(fd);
	if (got != (ssize_t)b->nbytes ||
	    memcmp(g->vbuf[0], g->vbuf[1], b->nbytes) != 0) {
		size_t off = 0;
		while (off < b->nbytes && g->vbuf[0][off] == g->vbuf[1][off])
			off++;
		printf("verify: batch_%llu: device bytes differ from the file "
		       "(first mismatch at offset %zu)\n",
		       (unsigned long long)b->index, off);
		return -EIO;
	}
	g->verified++;
	return 0;
}

static int verify_pass(struct gpu *g, const struct bfs_loader_opts *o)
{
	struct bench_hooks h = {hook_verify, hook_sync, g};
	struct bench_run run;
	int rc = -ENOMEM;

	g->vbuf[0] = malloc(g->c->file_bytes);
	g->vbuf[1] = malloc(g->c->file_bytes);
	if (g->vbuf[0] && g->vbuf[1])
		rc = bench_run_loader(o, g->s, 0, &h, &run);
	if (rc == 0)
		printf("verify: %d of %d batches copied back (cuMemcpyDtoH), "
		       "all match the files\n",
		       g->verified, g->c->nb);
	free(g->vbuf[0]);
	free(g->vbuf[1]);
	return rc;
}

/* P (pinned, async) or Pp (pageable, synchronous): GB/s, or -1. */
static double h2d_rate(struct gpu *g, size_t n, unsigned copies, int pinned)
{
	unsigned char *h = aligned_alloc(4096, n);
	CUdeviceptr d = 0;
	double t[3], t0;
	int rc, reg = 0;

	if (!h)
		return -1;
	memset(h, 1, n);
	rc = ck(g, g->MemAlloc(&d, n), "cuMemAlloc");
	if (!rc && pinned)
		rc =
		    ck(g, g->MemHostRegister(h, n, CU_MEMHOSTREGISTER_PORTABLE),
		       "cuMemHostRegister");
	reg = !rc && pinned;
	for (int i = -1; !rc && i < 3; i++) { /* trial -1 warms up */
		t0 = bench_now();
		for (unsigned k = 0; !rc && k < (i < 0 ? 1 : copies); k++)
			rc = pinned ? ck(g, g->MemcpyHtoDAsync(d, h, n, g->s),
					 "cuMemcpyHtoDAsync")
				    : ck(g, g->MemcpyHtoD(d, h, n),
					 "cuMemcpyHtoD");
		if (!rc)
			rc = hook_sync(g, g->s);
		if (i >= 0)
			t[i] = (double)n * copies / (bench_now() - t0) / 1e9;
	}
	if (reg)
		g->MemHostUnregister(h);
	if (d)
		g->MemFree(d);
	free(h);
	return rc ? -1 : bench_median(t, 3);
}

/* T_c: 'count' spin kernels back to back on the consumer stream. Seconds,
 * or -1. */
static double spin_alone(struct gpu *g, unsigned count)
{
	double t0 = bench_now();
	int rc = 0;

	for (unsigned k = 0; !rc && k < count; k++)
		rc = hook_spin(g, NULL, g->s);
	if (!rc)
		rc = hook_sync(g, g->s);
	return rc ? -1 : bench_now() - t0;
}

/* E, then T_c and step with the spin length derived from E. */
static int loader_rates(struct gpu *g, const struct bfs_loader_opts *o,
			double p, double rf)
{
	const struct bench_cfg *c = g->c;
	struct bench_hooks hs = {NULL, hook_sync, g},
			   hk = {hook_spin, hook_sync, g},
			   hw = {hook_spin_wait, hook_sync, g};
	unsigned count = (unsigned)c->nb - c->skip;
	double e[16], tc[16], st[16], cpu[16], p50[16], p99[16], em, tcm, stm;
	struct bench_run run;
	char label[80];

	for (int r = 0; r < c->reps; r++) {
		if (bench_run_loader(o, g->s, c->skip, &hs, &run) < 0)
			return -EIO;
		e[r] = run.window_bytes / run.window / 1e9;
	}
	em = bench_median(e, c->reps);
	row("E  file->device, loader CUDA mode", em, "GB/s");
	row("E / min(Rf, P)", em / (rf < p ? rf : p), "(target >= 0.9)");
	row("E / P", em / p, "(G3, hot regular files: >= 0.85)");
	g->spin_ns = c->spin_us
			 ? (unsigned long long)c->spin_us * 1000
			 : (unsigned long long)(1.2 * (double)c->file_bytes /
						(em * 1e9) * 1e9);
	for (int r = 0; r < c->reps; r++) {
		if ((tc[r] = spin_alone(g, count)) < 0 ||
		    bench_run_loader(o, g->s, c->skip, &hk, &run) < 0)
			return -EIO;
		st[r] = run.window;
		cpu[r] = run.copy_cpu / run.open_eof;
	}
	for (int r = 0; r < c->reps; r++) {
		if (bench_run_loader(o, g->s, c->skip, &hw, &run) < 0)
			return -EIO;
		p50[r] = run.next_p50;
		p99[r] = run.next_p99;
	}
	tcm = bench_median(tc, c->reps);
	stm = bench_median(st, c->reps);
	snprintf(label, sizeof(label), "T_c spin kernel alone, %u x %.3f ms",
		 count, (double)g->spin_ns / 1e6);
	row(label, tcm * 1e3, "ms");
	snprintf(label, sizeof(label), "step next+kernel+release, %u x", count);
	row(label, stm * 1e3, "ms");
	row("step / T_c", stm / tcm, "(target <= 1.05)");
	row("copy thread CPU in step, % of a core",
	    100 * bench_median(cpu, c->reps), "(G10: <= 5)");
	row("next() when ready, p50", 1e6 * bench_median(p50, c->reps), "us");
	row("next() when ready, p99", 1e6 * bench_median(p99, c->reps), "us");
	return 0;
}

static int measure(struct gpu *g, double rf)
{
	const struct bench_cfg *c = g->c;
	struct bfs_loader_opts o = c->o;
	size_t n = (size_t)c->peak_mb << 20;
	double p, pp;
	char label[80];
	int rc;

	o.mode = BFS_LOADER_CUDA;
	if ((rc = verify_pass(g, &o)) < 0)
		return rc;
	if ((p = h2d_rate(g, n, c->peak_copies, 1)) < 0 ||
	    (pp = h2d_rate(g, n, 8, 0)) < 0)
		return -EIO;
	snprintf(label, sizeof(label), "P  pinned HtoD peak, %u MiB x %u",
		 c->peak_mb, c->peak_copies);
	row(label, p, "GB/s (G2: >= 50 GB/s)");
	snprintf(label, sizeof(label), "Pp pageable HtoD, %u MiB x 8",
		 c->peak_mb);
	row(label, pp, "GB/s");
	row("P / Pp", p / pp, "(G1: >= 2.5)");
	row("Rf read-only, loader CPU mode", rf, "GB/s");
	return loader_rates(g, &o, p, rf);
}

int bench_gpu_part(const struct bench_cfg *c, double rf)
{
	struct gpu g = {.c = c};
	char why[512];
	int rc;

	if (drv_open(&g, c->device, why, sizeof(why)) < 0) {
		printf("GPU part: skipped (no CUDA driver/GPU): %s\n", why);
		return 0;
	}
	rc = gpu_setup(&g, c->device);
	if (rc == 0)
		rc = measure(&g, rf);
	gpu_teardown(&g);
	if (rc < 0)
		printf("GPU part: FAILED\n");
	return rc < 0;
}
#endif
