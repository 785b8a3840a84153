/* CUDA driver backend of the loader, loaded at run time.
 *
 * Nothing links libcuda or libcudart: the driver is dlopen'ed
 * ("libcuda.so.1", or $BATCHFS_LOADER_LIBCUDA for tests) and its entry
 * points are fetched with cuGetProcAddress_v2 asking for the CUDA 12.0 ABI,
 * which returns the _v2/_v3 variants that cuda.h's macros name (a plain
 * dlsym("cuMemcpyHtoDAsync") would return the legacy 32-bit ABI). Drivers
 * older than 12.0 lack cuGetProcAddress_v2; for them the versioned symbol
 * names are looked up with dlsym instead. cuda.h is needed at build time
 * only; without it (no BFS_HAVE_CUDA_H) this file builds a backend whose
 * open fails with -ENOSYS.
 *
 * Context: the device's primary context (shared with the runtime and
 * PyTorch). The copy thread makes it current once (bind); calls from the
 * consumer's thread are bracketed by push/pop.
 *
 * Stream capture: while any thread captures a CUDA graph in the default
 * (global) mode, as torch.cuda.graph does, a "potentially unsafe" call
 * from another thread in global mode (cuMemAlloc, cuEventSynchronize, ...)
 * fails and invalidates that capture. None of our work is captured, so
 * the copy thread switches itself to the relaxed mode once (bind), and
 * open/close, which allocate and wait on the caller's thread, run relaxed
 * between relax() and unrelax(), restoring the caller's mode after.
 *
 * The library handle is never dlclose'd: unloading a driver under live
 * threads of other users is unsafe, and the handle is reference-counted. */
#include "loader/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef BFS_HAVE_CUDA_H

struct bfs_loader_gpu {
	int unused;
};

int bfs_loader_gpu_open(struct bfs_loader_gpu **out, int device, char *why,
			size_t whylen)
{
	*out = NULL;
	snprintf(why, whylen, "built without cuda.h (no CUDA backend)");
	return -ENOSYS;
}
void bfs_loader_gpu_close(struct bfs_loader_gpu *g)
{
}
const char *bfs_loader_gpu_err(const struct bfs_loader_gpu *g)
{
	return "no CUDA backend";
}
void bfs_loader_gpu_unrelax(struct bfs_loader_gpu *g)
{
}
#define NOGPU                                                                  \
	{                                                                      \
		return -ENOSYS;                                                \
	}
int bfs_loader_gpu_bind(struct bfs_loader_gpu *g) NOGPU
    int bfs_loader_gpu_relax(struct bfs_loader_gpu *g) NOGPU
    int bfs_loader_gpu_push(struct bfs_loader_gpu *g) NOGPU
    int bfs_loader_gpu_pop(struct bfs_loader_gpu *g) NOGPU
    int bfs_loader_gpu_register(struct bfs_loader_gpu *g, void *p,
				size_t n) NOGPU
    int bfs_loader_gpu_unregister(struct bfs_loader_gpu *g, void *p) NOGPU
    int bfs_loader_gpu_alloc(struct bfs_loader_gpu *g, size_t n,
			     uint64_t *d) NOGPU
    int bfs_loader_gpu_free(struct bfs_loader_gpu *g, uint64_t d) NOGPU
    int bfs_loader_gpu_event_create(struct bfs_loader_gpu *g, void **ev) NOGPU
    int bfs_loader_gpu_event_destroy(struct bfs_loader_gpu *g, void *ev) NOGPU
    int bfs_loader_gpu_copy(struct bfs_loader_gpu *g, uint64_t dst,
			    const void *src, size_t n, void *w, void *r) NOGPU
    int bfs_loader_gpu_event_sync(struct bfs_loader_gpu *g, void *ev) NOGPU
    int bfs_loader_gpu_stream_wait(struct bfs_loader_gpu *g, void *s,
				   void *ev) NOGPU
    int bfs_loader_gpu_record(struct bfs_loader_gpu *g, void *ev, void *s) NOGPU
    int bfs_loader_gpu_drain(struct bfs_loader_gpu *g) NOGPU

#else /* BFS_HAVE_CUDA_H */

#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>

/* The driver entry points we use, with the ABI of CUDA 12.0. When you add
 * one: add it to FUNCS (base name, versioned symbol for old drivers) and to
 * the fake driver tests/loader/fake_libcuda.c. */
