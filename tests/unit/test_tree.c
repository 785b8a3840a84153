/* The namespace is arithmetic and exact: inode numbers round-trip (and
 * the ones programs see fit in 32 bits), names parse strictly, st_size equals
 * the bytes of every file before anything is materialized, listings enumerate
 * len(DataLoader) batches. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "fs/tree.h"
#include "tests/lib/fixture.h"

static struct tf_fixture fx; /* the dataset, its order and layout */
static struct bfs_serve *serve;
static struct bfs_tree *tree;

/* The kernel, for a serve in cache mode: never asked anything. */
static int no_store(void *arg, struct bfs_batch_id id, uint64_t off,
		    const void *buf, uint64_t len)
{
	return -ENOSYS;
}

static int no_inval(void *arg, struct bfs_batch_id id)
{
	return -ENOSYS;
}

static int no_backing(void *arg, int fd)
{
	return -ENOSYS;
}

static void no_backing_close(void *arg, int id)
{
}

static const struct bfs_pool_opts po = {
    .workers = 1, .budget_bytes = 1 << 20, .timeout_ms = 10000};
static const struct bfs_serve_opts so = {.mode = BFS_SERVE_CACHE};
static const struct bfs_serve_kernel kernel = {.store = no_store,
					       .inval = no_inval,
					       .backing_open = no_backing,
					       .backing_close =
						   no_backing_close};
static const char *srcs[1] = {"demo.pt"};
static const struct bfs_tree_info ti = {
    .text = {.sources = srcs,
	     .nsources = 1,
	     .batch_size = 16,
	     .seed = 9,
	     .seed_source = "--seed",
	     .shuffle = true,
	     .sampler = "random",
	     .options = "--x",
	     .mountpoint = "/m",
	     .serve_mode = "cache",
	     .serve_why = "--serve cache"},
    .perm = {.uid = 0, .gid = 0, .read = 0444}};

/* pack --demo 50 (labels i64, images u8 [3,32,32]), batch 16, no
 * drop_last: 4 batches, the last of 2 samples; 3 epochs. */
static int setup(void **state)
{
	const struct tf_spec spec = {.format = TF_DEMO,
				     .name = "tree_demo.pt",
				     .demo_rows = 50,
				     .order = {.sampler = BFS_SAMPLER_RANDOM,
					       .batch_size = 16,
					       .seed = 9,
					       .compat = BFS_TORCH_1_13,
					       .epochs = 3}};

	if (tf_setup(&fx, &spec) < 0 ||
	    bfs_serve_create(&serve, fx.ds, fx.order, &fx.layout, &po, &so,
			     &kernel) < 0)
		return -1;
	return bfs_tree_create(&tree, fx.ds, fx.order, &fx.layout, serve, &ti);
}

static int teardown(void **state)
{
	bfs_tree_destroy(tree);
	bfs_serve_destroy(serve);
	return tf_teardown(&fx);
}

/* The inode of 'path' in tree t, or 0. */
static uint64_t ino_in(const struct bfs_tree *t, const char *path)
{
	uint64_t ino = 1;
	char buf[256], *save = NULL;
	struct stat st;

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = strtok_r(buf, "/", &save); p;
	     p = strtok_r(NULL, "/", &save)) {
		if (bfs_tree_lookup(t, ino, p, &st) < 0)
			return 0;
		ino = st.st_ino;
	}
	return ino;
}

static uint64_t ino_of(const char *path)
{
	return ino_in(tree, path);
}

/* A node of kind 'kind' for batch k of epoch e (of lane 0). */
static struct bfs_node node(enum bfs_node_kind kind, uint64_t e, uint64_t k)
{
	return (struct bfs_node){kind, {.epoch = e, .batch = k}};
}

static void inode_numbers_round_trip_and_reject_out_of_range(void **state)
{
	struct bfs_node n = node(BFS_NODE_BATCH, 2, 3), back;

	assert_int_equal(bfs_tree_decode(tree, bfs_tree_ino(tree, &n), &back),
			 0);
	assert_int_equal(back.kind, BFS_NODE_BATCH);
	assert_int_equal(back.id.lane, 0);
	assert_int_equal(back.id.epoch, 2);
	assert_int_equal(back.id.batch, 3);
	/* kind << 60 | epoch << 36 | batch */
	assert_int_equal(bfs_tree_ino(tree, &n), 8ull << 60 | 2ull << 36 | 3);
	n.id.batch = 4; /* len is 4 */
	assert_int_equal(bfs_tree_decode(tree, bfs_tree_ino(tree, &n), &back),
			 -ENOENT);
	n.id.batch = 0;
	n.id.epoch = 3; /* epochs is 3 */
	assert_int_equal(bfs_tree_decode(tree, bfs_tree_ino(tree, &n), &back),
			 -ENOENT);
	assert_int_equal(bfs_tree_decode(tree, 1, &back), 0);
	assert_int_equal(back.kind, BFS_NODE_ROOT);
	assert_int_equal(bfs_tree_decode(tree, 2, &back), -ENOENT);
	n = node(BFS_NODE_BATCH, 2, 3);
	assert_int_equal(ino_of("epoch/2/batch_3"), bfs_tree_ino(tree, &n));
}

