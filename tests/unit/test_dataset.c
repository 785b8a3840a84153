/* fs/dataset over archives this test writes itself (tests/lib/archive: a
 * tiny stored-ZIP and protocol-2 pickle writer, independent of `batchfs
 * pack` and torch):
 * gather of contiguous, strided, view, big-endian and sharded data, and the
 * refusals (each message must name the file and the field). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fs/dataset.h"
#include "fs/log.h"
#include "fs/readahead.h"
#include "fs/zip.h"
#include "tests/lib/fixture.h"

/* fs/readahead's advice on rows idx[0..n) of ds (no memory policy, no
 * fetch: every fixed field is advised). */
static void advise(const struct bfs_dataset *ds, const uint64_t *idx, size_t n)
{
	struct bfs_readahead *ra;

	assert_int_equal(
	    bfs_readahead_create(&ra, ds, &(struct bfs_readahead_opts){0}), 0);
	bfs_readahead_rows(ra, idx, n);
	bfs_readahead_destroy(ra);
}

static struct tf_fixture fx; /* the directory the archives go in */

/* An archive "<fx.dir>/<file>" (tests/lib/archive: prefix "arc"): data.pkl
 * for ts[], the given storages, version, optional byteorder and optional
 * extra record. Returns the path (static storage, 16 at a time). */
static const char *make_archive(const char *file, const struct ta_tensor *ts,
				size_t nt, const struct ta_storage *st,
				size_t ns, const char *version,
				const char *byteorder, const char *extra)
{
	static char paths[16][300];
	static int next;
	char *path = paths[next++ % 16];
	uint8_t *b;
	size_t n = ta_build(&b, ts, nt, st, ns, version, byteorder, extra);

	assert_non_null(tf_path(&fx, file, path, 300));
	assert_int_equal(ta_write(path, b, n), 0);
	free(b);
	return path;
}

static struct bfs_dataset *open1(const char *path)
{
	struct bfs_dataset *ds = NULL;
	struct bfs_error err = {{0}};
	int rc = bfs_dataset_open(&ds, &path, 1, &err);

	if (rc)
		fail_msg("open %s: %s", path, err.msg);
	return ds;
}

/* Expect open to fail with a message containing every string in 'want'. */
static void expect_refusal(const char *const *paths, size_t n,
			   const char *want1, const char *want2)
{
	struct bfs_dataset *ds = NULL;
	struct bfs_error err = {{0}};
	int rc = bfs_dataset_open(&ds, paths, n, &err);

	assert_true(rc < 0);
	assert_null(ds);
	if (!strstr(err.msg, want1) || (want2 && !strstr(err.msg, want2)))
		fail_msg("message '%s' lacks '%s' / '%s'", err.msg, want1,
			 want2 ? want2 : "");
}

/* ---- fixtures ----------------------------------------------------------- */

static float xf[5][3];	  /* x: f32 [5,3], contiguous */
static int64_t yl[5];	  /* y: i64 [5] */
static float base[4 * 6]; /* a 6x4 storage for strided views */

static int setup(void **state)
{
	if (tf_setup(&fx, NULL))
		fail_msg("%s", fx.err.msg);
	for (int i = 0; i < 5; i++) {
		for (int j = 0; j < 3; j++)
			xf[i][j] = (float)(i * 10 + j);
		yl[i] = (int64_t)i * 1000000007LL - 3;
	}
	for (int i = 0; i < 24; i++)
		base[i] = (float)i + 0.5f;
	return 0;
}

static int teardown(void **state)
{
	return tf_teardown(&fx);
}

static const char *simple_archive(const char *file, int64_t y_samples)
{
	struct ta_tensor ts[] = {
	    {"x", BFS_DT_FLOAT32, "0", 15, 0, 2, {5, 3}, {3, 1}},
	    {"y", BFS_DT_INT64, "1", 5, 0, 1, {y_samples}, {1}},
	};
	struct ta_storage st[] = {{"0", xf, sizeof(xf)}, {"1", yl, sizeof(yl)}};
	return make_archive(file, ts, 2, st, 2, "3\n", "little", NULL);
}

/* ---- tests -------------------------------------------------------------- */

static void contiguous_rows_come_back_in_index_order(void **state)
{
	struct bfs_dataset *ds = open1(simple_archive("simple.pt", 5));
	uint64_t idx[] = {4, 0, 2, 2};
	float got[4][3];
	int64_t gy[4];

	assert_int_equal(bfs_dataset_samples(ds), 5);
	assert_int_equal(bfs_dataset_nfields(ds), 2);
	assert_string_equal(bfs_dataset_field(ds, 0)->name, "x");
	assert_int_equal(bfs_dataset_field(ds, 0)->row_bytes, 12);
	assert_int_equal(bfs_dataset_field(ds, 1)->ndim, 0);
	assert_int_equal(bfs_dataset_gather(ds, 0, idx, 4, got), 0);
	assert_int_equal(bfs_dataset_gather(ds, 1, idx, 4, gy), 0);
	for (int i = 0; i < 4; i++) {
		assert_memory_equal(got[i], xf[idx[i]], sizeof(got[i]));
		assert_true(gy[i] == yl[idx[i]]);
	}
	uint64_t bad = 5;
	assert_int_equal(bfs_dataset_gather(ds, 0, &bad, 1, got), -ERANGE);
	advise(ds, idx, 4); /* best effort: must not crash */
	bfs_dataset_close(ds);
}

