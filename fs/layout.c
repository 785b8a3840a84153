/* fs/layout: batch file bytes as a pure function of (fields, e, k, rows,
 * indices). See layout.h and DESIGN.md §2.
 *
 * Header JSON, exactly (keys in file order, no spaces but after ':' and ','
 * nowhere — compact), e.g.
 *   {"__metadata__":{"format":"batchfs/1","epoch":"0","batch":"3"},
 *    "images":{"dtype":"U8","shape":[256,3,32,32],"data_offsets":[0,786432]},
 *    ...}
 * then spaces up to the data offset. safetensors allows trailing 0x20
 * padding (research/torch-format.md §4.1); leading padding is not allowed,
 * so the JSON starts right after the length.
 *
 * dtypes: safetensors has no complex128 and no complex32 code, so a dataset
 * with such a field is refused at mount time (bfs_layout_init) rather than
 * served with a made-up code. complex64 is "C64" (safetensors >= 0.7).
 *
 * Invariants: fields are sorted by (element size desc, name asc, strcmp);
 * data_offsets tile [0, rows * row_bytes) with no holes. Every size a
 * batch of up to rows_max rows can have was proven to fit 2^63 - 1 at init
 * (bound(), with fs/size's checked arithmetic), and its header to be at
 * most BFS_LAYOUT_MAX_HEADER bytes, so the plain arithmetic of the
 * functions below cannot wrap. */
#include "fs/layout.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/safetensors.h"
#include "fs/size.h"

void bfs_layout_append(char *buf, size_t len, size_t *pos, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	if (*pos < len)
		n = vsnprintf(buf + *pos, len - *pos, fmt, ap);
	else
		n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n > 0)
		*pos += (size_t)n;
}

static void put_char(char *buf, size_t len, size_t *pos, char c)
{
	if (*pos + 1 < len) {
		buf[*pos] = c;
		buf[*pos + 1] = '\0';
	}
	(*pos)++;
}

void bfs_layout_json_str(char *buf, size_t len, size_t *pos, const char *s)
{
	put_char(buf, len, pos, '"');
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\') {
			put_char(buf, len, pos, '\\');
			put_char(buf, len, pos, (char)*p);
		} else if (*p < 0x20 || *p == 0x7f) {
			bfs_layout_append(buf, len, pos, "\\u%04x", *p);
		} else {
			put_char(buf, len, pos, (char)*p);
		}
	}
	put_char(buf, len, pos, '"');
}

static int field_cmp(const void *a, const void *b)
{
	const struct bfs_layout_field *x = a, *y = b;
	size_t sx = bfs_dtype_info(x->f->dtype)->size;
	size_t sy = bfs_dtype_info(y->f->dtype)->size;

	if (sx != sy)
		return sx > sy ? -1 : 1;
	return strcmp(x->f->name, y->f->name);
}

const struct bfs_layout_field *bfs_layout_largest(const struct bfs_layout *l)
{
	const struct bfs_layout_field *big = NULL;

	for (size_t i = 0; i < l->nfields; i++)
		if (!big || l->fields[i].f->row_bytes > big->f->row_bytes)
			big = &l->fields[i];
	return big;
}

/* Data offset for a JSON header of 'json' bytes: 8 + json, rounded up. */
static uint64_t align_data(size_t json)
{
	uint64_t n = 8 + (uint64_t)json;

	return (n + BFS_LAYOUT_ALIGN - 1) / BFS_LAYOUT_ALIGN * BFS_LAYOUT_ALIGN;
}

/* The header shape [rows_max, *shape] of field f must be one a
 * safetensors reader accepts (fs/safetensors' running-product rule; it
 * then holds for fewer rows too). */
static int header_shape_ok(const struct bfs_layout *l,
			   const struct bfs_field *f, struct bfs_error *err)
{
	uint64_t dims[BFS_MAX_DIMS + 1], bytes;
	int64_t shown[BFS_MAX_DIMS + 1];
	size_t es = bfs_dtype_info(f->dtype)->size;
	char text[160];

	dims[0] = l->rows_max;
	for (int d = 0; d < f->ndim; d++)
		dims[d + 1] = (uint64_t)f->shape[d];
	if (!bfs_st_shape_bytes(dims, (uint32_t)f->ndim + 1, (uint32_t)es,
				&bytes))
		return 0;
	for (int d = 0; d <= f->ndim; d++)
		shown[d] = (int64_t)dims[d];
	return bfs_error_set(
	    err, -EFBIG, l->source, BFS_NO_OFFSET,
	    "field '%s': a batch of shape %s x %zu bytes overflows 2^63-1 "
	    "in its running product (a zero size comes too late): "
	    "safetensors readers refuse such a header",
	    f->name, bfs_size_shape_str(text, sizeof(text), shown, f->ndim + 1),
	    es);
}

