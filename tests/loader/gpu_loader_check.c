/* The loader on a CUDA driver, real or fake. tests/gpu/test_gpu_loader.sh
 * runs it on a GPU; tests/loader/test_gpu_check_fake.sh runs the same code
 * against the fake driver in make check, so it is known to work before the
 * first GPU run. It writes batch files under DIR and checks, one line each:
 *  - bytes: every batch copied back (cuMemcpyDtoH) equals its file;
 *  - slow consumer, 2 slots: a spin kernel then a clone of each batch
 *    (cuMemcpyDtoDAsync) on the stream given to next()/release(), a stream
 *    of its own and the legacy stream; the clones, compared with the files
 *    at the end, catch a read before the copy landed or after the slot was
 *    refilled. Also prints the copy thread's CPU time meanwhile;
 *  - the same on a side stream the batch is handed to (events both ways);
 *  - refused misuse: next() with every slot held (-EBUSY), a forged or
 *    double release (-EINVAL), reopen with a batch held (-EBUSY), held
 *    batches intact;
 *  - epochs: one loader reopened on a second epoch pins once;
 *  - a global-mode graph capture in another thread across a loader's life
 *    ends without being invalidated.
 * Exits 0, 1 when a check failed, 77 ("skip: ...") without a driver/GPU.
 * Usage: gpu_loader_check DIR */
#include "loader/batchfs_loader.h"
#include "loader/bench/spin_ptx.h"
#include "tests/loader/st_write.h"

#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define NB 8

/* The driver calls used here, by their cuda.h names (which expand to the
 * versioned symbols). */
#define DRV(X)                                                                 \
	X(cuInit)                                                              \
	X(cuDeviceGetCount)                                                    \
	X(cuDeviceGet)                                                         \
	X(cuDevicePrimaryCtxRetain)                                            \
	X(cuDevicePrimaryCtxRelease)                                           \
	X(cuCtxSetCurrent)                                                     \
	X(cuMemAlloc)                                                          \
	X(cuMemFree)                                                           \
	X(cuMemcpyDtoH)                                                        \
	X(cuMemcpyDtoDAsync)                                                   \
	X(cuStreamCreate)                                                      \
	X(cuStreamDestroy)                                                     \
	X(cuStreamSynchronize)                                                 \
	X(cuStreamWaitEvent)                                                   \
	X(cuStreamBeginCapture)                                                \
	X(cuStreamEndCapture)                                                  \
	X(cuGraphDestroy)                                                      \
	X(cuEventCreate)                                                       \
	X(cuEventRecord)                                                       \
	X(cuEventDestroy)                                                      \
	X(cuModuleLoadData)                                                    \
	X(cuModuleGetFunction)                                                 \
	X(cuModuleUnload)                                                      \
	X(cuLaunchKernel)
#define STR(x)	#x
#define XSTR(x) STR(x)
#define DECL(f) static __typeof__(f) *p_##f;
DRV(DECL)
#undef DECL

static const char *root;
static char dirs[2][4200];	   /* two epochs */
static unsigned char *want[2][NB]; /* their files' bytes */
static size_t size[2][NB];
static CUdevice dev;
static CUcontext ctx;
static CUmodule mod;
static CUfunction spin;
static int failures;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
	va_list ap;

	printf("FAIL: ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	failures++;
}

