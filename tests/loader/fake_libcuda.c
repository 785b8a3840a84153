/* A fake CUDA driver for the loader's tests: built (with fake_model.c) as
 * libcuda.so.1 and picked up through LD_LIBRARY_PATH (or
 * $BATCHFS_LOADER_LIBCUDA), so the loader's real dlopen, cuGetProcAddress
 * and AUTO detection run against it. This file holds the driver entry
 * points; fake_model.c the machinery behind them and the test hooks.
 *
 * It implements the entry points the loader uses, the few more bench_loader
 * uses (modules, kernel launch, synchronous copies) and those tests need to
 * play a CUDA user (second context, stream capture, device-to-device
 * copies). "Device" memory is malloc'ed (a CUdeviceptr is a host address).
 *
 * What it models, so that a loader relying on kinder behaviour fails a test:
 *  - Streams run asynchronously, each a FIFO executed by its own thread:
 *    copies sleep a delay and then memcpy, a kernel sleeps the u64
 *    nanoseconds of its first parameter (bench_loader's spin kernel), a
 *    wait blocks the stream until the record it names has run.
 *  - Stream flags: a stream created without CU_STREAM_NON_BLOCKING
 *    synchronizes with the legacy default stream (its ops wait for the
 *    legacy stream's earlier work and the reverse); each such implicit
 *    dependency is counted (fake_stats.implicit_deps). The legacy stream
 *    (NULL or CU_STREAM_LEGACY) belongs to the current context;
 *    CU_STREAM_PER_THREAD is a blocking stream of the calling thread.
 *  - Events: every record is tracked on its own. cuStreamWaitEvent waits
 *    for the record current at its call, cuEventQuery answers
 *    CUDA_ERROR_NOT_READY until the latest record has run on its stream,
 *    cuEventSynchronize waits for that record.
 *  - Waiting costs what it costs on a real driver: cuEventSynchronize on an
 *    event without CU_EVENT_BLOCKING_SYNC, and cuStreamSynchronize, spin
 *    (the calling thread burns CPU until done; counted in spin_syncs and
 *    spin_ns), as the primary context's default scheduling does on a
 *    machine with more cores than active contexts.
 *  - Contexts: the primary context and contexts made with cuCtxCreate, a
 *    per-thread stack of current contexts. Work enqueued on a stream, or
 *    an event recorded, while another context is current is a violation.
 *  - Stream capture: cuStreamBeginCapture / EndCapture and the thread
 *    capture modes (cuThreadExchangeStreamCaptureMode). While a capture
 *    runs, a potentially unsafe call (allocation, registration, event
 *    query/synchronize, stream or synchronous-copy synchronization) from a
 *    thread the capture modes prohibit fails with
 *    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture
 *    (EndCapture then returns CUDA_ERROR_STREAM_CAPTURE_INVALIDATED).
 *  - Misuse counted as a violation: a call without a current context, an
 *    unbalanced pop, a wait on an event never recorded, events created
 *    without CU_EVENT_DISABLE_TIMING, a copy from unregistered (pageable)
 *    memory, a host registration not page aligned, a launch of a function
 *    whose module was unloaded.
 *
 * Test control (fake_libcuda.h): any call can be made to fail (fake_fail:
 * OOM at cuMemAlloc, an error mid-run) or to pause at its entry
 * (fake_pause / fake_paused / fake_resume) to force an interleaving of
 * threads; a stream can be held (fake_hold) or given a timed "kernel"
 * (fake_sleep). Calls of interest are logged (struct fake_rec).
 *
 * Environment: FAKE_LIBCUDA_CORRUPT=1 flips the last byte of every
 * asynchronous host-to-device copy (tests that a copy-back check really
 * compares); FAKE_LIBCUDA_REPORT=1 prints the counters of struct
 * fake_stats to stderr at exit ("fake libcuda: violations=0 ...").
 *
 * Test-only code: one global state under one mutex (fake_model.c). */
#include "tests/loader/fake_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Loaded modules (PTX text) and the functions taken from them; an unloaded
 * module keeps its slot (image NULL) so stale functions are detected. */
struct fmodule {
	char *image;
};
struct ffunc {
	struct fmodule *mod;
	char name[64];
};
static struct fmodule modules[16];
static struct ffunc funcs[16];
static unsigned nmodules, nfuncs;

