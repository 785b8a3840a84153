/* Ragged fields (fs/ragged, fs/dataset, fs/layout) over archives this test
 * writes itself (tests/lib/fixture): option parsing, pad values as torch
 * converts them, batch sizes and bytes against an independent model for
 * random lengths (pad with multiples, pack), written between guard pages;
 * bad offsets refused at open naming the field and the first bad index;
 * offsets rewritten under an open dataset give -EIO, never a larger
 * batch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/layout.h"
#include "fs/log.h"
#include "fs/ragged.h"
#include "fs/safetensors.h"
#include "tests/lib/fixture.h"

static struct tf_fixture fx; /* the directory the archives go in */

static int setup(void **state)
{
	if (tf_setup(&fx, NULL))
		fail_msg("%s", fx.err.msg);
	return 0;
}

static int teardown(void **state)
{
	return tf_teardown(&fx);
}

/* ---- options and pad values ------------------------------------------- */

static void pad_and_pack_arguments_parse(void **state)
{
	static const struct {
		const char *arg;
		enum bfs_ragged_mode mode;
		const char *name, *value;
		uint64_t multiple;
	} ok[] = {
	    {"tok", BFS_RAGGED_PAD, "tok", NULL, 1},
	    {"tok=-1:8", BFS_RAGGED_PAD, "tok", "-1", 8},
	    {"tok:8", BFS_RAGGED_PAD, "tok", NULL, 8},
	    {"a=b=0.5", BFS_RAGGED_PAD, "a=b", "0.5", 1},
	    {"t:x=1", BFS_RAGGED_PAD, "t:x", "1", 1},
	    {"a:b=c:4", BFS_RAGGED_PACK, "a:b=c:4", NULL, 1},
	};
	static const struct {
		const char *arg, *why;
	} bad[] = {
	    {"x=", "empty VALUE"}, {":8", "empty NAME"},
	    {"t:0", "MULTIPLE"},   {"t:99999999999999999999", "MULTIPLE"},
	    {"=1", "empty NAME"},
	};
	struct bfs_ragged_opt o;
	char why[160];

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		assert_int_equal(bfs_ragged_opt_parse(ok[i].arg, ok[i].mode, &o,
						      why, sizeof(why)),
				 0);
		assert_string_equal(o.name, ok[i].name);
		if (ok[i].value)
			assert_string_equal(o.value, ok[i].value);
		else
			assert_null(o.value);
		assert_int_equal(o.multiple, ok[i].multiple);
		bfs_ragged_opt_free(&o);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		why[0] = 0;
		assert_int_equal(bfs_ragged_opt_parse(bad[i].arg,
						      BFS_RAGGED_PAD, &o, why,
						      sizeof(why)),
				 -EINVAL);
		if (!strstr(why, bad[i].why))
			fail_msg("'%s': '%s' lacks '%s'", bad[i].arg, why,
				 bad[i].why);
	}
}

/* Bit patterns checked against torch 1.13's
 * torch.zeros(1, dtype).new_full((1,), v) (see test_mount_ragged.py for
 * the mount-level comparison with real torch). */