/* Prove that batches of up to l->rows_max rows have sizes that fit (see
 * bfs_layout_init_fields). The JSON is longest for the most digits: the
 * largest rows and epoch and batch numbers of 20 digits. */
static int bound(struct bfs_layout *l, struct bfs_error *err)
{
	const struct bfs_layout_field *big = bfs_layout_largest(l);
	uint64_t data, json;
	int rc;

	for (size_t i = 0; i < l->nfields; i++)
		if (bfs_size_add(l->row_bytes, l->fields[i].f->row_bytes,
				 &l->row_bytes))
			return bfs_error_set(
			    err, -EFBIG, l->source, BFS_NO_OFFSET,
			    "the fields' bytes per sample add up to more "
			    "than 2^63-1 (at field '%s')",
			    l->fields[i].f->name);
	if (bfs_size_mul(l->rows_max, l->row_bytes, &data))
		return bfs_error_set(
		    err, -EFBIG, l->source, BFS_NO_OFFSET,
		    "a batch of %" PRIu64 " samples of %" PRIu64 " bytes "
		    "(field '%s': %" PRIu64 ") is more than 2^63-1 bytes",
		    l->rows_max, l->row_bytes, big->f->name, big->f->row_bytes);
	for (size_t i = 0; i < l->nfields; i++) {
		rc = header_shape_ok(l, l->fields[i].f, err);
		if (rc)
			return rc;
	}
	json = bfs_layout_json(l, UINT64_MAX, UINT64_MAX, l->rows_max, NULL, 0);
	if (json + 8 > BFS_LAYOUT_MAX_HEADER)
		return bfs_error_set(
		    err, -EFBIG, l->source, BFS_NO_OFFSET,
		    "a batch file header would take %" PRIu64 " bytes for "
		    "%zu fields: more than the %u bytes batchfs allows",
		    json + 8, l->nfields, BFS_LAYOUT_MAX_HEADER);
	if (bfs_size_add(align_data((size_t)json), data, &l->max_file_size))
		return bfs_error_set(err, -EFBIG, l->source, BFS_NO_OFFSET,
				     "a batch file of %" PRIu64
				     " samples is more than 2^63-1 bytes",
				     l->rows_max);
	return 0;
}

int bfs_layout_init_fields(struct bfs_layout *l,
			   const struct bfs_field *const *fields, size_t n,
			   uint64_t rows_max, const char *source,
			   struct bfs_error *err)
{
	int rc = 0;

	memset(l, 0, sizeof(*l));
	l->rows_max = rows_max;
	l->source = source ? source : "(dataset)";
	l->fields = calloc(n ? n : 1, sizeof(*l->fields));
	if (!l->fields)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const struct bfs_dtype_info *d =
		    bfs_dtype_info(fields[i]->dtype);

		if (fields[i]->ragged) {
			rc = bfs_error_set(err, -ENOTSUP, l->source,
					   BFS_NO_OFFSET,
					   "field '%s' is ragged: not served "
					   "yet",
					   fields[i]->name);
			goto err_free;
		}
		if (!d || !d->st_name) {
			rc = bfs_error_set(
			    err, -ENOTSUP, l->source, BFS_NO_OFFSET,
			    "field '%s' is %s, which has no safetensors "
			    "dtype code: batchfs cannot serve it (convert "
			    "it, e.g. complex128 -> complex64 or a real view)",
			    fields[i]->name, d ? d->torch_name : "invalid");
			goto err_free;
		}
		l->fields[i].f = fields[i];
		l->fields[i].ds_index = i;
		l->fields[i].st_dtype = d->st_name;
	}
	l->nfields = n;
	qsort(l->fields, n, sizeof(*l->fields), field_cmp);
	rc = bound(l, err);
	if (rc)
		goto err_free;
	return 0;