/* Does a synchronize call spin (for 'ev', NULL = a stream sync)? */
static int spins(const struct fevent *ev)
{
	if (fk_primary.flags & CU_CTX_SCHED_BLOCKING_SYNC)
		return 0;
	return !ev || !(ev->flags & CU_EVENT_BLOCKING_SYNC);
}

/* ---- device, contexts ---- */

API CUresult cuInit(unsigned f)
{
	BEGIN(cuInit);
	END
}

API CUresult cuDriverGetVersion(int *v)
{
	BEGIN(cuDriverGetVersion);
	*v = 12080;
	END
}

API CUresult cuDeviceGetCount(int *n)
{
	BEGIN(cuDeviceGetCount);
	*n = 1;
	END
}

API CUresult cuDeviceGet(CUdevice *d, int ord)
{
	BEGIN(cuDeviceGet);
	if (ord != 0)
		r = CUDA_ERROR_INVALID_DEVICE;
	else
		*d = 0;
	END
}

API CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
	BEGIN(cuDeviceGetName);
	snprintf(name, (size_t)len, "fake CUDA device %d", (int)d);
	END
}

API CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
	BEGIN(cuDevicePrimaryCtxRetain);
	fk_st.ctx_retained++;
	*c = (CUcontext)&fk_primary;
	END
}

API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
	BEGIN(cuDevicePrimaryCtxRelease);
	fk_st.ctx_retained--;
	END
}

API CUresult cuCtxSetCurrent(CUcontext c)
{
	BEGIN(cuCtxSetCurrent);
	if (fk_ctx_depth > 0)
		fk_ctx_depth--;
	if (c)
		fk_ctx_stack[fk_ctx_depth++] = (struct fctx *)c;
	END
}

API CUresult cuCtxPushCurrent_v2(CUcontext c)
{
	BEGIN(cuCtxPushCurrent);
	if (fk_ctx_depth == 16)
		r = CUDA_ERROR_INVALID_VALUE;
	else
		fk_ctx_stack[fk_ctx_depth++] = (struct fctx *)c;
	END
}

API CUresult cuCtxPopCurrent_v2(CUcontext *c)
{
	BEGIN(cuCtxPopCurrent);
	if (fk_ctx_depth <= 0) {
		fk_violation("cuCtxPopCurrent with nothing pushed");
		r = CUDA_ERROR_INVALID_CONTEXT;
	} else {
		*c = (CUcontext)fk_ctx_stack[--fk_ctx_depth];
	}
	END
}

API CUresult cuCtxGetCurrent(CUcontext *c)
{
	BEGIN(cuCtxGetCurrent);
	*c = (CUcontext)fk_current();
	END
}

/* A context of its own (like a library that does not use the fk_primary
 * one); made current on this thread. */
API CUresult cuCtxCreate_v4(CUcontext *c, CUctxCreateParams *p, unsigned flags,
			    CUdevice d)
{
	BEGIN(cuCtxCreate);
	struct fctx *x = fk_ctx_new(flags);
	if (fk_ctx_depth < 16)
		fk_ctx_stack[fk_ctx_depth++] = x;
	fk_st.ctx_created++;
	*c = (CUcontext)x;
	END
}

API CUresult cuCtxDestroy_v2(CUcontext c)
{
	BEGIN(cuCtxDestroy);
	if (fk_ctx_depth > 0 &&
	    fk_ctx_stack[fk_ctx_depth - 1] == (struct fctx *)c)
		fk_ctx_depth--;
	fk_st.ctx_created--;
	/* kept: streams may name it */
	END
}

/* ---- memory ---- */

API CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags)
{
	BEGIN(cuMemHostRegister);
	fk_need_ctx("cuMemHostRegister");
	if (((uintptr_t)p | n) % 4096)
		fk_violation("cuMemHostRegister of unaligned memory");
	for (int i = 0; i < 16; i++)
		if (!fk_reg_ptr[i]) {
			fk_reg_ptr[i] = p;
			fk_reg_len[i] = n;
			break;
		}
	fk_st.register_calls++;
	if (fk_st.registered && fk_copies_live)
		fk_st.register_after_copy++;
	fk_st.registered++;
	fk_log(F_REGISTER, 0, 0, (uintptr_t)p, n);
	END
}