static void pad_values_convert_as_torch_new_full(void **state)
{
	static const struct {
		enum bfs_dtype dt;
		const char *text;
		uint64_t bits;
	} ok[] = {
	    {BFS_DT_INT8, "-1", 0xff},
	    {BFS_DT_UINT8, "255", 0xff},
	    {BFS_DT_INT32, "-2.0", 0xfffffffe},
	    {BFS_DT_INT64, "9223372036854775807", 0x7fffffffffffffffull},
	    {BFS_DT_UINT64, "18446744073709551615", UINT64_MAX},
	    {BFS_DT_BOOL, "2", 1},
	    {BFS_DT_BOOL, "0", 0},
	    {BFS_DT_FLOAT16, "0.1", 0x2e66},
	    {BFS_DT_FLOAT16, "-2", 0xc000},
	    {BFS_DT_FLOAT16, "65520", 0x7c00}, /* rounds to inf */
	    {BFS_DT_FLOAT16, "3e-8", 0x0001},  /* subnormal, rounded up */
	    {BFS_DT_FLOAT16, "1e-8", 0x0000},
	    {BFS_DT_BFLOAT16, "0.1", 0x3dcd},
	    {BFS_DT_BFLOAT16, "-inf", 0xff80},
	    {BFS_DT_FLOAT32, "0.1", 0x3dcccccd},
	    {BFS_DT_FLOAT64, "-0.5", 0xbfe0000000000000ull},
	    {BFS_DT_COMPLEX64, "2", 0x40000000}, /* 2 + 0j */
	    {BFS_DT_FLOAT8_E4M3FN, "0", 0},
	};
	static const struct {
		enum bfs_dtype dt;
		const char *text, *why;
	} bad[] = {
	    {BFS_DT_UINT8, "256", "does not fit uint8"},
	    {BFS_DT_UINT8, "-1", "does not fit uint8"},
	    {BFS_DT_INT8, "128", "does not fit int8"},
	    {BFS_DT_INT32, "1.5", "not an integer"},
	    {BFS_DT_INT64, "x", "not an integer"},
	    {BFS_DT_FLOAT32, "1e", "not a number"},
	    {BFS_DT_FLOAT8_E5M2, "1", "only be padded with 0"},
	};
	uint8_t out[BFS_RAGGED_PAD_MAX];
	char why[160];

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		uint64_t bits = 0;

		assert_int_equal(bfs_ragged_pad_bytes(ok[i].dt, ok[i].text, out,
						      why, sizeof(why)),
				 0);
		memcpy(&bits, out, 8);
		if (bits != ok[i].bits)
			fail_msg("%s as %s: %#llx, want %#llx", ok[i].text,
				 bfs_dtype_info(ok[i].dt)->torch_name,
				 (unsigned long long)bits,
				 (unsigned long long)ok[i].bits);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		why[0] = 0;
		assert_true(bfs_ragged_pad_bytes(bad[i].dt, bad[i].text, out,
						 why, sizeof(why)) < 0);
		if (!strstr(why, bad[i].why))
			fail_msg("'%s': '%s' lacks '%s'", bad[i].text, why,
				 bad[i].why);
	}
}

/* ---- archives with a ragged field ------------------------------------- */

#define N   23 /* samples */
#define ROW 3  /* int16 elements per values row */

static int64_t offs[N + 1];
static int16_t vals[N * 9 * ROW]; /* at most 9 rows per sample */
static int64_t lab[N];

/* "<fx.dir>/<file>": t.values int16 [total, ROW], t.offsets (the given
 * int64 [n+1] bytes, or offs), label int64 [N]. */
static const char *ragged_archive(const char *file, const void *off_bytes,
				  int64_t off_n, enum bfs_dtype off_dt)
{
	static char paths[8][300];
	static int next;
	char *path = paths[next++ % 8];
	const struct tf_field fields[] = {
	    {"t.values", BFS_DT_INT16, 2, {offs[N], ROW}, .data = vals},
	    {"label", BFS_DT_INT64, 1, {N}, .data = lab},
	    {"t.offsets",
	     off_dt,
	     1,
	     {off_n},
	     .data = off_bytes ? off_bytes : offs},
	};

	assert_non_null(tf_path(&fx, file, path, 300));
	assert_int_equal(tf_write_archive(path, fields, 3), 0);
	return path;
}

/* Random lengths 0..8 (seeded), values = a function of the position. */
static void draw(unsigned seed)
{
	offs[0] = 0;
	for (int i = 0; i < N; i++) {
		seed = seed * 1103515245u + 12345u;
		offs[i + 1] = offs[i] + (seed >> 16) % 9;
		lab[i] = 1000 + i;
	}
	for (int i = 0; i < offs[N] * ROW; i++)
		vals[i] = (int16_t)(i * 7 - 100);
}