err_free:
	bfs_layout_fini(l);
	return rc;
}

int bfs_layout_init(struct bfs_layout *l, const struct bfs_dataset *ds,
		    uint64_t rows_max, struct bfs_error *err)
{
	size_t n = bfs_dataset_nfields(ds);
	const struct bfs_field **f = calloc(n ? n : 1, sizeof(*f));
	struct bfs_shard_info sh = {0};
	int rc;

	if (!f)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		f[i] = bfs_dataset_field(ds, i);
	if (bfs_dataset_nshards(ds))
		bfs_dataset_shard(ds, 0, &sh);
	rc = bfs_layout_init_fields(l, f, n, rows_max, sh.path, err);
	free(f);
	return rc;
}

void bfs_layout_fini(struct bfs_layout *l)
{
	if (!l)
		return;
	free(l->fields);
	memset(l, 0, sizeof(*l));
}

size_t bfs_layout_json(const struct bfs_layout *l, uint64_t e, uint64_t k,
		       uint64_t rows, char *buf, size_t len)
{
	size_t pos = 0;
	uint64_t off = 0;

	if (len)
		buf[0] = '\0';
	bfs_layout_append(buf, len, &pos,
			  "{\"__metadata__\":{\"format\":\"batchfs/1\","
			  "\"epoch\":\"%llu\",\"batch\":\"%llu\"}",
			  (unsigned long long)e, (unsigned long long)k);
	for (size_t i = 0; i < l->nfields; i++) {
		const struct bfs_layout_field *lf = &l->fields[i];
		uint64_t bytes = rows * lf->f->row_bytes;

		put_char(buf, len, &pos, ',');
		bfs_layout_json_str(buf, len, &pos, lf->f->name);
		bfs_layout_append(buf, len, &pos,
				  ":{\"dtype\":\"%s\",\"shape\":[%llu",
				  lf->st_dtype, (unsigned long long)rows);
		for (int d = 0; d < lf->f->ndim; d++)
			bfs_layout_append(buf, len, &pos, ",%lld",
					  (long long)lf->f->shape[d]);
		bfs_layout_append(
		    buf, len, &pos, "],\"data_offsets\":[%llu,%llu]}",
		    (unsigned long long)off, (unsigned long long)(off + bytes));
		off += bytes;
	}
	put_char(buf, len, &pos, '}'); /* bfs_layout_header relies on it */
	return pos;
}

uint64_t bfs_layout_data_offset(const struct bfs_layout *l, uint64_t e,
				uint64_t k, uint64_t rows)
{
	return align_data(bfs_layout_json(l, e, k, rows, NULL, 0));
}

uint64_t bfs_layout_file_size(const struct bfs_layout *l, uint64_t e,
			      uint64_t k, uint64_t rows)
{
	assert(rows <= l->rows_max); /* a caller's bug: sizes unproven */
	return bfs_layout_data_offset(l, e, k, rows) + rows * l->row_bytes;
}

uint64_t bfs_layout_header(const struct bfs_layout *l, uint64_t e, uint64_t k,
			   uint64_t rows, void *dst)
{
	unsigned char *p = dst;
	size_t json = bfs_layout_json(l, e, k, rows, NULL, 0);
	uint64_t data = align_data(json), n = data - 8;

	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(n >> (8 * i));
	/* Render all but the closing '}' (the NUL takes its place), then
	 * the '}': nothing lands past the header, which may end the file. */
	bfs_layout_json(l, e, k, rows, (char *)p + 8, json);
	p[8 + json - 1] = '}';
	memset(p + 8 + json, ' ', n - json);
	return data;
}

int bfs_layout_fill(const struct bfs_layout *l, const struct bfs_dataset *ds,
		    uint64_t e, uint64_t k, const uint64_t *idx, uint64_t rows,
		    void *dst)
{
	unsigned char *p = dst;
	int rc = 0;

	p += bfs_layout_header(l, e, k, rows, p);
	for (size_t i = 0; i < l->nfields && rc == 0; i++) {
		const struct bfs_layout_field *lf = &l->fields[i];

		if (lf->f->row_bytes && rows)
			rc = bfs_dataset_gather(ds, lf->ds_index, idx,
						(size_t)rows, p);
		p += rows * lf->f->row_bytes;
	}
	return rc;
}
