/* libFuzzer target: the .npy header parser (fs/npy) over arbitrary bytes,
 * as sources (.npy files, .npz members) and --subset/--weights files use
 * it. A refusal must give a reason; -EAGAIN (header longer than the
 * bytes) must ask for more than it got; an accepted header must describe
 * a dtype batchfs knows, sizes >= 0, and data_bytes = product(shape) x
 * element size within 2^63 - 1, after a header that lies in the bytes. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "fs/npy.h"
#include "fs/size.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct bfs_error err = {{0}};
	struct bfs_npy h;
	uint64_t n;
	int rc = bfs_npy_parse(data, size, "fuzz.npy", &h, &err);

	if (rc == -EAGAIN) {
		if (size >= 12 && h.data_off && h.data_off <= size)
			abort(); /* asked for no more than it had */
		return 0;
	}
	if (rc) {
		if (!err.msg[0])
			abort();
		return 0;
	}
	if (!bfs_dtype_info(h.dtype) || h.data_off > size || h.ndim < 0 ||
	    h.ndim > BFS_MAX_DIMS)
		abort();
	for (int d = 0; d < h.ndim; d++)
		if (h.shape[d] < 0)
			abort();
	if (bfs_size_prod(h.shape, h.ndim, &n) ||
	    bfs_size_mul(n, bfs_dtype_info(h.dtype)->size, &n) ||
	    n != h.data_bytes)
		abort();
	return 0;
}
