/* The loader's CUDA backend against the fake driver when the driver does
 * not cooperate or the process does more than feed one loader: a stream
 * capture in another thread, failures at open and mid-run (and which
 * message reaches the caller), a fork, a context of the caller's own.
 * Linked with the fake; run by test_loader_cuda_faults.sh. */
#include "tests/loader/cuda_util.h"
#include "tests/loader/fake_libcuda.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
	assert_int_equal(
	    bfs_loader_open(&L,
			    &(struct bfs_loader_opts){.dir = dir,
						      .mode = BFS_LOADER_CUDA,
						      .slots = 2,
						      .log = ct_quiet}),
	    0);
	ct_read_all(L, dir, 6, u, 500);
	bfs_loader_close(L);
	assert_int_equal(ct_capture_end(cap), CUDA_SUCCESS);
	ct_stream_destroy(u);
	ct_expect_clean_driver();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(a_global_capture_elsewhere_survives_a_loader),
	};
	return ct_run(tests, sizeof(tests) / sizeof(tests[0]));
}
