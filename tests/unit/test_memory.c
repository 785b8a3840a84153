/* fs/memory: the probe reads MemAvailable and the room the memory cgroups
 * leave (v2 and v1, the tightest of a cgroup and its ancestors, "no
 * limit" skipped) from files a test may replace (fake meminfo, cgroup
 * and mountinfo files whose cgroup mounts are directories here); the
 * policy reads in data that fits in half of it (every page resident, the
 * bytes counted, the read-in said to have ended), and marks data that
 * does not fit, or is taken not to, for random access (the mapping's
 * VmFlags say "rr") without a read-in; with the policy off it decides
 * nothing but still measures. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fs/dataset.h"
#include "fs/memory.h"
#include "tests/lib/fixture.h"

#define N	   64
#define ROW	   (64u << 10)
#define LIVENESS_S 30 /* a bound on waits, not a measurement */

/* The test's directory (fx.dir, "tmp" below): the data, and the fake
 * files the probe reads. */
static struct tf_fixture fx;
static char meminfo[300], cgroup[300], mountinfo[300];

/* Write 'text' into tmp/name (directories made as needed). */
static void put(const char *name, const char *text)
{
	char path[600];
	FILE *f;

	for (const char *s = strchr(name, '/'); s; s = strchr(s + 1, '/')) {
		snprintf(path, sizeof(path), "%s/%.*s", fx.dir, (int)(s - name),
			 name);
		mkdir(path, 0755);
	}
	snprintf(path, sizeof(path), "%s/%s", fx.dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

/* tmp/mountinfo: a cgroup2 hierarchy mounted at tmp/v2 and a v1 memory
 * one at tmp/v1 (with a cpu one beside it), as the kernel writes them. */
static void put_mountinfo(void)
{
	char text[2000];

	snprintf(text, sizeof(text),
		 "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
		 "30 23 0:26 / %s/v2 rw,nosuid,nodev,noexec,relatime "
		 "shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
		 "41 30 0:36 / %s/cpu rw,relatime - cgroup cgroup "
		 "rw,cpu,cpuacct\n"
		 "40 30 0:35 / %s/v1 rw,relatime - cgroup cgroup rw,memory\n",
		 fx.dir, fx.dir, fx.dir);
	put("mountinfo", text);
}

static void fill_x(void *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		((uint8_t *)x)[i] = (uint8_t)(i * 7 + i / ROW);
}

static void fill_y(void *y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		((int64_t *)y)[i] = (int64_t)i;
}

/* tmp/data: x.npy (uint8 [N, ROW], page-aligned) and y.npy (int64 [N]);
 * each test opens its own dataset of it. */
static int setup(void **state)
{
	const struct tf_field fields[] = {
	    {"x", BFS_DT_UINT8, 2, {N, ROW}, .fill = fill_x, .align = 4096},
	    {"y", BFS_DT_INT64, 1, {N}, .fill = fill_y},
	};
	const struct tf_spec spec = {.format = TF_NPY,
				     .name = "data",
				     .fields = fields,
				     .nfields = 2,
				     .write_only = true};

	if (tf_setup(&fx, &spec) ||
	    !tf_path(&fx, "meminfo", meminfo, sizeof(meminfo)) ||
	    !tf_path(&fx, "cgroup", cgroup, sizeof(cgroup)) ||
	    !tf_path(&fx, "mountinfo", mountinfo, sizeof(mountinfo)))
		return -1;
	return 0;
}

static int teardown(void **state)
{
	return tf_teardown(&fx);
}

static struct bfs_dataset *open_data(void)
{
	const char *p = fx.path;
	struct bfs_dataset *ds = NULL;
	struct bfs_error err = {{0}};

	if (bfs_dataset_open(&ds, &p, 1, &err))
		fail_msg("open %s: %s", p, err.msg);
	return ds;
}

static const struct bfs_memory_files files = {
    .meminfo = meminfo, .cgroup = cgroup, .mountinfo = mountinfo};

/* ---- the probe ----------------------------------------------------------- */

static void memavailable_alone(void **state)
{
	put("meminfo", "MemTotal:       8000000 kB\n"
		       "MemFree:          10000 kB\n"
		       "MemAvailable:      2048 kB\n"
		       "Buffers:            100 kB\n");
	put("cgroup", "0::/\n");
	put("mountinfo", "22 1 8:1 / / rw - ext4 /dev/vda rw\n");
	assert_int_equal(bfs_memory_available(&files), 2048u << 10);
}

static void no_meminfo_is_unknown(void **state)
{
	const struct bfs_memory_files none = {.meminfo = "/nonexistent/meminfo",
					      .cgroup = cgroup,
					      .mountinfo = mountinfo};

	put("cgroup", "0::/\n");
	put_mountinfo();
	assert_int_equal(bfs_memory_available(&none), 0);
}

/* The process's v2 cgroup /a/b leaves 6 MiB under its limit; its parent
 * has no limit ("max"): 6 MiB, though MemAvailable says 1 GiB. */
static void v2_cgroup_leaves_less(void **state)
{
	put("meminfo", "MemAvailable:   1048576 kB\n");
	put("cgroup", "0::/a/b\n");
	put_mountinfo();
	put("v2/a/b/memory.max", "10485760\n");
	put("v2/a/b/memory.current", "4194304\n");
	put("v2/a/memory.max", "max\n");
	put("v2/a/memory.current", "999999999\n");
	assert_int_equal(bfs_memory_available(&files), 6u << 20);
}

/* An ancestor that leaves less counts; usage past a limit leaves 0. */
static void the_tightest_ancestor_counts(void **state)
{
	put("meminfo", "MemAvailable:   1048576 kB\n");
	put("cgroup", "0::/a/b\n");
	put_mountinfo();
	put("v2/a/b/memory.max", "10485760\n");
	put("v2/a/b/memory.current", "4194304\n");
	put("v2/a/memory.max", "5242880\n");
	put("v2/a/memory.current", "4194304\n");
	assert_int_equal(bfs_memory_available(&files), 1u << 20);
	put("v2/a/memory.current", "6291456\n");
	assert_int_equal(bfs_memory_available(&files), 0);
}

/* A v1 memory hierarchy (a hybrid system: cpu on v1 too, and a v2 line
 * with no cgroup2 mount of its own): the cgroup /m has no limit (v1
 * writes it as about 2^63), the hierarchy's root leaves 6 MiB. */
static void v1_memory_hierarchy(void **state)
{
	char text[1000];

	put("meminfo", "MemAvailable:   1048576 kB\n");
	put("cgroup", "12:cpu,cpuacct:/c\n4:memory:/m\n0::/\n");
	snprintf(text, sizeof(text),
		 "41 30 0:36 / %s/cpu rw,relatime - cgroup cgroup "
		 "rw,cpu,cpuacct\n"
		 "40 30 0:35 / %s/v1 rw,relatime - cgroup cgroup rw,memory\n",
		 fx.dir, fx.dir);
	put("mountinfo", text);
	put("cpu/c/memory.limit_in_bytes", "1\n"); /* not memory's */
	put("cpu/c/memory.usage_in_bytes", "0\n");
	put("v1/m/memory.limit_in_bytes", "9223372036854771712\n");
	put("v1/m/memory.usage_in_bytes", "1\n");
	put("v1/memory.limit_in_bytes", "8388608\n");
	put("v1/memory.usage_in_bytes", "2097152\n");
	assert_int_equal(bfs_memory_available(&files), 6u << 20);
}

/* ---- the policy ---------------------------------------------------------- */

/* Wait until *done says so (a liveness bound, not a measurement). */
static bool wait_for(bool (*done)(const struct bfs_memory *),
		     const struct bfs_memory *m)
{
	for (int i = 0; i < LIVENESS_S * 100 && !done(m); i++)
		nanosleep(&(struct timespec){0, 10000000}, NULL);
	return done(m);
}

/* Whether every page of file i's mapping is resident. */
static bool all_resident(const struct bfs_dataset *ds, size_t i)
{
	const struct bfs_source_file *fl = bfs_dataset_file(ds, i);
	size_t np = (size_t)((fl->size + 4095) / 4096);
	unsigned char *vec = malloc(np ? np : 1);
	bool all = vec && mincore((void *)fl->map, (size_t)fl->size, vec) == 0;

	for (size_t p = 0; all && p < np; p++)
		all = vec[p] & 1;
	free(vec);
	return all;
}

/* Whether this process's mapping of 'path' is marked for random access
 * (VM_RAND_READ: "rr" in /proc/self/smaps' VmFlags). */
static bool random_access(const char *path)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[4096];
	bool in = false, rr = false, seen = false;

	while (f && fgets(line, sizeof(line), f)) {
		size_t n = strlen(line);
		unsigned long a, b;

		if (n && line[n - 1] == '\n')
			line[--n] = '\0';
		if (sscanf(line, "%lx-%lx ", &a, &b) == 2) {
			in = n >= strlen(path) &&
			     !strcmp(line + n - strlen(path), path);
			seen |= in;
		} else if (in && !strncmp(line, "VmFlags:", 8)) {
			rr |= strstr(line, " rr") != NULL;
		}
	}
	if (f)
		fclose(f);
	assert_true(seen);
	return rr;
}

static void x_path(char *out, size_t len)
{
	snprintf(out, len, "%s/x.npy", fx.path);
}

/* 4 MiB of data, 1 GiB available: read in, every page resident. */
static void data_that_fits_is_read_in(void **state)
{
	struct bfs_dataset *ds = open_data();
	struct bfs_memory *m;
	char xp[400];

	put("meminfo", "MemAvailable:   1048576 kB\n");
	put("cgroup", "0::/\n");
	put_mountinfo();
	assert_int_equal(
	    bfs_memory_create(
		&m, ds,
		&(struct bfs_memory_opts){.policy = true, .files = &files}),
	    0);
	assert_int_equal(bfs_memory_avail(m), 1ull << 30);
	assert_false(bfs_memory_cold(m));
	assert_true(bfs_memory_reading_in(m));
	assert_true(wait_for(bfs_memory_read_in, m));
	assert_int_equal(bfs_memory_read_in_bytes(m), bfs_dataset_bytes(ds));
	for (size_t i = 0; i < bfs_dataset_nfiles(ds); i++) {
		/* resident once read in (kernels before MADV_POPULATE_READ
		 * only start the reads: a liveness bound, not a measure) */
		for (int t = 0; t < LIVENESS_S * 100 && !all_resident(ds, i);
		     t++)
			nanosleep(&(struct timespec){0, 10000000}, NULL);
		assert_true(all_resident(ds, i));
	}
	x_path(xp, sizeof(xp));
	assert_false(random_access(xp));
	bfs_memory_destroy(m);
	bfs_dataset_close(ds);
}

/* 4 MiB of data, 4 MiB available: not half of it. */
static void data_that_does_not_fit_is_cold(void **state)
{
	struct bfs_dataset *ds = open_data();
	struct bfs_memory *m;
	char xp[400];

	put("meminfo", "MemAvailable:      4096 kB\n");
	put("cgroup", "0::/\n");
	put_mountinfo();
	assert_int_equal(
	    bfs_memory_create(
		&m, ds,
		&(struct bfs_memory_opts){.policy = true, .files = &files}),
	    0);
	assert_true(bfs_memory_cold(m));
	assert_false(bfs_memory_reading_in(m));
	assert_false(bfs_memory_read_in(m));
	assert_int_equal(bfs_memory_read_in_bytes(m), 0);
	x_path(xp, sizeof(xp));
	assert_true(random_access(xp));
	bfs_memory_destroy(m);
	bfs_dataset_close(ds);
}

/* The cgroup leaves too little, though MemAvailable is plenty. */
static void a_cgroup_too_small_makes_it_cold(void **state)
{
	struct bfs_dataset *ds = open_data();
	struct bfs_memory *m;

	put("meminfo", "MemAvailable:   1048576 kB\n");
	put("cgroup", "0::/a/b\n");
	put_mountinfo();
	put("v2/a/b/memory.max", "10485760\n");
	put("v2/a/b/memory.current", "4194304\n");
	put("v2/a/memory.max", "max\n");
	assert_int_equal(
	    bfs_memory_create(
		&m, ds,
		&(struct bfs_memory_opts){.policy = true, .files = &files}),
	    0);
	assert_int_equal(bfs_memory_avail(m), 6u << 20);
	assert_true(bfs_memory_cold(m));
	assert_false(bfs_memory_reading_in(m));
	bfs_memory_destroy(m);
	bfs_dataset_close(ds);
}

static void assume_cold_is_cold(void **state)
{
	struct bfs_dataset *ds = open_data();
	struct bfs_memory *m;

	put("meminfo", "MemAvailable:   1048576 kB\n");
	put("cgroup", "0::/\n");
	put_mountinfo();
	assert_int_equal(
	    bfs_memory_create(&m, ds,
			      &(struct bfs_memory_opts){.policy = true,
							.assume_cold = true,
							.files = &files}),
	    0);
	assert_true(bfs_memory_cold(m));
	assert_false(bfs_memory_reading_in(m));
	bfs_memory_destroy(m);
	bfs_dataset_close(ds);
}

/* Policy off: nothing decided, the memory still measured. */
static void without_policy_nothing_is_decided(void **state)
{
	struct bfs_dataset *ds = open_data();
	struct bfs_memory *m;

	put("meminfo", "MemAvailable:      4096 kB\n");
	put("cgroup", "0::/\n");
	put_mountinfo();
	assert_int_equal(
	    bfs_memory_create(&m, ds,
			      &(struct bfs_memory_opts){.files = &files}),
	    0);
	assert_int_equal(bfs_memory_avail(m), 4u << 20);
	assert_false(bfs_memory_cold(m));
	assert_false(bfs_memory_reading_in(m));
	bfs_memory_destroy(m);
	bfs_memory_destroy(NULL);
	bfs_dataset_close(ds);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(memavailable_alone),
	    cmocka_unit_test(no_meminfo_is_unknown),
	    cmocka_unit_test(v2_cgroup_leaves_less),
	    cmocka_unit_test(the_tightest_ancestor_counts),
	    cmocka_unit_test(v1_memory_hierarchy),
	    cmocka_unit_test(data_that_fits_is_read_in),
	    cmocka_unit_test(data_that_does_not_fit_is_cold),
	    cmocka_unit_test(a_cgroup_too_small_makes_it_cold),
	    cmocka_unit_test(assume_cold_is_cold),
	    cmocka_unit_test(without_policy_nothing_is_decided),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
