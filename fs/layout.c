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
 * data_offsets tile [0, rows * row_bytes) with no holes. */
#include "fs/layout.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int bfs_layout_init_fields(struct bfs_layout *l,
			   const struct bfs_field *const *fields, size_t n,
			   struct bfs_error *err)
{
	int rc = 0;

	memset(l, 0, sizeof(*l));
	l->fields = calloc(n ? n : 1, sizeof(*l->fields));
	if (!l->fields)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const struct bfs_dtype_info *d =
		    bfs_dtype_info(fields[i]->dtype);

		if (!d || !d->st_name) {
			rc = bfs_error_set(
			    err, -ENOTSUP, fields[i]->name, BFS_NO_OFFSET,
			    "field dtype %s has no safetensors code; "
			    "batchfs cannot serve it (convert it, e.g. "
			    "complex128 -> complex64 or a real view)",
			    d ? d->torch_name : "invalid");
			goto err_free;
		}
		l->fields[i].f = fields[i];
		l->fields[i].ds_index = i;
		l->fields[i].st_dtype = d->st_name;
		l->row_bytes += fields[i]->row_bytes;
	}
	l->nfields = n;
	qsort(l->fields, n, sizeof(*l->fields), field_cmp);
	return 0;
err_free:
	bfs_layout_fini(l);
	return rc;
}

int bfs_layout_init(struct bfs_layout *l, const struct bfs_dataset *ds,
		    struct bfs_error *err)
{
	size_t n = bfs_dataset_nfields(ds);
	const struct bfs_field **f = calloc(n ? n : 1, sizeof(*f));
	int rc;

	if (!f)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		f[i] = bfs_dataset_field(ds, i);
	rc = bfs_layout_init_fields(l, f, n, err);
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

/* Data offset for a JSON header of 'json' bytes: 8 + json, rounded up. */
static uint64_t align_data(size_t json)
{
	uint64_t n = 8 + (uint64_t)json;

	return (n + BFS_LAYOUT_ALIGN - 1) / BFS_LAYOUT_ALIGN * BFS_LAYOUT_ALIGN;
}

uint64_t bfs_layout_data_offset(const struct bfs_layout *l, uint64_t e,
				uint64_t k, uint64_t rows)
{
	return align_data(bfs_layout_json(l, e, k, rows, NULL, 0));
}

uint64_t bfs_layout_file_size(const struct bfs_layout *l, uint64_t e,
			      uint64_t k, uint64_t rows)
{
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
