/* A fake CUDA driver for the loader's tests: built as libcuda.so.1 and
 * picked up through LD_LIBRARY_PATH, so the loader's real dlopen,
 * cuGetProcAddress and AUTO detection run against it.
 *
 * It implements the ~25 entry points the loader uses, plus the few more
 * bench_loader uses (modules, kernel launch, synchronous copies). "Device"
 * memory is
 * malloc'ed (a CUdeviceptr is the host address). Each stream is a FIFO
 * executed by its own thread: copies sleep a delay and then memcpy, a
 * kernel sleeps the u64 nanoseconds of its first parameter (the contract of
 * bench_loader's spin kernel; any other kernel would do nothing), event
 * records complete when the stream reaches them, waits block the stream
 * until the recorded work of the event is done — so a missing
 * cuStreamWaitEvent shows up as wrong bytes in a later check. Every call is
 * logged (struct fake_rec) and misuse is counted as a violation: a call
 * without a current context, an unbalanced pop, a wait on an event never
 * recorded, events created without CU_EVENT_DISABLE_TIMING, a copy from
 * unregistered (pageable) memory, a host registration not page aligned, a
 * launch of a function whose module was unloaded.
 *
 * Environment: FAKE_LIBCUDA_CORRUPT=1 flips the last byte of every
 * asynchronous copy (tests that a copy-back check really compares);
 * FAKE_LIBCUDA_REPORT=1 prints the counters of struct fake_stats to stderr
 * at exit ("fake libcuda: violations=0 ...", for tests of whole programs).
 *
 * Test-only code: one global state under one mutex. */
#include "tests/loader/fake_libcuda.h"

#include <cuda.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

struct fevent {
	unsigned id;
	unsigned long recorded, done; /* generations */
};

struct sop {
	enum { S_COPY, S_RECORD, S_WAIT, S_CHECK, S_KERNEL } kind;
	struct fevent *ev;
	unsigned long gen;
	void *dst;
	const void *src;
	size_t n;
	unsigned delay;
	int corrupt;	       /* S_COPY: flip the last byte */
	unsigned long long ns; /* S_KERNEL: run time */
	void *expect;
	struct sop *next;
};

