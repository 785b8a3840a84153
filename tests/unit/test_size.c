/* fs/size: checked arithmetic refuses everything above 2^63 - 1 (also
 * products that wrap 64 bits to a small number), numel follows torch's
 * rule (a running product that wraps before a zero size is refused),
 * storage extents follow computeStorageNbytes; and fs/error's quoting of
 * untrusted bytes in messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "fs/error.h"
#include "fs/size.h"

#define P(n) ((uint64_t)1 << (n))

static void products_and_sums_above_2_63_minus_1_are_refused(void **state)
{
	uint64_t v;

	assert_int_equal(bfs_size_mul(P(31), P(31), &v), 0);
	assert_true(v == P(62));
	assert_int_equal(bfs_size_mul(INT64_MAX, 1, &v), 0);
	assert_int_equal(bfs_size_mul(P(62), 2, &v), -EOVERFLOW);
	/* wraps 64 bits to 0: the case that corrupted memory */
	assert_int_equal(bfs_size_mul(P(59), P(5), &v), -EOVERFLOW);
	assert_int_equal(bfs_size_mul(P(32), P(32), &v), -EOVERFLOW);
	assert_int_equal(bfs_size_mul(0, UINT64_MAX, &v), 0);
	assert_true(v == 0);
	assert_int_equal(bfs_size_add(INT64_MAX, 0, &v), 0);
	assert_int_equal(bfs_size_add(INT64_MAX, 1, &v), -EOVERFLOW);
	assert_int_equal(bfs_size_add(UINT64_MAX, 2, &v), -EOVERFLOW);
	assert_int_equal(bfs_size_mul_add(P(61), 3, P(61) - 1, &v), 0);
	assert_true(v == INT64_MAX);
	assert_int_equal(bfs_size_mul_add(P(61), 3, P(61), &v), -EOVERFLOW);
}

static void numel_is_refused_exactly_when_torch_refuses_it(void **state)
{
	const int64_t wraps_before_zero[] = {1ll << 40, 1ll << 40, 0};
	const int64_t zero_first[] = {0, 1ll << 40, 1ll << 40};
	const int64_t row_of_4[] = {40, (1ll << 62) + 1};
	const int64_t just_fits[] = {1ll << 31, (1ll << 32) - 1};
	const int64_t two_63[] = {2, 1ll << 62};
	const int64_t max[] = {INT64_MAX};
	uint64_t v;

	assert_int_equal(bfs_size_numel(wraps_before_zero, 3, &v), -EOVERFLOW);
	assert_int_equal(bfs_size_numel(zero_first, 3, &v), 0);
	assert_true(v == 0);
	assert_int_equal(bfs_size_numel(row_of_4, 2, &v), -EOVERFLOW);
	assert_int_equal(bfs_size_numel(just_fits, 2, &v), 0);
	assert_true(v == P(63) - P(31));
	assert_int_equal(bfs_size_numel(two_63, 2, &v), -EOVERFLOW);
	assert_int_equal(bfs_size_numel(max, 1, &v), 0);
	assert_int_equal(bfs_size_numel(NULL, 0, &v), 0); /* a scalar */
	assert_true(v == 1);
	/* the exact product: a zero anywhere makes it 0 */
	assert_int_equal(bfs_size_prod(wraps_before_zero, 3, &v), 0);
	assert_true(v == 0);
	assert_int_equal(bfs_size_prod(row_of_4 + 1, 1, &v), 0);
	assert_int_equal(bfs_size_prod(two_63, 2, &v), -EOVERFLOW);
}

static void extent_is_the_storage_a_view_needs(void **state)
{
	const int64_t size[] = {40, 1ll << 62}, stride0[] = {1, 0};
	const int64_t empty[] = {3, 0}, huge_stride[] = {1, INT64_MAX};
	const int64_t two[] = {2, 2}, c_stride[] = {2, 1};
	uint64_t v;

	assert_int_equal(bfs_size_extent(size, stride0, 2, 0, 1, &v), 0);
	assert_true(v == 40); /* stride 0: one row of storage */
	assert_int_equal(bfs_size_extent(two, c_stride, 2, 3, 8, &v), 0);
	assert_true(v == (3 + 1 + 2 + 1) * 8);
	assert_int_equal(
	    bfs_size_extent(empty, huge_stride, 2, INT64_MAX, 8, &v), 0);
	assert_true(v == 0); /* empty: no storage, whatever else */
	assert_int_equal(bfs_size_extent(two, huge_stride, 2, 0, 1, &v),
			 -EOVERFLOW);
	assert_int_equal(bfs_size_extent(two, c_stride, 2, INT64_MAX, 1, &v),
			 -EOVERFLOW);
	assert_int_equal(bfs_size_extent(two, c_stride, 2, P(61), 8, &v),
			 -EOVERFLOW);
}

static void shapes_and_bytes_are_shown_safely(void **state)
{
	const int64_t s[] = {40, (1ll << 62) + 1};
	const int64_t many[] = {1111111, 2222222, 3333333, 4444444, 5555555};
	char b[64], small[24];

	assert_string_equal(bfs_size_shape_str(b, sizeof(b), s, 2),
			    "[40, 4611686018427387905]");
	assert_string_equal(bfs_size_shape_str(b, sizeof(b), s, 0), "[]");
	bfs_size_shape_str(small, sizeof(small), many, 5);
	assert_string_equal(small, "[1111111, 2222222...]");
	assert_string_equal(bfs_error_quote(b, sizeof(b), "big\0garbage", 11),
			    "big\\x00garbage");
	assert_string_equal(bfs_error_quote(b, sizeof(b), "a\\b\n", 4),
			    "a\\x5cb\\x0a");
	assert_string_equal(bfs_error_quote(small, 10, "0123456789", 10),
			    "012345...");
	assert_string_equal(bfs_error_quote(small, 3, "0123", 4), "");
}

static void gb_are_shown_exactly(void **state)
{
	char b[32];

	(void)state;
	assert_string_equal(bfs_size_gb_str(b, sizeof(b), 50000000), "0.05");
	assert_string_equal(bfs_size_gb_str(b, sizeof(b), 130000), "0.00013");
	assert_string_equal(bfs_size_gb_str(b, sizeof(b), 2000000000), "2");
	assert_string_equal(bfs_size_gb_str(b, sizeof(b), 1234567891),
			    "1.234567891");
	assert_string_equal(bfs_size_gb_str(b, sizeof(b), 0), "0");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(products_and_sums_above_2_63_minus_1_are_refused),
	    cmocka_unit_test(numel_is_refused_exactly_when_torch_refuses_it),
	    cmocka_unit_test(extent_is_the_storage_a_view_needs),
	    cmocka_unit_test(shapes_and_bytes_are_shown_safely),
	    cmocka_unit_test(gb_are_shown_exactly),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
