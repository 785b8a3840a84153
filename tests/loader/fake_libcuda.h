/* Test-only interface of the fake CUDA driver (tests/loader/fake_libcuda.c,
 * built as build/tests/fake/libcuda.so.1). Tests reach these functions with
 * dlopen("libcuda.so.1") + dlsym, i.e. the same instance the loader got. */
#ifndef BFS_TEST_FAKE_LIBCUDA_H
#define BFS_TEST_FAKE_LIBCUDA_H

#include <stddef.h>
#include <stdint.h>

enum fake_op {
	F_REGISTER = 1, /* a = host ptr, n = bytes */
	F_UNREGISTER,	/* a = host ptr */
	F_ALLOC,	/* a = dptr, n = bytes */
	F_FREE,		/* a = dptr */
	F_COPY,		/* stream, a = dptr, n = bytes (enqueued) */
	F_RECORD,	/* stream, event */
	F_WAIT,		/* stream waits for event */
	F_EVENT_SYNC,	/* event */
	F_STREAM_SYNC,	/* stream */
	F_MARK,		/* a = test's mark kind, n = argument */
	F_LAUNCH,	/* stream, n = nanoseconds the "kernel" runs */
	F_COPY_SYNC,	/* a = dptr, n = bytes (cuMemcpyHtoD / DtoH) */
};

/* One driver call, in call order. Streams and events are small ids
 * (stream 0 = the NULL stream). */
struct fake_rec {
	enum fake_op op;
	unsigned stream, event;
	uint64_t a, n;
};

/* Live objects and call counts. */
struct fake_stats {
	long ctx_retained;    /* retains - releases */
	long streams, events; /* created - destroyed */
	long allocs;	      /* cuMemAlloc - cuMemFree */
	long registered;      /* register - unregister */
	long register_calls, unregister_calls, copies;
	long register_after_copy;    /* (un)pin calls once copying started */
	long checks, check_failures; /* fake_enqueue_check results */
	long modules;		     /* cuModuleLoadData(Ex) - cuModuleUnload */
	long launches;		     /* cuLaunchKernel calls */
	long violations; /* misuse: no context, unrecorded wait, ... */
	char last_violation[256];
};

typedef void (*fake_log_fn)(const struct fake_rec **recs, size_t *n);
typedef void (*fake_mark_fn)(uint64_t kind, uint64_t arg);
typedef void (*fake_stats_fn)(struct fake_stats *st);
/* Enqueue on 'stream' (a CUstream): sleep delay_us, then compare n bytes
 * of device memory at dptr with 'expect' (copied now). Stands in for the
 * consumer's kernel reading the batch in stream order. */
typedef void (*fake_check_fn)(void *stream, uint64_t dptr, const void *expect,
			      size_t n, unsigned delay_us);
/* Delay of every "copy" on its stream (default 300 us). */
typedef void (*fake_config_fn)(unsigned copy_delay_us);

/* The hooks themselves (exported by the fake; tests use dlsym). */
void fake_log(const struct fake_rec **recs, size_t *n);
void fake_mark(uint64_t kind, uint64_t arg);
void fake_stats(struct fake_stats *st);
void fake_enqueue_check(void *stream, uint64_t dptr, const void *expect,
			size_t n, unsigned delay_us);
void fake_config(unsigned copy_delay_us);

#endif
