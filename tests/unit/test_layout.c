/* The batch file layout is valid safetensors: u64 LE header length, JSON
 * starting with '{' padded with spaces to a page boundary, fields ordered by
 * element size then name, data_offsets tiling the data with no holes. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <cmocka.h>

#include "fs/layout.h"

/* Batch k of epoch e (of lane 0). */
#define ID(e, k) ((struct bfs_batch_id){.epoch = (e), .batch = (k)})

static struct bfs_field f_img = {.name = "images",
				 .dtype = BFS_DT_UINT8,
				 .ndim = 3,
				 .shape = {3, 2, 2},
				 .row_bytes = 12};
static struct bfs_field f_lab = {.name = "labels",
				 .dtype = BFS_DT_INT64,
				 .ndim = 0,
				 .shape = {0},
				 .row_bytes = 8};
static struct bfs_field f_w = {.name = "w",
			       .dtype = BFS_DT_FLOAT32,
			       .ndim = 1,
			       .shape = {5},
			       .row_bytes = 20};
static struct bfs_field f_a = {.name = "a",
			       .dtype = BFS_DT_INT32,
			       .ndim = 1,
			       .shape = {2},
			       .row_bytes = 8};
static struct bfs_field f_bf = {.name = "q\"x",
				.dtype = BFS_DT_BFLOAT16,
				.ndim = 0,
				.shape = {0},
				.row_bytes = 2};

static void fields_are_ordered_by_element_size_then_name(void **state)
{
	const struct bfs_field *fs[] = {&f_img, &f_lab, &f_w, &f_a, &f_bf};
	struct bfs_layout l;

	assert_int_equal(bfs_layout_init_fields(&l, fs, 5, 1000, NULL, NULL),
			 0);
	assert_string_equal(l.fields[0].f->name, "labels");
	assert_string_equal(l.fields[1].f->name, "a");
	assert_string_equal(l.fields[2].f->name, "w");
	assert_string_equal(l.fields[3].f->name, "q\"x");
	assert_string_equal(l.fields[4].f->name, "images");
	assert_int_equal(l.fields[0].ds_index, 1);
	assert_int_equal(l.row_bytes, 12 + 8 + 20 + 8 + 2);
	bfs_layout_fini(&l);
}

static void header_is_exact_json_padded_to_4096(void **state)
{
	const struct bfs_field *fs[] = {&f_img, &f_lab, &f_bf};
	struct bfs_layout l;
	char json[1024];
	const char *want =
	    "{\"__metadata__\":{\"format\":\"batchfs/1\",\"epoch\":\"3\","
	    "\"batch\":\"17\"},\"labels\":{\"dtype\":\"I64\",\"shape\":[5],"
	    "\"data_offsets\":[0,40]},\"q\\\"x\":{\"dtype\":\"BF16\","
	    "\"shape\":[5],\"data_offsets\":[40,50]},\"images\":{\"dtype\":"
	    "\"U8\",\"shape\":[5,3,2,2],\"data_offsets\":[50,110]}}";

	assert_int_equal(bfs_layout_init_fields(&l, fs, 3, 1000, NULL, NULL),
			 0);
	assert_int_equal(bfs_layout_json(&l, ID(3, 17), 5, json, sizeof(json)),
			 strlen(want));
	assert_string_equal(json, want);
	assert_int_equal(bfs_layout_data_offset(&l, 5), 4096);
	assert_int_equal(bfs_layout_size(&l, 5), 4096 + 110);
	/* a truncated render still reports the full length */
	assert_int_equal(bfs_layout_json(&l, ID(3, 17), 5, json, 10),
			 strlen(want));
	assert_int_equal(strlen(json), 9);
	bfs_layout_fini(&l);
}

static void
a_header_bigger_than_a_page_moves_data_to_the_next_page(void **state)
{
	enum { N = 120 };
	static struct bfs_field many[N];
	const struct bfs_field *fs[N];
	struct bfs_layout l;
	size_t json;

	for (int i = 0; i < N; i++) {
		many[i] = (struct bfs_field){.name = NULL,
					     .dtype = BFS_DT_FLOAT32,
					     .ndim = 1,
					     .shape = {7},
					     .row_bytes = 28};
		many[i].name = malloc(16);
		snprintf(many[i].name, 16, "field_%03d", i);
		fs[i] = &many[i];
	}
	assert_int_equal(bfs_layout_init_fields(&l, fs, N, 1000, NULL, NULL),
			 0);
	json = bfs_layout_json(&l, ID(0, 0), 9, NULL, 0);
	assert_true(json + 8 > 4096);
	assert_int_equal(bfs_layout_data_offset(&l, 9),
			 (json + 8 + 4095) / 4096 * 4096);
	assert_int_equal(bfs_layout_size(&l, 9),
			 bfs_layout_data_offset(&l, 9) + 9 * 28 * N);
	bfs_layout_fini(&l);
	for (int i = 0; i < N; i++)
		free(many[i].name);
}

