/* The races a consumer can meet, against the fake driver (linked; run by
 * test_loader_cuda_streams.sh); tests/gpu/ runs the same on a real GPU.
 * With 2 slots and a slow consumer (a 3 ms "kernel" per batch), every
 * batch is cloned on the GPU (cuMemcpyDtoDAsync) where the consumer reads
 * it, and the clones are compared with the files only at the end, so a
 * clone that ran before the batch's copy landed, or after the next copy
 * overwrote the slot, shows up as wrong bytes:
 *  - on the stream given to next()/release() (a non-blocking stream, and
 *    the legacy default stream);
 *  - on a side stream the consumer hands each batch to (its stream waits
 *    for the iteration stream, and the iteration stream for it before the
 *    release: the documented rule);
 *  - and the misuses the API refuses: a next() with every slot held
 *    (-EBUSY), a release of a batch not held (-EINVAL), a reopen with a
 *    batch held (-EBUSY); the held batches stay intact. */
#include "tests/loader/cuda_util.h"
#include "tests/loader/fake_libcuda.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define NB 8

struct clones {
	CUdeviceptr d[NB];
	size_t n[NB];
};

/* The primary context current on this thread / no longer. */
static void push(void)
{
	assert_int_equal(cuCtxPushCurrent(ct_primary()), CUDA_SUCCESS);
}

static void pop(void)
{
	CUcontext c;
	assert_int_equal(cuCtxPopCurrent(&c), CUDA_SUCCESS);
}

/* A slow kernel, then a clone of the batch into a buffer of its own, on
 * stream s. */
static void consume(struct clones *c, const struct bfs_loader_batch *b,
		    CUstream s)
{
	unsigned k = (unsigned)b->index;

	push();
	assert_int_equal(cuMemAlloc(&c->d[k], b->nbytes), CUDA_SUCCESS);
	fake_sleep(s, 3000);
	assert_int_equal(cuMemcpyDtoDAsync(c->d[k], b->dev, b->nbytes, s),
			 CUDA_SUCCESS);
	pop();
	c->n[k] = b->nbytes;
}

/* After everything ran: each clone equals its file; free them. */
static void compare_clones(struct clones *c, const char *dir, CUstream s)
{
	push();
	assert_int_equal(cuStreamSynchronize(s), CUDA_SUCCESS);
	for (unsigned k = 0; k < NB; k++) {
		size_t n;
		unsigned char *want = ct_slurp(dir, k, &n);
		assert_int_equal(c->n[k], n);
		if (memcmp((void *)(uintptr_t)c->d[k], want, n) != 0)
			fail_msg("the clone of batch %u differs from its file",
				 k);
		free(want);
		assert_int_equal(cuMemFree(c->d[k]), CUDA_SUCCESS);
	}
	pop();
}

static struct bfs_loader *open2(const char *dir)
{
	struct bfs_loader *L;

	fake_config(200);
	assert_int_equal(
	    bfs_loader_open(&L,
			    &(struct bfs_loader_opts){.dir = dir,
						      .mode = BFS_LOADER_CUDA,
						      .slots = 2,
						      .log = ct_quiet}),
	    0);
	return L;
}

static void slow_consumer_clones_on_its_stream_equal_the_files(void **state)
{
	CUstream streams[2] = {ct_stream(CU_STREAM_NON_BLOCKING, NULL), NULL};
	char dbuf[2100];
	const char *dir = ct_make_batches(dbuf, sizeof(dbuf), NB);

	for (int i = 0; i < 2; i++) {
		struct bfs_loader *L = open2(dir);
		struct bfs_loader_batch b;
		struct clones c = {.d = {0}};

		while (bfs_loader_next(L, &b, streams[i]) == 0) {
			consume(&c, &b, streams[i]);
			assert_int_equal(bfs_loader_release(L, &b, streams[i]),
					 0);
		}
		assert_string_equal(bfs_loader_errmsg(L), "");
		compare_clones(&c, dir, streams[i]);
		bfs_loader_close(L);
	}
	ct_stream_destroy(streams[0]);
	ct_expect_clean_driver();
}

