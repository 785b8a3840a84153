/* The dtype table. See the checklist in fs/dtype.h before editing. */
#include "fs/dtype.h"

#include <string.h>

static const struct bfs_dtype_info dtypes[BFS_DT_COUNT] = {
    [BFS_DT_BOOL] = {"bool", "BOOL", "BoolStorage", "|b1", 1, 1},
    [BFS_DT_UINT8] = {"uint8", "U8", "ByteStorage", "|u1", 1, 1},
    [BFS_DT_INT8] = {"int8", "I8", "CharStorage", "|i1", 1, 1},
    [BFS_DT_INT16] = {"int16", "I16", "ShortStorage", "<i2", 2, 2},
    [BFS_DT_INT32] = {"int32", "I32", "IntStorage", "<i4", 4, 4},
    [BFS_DT_INT64] = {"int64", "I64", "LongStorage", "<i8", 8, 8},
    [BFS_DT_UINT16] = {"uint16", "U16", NULL, "<u2", 2, 2},
    [BFS_DT_UINT32] = {"uint32", "U32", NULL, "<u4", 4, 4},
    [BFS_DT_UINT64] = {"uint64", "U64", NULL, "<u8", 8, 8},
    [BFS_DT_FLOAT16] = {"float16", "F16", "HalfStorage", "<f2", 2, 2},
    [BFS_DT_BFLOAT16] = {"bfloat16", "BF16", "BFloat16Storage", NULL, 2, 2},
    [BFS_DT_FLOAT32] = {"float32", "F32", "FloatStorage", "<f4", 4, 4},
    [BFS_DT_FLOAT64] = {"float64", "F64", "DoubleStorage", "<f8", 8, 8},
    [BFS_DT_COMPLEX32] = {"complex32", NULL, "ComplexHalfStorage", NULL, 4, 2},
    [BFS_DT_COMPLEX64] = {"complex64", "C64", "ComplexFloatStorage", "<c8", 8,
			  4},
    [BFS_DT_COMPLEX128] = {"complex128", NULL, "ComplexDoubleStorage", "<c16",
			   16, 8},
    [BFS_DT_FLOAT8_E4M3FN] = {"float8_e4m3fn", "F8_E4M3", NULL, NULL, 1, 1},
    [BFS_DT_FLOAT8_E5M2] = {"float8_e5m2", "F8_E5M2", NULL, NULL, 1, 1},
};

const struct bfs_dtype_info *bfs_dtype_info(enum bfs_dtype dt)
{
	if (dt <= BFS_DT_INVALID || dt >= BFS_DT_COUNT)
		return NULL;
	return &dtypes[dt];
}

/* Field selectors for the lookups below. */
enum key { KEY_TORCH, KEY_STORAGE, KEY_ST, KEY_NUMPY };

static const char *key_of(const struct bfs_dtype_info *d, enum key k)
{
	switch (k) {
	case KEY_TORCH:
		return d->torch_name;
	case KEY_STORAGE:
		return d->storage;
	case KEY_ST:
		return d->st_name;
	case KEY_NUMPY:
		return d->numpy_descr;
	}
	return NULL;
}

static enum bfs_dtype lookup(const char *name, enum key k)
{
	if (!name)
		return BFS_DT_INVALID;
	for (int i = 1; i < BFS_DT_COUNT; i++) {
		const char *s = key_of(&dtypes[i], k);
		if (s && strcmp(s, name) == 0)
			return (enum bfs_dtype)i;
	}
	return BFS_DT_INVALID;
}

enum bfs_dtype bfs_dtype_from_torch(const char *name)
{
	return lookup(name, KEY_TORCH);
}

enum bfs_dtype bfs_dtype_from_storage(const char *name)
{
	return lookup(name, KEY_STORAGE);
}

enum bfs_dtype bfs_dtype_from_st(const char *name)
{
	return lookup(name, KEY_ST);
}

enum bfs_dtype bfs_dtype_from_numpy(const char *descr)
{
	return lookup(descr, KEY_NUMPY);
}
