/* The fake CUDA driver's model (see fake_libcuda.c for what it models and
 * why): call control, contexts, streams that run asynchronously on their
 * own threads, per-record events, the legacy stream's implicit
 * synchronization, stream-capture rules, spinning and blocking waits, and
 * the test hooks of fake_libcuda.h.
 *
 * Test-only code: one global state under one mutex (fk_mu); one condition
 * variable (fk_cv) is broadcast on every change. Streams, events and
 * contexts are never freed (ops in flight may still name them; they stay
 * reachable, so leak checkers stay quiet). */
#include "tests/loader/fake_model.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

pthread_mutex_t fk_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t fk_cv = PTHREAD_COND_INITIALIZER;
struct fake_stats fk_st;
struct fctx fk_primary = {1, 0, NULL, NULL};
unsigned fk_copy_delay = 300;
long fk_copies_live;
void *fk_reg_ptr[16];
size_t fk_reg_len[16];
__thread struct fctx *fk_ctx_stack[16];
__thread int fk_ctx_depth;
__thread int fk_cap_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

static struct fctl {
	const char *name;
	int unsafe;
	long calls;
	long fail_from, fail_to; /* call numbers that fail, inclusive */
	CUresult code;
	long pause_at; /* call number that pauses, 0 = none */
	int paused, resume;
} ctl[FK_NFN] = {
#define INIT(n, u) {#n, u, 0, 0, 0, CUDA_SUCCESS, 0, 0, 0},
    FAKE_FUNCS(INIT)
#undef INIT
};

static struct fake_rec *recs;
static size_t nrecs, caprecs;
static unsigned next_stream = 1, next_event = 1, next_ctx = 2;
static struct fctx *ctxs;	/* contexts made by cuCtxCreate */
static struct fstream *streams; /* every stream ever made */
static struct fevent *events;	/* every event ever made */
static unsigned char hold_open[256];
static __thread struct fstream *per_thread_stream;

void fk_violation(const char *fmt, ...)
{
	va_list ap;
	fk_st.violations++;
	va_start(ap, fmt);
	vsnprintf(fk_st.last_violation, sizeof(fk_st.last_violation), fmt, ap);
	va_end(ap);
}

void fk_log(enum fake_op op, unsigned s, unsigned e, uint64_t a, uint64_t n)
{
	if (nrecs == caprecs) {
		caprecs = caprecs ? 2 * caprecs : 1024;
		recs = realloc(recs, caprecs * sizeof(*recs));
	}
	recs[nrecs++] = (struct fake_rec){op, s, e, a, n};
}

struct fctx *fk_current(void)
{
	return fk_ctx_depth > 0 ? fk_ctx_stack[fk_ctx_depth - 1] : NULL;
}

struct fctx *fk_need_ctx(const char *fn)
{
	struct fctx *c = fk_current();
	if (!c)
		fk_violation("%s without a current context", fn);
	return c;
}

const char *fk_name(enum fk_fn f)
{
	return ctl[f].name;
}

/* ---- call control and stream capture ---- */

/* Would a potentially unsafe call from this thread break a capture? Marks
 * the captures it breaks: this thread's own (unless relaxed) and, in
 * global mode, other threads' global-mode captures. */
