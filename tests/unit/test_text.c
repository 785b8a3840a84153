/* fs/text: the README and dataset.json of a mount, byte for byte, against
 * goldens (tests/unit/golden/text_<mount>.README and .json) for three
 * representative mounts:
 * - fixed fields in sequential order, from a source whose name holds a
 *   quote, backslashes and control characters (JSON-escaped in
 *   dataset.json);
 * - a padded and a packed ragged field in a shuffled order;
 * - a multi-rank mount (ranks 0, 2 and 3 of 4) of two shards;
 * and the metadata of two shards in dataset.json (0-dim tensors: each
 * key from the first shard that has it, keys escaped).
 * The temporary directory the sources live in reads "@TMP@" in the
 * goldens. Where /usr/bin/python3 with numpy runs, dataset.json is
 * parsed (json.load: valid JSON, the source named exactly as opened) and
 * the README's numpy reader runs: its table reads every safetensors code
 * of fs/dtype.c with that dtype's element size.
 * BFS_GOLDEN_WRITE=1 writes what was rendered over the goldens (review
 * the diff before committing it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fs/text.h"
#include "tests/lib/fixture.h"

/* The sources and what was rendered go in fx.dir (tmpdir below), kept
 * (fx.keep) when a golden differed. */
static struct tf_fixture fx;
static char realdir[PATH_MAX]; /* its realpath: "@TMP@" in goldens */

/* A quote, backslashes, a tab, a control character and DEL. */
static const char odd_name[] = "say \"hi\"\\back\\slash\t\x01\x7f.pt";

static int setup(void **state)
{
	if (tf_setup(&fx, NULL))
		return -1;
	return realpath(fx.dir, realdir) ? 0 : -1;
}

static int teardown(void **state)
{
	return tf_teardown(&fx);
}

/* ---- fixtures --------------------------------------------------------- */

/* Write archive tmpdir/name of fields[0..n) (tf_write_archive: storage
 * i is field i's, key "i"); its path into path. */
static void write_archive(const char *name, const struct tf_field *fields,
			  size_t n, char *path)
{
	assert_non_null(tf_path(&fx, name, path, PATH_MAX));
	assert_int_equal(tf_write_archive(path, fields, n), 0);
}

static struct bfs_dataset *open_dataset(const char *const *paths, size_t n)
{
	struct bfs_dataset *ds = NULL;
	struct bfs_error err = {{0}};

	if (bfs_dataset_open(&ds, paths, n, &err))
		fail_msg("dataset: %s", err.msg);
	return ds;
}

static struct bfs_order *make_order(const struct bfs_order_opts *o)
{
	struct bfs_order *ord = NULL;
	struct bfs_error err = {{0}};

	if (bfs_order_create(&ord, o, &err))
		fail_msg("order: %s", err.msg);
	return ord;
}

/* A fixed-field archive: x float32 [n, 2, 3] (x[i] = 6i .. 6i + 5), label
 * int64 [n] (= i). */
static void fixed_archive(const char *name, int64_t n, char *path)
{
	float *x = malloc((size_t)n * 6 * sizeof(*x));
	int64_t *label = malloc((size_t)n * sizeof(*label));
	const struct tf_field fields[] = {
	    {"x", BFS_DT_FLOAT32, 3, {n, 2, 3}, .data = x},
	    {"label", BFS_DT_INT64, 1, {n}, .data = label},
	};

	for (int64_t i = 0; i < n * 6; i++)
		x[i] = (float)i;
	for (int64_t i = 0; i < n; i++)
		label[i] = i;
	write_archive(name, fields, 2, path);
	free(x);
	free(label);
}

/* The mount's description besides its dataset, as `batchfs mount` fills
 * it in (tools/cmd_mount.c). */
static struct bfs_text_info info_for(const char *const *sources, size_t n)
{
	return (struct bfs_text_info){
	    .sources = sources,
	    .nsources = n,
	    .mountpoint = "/mnt/data",
	    .log = "/run/user/1000/batchfs/mnt-data.log",
	    .serve_mode = "passthrough",
	    .serve_why = "the kernel serves batch files itself (FUSE "
			 "passthrough)",
	    .reader = "io_uring",
	    .reader_why = "io_uring, 64 reads in flight",
	};
}

/* ---- goldens ---------------------------------------------------------- */

