/* Property test of tensor geometry (tests/lib/geometry): thousands of
 * random archives with any sizes, strides, offsets and dtypes (stride 0,
 * negative values, products near 2^63 included) are opened with fs/dataset
 * and laid out with fs/layout; whether each is accepted, its row bytes,
 * and every byte of a gathered batch must agree with an independent model,
 * and no gather may write outside its batch buffer (guard pages).
 * GEOMETRY_CASES and GEOMETRY_SEED change the run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fs/log.h"
#include "tests/lib/geometry.h"

/* xorshift64*: the cases' source of words. */
static uint64_t next(void *arg)
{
	uint64_t *x = arg;

	*x ^= *x >> 12;
	*x ^= *x << 25;
	*x ^= *x >> 27;
	return *x * 0x2545F4914F6CDD1Dull;
}

static void quiet(enum bfs_log_level level, const char *line)
{
}

static void random_geometries_agree_with_the_model(void **state)
{
	const char *n_env = getenv("GEOMETRY_CASES");
	const char *s_env = getenv("GEOMETRY_SEED");
	const char *tmp = getenv("BFS_TEST_TMP");
	unsigned long cases = n_env ? strtoul(n_env, NULL, 10) : 10000;
	uint64_t x = s_env ? strtoull(s_env, NULL, 10) : 0x9e3779b97f4a7c15ull;
	unsigned long accepted = 0;
	char path[512];

	snprintf(path, sizeof(path), "%s/geometry.%d.pt", tmp ? tmp : "/tmp",
		 (int)getpid());
	bfs_log_setup(BFS_LOG_ERR, quiet);
	for (unsigned long i = 0; i < cases; i++) {
		struct geo_case c;

		geo_draw(&c, next, &x);
		accepted += (unsigned long)geo_check(&c, path);
		geo_free(&c);
	}
	unlink(path);
	printf("geometry: %lu cases, %lu accepted, %lu refused\n", cases,
	       accepted, cases - accepted);
	/* both sides of the model must be exercised */
	assert_true(accepted > cases / 20);
	assert_true(cases - accepted > cases / 20);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(random_geometries_agree_with_the_model),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