API CUresult cuMemHostUnregister(void *p)
{
	BEGIN(cuMemHostUnregister);
	r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	fk_need_ctx("cuMemHostUnregister");
	for (int i = 0; i < 16; i++)
		if (fk_reg_ptr[i] == p) {
			fk_reg_ptr[i] = NULL;
			r = CUDA_SUCCESS;
		}
	fk_st.unregister_calls++;
	fk_st.registered -= r == CUDA_SUCCESS;
	if (fk_st.registered && fk_copies_live)
		fk_st.register_after_copy++; /* unpinning while streaming */
	if (!fk_st.registered)
		fk_copies_live = 0;
	fk_log(F_UNREGISTER, 0, 0, (uintptr_t)p, 0);
	END
}

API CUresult cuMemAlloc_v2(CUdeviceptr *d, size_t n)
{
	BEGIN(cuMemAlloc);
	void *p = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
	fk_need_ctx("cuMemAlloc");
	if (!p) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		memset(p, 0xee, n);
		*d = (CUdeviceptr)(uintptr_t)p;
		fk_st.allocs++;
		fk_log(F_ALLOC, 0, 0, *d, n);
	}
	END
}

API CUresult cuMemFree_v2(CUdeviceptr d)
{
	BEGIN(cuMemFree);
	fk_need_ctx("cuMemFree");
	fk_st.allocs--;
	fk_log(F_FREE, 0, 0, d, 0);
	free((void *)(uintptr_t)d);
	END
}

static void push_copy(CUstream h, void *dst, const void *src, size_t n,
		      int corrupt, const char *fn)
{
	struct sop *o = fk_op(S_COPY);
	struct fstream *s = fk_stream(h);

	o->dst = dst;
	o->src = src;
	o->n = n;
	o->delay = fk_copy_delay;
	o->corrupt = corrupt;
	fk_push(s, o, fn);
	fk_st.copies++;
	fk_copies_live++;
	fk_log(F_COPY, s->id, 0, (uintptr_t)dst, n);
}

API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *src, size_t n,
				  CUstream h)
{
	BEGIN(cuMemcpyHtoDAsync);
	if (!fk_registered(src, n))
		fk_violation("copy from unregistered (pageable) host memory");
	push_copy(h, (void *)(uintptr_t)d, src, n,
		  getenv("FAKE_LIBCUDA_CORRUPT") != NULL, "cuMemcpyHtoDAsync");
	END
}

API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n,
				  CUstream h)
{
	BEGIN(cuMemcpyDtoDAsync);
	push_copy(h, (void *)(uintptr_t)d, (const void *)(uintptr_t)s, n, 0,
		  "cuMemcpyDtoDAsync");
	END
}

/* Synchronous copies: ordered after the legacy default stream's work. */
static CUresult copy_sync(enum fk_fn f, void *dst, const void *src, size_t n,
			  uint64_t dptr)
{
	CUresult r;

	pthread_mutex_lock(&fk_mu);
	r = fk_enter(f);
	if (r == CUDA_SUCCESS) {
		fk_need_ctx(fk_name(f));
		fk_wait_stream(fk_stream(NULL), 0);
		fk_log(F_COPY_SYNC, 0, 0, dptr, n);
	}
	pthread_mutex_unlock(&fk_mu);
	if (r == CUDA_SUCCESS)
		memcpy(dst, src, n);
	return r;
}

API CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *src, size_t n)
{
	return copy_sync(FN_cuMemcpyHtoD, (void *)(uintptr_t)d, src, n, d);
}

API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr d, size_t n)
{
	return copy_sync(FN_cuMemcpyDtoH, dst, (const void *)(uintptr_t)d, n,
			 d);
}

/* ---- streams ---- */

API CUresult cuStreamCreate(CUstream *h, unsigned flags)
{
	BEGIN(cuStreamCreate);
	struct fctx *c = fk_need_ctx("cuStreamCreate");
	struct fstream *s = fk_stream_new(c ? c : &fk_primary, flags);
	*h = (CUstream)s;
	fk_st.streams++;
	fk_log(F_STREAM_CREATE, s->id, 0, 0, flags);
	END
}

API CUresult cuStreamDestroy_v2(CUstream h)
{
	struct fstream *s;
	BEGIN(cuStreamDestroy);
	s = fk_stream(h);
	fk_need_ctx("cuStreamDestroy");
	fk_wait_stream(s, 0);
	s->stop = 1;
	pthread_cond_broadcast(&fk_cv);
	fk_st.streams--;
	pthread_mutex_unlock(&fk_mu);
	pthread_join(s->th, NULL);
	pthread_mutex_lock(&fk_mu);
	s->dead = 1; /* kept: ops of other streams may name it */
	END
}

