/* Element types: torch names, safetensors codes, numpy descrs, sizes; and
 * the most dims a tensor may have.
 *
 * Checklist when you add a dtype: add it to enum bfs_dtype (before
 * BFS_DT_COUNT), to the table in fs/dtype.c (fs/pickle_torch.c resolves the
 * torch.<T>Storage and torch.<dtype> globals through it, and a mount's
 * README renders its numpy reader's table from it, fs/text.c: nothing to
 * add there), to tests/unit/test_dtype.c, to the dtype list of the interop
 * fixtures (tests/interop/), to NP in loader/python/batchfs/_batchfile.py
 * (Python's one table: the tests import it) and to README.md's numpy
 * reader (tests/cli/test_readme.py checks that it reads every code). */
#ifndef BFS_DTYPE_H
#define BFS_DTYPE_H

#include <stddef.h>

/* The most dims a tensor of a source may have (a torch.save archive, a
 * .npy file, a safetensors entry): more are refused, naming the tensor. */
#define BFS_MAX_DIMS 64

enum bfs_dtype {
	BFS_DT_INVALID = 0,
	BFS_DT_BOOL,
	BFS_DT_UINT8,
	BFS_DT_INT8,
	BFS_DT_INT16,
	BFS_DT_INT32,
	BFS_DT_INT64,
	BFS_DT_UINT16,
	BFS_DT_UINT32,
	BFS_DT_UINT64,
	BFS_DT_FLOAT16,
	BFS_DT_BFLOAT16,
	BFS_DT_FLOAT32,
	BFS_DT_FLOAT64,
	BFS_DT_COMPLEX32,
	BFS_DT_COMPLEX64,
	BFS_DT_COMPLEX128,
	BFS_DT_FLOAT8_E4M3FN,
	BFS_DT_FLOAT8_E5M2,
	BFS_DT_COUNT
};

struct bfs_dtype_info {
	const char *torch_name; /* "float32": as str(torch.float32)[6:] */
	const char *st_name;	/* safetensors code "F32", NULL if none */
	const char *storage; /* legacy storage class "FloatStorage" or NULL */
	const char *numpy_descr; /* "<f4", NULL when numpy has none */
	size_t size;		 /* bytes per element */
	size_t swap_unit;	 /* byte-swap granularity (complex: size/2) */
};

/* Table entry for 'dt'; NULL for BFS_DT_INVALID or out of range. */
const struct bfs_dtype_info *bfs_dtype_info(enum bfs_dtype dt);

/* Lookups by name; BFS_DT_INVALID when unknown. */
enum bfs_dtype bfs_dtype_from_torch(const char *name);	 /* "float32" */
enum bfs_dtype bfs_dtype_from_storage(const char *name); /* "FloatStorage" */
enum bfs_dtype bfs_dtype_from_st(const char *name);	 /* "F32" */
enum bfs_dtype bfs_dtype_from_numpy(const char *descr);	 /* "<f4", "|u1" */

#endif