/* Views of one 6x4 storage: a slice with an offset, a transpose, a stepped
 * column view, all sharing dim 0 = 6 (per-sample shape differs). */
static void strided_views_of_one_storage_gather_like_torch(void **state)
{
	struct ta_tensor ts[] = {
	    /* base[:, 1:3]: [6,2] stride (4,1) offset 1 */
	    {"slice", BFS_DT_FLOAT32, "0", 24, 1, 2, {6, 2}, {4, 1}},
	    /* base.view(4,6).t(): [6,4] stride (1,6) */
	    {"trans", BFS_DT_FLOAT32, "0", 24, 0, 2, {6, 4}, {1, 6}},
	    /* base[:, ::2] as [6,1,2] stride (4,2,2): size-1 dim inside */
	    {"step", BFS_DT_FLOAT32, "0", 24, 0, 3, {6, 1, 2}, {4, 99, 2}},
	    /* whole storage, contiguous [6,2,2] */
	    {"all", BFS_DT_FLOAT32, "0", 24, 0, 3, {6, 2, 2}, {4, 2, 1}},
	};
	struct ta_storage st[] = {{"0", base, sizeof(base)}};
	const char *p =
	    make_archive("views.pt", ts, 4, st, 1, "3\n", NULL, NULL);
	struct bfs_dataset *ds = open1(p);
	uint64_t idx[] = {5, 1, 3, 0, 5};
	float got[5 * 4];

	assert_int_equal(bfs_dataset_samples(ds), 6);
	for (size_t f = 0; f < 4; f++) {
		const struct ta_tensor *t = &ts[f];
		const struct bfs_field *fl = bfs_dataset_field(ds, f);
		assert_int_equal(bfs_dataset_gather(ds, f, idx, 5, got), 0);
		size_t k = 0;
		for (int i = 0; i < 5; i++) {
			int64_t n1 = t->ndim > 1 ? t->size[1] : 1;
			int64_t n2 = t->ndim > 2 ? t->size[2] : 1;
			for (int64_t a = 0; a < n1; a++)
				for (int64_t c = 0; c < n2; c++, k++) {
					int64_t e =
					    t->offset +
					    (int64_t)idx[i] * t->stride[0] +
					    a * t->stride[1] +
					    (t->ndim > 2 ? c * t->stride[2]
							 : 0);
					if (got[k] != base[e])
						fail_msg("field %s sample %d "
							 "el %zu: %g != %g",
							 t->name, (int)idx[i],
							 k, got[k], base[e]);
				}
		}
		assert_int_equal(k * 4, 5 * fl->row_bytes);
	}
	bfs_dataset_close(ds);
}

static void big_endian_archives_are_swapped_per_element(void **state)
{
	uint8_t i32be[3 * 4], c64be[3 * 8], u8[3] = {7, 8, 9};
	int32_t want32[3] = {1, -2, 0x01020304};
	float wantc[6] = {1.5f, -2.25f, 3.0f, 4.0f, -0.0f, 1e10f};
	for (int i = 0; i < 3; i++)
		for (int k = 0; k < 4; k++)
			i32be[i * 4 + k] =
			    (uint8_t)((uint32_t)want32[i] >> (24 - 8 * k));
	for (int i = 0; i < 6; i++) {
		uint32_t u;
		memcpy(&u, &wantc[i], 4);
		for (int k = 0; k < 4; k++)
			c64be[i * 4 + k] = (uint8_t)(u >> (24 - 8 * k));
	}
	struct ta_tensor ts[] = {
	    {"i", BFS_DT_INT32, "0", 3, 0, 1, {3}, {1}},
	    {"c", BFS_DT_COMPLEX64, "1", 3, 0, 1, {3}, {1}},
	    {"b", BFS_DT_UINT8, "2", 3, 0, 1, {3}, {1}},
	};
	struct ta_storage st[] = {
	    {"0", i32be, 12}, {"1", c64be, 24}, {"2", u8, 3}};
	const char *p = make_archive("be.pt", ts, 3, st, 3, "3\n", "big", NULL);
	struct bfs_dataset *ds = open1(p);
	struct bfs_shard_info si;
	uint64_t idx[] = {2, 0, 1};
	int32_t gi[3];
	float gc[6];
	uint8_t gb[3];

	bfs_dataset_shard(ds, 0, &si);
	assert_int_equal(si.big_endian, 1);
	assert_int_equal(si.version, 3);
	assert_int_equal(bfs_dataset_gather(ds, 0, idx, 3, gi), 0);
	assert_int_equal(bfs_dataset_gather(ds, 1, idx, 3, gc), 0);
	assert_int_equal(bfs_dataset_gather(ds, 2, idx, 3, gb), 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(gi[i], want32[idx[i]]);
		assert_memory_equal(&gc[2 * i], &wantc[2 * idx[i]], 8);
		assert_int_equal(gb[i], u8[idx[i]]);
	}
	bfs_dataset_close(ds);
}

