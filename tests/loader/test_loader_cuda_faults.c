/* The loader's CUDA backend against the fake driver when the driver does
 * not cooperate or the process does more than feed one loader: a stream
 * capture in another thread, failures at open and mid-run (and which
 * message reaches the caller), a fork, a context of the caller's own.
 * Linked with the fake; run by test_loader_cuda_faults.sh. */
#include "tests/loader/cuda_util.h"
#include "tests/loader/fake_libcuda.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* A CUDA graph captured in global mode by another thread (torch's default
 * for torch.cuda.graph) while a loader opens, streams and closes: the
 * loader's driver calls must neither break the capture nor fail. */
static void a_global_capture_elsewhere_survives_a_loader(void **state)
{
	char dbuf[2100];
	const char *dir = ct_make_batches(dbuf, sizeof(dbuf), 6);
	CUstream u = ct_stream(CU_STREAM_NON_BLOCKING, NULL);
	struct ct_capture *cap =
	    ct_capture_start(CU_STREAM_CAPTURE_MODE_GLOBAL);
	struct bfs_loader *L;

	fake_config(200);
	L = ct_open(dir, 2, 0);
	ct_read_all(L, dir, 6, u, 500);
	bfs_loader_close(L);
	assert_int_equal(ct_capture_end(cap), CUDA_SUCCESS);
	ct_stream_destroy(u);
	ct_expect_clean_driver();
}

struct next_call {
	struct bfs_loader *L;
	struct bfs_loader_batch b;
	void *stream;
	int rc;
};

static void *next_in_thread(void *arg)
{
	struct next_call *c = arg;
	c->rc = bfs_loader_next(c->L, &c->b, c->stream);
	return NULL;
}

/* Two threads of one loader fail in the driver at the same time (the copy
 * thread's copy of batch 1, the consumer's wait in next() for batch 0):
 * each message names the call that failed in its own thread. The fake
 * pauses both calls to force the worst interleaving: the copy thread's
 * failure lands between the consumer's failure and its message. */
static void each_thread_reports_its_own_driver_failure(void **state)
{
	char dbuf[2100];
	const char *dir = ct_make_batches(dbuf, sizeof(dbuf), 3);
	struct next_call c = {0};
	pthread_t t;

	ct_log_reset();
	fake_config(100);
	fake_pause("cuMemcpyHtoDAsync", 2);
	fake_fail("cuMemcpyHtoDAsync", 2, CUDA_ERROR_LAUNCH_FAILED, 1);
	c.L = ct_open(dir, 0, 0);
	assert_int_equal(fake_paused("cuMemcpyHtoDAsync", 60), 0);
	fake_fail("cuStreamWaitEvent", 1, CUDA_ERROR_ILLEGAL_ADDRESS, 1);
	fake_pause("cuCtxPopCurrent", 1);
	pthread_create(&t, NULL, next_in_thread, &c);
	assert_int_equal(fake_paused("cuCtxPopCurrent", 60), 0);
	fake_resume("cuMemcpyHtoDAsync");
	assert_int_equal(ct_log_wait("cuMemcpyHtoDAsync failed", 60), 0);
	fake_resume("cuCtxPopCurrent");
	pthread_join(t, NULL);
	assert_int_equal(c.rc, -EIO);
	if (!strstr(bfs_loader_errmsg(c.L), "batch_0: cuStreamWaitEvent") ||
	    !strstr(bfs_loader_errmsg(c.L), "CUDA_ERROR_ILLEGAL_ADDRESS"))
		fail_msg("batch 0's message: \"%s\"", bfs_loader_errmsg(c.L));
	bfs_loader_close(c.L);
	ct_expect_clean_driver();
}

/* A child forked while a CUDA-mode loader is open (a DataLoader worker,
 * a subprocess) does not inherit the pinned ring: a child writing to
 * copy-on-write pages the driver has pinned would leave the parent's copies
 * reading stale pages. The parent's loader goes on unharmed. */
