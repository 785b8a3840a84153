/* The loader's host (CPU) backend end to end: the test writes safetensors
 * batch files itself, reads them through the loader and checks every byte,
 * shape and name; then the failure paths (truncated file, corrupt headers,
 * missing files) and the ring's ownership rules (EBUSY, bad release, close
 * with batches outstanding); files opened with O_DIRECT where the file
 * system takes it, read right where it refuses their reads. Runs in
 * $BFS_TEST_TMP (or a temp dir). */
#include "loader/batchfs_loader.h"
#include "tests/loader/st_write.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

/* Every safetensors code the loader knows, with its element size. */
static const struct {
	const char *code;
	unsigned size;
} dtypes[] = {
    {"BOOL", 1},    {"U8", 1},	{"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
    {"F8_E8M0", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},	    {"BF16", 2},
    {"I32", 4},	    {"U32", 4}, {"F32", 4}, {"C32", 4},	    {"I64", 8},
    {"U64", 8},	    {"F64", 8}, {"C64", 8}, {"C128", 16},
};
#define NDT (sizeof(dtypes) / sizeof(dtypes[0]))

static char workdir[2048];

/* Quiet logger that remembers the last line. */
static char last_log[1024];
static void quiet(void *arg, enum bfs_loader_log_level lv, const char *line)
{
	snprintf(last_log, sizeof(last_log), "%s", line);
}

/* A fresh directory under the work dir. */
static void make_dir(char *out, size_t n, const char *name)
{
	snprintf(out, n, "%s/%s", workdir, name);
	mkdir(out, 0755);
}

/* Description of one generated batch, enough to check it afterwards. */
struct gen {
	unsigned nt;
	struct st_tensor t[NDT];
	char names[NDT][32];
	void *bufs[NDT];
	long data_start;
};

/* Batch k of a dataset of 'rows' samples per batch: one field per dtype,
 * with odd sample shapes, written by descending element size then name as
 * batchfs does (the order does not matter to the loader). */
static void gen_batch(struct gen *g, const char *path, unsigned k,
		      uint64_t rows, size_t extra_pad)
{
	memset(g, 0, sizeof(*g));
	for (unsigned i = 0; i < NDT; i++) {
		struct st_tensor *t = &g->t[g->nt];
		snprintf(g->names[g->nt], sizeof(g->names[0]), "f%02u_%s", i,
			 dtypes[i].code);
		t->name = g->names[g->nt];
		t->dtype = dtypes[i].code;
		t->ndim = 1 + i % 3;
		t->shape[0] = rows;
		t->shape[1] = 3 + i % 5;
		t->shape[2] = 7;
		t->nbytes = dtypes[i].size;
		for (unsigned d = 0; d < t->ndim; d++)
			t->nbytes *= t->shape[d];
		g->bufs[g->nt] = malloc(t->nbytes ? t->nbytes : 1);
		st_fill(g->bufs[g->nt], t->nbytes, k * 1000u + i);
		t->data = g->bufs[g->nt];
		g->nt++;
	}
	g->data_start = st_write(path, g->t, g->nt, 0, k, extra_pad);
	assert_true(g->data_start > 0);
}

static void gen_free(struct gen *g)
{
	for (unsigned i = 0; i < g->nt; i++)
		free(g->bufs[i]);
}

/* Check that delivered batch b is exactly what g wrote. */
static void check_batch(const struct bfs_loader_batch *b, const struct gen *g,
			uint64_t k, const char *path)
{
	struct stat sb;
	uint64_t off = (uint64_t)g->data_start;

	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(b->index, k);
	assert_int_equal(b->nbytes, (uint64_t)sb.st_size);
	assert_int_equal(b->ntensors, g->nt);
	assert_int_equal(b->dev, (uint64_t)(uintptr_t)b->host);
	assert_int_equal(((uintptr_t)b->host) % 4096, 0);
	for (unsigned i = 0; i < g->nt; i++) {
		const struct bfs_loader_tensor *t = &b->tensors[i];
		const struct st_tensor *w = &g->t[i];
		assert_string_equal(t->name, w->name);
		assert_string_equal(t->dtype, w->dtype);
		assert_int_equal(t->elem_size, dtypes[i].size);
		assert_int_equal(t->ndim, w->ndim);
		for (unsigned d = 0; d < w->ndim; d++)
			assert_int_equal(t->shape[d], w->shape[d]);
		assert_int_equal(t->nbytes, w->nbytes);
		assert_int_equal(t->offset, off);
		assert_ptr_equal(t->host, (const char *)b->host + off);
		assert_int_equal(t->dev, (uint64_t)(uintptr_t)t->host);
		assert_memory_equal(t->host, w->data, (size_t)w->nbytes);
		off += w->nbytes;
	}
	assert_int_equal(off, b->nbytes);
}

/* Write nb batches of 'rows' rows (the last one 'last_rows'); batch 2 gets
 * a header larger than 4096 bytes. Returns the gens, for gen_dataset_free(). */
static struct gen *gen_dataset(const char *dir, unsigned nb, uint64_t rows,
			       uint64_t last_rows)
{
	struct gen *g = calloc(nb, sizeof(*g));
	char path[PATH_MAX + 32];

	for (unsigned k = 0; k < nb; k++) {
		snprintf(path, sizeof(path), "%s/batch_%u", dir, k);
		gen_batch(&g[k], path, k, k + 1 == nb ? last_rows : rows,
			  k == 2 ? 9000 : 0);
	}
	assert_true(g[0].data_start == 4096);
	if (nb > 2)
		assert_true(g[2].data_start == 12288);
	return g;
}

/* Free what gen_dataset(.., nb, ..) returned. */
static void gen_dataset_free(struct gen *g, unsigned nb)
{
	for (unsigned k = 0; k < nb; k++)
		gen_free(&g[k]);
	free(g);
}

/* Read every batch of dir through a loader with opts o and compare. */
static void read_all(struct bfs_loader_opts *o, const char *dir, struct gen *g,
		     unsigned nb)
{
	struct bfs_loader *L;
	struct bfs_loader_batch b;
	struct bfs_loader_stats st;
	char path[PATH_MAX + 32];
	uint64_t total = 0;
	struct stat sb;

	o->mode = BFS_LOADER_CPU;
	o->log = quiet;
	assert_int_equal(bfs_loader_open(&L, o), 0);
	assert_int_equal(bfs_loader_mode(L), BFS_LOADER_CPU);
	assert_int_equal(bfs_loader_count(L), nb);
	for (unsigned k = 0; k < nb; k++) {
		snprintf(path, sizeof(path), "%s/batch_%u", dir, k);
		assert_int_equal(bfs_loader_next(L, &b, NULL), 0);
		check_batch(&b, &g[k], k, path);
		assert_int_equal(bfs_loader_release(L, &b, NULL), 0);
		assert_int_equal(stat(path, &sb), 0);
		total += (uint64_t)sb.st_size;
	}
	assert_int_equal(bfs_loader_next(L, &b, NULL), BFS_LOADER_EOF);
	assert_int_equal(bfs_loader_next(L, &b, NULL), BFS_LOADER_EOF);
	assert_int_equal(bfs_loader_stats(L, &st), 0);
	assert_int_equal(st.batches, nb);
	assert_int_equal(st.bytes_read, total);
	assert_int_equal(st.pin_calls, 0);
	assert_string_equal(bfs_loader_errmsg(L), "");
	bfs_loader_close(L);
}

static void every_dtype_and_shape_arrives_intact_in_order(void **state)
{
	char dir[PATH_MAX];
	const unsigned nb = 13;
	struct gen *g;

	make_dir(dir, sizeof(dir), "dtypes");
	g = gen_dataset(dir, nb, 37, 5);
	/* defaults; then small chunks (many per batch) and 2 slots */
	read_all(&(struct bfs_loader_opts){.dir = dir}, dir, g, nb);
	read_all(
	    &(struct bfs_loader_opts){
		.dir = dir, .chunk = 4096, .slots = 2, .readers = 3},
	    dir, g, nb);
	read_all(
	    &(struct bfs_loader_opts){
		.dir = dir, .chunk = 8192, .slots = 5, .readers = 1},
	    dir, g, nb);
	gen_dataset_free(g, nb);
}

static void large_batches_are_read_in_parallel_chunks(void **state)
{
	char dir[PATH_MAX];
	const unsigned nb = 6;
	struct gen *g;

	make_dir(dir, sizeof(dir), "large");
	g = gen_dataset(dir, nb, 3001, 1999); /* ~ 1-4 MB per batch */
	read_all(&(struct bfs_loader_opts){.dir = dir,
					   .chunk = 64 << 10,
					   .readers = 4},
		 dir, g, nb);
	gen_dataset_free(g, nb);
}

/* Files are opened with O_DIRECT (stats: direct_files), and read right
 * where the file system refuses O_DIRECT reads of their sizes (ext4, and
 * most block file systems, want multiples of a block: the loader then
 * reads plainly); BFS_LOADER_NO_DIRECT opens them plainly. Where the file
 * system refuses O_DIRECT opens (EINVAL), no file counts. */
static void files_are_opened_with_o_direct_unless_refused(void **state)
{
	char dir[PATH_MAX], probe[PATH_MAX + 16];
	const unsigned nb = 5;
	struct bfs_loader_stats st;
	struct bfs_loader *L;
	struct bfs_loader_batch b;
	struct gen *g;
	int fd, takes;

	make_dir(dir, sizeof(dir), "direct");
	g = gen_dataset(dir, nb, 41, 3); /* sizes of no block multiple */
	snprintf(probe, sizeof(probe), "%s/batch_0", dir);
	fd = open(probe, O_RDONLY | O_DIRECT);
	takes = fd >= 0;
	if (fd >= 0)
		close(fd);
	for (unsigned flags = 0; flags <= BFS_LOADER_NO_DIRECT;
	     flags += BFS_LOADER_NO_DIRECT) {
		read_all(&(struct bfs_loader_opts){.dir = dir, .flags = flags},
			 dir, g, nb);
		assert_int_equal(
		    bfs_loader_open(
			&L, &(struct bfs_loader_opts){.dir = dir,
						      .flags = flags,
						      .mode = BFS_LOADER_CPU,
						      .log = quiet}),
		    0);
		while (bfs_loader_next(L, &b, NULL) == 0)
			assert_int_equal(bfs_loader_release(L, &b, NULL), 0);
		assert_int_equal(bfs_loader_stats(L, &st), 0);
		assert_int_equal(st.batches, nb);
		/* the first file's O_DIRECT read refused: plain from then on */
		if (flags || !takes)
			assert_int_equal(st.direct_files, 0);
		else
			assert_in_range(st.direct_files, 1, nb);
		bfs_loader_close(L);
	}
	gen_dataset_free(g, nb);
}

static void explicit_file_list_is_read_in_the_given_order(void **state)
{
	char dir[PATH_MAX], p[3][PATH_MAX + 32];
	const char *files[4];
	struct bfs_loader *L;
	struct bfs_loader_batch b;
	struct gen g[3];

	make_dir(dir, sizeof(dir), "list");
	for (unsigned k = 0; k < 3; k++) {
		snprintf(p[k], sizeof(p[k]), "%s/some_%u.safetensors", dir, k);
		gen_batch(&g[k], p[k], k, 4 + k, 0);
	}
	files[0] = p[2], files[1] = p[0], files[2] = p[1], files[3] = NULL;
	assert_int_equal(
	    bfs_loader_open(&L,
			    &(struct bfs_loader_opts){.files = files,
						      .mode = BFS_LOADER_CPU}),
	    0);
	for (unsigned i = 0; i < 3; i++) {
		unsigned k = i == 0 ? 2 : i - 1;
		assert_int_equal(bfs_loader_next(L, &b, NULL), 0);
		check_batch(&b, &g[k], i, files[i]);
		assert_int_equal(bfs_loader_release(L, &b, NULL), 0);
	}
	assert_int_equal(bfs_loader_next(L, &b, NULL), BFS_LOADER_EOF);
	bfs_loader_close(L);
	for (unsigned k = 0; k < 3; k++)
		gen_free(&g[k]);
}

static void file_truncated_after_open_fails_at_its_batch(void **state)
{
	char dir[PATH_MAX], path[PATH_MAX + 32];
	struct bfs_loader *L;
	struct bfs_loader_batch b;
	struct gen *g;
	struct stat sb;

	make_dir(dir, sizeof(dir), "trunc");
	g = gen_dataset(dir, 5, 50, 50);
	/* 2 slots: batch 3 cannot be opened before batch 1 is released */
	assert_int_equal(
	    bfs_loader_open(&L,
			    &(struct bfs_loader_opts){.dir = dir,
						      .slots = 2,
						      .mode = BFS_LOADER_CPU,
						      .log = quiet}),
	    0);
	snprintf(path, sizeof(path), "%s/batch_3", dir);
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(truncate(path, sb.st_size - 100), 0);
	for (unsigned k = 0; k < 3; k++) {
		assert_int_equal(bfs_loader_next(L, &b, NULL), 0);
		assert_int_equal(b.index, k);
		assert_int_equal(bfs_loader_release(L, &b, NULL), 0);
	}
	assert_int_equal(bfs_loader_next(L, &b, NULL), -EIO);
	assert_non_null(strstr(bfs_loader_errmsg(L), "batch_3"));
	assert_non_null(strstr(bfs_loader_errmsg(L), "short read"));
	assert_non_null(strstr(last_log, "short read"));
	/* latched: every later call returns it too */
	assert_int_equal(bfs_loader_next(L, &b, NULL), -EIO);
	bfs_loader_close(L);
	gen_dataset_free(g, 5);
}

/* Overwrite the first occurrence of 'needle' in the first 4096 bytes of
 * path with 'repl' (same length); needle NULL: write repl at offset 0. */
static void poke(const char *path, const char *needle, const char *repl,
		 size_t len)
{
	char head[4096];
	const char *at;
	int fd = open(path, O_RDWR);

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, head, sizeof(head), 0), sizeof(head));
	at = needle ? memmem(head, sizeof(head), needle, len) : head;
	assert_non_null(at);
	assert_int_equal(pwrite(fd, repl, len, at - head), (ssize_t)len);
	close(fd);
}

