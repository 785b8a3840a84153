/* Helpers of the loader tests against the fake driver (cuda_util.h). */
#include "tests/loader/cuda_util.h"
#include "tests/loader/fake_libcuda.h"
#include "tests/loader/st_write.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t log_cv = PTHREAD_COND_INITIALIZER;
static char log_text[1 << 16]; /* (log_mu) lines since the last reset */
static char workdir[2048];
static unsigned ndirs;
static CUcontext primary; /* retained once by ct_primary */

void ct_quiet(void *arg, enum bfs_loader_log_level lv, const char *line)
{
	size_t n;

	pthread_mutex_lock(&log_mu);
	n = strlen(log_text);
	snprintf(log_text + n, sizeof(log_text) - n, "%s\n", line);
	pthread_cond_broadcast(&log_cv);
	pthread_mutex_unlock(&log_mu);
}

void ct_log_reset(void)
{
	pthread_mutex_lock(&log_mu);
	log_text[0] = 0;
	pthread_mutex_unlock(&log_mu);
}

int ct_log_wait(const char *needle, unsigned timeout_s)
{
	struct timespec dl;
	int rc = 0;

	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += timeout_s;
	pthread_mutex_lock(&log_mu);
	while (!strstr(log_text, needle) && rc == 0)
		rc = pthread_cond_timedwait(&log_cv, &log_mu, &dl);
	rc = strstr(log_text, needle) ? 0 : -1;
	pthread_mutex_unlock(&log_mu);
	return rc;
}

int ct_logged(const char *needle)
{
	int hit;
	pthread_mutex_lock(&log_mu);
	hit = strstr(log_text, needle) != NULL;
	pthread_mutex_unlock(&log_mu);
	return hit;
}

const char *ct_make_batches(char *dir, size_t len, unsigned nb)
{
	char path[4200];

	snprintf(dir, len, "%s/d%u", workdir, ndirs++);
	mkdir(dir, 0755);
	for (unsigned k = 0; k < nb; k++) {
		uint64_t rows = 200 + 97 * k;
		size_t n1 = rows * 4 * 5, n2 = rows * 8, n3 = rows * 3;
		unsigned char *d = malloc(n1 + n2 + n3);
		struct st_tensor t[3] = {
		    {"labels", "I64", 1, {rows}, d + n1, n2},
		    {"x", "F32", 2, {rows, 5}, d, n1},
		    {"rgb", "U8", 2, {rows, 3}, d + n1 + n2, n3},
		};
		st_fill(d, n1 + n2 + n3, k + 1000 * ndirs);
		snprintf(path, sizeof(path), "%s/batch_%u", dir, k);
		assert_true(st_write(path, t, 3, 0, k, k == 1 ? 5000 : 0) > 0);
		free(d);
	}
	return dir;
}

unsigned char *ct_slurp(const char *dir, uint64_t k, size_t *n)
{
	char path[4200];
	FILE *f;
	unsigned char *p;
	struct stat sb;

	snprintf(path, sizeof(path), "%s/batch_%llu", dir,
		 (unsigned long long)k);
	assert_int_equal(stat(path, &sb), 0);
	*n = (size_t)sb.st_size;
	p = malloc(*n);
	f = fopen(path, "rb");
	assert_non_null(f);
	assert_int_equal(fread(p, 1, *n, f), *n);
	fclose(f);
	return p;
}

struct bfs_loader *ct_open(const char *dir, unsigned slots, unsigned flags)
{
	struct bfs_loader *L;
	int rc = bfs_loader_open(
	    &L, &(struct bfs_loader_opts){.dir = dir,
					  .mode = BFS_LOADER_CUDA,
					  .slots = slots,
					  .flags = flags,
					  .log = ct_quiet});
	if (rc < 0)
		fail_msg("open %s: %s", dir, bfs_loader_strerror(rc));
	return L;
}

void ct_read_all(struct bfs_loader *L, const char *dir, unsigned nb,
		 CUstream stream, unsigned check_delay_us)
{
	struct bfs_loader_batch b;
	unsigned char *want;
	size_t n;

	for (unsigned k = 0; k < nb; k++) {
		int rc = bfs_loader_next(L, &b, stream);
		if (rc != 0)
			fail_msg("batch %u: %s (%s)", k,
				 bfs_loader_strerror(rc), bfs_loader_errmsg(L));
		assert_int_equal(b.index, k);
		want = ct_slurp(dir, k, &n);
		assert_int_equal(b.nbytes, n);
		fake_enqueue_check(stream, b.dev, want, n, check_delay_us);
		free(want);
		assert_int_equal(bfs_loader_release(L, &b, stream), 0);
	}
	assert_int_equal(bfs_loader_next(L, &b, stream), BFS_LOADER_EOF);
}

