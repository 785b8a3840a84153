/* Test-only interface of the fake CUDA driver (tests/loader/fake_libcuda.c,
 * built as build/tests/fake/libcuda.so.1). C tests link the fake, so the
 * loader's dlopen("libcuda.so.1") finds the same instance; Python tests
 * reach it with ctypes.CDLL of the path the loader is given. */
#ifndef BFS_TEST_FAKE_LIBCUDA_H
#define BFS_TEST_FAKE_LIBCUDA_H

#include <stddef.h>
#include <stdint.h>

enum fake_op {
	F_REGISTER = 1,	 /* a = host ptr, n = bytes */
	F_UNREGISTER,	 /* a = host ptr */
	F_ALLOC,	 /* a = dptr, n = bytes */
	F_FREE,		 /* a = dptr */
	F_COPY,		 /* stream, a = dptr, n = bytes (enqueued) */
	F_RECORD,	 /* stream, event */
	F_WAIT,		 /* stream waits for event */
	F_EVENT_SYNC,	 /* event, n = 1 when the wait spins */
	F_STREAM_SYNC,	 /* stream, n = 1 when the wait spins */
	F_MARK,		 /* a = test's mark kind, n = argument */
	F_LAUNCH,	 /* stream, n = nanoseconds the "kernel" runs */
	F_COPY_SYNC,	 /* a = dptr, n = bytes (cuMemcpyHtoD / DtoH) */
	F_STREAM_CREATE, /* stream, n = flags */
	F_EVENT_CREATE,	 /* event, n = flags */
};

/* One driver call, in call order. Streams and events are small ids
 * (stream 0 = the legacy default stream). */
struct fake_rec {
	enum fake_op op;
	unsigned stream, event;
	uint64_t a, n;
};

/* Live objects and call counts. */
struct fake_stats {
	long ctx_retained;    /* retains - releases of the primary context */
	long ctx_created;     /* cuCtxCreate - cuCtxDestroy */
	long streams, events; /* created - destroyed */
	long allocs;	      /* cuMemAlloc - cuMemFree */
	long registered;      /* register - unregister */
	long register_calls, unregister_calls, copies;
	long register_after_copy;    /* (un)pin calls once copying started */
	long checks, check_failures; /* fake_enqueue_check results */
	long modules;		     /* cuModuleLoadData(Ex) - cuModuleUnload */
	long launches;		     /* cuLaunchKernel calls */
	/* Synchronize calls that spin on a real driver (an event without
	 * CU_EVENT_BLOCKING_SYNC, or any cuStreamSynchronize, in a context
	 * whose scheduling is not CU_CTX_SCHED_BLOCKING_SYNC): counted at the
	 * call, whatever the event's state. The fake spins too, so the time
	 * shows as CPU time of the waiting thread (spin_ns: wall time spent
	 * spinning). blocking_syncs: the calls that slept instead. */
	long spin_syncs, blocking_syncs;
	long long spin_ns;
	/* Operations that got an implicit dependency through the legacy
	 * default stream (a blocking stream's op enqueued while the legacy
	 * stream had pending work, or the reverse), counted at enqueue. */
	long implicit_deps;
	long injected;		 /* calls failed by fake_fail */
	long capture_violations; /* unsafe calls refused during a capture */
	long violations;	 /* misuse: no context, unrecorded wait, ... */
	char last_violation[256];
};

/* The call log so far (valid until the next driver call) and a mark of
 * the test's own in it. */
void fake_log(const struct fake_rec **recs, size_t *n);
void fake_mark(uint64_t kind, uint64_t arg);
void fake_stats(struct fake_stats *st);
/* Enqueue on 'stream' (a CUstream): sleep delay_us, then compare n bytes
 * of device memory at dptr with 'expect' (copied now). Stands in for the
 * consumer's kernel reading the batch in stream order. */
void fake_enqueue_check(void *stream, uint64_t dptr, const void *expect,
			size_t n, unsigned delay_us);
/* Delay of every "copy" on its stream (default 300 us). */
void fake_config(unsigned copy_delay_us);
/* Fail calls of the driver function 'fn' (its cuda.h base name, e.g.
 * "cuMemAlloc"): the nth call from now (1 = the next one) and the
 * count - 1 after it return 'code'; the call has no other effect. */
void fake_fail(const char *fn, long nth, int code, long count);
/* Pause the nth call of 'fn' from now at its entry until fake_resume(fn);
 * fake_paused waits (at most timeout_s) until a thread is paused in 'fn'
 * and returns 0, or -1 on timeout (a test bug or a missing call). */
void fake_pause(const char *fn, long nth);
int fake_paused(const char *fn, unsigned timeout_s);
void fake_resume(const char *fn);
/* A stream operation that holds its stream until fake_unhold(id). */
void fake_hold(void *stream, unsigned id);
void fake_unhold(unsigned id);
/* A "kernel" that runs 'us' microseconds on 'stream'. */
void fake_sleep(void *stream, unsigned us);

#endif
