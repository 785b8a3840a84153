/* fs/safetensors is the one reader of batch-file headers (inspect and the
 * loader): it accepts what fs/layout writes and every header the spec
 * allows (4096 padding, escapes, empty and scalar tensors), and refuses
 * each spec violation with a reason and the byte offset of the culprit. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "fs/dtype.h"
#include "fs/layout.h"
#include "fs/safetensors.h"

/* A file: u64 LE len(json) + pad, the JSON, 'pad' spaces, 'data' zero
 * bytes. *size = its length. */
static unsigned char *file_of(const char *json, size_t pad, size_t data,
			      size_t *size)
{
	size_t n = strlen(json) + pad;
	unsigned char *f = calloc(1, 8 + n + data + 1);

	assert_non_null(f);
	for (int i = 0; i < 8; i++)
		f[i] = (unsigned char)((uint64_t)n >> (8 * i));
	memcpy(f + 8, json, strlen(json));
	memset(f + 8 + strlen(json), ' ', pad);
	*size = 8 + n + data;
	return f;
}

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
static struct bfs_field f_bf = {.name = "q\"x",
				.dtype = BFS_DT_BFLOAT16,
				.ndim = 0,
				.shape = {0},
				.row_bytes = 2};

static void a_batch_written_by_fs_layout_parses_back(void **state)
{
	const struct bfs_field *fs[] = {&f_img, &f_lab, &f_bf};
	struct bfs_layout l;
	struct bfs_st_header *h = NULL;
	struct bfs_st_error e = {0};
	const struct bfs_batch_id id = {.epoch = 2, .batch = 9};
	uint64_t size, data;
	unsigned char *f;

	assert_int_equal(bfs_layout_init_fields(&l, fs, 3, 1000, NULL, NULL),
			 0);
	size = bfs_layout_size(&l, 5);
	data = bfs_layout_data_offset(&l, 5);
	f = calloc(1, size);
	assert_non_null(f);
	/* Header bytes exactly as bfs_layout_fill writes them; with rows > 0
	 * fill would gather from a dataset, so the data stays zero. */
	for (int i = 0; i < 8; i++)
		f[i] = (unsigned char)((data - 8) >> (8 * i));
	memset(f + 8, ' ', data - 8);
	bfs_layout_json(&l, id, 5, (char *)f + 8, data - 8);
	f[8 + bfs_layout_json(&l, id, 5, NULL, 0)] = ' ';
	assert_int_equal(bfs_st_parse(f, size, size, 0, &h, &e), 0);
	assert_int_equal(h->header_len, 4088);
	assert_int_equal(h->data_start, 4096);
	assert_int_equal(h->file_size, size);
	assert_int_equal(h->nmeta, 3);
	assert_string_equal(h->meta[0].key, "format");
	assert_string_equal(h->meta[0].value, "batchfs/1");
	assert_string_equal(h->meta[1].value, "2");
	assert_string_equal(h->meta[2].value, "9");
	assert_int_equal(h->ntensors, 3);
	/* header order = file order = fs/layout's field order */
	for (size_t i = 0; i < 3; i++) {
		const struct bfs_st_tensor *t = &h->tensors[i];
		const struct bfs_layout_field *lf = &l.fields[i];
		assert_string_equal(t->name, lf->f->name);
		assert_string_equal(t->dtype, lf->st_dtype);
		assert_int_equal(t->elem_size,
				 bfs_dtype_info(lf->f->dtype)->size);
		assert_int_equal(t->ndim, lf->f->ndim + 1);
		assert_int_equal(t->shape[0], 5);
		for (int d = 0; d < lf->f->ndim; d++)
			assert_int_equal(t->shape[d + 1], lf->f->shape[d]);
		assert_int_equal(t->end - t->begin, 5 * lf->f->row_bytes);
	}
	assert_int_equal(h->tensors[0].begin, 0);
	assert_int_equal(h->tensors[2].end, size - 4096);
	bfs_st_free(h);
	free(f);
	bfs_layout_fini(&l);
}