/* 'text' with every realdir replaced by "@TMP@", malloc'd. */
static char *placeholders(const char *text)
{
	size_t dl = strlen(realdir), n = 0;
	char *out = malloc(strlen(text) + 1);
	const char *p = text, *q;

	assert_non_null(out);
	while ((q = strstr(p, realdir))) {
		memcpy(out + n, p, (size_t)(q - p));
		n += (size_t)(q - p);
		memcpy(out + n, "@TMP@", 5);
		n += 5;
		p = q + dl;
	}
	strcpy(out + n, p);
	return out;
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	if (!f)
		fail_msg("%s: %s (BFS_GOLDEN_WRITE=1 writes it)", path,
			 strerror(errno));
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static void spit(const char *path, const char *text)
{
	FILE *f = fopen(path, "wb");

	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
	assert_int_equal(fclose(f), 0);
}

/* 'text' (tmpdir as "@TMP@") equals golden tests/unit/golden/'name';
 * else the test fails naming the first line that differs, and what was
 * rendered is left in tmpdir/'name'. */
static void expect_golden(const char *name, const char *text)
{
	const char *src = getenv("BFS_SRC");
	char path[PATH_MAX], got_path[PATH_MAX];
	char *got = placeholders(text), *want;
	size_t line = 1, i = 0;

	snprintf(path, sizeof(path), "%s/tests/unit/golden/%s", src ? src : ".",
		 name);
	if (getenv("BFS_GOLDEN_WRITE"))
		spit(path, got);
	want = slurp(path);
	if (strcmp(got, want)) {
		while (got[i] && got[i] == want[i])
			line += got[i++] == '\n';
		snprintf(got_path, sizeof(got_path), "%s/%s", fx.dir, name);
		spit(got_path, got);
		fx.keep = true;
		fail_msg("%s differs from its golden from line %zu on: "
			 "rendered into %s",
			 path, line, got_path);
	}
	free(got);
	free(want);
}

/* ---- python: dataset.json parses, the README's reader reads ---------- */

static const char py_check[] =
    "import json, sys\n"
    "try:\n"
    "    import numpy as np\n"
    "except ImportError:\n"
    "    sys.exit(77)\n"
    "d = json.load(open(sys.argv[1], encoding='utf-8'))\n"
    "assert d['sources'][0] == sys.argv[2], (d['sources'][0], sys.argv[2])\n"
    "src = open(sys.argv[3]).read()\n"
    "ns = {}\n"
    "exec(src[src.index('import json'):src.index('batch = read_batch')], "
    "ns)\n"
    "exec(src[src.index('def read_stream'):"
    "src.index('batches = list(read_stream')], ns)\n"
    "want = dict(a.split('=') for a in sys.argv[4:])\n"
    "assert sorted(ns['NP']) == sorted(want), (sorted(ns['NP']), "
    "sorted(want))\n"
    "for code, size in want.items():\n"
    "    assert np.dtype(ns['NP'][code]).itemsize == int(size), code\n";

/* Run py_check over json and readme (written to tmpdir) for a mount
 * whose first source is 'source'; skipped (said) without python3 or
 * numpy. */
static void python_reads(const char *json, const char *readme,
			 const char *source)
{
	char jpath[PATH_MAX], rpath[PATH_MAX], codes[BFS_DT_COUNT][32];
	const char *argv[4 + BFS_DT_COUNT + 1] = {"python3", "-c", py_check};
	size_t argc = 3;
	int status;
	pid_t pid;

	snprintf(jpath, sizeof(jpath), "%s/dataset.json", fx.dir);
	snprintf(rpath, sizeof(rpath), "%s/README", fx.dir);
	spit(jpath, json);
	spit(rpath, readme);
	argv[argc++] = jpath;
	argv[argc++] = source;
	argv[argc++] = rpath;
	for (int dt = 1; dt < BFS_DT_COUNT; dt++) {
		const struct bfs_dtype_info *di = bfs_dtype_info(dt);

		if (!di->st_name)
			continue; /* not served: refused at mount */
		snprintf(codes[dt], sizeof(codes[dt]), "%s=%zu", di->st_name,
			 di->size);
		argv[argc++] = codes[dt];
	}
	argv[argc] = NULL;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		execv("/usr/bin/python3", (char *const *)argv);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	if (WEXITSTATUS(status) == 127 || WEXITSTATUS(status) == 77) {
		print_message("python3 with numpy does not run here: "
			      "dataset.json and the README's reader are "
			      "checked against the goldens only\n");
		return;
	}
	if (WEXITSTATUS(status))
		fail_msg("dataset.json (%s) or the README's reader (%s) "
			 "failed in python3 (its message above)",
			 jpath, rpath);
}

/* Render, compare with the goldens text_<name>.README and .json, and
 * check them in python (the first source: 'source'). */
static void expect_texts(const char *name, const struct bfs_dataset *ds,
			 struct bfs_order *o, const struct bfs_layout *l,
			 const struct bfs_text_info *in, const char *source)
{
	char *readme = NULL, *json = NULL, golden[64];

	assert_int_equal(bfs_text_render(ds, o, l, in, &readme, &json), 0);
	snprintf(golden, sizeof(golden), "text_%s.README", name);
	expect_golden(golden, readme);
	snprintf(golden, sizeof(golden), "text_%s.json", name);
	expect_golden(golden, json);
	python_reads(json, readme, source);
	free(readme);
	free(json);
}

/* ---- the mounts --------------------------------------------------------- */

/* 10 samples of x [2, 3] and a label, batches of 4 in order (the last of
 * 2), from a source named with a quote, backslashes and control
 * characters. */
static void fixed_fields_in_order_from_an_odd_source_name(void **state)
{
	char path[PATH_MAX];
	const char *paths[] = {path};
	struct bfs_order_opts oo = {.sampler = BFS_SAMPLER_SEQUENTIAL,
				    .n = 10,
				    .batch_size = 4,
				    .epochs = 2};
	struct bfs_text_info in = info_for(paths, 1);
	struct bfs_dataset *ds;
	struct bfs_order *o;
	struct bfs_layout l;

	fixed_archive(odd_name, 10, path);
	ds = open_dataset(paths, 1);
	o = make_order(&oo);
	assert_int_equal(bfs_layout_init(&l, ds, 4, NULL), 0);
	in.batch_size = 4;
	in.seed_source = "unused";
	in.sampler = "sequential";
	in.options = "--batch-size 4 --epochs 2";
	expect_texts("fixed_sequential", ds, o, &l, &in, path);
	bfs_layout_fini(&l);
	bfs_order_destroy(o);
	bfs_dataset_close(ds);
}

/* 8 samples of a padded ragged field t (int16, lengths 0..4: VALUE -1,
 * MULTIPLE 4), a packed one u (float32 rows of 2) and a label, shuffled
 * (seed 7) into batches of 3. */
static void ragged_fields_in_a_shuffled_order(void **state)
{
	static const int64_t t_off[9] = {0, 2, 2, 5, 9, 10, 10, 13, 14};
	static const int64_t u_off[9] = {0, 1, 3, 3, 4, 7, 8, 8, 9};
	int16_t t_val[14];
	float u_val[9 * 2];
	int64_t label[8];
	const struct tf_field fields[] = {
	    {"t.values", BFS_DT_INT16, 1, {14}, .data = t_val},
	    {"t.offsets", BFS_DT_INT64, 1, {9}, .data = t_off},
	    {"u.values", BFS_DT_FLOAT32, 2, {9, 2}, .data = u_val},
	    {"u.offsets", BFS_DT_INT64, 1, {9}, .data = u_off},
	    {"label", BFS_DT_INT64, 1, {8}, .data = label},
	};
	struct bfs_ragged_opt ro[2];
	char path[PATH_MAX], why[128];
	const char *paths[] = {path};
	struct bfs_order_opts oo = {.sampler = BFS_SAMPLER_RANDOM,
				    .n = 8,
				    .batch_size = 3,
				    .seed = 7,
				    .epochs = 5};
	struct bfs_text_info in = info_for(paths, 1);
	struct bfs_error err = {{0}};
	struct bfs_dataset *ds;
	struct bfs_order *o;
	struct bfs_layout l;

	for (int i = 0; i < 14; i++)
		t_val[i] = (int16_t)(100 + i);
	for (int i = 0; i < 18; i++)
		u_val[i] = (float)i / 2;
	for (int i = 0; i < 8; i++)
		label[i] = i;
	write_archive("ragged.pt", fields, 5, path);
	ds = open_dataset(paths, 1);
	o = make_order(&oo);
	assert_int_equal(
	    bfs_ragged_opt_parse("t=-1:4", BFS_RAGGED_PAD, &ro[0], why, 128),
	    0);
	assert_int_equal(
	    bfs_ragged_opt_parse("u", BFS_RAGGED_PACK, &ro[1], why, 128), 0);
	if (bfs_layout_init_ragged(&l, ds, 3, ro, 2, &err))
		fail_msg("layout: %s", err.msg);
	in.batch_size = 3;
	in.seed = 7;
	in.shuffle = true;
	in.seed_source = "--seed";
	in.sampler = "random";
	in.options = "--batch-size 3 --shuffle --seed 7 --pad t=-1:4 "
		     "--pack u";
	in.serve_mode = "push";
	in.serve_why = "asked for (--serve push)";
	expect_texts("ragged_shuffled", ds, o, &l, &in, path);
	bfs_layout_fini(&l);
	bfs_ragged_opt_free(&ro[0]);
	bfs_ragged_opt_free(&ro[1]);
	bfs_order_destroy(o);
	bfs_dataset_close(ds);
}

/* Two shards of 12 samples each, DistributedSampler over 4 ranks
 * (shuffled, seed 5; DDP's usual pair: the sampler pads, DataLoader drops
 * the last batch) of which ranks 0, 2 and 3 are served: 6 samples per
 * rank, batches of 4, the short one dropped. */
static void ranks_of_a_distributed_order_over_two_shards(void **state)
{
	static const uint32_t ranks[] = {0, 2, 3};
	char a[PATH_MAX], b[PATH_MAX];
	const char *paths[] = {a, b};
	struct bfs_order_opts oo = {.sampler = BFS_SAMPLER_DISTRIBUTED,
				    .n = 24,
				    .batch_size = 4,
				    .drop_last = true,
				    .world_size = 4,
				    .shuffle = true,
				    .seed = 5,
				    .ranks = ranks,
				    .nranks = 3,
				    .epochs = 3};
	struct bfs_text_info in = info_for(paths, 2);
	struct bfs_dataset *ds;
	struct bfs_order *o;
	struct bfs_layout l;

	fixed_archive("a.pt", 12, a);
	fixed_archive("b.pt", 12, b);
	ds = open_dataset(paths, 2);
	o = make_order(&oo);
	assert_int_equal(bfs_layout_init(&l, ds, 4, NULL), 0);
	bfs_layout_bind_order(&l, o);
	in.batch_size = 4;
	in.seed = 5;
	in.shuffle = true;
	in.drop_last = true;
	in.seed_source = "--seed";
	in.sampler = "distributed";
	in.options = "--batch-size 4 --epochs 3 --drop-last --shuffle --seed "
		     "5 --world-size 4 --ranks 0,2,3";
	in.reader = "threads";
	in.reader_why = "16 reader threads: io_uring cannot be set up here "
			"(Operation not permitted)";
	expect_texts("ranks", ds, o, &l, &in, a);
	bfs_layout_fini(&l);
	bfs_order_destroy(o);
	bfs_dataset_close(ds);
}

/* A shard of n samples of label (int64) with 0-dim tensors beside it:
 * mean (float32 'mean'), and, when 'odd' is set, "k\"ey\\" (int64 -7). */
static void scalar_archive(const char *name, int64_t n, float mean, bool odd,
			   char *path)
{
	int64_t label[8], seven = -7;
	const struct tf_field fields[] = {
	    {"label", BFS_DT_INT64, 1, {n}, .data = label},
	    {"mean", BFS_DT_FLOAT32, 0, {0}, .data = &mean},
	    {"k\"ey\\", BFS_DT_INT64, 0, {0}, .data = &seven},
	};

	for (int64_t i = 0; i < n; i++)
		label[i] = i;
	write_archive(name, fields, odd ? 3 : 2, path);
}

/* dataset.json's "metadata": each key's value from the first shard that
 * has it (a 0-dim tensor's element), keys JSON-escaped. */
static void metadata_of_the_shards_first_shard_first(void **state)
{
	char a[PATH_MAX], b[PATH_MAX];
	const char *paths[] = {a, b};
	struct bfs_order_opts oo = {.sampler = BFS_SAMPLER_SEQUENTIAL,
				    .n = 8,
				    .batch_size = 4,
				    .epochs = 1};
	struct bfs_text_info in = info_for(paths, 2);
	struct bfs_dataset *ds;
	struct bfs_order *o;
	struct bfs_layout l;
	char *readme = NULL, *json = NULL;

	scalar_archive("meta_a.pt", 5, 0.5f, false, a);
	scalar_archive("meta_b.pt", 3, 0.75f, true, b);
	ds = open_dataset(paths, 2);
	assert_int_equal(bfs_dataset_nfields(ds), 1);
	o = make_order(&oo);
	assert_int_equal(bfs_layout_init(&l, ds, 4, NULL), 0);
	in.batch_size = 4;
	in.seed_source = "unused";
	in.sampler = "sequential";
	in.options = "--batch-size 4";
	assert_int_equal(bfs_text_render(ds, o, &l, &in, &readme, &json), 0);
	if (!strstr(json, "  \"metadata\": {\n"
			  "    \"mean\": 0.5,\n"
			  "    \"k\\\"ey\\\\\": -7\n"
			  "  },\n"))
		fail_msg("metadata not as expected in:\n%s", json);
	python_reads(json, readme, a);
	free(readme);
	free(json);
	bfs_layout_fini(&l);
	bfs_order_destroy(o);
	bfs_dataset_close(ds);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(fixed_fields_in_order_from_an_odd_source_name),
	    cmocka_unit_test(ragged_fields_in_a_shuffled_order),
	    cmocka_unit_test(ranks_of_a_distributed_order_over_two_shards),
	    cmocka_unit_test(metadata_of_the_shards_first_shard_first),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