API CUresult cuStreamWaitEvent(CUstream h, CUevent e, unsigned flags)
{
	BEGIN(cuStreamWaitEvent);
	struct fevent *ev = (struct fevent *)e;
	struct fstream *s = fk_stream(h);
	struct sop *o = fk_op(S_WAIT);
	if (!ev->recorded)
		fk_violation("wait on event %u that was never recorded",
			     ev->id);
	o->ev = ev;
	o->gen = ev->recorded;
	fk_push(s, o, "cuStreamWaitEvent");
	fk_log(F_WAIT, s->id, ev->id, 0, 0);
	END
}

API CUresult cuStreamSynchronize(CUstream h)
{
	BEGIN(cuStreamSynchronize);
	struct fstream *s = fk_stream(h);
	fk_need_ctx("cuStreamSynchronize");
	fk_log(F_STREAM_SYNC, s->id, 0, 0, (uint64_t)spins(NULL));
	fk_wait_stream(s, spins(NULL));
	END
}

API CUresult cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode)
{
	BEGIN(cuStreamBeginCapture);
	struct fstream *s = fk_stream(h);
	if (s->legacy || s->capturing) {
		r = CUDA_ERROR_ILLEGAL_STATE;
	} else {
		s->capturing = 1;
		s->cap_mode = mode;
		s->cap_invalid = 0;
		s->cap_thread = pthread_self();
	}
	END
}

API CUresult cuStreamEndCapture(CUstream h, CUgraph *g)
{
	BEGIN(cuStreamEndCapture);
	struct fstream *s = fk_stream(h);
	*g = NULL;
	if (!s->capturing)
		r = CUDA_ERROR_ILLEGAL_STATE;
	else if (s->cap_mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
		 !pthread_equal(s->cap_thread, pthread_self()))
		r = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
	if (r == CUDA_SUCCESS) {
		s->capturing = 0;
		if (s->cap_invalid)
			r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
		else
			*g = (CUgraph)s; /* any non-NULL handle */
	}
	END
}

/* A captured graph is the capturing stream's handle: nothing to free. */
API CUresult cuGraphDestroy(CUgraph g)
{
	BEGIN(cuGraphDestroy);
	END
}

API CUresult cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *status)
{
	BEGIN(cuStreamIsCapturing);
	struct fstream *s = fk_stream(h);
	*status = !s->capturing	   ? CU_STREAM_CAPTURE_STATUS_NONE
		  : s->cap_invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
				   : CU_STREAM_CAPTURE_STATUS_ACTIVE;
	END
}

API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
	BEGIN(cuThreadExchangeStreamCaptureMode);
	int old = fk_cap_mode;
	fk_cap_mode = (int)*mode;
	*mode = (CUstreamCaptureMode)old;
	END
}

/* ---- events ---- */

API CUresult cuEventCreate(CUevent *e, unsigned flags)
{
	BEGIN(cuEventCreate);
	struct fctx *c = fk_need_ctx("cuEventCreate");
	struct fevent *ev = fk_event_new(c ? c : &fk_primary, flags);
	if (!(flags & CU_EVENT_DISABLE_TIMING))
		fk_violation("event created with timing enabled");
	fk_st.events++;
	fk_log(F_EVENT_CREATE, 0, ev->id, 0, flags);
	*e = (CUevent)ev;
	END
}

API CUresult cuEventRecord(CUevent e, CUstream h)
{
	BEGIN(cuEventRecord);
	struct fevent *ev = (struct fevent *)e;
	struct fstream *s = fk_stream(h);
	struct fctx *c = fk_current();
	struct sop *o = fk_op(S_RECORD);
	if (c && ev->ctx != c)
		fk_violation("cuEventRecord: event %u belongs to context %u, "
			     "context %u is current",
			     ev->id, ev->ctx->id, c->id);
	if (++ev->recorded >= ev->cap) {
		size_t cap = ev->cap ? 2 * ev->cap : 16;
		ev->done = realloc(ev->done, cap);
		memset(ev->done + ev->cap, 0, cap - ev->cap);
		ev->cap = cap;
	}
	o->ev = ev;
	o->gen = ev->recorded;
	fk_push(s, o, "cuEventRecord");
	fk_log(F_RECORD, s->id, ev->id, 0, 0);
	END
}

