/* The dtype table agrees with torch's names, sizes and safetensors codes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "fs/dtype.h"

static void every_dtype_round_trips_through_its_torch_name(void **state)
{
	for (int i = 1; i < BFS_DT_COUNT; i++) {
		const struct bfs_dtype_info *d = bfs_dtype_info(i);
		assert_non_null(d);
		assert_int_equal(bfs_dtype_from_torch(d->torch_name), i);
		assert_true(d->size >= 1 && d->size <= 16);
		assert_int_equal(d->size % d->swap_unit, 0);
		if (d->st_name)
			assert_int_equal(bfs_dtype_from_st(d->st_name), i);
		if (d->storage)
			assert_int_equal(bfs_dtype_from_storage(d->storage), i);
	}
}

static void legacy_storages_map_to_their_torch_dtypes(void **state)
{
	assert_int_equal(bfs_dtype_from_storage("FloatStorage"),
			 BFS_DT_FLOAT32);
	assert_int_equal(bfs_dtype_from_storage("ByteStorage"), BFS_DT_UINT8);
	assert_int_equal(bfs_dtype_from_storage("CharStorage"), BFS_DT_INT8);
	assert_int_equal(bfs_dtype_from_storage("BFloat16Storage"),
			 BFS_DT_BFLOAT16);
	assert_int_equal(bfs_dtype_from_storage("ComplexFloatStorage"),
			 BFS_DT_COMPLEX64);
	assert_int_equal(bfs_dtype_info(BFS_DT_COMPLEX64)->swap_unit, 4);
	assert_int_equal(bfs_dtype_from_storage("QInt8Storage"),
			 BFS_DT_INVALID);
	assert_null(bfs_dtype_info(BFS_DT_INVALID));
	assert_null(bfs_dtype_info(BFS_DT_COUNT));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(every_dtype_round_trips_through_its_torch_name),
	    cmocka_unit_test(legacy_storages_map_to_their_torch_dtypes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