static void an_empty_batch_from_bfs_layout_fill_parses_back(void **state)
{
	const struct bfs_field *fs[] = {&f_img, &f_lab};
	struct bfs_layout l;
	struct bfs_st_header *h = NULL;
	uint64_t size;
	unsigned char *f;

	assert_int_equal(bfs_layout_init_fields(&l, fs, 2, 1000, NULL, NULL),
			 0);
	size = bfs_layout_size(&l, 0);
	f = malloc(size);
	assert_non_null(f);
	/* rows = 0: fill writes only the header, no dataset needed */
	assert_int_equal(bfs_layout_fill(&l, NULL, (struct bfs_batch_id){0},
					 NULL, 0, size, f),
			 0);
	assert_int_equal(bfs_st_parse(f, size, size, 0, &h, NULL), 0);
	assert_int_equal(size, 4096);
	assert_int_equal(h->ntensors, 2);
	assert_int_equal(h->tensors[0].shape[0], 0);
	assert_int_equal(h->tensors[0].begin, h->tensors[0].end);
	bfs_st_free(h);
	free(f);
	bfs_layout_fini(&l);
}

static void escapes_utf8_scalars_and_empty_tensors_are_valid(void **state)
{
	const char *json =
	    "{ \"__metadata__\" : { \"k\\n\" : \"caf\xc3\xa9\\u00e9\" } ,"
	    "\"\\ud83d\\ude00\\\"\\\\\\/\":{\"shape\":[],\"dtype\":\"BF16\","
	    "\"data_offsets\":[0,2]},\n\t\"e\":{\"dtype\":\"F32\",\"shape\":"
	    "[2,0],\"data_offsets\":[2,2]},\"\xe2\x82\xac\":{\"dtype\":\"U8\","
	    "\"shape\":[3],\"data_offsets\":[2,5]}}";
	struct bfs_st_header *h = NULL;
	struct bfs_st_error e = {0};
	size_t size;
	unsigned char *f = file_of(json, 4, 5, &size);

	if (bfs_st_parse(f, size, size, 0, &h, &e))
		fail_msg("offset %llu: %s", (unsigned long long)e.offset,
			 e.reason);
	assert_string_equal(h->meta[0].key, "k\n");
	assert_string_equal(h->meta[0].value, "caf\xc3\xa9\xc3\xa9");
	assert_string_equal(h->tensors[0].name, "\xf0\x9f\x98\x80\"\\/");
	assert_int_equal(h->tensors[0].ndim, 0);
	assert_null(h->tensors[0].shape);
	assert_int_equal(h->tensors[1].end - h->tensors[1].begin, 0);
	assert_string_equal(h->tensors[2].name, "\xe2\x82\xac");
	assert_int_equal(h->tensors[2].entry_off,
			 8 + (uint64_t)(strstr(json, "\"\xe2\x82\xac") - json));
	bfs_st_free(h);
	free(f);
}

static void unknown_dtypes_pass_only_with_bfs_st_any_dtype(void **state)
{
	const char *json = "{\"x\":{\"dtype\":\"F4\",\"shape\":[3],"
			   "\"data_offsets\":[0,2]}}";
	struct bfs_st_header *h = NULL;
	struct bfs_st_error e = {0};
	size_t size;
	unsigned char *f = file_of(json, 0, 2, &size);

	assert_int_equal(bfs_st_parse(f, size, size, 0, &h, &e), -EBADMSG);
	assert_non_null(strstr(e.reason, "unknown dtype \"F4\""));
	assert_string_equal(e.tensor, "x");
	assert_int_equal(bfs_st_parse(f, size, size, BFS_ST_ANY_DTYPE, &h, &e),
			 0);
	assert_int_equal(h->tensors[0].elem_size, 0);
	assert_string_equal(h->tensors[0].dtype, "F4");
	bfs_st_free(h);
	free(f);
}

static void every_safetensors_code_of_fs_dtype_has_its_size(void **state)
{
	for (int dt = 1; dt < BFS_DT_COUNT; dt++) {
		const struct bfs_dtype_info *d = bfs_dtype_info(dt);
		if (d->st_name)
			assert_int_equal(bfs_st_dtype_size(d->st_name),
					 d->size);
	}
	assert_int_equal(bfs_st_dtype_size("F8_E8M0"), 1);
	assert_int_equal(bfs_st_dtype_size("F33"), 0);
}

