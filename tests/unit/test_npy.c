/* fs/npy: headers we write parse back, numpy's spellings are accepted and
 * malformed or unsupported headers are refused with the offending offset. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fs/npy.h"
#include "tests/lib/npy_header.h"

static void written_headers_parse_back_aligned(void **state)
{
	int64_t shape[3] = {1000, 3, 32};
	char buf[8192];
	struct bfs_npy n;
	struct bfs_error err = {{0}};

	for (size_t align = 64; align <= 4096; align *= 64) {
		for (int nd = 0; nd <= 3; nd++) {
			ssize_t len = ta_npy_header(
			    buf, sizeof(buf), BFS_DT_FLOAT32, nd, shape, align);
			assert_true(len > 0 && len % (ssize_t)align == 0);
			assert_int_equal(buf[len - 1], '\n');
			assert_int_equal(bfs_npy_parse((uint8_t *)buf,
						       (size_t)len, "w", &n,
						       &err),
					 0);
			assert_int_equal(n.dtype, BFS_DT_FLOAT32);
			assert_int_equal(n.ndim, nd);
			assert_int_equal(n.data_off, (uint64_t)len);
			uint64_t want = 4;
			for (int d = 0; d < nd; d++) {
				assert_int_equal(n.shape[d], shape[d]);
				want *= (uint64_t)shape[d];
			}
			assert_int_equal(n.data_bytes, want);
		}
	}
	/* bfloat16 has no numpy descr. */
	assert_int_equal(
	    ta_npy_header(buf, sizeof(buf), BFS_DT_BFLOAT16, 1, shape, 64),
	    -EINVAL);
}

/* A v1.0 header around 'dict', as numpy lays it out. */
static size_t make(uint8_t *buf, const char *dict)
{
	size_t n = strlen(dict), total = (10 + n + 1 + 63) / 64 * 64;

	memcpy(buf, "\x93NUMPY\x01\x00", 8);
	buf[8] = (uint8_t)(total - 10);
	buf[9] = (uint8_t)((total - 10) >> 8);
	memcpy(buf + 10, dict, n);
	memset(buf + 10 + n, ' ', total - 10 - n - 1);
	buf[total - 1] = '\n';
	return total;
}

static void numpy_spellings_are_accepted(void **state)
{
	uint8_t buf[512];
	struct bfs_npy n;
	size_t len;

	len = make(buf, "{'descr': '|b1', 'fortran_order': False, "
			"'shape': (5,), }");
	assert_int_equal(bfs_npy_parse(buf, len, "t", &n, NULL), 0);
	assert_int_equal(n.dtype, BFS_DT_BOOL);
	len = make(buf, "{\"shape\": (2, 3), \"descr\": \">c8\", "
			"\"fortran_order\": False}");
	assert_int_equal(bfs_npy_parse(buf, len, "t", &n, NULL), 0);
	assert_int_equal(n.dtype, BFS_DT_COMPLEX64);
	assert_int_equal(n.big_endian, 1);
	assert_int_equal(n.data_bytes, 48);
	len = make(buf, "{'descr': '<u1', 'fortran_order': False, 'shape': "
			"(), }");
	assert_int_equal(bfs_npy_parse(buf, len, "t", &n, NULL), 0);
	assert_int_equal(n.dtype, BFS_DT_UINT8);
	assert_int_equal(n.ndim, 0);
	assert_int_equal(n.data_bytes, 1);
	/* Short buffer: ask for more, do not fail. */
	assert_int_equal(bfs_npy_parse(buf, 20, "t", &n, NULL), -EAGAIN);
}

static void bad_headers_are_refused_with_a_reason(void **state)
{
	static const struct {
		const char *dict, *why;
	} bad[] = {
	    {"{'descr': '|O', 'fortran_order': False, 'shape': (2,), }",
	     "object"},
	    {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': "
	     "(2,), }",
	     "structured"},
	    {"{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }",
	     "dimension"},
	    {"{'descr': '<f4', 'fortran_order': False, 'shape': "
	     "(99999999999, 99999999999), }",
	     "2^63-1"},
	    {"{'descr': '<f4', 'shape': (2,), }", "needs"},
	    {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
	     "'shape': (2,)}",
	     "duplicate"},
	    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), "
	     "'x': 1}",
	     "unknown key"},
	    {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} junk",
	     "trailing"},
	};
	uint8_t buf[512];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct bfs_error err = {{0}};
		struct bfs_npy n;
		size_t len = make(buf, bad[i].dict);
		assert_int_equal(bfs_npy_parse(buf, len, "bad.npy", &n, &err),
				 -EINVAL);
		if (!strstr(err.msg, bad[i].why) || !strstr(err.msg, "bad.npy"))
			fail_msg("'%s': message '%s' lacks '%s'", bad[i].dict,
				 err.msg, bad[i].why);
	}
	memcpy(buf, "\x93NUMPX", 6);
	assert_int_equal(
	    bfs_npy_parse(buf, 64, "x", &(struct bfs_npy){0}, NULL), -EINVAL);
}

static void fortran_order_is_reported_not_refused(void **state)
{
	uint8_t buf[512];
	struct bfs_npy n;
	size_t len = make(buf, "{'descr': '>i2', 'fortran_order': True, "
			       "'shape': (3, 4), }");

	assert_int_equal(bfs_npy_parse(buf, len, "f.npy", &n, NULL), 0);
	assert_true(n.fortran);
	assert_true(n.big_endian);
	assert_int_equal(n.data_bytes, 24);
	len = make(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': "
			"(0, 4611686018427387904), }");
	assert_int_equal(bfs_npy_parse(buf, len, "e.npy", &n, NULL), 0);
	assert_false(n.fortran);
	assert_int_equal(n.data_bytes, 0); /* a zero size wins */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(written_headers_parse_back_aligned),
	    cmocka_unit_test(numpy_spellings_are_accepted),
	    cmocka_unit_test(bad_headers_are_refused_with_a_reason),
	    cmocka_unit_test(fortran_order_is_reported_not_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