static struct bfs_dataset *open_ok(const char *path)
{
	struct bfs_dataset *ds = NULL;
	struct bfs_error err = {{0}};

	if (bfs_dataset_open(&ds, &path, 1, &err))
		fail_msg("%s", err.msg);
	return ds;
}

/* The model of batch idx[0..rows): per tensor name, shape and bytes. */
struct want {
	uint64_t ext;	    /* L or T */
	uint8_t data[4096]; /* the ragged tensor's bytes */
	uint64_t bytes;
	int64_t counts[N + 1]; /* lengths or offsets */
};

static void model(const uint64_t *idx, uint64_t rows, int pack, int64_t pad,
		  uint64_t mult, struct want *w)
{
	int16_t *out = (int16_t *)w->data;
	uint64_t at = 0;

	memset(w, 0, sizeof(*w));
	for (uint64_t i = 0; i < rows; i++) {
		uint64_t len = (uint64_t)(offs[idx[i] + 1] - offs[idx[i]]);

		w->ext = pack ? w->ext + len : (len > w->ext ? len : w->ext);
	}
	if (!pack && w->ext % mult)
		w->ext += mult - w->ext % mult;
	for (uint64_t i = 0; i < rows; i++) {
		int64_t a = offs[idx[i]], len = offs[idx[i] + 1] - a;

		for (int64_t r = 0; r < (pack ? len : (int64_t)w->ext); r++)
			for (int c = 0; c < ROW; c++)
				*out++ = r < len ? vals[(a + r) * ROW + c]
						 : (int16_t)pad;
		w->counts[pack ? i + 1 : i] =
		    pack ? (int64_t)(at += (uint64_t)len) : len;
	}
	w->bytes = (uint64_t)((uint8_t *)out - w->data);
}

/* The tensor 'name' of a parsed batch file. */
static const struct bfs_st_tensor *tensor(const struct bfs_st_header *h,
					  const char *name)
{
	for (size_t i = 0; i < h->ntensors; i++)
		if (!strcmp(h->tensors[i].name, name))
			return &h->tensors[i];
	fail_msg("no tensor '%s'", name);
	return NULL;
}

/* Batch k of a sequential order of batch size B: size from the order,
 * bytes between guard pages, every tensor as the model says. */
static void check_batch(const struct bfs_layout *l, struct bfs_order *o,
			const struct bfs_dataset *ds, uint64_t k, int pack,
			int64_t pad, uint64_t mult)
{
	uint64_t rows = bfs_order_batch_rows(o, k), idx[N], size, len,
		 pg = 4096;
	const struct bfs_st_tensor *t, *c;
	struct bfs_st_header *h = NULL;
	struct want w;
	uint8_t *map, *f;
	struct bfs_batch_loc at;

	assert_int_equal(
	    bfs_order_locate(o, (struct bfs_batch_id){.batch = k}, &at), 0);
	assert_int_equal(bfs_order_batch(o, at.id, idx), 0);
	assert_int_equal(bfs_layout_file_size(l, o, &at, &size), 0);
	assert_true(size <= l->max_file_size);
	len = (size + pg - 1) / pg * pg;
	map = mmap(NULL, len + 2 * pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
		   -1, 0);
	assert_true(map != MAP_FAILED);
	assert_int_equal(mprotect(map + pg, len, PROT_READ | PROT_WRITE), 0);
	f = map + pg + (len - size); /* the file ends at the guard page */
	assert_int_equal(bfs_layout_fill(l, ds, at.id, idx, rows, size, f), 0);
	assert_int_equal(bfs_st_parse(f, size, size, 0, &h, NULL), 0);
	model(idx, rows, pack, pad, mult, &w);
	t = tensor(h, "t");
	c = tensor(h, pack ? "t.offsets" : "t.lengths");
	assert_int_equal(t->shape[0], pack ? w.ext : rows);
	if (!pack)
		assert_int_equal(t->shape[1], w.ext);
	assert_int_equal(t->shape[t->ndim - 1], ROW);
	assert_int_equal(t->end - t->begin, w.bytes);
	assert_memory_equal(f + h->data_start + t->begin, w.data, w.bytes);
	assert_int_equal(c->shape[0], rows + (uint64_t)pack);
	assert_memory_equal(f + h->data_start + c->begin, w.counts,
			    (rows + (uint64_t)pack) * 8);
	t = tensor(h, "label");
	for (uint64_t i = 0; i < rows; i++) { /* f is not 8-aligned */
		int64_t v;

		memcpy(&v, f + h->data_start + t->begin + 8 * i, 8);
		assert_int_equal(v, 1000 + (int64_t)idx[i]);
	}
	bfs_st_free(h);
	munmap(map, len + 2 * pg);
}

