/* libFuzzer target: the restricted pickle VM over arbitrary bytes. Every
 * accepted result is checked against the invariants fs/dataset relies on
 * (geometry inside the storage, names set). */
#include <stddef.h>
#include <stdint.h>

#include "fs/pickle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct bfs_error err = {""};
	struct bfs_pickle_result r = {0};

	if (bfs_pickle_load(data, size, "fuzz.pkl", 0, &r, &err) != 0) {
		if (!err.msg[0]) /* every refusal says why */
			__builtin_trap();
		return 0;
	}
	for (size_t i = 0; i < r.n_tensors; i++) {
		const struct bfs_pickle_tensor *t = &r.tensors[i];
		if (!t->name || !t->storage_key || t->ndim < 0 ||
		    t->ndim > BFS_MAX_DIMS || !bfs_dtype_info(t->dtype))
			__builtin_trap();
	}
	bfs_pickle_result_free(&r);
	return 0;
}