/* Corrupt batch_1 of a fresh 3-batch dir; the loader must deliver batch 0,
 * then fail with -EBADMSG and a message containing 'why'. */
static void expect_bad_header(const char *name, const char *needle,
			      const char *repl, size_t len, const char *why)
{
	char dir[PATH_MAX], path[PATH_MAX + 32], path0[PATH_MAX + 32];
	struct bfs_loader *L;
	struct bfs_loader_batch b;
	struct gen *g;

	make_dir(dir, sizeof(dir), name);
	g = gen_dataset(dir, 3, 9, 9);
	snprintf(path, sizeof(path), "%s/batch_1", dir);
	snprintf(path0, sizeof(path0), "%s/batch_0", dir);
	poke(path, needle, repl, len);
	assert_int_equal(
	    bfs_loader_open(&L,
			    &(struct bfs_loader_opts){.dir = dir,
						      .mode = BFS_LOADER_CPU,
						      .log = quiet}),
	    0);
	assert_int_equal(bfs_loader_next(L, &b, NULL), 0);
	check_batch(&b, &g[0], 0, path0);
	assert_int_equal(bfs_loader_release(L, &b, NULL), 0);
	assert_int_equal(bfs_loader_next(L, &b, NULL), -EBADMSG);
	assert_non_null(strstr(bfs_loader_errmsg(L), "batch_1"));
	if (!strstr(bfs_loader_errmsg(L), why))
		fail_msg("message \"%s\" lacks \"%s\"", bfs_loader_errmsg(L),
			 why);
	assert_int_equal(bfs_loader_next(L, &b, NULL), -EBADMSG);
	bfs_loader_close(L);
	gen_dataset_free(g, 3);
}