static int capture_prohibits(void)
{
	int hit = 0;

	if (fk_cap_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
		return 0;
	for (struct fstream *s = streams; s; s = s->all_next) {
		if (!s->capturing ||
		    s->cap_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
			continue;
		if (pthread_equal(s->cap_thread, pthread_self()) ||
		    (fk_cap_mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
		     s->cap_mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
			s->cap_invalid = 1;
			hit = 1;
		}
	}
	return hit;
}

CUresult fk_enter(enum fk_fn f)
{
	struct fctl *c = &ctl[f];
	long n = ++c->calls;

	if (c->pause_at == n) {
		c->pause_at = 0;
		c->paused++;
		pthread_cond_broadcast(&fk_cv);
		while (!c->resume)
			pthread_cond_wait(&fk_cv, &fk_mu);
		c->resume = 0;
		c->paused--;
	}
	if (c->unsafe && capture_prohibits()) {
		fk_st.capture_violations++;
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	}
	if (n >= c->fail_from && n <= c->fail_to) {
		fk_st.injected++;
		return c->code;
	}
	return CUDA_SUCCESS;
}

/* ---- objects ---- */

struct fctx *fk_ctx_new(unsigned flags)
{
	struct fctx *x = calloc(1, sizeof(*x));
	x->id = next_ctx++;
	x->flags = flags;
	x->all_next = ctxs;
	ctxs = x;
	return x;
}

struct fevent *fk_event_new(struct fctx *c, unsigned flags)
{
	struct fevent *ev = calloc(1, sizeof(*ev));
	ev->id = next_event++;
	ev->flags = flags;
	ev->ctx = c;
	ev->all_next = events;
	events = ev;
	return ev;
}

int fk_event_done(const struct fevent *ev, unsigned long gen)
{
	return gen == 0 || ev->done[gen];
}

/* ---- streams ---- */

/* Run one op (mu held; dropped while it sleeps or copies). */
static void run_op(struct sop *o)
{
	struct timespec ts;

	switch (o->kind) {
	case S_WAIT:
		while (!fk_event_done(o->ev, o->gen))
			pthread_cond_wait(&fk_cv, &fk_mu);
		break;
	case S_RECORD:
		o->ev->done[o->gen] = 1;
		break;
	case S_HOLD:
		while (!hold_open[o->hold])
			pthread_cond_wait(&fk_cv, &fk_mu);
		break;
	case S_KERNEL:
		ts = (struct timespec){(time_t)(o->ns / 1000000000),
				       (long)(o->ns % 1000000000)};
		pthread_mutex_unlock(&fk_mu);
		nanosleep(&ts, NULL);
		pthread_mutex_lock(&fk_mu);
		break;
	case S_COPY:
	case S_CHECK:
		pthread_mutex_unlock(&fk_mu);
		usleep(o->delay);
		if (o->kind == S_COPY)
			memcpy(o->dst, o->src, o->n);
		if (o->kind == S_COPY && o->corrupt && o->n)
			((unsigned char *)o->dst)[o->n - 1] ^= 0x5a;
		pthread_mutex_lock(&fk_mu);
		if (o->kind == S_CHECK) {
			fk_st.checks++;
			if (memcmp(o->dst, o->expect, o->n) != 0)
				fk_st.check_failures++;
			free(o->expect);
		}
		break;
	}
}

static void *stream_main(void *arg)
{
	struct fstream *s = arg;
	struct sop *o;

	pthread_mutex_lock(&fk_mu);
	for (;;) {
		while (!s->head && !s->stop)
			pthread_cond_wait(&fk_cv, &fk_mu);
		if (!s->head)
			break;
		o = s->head;
		s->busy = 1;
		for (unsigned i = 0; i < o->ndeps; i++)
			while (o->deps[i].s->done < o->deps[i].upto)
				pthread_cond_wait(&fk_cv, &fk_mu);
		run_op(o);
		s->head = o->next;
		if (!s->head)
			s->tail = NULL;
		s->busy = 0;
		s->done = o->seq;
		free(o->deps);
		free(o);
		pthread_cond_broadcast(&fk_cv);
	}
	pthread_mutex_unlock(&fk_mu);
	return NULL;
}

static struct fstream *make_stream(struct fctx *c, unsigned flags, int legacy)
{
	struct fstream *s = calloc(1, sizeof(*s));
	s->id = legacy ? 0 : next_stream++;
	s->flags = flags;
	s->legacy = legacy;
	s->ctx = c;
	s->all_next = streams;
	streams = s;
	pthread_create(&s->th, NULL, stream_main, s);
	return s;
}

struct fstream *fk_stream_new(struct fctx *c, unsigned flags)
{
	return make_stream(c, flags, 0);
}

struct fstream *fk_stream(CUstream h)
{
	struct fctx *c = fk_current() ? fk_current() : &fk_primary;

	if (!h || h == CU_STREAM_LEGACY) {
		if (!c->legacy)
			c->legacy = make_stream(c, 0, 1);
		return c->legacy;
	}
	if (h == CU_STREAM_PER_THREAD) {
		if (!per_thread_stream)
			per_thread_stream = make_stream(c, 0, 0);
		return per_thread_stream;
	}
	return (struct fstream *)h;
}

static int blocking(const struct fstream *s)
{
	return !(s->flags & CU_STREAM_NON_BLOCKING);
}

/* Implicit dependencies of a new op on s: the legacy stream waits for
 * every blocking stream of its context, a blocking stream waits for the
 * legacy stream. Only streams with pending work count. */
static void add_deps(struct fstream *s, struct sop *o)
{
	unsigned cap = 0;

	if (!blocking(s))
		return;
	for (struct fstream *t = streams; t; t = t->all_next) {
		if (t == s || t->dead || t->ctx != s->ctx || !blocking(t) ||
		    (!s->legacy && !t->legacy) || t->done >= t->enq)
			continue;
		if (o->ndeps == cap) {
			cap = cap ? 2 * cap : 4;
			o->deps = realloc(o->deps, cap * sizeof(*o->deps));
		}
		o->deps[o->ndeps++] = (struct dep){t, t->enq};
		fk_st.implicit_deps++;
	}
}

/* A capturing stream records o into its graph instead: it never runs. */
void fk_push(struct fstream *s, struct sop *o, const char *fn)
{
	struct fctx *c = fn ? fk_need_ctx(fn) : NULL;

	if (c && s->ctx != c)
		fk_violation("%s: stream %u belongs to context %u, context "
			     "%u is current",
			     fn, s->id, s->ctx->id, c->id);
	if (s->capturing) {
		free(o->expect);
		free(o);
		return;
	}
	add_deps(s, o);
	o->seq = ++s->enq;
	if (s->tail)
		s->tail->next = o;
	else
		s->head = o;
	s->tail = o;
	pthread_cond_broadcast(&fk_cv);
}

struct sop *fk_op(int kind)
{
	struct sop *o = calloc(1, sizeof(*o));
	o->kind = kind;
	return o;
}

/* ---- waiting ---- */

/* Until cond(a, b): spinning (the waiting thread burns CPU, as a real
 * driver's spin or yield scheduling does; counted in spin_syncs/spin_ns)
 * or asleep on the condition variable (blocking_syncs). */
static void wait_until(int (*cond)(const void *, unsigned long), const void *a,
		       unsigned long b, int spin)
{
	struct timespec t0, t1;

	if (!spin) {
		fk_st.blocking_syncs++;
		while (!cond(a, b))
			pthread_cond_wait(&fk_cv, &fk_mu);
		return;
	}
	fk_st.spin_syncs++;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (!cond(a, b)) {
		pthread_mutex_unlock(&fk_mu);
		for (volatile int i = 0; i < 2000; i++)
			;
		pthread_mutex_lock(&fk_mu);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	fk_st.spin_ns +=
	    (t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
}

static int event_cond(const void *ev, unsigned long gen)
{
	return fk_event_done(ev, gen);
}

static int stream_cond(const void *s, unsigned long unused)
{
	const struct fstream *x = s;
	return !x->head && !x->busy;
}

void fk_wait_event(const struct fevent *ev, unsigned long gen, int spin)
{
	wait_until(event_cond, ev, gen, spin);
}

void fk_wait_stream(const struct fstream *s, int spin)
{
	wait_until(stream_cond, s, 0, spin);
}

int fk_registered(const void *p, size_t n)
{
	for (int i = 0; i < 16; i++)
		if (fk_reg_ptr[i] && (const char *)p >= (char *)fk_reg_ptr[i] &&
		    (const char *)p + n <=
			(char *)fk_reg_ptr[i] + fk_reg_len[i])
			return 1;
	return 0;
}

/* ---- test hooks (fake_libcuda.h) ---- */
#define LOCKED(body)                                                           \
	do {                                                                   \
		pthread_mutex_lock(&fk_mu);                                    \
		body;                                                          \
		pthread_mutex_unlock(&fk_mu);                                  \
	} while (0)

API void fake_log(const struct fake_rec **r, size_t *n)
{
	LOCKED(*r = recs; *n = nrecs);
}

API void fake_mark(uint64_t kind, uint64_t arg)
{
	LOCKED(fk_log(F_MARK, 0, 0, kind, arg));
}

API void fake_stats(struct fake_stats *out)
{
	LOCKED(*out = fk_st);
}

API void fake_config(unsigned delay_us)
{
	LOCKED(fk_copy_delay = delay_us);
}

API void fake_enqueue_check(void *h, uint64_t d, const void *expect, size_t n,
			    unsigned delay_us)
{
	struct sop *o = fk_op(S_CHECK);
	o->dst = (void *)(uintptr_t)d;
	o->n = n;
	o->delay = delay_us;
	o->expect = malloc(n);
	memcpy(o->expect, expect, n);
	LOCKED(fk_push(fk_stream((CUstream)h), o, NULL));
}

static struct fctl *find_ctl(const char *fn)
{
	for (int i = 0; i < FK_NFN; i++)
		if (strcmp(ctl[i].name, fn) == 0)
			return &ctl[i];
	fprintf(stderr, "fake libcuda: no controlled function %s\n", fn);
	abort(); /* a typo in a test */
}

API void fake_fail(const char *fn, long nth, int code, long count)
{
	struct fctl *c = find_ctl(fn);
	LOCKED(c->fail_from = c->calls + nth;
	       c->fail_to = c->calls + nth + count - 1;
	       c->code = (CUresult)code);
}

API void fake_pause(const char *fn, long nth)
{
	struct fctl *c = find_ctl(fn);
	LOCKED(c->pause_at = c->calls + nth; c->resume = 0);
}

API int fake_paused(const char *fn, unsigned timeout_s)
{
	struct fctl *c = find_ctl(fn);
	struct timespec dl;
	int rc = 0;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += timeout_s;
	pthread_mutex_lock(&fk_mu);
	while (!c->paused && rc == 0)
		rc = pthread_cond_timedwait(&fk_cv, &fk_mu, &dl);
	rc = c->paused ? 0 : -1;
	pthread_mutex_unlock(&fk_mu);
	return rc;
}

API void fake_resume(const char *fn)
{
	struct fctl *c = find_ctl(fn);
	LOCKED(c->resume = 1; pthread_cond_broadcast(&fk_cv));
}

API void fake_hold(void *h, unsigned id)
{
	struct sop *o = fk_op(S_HOLD);
	o->hold = id % 256;
	LOCKED(hold_open[o->hold] = 0;
	       fk_push(fk_stream((CUstream)h), o, NULL));
}

API void fake_unhold(unsigned id)
{
	LOCKED(hold_open[id % 256] = 1; pthread_cond_broadcast(&fk_cv));
}

API void fake_sleep(void *h, unsigned us)
{
	struct sop *o = fk_op(S_KERNEL);
	o->ns = (unsigned long long)us * 1000;
	LOCKED(fk_push(fk_stream((CUstream)h), o, NULL));
}

/* FAKE_LIBCUDA_REPORT=1: the counters at exit, for tests of programs that
 * know nothing of the fake (test_bench_loader_fake.sh). */
__attribute__((destructor)) static void report(void)
{
	const struct fake_stats *s = &fk_st;

	if (!getenv("FAKE_LIBCUDA_REPORT"))
		return;
	pthread_mutex_lock(&fk_mu);
	fprintf(stderr,
		"fake libcuda: violations=%ld ctx_retained=%ld streams=%ld "
		"events=%ld allocs=%ld registered=%ld modules=%ld "
		"launches=%ld copies=%ld spin_syncs=%ld blocking_syncs=%ld "
		"spin_ms=%.1f implicit_deps=%ld capture_violations=%ld "
		"last_violation=\"%s\"\n",
		s->violations, s->ctx_retained, s->streams, s->events,
		s->allocs, s->registered, s->modules, s->launches, s->copies,
		s->spin_syncs, s->blocking_syncs, (double)s->spin_ns / 1e6,
		s->implicit_deps, s->capture_violations, s->last_violation);
	pthread_mutex_unlock(&fk_mu);
}