static void shards_concatenate_along_dim0(void **state)
{
	const char *paths[3];
	struct bfs_dataset *ds = NULL;
	struct bfs_error err = {{0}};
	struct ta_tensor e[] = {
	    {"x", BFS_DT_FLOAT32, "0", 0, 0, 2, {0, 3}, {3, 1}},
	    {"y", BFS_DT_INT64, "1", 0, 0, 1, {0}, {1}},
	};
	struct ta_storage est[] = {{"0", "", 0}, {"1", "", 0}};
	uint64_t idx[] = {9, 0, 5, 4, 3};
	float got[5][3];
	struct bfs_shard_info si;

	paths[0] = simple_archive("s0.pt", 5);
	paths[1] = make_archive("s1.pt", e, 2, est, 2, "3\n", NULL, NULL);
	paths[2] = simple_archive("s2.pt", 5);
	if (bfs_dataset_open(&ds, paths, 3, &err))
		fail_msg("%s", err.msg);
	assert_int_equal(bfs_dataset_samples(ds), 10);
	assert_int_equal(bfs_dataset_nshards(ds), 3);
	bfs_dataset_shard(ds, 2, &si);
	assert_int_equal(si.first_sample, 5);
	assert_int_equal(bfs_dataset_gather(ds, 0, idx, 5, got), 0);
	for (int i = 0; i < 5; i++)
		assert_memory_equal(got[i], xf[idx[i] % 5], 12);
	bfs_dataset_close(ds);
}

/* A shard may list the same fields in another dict order: they are
 * matched by name; a mismatch shows both dtypes and per-sample shapes. */
static void shard_fields_match_by_name_in_any_order(void **state)
{
	const char *paths[2];
	struct bfs_dataset *ds = NULL;
	struct bfs_error err = {{0}};
	struct ta_tensor swapped[] = {
	    {"y", BFS_DT_INT64, "1", 5, 0, 1, {5}, {1}},
	    {"x", BFS_DT_FLOAT32, "0", 15, 0, 2, {5, 3}, {3, 1}},
	};
	/* y of x's 3 samples: a shard of 5 and 3 would be refused alone
	 * (no sample count shared by the most fields) */
	struct ta_tensor wide[] = {
	    {"y", BFS_DT_INT64, "1", 5, 0, 1, {3}, {1}},
	    {"x", BFS_DT_FLOAT32, "0", 15, 0, 2, {3, 5}, {5, 1}},
	};
	struct ta_storage st[] = {{"0", xf, sizeof(xf)}, {"1", yl, sizeof(yl)}};
	uint64_t idx[] = {7, 2, 9};
	int64_t got[3];

	paths[0] = simple_archive("order0.pt", 5);
	paths[1] =
	    make_archive("order1.pt", swapped, 2, st, 2, "3\n", NULL, NULL);
	if (bfs_dataset_open(&ds, paths, 2, &err))
		fail_msg("%s", err.msg);
	assert_string_equal(bfs_dataset_field(ds, 1)->name, "y");
	assert_int_equal(bfs_dataset_gather(ds, 1, idx, 3, got), 0);
	for (int i = 0; i < 3; i++)
		assert_true(got[i] == yl[idx[i] % 5]);
	bfs_dataset_close(ds);
	paths[1] = make_archive("wide.pt", wide, 2, st, 2, "3\n", NULL, NULL);
	expect_refusal(paths, 2, "wide.pt",
		       "field 'x' is float32 [5] per sample here but float32 "
		       "[3] in");
}

/* A 0-dim tensor (a mean, a learning rate) has no sample dimension: it
 * is the source's metadata, its element's value as JSON, not a field. */
static void a_0_dim_tensor_is_metadata_with_its_value(void **state)
{
	struct ta_tensor ts[] = {
	    {"x", BFS_DT_FLOAT32, "0", 15, 0, 2, {5, 3}, {3, 1}},
	    {"lr", BFS_DT_FLOAT32, "0", 15, 4, 0, {0}, {0}},
	};
	struct ta_storage st[] = {{"0", xf, sizeof(xf)}};
	const char *p = make_archive("lr.pt", ts, 2, st, 1, "3\n", NULL, NULL);
	struct bfs_dataset *ds = open1(p);
	struct bfs_shard_info sh;

	assert_int_equal(bfs_dataset_nfields(ds), 1);
	assert_string_equal(bfs_dataset_field(ds, 0)->name, "x");
	bfs_dataset_shard(ds, 0, &sh);
	assert_int_equal(sh.source->nmeta, 1);
	assert_string_equal(sh.source->meta[0].key, "lr");
	assert_string_equal(sh.source->meta[0].json, "11.0"); /* xf[1][1] */
	assert_string_equal(sh.source->meta[0].what, "a 0-dim tensor");
	bfs_dataset_close(ds);
}

/* A tensor whose first dimension is not the sample count (a mean per
 * channel) is metadata: its view's values as nested lists; one too large
 * its dtype and shape (the count: that of the most large fields, then of
 * the most fields); one outside its storage is refused. */