static void corrupt_headers_fail_with_a_clear_message(void **state)
{
	const char huge[8] = {0, 0, 0, 0, 1, 0, 0, 0};
	expect_bad_header("bad_len", NULL, huge, 8, "header length");
	expect_bad_header("bad_open", "{\"__", "[\"__", 4,
			  "header offset 8: expected '{'");
	expect_bad_header("bad_key", "\"dtype\"", "\"dtipe\"", 7,
			  "unknown or repeated key \"dtipe\"");
	expect_bad_header("bad_shape", "\"shape\":[9,", "\"shape\":[8,", 11,
			  "shape");
	expect_bad_header("bad_offsets", "\"data_offsets\":[0,",
			  "\"data_offsets\":[x,", 17, "non-negative integer");
	expect_bad_header("bad_tail", "        ", "  xx    ", 8,
			  "trailing bytes");
}

static void mismatched_shape_and_offsets_are_refused(void **state)
{
	char dir[PATH_MAX], path[PATH_MAX + 32];
	unsigned char data[24] = {0};
	struct st_tensor t = {.name = "x",
			      .dtype = "F32",
			      .ndim = 2,
			      .shape = {2, 2},
			      .data = data,
			      .nbytes = 24};
	struct bfs_loader *L;
	struct bfs_loader_batch b;

	make_dir(dir, sizeof(dir), "shape");
	snprintf(path, sizeof(path), "%s/batch_0", dir);
	assert_true(st_write(path, &t, 1, 0, 0, 0) > 0); /* 16 != 24 */
	assert_int_equal(
	    bfs_loader_open(&L,
			    &(struct bfs_loader_opts){.dir = dir,
						      .mode = BFS_LOADER_CPU,
						      .log = quiet}),
	    0);
	assert_int_equal(bfs_loader_next(L, &b, NULL), -EBADMSG);
	assert_non_null(strstr(bfs_loader_errmsg(L), "tensor \"x\""));
	bfs_loader_close(L);
}