static void dtypes_without_a_safetensors_code_are_refused_by_name(void **state)
{
	struct bfs_field c128 = {.name = "spec",
				 .dtype = BFS_DT_COMPLEX128,
				 .ndim = 0,
				 .shape = {0},
				 .row_bytes = 16};
	const struct bfs_field *fs[] = {&f_lab, &c128};
	struct bfs_layout l;
	struct bfs_error err = {{0}};

	assert_int_equal(bfs_layout_init_fields(&l, fs, 2, 1000, NULL, &err),
			 -ENOTSUP);
	assert_non_null(strstr(err.msg, "spec"));
	assert_non_null(strstr(err.msg, "complex128"));
	assert_null(l.fields);
	bfs_layout_fini(&l); /* idempotent */
}

static void zero_rows_and_zero_size_fields_make_empty_spans(void **state)
{
	struct bfs_field empty = {.name = "e",
				  .dtype = BFS_DT_FLOAT32,
				  .ndim = 1,
				  .shape = {0},
				  .row_bytes = 0};
	const struct bfs_field *fs[] = {&empty, &f_lab};
	struct bfs_layout l;
	char json[512];

	assert_int_equal(bfs_layout_init_fields(&l, fs, 2, 1000, NULL, NULL),
			 0);
	bfs_layout_json(&l, ID(0, 0), 4, json, sizeof(json));
	assert_non_null(strstr(json, "\"e\":{\"dtype\":\"F32\",\"shape\":"
				     "[4,0],\"data_offsets\":[32,32]}"));
	assert_int_equal(bfs_layout_size(&l, 0), 4096);
	bfs_layout_fini(&l);
}

/* A header whose JSON ends exactly at the data offset, in a batch with no
 * data bytes: the file is the header alone and bfs_layout_fill writes
 * nothing past it (the buffer ends at a page followed by no access). The
 * data offset allows for 20-digit epoch and batch numbers, so the JSON
 * ends there for those numbers. */
static void a_header_ending_at_the_file_end_writes_within_the_file(void **state)
{
	static char name[4096];
	struct bfs_field empty = {.name = name,
				  .dtype = BFS_DT_FLOAT32,
				  .ndim = 1,
				  .shape = {0},
				  .row_bytes = 0};
	const struct bfs_field *fs[] = {&empty};
	struct bfs_layout l;
	unsigned char *map, *f;
	size_t len;

	for (len = 1; len < sizeof(name) - 1; len++) {
		memset(name, 'n', len);
		name[len] = '\0';
		assert_int_equal(
		    bfs_layout_init_fields(&l, fs, 1, 1000, NULL, NULL), 0);
		if (bfs_layout_json(&l, ID(UINT64_MAX, UINT64_MAX), 0, NULL,
				    0) +
			8 ==
		    4096)
			break;
		bfs_layout_fini(&l);
	}
	assert_int_equal(bfs_layout_size(&l, 0), 4096);
	map = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(map != MAP_FAILED);
	assert_int_equal(mprotect(map + 4096, 4096, PROT_NONE), 0);
	f = map;
	assert_int_equal(bfs_layout_fill(&l, NULL, ID(UINT64_MAX, UINT64_MAX),
					 NULL, 0, 4096, f),
			 0);
	assert_int_equal(f[0] | f[1] << 8, 4096 - 8);
	assert_int_equal(f[8], '{');
	assert_int_equal(f[4095], '}');
	bfs_layout_fini(&l);
	munmap(map, 2 * 4096);
}

/* A layout of one field named 'name' (n chars) whose batch 0 of epoch 0
 * of 'rows' rows has 8 + JSON = 'end' bytes of header. */
static void layout_ending_at(struct bfs_layout *l, char *name, size_t n,
			     uint64_t rows, size_t end)
{
	static struct bfs_field f = {
	    .dtype = BFS_DT_INT64, .ndim = 0, .shape = {0}, .row_bytes = 8};
	const struct bfs_field *fs[] = {&f};

	f.name = name;
	for (size_t len = 1; len < n - 1; len++) {
		memset(name, 'n', len);
		name[len] = '\0';
		assert_int_equal(
		    bfs_layout_init_fields(l, fs, 1, rows, NULL, NULL), 0);
		if (bfs_layout_json(l, ID(0, 0), rows, NULL, 0) + 8 == end)
			return;
		bfs_layout_fini(l);
	}
	fail_msg("no name length ends the header at %zu", end);
}

/* Batch 0 of epoch 0 has a header 2 bytes under the page: epochs and
 * batches of more digits would spill it, but the data starts where the
 * widest numbers put it, so every batch of 5 rows has one size, and each
 * header names its real numbers, padded with spaces up to that data
 * offset. */