static void a_tensor_of_another_first_dim_is_metadata(void **state)
{
	struct ta_tensor ts[] = {
	    /* 1500 elements: too large to be metadata, as big is */
	    {"x", BFS_DT_FLOAT32, "0", 15, 0, 2, {5, 300}, {3, 0}},
	    {"y", BFS_DT_INT64, "1", 5, 0, 1, {5}, {1}},
	    /* column 1 of rows 1..2, transposed: [[11.0], [21.0]] */
	    {"col", BFS_DT_FLOAT32, "0", 15, 4, 2, {2, 1}, {3, 1}},
	    {"big", BFS_DT_INT64, "1", 5, 0, 2, {4, 2000}, {0, 0}},
	};
	struct ta_tensor outside[] = {
	    {"x", BFS_DT_FLOAT32, "0", 15, 0, 2, {5, 3}, {3, 1}},
	    {"y", BFS_DT_INT64, "1", 5, 0, 1, {5}, {1}},
	    {"w", BFS_DT_FLOAT32, "0", 15, 14, 1, {2}, {1}},
	};
	struct ta_storage st[] = {{"0", xf, sizeof(xf)}, {"1", yl, sizeof(yl)}};
	const char *p = make_archive("col.pt", ts, 4, st, 2, "3\n", NULL, NULL);
	struct bfs_dataset *ds = open1(p);
	struct bfs_shard_info sh;

	assert_int_equal(bfs_dataset_samples(ds), 5);
	assert_int_equal(bfs_dataset_nfields(ds), 2);
	bfs_dataset_shard(ds, 0, &sh);
	assert_int_equal(sh.source->nmeta, 2);
	assert_string_equal(sh.source->meta[0].key, "col");
	assert_string_equal(sh.source->meta[0].json, "[[11.0], [21.0]]");
	assert_string_equal(sh.source->meta[0].what, "a float32 tensor [2, 1]");
	assert_string_equal(sh.source->meta[1].key, "big");
	assert_string_equal(sh.source->meta[1].json,
			    "{\"__type__\": \"torch.Tensor\", \"dtype\": "
			    "\"int64\", \"shape\": [4, 2000], \"__omitted__\": "
			    "\"more than 1024 elements\"}");
	bfs_dataset_close(ds);
	p = make_archive("wout.pt", outside, 3, st, 2, "3\n", NULL, NULL);
	expect_refusal(&p, 1, "wout.pt",
		       "tensor extent (offset 14, 1 dims) exceeds storage");
}

static void refusals_name_the_file_and_the_field(void **state)
{
	const char *p;
	struct ta_tensor scalar[] = {
	    {"x", BFS_DT_FLOAT32, "0", 15, 0, 2, {5, 3}, {3, 1}},
	    {"lr", BFS_DT_FLOAT32, "0", 15, 16, 0, {0}, {0}},
	};
	struct ta_tensor toolong[] = {
	    {"x", BFS_DT_FLOAT32, "0", 16, 0, 2, {5, 3}, {3, 1}},
	};
	struct ta_tensor outside[] = {
	    {"x", BFS_DT_FLOAT32, "0", 15, 1, 2, {5, 3}, {3, 1}},
	};
	struct ta_storage st[] = {{"0", xf, sizeof(xf)}};

	p = simple_archive("mismatch.pt", 4);
	expect_refusal(&p, 1, "mismatch.pt", "field 'y' has 4 samples");
	/* a 0-dim tensor is metadata, but not one outside its storage */
	p = make_archive("scalar.pt", scalar, 2, st, 1, "3\n", NULL, NULL);
	expect_refusal(&p, 1, "scalar.pt",
		       "tensor extent (offset 16, 0 dims) exceeds storage");
	p = make_archive("size.pt", toolong, 1, st, 1, "3\n", NULL, NULL);
	expect_refusal(&p, 1, "size.pt", "field 'x': record");
	p = make_archive("extent.pt", outside, 1, st, 1, "3\n", NULL, NULL);
	expect_refusal(&p, 1, "extent.pt", "exceeds");
	p = make_archive("v11.pt", toolong, 0, st, 1, "11\n", NULL, NULL);
	expect_refusal(&p, 1, "v11.pt", "version");
	p = make_archive("nov.pt", toolong, 0, st, 1, NULL, NULL, NULL);
	expect_refusal(&p, 1, "nov.pt", "version");
	p = make_archive("bo.pt", toolong, 0, st, 1, "3\n", "middle", NULL);
	expect_refusal(&p, 1, "bo.pt", "byteorder");
	p = make_archive("ts.pt", toolong, 0, st, 1, "3\n", NULL,
			 "constants.pkl");
	expect_refusal(&p, 1, "ts.pt", "TorchScript");

	/* Shards must agree: y as int32 in the second one. */
	const char *paths[2];
	int32_t yi[5] = {0};
	struct ta_tensor other[] = {
	    {"x", BFS_DT_FLOAT32, "0", 15, 0, 2, {5, 3}, {3, 1}},
	    {"y", BFS_DT_INT32, "1", 5, 0, 1, {5}, {1}},
	};
	struct ta_storage ost[] = {{"0", xf, sizeof(xf)},
				   {"1", yi, sizeof(yi)}};
	paths[0] = simple_archive("ok.pt", 5);
	paths[1] =
	    make_archive("int32.pt", other, 2, ost, 2, "3\n", NULL, NULL);
	expect_refusal(paths, 2, "int32.pt", "'y'");
}