/* One refused header: the JSON, its data bytes (the file is exactly what
 * the tensors need unless 'extra'), the reason's text, and 'at': the
 * offending text whose first occurrence in the JSON is the offset (NULL:
 * the offset is 'off'). Trailing fields left out of a row are zero. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
static const struct bad {
	const char *label, *json;
	size_t data, extra;
	const char *why, *at;
	uint64_t off;
	const char *tensor;
} bads[] = {
#define T(s) "{\"x\":{\"dtype\":\"F32\",\"shape\":" s "}}"
#define X8   "\"data_offsets\":[0,8]"
    {"not an object", "[\"x\"]", 0, 0, "expected '{', found '['", NULL, 8},
    {"raw 0xff", "{\"x\xff\":{}}", 0, 0, "invalid UTF-8", "\xff"},
    {"overlong", "{\"\xc0\xaf\":{}}", 0, 0, "invalid UTF-8", "\xc0"},
    {"encoded surrogate", "{\"\xed\xa0\x80\":{}}", 0, 0, "invalid UTF-8",
     "\xed"},
    {"control byte", "{\"a\tb\":{}}", 0, 0, "control byte 0x09", "\t"},
    {"bad escape", "{\"a\\qb\":{}}", 0, 0, "bad escape '\\q'", "b\""},
    {"lone high surrogate", "{\"\\ud800x\":{}}", 0, 0, "lone high surrogate",
     "x\""},
    {"lone low surrogate", "{\"\\udc00\":{}}", 0, 0, "lone low surrogate",
     "\":"},
    {"NUL escape", "{\"a\\u0000\":{}}", 0, 0, "NUL", "\":"},
    {"unterminated", "{\"abc", 0, 0, "unterminated string", NULL, 8 + 5},
    {"float", T("[2.0]," X8), 8, 0, "not a number with '.'", ".0]", 0, "x"},
    {"exponent", T("[2e0]," X8), 8, 0, "not a number with 'e'", "e0]", 0, "x"},
    {"negative", T("[-2]," X8), 8, 0, "non-negative integer", "-2", 0, "x"},
    {"leading zero", T("[02]," X8), 8, 0, "leading zero", "02", 0, "x"},
    {"overflow", T("[18446744073709551616]," X8), 8, 0, "overflows 64 bits",
     "6]", 0, "x"},
    {"unknown key", "{\"x\":{\"dtipe\":\"F32\"}}", 0, 0,
     "unknown or repeated key \"dtipe\"", "\"dtipe", 0, "x"},
    {"repeated key", "{\"x\":{\"dtype\":\"F32\",\"dtype\":\"F32\"}}", 0, 0,
     "unknown or repeated key \"dtype\"", "\"dtype\":\"F32\"}", 0, "x"},
    {"missing key", T("[2]"), 0, 0, "tensor lacks data_offsets", "\"x\"", 0,
     "x"},
    {"unknown dtype", "{\"x\":{\"dtype\":\"F33\"}}", 0, 0,
     "unknown dtype \"F33\"", "\"F33", 0, "x"},
    {"size mismatch", T("[3]," X8), 8, 0,
     "shape × 4 bytes = 12, data_offsets [0, 8] span 8", "\"x\"", 0, "x"},
    {"shape overflow", T("[4294967296,4294967296]," X8), 8, 0,
     "shape x 4 bytes is more than 2^63-1 bytes", "\"x\"", 0, "x"},
    {"shape of 2^63 bytes", T("[2305843009213693952]," X8), 8, 0,
     "shape x 4 bytes is more than 2^63-1 bytes", "\"x\"", 0, "x"},
    {"begin > end", T("[2],\"data_offsets\":[8,0]"), 8, 0, "begin 8 > end 0",
     "}}", 0, "x"},
    {"end beyond data", T("[2]," X8), 4, 0, "end 8 beyond the data (4", "\"x\"",
     0, "x"},
    {"duplicate name",
     "{\"x\":{\"dtype\":\"F32\",\"shape\":[2]," X8 "},"
     "\"x\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]}}",
     8, 0, "duplicate tensor name", "\"x\":{\"dtype\":\"F32\",\"shape\":[0]", 0,
     "x"},
    {"duplicate metadata key",
     "{\"__metadata__\":{\"a\":\"1\",\"b\":\"2\","
     "\"a\":\"3\"}}",
     0, 0, "duplicate __metadata__ key \"a\"", "\"a\":\"3"},
    {"two __metadata__", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, 0,
     "duplicate __metadata__", "{}}"},
    {"metadata number", "{\"__metadata__\":{\"a\":1}}", 0, 0,
     "__metadata__ values must be strings", "1}"},
    {"metadata object", "{\"__metadata__\":{\"a\":{}}}", 0, 0,
     "__metadata__ values must be strings", "{}}"},
    {"hole", T("[2],\"data_offsets\":[4,12]"), 12, 0,
     "starts at 4, expected 0 (hole)", "\"x\"", 0, "x"},
    {"overlap",
     "{\"x\":{\"dtype\":\"F32\",\"shape\":[2]," X8 "},\"y\":{"
     "\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
     8, 0, "starts at 4, expected 8 (overlap)", "\"y\"", 0, "y"},
    {"trailing data", T("[2]," X8), 8, 1,
     "file holds 71 bytes, header describes 70", NULL, 8 + 54},
    {"trailing bytes", "{} x", 0, 0, "trailing bytes", "x"},
    {"trailing newline", "{}\n", 0, 0, "trailing bytes", "\n"},
#undef T
#undef X8
};

static void each_violation_is_refused_with_reason_and_offset(void **state)
{
	int bad = 0;

	for (size_t i = 0; i < sizeof(bads) / sizeof(bads[0]); i++) {
		const struct bad *b = &bads[i];
		struct bfs_st_header *h = NULL;
		struct bfs_st_error e = {0};
		size_t size;
		unsigned char *f =
		    file_of(b->json, 0, b->data + b->extra, &size);
		uint64_t off =
		    b->at ? 8 + (uint64_t)(strstr(b->json, b->at) - b->json)
			  : b->off;
		int rc = bfs_st_parse(f, size, size, 0, &h, &e);

		if (rc != -EBADMSG || !strstr(e.reason, b->why) ||
		    e.offset != off ||
		    strcmp(e.tensor, b->tensor ? b->tensor : "") != 0)
			print_error(
			    "%s: rc %d, offset %llu (want %llu), tensor "
			    "'%s', reason '%s' (want '%s')",
			    b->label, rc, (unsigned long long)e.offset,
			    (unsigned long long)off, e.tensor, e.reason,
			    b->why),
			    bad++;
		assert_null(h);
		free(f);
	}
	assert_int_equal(bad, 0);
}

static void header_length_must_fit_the_file_and_the_100mb_limit(void **state)
{
	unsigned char b[8] = {0};
	struct bfs_st_error e = {0};
	uint64_t n = 1;
	size_t size;
	unsigned char *f = file_of("{}", 0, 0, &size);

	assert_int_equal(bfs_st_header_len(b, 7, &n, &e), -EBADMSG);
	assert_non_null(strstr(e.reason, "file of 7 bytes has no header"));
	assert_int_equal(e.offset, 0);
	b[0] = 1; /* N = 1 < 2 */
	assert_int_equal(bfs_st_header_len(b, 100, &n, &e), -EBADMSG);
	assert_non_null(strstr(e.reason, "header length 1 invalid"));
	b[0] = 0x01, b[1] = 0xe1, b[2] = 0xf5, b[3] = 0x05; /* 100000001 */
	assert_int_equal(bfs_st_header_len(b, 200000000, &n, &e), -EBADMSG);
	assert_non_null(strstr(e.reason, "a header of 100000001 bytes exceeds "
					 "the limit of 100000000 bytes"));
	b[0] = 0x00; /* 100000000: the limit itself is allowed */
	assert_int_equal(bfs_st_header_len(b, 200000000, &n, &e), 0);
	assert_int_equal(n, 100000000);
	assert_int_equal(bfs_st_header_len(b, 100000007, &n, &e), -EBADMSG);
	/* a buffer shorter than 8 + N is refused, not overread */
	struct bfs_st_header *h = NULL;
	assert_int_equal(bfs_st_parse(f, size - 1, size, 0, &h, &e), -EBADMSG);
	assert_non_null(strstr(e.reason, "only 9 bytes given"));
	assert_int_equal(bfs_st_parse(f, size, size, 0, &h, &e), 0);
	assert_int_equal(h->ntensors, 0);
	bfs_st_free(h);
	bfs_st_free(NULL);
	free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(a_batch_written_by_fs_layout_parses_back),
	    cmocka_unit_test(an_empty_batch_from_bfs_layout_fill_parses_back),
	    cmocka_unit_test(escapes_utf8_scalars_and_empty_tensors_are_valid),
	    cmocka_unit_test(unknown_dtypes_pass_only_with_bfs_st_any_dtype),
	    cmocka_unit_test(every_safetensors_code_of_fs_dtype_has_its_size),
	    cmocka_unit_test(each_violation_is_refused_with_reason_and_offset),
	    cmocka_unit_test(
		header_length_must_fit_the_file_and_the_100mb_limit),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