#define CK(call)                                                               \
	do {                                                                   \
		CUresult r_ = (call);                                          \
		if (r_ != CUDA_SUCCESS) {                                      \
			fail("%s: CUresult %d", #call, (int)r_);               \
			return -1;                                             \
		}                                                              \
	} while (0)

/* Epoch e's files: NB batches of 1000 + 4099 k rows. */
static int write_epoch(int e)
{
	snprintf(dirs[e], sizeof(dirs[e]), "%s/epoch%d", root, e);
	mkdir(dirs[e], 0755);
	for (int k = 0; k < NB; k++) {
		uint64_t rows = 1000 + 4099 * (uint64_t)k;
		size_t n1 = rows * 16, n2 = rows * 4;
		unsigned char *d = malloc(n1 + n2);
		struct st_tensor t[2] = {{"x", "F32", 2, {rows, 4}, d, n1},
					 {"y", "I32", 1, {rows}, d + n1, n2}};
		char path[4300];
		struct stat sb;
		FILE *f;

		st_fill(d, n1 + n2, (uint64_t)(k + 100 * e));
		snprintf(path, sizeof(path), "%s/batch_%d", dirs[e], k);
		if (st_write(path, t, 2, (unsigned)e, (unsigned)k, 0) < 0 ||
		    stat(path, &sb) < 0)
			return -1;
		size[e][k] = (size_t)sb.st_size;
		want[e][k] = malloc(size[e][k]);
		f = fopen(path, "rb");
		if (!f || fread(want[e][k], 1, size[e][k], f) != size[e][k])
			return -1;
		fclose(f);
		free(d);
	}
	return 0;
}

/* Driver, device 0, its primary context current here, the spin kernel.
 * 77 when there is no driver or device. */
static int setup(void)
{
	void *dl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	int n = 0;

	if (!dl)
		return 77;
#define LOAD(f)                                                                \
	if (!(p_##f = (__typeof__(f) *)dlsym(dl, XSTR(f))))                    \
		return 77;
	DRV(LOAD)
#undef LOAD
	if (p_cuInit(0) != CUDA_SUCCESS || p_cuDeviceGetCount(&n) || n < 1)
		return 77;
	CK(p_cuDeviceGet(&dev, 0));
	CK(p_cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(p_cuCtxSetCurrent(ctx));
	CK(p_cuModuleLoadData(&mod, BFS_SPIN_PTX));
	CK(p_cuModuleGetFunction(&spin, mod, BFS_SPIN_ENTRY));
	return 0;
}

static struct bfs_loader *open_loader(const char *dir, unsigned slots)
{
	struct bfs_loader *L;
	int rc = bfs_loader_open(
	    &L, &(struct bfs_loader_opts){.dir = dir,
					  .mode = BFS_LOADER_CUDA,
					  .slots = slots,
					  .chunk = 1 << 20});
	if (rc < 0) {
		fail("%s: open in CUDA mode: %s", dir, bfs_loader_strerror(rc));
		return NULL;
	}
	return L;
}

/* Clones of the batches of one run, compared at the end. */
struct clones {
	CUdeviceptr d[NB];
	size_t n[NB];
};

static int clones_alloc(struct clones *c, int e)
{
	memset(c, 0, sizeof(*c));
	for (int k = 0; k < NB; k++)
		CK(p_cuMemAlloc(&c->d[k], size[e][k]));
	return 0;
}

/* The consumer's work on batch b, on stream s: a 2 ms kernel, then the
 * clone of the batch. */
static int consume(struct clones *c, const struct bfs_loader_batch *b,
		   CUstream s)
{
	unsigned long long ns = 2000000;
	void *args[] = {&ns};

	CK(p_cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
	CK(p_cuMemcpyDtoDAsync(c->d[b->index], b->dev, b->nbytes, s));
	c->n[b->index] = b->nbytes;
	return 0;
}

/* Wait for s; each clone must equal epoch e's file. Frees the clones. */
static int clones_compare(struct clones *c, int e, CUstream s, const char *what)
{
	unsigned char *got = malloc(size[e][NB - 1]);
	int bad = 0;

	CK(p_cuStreamSynchronize(s));
	for (int k = 0; k < NB; k++) {
		if (c->n[k] != size[e][k] ||
		    p_cuMemcpyDtoH(got, c->d[k], c->n[k]) != CUDA_SUCCESS ||
		    memcmp(got, want[e][k], c->n[k]) != 0) {
			fail("%s: the clone of batch %d differs from its file",
			     what, k);
			bad = 1;
		}
		p_cuMemFree(c->d[k]);
	}
	free(got);
	return bad ? -1 : 0;
}

/* 'waiter' waits for what is queued on 'first' so far. */
static int join(CUstream waiter, CUstream first, CUevent ev)
{
	CK(p_cuEventRecord(ev, first));
	CK(p_cuStreamWaitEvent(waiter, ev, 0));
	return 0;
}

static int check_bytes(void)
{
	struct bfs_loader *L = open_loader(dirs[0], 3);
	struct bfs_loader_batch b;
	unsigned char *got = malloc(size[0][NB - 1]);
	int rc, bad = 0;

	if (!L)
		return -1;
	for (int k = 0; (rc = bfs_loader_next(L, &b, NULL)) == 0; k++) {
		/* the legacy stream waits for the copy; DtoH waits for it */
		if (b.index != (uint64_t)k || b.nbytes != size[0][k] ||
		    p_cuMemcpyDtoH(got, b.dev, b.nbytes) != CUDA_SUCCESS ||
		    memcmp(got, want[0][k], size[0][k]) != 0) {
			fail("bytes: batch %d differs on the device", k);
			bad = 1;
		}
		bfs_loader_release(L, &b, NULL);
	}
	if (rc != BFS_LOADER_EOF)
		fail("bytes: next: %s", bfs_loader_errmsg(L));
	bfs_loader_close(L);
	free(got);
	if (bad || rc != BFS_LOADER_EOF)
		return -1;
	printf("ok: bytes: %d batches copied back equal their files\n", NB);
	return 0;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Slow consumer on stream s (NULL: the legacy stream), epoch e, 2 slots.
 * 'side': hand each batch to that stream instead. */
static int slow_consumer(int e, CUstream s, CUstream side, const char *what)
{
	struct bfs_loader_stats st;
	struct bfs_loader *L;
	struct bfs_loader_batch b;
	struct clones c;
	double t0 = now();
	CUevent ev;
	int rc;

	if (clones_alloc(&c, e) < 0 || !(L = open_loader(dirs[e], 2)))
		return -1;
	CK(p_cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
	while ((rc = bfs_loader_next(L, &b, s)) == 0) {
		if ((side && join(side, s, ev) < 0) ||
		    consume(&c, &b, side ? side : s) < 0 ||
		    (side && join(s, side, ev) < 0))
			break;
		bfs_loader_release(L, &b, s);
	}
	if (rc != BFS_LOADER_EOF)
		fail("%s: next: %s", what, bfs_loader_errmsg(L));
	bfs_loader_stats(L, &st);
	bfs_loader_close(L);
	p_cuEventDestroy(ev);
	if (clones_compare(&c, e, side ? side : s, what) < 0 ||
	    rc != BFS_LOADER_EOF)
		return -1;
	printf("ok: %s: %d clones equal their files; copy thread CPU %.2f%% "
	       "of a core\n",
	       what, NB, 100.0 * (double)st.copy_cpu_ns / 1e9 / (now() - t0));
	return 0;
}

static int check_misuse(CUstream s)
{
	struct bfs_loader *L = open_loader(dirs[0], 2);
	struct bfs_loader_batch b0, b1, b2, forged;
	struct clones c;
	int bad = 0;

	if (!L || clones_alloc(&c, 0) < 0)
		return -1;
	bad |=
	    bfs_loader_next(L, &b0, s) != 0 || bfs_loader_next(L, &b1, s) != 0;
	bad |= bfs_loader_next(L, &b2, s) != -EBUSY;
	bad |= bfs_loader_reopen(L, dirs[1], NULL) != -EBUSY;
	forged = b0;
	forged.index = 5;
	bad |= bfs_loader_release(L, &forged, s) != -EINVAL;
	bad |= consume(&c, &b0, s) < 0 || consume(&c, &b1, s) < 0;
	bad |= bfs_loader_release(L, &b0, s) != 0;
	bad |= bfs_loader_release(L, &b0, s) != -EINVAL;
	while (!bad && bfs_loader_next(L, &b2, s) == 0) {
		bad |= consume(&c, &b2, s) < 0;
		bad |= bfs_loader_release(L, &b2, s) != 0;
		if (b2.index == 2)
			bad |= bfs_loader_release(L, &b1, s) != 0;
	}
	bad |= b2.index != NB - 1;
	bfs_loader_close(L);
	if (bad)
		fail("misuse: a misuse was not refused");
	if (clones_compare(&c, 0, s, "misuse") < 0 || bad)
		return -1;
	printf("ok: misuse refused (EBUSY, EINVAL), held batches intact\n");
	return 0;
}

static int check_epochs(CUstream s)
{
	struct bfs_loader *L = open_loader(dirs[0], 2);
	struct bfs_loader_batch b;
	struct bfs_loader_stats st;
	struct clones c;
	int rc;

	if (!L)
		return -1;
	while (bfs_loader_next(L, &b, s) == 0)
		bfs_loader_release(L, &b, s);
	if ((rc = bfs_loader_reopen(L, dirs[1], NULL)) < 0)
		fail("epochs: reopen: %s", bfs_loader_strerror(rc));
	if (rc < 0 || clones_alloc(&c, 1) < 0)
		return -1;
	while (bfs_loader_next(L, &b, s) == 0) {
		consume(&c, &b, s);
		bfs_loader_release(L, &b, s);
	}
	bfs_loader_stats(L, &st);
	bfs_loader_close(L);
	if (st.pin_calls != 1 || st.batches != 2 * NB)
		fail("epochs: %llu pin calls, %llu batches",
		     (unsigned long long)st.pin_calls,
		     (unsigned long long)st.batches);
	if (clones_compare(&c, 1, s, "epochs") < 0 || st.pin_calls != 1 ||
	    st.batches != 2 * NB)
		return -1;
	printf("ok: epochs: reopened on epoch 1, one pinning for both\n");
	return 0;
}

struct capture {
	CUstream s;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int state; /* 0 starting, 1 capturing, 2 end it */
	CUresult begin, end;
};

static void *capture_main(void *arg)
{
	struct capture *c = arg;
	CUgraph g = NULL;

	p_cuCtxSetCurrent(ctx);
	pthread_mutex_lock(&c->mu);
	c->begin = p_cuStreamBeginCapture(c->s, CU_STREAM_CAPTURE_MODE_GLOBAL);
	c->state = 1;
	pthread_cond_broadcast(&c->cv);
	while (c->state != 2)
		pthread_cond_wait(&c->cv, &c->mu);
	c->end = c->begin ? c->begin : p_cuStreamEndCapture(c->s, &g);
	if (g)
		p_cuGraphDestroy(g);
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/* A torch.cuda.graph-like capture in another thread while a loader opens,
 * streams (slow consumer) and closes. */
static int check_capture(CUstream s)
{
	struct capture c = {.mu = PTHREAD_MUTEX_INITIALIZER,
			    .cv = PTHREAD_COND_INITIALIZER};
	struct bfs_loader *L;
	struct bfs_loader_batch b;
	struct clones cl;
	pthread_t t;
	int rc = -1;

	CK(p_cuStreamCreate(&c.s, CU_STREAM_NON_BLOCKING));
	if (clones_alloc(&cl, 0) < 0) /* not during the capture */
		return -1;
	pthread_create(&t, NULL, capture_main, &c);
	pthread_mutex_lock(&c.mu);
	while (c.state != 1)
		pthread_cond_wait(&c.cv, &c.mu);
	pthread_mutex_unlock(&c.mu);
	if ((L = open_loader(dirs[0], 2)) != NULL) {
		while ((rc = bfs_loader_next(L, &b, s)) == 0 &&
		       consume(&cl, &b, s) == 0)
			bfs_loader_release(L, &b, s);
		bfs_loader_close(L);
	}
	pthread_mutex_lock(&c.mu);
	c.state = 2;
	pthread_cond_broadcast(&c.cv);
	pthread_mutex_unlock(&c.mu);
	pthread_join(t, NULL);
	p_cuStreamDestroy(c.s);
	if (rc != BFS_LOADER_EOF)
		fail("capture: the loader failed: %s", bfs_loader_strerror(rc));
	if (c.end != CUDA_SUCCESS)
		fail("capture: the capture broke: CUresult %d", (int)c.end);
	if (clones_compare(&cl, 0, s, "capture") < 0 || rc != BFS_LOADER_EOF ||
	    c.end != CUDA_SUCCESS)
		return -1;
	printf("ok: a global-mode capture in another thread survived a "
	       "loader\n");
	return 0;
}

int main(int argc, char **argv)
{
	CUstream s, side;
	int rc;

	if (argc != 2)
		return 2;
	root = argv[1];
	if ((rc = setup()) != 0) {
		if (rc == 77)
			printf("skip: no CUDA driver/GPU\n");
		return rc == 77 ? 77 : 1;
	}
	if (write_epoch(0) < 0 || write_epoch(1) < 0)
		return 2;
	if (p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) ||
	    p_cuStreamCreate(&side, CU_STREAM_NON_BLOCKING))
		return 1;
	check_bytes();
	slow_consumer(0, s, NULL, "slow consumer, own stream");
	slow_consumer(0, NULL, NULL, "slow consumer, legacy stream");
	slow_consumer(0, s, side, "slow consumer, side stream");
	check_misuse(s);
	check_epochs(s);
	check_capture(s);
	p_cuStreamDestroy(s);
	p_cuStreamDestroy(side);
	p_cuModuleUnload(mod);
	p_cuDevicePrimaryCtxRelease(dev);
	printf(failures ? "FAIL: %d check(s)\n" : "ok: all checks\n", failures);
	return failures ? 1 : 0;
}