/* 'waiter' waits for what is queued on 'first' so far. */
static void join(CUstream waiter, CUstream first, CUevent e)
{
	push();
	assert_int_equal(cuEventRecord(e, first), CUDA_SUCCESS);
	assert_int_equal(cuStreamWaitEvent(waiter, e, 0), CUDA_SUCCESS);
	pop();
}

static void slow_consumer_clones_on_a_side_stream_equal_the_files(void **st)
{
	CUstream it = ct_stream(CU_STREAM_NON_BLOCKING, NULL),
		 side = ct_stream(CU_STREAM_NON_BLOCKING, NULL);
	char dbuf[2100];
	const char *dir = ct_make_batches(dbuf, sizeof(dbuf), NB);
	struct bfs_loader *L = open2(dir);
	struct bfs_loader_batch b;
	struct clones c = {.d = {0}};
	CUevent e;

	push();
	assert_int_equal(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING),
			 CUDA_SUCCESS);
	pop();
	while (bfs_loader_next(L, &b, it) == 0) {
		join(side, it, e); /* the batch is ready on 'it' */
		consume(&c, &b, side);
		join(it, side, e); /* release after the side stream's work */
		assert_int_equal(bfs_loader_release(L, &b, it), 0);
	}
	assert_string_equal(bfs_loader_errmsg(L), "");
	compare_clones(&c, dir, side);
	bfs_loader_close(L);
	push();
	assert_int_equal(cuEventDestroy(e), CUDA_SUCCESS);
	pop();
	ct_stream_destroy(it);
	ct_stream_destroy(side);
	ct_expect_clean_driver();
}

static void misuse_is_refused_and_held_batches_stay_intact(void **state)
{
	CUstream s = ct_stream(CU_STREAM_NON_BLOCKING, NULL);
	char dbuf[2100], other[2100];
	const char *dir = ct_make_batches(dbuf, sizeof(dbuf), NB);
	struct bfs_loader *L = open2(dir);
	struct bfs_loader_batch b[3], forged;
	struct clones c = {.d = {0}};

	ct_make_batches(other, sizeof(other), 2);
	assert_int_equal(bfs_loader_next(L, &b[0], s), 0);
	assert_int_equal(bfs_loader_next(L, &b[1], s), 0);
	/* every slot held: no third batch, no overwrite */
	assert_int_equal(bfs_loader_next(L, &b[2], s), -EBUSY);
	assert_int_equal(bfs_loader_reopen(L, other, NULL), -EBUSY);
	forged = b[0];
	forged.index = 5; /* not the batch in that slot */
	assert_int_equal(bfs_loader_release(L, &forged, s), -EINVAL);
	forged.slot = 7; /* no such slot */
	assert_int_equal(bfs_loader_release(L, &forged, s), -EINVAL);
	consume(&c, &b[0], s);
	consume(&c, &b[1], s);
	assert_int_equal(bfs_loader_release(L, &b[0], s), 0);
	assert_int_equal(bfs_loader_release(L, &b[0], s), -EINVAL); /* twice */
	while (bfs_loader_next(L, &b[2], s) == 0) {
		consume(&c, &b[2], s);
		assert_int_equal(bfs_loader_release(L, &b[2], s), 0);
		if (b[2].index == 2) /* batch 1 was held across batch 2 */
			assert_int_equal(bfs_loader_release(L, &b[1], s), 0);
	}
	assert_int_equal(b[2].index, NB - 1);
	compare_clones(&c, dir, s);
	bfs_loader_close(L);
	ct_stream_destroy(s);
	ct_expect_clean_driver();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(
		slow_consumer_clones_on_its_stream_equal_the_files),
	    cmocka_unit_test(
		slow_consumer_clones_on_a_side_stream_equal_the_files),
	    cmocka_unit_test(misuse_is_refused_and_held_batches_stay_intact),
	};
	return ct_run(tests, sizeof(tests) / sizeof(tests[0]));
}