/* Truncation is detected before the copy: -EIO and a log line naming the
 * file and the sample. */
static char last_log[1024];
static int sigbus_logs, changed_logs;
static void capture(enum bfs_log_level level, const char *line)
{
	snprintf(last_log, sizeof(last_log), "%s", line);
	sigbus_logs += strstr(line, "SIGBUS") != NULL;
	changed_logs += strstr(line, "changed under the mount") != NULL;
}

static void truncated_archive_gives_eio_and_names_the_sample(void **state)
{
	const char *p = simple_archive("trunc.pt", 5);
	struct bfs_dataset *ds = open1(p);
	uint64_t idx[] = {3};
	float got[3];

	assert_int_equal(truncate(p, 100), 0);
	bfs_log_setup(BFS_LOG_INFO, capture);
	assert_int_equal(bfs_dataset_gather(ds, 0, idx, 1, got), -EIO);
	bfs_log_setup(BFS_LOG_INFO, NULL);
	assert_non_null(strstr(last_log, "trunc.pt"));
	assert_non_null(strstr(last_log, "sample 3"));
	bfs_dataset_close(ds);
}

/* bfs_dataset_row: contiguous little-endian rows point into the mapping
 * (the bytes gather returns); strided views and byte-swapped fields need a
 * gather (-ENOTSUP). bfs_dataset_check: -EIO once the file shrank. */
static void rows_served_in_place_only_when_stored_as_served(void **state)
{
	const char *p = simple_archive("rows.pt", 5);
	struct bfs_dataset *ds = open1(p);
	uint64_t idx[] = {4, 1};
	const void *row = NULL;
	float got[3];
	int64_t gy;

	for (uint64_t i = 0; i < 5; i++) {
		assert_int_equal(bfs_dataset_row(ds, 0, i, &row), 0);
		assert_int_equal(bfs_dataset_gather(ds, 0, &i, 1, got), 0);
		assert_memory_equal(row, got, sizeof(got));
		assert_int_equal(bfs_dataset_row(ds, 1, i, &row), 0);
		assert_int_equal(bfs_dataset_gather(ds, 1, &i, 1, &gy), 0);
		assert_memory_equal(row, &gy, 8);
	}
	assert_int_equal(bfs_dataset_row(ds, 0, 5, &row), -ERANGE);
	assert_int_equal(bfs_dataset_row(ds, 2, 0, &row), -EINVAL);
	assert_int_equal(bfs_dataset_check(ds, idx, 2), 0);
	assert_int_equal(truncate(p, 100), 0);
	bfs_log_setup(BFS_LOG_INFO, capture);
	assert_int_equal(bfs_dataset_check(ds, idx, 2), -EIO);
	bfs_log_setup(BFS_LOG_INFO, NULL);
	assert_non_null(strstr(last_log, "rows.pt"));
	assert_non_null(strstr(last_log, "sample 4"));
	bfs_dataset_close(ds);

	struct ta_tensor ts[] = {
	    {"slice", BFS_DT_FLOAT32, "0", 24, 1, 2, {6, 2}, {4, 1}},
	    {"trans", BFS_DT_FLOAT32, "0", 24, 0, 2, {6, 4}, {1, 6}},
	};
	struct ta_storage st[] = {{"0", base, sizeof(base)}};
	ds = open1(make_archive("rviews.pt", ts, 2, st, 1, "3\n", NULL, NULL));
	assert_int_equal(bfs_dataset_row(ds, 0, 3, &row), 0);
	assert_memory_equal(row, &base[3 * 4 + 1], 8);
	assert_int_equal(bfs_dataset_row(ds, 1, 3, &row), -ENOTSUP);
	bfs_dataset_close(ds);

	uint8_t be[8] = {0, 0, 0, 1, 0, 0, 0, 2}, u8[2] = {5, 6};
	struct ta_tensor bt[] = {
	    {"i", BFS_DT_INT32, "0", 2, 0, 1, {2}, {1}},
	    {"b", BFS_DT_UINT8, "1", 2, 0, 1, {2}, {1}},
	};
	struct ta_storage bst[] = {{"0", be, 8}, {"1", u8, 2}};
	ds = open1(make_archive("rbe.pt", bt, 2, bst, 2, "3\n", "big", NULL));
	assert_int_equal(bfs_dataset_row(ds, 0, 1, &row), -ENOTSUP);
	assert_int_equal(bfs_dataset_row(ds, 1, 1, &row), 0);
	assert_int_equal(*(const uint8_t *)row, 6);
	bfs_dataset_close(ds);
}

/* A file shrinking and growing back while another thread gathers: every
 * gather returns 0 or -EIO; SIGBUS never kills the process. */