static void numbers_of_any_width_leave_the_data_offset_where_it_is(void **state)
{
	static const uint64_t num[] = {0, 9, 10, 99, 100, 123456, UINT64_MAX};
	static char name[4096];
	static unsigned char f[3 * 4096];
	struct bfs_layout l;
	char want[96];
	uint64_t data;

	layout_ending_at(&l, name, sizeof(name), 5, 4096 - 2);
	data = bfs_layout_data_offset(&l, 5);
	assert_int_equal(data, 8192);
	assert_int_equal(bfs_layout_size(&l, 5), data + 5 * 8);
	for (size_t i = 0; i < sizeof(num) / sizeof(num[0]); i++)
		for (size_t j = 0; j < sizeof(num) / sizeof(num[0]); j++) {
			assert_int_equal(
			    bfs_layout_header(&l, ID(num[i], num[j]), 5, f),
			    data);
			assert_true(8 + bfs_layout_json(&l, ID(num[i], num[j]),
							5, NULL, 0) <=
				    data);
		}
	assert_int_equal(bfs_layout_header(&l, ID(12, 345), 5, f), data);
	assert_int_equal(f[0] | f[1] << 8, data - 8);
	snprintf(want, sizeof(want),
		 "{\"__metadata__\":{\"format\":\"batchfs/1\","
		 "\"epoch\":\"12\",\"batch\":\"345\"}");
	assert_memory_equal(f + 8, want, strlen(want));
	assert_int_equal(
	    f[8 + bfs_layout_json(&l, ID(12, 345), 5, NULL, 0) - 1], '}');
	for (size_t i = 8 + bfs_layout_json(&l, ID(12, 345), 5, NULL, 0);
	     i < data; i++)
		assert_int_equal(f[i], ' ');
	bfs_layout_fini(&l);
}

/* On a multi-rank order (ranks 0, 2 and 5: lane 1 serves rank 2), epoch 3
 * of lane 1 is epoch 3 of rank 2: its header says "3", byte for byte the
 * header of epoch 3 of a one-rank order (a --rank 2 mount's), its size is
 * the layout's for its rows, and messages name the rank, not the lane. */
static void headers_of_a_multi_rank_order_name_the_rank_epoch(void **state)
{
	static const uint32_t ranks[] = {0, 2, 5};
	struct bfs_order_opts oo = {.sampler = BFS_SAMPLER_DISTRIBUTED,
				    .n = 60,
				    .batch_size = 2,
				    .world_size = 6,
				    .ranks = ranks,
				    .nranks = 3,
				    .epochs = 5};
	const struct bfs_field *fs[] = {&f_lab};
	const struct bfs_batch_id id = {.lane = 1, .epoch = 3, .batch = 2};
	static unsigned char head[4096], one[4096];
	struct bfs_order *o = NULL;
	struct bfs_batch_loc at;
	struct bfs_layout l;
	uint64_t size;
	char json[512];

	assert_int_equal(bfs_order_create(&o, &oo, NULL), 0);
	assert_int_equal(bfs_layout_init_fields(&l, fs, 1, 2, NULL, NULL), 0);
	bfs_layout_bind_order(&l, o);
	bfs_layout_json(&l, id, 2, json, sizeof(json));
	assert_non_null(strstr(json, "\"epoch\":\"3\",\"batch\":\"2\""));
	assert_int_equal(bfs_layout_header(&l, id, 2, head), 4096);
	assert_int_equal(bfs_layout_header(&l, ID(3, 2), 2, one), 4096);
	assert_memory_equal(head, one, sizeof(head));
	assert_int_equal(bfs_order_locate(o, id, &at), 0);
	assert_int_equal(bfs_layout_file_size(&l, o, &at, &size), 0);
	assert_int_equal(size, bfs_layout_size(&l, 2));
	bfs_layout_batch_name(&l, id, json, sizeof(json));
	assert_string_equal(json, "rank 2 epoch 3 batch 2");
	bfs_layout_fini(&l);
	bfs_order_destroy(o);
}

static void json_strings_escape_quotes_backslashes_and_controls(void **state)
{
	char buf[64];
	size_t pos = 0;

	bfs_layout_json_str(buf, sizeof(buf), &pos, "a\"b\\c\n\x01");
	assert_string_equal(buf, "\"a\\\"b\\\\c\\u000a\\u0001\"");
	assert_int_equal(pos, strlen(buf));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(fields_are_ordered_by_element_size_then_name),
	    cmocka_unit_test(header_is_exact_json_padded_to_4096),
	    cmocka_unit_test(
		a_header_bigger_than_a_page_moves_data_to_the_next_page),
	    cmocka_unit_test(
		dtypes_without_a_safetensors_code_are_refused_by_name),
	    cmocka_unit_test(zero_rows_and_zero_size_fields_make_empty_spans),
	    cmocka_unit_test(
		a_header_ending_at_the_file_end_writes_within_the_file),
	    cmocka_unit_test(
		numbers_of_any_width_leave_the_data_offset_where_it_is),
	    cmocka_unit_test(headers_of_a_multi_rank_order_name_the_rank_epoch),
	    cmocka_unit_test(
		json_strings_escape_quotes_backslashes_and_controls),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