API CUresult cuEventQuery(CUevent e)
{
	BEGIN(cuEventQuery);
	struct fevent *ev = (struct fevent *)e;
	fk_need_ctx("cuEventQuery");
	if (!fk_event_done(ev, ev->recorded))
		r = CUDA_ERROR_NOT_READY;
	END
}

API CUresult cuEventSynchronize(CUevent e)
{
	BEGIN(cuEventSynchronize);
	struct fevent *ev = (struct fevent *)e;
	unsigned long want = ev->recorded;
	fk_need_ctx("cuEventSynchronize");
	fk_log(F_EVENT_SYNC, 0, ev->id, 0, (uint64_t)spins(ev));
	fk_wait_event(ev, want, spins(ev));
	END
}

API CUresult cuEventDestroy_v2(CUevent e)
{
	BEGIN(cuEventDestroy);
	fk_need_ctx("cuEventDestroy");
	fk_st.events--;
	/* kept on 'events': pending ops may still name it */
	END
}

/* ---- modules and kernels (bench_loader) ---- */

/* A module is PTX text: it must name a .version and a .target. */
API CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned nopt,
				CUjit_option *opt, void **val)
{
	const char *ptx = image;
	BEGIN(cuModuleLoadData);
	r = CUDA_ERROR_INVALID_IMAGE;
	fk_need_ctx("cuModuleLoadData");
	if (ptx && strstr(ptx, ".version ") && strstr(ptx, ".target ") &&
	    nmodules < 16) {
		modules[nmodules].image = strdup(ptx);
		*m = (CUmodule)&modules[nmodules++];
		fk_st.modules++;
		r = CUDA_SUCCESS;
	}
	END
}

API CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
	return cuModuleLoadDataEx(m, image, 0, NULL, NULL);
}

/* The function must be declared ".entry name(" in the module's PTX. */
API CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
	struct fmodule *mod = (struct fmodule *)m;
	char decl[80];
	snprintf(decl, sizeof(decl), ".entry %s(", name);
	BEGIN(cuModuleGetFunction);
	r = CUDA_ERROR_NOT_FOUND;
	fk_need_ctx("cuModuleGetFunction");
	if (!mod->image)
		fk_violation("cuModuleGetFunction on an unloaded module");
	else if (strstr(mod->image, decl) && nfuncs < 16) {
		funcs[nfuncs].mod = mod;
		snprintf(funcs[nfuncs].name, sizeof(funcs[0].name), "%s", name);
		*f = (CUfunction)&funcs[nfuncs++];
		r = CUDA_SUCCESS;
	}
	END
}

API CUresult cuModuleUnload(CUmodule m)
{
	struct fmodule *mod = (struct fmodule *)m;
	BEGIN(cuModuleUnload);
	fk_need_ctx("cuModuleUnload");
	free(mod->image);
	mod->image = NULL;
	fk_st.modules--;
	END
}

/* Runs as a sleep of *(uint64_t *)params[0] ns on the stream. */
API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
			    unsigned bx, unsigned by, unsigned bz,
			    unsigned shmem, CUstream h, void **params,
			    void **extra)
{
	struct ffunc *fn = (struct ffunc *)f;
	BEGIN(cuLaunchKernel);
	struct sop *o;
	if (!fn || !gx || !gy || !gz || !bx || !by || !bz || !params) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		o = fk_op(S_KERNEL);
		memcpy(&o->ns, params[0], sizeof(o->ns));
		if (!fn->mod->image)
			fk_violation(
			    "launch of %s after its module was unloaded",
			    fn->name);
		fk_push(fk_stream(h), o, "cuLaunchKernel");
		fk_st.launches++;
		fk_log(F_LAUNCH, fk_stream(h)->id, 0, 0, o->ns);
	}
	END
}