static void archive_truncated_during_gather_never_crashes(void **state)
{
	enum { N = 64, ROW = 64 * 1024 };
	uint8_t *big = calloc(N, ROW), *dst = malloc(ROW * 8);
	struct ta_tensor ts[] = {
	    {"x", BFS_DT_UINT8, "0", N * ROW, 0, 2, {N, ROW}, {ROW, 1}},
	};
	struct ta_storage st[] = {{"0", big, (size_t)N * ROW}};
	const char *p =
	    make_archive("flip.pt", ts, 1, st, 1, "3\n", NULL, NULL);
	struct bfs_dataset *ds = open1(p);
	struct ta_flip fl;
	int eio = 0, ok = 0;

	bfs_log_setup(BFS_LOG_INFO, capture);
	ta_flip_start(&fl, p);
	for (int round = 0; round < 2000; round++) {
		uint64_t idx[8];
		for (int i = 0; i < 8; i++)
			idx[i] = (uint64_t)(round * 7 + i * 13) % N;
		int rc = bfs_dataset_gather(ds, 0, idx, 8, dst);
		assert_true(rc == 0 || rc == -EIO);
		rc ? eio++ : ok++;
	}
	ta_flip_stop(&fl);
	bfs_log_setup(BFS_LOG_INFO, NULL);
	print_message("flip: %d gathers ok, %d -EIO (%d caught as SIGBUS)\n",
		      ok, eio, sigbus_logs);
	bfs_dataset_close(ds);
	free(big);
	free(dst);
}

/* A dataset over "<fx.dir>/<file>" (N rows of ROW bytes) whose copies
 * fault: the archive is truncated to its first page while fstat of the
 * dataset's descriptor still reports the full size (another file of that
 * size is dup2'ed over it), so the size check passes and every row past
 * the first page raises SIGBUS inside the guarded copy. */
enum { FAULT_N = 16, FAULT_ROW = 8192 };
static struct bfs_dataset *faulting_dataset(const char *file, uint8_t *rows)
{
	enum { N = FAULT_N, ROW = FAULT_ROW };
	struct ta_tensor ts[] = {
	    {"x", BFS_DT_UINT8, "0", N * ROW, 0, 2, {N, ROW}, {ROW, 1}},
	};
	struct ta_storage st[] = {{"0", rows, (size_t)N * ROW}};
	const char *p = make_archive(file, ts, 1, st, 1, "3\n", NULL, NULL);
	struct bfs_dataset *ds = open1(p);
	struct bfs_shard_info si;
	char other[300];
	struct stat sb;
	int fd;

	bfs_dataset_shard(ds, 0, &si);
	assert_int_equal(stat(p, &sb), 0);
	snprintf(other, sizeof(other), "%s.size", p);
	fd = open(other, O_RDWR | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, sb.st_size), 0);
	/* and its mtime: not a file modified since it was opened */
	assert_int_equal(
	    futimens(fd, (struct timespec[]){sb.st_atim, sb.st_mtim}), 0);
	assert_int_equal(dup2(fd, si.zip->fd), si.zip->fd);
	close(fd);
	assert_int_equal(truncate(p, 4096), 0);
	return ds;
}

/* Regression (found by ThreadSanitizer, whose wrapper runs signal handlers
 * with every signal blocked): the guard jumped out of the handler without
 * restoring the signal mask, so SIGBUS stayed blocked and the second fault
 * on the thread killed the process. Here the guard's handler is
 * re-registered with a full mask, as such a wrapper would run it; three
 * faulting gathers in a row must each return -EIO (in a child process, so
 * a death is a failed assertion, not a lost test run). */