/* The inode numbers of directory 'dir' and all below it (node ids) into
 * ids[*n...]. */
static void collect(uint64_t dir, uint64_t *ids, size_t *n, size_t cap)
{
	char name[64];
	struct stat st;

	for (uint64_t off = 2;
	     bfs_tree_dirent(tree, dir, off, name, sizeof(name), &st) == 1;
	     off++) {
		assert_true(*n < cap);
		ids[(*n)++] = st.st_ino;
		if (S_ISDIR(st.st_mode))
			collect(st.st_ino, ids, n, cap);
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/* A small mount shows every node a distinct inode number below 2^32
 * (32-bit stat() fails with EOVERFLOW above), the root 1. */
static void inode_numbers_programs_see_fit_in_32_bits(void **state)
{
	uint64_t ids[256], shown[256];
	size_t n = 0;

	assert_int_equal(bfs_tree_shown_ino(tree, 1), 1);
	collect(1, ids, &n, 256);
	assert_int_equal(n, 6 + 3 + 3 * 4 + 3 + 3 * (4 + 1) + 3);
	for (size_t i = 0; i < n; i++) {
		shown[i] = bfs_tree_shown_ino(tree, ids[i]);
		assert_true(shown[i] > 1 && shown[i] < (1ull << 32));
		assert_true(ids[i] >= (1ull << 32)); /* the node ids do not */
	}
	qsort(shown, n, sizeof(shown[0]), cmp_u64);
	for (size_t i = 1; i < n; i++)
		assert_true(shown[i] != shown[i - 1]);
}

static void names_parse_strictly(void **state)
{
	const char *bad[] = {
	    "epoch/3",		"epoch/03",
	    "epoch/-0",		"epoch/+1",
	    "epoch/0/batch_4",	"epoch/0/batch_01",
	    "epoch/0/batch_",	"epoch/0/Batch_0",
	    "Readme",		"epoch/0/batch_99999999999999999999999",
	    "index/0/batch_1x", "README/x"};
	struct stat st;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(ino_of(bad[i]), 0);
	assert_int_equal(bfs_tree_lookup(tree, ino_of("README"), "x", &st),
			 -ENOTDIR);
	assert_true(ino_of("index/2/batch_0") != 0);
	assert_true(ino_of("epoch/0/batch_0") != 0);
}

static void sizes_are_exact_before_anything_is_read(void **state)
{
	const char *files[] = {"README", "dataset.json", "stats",
			       "index/0/batch_0", "index/1/batch_3"};
	struct stat st;

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		uint64_t ino = ino_of(files[i]);
		char *text;
		size_t len;

		assert_int_equal(bfs_tree_getattr(tree, ino, &st), 0);
		assert_int_equal(bfs_tree_render(tree, ino, &text, &len), 0);
		assert_int_equal(st.st_size, len);
		assert_int_equal(strlen(text), len);
		assert_int_equal(st.st_blksize, 1 << 20);
		assert_true(S_ISREG(st.st_mode) && !(st.st_mode & 0222));
		free(text);
	}
	/* a batch: header page + 16 rows of 8 + 3072 bytes; the last: 2 */
	assert_int_equal(bfs_tree_getattr(tree, ino_of("epoch/1/batch_0"), &st),
			 0);
	assert_int_equal(st.st_size, 4096 + 16 * 3080);
	assert_int_equal(bfs_tree_getattr(tree, ino_of("epoch/1/batch_3"), &st),
			 0);
	assert_int_equal(st.st_size, 4096 + 2 * 3080);
}

static void listings_enumerate_every_entry_once(void **state)
{
	char name[64];
	struct stat st;
	uint64_t off = 0;
	int rc;

	while ((rc = bfs_tree_dirent(tree, ino_of("epoch/1"), off, name,
				     sizeof(name), &st)) == 1) {
		if (off >= 2) {
			char want[32], path[48];
			snprintf(want, sizeof(want), "batch_%llu",
				 (unsigned long long)(off - 2));
			assert_string_equal(name, want);
			snprintf(path, sizeof(path), "epoch/1/%s", want);
			assert_int_equal(st.st_ino, ino_of(path));
		}
		off++;
	}
	assert_int_equal(rc, 0);
	assert_int_equal(off, 2 + 4);
	for (off = 0; bfs_tree_dirent(tree, 1, off, name, sizeof(name), &st);)
		off++;
	assert_int_equal(off, 2 + 6); /* README dataset.json epoch index
				       * stats stream */
	for (off = 0; bfs_tree_dirent(tree, ino_of("epoch"), off, name,
				      sizeof(name), &st);)
		off++;
	assert_int_equal(off, 2 + 3);
	for (off = 0; bfs_tree_dirent(tree, ino_of("stream"), off, name,
				      sizeof(name), &st);)
		off++;
	assert_int_equal(off, 2 + 3);
	/* index/1: batch_0 .. batch_3, then offsets */
	for (off = 0; bfs_tree_dirent(tree, ino_of("index/1"), off, name,
				      sizeof(name), &st) == 1;)
		off++;
	assert_int_equal(off, 2 + 4 + 1);
	assert_string_equal(name, "offsets");
	assert_int_equal(st.st_ino, ino_of("index/1/offsets"));
	assert_int_equal(
	    bfs_tree_dirent(tree, ino_of("README"), 0, name, sizeof(name), &st),
	    -ENOTDIR);
}

static void index_files_list_the_batch_indices(void **state)
{
	uint64_t idx[16];
	char *text, *p;
	size_t len;

	assert_int_equal(
	    bfs_order_batch(fx.order,
			    (struct bfs_batch_id){.epoch = 2, .batch = 1}, idx),
	    0);
	assert_int_equal(
	    bfs_tree_render(tree, ino_of("index/2/batch_1"), &text, &len), 0);
	p = text;
	for (int i = 0; i < 16; i++) {
		assert_int_equal(strtoull(p, &p, 10), idx[i]);
		assert_true(*p++ == '\n');
	}
	assert_true(*p == '\0');
	free(text);
}

static void dataset_json_and_readme_describe_the_mount(void **state)
{
	char *text;
	size_t len;

	assert_int_equal(
	    bfs_tree_render(tree, ino_of("dataset.json"), &text, &len), 0);
	assert_non_null(strstr(text, "\"batches_per_epoch\": 4,"));
	assert_non_null(strstr(text, "\"samples\": 50,"));
	assert_non_null(strstr(text, "\"seed\": 9,"));
	assert_non_null(strstr(text, "\"batch_size\": 16,"));
	assert_non_null(strstr(text, "\"seed_source\": \"--seed\","));
	assert_non_null(strstr(text, "manual_seed(9)"));
	assert_non_null(strstr(text, "\"header_size\": 4096"));
	free(text);
	assert_int_equal(bfs_tree_render(tree, ino_of("README"), &text, &len),
			 0);
	assert_non_null(strstr(text, "DataLoader("));
	assert_non_null(strstr(text, "def read_batch(path):"));
	free(text);
	assert_int_equal(bfs_tree_render(tree, ino_of("epoch"), &text, &len),
			 -EISDIR);
}

/* A multi-rank tree (ranks 1 and 3 of 4, 2 epochs each): /rank/R for
 * the ranks served only, each rank's epochs, indexes and streams named by
 * the rank and reached through its lane (lane 1 serves rank 3), inode
 * numbers kind << 60 | (lane x epochs + epoch) << 36 | batch, and every
 * file of rank/3 that of rank 3's own order (a --rank 3 mount's). */
static void a_multi_rank_tree_reaches_each_rank_through_its_lane(void **st_)
{
	static const uint32_t ranks[] = {1, 3};
	struct bfs_order_opts o = {.sampler = BFS_SAMPLER_DISTRIBUTED,
				   .n = bfs_dataset_samples(fx.ds),
				   .batch_size = 4,
				   .world_size = 4,
				   .shuffle = true,
				   .seed = 9,
				   .ranks = ranks,
				   .nranks = 2,
				   .epochs = 2};
	struct bfs_order_opts r3 = o;
	struct bfs_order *many, *one;
	struct bfs_serve *sv;
	struct bfs_tree *t;
	struct bfs_node n;
	uint64_t idx[4], size = 0, bytes = 0, off = 0;
	char name[64], *text, *p;
	struct stat st;
	size_t len;

	r3.nranks = 0;
	r3.ranks = NULL;
	r3.rank = 3;
	assert_int_equal(bfs_order_create(&many, &o, NULL), 0);
	assert_int_equal(bfs_order_create(&one, &r3, NULL), 0);
	assert_int_equal(
	    bfs_serve_create(&sv, fx.ds, many, &fx.layout, &po, &so, &kernel),
	    0);
	assert_int_equal(bfs_tree_create(&t, fx.ds, many, &fx.layout, sv, &ti),
			 0);
	assert_int_equal(bfs_order_len(many), 4); /* 13 samples per rank */

	assert_true(ino_in(t, "rank/1/epoch/1/batch_3") != 0);
	assert_int_equal(ino_in(t, "rank/3/epoch/1/batch_2"),
			 8ull << 60 | (1ull * 2 + 1) << 36 | 2);
	assert_int_equal(
	    bfs_tree_decode(t, ino_in(t, "rank/3/epoch/1/batch_2"), &n), 0);
	assert_int_equal(n.kind, BFS_NODE_BATCH);
	assert_int_equal(n.id.lane, 1);
	assert_int_equal(n.id.epoch, 1);
	assert_int_equal(n.id.batch, 2);
	assert_int_equal(ino_in(t, "rank/3"), 11ull << 60 | 1ull << 36);
	for (const char *const *bad =
		 (const char *const[]){"rank/0", "rank/2", "rank/4",
				       "rank/3/epoch/2", "epoch",
				       "rank/3/epoch/0/batch_4", NULL};
	     *bad; bad++)
		assert_int_equal(ino_in(t, *bad), 0);
	/* rank/ lists the ranks served; ".." of an epoch is its rank's */
	for (off = 2; bfs_tree_dirent(t, ino_in(t, "rank"), off, name,
				      sizeof(name), &st) == 1;
	     off++) {
		char path[80];

		snprintf(path, sizeof(path), "rank/%s", name);
		assert_string_equal(name, off == 2 ? "1" : "3");
		assert_int_equal(st.st_ino, ino_in(t, path));
	}
	assert_int_equal(off, 4);
	assert_int_equal(bfs_tree_dirent(t, ino_in(t, "rank/3/epoch/1"), 1,
					 name, sizeof(name), &st),
			 1);
	assert_int_equal(st.st_ino, ino_in(t, "rank/3/epoch"));
	/* the index file of rank/3 is rank 3's batch */
	assert_int_equal(
	    bfs_order_batch(one, (struct bfs_batch_id){.epoch = 1, .batch = 2},
			    idx),
	    0);
	assert_int_equal(bfs_tree_render(t, ino_in(t, "rank/3/index/1/batch_2"),
					 &text, &len),
			 0);
	p = text;
	for (int i = 0; i < 4; i++) {
		assert_int_equal(strtoull(p, &p, 10), idx[i]);
		assert_true(*p++ == '\n');
	}
	free(text);
	/* its stream is its batches back to back */
	for (uint64_t k = 0; k < 4; k++) {
		snprintf(name, sizeof(name), "rank/3/epoch/1/batch_%llu",
			 (unsigned long long)k);
		assert_int_equal(bfs_tree_getattr(t, ino_in(t, name), &st), 0);
		size += (uint64_t)st.st_size;
	}
	assert_int_equal(bfs_tree_getattr(t, ino_in(t, "rank/3/stream/1"), &st),
			 0);
	bytes = (uint64_t)st.st_size;
	assert_int_equal(bytes, size);
	bfs_tree_destroy(t);
	bfs_serve_destroy(sv);
	bfs_order_destroy(one);
	bfs_order_destroy(many);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(inode_numbers_round_trip_and_reject_out_of_range),
	    cmocka_unit_test(inode_numbers_programs_see_fit_in_32_bits),
	    cmocka_unit_test(names_parse_strictly),
	    cmocka_unit_test(sizes_are_exact_before_anything_is_read),
	    cmocka_unit_test(listings_enumerate_every_entry_once),
	    cmocka_unit_test(index_files_list_the_batch_indices),
	    cmocka_unit_test(dataset_json_and_readme_describe_the_mount),
	    cmocka_unit_test(
		a_multi_rank_tree_reaches_each_rank_through_its_lane),
	};
	if (!getenv("BATCHFS")) {
		printf("skip: BATCHFS (for batchfs pack) is not set\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}