static void all_slots_held_gives_ebusy_until_a_release(void **state)
{
	char dir[PATH_MAX];
	struct bfs_loader *L;
	struct bfs_loader_batch b0, b1, b2;
	struct gen *g;

	make_dir(dir, sizeof(dir), "busy");
	g = gen_dataset(dir, 4, 3, 3);
	assert_int_equal(
	    bfs_loader_open(&L,
			    &(struct bfs_loader_opts){.dir = dir,
						      .slots = 2,
						      .mode = BFS_LOADER_CPU}),
	    0);
	assert_int_equal(bfs_loader_next(L, &b0, NULL), 0);
	assert_int_equal(bfs_loader_next(L, &b1, NULL), 0);
	assert_int_equal(bfs_loader_next(L, &b2, NULL), -EBUSY);
	/* releases may come out of order */
	assert_int_equal(bfs_loader_release(L, &b1, NULL), 0);
	assert_int_equal(bfs_loader_next(L, &b2, NULL), -EBUSY);
	assert_int_equal(bfs_loader_release(L, &b0, NULL), 0);
	assert_int_equal(bfs_loader_release(L, &b0, NULL), -EINVAL);
	assert_int_equal(bfs_loader_next(L, &b2, NULL), 0);
	assert_int_equal(b2.index, 2);
	assert_memory_equal(b2.tensors[0].host, g[2].t[0].data,
			    (size_t)g[2].t[0].nbytes);
	bfs_loader_close(L); /* b2 outstanding */
	gen_dataset_free(g, 4);
}