static struct bfs_order *sequential(uint64_t b, int shuffle)
{
	struct bfs_order_opts oo = {.sampler = shuffle ? BFS_SAMPLER_RANDOM
						       : BFS_SAMPLER_SEQUENTIAL,
				    .n = N,
				    .batch_size = b,
				    .seed = 5,
				    .replacement = shuffle == 2};
	struct bfs_order *o = NULL;

	assert_int_equal(bfs_order_create(&o, &oo, NULL), 0);
	return o;
}

static void batches_match_the_model_for_random_lengths(void **state)
{
	static const struct {
		const char *opt;
		int pack;
		int64_t pad;
		uint64_t mult;
	} modes[] = {
	    {"t", 0, 0, 1},
	    {"t=-7:4", 0, -7, 4},
	    {"t=3:3", 0, 3, 3},
	    {"t", 1, 0, 1},
	};
	char why[160];

	for (unsigned seed = 1; seed <= 6; seed++) {
		draw(seed);
		const char *p =
		    ragged_archive("r.pt", NULL, N + 1, BFS_DT_INT64);
		struct bfs_dataset *ds = open_ok(p);

		assert_true(bfs_dataset_field(ds, 0)->ragged);
		for (size_t m = 0; m < 4; m++)
			for (uint64_t b = 1; b <= 7; b += 3)
				for (int shuffle = 0; shuffle < 3; shuffle++) {
					struct bfs_ragged_opt o;
					struct bfs_layout l;
					struct bfs_order *ord =
					    sequential(b, shuffle);

					assert_int_equal(
					    bfs_ragged_opt_parse(
						modes[m].opt,
						modes[m].pack ? BFS_RAGGED_PACK
							      : BFS_RAGGED_PAD,
						&o, why, sizeof(why)),
					    0);
					assert_int_equal(
					    bfs_layout_init_ragged(&l, ds, b,
								   &o, 1, NULL),
					    0);
					for (uint64_t k = 0;
					     k < bfs_order_len(ord); k++)
						check_batch(&l, ord, ds, k,
							    modes[m].pack,
							    modes[m].pad,
							    modes[m].mult);
					bfs_layout_fini(&l);
					bfs_order_destroy(ord);
					bfs_ragged_opt_free(&o);
				}
		bfs_dataset_close(ds);
	}
}

/* Expect the archive's open to fail naming 'a' and 'b'. */
static void expect_refused(const char *path, const char *a, const char *b)
{
	struct bfs_dataset *ds = NULL;
	struct bfs_error err = {{0}};

	assert_true(bfs_dataset_open(&ds, &path, 1, &err) < 0);
	assert_null(ds);
	if (!strstr(err.msg, a) || (b && !strstr(err.msg, b)) ||
	    !strstr(err.msg, path))
		fail_msg("'%s' lacks '%s' / '%s'", err.msg, a, b ? b : "");
}

