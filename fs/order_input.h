/* fs/order_input: the files behind --subset, --weights and
 * --generator-state.
 *
 *   indices  text, one integer per line (blank lines ignored), or a .npy
 *            1-D array of int64/int32 (either byte order)
 *   weights  text, one number per line, or a .npy 1-D float64/float32
 *   state    the raw bytes of torch.Generator.get_state(), e.g. written by
 *            open(f, 'wb').write(g.get_state().numpy().tobytes())
 * A file is .npy when it starts with the magic "\x93NUMPY", whatever its
 * name. */
#ifndef BFS_ORDER_INPUT_H
#define BFS_ORDER_INPUT_H

#include <stddef.h>
#include <stdint.h>

#include "fs/error.h"

/* Read sample indices from 'path' into a malloc'd array (*out, *n; the
 * caller frees). Range checks against the dataset are bfs_order_create's.
 * Returns 0, or -errno with 'err' naming the file, the line (text) or byte
 * offset (.npy) and the reason. */
int bfs_order_load_indices(const char *path, int64_t **out, size_t *n,
			   struct bfs_error *err);

/* Read weights from 'path' (as bfs_order_load_indices). Values are not
 * checked here (NaN, inf and negatives are bfs_order_create's to refuse). */
int bfs_order_load_weights(const char *path, double **out, size_t *n,
			   struct bfs_error *err);

/* Read a generator state blob: 5056 bytes (5048 from older torch; its
 * content is bfs_order_create's to check). Returns 0, or -errno with
 * 'err' naming the file and, for another size, the size it should have
 * (-EFBIG over 5056 bytes, -EINVAL under). */
int bfs_order_load_state(const char *path, uint8_t **out, size_t *len,
			 struct bfs_error *err);

#endif