static void close_with_batches_outstanding_is_clean(void **state)
{
	char dir[PATH_MAX];
	struct bfs_loader *L;
	struct bfs_loader_batch b;
	struct gen *g;

	make_dir(dir, sizeof(dir), "close");
	g = gen_dataset(dir, 8, 500, 100);
	/* immediately: readers are still in flight */
	assert_int_equal(
	    bfs_loader_open(&L,
			    &(struct bfs_loader_opts){.dir = dir,
						      .chunk = 4096,
						      .mode = BFS_LOADER_CPU}),
	    0);
	bfs_loader_close(L);
	/* with two batches held and one being read */
	assert_int_equal(
	    bfs_loader_open(
		&L,
		&(struct bfs_loader_opts){.dir = dir, .mode = BFS_LOADER_CPU}),
	    0);
	assert_int_equal(bfs_loader_next(L, &b, NULL), 0);
	assert_int_equal(bfs_loader_next(L, &b, NULL), 0);
	bfs_loader_close(L);
	bfs_loader_close(NULL);
	gen_dataset_free(g, 8);
}

static void open_refuses_bad_options_and_missing_files(void **state)
{
	char dir[PATH_MAX], path[PATH_MAX + 32];
	struct bfs_loader *L = (void *)1;
	struct gen g;

	make_dir(dir, sizeof(dir), "gap");
	assert_int_equal(
	    bfs_loader_open(
		&L, &(struct bfs_loader_opts){.dir = dir, .log = quiet}),
	    -ENOENT);
	assert_null(L);
	snprintf(path, sizeof(path), "%s/batch_1", dir);
	gen_batch(&g, path, 1, 2, 0);
	assert_int_equal(
	    bfs_loader_open(
		&L, &(struct bfs_loader_opts){.dir = dir, .log = quiet}),
	    -ENOENT);
	assert_non_null(strstr(last_log, "batch_0 is missing"));
	assert_int_equal(
	    bfs_loader_open(&L, &(struct bfs_loader_opts){.dir = "/nonexistent",
							  .log = quiet}),
	    -ENOENT);
	assert_int_equal(bfs_loader_open(&L, &(struct bfs_loader_opts){0}),
			 -EINVAL);
	assert_int_equal(
	    bfs_loader_open(&L,
			    &(struct bfs_loader_opts){.dir = dir, .slots = 1}),
	    -EINVAL);
	assert_int_equal(
	    bfs_loader_open(NULL, &(struct bfs_loader_opts){.dir = dir}),
	    -EINVAL);
	assert_string_equal(bfs_loader_strerror(BFS_LOADER_EOF),
			    "end of batches");
	assert_string_equal(bfs_loader_strerror(-ENOENT),
			    "No such file or directory");
	gen_free(&g);
}

