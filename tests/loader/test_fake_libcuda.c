/* The fake CUDA driver (fake_libcuda.c) models what a real driver does
 * where the loader could rely on something kinder: these tests pin the
 * model down, so that a loader test passing against the fake means
 * something. Linked straight against build/tests/fake/libcuda.so.1 (run by
 * test_fake_libcuda.sh). No timing assertions: held streams make every
 * "not yet" deterministic. */
#include "tests/loader/cuda_util.h"
#include "tests/loader/fake_libcuda.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static CUcontext primary;

static int setup(void **state)
{
	primary = ct_primary();
	assert_int_equal(cuCtxPushCurrent(primary), CUDA_SUCCESS);
	return 0;
}

static CUstream stream(unsigned flags)
{
	CUstream s;
	assert_int_equal(cuStreamCreate(&s, flags), CUDA_SUCCESS);
	return s;
}

static CUevent event(unsigned flags)
{
	CUevent e;
	assert_int_equal(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING | flags),
			 CUDA_SUCCESS);
	return e;
}

static struct fake_stats stats(void)
{
	struct fake_stats s;
	fake_stats(&s);
	return s;
}

static void blocking_streams_wait_for_the_legacy_stream(void **state)
{
	CUstream blk = stream(0), nb = stream(CU_STREAM_NON_BLOCKING);
	CUevent eb = event(0), en = event(0);
	CUdeviceptr d;
	long deps = stats().implicit_deps;

	assert_int_equal(cuMemAlloc(&d, 8192), CUDA_SUCCESS);
	fake_hold(NULL, 1); /* the legacy stream has pending work */
	assert_int_equal(cuMemcpyDtoDAsync(d, d + 4096, 4096, nb),
			 CUDA_SUCCESS);
	assert_int_equal(cuEventRecord(en, nb), CUDA_SUCCESS);
	assert_int_equal(stats().implicit_deps, deps);
	assert_int_equal(cuMemcpyDtoDAsync(d, d + 4096, 4096, blk),
			 CUDA_SUCCESS);
	assert_int_equal(cuEventRecord(eb, blk), CUDA_SUCCESS);
	assert_int_equal(stats().implicit_deps, deps + 2); /* each op */
	/* the non-blocking stream runs, the blocking one waits */
	assert_int_equal(cuStreamSynchronize(nb), CUDA_SUCCESS);
	assert_int_equal(cuEventQuery(en), CUDA_SUCCESS);
	assert_int_equal(cuEventQuery(eb), CUDA_ERROR_NOT_READY);
	fake_unhold(1);
	assert_int_equal(cuStreamSynchronize(blk), CUDA_SUCCESS);
	assert_int_equal(cuEventQuery(eb), CUDA_SUCCESS);
	/* and the reverse: legacy work waits for a busy blocking stream */
	fake_hold(blk, 2);
	assert_int_equal(cuEventRecord(eb, NULL), CUDA_SUCCESS);
	assert_int_equal(stats().implicit_deps, deps + 3);
	assert_int_equal(cuEventQuery(eb), CUDA_ERROR_NOT_READY);
	fake_unhold(2);
	assert_int_equal(cuStreamSynchronize(NULL), CUDA_SUCCESS);
	assert_int_equal(cuMemFree(d), CUDA_SUCCESS);
}

static void a_wait_names_the_record_current_at_its_call(void **state)
{
	CUstream held = stream(CU_STREAM_NON_BLOCKING),
		 free_ = stream(CU_STREAM_NON_BLOCKING),
		 waiter = stream(CU_STREAM_NON_BLOCKING);
	CUevent e = event(0), after = event(0);

	assert_int_equal(cuEventQuery(e), CUDA_SUCCESS); /* never recorded */
	fake_hold(held, 3);
	assert_int_equal(cuEventRecord(e, held), CUDA_SUCCESS);
	assert_int_equal(cuEventQuery(e), CUDA_ERROR_NOT_READY);
	assert_int_equal(cuStreamWaitEvent(waiter, e, 0), CUDA_SUCCESS);
	assert_int_equal(cuEventRecord(after, waiter), CUDA_SUCCESS);
	/* a later record completes; the earlier one has not run */
	assert_int_equal(cuEventRecord(e, free_), CUDA_SUCCESS);
	assert_int_equal(cuStreamSynchronize(free_), CUDA_SUCCESS);
	assert_int_equal(cuEventQuery(e), CUDA_SUCCESS);
	assert_int_equal(cuEventQuery(after), CUDA_ERROR_NOT_READY);
	fake_unhold(3);
	assert_int_equal(cuStreamSynchronize(waiter), CUDA_SUCCESS);
	assert_int_equal(cuEventQuery(after), CUDA_SUCCESS);
}

static void only_blocking_sync_events_wait_without_spinning(void **state)
{
	CUstream s = stream(CU_STREAM_NON_BLOCKING);
	CUevent spin = event(0), block = event(CU_EVENT_BLOCKING_SYNC);
	struct fake_stats a = stats(), b;

	fake_sleep(s, 2000);
	assert_int_equal(cuEventRecord(spin, s), CUDA_SUCCESS);
	assert_int_equal(cuEventSynchronize(spin), CUDA_SUCCESS);
	b = stats();
	assert_int_equal(b.spin_syncs, a.spin_syncs + 1);
	assert_int_equal(b.blocking_syncs, a.blocking_syncs);
	fake_sleep(s, 2000);
	assert_int_equal(cuEventRecord(block, s), CUDA_SUCCESS);
	assert_int_equal(cuEventSynchronize(block), CUDA_SUCCESS);
	assert_int_equal(stats().spin_syncs, b.spin_syncs);
	assert_int_equal(stats().blocking_syncs, b.blocking_syncs + 1);
	/* a stream synchronize spins in the default scheduling */
	assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
	assert_int_equal(stats().spin_syncs, b.spin_syncs + 1);
}