struct fstream {
	unsigned id;
	struct sop *head, *tail;
	int busy, stop;
	pthread_t th;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static struct fake_rec *recs;
static size_t nrecs, caprecs;
static struct fake_stats st;
static unsigned next_stream = 1, next_event = 1, copy_delay = 300;
static struct fstream *null_stream;
static void *reg_ptr[16];
static size_t reg_len[16];
static __thread int ctx_depth; /* push/set count on this thread */
static int fake_ctx_storage;
static long copies_live; /* copies since the registrations began */
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

static void violation(const char *fmt, ...)
{
	va_list ap;
	st.violations++;
	va_start(ap, fmt);
	vsnprintf(st.last_violation, sizeof(st.last_violation), fmt, ap);
	va_end(ap);
}

static void logrec(enum fake_op op, unsigned s, unsigned e, uint64_t a,
		   uint64_t n)
{
	if (nrecs == caprecs) {
		caprecs = caprecs ? 2 * caprecs : 1024;
		recs = realloc(recs, caprecs * sizeof(*recs));
	}
	recs[nrecs++] = (struct fake_rec){op, s, e, a, n};
}

/* Calls that need a current context. mu held. */
static int need_ctx(const char *fn)
{
	if (ctx_depth > 0)
		return 0;
	violation("%s without a current context", fn);
	return 1;
}

static void *stream_main(void *arg)
{
	struct fstream *s = arg;
	struct sop *o;

	pthread_mutex_lock(&mu);
	for (;;) {
		while (!s->head && !s->stop)
			pthread_cond_wait(&cv, &mu);
		if (!s->head)
			break;
		o = s->head;
		s->busy = 1;
		if (o->kind == S_WAIT) {
			while (o->ev->done < o->gen)
				pthread_cond_wait(&cv, &mu);
		} else if (o->kind == S_RECORD) {
			if (o->ev->done < o->gen)
				o->ev->done = o->gen;
		} else if (o->kind == S_KERNEL) {
			struct timespec ts = {(time_t)(o->ns / 1000000000),
					      (long)(o->ns % 1000000000)};
			pthread_mutex_unlock(&mu);
			nanosleep(&ts, NULL);
			pthread_mutex_lock(&mu);
		} else {
			pthread_mutex_unlock(&mu);
			usleep(o->delay);
			if (o->kind == S_COPY)
				memcpy(o->dst, o->src, o->n);
			if (o->kind == S_COPY && o->corrupt && o->n)
				((unsigned char *)o->dst)[o->n - 1] ^= 0x5a;
			pthread_mutex_lock(&mu);
			if (o->kind == S_CHECK) {
				st.checks++;
				if (memcmp(o->dst, o->expect, o->n) != 0)
					st.check_failures++;
				free(o->expect);
			}
		}
		s->head = o->next;
		if (!s->head)
			s->tail = NULL;
		s->busy = 0;
		free(o);
		pthread_cond_broadcast(&cv);
	}
	pthread_mutex_unlock(&mu);
	return NULL;
}

static struct fstream *stream_new(void)
{
	struct fstream *s = calloc(1, sizeof(*s));
	s->id = next_stream++;
	pthread_create(&s->th, NULL, stream_main, s);
	return s;
}

/* The stream object of a handle; NULL = the legacy default stream. */
static struct fstream *S(CUstream h)
{
	if (!h) {
		if (!null_stream) {
			null_stream = stream_new();
			null_stream->id = 0;
			next_stream--;
		}
		return null_stream;
	}
	return (struct fstream *)h;
}

static void push_op(struct fstream *s, struct sop *o)
{
	if (s->tail)
		s->tail->next = o;
	else
		s->head = o;
	s->tail = o;
	pthread_cond_broadcast(&cv);
}

static void drain(struct fstream *s)
{
	while (s->head || s->busy)
		pthread_cond_wait(&cv, &mu);
}

static int registered(const void *p, size_t n)
{
	for (int i = 0; i < 16; i++)
		if (reg_ptr[i] && (const char *)p >= (char *)reg_ptr[i] &&
		    (const char *)p + n <= (char *)reg_ptr[i] + reg_len[i])
			return 1;
	return 0;
}

/* ---- the driver API ---- */
#define LOCKED(body)                                                           \
	do {                                                                   \
		pthread_mutex_lock(&mu);                                       \
		body;                                                          \
		pthread_mutex_unlock(&mu);                                     \
	} while (0)

API CUresult cuInit(unsigned f)
{
	return CUDA_SUCCESS;
}

API CUresult cuDriverGetVersion(int *v)
{
	*v = 12080;
	return CUDA_SUCCESS;
}

API CUresult cuDeviceGetCount(int *n)
{
	*n = 1;
	return CUDA_SUCCESS;
}

API CUresult cuDeviceGet(CUdevice *d, int ord)
{
	if (ord != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	*d = 0;
	return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
	LOCKED(st.ctx_retained++);
	*c = (CUcontext)&fake_ctx_storage;
	return CUDA_SUCCESS;
}

API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
	LOCKED(st.ctx_retained--);
	return CUDA_SUCCESS;
}

API CUresult cuCtxSetCurrent(CUcontext c)
{
	ctx_depth = c ? 1 : 0;
	return CUDA_SUCCESS;
}

API CUresult cuCtxPushCurrent_v2(CUcontext c)
{
	ctx_depth++;
	return CUDA_SUCCESS;
}

API CUresult cuCtxPopCurrent_v2(CUcontext *c)
{
	if (ctx_depth <= 0) {
		LOCKED(violation("cuCtxPopCurrent with nothing pushed"));
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	ctx_depth--;
	*c = (CUcontext)&fake_ctx_storage;
	return CUDA_SUCCESS;
}

API CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags)
{
	pthread_mutex_lock(&mu);
	need_ctx("cuMemHostRegister");
	if (((uintptr_t)p | n) % 4096)
		violation("cuMemHostRegister of unaligned memory");
	for (int i = 0; i < 16; i++)
		if (!reg_ptr[i]) {
			reg_ptr[i] = p;
			reg_len[i] = n;
			break;
		}
	st.register_calls++;
	if (st.registered && copies_live)
		st.register_after_copy++;
	st.registered++;
	logrec(F_REGISTER, 0, 0, (uintptr_t)p, n);
	pthread_mutex_unlock(&mu);
	return CUDA_SUCCESS;
}

API CUresult cuMemHostUnregister(void *p)
{
	CUresult r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	pthread_mutex_lock(&mu);
	need_ctx("cuMemHostUnregister");
	for (int i = 0; i < 16; i++)
		if (reg_ptr[i] == p) {
			reg_ptr[i] = NULL;
			r = CUDA_SUCCESS;
		}
	st.unregister_calls++;
	st.registered -= r == CUDA_SUCCESS;
	if (st.registered && copies_live)
		st.register_after_copy++; /* unpinning while streaming */
	if (!st.registered)
		copies_live = 0;
	logrec(F_UNREGISTER, 0, 0, (uintptr_t)p, 0);
	pthread_mutex_unlock(&mu);
	return r;
}

API CUresult cuMemAlloc_v2(CUdeviceptr *d, size_t n)
{
	void *p = aligned_alloc(4096, (n + 4095) / 4096 * 4096);
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memset(p, 0xee, n);
	*d = (CUdeviceptr)(uintptr_t)p;
	LOCKED(need_ctx("cuMemAlloc"); st.allocs++;
	       logrec(F_ALLOC, 0, 0, *d, n));
	return CUDA_SUCCESS;
}

API CUresult cuMemFree_v2(CUdeviceptr d)
{
	LOCKED(need_ctx("cuMemFree"); st.allocs--; logrec(F_FREE, 0, 0, d, 0));
	free((void *)(uintptr_t)d);
	return CUDA_SUCCESS;
}

API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *src, size_t n,
				  CUstream h)
{
	struct sop *o = calloc(1, sizeof(*o));
	pthread_mutex_lock(&mu);
	need_ctx("cuMemcpyHtoDAsync");
	if (!registered(src, n))
		violation("copy from unregistered (pageable) host memory");
	*o = (struct sop){.kind = S_COPY,
			  .dst = (void *)(uintptr_t)d,
			  .src = src,
			  .n = n,
			  .delay = copy_delay,
			  .corrupt = getenv("FAKE_LIBCUDA_CORRUPT") != NULL};
	push_op(S(h), o);
	st.copies++;
	copies_live++;
	logrec(F_COPY, S(h)->id, 0, d, n);
	pthread_mutex_unlock(&mu);
	return CUDA_SUCCESS;
}