static void a_forked_child_does_not_inherit_the_pinned_ring(void **state)
{
	char dbuf[2100];
	const char *dir = ct_make_batches(dbuf, sizeof(dbuf), 4);
	struct bfs_loader *L;
	struct bfs_loader_batch b;
	unsigned char *want;
	size_t n;
	int status;
	pid_t pid;

	L = ct_open(dir, 0, BFS_LOADER_KEEP_HOST); /* b.host: the ring */
	assert_int_equal(bfs_loader_next(L, &b, NULL), 0);
	assert_non_null(b.host);
	pid = fork();
	if (pid == 0) {
		unsigned char vec;
		void *page = (void *)((uintptr_t)b.host & ~(uintptr_t)4095);
		/* ENOMEM: not mapped in this process */
		_exit(mincore(page, 4096, &vec) == -1 && errno == ENOMEM ? 0
									 : 1);
	}
	assert_true(pid > 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	want = ct_slurp(dir, 0, &n);
	assert_memory_equal(b.host, want, n);
	free(want);
	assert_int_equal(bfs_loader_release(L, &b, NULL), 0);
	bfs_loader_close(L);
	ct_expect_clean_driver();
}

/* Every driver call open makes, failing: AUTO falls back to CPU mode with
 * one line naming the call and the error, mode CUDA fails with that line
 * (-ENOMEM when the driver is out of memory), and nothing is left behind
 * either way. */
static void
every_failure_at_open_falls_back_or_fails_with_its_reason(void **state)
{
	static const struct {
		const char *fn, *err;
		int code, rc;
	} fails[] = {
	    {"cuDevicePrimaryCtxRetain", "CUDA_ERROR_INVALID_DEVICE",
	     CUDA_ERROR_INVALID_DEVICE, -ENODEV},
	    {"cuThreadExchangeStreamCaptureMode", "CUDA_ERROR_INVALID_VALUE",
	     CUDA_ERROR_INVALID_VALUE, -EIO},
	    {"cuCtxPushCurrent", "CUDA_ERROR_INVALID_CONTEXT",
	     CUDA_ERROR_INVALID_CONTEXT, -EIO},
	    {"cuStreamCreate", "CUDA_ERROR_OUT_OF_MEMORY",
	     CUDA_ERROR_OUT_OF_MEMORY, -ENOMEM},
	    {"cuEventCreate", "CUDA_ERROR_INVALID_VALUE",
	     CUDA_ERROR_INVALID_VALUE, -EIO},
	    {"cuMemHostRegister", "CUDA_ERROR_OUT_OF_MEMORY",
	     CUDA_ERROR_OUT_OF_MEMORY, -ENOMEM},
	    {"cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY", CUDA_ERROR_OUT_OF_MEMORY,
	     -ENOMEM},
	    {"cuCtxSetCurrent", "CUDA_ERROR_INVALID_CONTEXT",
	     CUDA_ERROR_INVALID_CONTEXT, -EIO},
	};
	char dbuf[2100];
	const char *dir = ct_make_batches(dbuf, sizeof(dbuf), 3);
	struct bfs_loader_opts o = {.dir = dir, .log = ct_quiet};
	struct bfs_loader_batch b;
	struct bfs_loader *L;

	for (size_t i = 0; i < sizeof(fails) / sizeof(fails[0]); i++) {
		o.mode = BFS_LOADER_AUTO;
		ct_log_reset();
		fake_fail(fails[i].fn, 1, fails[i].code, 1);
		assert_int_equal(bfs_loader_open(&L, &o), 0);
		assert_int_equal(bfs_loader_mode(L), BFS_LOADER_CPU);
		if (!ct_logged("CPU mode: CUDA unavailable: ") ||
		    !ct_logged(fails[i].fn) || !ct_logged(fails[i].err))
			fail_msg("%s: AUTO logged no reason", fails[i].fn);
		for (unsigned k = 0; k < 3; k++) {
			assert_int_equal(bfs_loader_next(L, &b, NULL), 0);
			assert_int_equal(bfs_loader_release(L, &b, NULL), 0);
		}
		bfs_loader_close(L);
		ct_expect_clean_driver();

		o.mode = BFS_LOADER_CUDA;
		ct_log_reset();
		fake_fail(fails[i].fn, 1, fails[i].code, 1);
		assert_int_equal(bfs_loader_open(&L, &o), fails[i].rc);
		assert_null(L);
		if (!ct_logged("CUDA mode requested but unavailable: ") ||
		    !ct_logged(fails[i].fn) || !ct_logged(fails[i].err))
			fail_msg("%s: CUDA mode logged no reason", fails[i].fn);
		ct_expect_clean_driver();
	}
}

/* The consumer's thread has a context of its own current (a library that
 * does not use the primary context): next() and release() do their work in
 * the loader's (primary) context and leave the caller's current. */
static void the_callers_own_context_stays_current(void **state)
{
	char dbuf[2100];
	const char *dir = ct_make_batches(dbuf, sizeof(dbuf), 4);
	CUstream s = ct_stream(CU_STREAM_NON_BLOCKING, NULL);
	struct bfs_loader *L;
	struct bfs_loader_batch b;
	CUcontext mine, cur;

	assert_int_equal(cuCtxCreate(&mine, NULL, 0, 0), CUDA_SUCCESS);
	L = ct_open(dir, 0, 0);
	while (bfs_loader_next(L, &b, s) == 0) {
		assert_int_equal(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
		assert_ptr_equal(cur, mine);
		assert_int_equal(bfs_loader_release(L, &b, s), 0);
		assert_int_equal(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
		assert_ptr_equal(cur, mine);
	}
	assert_string_equal(bfs_loader_errmsg(L), "");
	bfs_loader_close(L);
	assert_int_equal(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
	assert_ptr_equal(cur, mine);
	assert_int_equal(cuCtxDestroy(mine), CUDA_SUCCESS);
	ct_stream_destroy(s);
	ct_expect_clean_driver();
}

struct release_call {
	struct bfs_loader *L;
	struct bfs_loader_batch b;
	int rc;
};

static void *release_in_thread(void *arg)
{
	struct release_call *c = arg;
	c->rc = bfs_loader_release(c->L, &c->b, NULL);
	return NULL;
}

/* A batch may be released from any thread (Python frees a batch when its
 * last tensor goes, wherever that happens), also while the consumer calls
 * next(): a second release of the same batch, made while the first is
 * still recording its event, is refused instead of recording twice; a
 * next() that needs the slot gets it once the release is done. */
static void a_release_from_another_thread_is_exactly_one_release(void **st)
{
	char dbuf[2100];
	const char *dir = ct_make_batches(dbuf, sizeof(dbuf), 4);
	struct release_call rel = {0};
	struct next_call nx = {0};
	struct bfs_loader_batch b1;
	pthread_t t, u;

	fake_config(200);
	rel.L = nx.L = ct_open(dir, 2, 0);
	assert_int_equal(bfs_loader_next(rel.L, &rel.b, NULL), 0);
	assert_int_equal(bfs_loader_next(rel.L, &b1, NULL), 0);
	fake_pause("cuEventRecord", 1);
	pthread_create(&t, NULL, release_in_thread, &rel);
	assert_int_equal(fake_paused("cuEventRecord", 60), 0);
	assert_int_equal(bfs_loader_release(rel.L, &rel.b, NULL), -EINVAL);
	pthread_create(&u, NULL, next_in_thread, &nx); /* batch 2: slot 0 */
	fake_resume("cuEventRecord");
	pthread_join(t, NULL);
	pthread_join(u, NULL);
	assert_int_equal(rel.rc, 0);
	assert_int_equal(nx.rc, 0);
	assert_int_equal(nx.b.index, 2);
	assert_int_equal(bfs_loader_release(rel.L, &nx.b, NULL), 0);
	assert_int_equal(bfs_loader_release(rel.L, &b1, NULL), 0);
	bfs_loader_close(rel.L);
	ct_expect_clean_driver();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(a_global_capture_elsewhere_survives_a_loader),
	    cmocka_unit_test(each_thread_reports_its_own_driver_failure),
	    cmocka_unit_test(a_forked_child_does_not_inherit_the_pinned_ring),
	    cmocka_unit_test(
		every_failure_at_open_falls_back_or_fails_with_its_reason),
	    cmocka_unit_test(the_callers_own_context_stays_current),
	    cmocka_unit_test(
		a_release_from_another_thread_is_exactly_one_release),
	};
	return ct_run(tests, sizeof(tests) / sizeof(tests[0]));
}