static void any_call_can_be_made_to_fail(void **state)
{
	CUdeviceptr d[3];

	fake_fail("cuMemAlloc", 2, CUDA_ERROR_OUT_OF_MEMORY, 1);
	assert_int_equal(cuMemAlloc(&d[0], 4096), CUDA_SUCCESS);
	assert_int_equal(cuMemAlloc(&d[1], 4096), CUDA_ERROR_OUT_OF_MEMORY);
	assert_int_equal(cuMemAlloc(&d[2], 4096), CUDA_SUCCESS);
	fake_fail("cuEventRecord", 1, CUDA_ERROR_LAUNCH_FAILED, 2);
	assert_int_equal(cuEventRecord(event(0), NULL),
			 CUDA_ERROR_LAUNCH_FAILED);
	assert_int_equal(cuEventRecord(event(0), NULL),
			 CUDA_ERROR_LAUNCH_FAILED);
	assert_int_equal(cuEventRecord(event(0), NULL), CUDA_SUCCESS);
	assert_int_equal(cuMemFree(d[0]), CUDA_SUCCESS);
	assert_int_equal(cuMemFree(d[2]), CUDA_SUCCESS);
}

static void *query_in_thread(void *ev)
{
	CUresult *r = malloc(sizeof(*r));
	cuCtxSetCurrent(primary);
	*r = cuEventQuery(ev);
	return r;
}

static void a_call_can_be_paused_until_resumed(void **state)
{
	CUevent e = event(0);
	pthread_t t;
	void *r;

	fake_pause("cuEventQuery", 1);
	pthread_create(&t, NULL, query_in_thread, e);
	assert_int_equal(fake_paused("cuEventQuery", 60), 0);
	fake_resume("cuEventQuery");
	pthread_join(t, &r);
	assert_int_equal(*(CUresult *)r, CUDA_SUCCESS);
	free(r);
}

/* Run 'body' while another thread captures in 'mode'; returns what its
 * cuStreamEndCapture said. */
static CUresult during_capture(int mode, void (*body)(void))
{
	struct ct_capture *c = ct_capture_start(mode);
	body();
	return ct_capture_end(c);
}

static CUresult body_result;
static void alloc_body(void)
{
	CUdeviceptr d;
	body_result = cuMemAlloc(&d, 4096);
	if (body_result == CUDA_SUCCESS)
		cuMemFree(d);
}

static void relaxed_alloc_body(void)
{
	CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
	assert_int_equal(cuThreadExchangeStreamCaptureMode(&m), CUDA_SUCCESS);
	alloc_body();
	assert_int_equal(cuThreadExchangeStreamCaptureMode(&m), CUDA_SUCCESS);
	assert_int_equal(m, CU_STREAM_CAPTURE_MODE_RELAXED);
}

static void global_capture_refuses_unsafe_calls_of_other_threads(void **st)
{
	assert_int_equal(
	    during_capture(CU_STREAM_CAPTURE_MODE_GLOBAL, alloc_body),
	    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
	assert_int_equal(body_result, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	assert_int_equal(
	    during_capture(CU_STREAM_CAPTURE_MODE_GLOBAL, relaxed_alloc_body),
	    CUDA_SUCCESS);
	assert_int_equal(body_result, CUDA_SUCCESS);
	assert_int_equal(
	    during_capture(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, alloc_body),
	    CUDA_SUCCESS);
	assert_int_equal(body_result, CUDA_SUCCESS);
}

static void a_second_context_is_a_context_of_its_own(void **state)
{
	CUevent e = event(0);
	CUcontext mine, cur;
	long v = stats().violations;

	assert_int_equal(cuCtxCreate(&mine, NULL, 0, 0), CUDA_SUCCESS);
	assert_int_equal(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
	assert_ptr_equal(cur, mine);
	assert_ptr_not_equal(mine, primary);
	/* an event of the primary context recorded while 'mine' is current */
	assert_int_equal(cuEventRecord(e, NULL), CUDA_SUCCESS);
	assert_int_equal(stats().violations, v + 1);
	assert_int_equal(cuCtxPushCurrent(primary), CUDA_SUCCESS);
	assert_int_equal(cuEventRecord(e, NULL), CUDA_SUCCESS);
	assert_int_equal(cuCtxPopCurrent(&cur), CUDA_SUCCESS);
	assert_int_equal(stats().violations, v + 1);
	assert_int_equal(cuCtxDestroy(mine), CUDA_SUCCESS);
	assert_int_equal(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
	assert_ptr_equal(cur, primary);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(blocking_streams_wait_for_the_legacy_stream),
	    cmocka_unit_test(a_wait_names_the_record_current_at_its_call),
	    cmocka_unit_test(only_blocking_sync_events_wait_without_spinning),
	    cmocka_unit_test(any_call_can_be_made_to_fail),
	    cmocka_unit_test(a_call_can_be_paused_until_resumed),
	    cmocka_unit_test(
		global_capture_refuses_unsafe_calls_of_other_threads),
	    cmocka_unit_test(a_second_context_is_a_context_of_its_own),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