API CUresult cuStreamCreate(CUstream *h, unsigned flags)
{
	pthread_mutex_lock(&mu);
	need_ctx("cuStreamCreate");
	*h = (CUstream)stream_new();
	st.streams++;
	pthread_mutex_unlock(&mu);
	return CUDA_SUCCESS;
}

API CUresult cuStreamDestroy_v2(CUstream h)
{
	struct fstream *s = S(h);
	pthread_mutex_lock(&mu);
	need_ctx("cuStreamDestroy");
	drain(s);
	s->stop = 1;
	pthread_cond_broadcast(&cv);
	st.streams--;
	pthread_mutex_unlock(&mu);
	pthread_join(s->th, NULL);
	free(s);
	return CUDA_SUCCESS;
}

API CUresult cuStreamWaitEvent(CUstream h, CUevent e, unsigned flags)
{
	struct fevent *ev = (struct fevent *)e;
	struct sop *o = calloc(1, sizeof(*o));
	pthread_mutex_lock(&mu);
	need_ctx("cuStreamWaitEvent");
	if (!ev->recorded)
		violation("wait on event %u that was never recorded", ev->id);
	*o = (struct sop){.kind = S_WAIT, .ev = ev, .gen = ev->recorded};
	push_op(S(h), o);
	logrec(F_WAIT, S(h)->id, ev->id, 0, 0);
	pthread_mutex_unlock(&mu);
	return CUDA_SUCCESS;
}

API CUresult cuStreamSynchronize(CUstream h)
{
	LOCKED(need_ctx("cuStreamSynchronize");
	       logrec(F_STREAM_SYNC, S(h)->id, 0, 0, 0); drain(S(h)));
	return CUDA_SUCCESS;
}

