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
	assert_int_equal(bfs_layout_json(&l, 3, 17, 5, json, sizeof(json)),
			 strlen(want));
	assert_string_equal(json, want);
	assert_int_equal(bfs_layout_data_offset(&l, 3, 17, 5), 4096);
	assert_int_equal(bfs_layout_size(&l, 3, 17, 5), 4096 + 110);
	/* a truncated render still reports the full length */
	assert_int_equal(bfs_layout_json(&l, 3, 17, 5, json, 10), strlen(want));
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
	json = bfs_layout_json(&l, 0, 0, 9, NULL, 0);
	assert_true(json + 8 > 4096);
	assert_int_equal(bfs_layout_data_offset(&l, 0, 0, 9),
			 (json + 8 + 4095) / 4096 * 4096);
	assert_int_equal(bfs_layout_size(&l, 0, 0, 9),
			 bfs_layout_data_offset(&l, 0, 0, 9) + 9 * 28 * N);
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
	bfs_layout_json(&l, 0, 0, 4, json, sizeof(json));
	assert_non_null(strstr(json, "\"e\":{\"dtype\":\"F32\",\"shape\":"
				     "[4,0],\"data_offsets\":[32,32]}"));
	assert_int_equal(bfs_layout_size(&l, 0, 0, 0), 4096);
	bfs_layout_fini(&l);
}

/* A header whose JSON ends exactly at the data offset, in a batch with no
 * data bytes: the file is the header alone and bfs_layout_fill writes
 * nothing past it (the buffer ends at a page followed by no access). */
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
		if (bfs_layout_json(&l, 0, 0, 0, NULL, 0) + 8 == 4096)
			break;
		bfs_layout_fini(&l);
	}
	assert_int_equal(bfs_layout_size(&l, 0, 0, 0), 4096);
	map = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(map != MAP_FAILED);
	assert_int_equal(mprotect(map + 4096, 4096, PROT_NONE), 0);
	f = map;
	assert_int_equal(bfs_layout_fill(&l, NULL, 0, 0, NULL, 0, 4096, f), 0);
	assert_int_equal(f[0] | f[1] << 8, 4096 - 8);
	assert_int_equal(f[8], '{');
	assert_int_equal(f[4095], '}');
	bfs_layout_fini(&l);
	munmap(map, 2 * 4096);
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
		json_strings_escape_quotes_backslashes_and_controls),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