static void bad_offsets_are_refused_naming_the_first_bad_index(void **state)
{
	int64_t bad[N + 2];
	int32_t narrow[N + 1];

	draw(3);
	memcpy(bad, offs, sizeof(offs));
	bad[0] = 1;
	expect_refused(ragged_archive("b0.pt", bad, N + 1, BFS_DT_INT64),
		       "t.offsets[0] is 1, must be 0", "ragged field 't'");
	memcpy(bad, offs, sizeof(offs));
	bad[7] = bad[6] - 1;
	expect_refused(ragged_archive("b1.pt", bad, N + 1, BFS_DT_INT64),
		       "t.offsets[7]", "must not decrease");
	memcpy(bad, offs, sizeof(offs));
	bad[5] = offs[N] + 1;
	expect_refused(ragged_archive("b2.pt", bad, N + 1, BFS_DT_INT64),
		       "t.offsets[5]", "past the end of t.values");
	memcpy(bad, offs, sizeof(offs));
	bad[5] = -3;
	expect_refused(ragged_archive("b3.pt", bad, N + 1, BFS_DT_INT64),
		       "t.offsets[5] = -3", "must not decrease");
	memcpy(bad, offs, sizeof(offs));
	bad[N] = offs[N] - 1;
	expect_refused(ragged_archive("b4.pt", bad, N + 1, BFS_DT_INT64),
		       "t.offsets[23]", "must equal the rows of t.values");
	memcpy(bad, offs, sizeof(offs));
	bad[N + 1] = offs[N];
	expect_refused(ragged_archive("b5.pt", bad, N + 2, BFS_DT_INT64),
		       "t.offsets has 25 entries", "23 samples");
	expect_refused(ragged_archive("b6.pt", offs, N, BFS_DT_INT64),
		       "t.offsets has 23 entries", "n + 1");
	for (int i = 0; i <= N; i++)
		narrow[i] = (int32_t)offs[i];
	expect_refused(ragged_archive("b7.pt", narrow, N + 1, BFS_DT_INT32),
		       "t.offsets must be a 1-D int64 tensor", "int32");
}

/* Options that name no ragged field, a field twice, or a pad value the
 * dtype cannot hold are refused by the layout, naming the option. */
static void layout_refuses_bad_options(void **state)
{
	static const struct {
		const char *arg;
		enum bfs_ragged_mode mode;
		const char *why;
	} bad[] = {
	    {"label", BFS_RAGGED_PAD, "no ragged field 'label'"},
	    {"nope", BFS_RAGGED_PACK, "--pack nope"},
	    {"t=40000", BFS_RAGGED_PAD, "does not fit int16"},
	    {"t=0.5", BFS_RAGGED_PAD, "not an integer"},
	};
	struct bfs_ragged_opt o[2];
	struct bfs_error err = {{0}};
	struct bfs_layout l;
	struct bfs_dataset *ds;
	char why[160];

	draw(2);
	ds = open_ok(ragged_archive("opts.pt", NULL, N + 1, BFS_DT_INT64));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(&err, 0, sizeof(err));
		assert_int_equal(bfs_ragged_opt_parse(bad[i].arg, bad[i].mode,
						      o, why, sizeof(why)),
				 0);
		assert_true(bfs_layout_init_ragged(&l, ds, 4, o, 1, &err) < 0);
		if (!strstr(err.msg, bad[i].why))
			fail_msg("'%s': '%s' lacks '%s'", bad[i].arg, err.msg,
				 bad[i].why);
		bfs_ragged_opt_free(o);
	}
	bfs_ragged_opt_parse("t", BFS_RAGGED_PAD, &o[0], why, sizeof(why));
	bfs_ragged_opt_parse("t", BFS_RAGGED_PACK, &o[1], why, sizeof(why));
	memset(&err, 0, sizeof(err));
	assert_true(bfs_layout_init_ragged(&l, ds, 4, o, 2, &err) < 0);
	assert_non_null(strstr(err.msg, "named by two"));
	bfs_ragged_opt_free(&o[0]);
	bfs_ragged_opt_free(&o[1]);
	bfs_dataset_close(ds);
}