API CUresult cuEventCreate(CUevent *e, unsigned flags)
{
	struct fevent *ev = calloc(1, sizeof(*ev));
	pthread_mutex_lock(&mu);
	need_ctx("cuEventCreate");
	if (!(flags & CU_EVENT_DISABLE_TIMING))
		violation("event created with timing enabled");
	ev->id = next_event++;
	st.events++;
	pthread_mutex_unlock(&mu);
	*e = (CUevent)ev;
	return CUDA_SUCCESS;
}

API CUresult cuEventRecord(CUevent e, CUstream h)
{
	struct fevent *ev = (struct fevent *)e;
	struct sop *o = calloc(1, sizeof(*o));
	pthread_mutex_lock(&mu);
	need_ctx("cuEventRecord");
	*o = (struct sop){.kind = S_RECORD, .ev = ev, .gen = ++ev->recorded};
	push_op(S(h), o);
	logrec(F_RECORD, S(h)->id, ev->id, 0, 0);
	pthread_mutex_unlock(&mu);
	return CUDA_SUCCESS;
}

API CUresult cuEventQuery(CUevent e)
{
	struct fevent *ev = (struct fevent *)e;
	CUresult r;
	LOCKED(need_ctx("cuEventQuery"); r = ev->done >= ev->recorded
						 ? CUDA_SUCCESS
						 : CUDA_ERROR_NOT_READY);
	return r;
}

API CUresult cuEventSynchronize(CUevent e)
{
	struct fevent *ev = (struct fevent *)e;
	pthread_mutex_lock(&mu);
	need_ctx("cuEventSynchronize");
	logrec(F_EVENT_SYNC, 0, ev->id, 0, 0);
	unsigned long want = ev->recorded;
	while (ev->done < want)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	return CUDA_SUCCESS;
}

API CUresult cuEventDestroy_v2(CUevent e)
{
	LOCKED(need_ctx("cuEventDestroy"); st.events--);
	free(e);
	return CUDA_SUCCESS;
}

API CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
	snprintf(name, (size_t)len, "fake CUDA device %d", (int)d);
	return CUDA_SUCCESS;
}

/* Synchronous copies: ordered after the legacy default stream's work. */
static CUresult copy_sync(const char *fn, void *dst, const void *src, size_t n,
			  uint64_t dptr)
{
	pthread_mutex_lock(&mu);
	need_ctx(fn);
	drain(S(NULL));
	logrec(F_COPY_SYNC, 0, 0, dptr, n);
	pthread_mutex_unlock(&mu);
	memcpy(dst, src, n);
	return CUDA_SUCCESS;
}

API CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *src, size_t n)
{
	return copy_sync("cuMemcpyHtoD", (void *)(uintptr_t)d, src, n, d);
}

API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr d, size_t n)
{
	return copy_sync("cuMemcpyDtoH", dst, (const void *)(uintptr_t)d, n, d);
}

/* A module is PTX text: it must name a .version and a .target. */
API CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned nopt,
				CUjit_option *opt, void **val)
{
	const char *ptx = image;
	CUresult r = CUDA_ERROR_INVALID_IMAGE;
	pthread_mutex_lock(&mu);
	need_ctx("cuModuleLoadData");
	if (ptx && strstr(ptx, ".version ") && strstr(ptx, ".target ") &&
	    nmodules < 16) {
		modules[nmodules].image = strdup(ptx);
		*m = (CUmodule)&modules[nmodules++];
		st.modules++;
		r = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&mu);
	return r;
}

API CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
	return cuModuleLoadDataEx(m, image, 0, NULL, NULL);
}

/* The function must be declared ".entry name(" in the module's PTX. */
API CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
	struct fmodule *mod = (struct fmodule *)m;
	CUresult r = CUDA_ERROR_NOT_FOUND;
	char decl[80];
	snprintf(decl, sizeof(decl), ".entry %s(", name);
	pthread_mutex_lock(&mu);
	need_ctx("cuModuleGetFunction");
	if (!mod->image)
		violation("cuModuleGetFunction on an unloaded module");
	else if (strstr(mod->image, decl) && nfuncs < 16) {
		funcs[nfuncs].mod = mod;
		snprintf(funcs[nfuncs].name, sizeof(funcs[0].name), "%s", name);
		*f = (CUfunction)&funcs[nfuncs++];
		r = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&mu);
	return r;
}