#define FUNCS(X)                                                               \
	X(Init, "cuInit", (unsigned))                                          \
	X(DriverGetVersion, "cuDriverGetVersion", (int *))                     \
	X(DeviceGetCount, "cuDeviceGetCount", (int *))                         \
	X(DeviceGet, "cuDeviceGet", (CUdevice *, int))                         \
	X(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain",                  \
	  (CUcontext *, CUdevice))                                             \
	X(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", (CUdevice)) \
	X(CtxSetCurrent, "cuCtxSetCurrent", (CUcontext))                       \
	X(CtxPushCurrent, "cuCtxPushCurrent_v2", (CUcontext))                  \
	X(CtxPopCurrent, "cuCtxPopCurrent_v2", (CUcontext *))                  \
	X(MemHostRegister, "cuMemHostRegister_v2", (void *, size_t, unsigned)) \
	X(MemHostUnregister, "cuMemHostUnregister", (void *))                  \
	X(MemAlloc, "cuMemAlloc_v2", (CUdeviceptr *, size_t))                  \
	X(MemFree, "cuMemFree_v2", (CUdeviceptr))                              \
	X(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2",                             \
	  (CUdeviceptr, const void *, size_t, CUstream))                       \
	X(StreamCreate, "cuStreamCreate", (CUstream *, unsigned))              \
	X(StreamDestroy, "cuStreamDestroy_v2", (CUstream))                     \
	X(StreamWaitEvent, "cuStreamWaitEvent", (CUstream, CUevent, unsigned)) \
	X(EventCreate, "cuEventCreate", (CUevent *, unsigned))                 \
	X(EventRecord, "cuEventRecord", (CUevent, CUstream))                   \
	X(EventSynchronize, "cuEventSynchronize", (CUevent))                   \
	X(EventDestroy, "cuEventDestroy_v2", (CUevent))                        \
	X(GetErrorName, "cuGetErrorName", (CUresult, const char **))           \
	X(ThreadExchangeStreamCaptureMode,                                     \
	  "cuThreadExchangeStreamCaptureMode", (CUstreamCaptureMode *))

struct bfs_loader_gpu {
	void *dl;
#define MEMBER(f, sym, args) CUresult(*f) args;
	FUNCS(MEMBER)
#undef MEMBER
	CUdevice dev;
	CUcontext ctx;
	int ctx_retained;
	CUstream copy;
	CUevent drain; /* recorded at close to wait for the copy stream */
	/* relax(): the caller's capture mode, to restore */
	int relaxed;
	CUstreamCaptureMode caller_mode;
};

typedef CUresult (*getproc_fn)(const char *, void **, int, cuuint64_t,
			       CUdriverProcAddressQueryResult *);

/* The message of the calling thread's last driver failure. Per thread,
 * like errno: the copy thread and the consumer fail independently, and
 * each one reads the message of its own failure right after it (one
 * buffer per loader, written by both, named the wrong call). */
static __thread char last_err[160];

static const char *err_name(struct bfs_loader_gpu *g, CUresult r)
{
	const char *s = NULL;
	if (g->GetErrorName && g->GetErrorName(r, &s) == CUDA_SUCCESS && s)
		return s;
	switch (r) { /* the ones a stub or missing device give */
	case CUDA_ERROR_STUB_LIBRARY:
		return "CUDA_ERROR_STUB_LIBRARY";
	case CUDA_ERROR_NO_DEVICE:
		return "CUDA_ERROR_NO_DEVICE";
	default:
		return "CUDA_ERROR_?";
	}
}

/* Map a driver result to 0, -ENOMEM (out of device or pinned memory) or
 * -EIO, and remember the failing call in this thread's message. */
static int check(struct bfs_loader_gpu *g, CUresult r, const char *what)
{
	if (r == CUDA_SUCCESS)
		return 0;
	snprintf(last_err, sizeof(last_err), "%s failed: %s (%d)", what,
		 err_name(g, r), (int)r);
	return r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
}

/* Fill the table: cuGetProcAddress_v2 (12.0+ drivers) or versioned dlsym. */
static int resolve(struct bfs_loader_gpu *g, char *why, size_t whylen)
{
	getproc_fn gp = (getproc_fn)dlsym(g->dl, "cuGetProcAddress_v2");
	CUdriverProcAddressQueryResult st;
	const char *base;
	CUresult r;
	void *fn;

#define LOAD(f, sym, args)                                                     \
	fn = NULL;                                                             \
	base = sym;                                                            \
	if (gp) {                                                              \
		char b[64];                                                    \
		snprintf(b, sizeof(b), "%s", sym);                             \
		char *v = strstr(b, "_v");                                     \
		if (v)                                                         \
			*v = 0;                                                \
		r = gp(b, &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st);       \
		if (r != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS)    \
			fn = NULL;                                             \
	}                                                                      \
	if (!fn)                                                               \
		fn = dlsym(g->dl, sym);                                        \
	if (!fn) {                                                             \
		snprintf(why, whylen, "driver lacks %s", base);                \
		return -ENODEV;                                                \
	}                                                                      \
	memcpy(&g->f, &fn, sizeof(fn));
	FUNCS(LOAD)
#undef LOAD
	return 0;
}

/* Init, count, pick and retain: any failure here means "no usable GPU". */
static int probe(struct bfs_loader_gpu *g, int device, char *why, size_t whylen)
{
	int n = 0, ver = 0;
	CUresult r;

	if ((r = g->Init(0)) != CUDA_SUCCESS) {
		snprintf(why, whylen, "cuInit failed: %s (%d)%s",
			 err_name(g, r), (int)r,
			 r == CUDA_ERROR_STUB_LIBRARY ? ", a stub driver" : "");
		return -ENODEV;
	}
	g->DriverGetVersion(&ver);
	if ((r = g->DeviceGetCount(&n)) != CUDA_SUCCESS || n <= 0) {
		snprintf(why, whylen,
			 "no CUDA device (cuDeviceGetCount: %s, "
			 "n=%d)",
			 err_name(g, r), n);
		return -ENODEV;
	}
	if (device < 0 || device >= n) {
		snprintf(why, whylen, "device %d out of range (%d devices)",
			 device, n);
		return -ENODEV;
	}
	if ((r = g->DeviceGet(&g->dev, device)) != CUDA_SUCCESS) {
		snprintf(why, whylen,
			 "device %d unusable: cuDeviceGet failed: "
			 "%s (%d)",
			 device, err_name(g, r), (int)r);
		return -ENODEV;
	}
	if ((r = g->DevicePrimaryCtxRetain(&g->ctx, g->dev)) != CUDA_SUCCESS) {
		snprintf(why, whylen,
			 "device %d unusable: cuDevicePrimaryCtxRetain failed: "
			 "%s (%d)",
			 device, err_name(g, r), (int)r);
		return -ENODEV;
	}
	g->ctx_retained = 1;
	snprintf(why, whylen, "CUDA device %d of %d, driver %d", device, n,
		 ver);
	return 0;
}

/* The caller relaxed (see the top of the file), the copy stream and the
 * event that drains it. */
static int make_copy_stream(struct bfs_loader_gpu *g)
{
	int rc = bfs_loader_gpu_relax(g);

	if (rc == 0 && (rc = bfs_loader_gpu_push(g)) == 0) {
		rc = check(g, g->StreamCreate(&g->copy, CU_STREAM_NON_BLOCKING),
			   "cuStreamCreate");
		if (rc == 0)
			rc = bfs_loader_gpu_event_create(g, (void **)&g->drain);
		bfs_loader_gpu_pop(g);
	}
	return rc;
}

int bfs_loader_gpu_open(struct bfs_loader_gpu **out, int device, char *why,
			size_t whylen)
{
	const char *lib = getenv("BATCHFS_LOADER_LIBCUDA");
	struct bfs_loader_gpu *g = calloc(1, sizeof(*g));
	int rc;

	*out = NULL;
	if (!g) {
		snprintf(why, whylen, "out of memory");
		return -ENOMEM;
	}
	g->dl =
	    dlopen(lib && *lib ? lib : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!g->dl) {
		snprintf(why, whylen, "no CUDA driver (%s)", dlerror());
		rc = -ENOSYS;
		goto err_free;
	}
	rc = resolve(g, why, whylen);
	if (rc == 0)
		rc = probe(g, device, why, whylen);
	if (rc == 0 && (rc = make_copy_stream(g)) < 0)
		snprintf(why, whylen, "%s", last_err);
	if (rc < 0)
		goto err_free;
	*out = g;
	return 0;
err_free:
	bfs_loader_gpu_close(g);
	return rc;
}

void bfs_loader_gpu_close(struct bfs_loader_gpu *g)
{
	if (!g)
		return;
	if ((g->copy || g->drain) && bfs_loader_gpu_push(g) == 0) {
		if (g->drain)
			g->EventDestroy(g->drain);
		if (g->copy)
			g->StreamDestroy(g->copy);
		bfs_loader_gpu_pop(g);
	}
	if (g->ctx_retained)
		g->DevicePrimaryCtxRelease(g->dev);
	bfs_loader_gpu_unrelax(g);
	/* g->dl stays loaded on purpose (see the top of the file). */
	free(g);
}

const char *bfs_loader_gpu_err(const struct bfs_loader_gpu *g)
{
	return last_err;
}

int bfs_loader_gpu_bind(struct bfs_loader_gpu *g)
{
	CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
	int rc = check(g, g->CtxSetCurrent(g->ctx), "cuCtxSetCurrent");
	if (rc == 0)
		rc = check(g, g->ThreadExchangeStreamCaptureMode(&m),
			   "cuThreadExchangeStreamCaptureMode");
	return rc;
}

int bfs_loader_gpu_relax(struct bfs_loader_gpu *g)
{
	CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
	int rc;

	if (g->relaxed)
		return 0;
	rc = check(g, g->ThreadExchangeStreamCaptureMode(&m),
		   "cuThreadExchangeStreamCaptureMode");
	g->relaxed = rc == 0;
	g->caller_mode = m;
	return rc;
}

void bfs_loader_gpu_unrelax(struct bfs_loader_gpu *g)
{
	if (g->relaxed)
		g->ThreadExchangeStreamCaptureMode(&g->caller_mode);
	g->relaxed = 0;
}

int bfs_loader_gpu_push(struct bfs_loader_gpu *g)
{
	return check(g, g->CtxPushCurrent(g->ctx), "cuCtxPushCurrent");
}

int bfs_loader_gpu_pop(struct bfs_loader_gpu *g)
{
	CUcontext c;
	return check(g, g->CtxPopCurrent(&c), "cuCtxPopCurrent");
}

int bfs_loader_gpu_register(struct bfs_loader_gpu *g, void *p, size_t n)
{
	return check(g, g->MemHostRegister(p, n, CU_MEMHOSTREGISTER_PORTABLE),
		     "cuMemHostRegister");
}

int bfs_loader_gpu_unregister(struct bfs_loader_gpu *g, void *p)
{
	return check(g, g->MemHostUnregister(p), "cuMemHostUnregister");
}

int bfs_loader_gpu_alloc(struct bfs_loader_gpu *g, size_t n, uint64_t *dptr)
{
	CUdeviceptr d = 0;
	int rc = check(g, g->MemAlloc(&d, n), "cuMemAlloc");
	*dptr = (uint64_t)d;
	return rc;
}

int bfs_loader_gpu_free(struct bfs_loader_gpu *g, uint64_t dptr)
{
	return check(g, g->MemFree((CUdeviceptr)dptr), "cuMemFree");
}

/* Blocking-sync events: a thread waiting in cuEventSynchronize sleeps until
 * the event completes instead of spinning a core (the primary context's
 * default scheduling spins). */
int bfs_loader_gpu_event_create(struct bfs_loader_gpu *g, void **ev)
{
	CUevent e = NULL;
	int rc = check(g,
		       g->EventCreate(&e, CU_EVENT_DISABLE_TIMING |
					      CU_EVENT_BLOCKING_SYNC),
		       "cuEventCreate");
	*ev = e;
	return rc;
}

int bfs_loader_gpu_event_destroy(struct bfs_loader_gpu *g, void *ev)
{
	return check(g, g->EventDestroy((CUevent)ev), "cuEventDestroy");
}

int bfs_loader_gpu_copy(struct bfs_loader_gpu *g, uint64_t dst, const void *src,
			size_t n, void *wait_ev, void *ready_ev)
{
	int rc = 0;

	if (wait_ev)
		rc = check(g, g->StreamWaitEvent(g->copy, (CUevent)wait_ev, 0),
			   "cuStreamWaitEvent(copy stream, released)");
	if (rc == 0)
		rc = check(
		    g, g->MemcpyHtoDAsync((CUdeviceptr)dst, src, n, g->copy),
		    "cuMemcpyHtoDAsync");
	if (rc == 0)
		rc = check(g, g->EventRecord((CUevent)ready_ev, g->copy),
			   "cuEventRecord(ready)");
	return rc;
}

int bfs_loader_gpu_event_sync(struct bfs_loader_gpu *g, void *ev)
{
	return check(g, g->EventSynchronize((CUevent)ev), "cuEventSynchronize");
}

int bfs_loader_gpu_stream_wait(struct bfs_loader_gpu *g, void *stream, void *ev)
{
	return check(g, g->StreamWaitEvent((CUstream)stream, (CUevent)ev, 0),
		     "cuStreamWaitEvent(consumer stream, ready)");
}

int bfs_loader_gpu_record(struct bfs_loader_gpu *g, void *ev, void *stream)
{
	return check(g, g->EventRecord((CUevent)ev, (CUstream)stream),
		     "cuEventRecord(released)");
}

/* Not cuStreamSynchronize: that spins in the default scheduling. */
int bfs_loader_gpu_drain(struct bfs_loader_gpu *g)
{
	int rc =
	    check(g, g->EventRecord(g->drain, g->copy), "cuEventRecord(drain)");
	if (rc == 0)
		rc = bfs_loader_gpu_event_sync(g, g->drain);
	return rc;
}

#endif /* BFS_HAVE_CUDA_H */