void ct_expect_clean_driver(void)
{
	struct fake_stats s;

	fake_stats(&s);
	if (s.violations)
		fail_msg("%ld driver misuse(s), last: %s", s.violations,
			 s.last_violation);
	assert_int_equal(s.check_failures, 0);
	assert_int_equal(s.streams, 0);
	assert_int_equal(s.events, 0);
	assert_int_equal(s.allocs, 0);
	assert_int_equal(s.registered, 0);
	assert_int_equal(s.ctx_retained, primary ? 1 : 0);
	assert_int_equal(s.register_after_copy, 0);
	assert_int_equal(s.capture_violations, 0);
}

CUcontext ct_primary(void)
{
	if (!primary) {
		assert_int_equal(cuInit(0), CUDA_SUCCESS);
		assert_int_equal(cuDevicePrimaryCtxRetain(&primary, 0),
				 CUDA_SUCCESS);
	}
	return primary;
}

CUstream ct_stream(unsigned flags, unsigned *id)
{
	const struct fake_rec *r;
	CUcontext c;
	CUstream s;
	size_t n;

	assert_int_equal(cuCtxPushCurrent(ct_primary()), CUDA_SUCCESS);
	assert_int_equal(cuStreamCreate(&s, flags), CUDA_SUCCESS);
	assert_int_equal(cuCtxPopCurrent(&c), CUDA_SUCCESS);
	fake_log(&r, &n);
	while (n && r[n - 1].op != F_STREAM_CREATE)
		n--;
	if (id)
		*id = r[n - 1].stream;
	return s;
}

void ct_stream_destroy(CUstream s)
{
	CUcontext c;
	assert_int_equal(cuCtxPushCurrent(ct_primary()), CUDA_SUCCESS);
	assert_int_equal(cuStreamDestroy(s), CUDA_SUCCESS);
	assert_int_equal(cuCtxPopCurrent(&c), CUDA_SUCCESS);
}

struct ct_capture {
	CUstream s;
	int mode;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int started, stop;
	CUresult end;
	pthread_t th;
};

static void *capture_main(void *arg)
{
	struct ct_capture *c = arg;
	CUgraph g;

	cuCtxSetCurrent(ct_primary());
	pthread_mutex_lock(&c->mu);
	c->end = cuStreamBeginCapture(c->s, c->mode);
	c->started = 1;
	pthread_cond_broadcast(&c->cv);
	while (!c->stop)
		pthread_cond_wait(&c->cv, &c->mu);
	if (c->end == CUDA_SUCCESS)
		c->end = cuStreamEndCapture(c->s, &g);
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

struct ct_capture *ct_capture_start(int mode)
{
	struct ct_capture *c = calloc(1, sizeof(*c));

	c->s = ct_stream(CU_STREAM_NON_BLOCKING, NULL);
	c->mode = mode;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	pthread_create(&c->th, NULL, capture_main, c);
	pthread_mutex_lock(&c->mu);
	while (!c->started)
		pthread_cond_wait(&c->cv, &c->mu);
	pthread_mutex_unlock(&c->mu);
	return c;
}

CUresult ct_capture_end(struct ct_capture *c)
{
	CUresult r;

	pthread_mutex_lock(&c->mu);
	c->stop = 1;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->th, NULL);
	r = c->end;
	ct_stream_destroy(c->s);
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv);
	free(c);
	return r;
}

int ct_run(const struct CMUnitTest *tests, size_t n)
{
	const char *t = getenv("BFS_TEST_TMP");
	char tmpl[] = "/tmp/bfs-loader-cuda-XXXXXX";

	if (t && *t)
		snprintf(workdir, sizeof(workdir), "%s", t);
	else if (mkdtemp(tmpl))
		snprintf(workdir, sizeof(workdir), "%s", tmpl);
	else
		return 1;
	return _cmocka_run_group_tests("tests", tests, n, NULL, NULL);
}