/* A mount of several ranks has no epoch/ at its root: opening its root,
 * or ROOT/epoch/0 as on a mount of one rank, fails with an error that
 * names ROOT/rank/R/epoch/0 (R the lowest rank it serves). */
static void a_multi_rank_mount_names_its_rank_directories(void **state)
{
	char root[PATH_MAX], path[PATH_MAX + 64], want[PATH_MAX + 64];
	struct bfs_loader *L = NULL;
	FILE *f;

	make_dir(root, sizeof(root), "ranks");
	snprintf(path, sizeof(path), "%s/dataset.json", root);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("{\"rank_dirs\": true}\n", f);
	fclose(f);
	for (int r = 5; r >= 2; r -= 3) {
		snprintf(path, sizeof(path), "%s/rank", root);
		mkdir(path, 0755);
		snprintf(path, sizeof(path), "%s/rank/%d", root, r);
		mkdir(path, 0755);
		snprintf(path, sizeof(path), "%s/rank/%d/epoch", root, r);
		mkdir(path, 0755);
	}
	snprintf(want, sizeof(want), "e.g. %s/rank/2/epoch/0", root);
	assert_int_equal(
	    bfs_loader_open(
		&L, &(struct bfs_loader_opts){.dir = root, .log = quiet}),
	    -ENOENT);
	assert_non_null(strstr(last_log, want));
	snprintf(path, sizeof(path), "%s/epoch/0", root);
	assert_int_equal(
	    bfs_loader_open(
		&L, &(struct bfs_loader_opts){.dir = path, .log = quiet}),
	    -ENOENT);
	assert_non_null(strstr(last_log, want));
	assert_null(L);
}