API CUresult cuModuleUnload(CUmodule m)
{
	struct fmodule *mod = (struct fmodule *)m;
	LOCKED(need_ctx("cuModuleUnload"); free(mod->image); mod->image = NULL;
	       st.modules--);
	return CUDA_SUCCESS;
}

/* Runs as a sleep of *(uint64_t *)params[0] ns on the stream. */
API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
			    unsigned bx, unsigned by, unsigned bz,
			    unsigned shmem, CUstream h, void **params,
			    void **extra)
{
	struct ffunc *fn = (struct ffunc *)f;
	struct sop *o;
	if (!fn || !gx || !gy || !gz || !bx || !by || !bz || !params)
		return CUDA_ERROR_INVALID_VALUE;
	o = calloc(1, sizeof(*o));
	o->kind = S_KERNEL;
	memcpy(&o->ns, params[0], sizeof(o->ns));
	pthread_mutex_lock(&mu);
	need_ctx("cuLaunchKernel");
	if (!fn->mod->image)
		violation("launch of %s after its module was unloaded",
			  fn->name);
	push_op(S(h), o);
	st.launches++;
	logrec(F_LAUNCH, S(h)->id, 0, 0, o->ns);
	pthread_mutex_unlock(&mu);
	return CUDA_SUCCESS;
}

API CUresult cuGetErrorName(CUresult r, const char **s)
{
	*s = r == CUDA_SUCCESS ? "CUDA_SUCCESS" : "CUDA_ERROR_FAKE";
	return CUDA_SUCCESS;
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
    {"cuMemHostRegister", (void *)cuMemHostRegister_v2},
    {"cuMemHostUnregister", (void *)cuMemHostUnregister},
    {"cuMemAlloc", (void *)cuMemAlloc_v2},
    {"cuMemFree", (void *)cuMemFree_v2},
    {"cuMemcpyHtoDAsync", (void *)cuMemcpyHtoDAsync_v2},
    {"cuStreamCreate", (void *)cuStreamCreate},
    {"cuStreamDestroy", (void *)cuStreamDestroy_v2},
    {"cuStreamWaitEvent", (void *)cuStreamWaitEvent},
    {"cuStreamSynchronize", (void *)cuStreamSynchronize},
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

/* ---- test hooks (fake_libcuda.h) ---- */
API void fake_log(const struct fake_rec **r, size_t *n)
{
	LOCKED(*r = recs; *n = nrecs);
}

API void fake_mark(uint64_t kind, uint64_t arg)
{
	LOCKED(logrec(F_MARK, 0, 0, kind, arg));
}

API void fake_stats(struct fake_stats *out)
{
	LOCKED(*out = st);
}

API void fake_config(unsigned delay_us)
{
	LOCKED(copy_delay = delay_us);
}

API void fake_enqueue_check(void *h, uint64_t d, const void *expect, size_t n,
			    unsigned delay_us)
{
	struct sop *o = calloc(1, sizeof(*o));
	*o = (struct sop){.kind = S_CHECK,
			  .dst = (void *)(uintptr_t)d,
			  .n = n,
			  .delay = delay_us,
			  .expect = malloc(n)};
	memcpy(o->expect, expect, n);
	LOCKED(push_op(S((CUstream)h), o));
}

/* FAKE_LIBCUDA_REPORT=1: the counters at exit, for tests of programs that
 * know nothing of the fake (test_bench_loader_fake.sh). */
__attribute__((destructor)) static void report(void)
{
	if (!getenv("FAKE_LIBCUDA_REPORT"))
		return;
	pthread_mutex_lock(&mu);
	fprintf(stderr,
		"fake libcuda: violations=%ld ctx_retained=%ld streams=%ld "
		"events=%ld allocs=%ld registered=%ld modules=%ld "
		"launches=%ld copies=%ld last_violation=\"%s\"\n",
		st.violations, st.ctx_retained, st.streams, st.events,
		st.allocs, st.registered, st.modules, st.launches, st.copies,
		st.last_violation);
	pthread_mutex_unlock(&mu);
}