/* Offsets rewritten in place under an open dataset (the mapping is
 * shared): a batch measured before is refused with -EIO, a longer sample
 * than proven is refused by the spans; nothing is written past the size. */
static char last_log[512];
static void capture(enum bfs_log_level level, const char *line)
{
	snprintf(last_log, sizeof(last_log), "%s", line);
}

static void offsets_changed_under_us_give_eio(void **state)
{
	uint64_t idx[] = {0, 1, 2}, size;
	struct bfs_layout_dims d;
	struct bfs_span sp[3];
	struct bfs_layout l;
	const char *p;
	struct bfs_dataset *ds;
	uint8_t *buf;
	struct stat st;
	off_t at;
	int fd;
	int64_t v;

	draw(4);
	offs[1] = 2; /* lengths 2, 2, ... */
	for (int i = 2; i <= N; i++)
		offs[i] = offs[i - 1] + 2;
	p = ragged_archive("moved.pt", NULL, N + 1, BFS_DT_INT64);
	ds = open_ok(p);
	assert_int_equal(bfs_dataset_field(ds, 0)->max_len, 2);
	assert_int_equal(bfs_layout_init(&l, ds, 3, NULL), 0);
	assert_int_equal(bfs_layout_measure(&l, idx, 3, &d), 0);
	size = bfs_layout_size_dims(&l, &d);
	buf = malloc(size);
	/* find offsets[1] = 2 followed by offsets[2] = 4 in the file */
	fd = open(p, O_RDWR);
	for (at = 0;; at++) {
		int64_t pair[2];

		assert_int_equal(pread(fd, pair, 16, at), 16);
		if (pair[0] == 0 && pair[1] == 2)
			break;
	}
	/* Each write below puts the file's times back: the mtime check
	 * (a file modified since it was opened) would refuse the batch
	 * first; these are the checks behind it, for a file whose change
	 * the kernel has not shown yet (a FUSE or network file system). */
	assert_int_equal(fstat(fd, &st), 0);
	v = 1; /* sample 0 now 1 row: the batch shrinks */
	assert_int_equal(pwrite(fd, &v, 8, at + 8), 8);
	assert_int_equal(
	    futimens(fd, (struct timespec[]){st.st_atim, st.st_mtim}), 0);
	bfs_log_setup(BFS_LOG_INFO, capture);
	assert_int_equal(bfs_layout_fill(&l, ds, (struct bfs_batch_id){0}, idx,
					 3, size, buf),
			 -EIO);
	assert_non_null(strstr(last_log, "changed under us"));
	/* sample 1 now 3 rows > max_len 2: refused by the spans */
	assert_int_equal(pwrite(fd, (int64_t[]){1, 4, 5}, 24, at + 8), 24);
	assert_int_equal(
	    futimens(fd, (struct timespec[]){st.st_atim, st.st_mtim}), 0);
	assert_int_equal(bfs_dataset_spans(ds, 0, idx, 3, sp), -EIO);
	assert_non_null(strstr(last_log, "changed under us"));
	bfs_log_setup(BFS_LOG_INFO, NULL);
	close(fd);
	free(buf);
	bfs_layout_fini(&l);
	bfs_dataset_close(ds);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(pad_and_pack_arguments_parse),
	    cmocka_unit_test(pad_values_convert_as_torch_new_full),
	    cmocka_unit_test(batches_match_the_model_for_random_lengths),
	    cmocka_unit_test(
		bad_offsets_are_refused_naming_the_first_bad_index),
	    cmocka_unit_test(layout_refuses_bad_options),
	    cmocka_unit_test(offsets_changed_under_us_give_eio),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