/* CPU mode: one loader read over three epochs with reopen, the middle one
 * left after two batches; every delivered batch is the new epoch's. */
static void reopen_reads_the_next_epoch_with_the_same_ring(void **state)
{
	char dir[3][PATH_MAX], path[sizeof(dir) + 32], name[16];
	struct bfs_loader *L;
	struct bfs_loader_batch b;
	struct bfs_loader_stats st;
	struct gen *g[3];

	for (int e = 0; e < 3; e++) {
		snprintf(name, sizeof(name), "epoch%d", e);
		make_dir(dir[e], sizeof(dir[e]), name);
		g[e] = gen_dataset(dir[e], 4, 20 + e, 7);
	}
	assert_int_equal(
	    bfs_loader_open(&L,
			    &(struct bfs_loader_opts){.dir = dir[0],
						      .slots = 2,
						      .mode = BFS_LOADER_CPU,
						      .log = quiet}),
	    0);
	for (int e = 0; e < 3; e++) {
		if (e)
			assert_int_equal(bfs_loader_reopen(L, dir[e], NULL), 0);
		for (unsigned k = 0; k < (e == 1 ? 2u : 4u); k++) {
			snprintf(path, sizeof(path), "%s/batch_%u", dir[e], k);
			assert_int_equal(bfs_loader_next(L, &b, NULL), 0);
			check_batch(&b, &g[e][k], k, path);
			assert_int_equal(bfs_loader_release(L, &b, NULL), 0);
		}
	}
	assert_int_equal(bfs_loader_next(L, &b, NULL), BFS_LOADER_EOF);
	assert_int_equal(bfs_loader_stats(L, &st), 0);
	assert_int_equal(st.batches, 10);
	assert_int_equal(st.pin_calls, 0);
	bfs_loader_close(L);
	for (int e = 0; e < 3; e++)
		gen_dataset_free(g[e], 4);
}

int main(void)
{
	const char *t = getenv("BFS_TEST_TMP");
	char tmpl[] = "/tmp/bfs-loader-XXXXXX";
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(every_dtype_and_shape_arrives_intact_in_order),
	    cmocka_unit_test(large_batches_are_read_in_parallel_chunks),
	    cmocka_unit_test(explicit_file_list_is_read_in_the_given_order),
	    cmocka_unit_test(file_truncated_after_open_fails_at_its_batch),
	    cmocka_unit_test(corrupt_headers_fail_with_a_clear_message),
	    cmocka_unit_test(mismatched_shape_and_offsets_are_refused),
	    cmocka_unit_test(all_slots_held_gives_ebusy_until_a_release),
	    cmocka_unit_test(close_with_batches_outstanding_is_clean),
	    cmocka_unit_test(open_refuses_bad_options_and_missing_files),
	    cmocka_unit_test(files_are_opened_with_o_direct_unless_refused),
	    cmocka_unit_test(a_multi_rank_mount_names_its_rank_directories),
	    cmocka_unit_test(reopen_reads_the_next_epoch_with_the_same_ring),
	};

	if (t && *t)
		snprintf(workdir, sizeof(workdir), "%s", t);
	else if (mkdtemp(tmpl))
		snprintf(workdir, sizeof(workdir), "%s", tmpl);
	else
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