static void
faults_caught_even_when_the_handler_runs_with_signals_blocked(void **state)
{
	uint8_t *rows = calloc(FAULT_N, FAULT_ROW), *dst = malloc(FAULT_ROW);
	struct bfs_dataset *ds = faulting_dataset("masked.pt", rows);
	uint64_t idx[] = {FAULT_N - 1};
	int status = -1;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		struct sigaction sa;
		int eio = 0;

		sigbus_logs = 0;
		bfs_log_setup(BFS_LOG_INFO, capture);
		eio += bfs_dataset_gather(ds, 0, idx, 1, dst) == -EIO;
		sigaction(SIGBUS, NULL, &sa); /* the guard's handler */
		sigfillset(&sa.sa_mask);
		sigaction(SIGBUS, &sa, NULL);
		eio += bfs_dataset_gather(ds, 0, idx, 1, dst) == -EIO;
		eio += bfs_dataset_gather(ds, 0, idx, 1, dst) == -EIO;
		eio += bfs_dataset_gather(ds, 0, idx, 1, dst) == -EIO;
		_exit(eio == 4 && sigbus_logs == 4 ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFEXITED(status))
		fail_msg("the gathering process died of signal %d",
			 WTERMSIG(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	bfs_dataset_close(ds);
	free(rows);
	free(dst);
}

/* A gather that faults leaves, for this thread, the archive, the sample
 * and the archive offset of the fault (inside the sample's row), for the
 * caller's log line; a gather that succeeds leaves none. */
static void a_fault_names_the_sample_and_its_archive_offset(void **state)
{
	uint8_t *rows = calloc(FAULT_N, FAULT_ROW), *dst = malloc(FAULT_ROW);
	struct bfs_dataset *ds = faulting_dataset("where.pt", rows);
	uint64_t idx[] = {FAULT_N - 2}, first[] = {0};
	struct bfs_dataset_fault f;
	struct bfs_shard_info si;
	const void *row;

	bfs_dataset_shard(ds, 0, &si);
	assert_int_equal(bfs_dataset_row(ds, 0, FAULT_N - 2, &row), 0);
	bfs_log_setup(BFS_LOG_INFO, capture);
	assert_int_equal(bfs_dataset_gather(ds, 0, idx, 1, dst), -EIO);
	bfs_log_setup(BFS_LOG_INFO, NULL);
	assert_int_equal(bfs_dataset_fault(&f), 0);
	assert_int_equal(f.sample, FAULT_N - 2);
	assert_string_equal(f.path, si.path);
	uint64_t start = (uint64_t)((const uint8_t *)row - si.zip->map);
	assert_true(f.offset >= start && f.offset < start + FAULT_ROW);
	assert_non_null(strstr(last_log, "at archive offset"));
	bfs_dataset_close(ds);
	ds = open1(simple_archive("where2.pt", 5));
	assert_int_equal(bfs_dataset_gather(ds, 1, first, 1, dst), 0);
	assert_int_equal(bfs_dataset_fault(&f), -ENOENT);
	bfs_dataset_close(ds);
	free(rows);
	free(dst);
}

/* The size check is per row: a file found shorter with its mtime
 * unchanged (what a FUSE server's short read leaves in the kernel's
 * cache) still serves the samples whose rows lie before the cut, right;
 * a gather that needs a row past it fails with -EIO, naming that sample
 * and the offset where the file now ends. */
static void a_shorter_file_serves_the_rows_before_the_cut(void **state)
{
	enum { N = 16, ROW = 4096 };
	uint8_t *rows = malloc(N * ROW), got[2 * ROW];
	struct ta_tensor ts[] = {
	    {"x", BFS_DT_UINT8, "0", N * ROW, 0, 2, {N, ROW}, {ROW, 1}},
	};
	struct ta_storage st[] = {{"0", rows, (size_t)N * ROW}};
	const char *p;
	struct bfs_dataset *ds;
	struct bfs_dataset_fault f;
	const void *row;
	uint64_t before[] = {9, 2}, after[] = {3, 11, 12};

	for (size_t i = 0; i < (size_t)N * ROW; i++)
		rows[i] = (uint8_t)(i * 7 + i / ROW);
	p = make_archive("cut.pt", ts, 1, st, 1, "3\n", NULL, NULL);
	ds = open1(p);
	assert_int_equal(bfs_dataset_row(ds, 0, 10, &row), 0);
	struct bfs_shard_info si;
	bfs_dataset_shard(ds, 0, &si);
	uint64_t cut = (uint64_t)((const uint8_t *)row - si.zip->map) + 100;
	struct stat sb;
	assert_int_equal(stat(p, &sb), 0);
	assert_int_equal(truncate(p, (off_t)cut), 0); /* inside row 10 */
	assert_int_equal(utimensat(AT_FDCWD, p,
				   (struct timespec[]){sb.st_atim, sb.st_mtim},
				   0),
			 0);
	assert_int_equal(bfs_dataset_gather(ds, 0, before, 2, got), 0);
	assert_memory_equal(got, rows + 9 * ROW, ROW);
	assert_memory_equal(got + ROW, rows + 2 * ROW, ROW);
	bfs_log_setup(BFS_LOG_INFO, capture);
	assert_int_equal(bfs_dataset_gather(ds, 0, after, 3, got), -EIO);
	bfs_log_setup(BFS_LOG_INFO, NULL);
	assert_int_equal(bfs_dataset_fault(&f), 0);
	assert_int_equal(f.sample, 11);
	assert_int_equal(f.offset, cut);
	assert_non_null(strstr(last_log, "sample 11"));
	bfs_dataset_close(ds);
	free(rows);
}

/* A file modified since it was opened (its mtime moved: rewritten in
 * place, truncated) serves no row any more, not even the rows it still
 * has or had rewritten with the same bytes: -EIO, the fault record says
 * it changed, and one log line (not one per gather) says what changed.
 * The archive's mtime is set back a day before it is opened, so the
 * rewrite moves it whatever the file system's clock granularity. */
static void a_modified_file_serves_no_row(void **state)
{
	const char *p = simple_archive("modified.pt", 5);
	struct timespec old[2] = {{time(NULL) - 86400, 0},
				  {time(NULL) - 86400, 0}};
	struct bfs_dataset *ds;
	struct bfs_dataset_fault f;
	uint64_t idx[] = {0};
	float got[3];
	char *bytes;
	size_t len;
	FILE *fp;

	assert_int_equal(utimensat(AT_FDCWD, p, old, 0), 0);
	ds = open1(p);
	assert_int_equal(bfs_dataset_gather(ds, 0, idx, 1, got), 0);
	fp = fopen(p, "rb");
	assert_non_null(fp);
	bytes = malloc(1 << 20);
	len = fread(bytes, 1, 1 << 20, fp);
	fclose(fp);
	fp = fopen(p, "wb"); /* rewritten with the very same bytes */
	assert_non_null(fp);
	assert_int_equal(fwrite(bytes, 1, len, fp), len);
	fclose(fp);
	free(bytes);
	sigbus_logs = 0;
	changed_logs = 0;
	bfs_log_setup(BFS_LOG_INFO, capture);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(bfs_dataset_gather(ds, 0, idx, 1, got), -EIO);
		assert_int_equal(bfs_dataset_check(ds, idx, 1), -EIO);
	}
	bfs_log_setup(BFS_LOG_INFO, NULL);
	assert_int_equal(changed_logs, 1);
	assert_int_equal(bfs_dataset_fault(&f), 0);
	assert_true(f.changed);
	assert_non_null(strstr(f.path, "modified.pt"));
	bfs_dataset_close(ds);
}

/* Pages of [p, p + n) in the page cache (mincore over the page range). */
static size_t resident_pages(const uint8_t *p, size_t n)
{
	long pg = sysconf(_SC_PAGESIZE);
	uintptr_t a = (uintptr_t)p & ~(uintptr_t)(pg - 1);
	size_t np = ((uintptr_t)p + n - a + (size_t)pg - 1) / (size_t)pg, r = 0;
	unsigned char *vec = malloc(np);

	assert_non_null(vec);
	assert_int_equal(mincore((void *)a, np * (size_t)pg, vec), 0);
	for (size_t i = 0; i < np; i++)
		r += vec[i] & 1;
	free(vec);
	return r;
}

/* Advise skips chunks it finds resident; this pins the other half: rows
 * of a file that is not in the page cache are still advised (read ahead
 * by the kernel, with nothing else touching them), and only those rows,
 * not their whole 2 MiB chunk. Skips where the page cache cannot be
 * emptied (tmpfs). */
static void advise_reads_cold_rows_ahead(void **state)
{
	enum { N = 128, ROW = 64 * 1024, A = 40, FAR = 100 };
	uint8_t *big = calloc(N, ROW);
	struct ta_tensor ts[] = {
	    {"x", BFS_DT_UINT8, "0", N * ROW, 0, 2, {N, ROW}, {ROW, 1}},
	};
	struct ta_storage st[] = {{"0", big, (size_t)N * ROW}};
	const char *p =
	    make_archive("cold.pt", ts, 1, st, 1, "3\n", NULL, NULL);
	struct bfs_shard_info si;
	uint64_t idx[] = {A, A + 1};
	int fd = open(p, O_RDONLY);

	assert_true(fd >= 0);
	assert_int_equal(fsync(fd), 0);
	struct bfs_dataset *ds = open1(p);
	bfs_dataset_shard(ds, 0, &si);
	const struct bfs_zip_entry *e = bfs_zip_find(si.zip, "data/0");
	assert_non_null(e);
	const uint8_t *rows = bfs_zip_data(si.zip, e);
	assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	if (resident_pages(rows + (size_t)A * ROW, 2 * ROW) ||
	    resident_pages(rows + (size_t)FAR * ROW, ROW)) {
		close(fd);
		bfs_dataset_close(ds);
		free(big);
		skip(); /* the page cache kept the file (tmpfs?) */
	}
	advise(ds, idx, 2);
	/* WILLNEED only starts the reads: wait for them (bounded). */
	size_t got = 0;
	for (int t = 0; t < 1000; t++) {
		got = resident_pages(rows + (size_t)A * ROW, 2 * ROW);
		if (got * (size_t)sysconf(_SC_PAGESIZE) >= 2 * ROW)
			break;
		nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
	}
	print_message("cold advise: %zu pages of rows %d-%d resident\n", got, A,
		      A + 1);
	assert_true(got * (size_t)sysconf(_SC_PAGESIZE) >= 2 * ROW);
	assert_int_equal(resident_pages(rows + (size_t)FAR * ROW, ROW), 0);
	close(fd);
	bfs_dataset_close(ds);
	free(big);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(contiguous_rows_come_back_in_index_order),
	    cmocka_unit_test(strided_views_of_one_storage_gather_like_torch),
	    cmocka_unit_test(big_endian_archives_are_swapped_per_element),
	    cmocka_unit_test(shards_concatenate_along_dim0),
	    cmocka_unit_test(shard_fields_match_by_name_in_any_order),
	    cmocka_unit_test(a_0_dim_tensor_is_metadata_with_its_value),
	    cmocka_unit_test(a_tensor_of_another_first_dim_is_metadata),
	    cmocka_unit_test(refusals_name_the_file_and_the_field),
	    cmocka_unit_test(truncated_archive_gives_eio_and_names_the_sample),
	    cmocka_unit_test(archive_truncated_during_gather_never_crashes),
	    cmocka_unit_test(
		faults_caught_even_when_the_handler_runs_with_signals_blocked),
	    cmocka_unit_test(a_fault_names_the_sample_and_its_archive_offset),
	    cmocka_unit_test(a_shorter_file_serves_the_rows_before_the_cut),
	    cmocka_unit_test(a_modified_file_serves_no_row),
	    cmocka_unit_test(rows_served_in_place_only_when_stored_as_served),
	    cmocka_unit_test(advise_reads_cold_rows_ahead),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
