/* Internals of the fake CUDA driver shared by its two files: the model of
 * contexts, streams, events and captures (fake_model.c) and the driver
 * entry points over it (fake_libcuda.c). Not a test interface: tests use
 * fake_libcuda.h. Everything here has hidden visibility, so the fake
 * exports only the cu* functions and the fake_* hooks. */
#ifndef BFS_TEST_FAKE_MODEL_H
#define BFS_TEST_FAKE_MODEL_H

#include "tests/loader/fake_libcuda.h"

#include <cuda.h>
#include <pthread.h>

#define API __attribute__((visibility("default")))

#pragma GCC visibility push(hidden)

/* The entry points with test control (failures, pauses); the second
 * column marks those that are potentially unsafe during a stream capture
 * (allocation, registration, event query/synchronize, synchronization). */
#define FAKE_FUNCS(X)                                                          \
	X(cuInit, 0)                                                           \
	X(cuDriverGetVersion, 0)                                               \
	X(cuDeviceGetCount, 0)                                                 \
	X(cuDeviceGet, 0)                                                      \
	X(cuDeviceGetName, 0)                                                  \
	X(cuDevicePrimaryCtxRetain, 0)                                         \
	X(cuDevicePrimaryCtxRelease, 0)                                        \
	X(cuCtxSetCurrent, 0)                                                  \
	X(cuCtxPushCurrent, 0)                                                 \
	X(cuCtxPopCurrent, 0)                                                  \
	X(cuCtxGetCurrent, 0)                                                  \
	X(cuCtxCreate, 0)                                                      \
	X(cuCtxDestroy, 0)                                                     \
	X(cuMemHostRegister, 1)                                                \
	X(cuMemHostUnregister, 1)                                              \
	X(cuMemAlloc, 1)                                                       \
	X(cuMemFree, 1)                                                        \
	X(cuMemcpyHtoDAsync, 0)                                                \
	X(cuMemcpyDtoDAsync, 0)                                                \
	X(cuMemcpyHtoD, 1)                                                     \
	X(cuMemcpyDtoH, 1)                                                     \
	X(cuStreamCreate, 0)                                                   \
	X(cuStreamDestroy, 0)                                                  \
	X(cuStreamWaitEvent, 0)                                                \
	X(cuStreamSynchronize, 1)                                              \
	X(cuStreamBeginCapture, 0)                                             \
	X(cuStreamEndCapture, 0)                                               \
	X(cuStreamIsCapturing, 0)                                              \
	X(cuGraphDestroy, 0)                                                   \
	X(cuThreadExchangeStreamCaptureMode, 0)                                \
	X(cuEventCreate, 0)                                                    \
	X(cuEventRecord, 0)                                                    \
	X(cuEventQuery, 1)                                                     \
	X(cuEventSynchronize, 1)                                               \
	X(cuEventDestroy, 0)                                                   \
	X(cuModuleLoadData, 0)                                                 \
	X(cuModuleGetFunction, 0)                                              \
	X(cuModuleUnload, 0)                                                   \
	X(cuLaunchKernel, 0)

enum fk_fn {
#define ENUM(name, unsafe) FN_##name,
	FAKE_FUNCS(ENUM)
#undef ENUM
	    FK_NFN
};

struct fctx {
	unsigned id, flags;
	struct fstream *legacy; /* its legacy default stream, lazily */
	struct fctx *all_next;
};

struct fevent {
	unsigned id, flags;
	struct fctx *ctx;
	unsigned long recorded; /* records so far; the latest is 'recorded' */
	unsigned char *done;	/* done[g]: record g ran on its stream */
	size_t cap;
	struct fevent *all_next;
};

struct fstream;
struct dep {
	struct fstream *s;
	unsigned long upto; /* wait until s->done >= upto */
};

/* One operation of a stream. */
struct sop {
	enum { S_COPY, S_RECORD, S_WAIT, S_CHECK, S_KERNEL, S_HOLD } kind;
	struct fevent *ev;
	unsigned long gen, seq;
	void *dst;
	const void *src;
	size_t n;
	unsigned delay;
	int corrupt;	       /* S_COPY: flip the last byte */
	unsigned long long ns; /* S_KERNEL: run time */
	unsigned hold;	       /* S_HOLD: id */
	void *expect;
	struct dep *deps; /* implicit legacy-stream dependencies */
	unsigned ndeps;
	struct sop *next;
};

struct fstream {
	unsigned id, flags;
	int legacy;
	struct fctx *ctx;
	struct sop *head, *tail;
	int busy, stop, dead;
	unsigned long enq, done; /* ops enqueued / completed (in order) */
	pthread_t th;
	/* capture */
	int capturing, cap_mode, cap_invalid;
	pthread_t cap_thread;
	struct fstream *all_next;
};

/* The state (fake_model.c), all under fk_mu. */
extern pthread_mutex_t fk_mu;
extern pthread_cond_t fk_cv; /* any change */
extern struct fake_stats fk_st;
extern struct fctx fk_primary;
extern unsigned fk_copy_delay;
extern long fk_copies_live; /* copies since the registrations began */
extern void *fk_reg_ptr[16];
extern size_t fk_reg_len[16];
/* Per thread: the context stack and the stream capture mode. */
extern __thread struct fctx *fk_ctx_stack[16];
extern __thread int fk_ctx_depth;
extern __thread int fk_cap_mode;

/* All of these run with fk_mu held. */
void fk_violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fk_log(enum fake_op op, unsigned s, unsigned e, uint64_t a, uint64_t n);
struct fctx *fk_current(void);
/* The current context, or NULL after counting a violation of 'fn'. */
struct fctx *fk_need_ctx(const char *fn);
/* Entry of every controlled call: count it, pause it if asked, refuse it
 * during a capture, fail it if asked. Returns what the call returns. */
CUresult fk_enter(enum fk_fn f);
const char *fk_name(enum fk_fn f);
struct fctx *fk_ctx_new(unsigned flags);
struct fevent *fk_event_new(struct fctx *c, unsigned flags);
struct fstream *fk_stream_new(struct fctx *c, unsigned flags);
/* The stream of a handle: NULL and CU_STREAM_LEGACY are the current
 * context's legacy stream, CU_STREAM_PER_THREAD this thread's. */
struct fstream *fk_stream(CUstream h);
struct sop *fk_op(int kind);
/* Enqueue o on s. 'fn' names the driver call (its context is checked);
 * NULL for the test hooks. */
void fk_push(struct fstream *s, struct sop *o, const char *fn);
int fk_event_done(const struct fevent *ev, unsigned long gen);
/* Block until record 'gen' of ev ran / until s ran all its ops; 'spin'
 * as on a real driver (see fake_libcuda.c). */
void fk_wait_event(const struct fevent *ev, unsigned long gen, int spin);
void fk_wait_stream(const struct fstream *s, int spin);
int fk_registered(const void *p, size_t n);

#define BEGIN(f)                                                               \
	CUresult r;                                                            \
	pthread_mutex_lock(&fk_mu);                                            \
	r = fk_enter(FN_##f);                                                  \
	if (r == CUDA_SUCCESS) {
#define END                                                                    \
	}                                                                      \
	pthread_mutex_unlock(&fk_mu);                                          \
	return r;

#pragma GCC visibility pop

#endif