API CUresult cuGetErrorName(CUresult r, const char **s)
{
	static const struct {
		CUresult r;
		const char *name;
	} names[] = {
#define N(x) {x, #x}
	    N(CUDA_SUCCESS),
	    N(CUDA_ERROR_INVALID_VALUE),
	    N(CUDA_ERROR_OUT_OF_MEMORY),
	    N(CUDA_ERROR_NOT_INITIALIZED),
	    N(CUDA_ERROR_NO_DEVICE),
	    N(CUDA_ERROR_INVALID_DEVICE),
	    N(CUDA_ERROR_INVALID_CONTEXT),
	    N(CUDA_ERROR_INVALID_HANDLE),
	    N(CUDA_ERROR_ILLEGAL_STATE),
	    N(CUDA_ERROR_NOT_FOUND),
	    N(CUDA_ERROR_NOT_READY),
	    N(CUDA_ERROR_ILLEGAL_ADDRESS),
	    N(CUDA_ERROR_LAUNCH_FAILED),
	    N(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED),
	    N(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED),
	    N(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED),
	    N(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED),
	    N(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD),
	    N(CUDA_ERROR_UNKNOWN),
#undef N
	};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].r == r) {
			*s = names[i].name;
			return CUDA_SUCCESS;
		}
	*s = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

static const struct {
	const char *name;
	void *fn;
} table[] = {
    {"cuInit", (void *)cuInit},
    {"cuDriverGetVersion", (void *)cuDriverGetVersion},
    {"cuDeviceGetCount", (void *)cuDeviceGetCount},
    {"cuDeviceGet", (void *)cuDeviceGet},
    {"cuDevicePrimaryCtxRetain", (void *)cuDevicePrimaryCtxRetain},
    {"cuDevicePrimaryCtxRelease", (void *)cuDevicePrimaryCtxRelease_v2},
    {"cuCtxSetCurrent", (void *)cuCtxSetCurrent},
    {"cuCtxPushCurrent", (void *)cuCtxPushCurrent_v2},
    {"cuCtxPopCurrent", (void *)cuCtxPopCurrent_v2},
    {"cuCtxGetCurrent", (void *)cuCtxGetCurrent},
    {"cuCtxDestroy", (void *)cuCtxDestroy_v2},
    {"cuMemHostRegister", (void *)cuMemHostRegister_v2},
    {"cuMemHostUnregister", (void *)cuMemHostUnregister},
    {"cuMemAlloc", (void *)cuMemAlloc_v2},
    {"cuMemFree", (void *)cuMemFree_v2},
    {"cuMemcpyHtoDAsync", (void *)cuMemcpyHtoDAsync_v2},
    {"cuMemcpyDtoDAsync", (void *)cuMemcpyDtoDAsync_v2},
    {"cuStreamCreate", (void *)cuStreamCreate},
    {"cuStreamDestroy", (void *)cuStreamDestroy_v2},
    {"cuStreamWaitEvent", (void *)cuStreamWaitEvent},
    {"cuStreamSynchronize", (void *)cuStreamSynchronize},
    {"cuStreamBeginCapture", (void *)cuStreamBeginCapture_v2},
    {"cuStreamEndCapture", (void *)cuStreamEndCapture},
    {"cuStreamIsCapturing", (void *)cuStreamIsCapturing},
    {"cuGraphDestroy", (void *)cuGraphDestroy},
    {"cuThreadExchangeStreamCaptureMode",
     (void *)cuThreadExchangeStreamCaptureMode},
    {"cuEventCreate", (void *)cuEventCreate},
    {"cuEventRecord", (void *)cuEventRecord},
    {"cuEventQuery", (void *)cuEventQuery},
    {"cuEventSynchronize", (void *)cuEventSynchronize},
    {"cuEventDestroy", (void *)cuEventDestroy_v2},
    {"cuGetErrorName", (void *)cuGetErrorName},
    {"cuDeviceGetName", (void *)cuDeviceGetName},
    {"cuMemcpyHtoD", (void *)cuMemcpyHtoD_v2},
    {"cuMemcpyDtoH", (void *)cuMemcpyDtoH_v2},
    {"cuModuleLoadData", (void *)cuModuleLoadData},
    {"cuModuleLoadDataEx", (void *)cuModuleLoadDataEx},
    {"cuModuleGetFunction", (void *)cuModuleGetFunction},
    {"cuModuleUnload", (void *)cuModuleUnload},
    {"cuLaunchKernel", (void *)cuLaunchKernel},
};

/* Only the 12.0 ABI is offered; anything else is "not found". */
API CUresult cuGetProcAddress_v2(const char *sym, void **fn, int ver,
				 cuuint64_t flags,
				 CUdriverProcAddressQueryResult *status)
{
	*fn = NULL;
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		if (strcmp(table[i].name, sym) == 0 && ver >= 12000)
			*fn = table[i].fn;
	if (status)
		*status = *fn ? CU_GET_PROC_ADDRESS_SUCCESS
			      : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	return *fn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}
