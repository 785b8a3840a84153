/* fs/layout: batch file bytes as a pure function of (fields, the batch's
 * epoch and batch numbers, its geometry, indices). See layout.h and
 * fs/README.md (the batch file, ragged fields).
 *
 * Header JSON, exactly (keys in file order, no spaces but after ':' and ','
 * nowhere — compact), e.g.
 *   {"__metadata__":{"format":"batchfs/1","epoch":"0","batch":"3"},
 *    "images":{"dtype":"U8","shape":[256,3,32,32],"data_offsets":[0,786432]},
 *    ...}
 * then spaces up to the data offset. safetensors allows trailing 0x20
 * padding (fs/README.md: the batch file); leading padding is not allowed,
 * so the JSON starts right after the length. The data offset is the one
 * of the same JSON with 20-digit epoch and batch numbers (render() with
 * UINT64_MAX), so the numbers never move the data: a layout without
 * ragged fields has one size per row count (fs/stream relies on it). The
 * epoch written is the batch id's, the rank's own epoch: nothing of its
 * lane or position reaches a file.
 *
 * dtypes: safetensors has no complex128 and no complex32 code, so a dataset
 * with such a field is refused at mount time (bfs_layout_init) rather than
 * served with a made-up code. complex64 is "C64" (safetensors >= 0.7).
 *
 * Ragged fields (fs/ragged.h) add a tensor each (NAME.lengths or
 * NAME.offsets) and take their leading dims from the batch's extents: the
 * longest sample rounded up to MULTIPLE (pad) or the sum of the lengths
 * (pack), both measured from the offsets, O(rows). A sample is at most
 * the field's max_len rows (checked at open, and again for every span
 * read: fs/gather.c), so an extent is at most max_len rounded up (pad) or
 * rows_max x max_len (pack): bound() proves the batch of those extents
 * fits, and every real batch is no larger.
 *
 * Invariants: tensors are sorted by (element size desc, name asc, strcmp)
 * and their names are unique; data_offsets tile the data with no holes.
 * Every size a batch of up to rows_max rows can have was proven to fit
 * 2^63 - 1 at init (bound(), with fs/size's checked arithmetic), and its
 * header to be at most BFS_LAYOUT_MAX_HEADER bytes, so the plain
 * arithmetic of the functions below cannot wrap. */
#include "fs/layout.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <limits.h>

#include "fs/log.h"
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
	size_t sx = bfs_dtype_info(x->dtype)->size;
	size_t sy = bfs_dtype_info(y->dtype)->size;

	if (sx != sy)
		return sx > sy ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* Whether a tensor in 'role' holds rows of its field (not lengths or
 * offsets). */
static bool role_rows(enum bfs_layout_role role)
{
	return role != BFS_LAYOUT_LENGTHS && role != BFS_LAYOUT_OFFSETS;
}

static bool holds_rows(const struct bfs_layout_field *lf)
{
	return role_rows(lf->role);
}

const struct bfs_layout_field *bfs_layout_largest(const struct bfs_layout *l)
{
	const struct bfs_layout_field *big = NULL;

	for (size_t i = 0; i < l->nfields; i++)
		if (holds_rows(&l->fields[i]) &&
		    (!big || l->fields[i].f->row_bytes > big->f->row_bytes))
			big = &l->fields[i];
	return big;
}

/* Data offset for a JSON header of 'json' bytes: 8 + json, rounded up. */
static uint64_t align_data(size_t json)
{
	uint64_t n = 8 + (uint64_t)json;

	return (n + BFS_LAYOUT_ALIGN - 1) / BFS_LAYOUT_ALIGN * BFS_LAYOUT_ALIGN;
}

/* Entry lf's leading dims for geometry d, into lead[]; returns how many.
 * The field's per-row shape follows them when holds_rows(lf). */
static int lead_dims(const struct bfs_layout_field *lf,
		     const struct bfs_layout_dims *d, uint64_t lead[2])
{
	lead[0] = d->rows;
	switch (lf->role) {
	case BFS_LAYOUT_PADDED:
		lead[1] = d->ext[lf->slot];
		return 2;
	case BFS_LAYOUT_PACKED:
		lead[0] = d->ext[lf->slot];
		return 1;
	case BFS_LAYOUT_OFFSETS:
		lead[0] = d->rows + 1;
		return 1;
	default:
		return 1;
	}
}

/* Bytes per unit of the leading dims. */
static uint64_t unit_bytes(const struct bfs_layout_field *lf)
{
	return holds_rows(lf) ? lf->f->row_bytes : 8;
}

/* Entry lf's bytes for geometry d (proven to fit: plain arithmetic). */
static uint64_t entry_bytes(const struct bfs_layout_field *lf,
			    const struct bfs_layout_dims *d)
{
	uint64_t lead[2], n = unit_bytes(lf);
	int nl = lead_dims(lf, d, lead);

	for (int i = 0; i < nl; i++)
		n *= lead[i];
	return n;
}

/* The same with checked arithmetic: 0 or -EOVERFLOW. */
static int entry_bytes_checked(const struct bfs_layout_field *lf,
			       const struct bfs_layout_dims *d, uint64_t *out)
{
	uint64_t lead[2];
	int nl = lead_dims(lf, d, lead);

	*out = unit_bytes(lf);
	for (int i = 0; i < nl; i++)
		if (bfs_size_mul(*out, lead[i], out))
			return -EOVERFLOW;
	return 0;
}

/* The JSON of geometry d with the numbers e and k as they are (the
 * length snprintf would give). */
static size_t render(const struct bfs_layout *l, uint64_t e, uint64_t k,
		     const struct bfs_layout_dims *d, char *buf, size_t len)
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
		uint64_t bytes = entry_bytes(lf, d), lead[2];
		int nl = lead_dims(lf, d, lead);

		put_char(buf, len, &pos, ',');
		bfs_layout_json_str(buf, len, &pos, lf->name);
		bfs_layout_append(buf, len, &pos,
				  ":{\"dtype\":\"%s\",\"shape\":[%llu",
				  lf->st_dtype, (unsigned long long)lead[0]);
		if (nl > 1)
			bfs_layout_append(buf, len, &pos, ",%llu",
					  (unsigned long long)lead[1]);
		for (int dd = 0; holds_rows(lf) && dd < lf->f->ndim; dd++)
			bfs_layout_append(buf, len, &pos, ",%lld",
					  (long long)lf->f->shape[dd]);
		bfs_layout_append(
		    buf, len, &pos, "],\"data_offsets\":[%llu,%llu]}",
		    (unsigned long long)off, (unsigned long long)(off + bytes));
		off += bytes;
	}
	put_char(buf, len, &pos, '}'); /* bfs_layout_header relies on it */
	return pos;
}

/* The header shape of entry lf at geometry d must be one a safetensors
 * reader accepts (fs/safetensors' running-product rule; it then holds for
 * smaller batches too). */
static int header_shape_ok(const struct bfs_layout *l,
			   const struct bfs_layout_field *lf,
			   const struct bfs_layout_dims *d,
			   struct bfs_error *err)
{
	uint64_t dims[BFS_MAX_DIMS + 2], bytes;
	int64_t shown[BFS_MAX_DIMS + 2];
	size_t es = bfs_dtype_info(lf->dtype)->size;
	int nl = lead_dims(lf, d, dims), nd = nl;
	char text[160];

	for (int i = 0; holds_rows(lf) && i < lf->f->ndim; i++)
		dims[nd++] = (uint64_t)lf->f->shape[i];
	if (!bfs_st_shape_bytes(dims, (uint32_t)nd, (uint32_t)es, &bytes))
		return 0;
	for (int i = 0; i < nd; i++)
		shown[i] = (int64_t)dims[i];
	return bfs_error_set(
	    err, -EFBIG, l->source, BFS_NO_OFFSET,
	    "field '%s': a batch of shape %s x %zu bytes overflows 2^63-1 "
	    "in its running product (a zero size comes too late): "
	    "safetensors readers refuse such a header",
	    lf->name, bfs_size_shape_str(text, sizeof(text), shown, nd), es);
}

/* The largest extent of ragged field r in a batch of rows_max rows. */
static int ragged_max(const struct bfs_layout *l, struct bfs_layout_ragged *r,
		      struct bfs_error *err)
{
	uint64_t len = r->f->max_len, m = r->multiple;
	int rc;

	if (r->mode == BFS_RAGGED_PACK)
		rc = bfs_size_mul(l->rows_max, len, &r->ext_max);
	else
		rc = bfs_size_add(len, len % m ? m - len % m : 0, &r->ext_max);
	if (!rc)
		return 0;
	return bfs_error_set(err, -EFBIG, l->source, BFS_NO_OFFSET,
			     "ragged field '%s': %" PRIu64
			     " samples of %" PRIu64
			     " rows make more than 2^63-1 rows",
			     r->f->name, l->rows_max, len);
}

/* Prove that batches of up to l->rows_max rows have sizes that fit (see
 * bfs_layout_init_fields). The JSON is longest for the most digits: the
 * largest rows and extents, epoch and batch numbers of 20 digits. */
static int bound(struct bfs_layout *l, struct bfs_error *err)
{
	const struct bfs_layout_field *big = bfs_layout_largest(l);
	struct bfs_layout_dims d = {.rows = l->rows_max};
	uint64_t data = 0, bytes, json;
	int rc;

	for (size_t i = 0; i < l->nfields; i++)
		if (l->fields[i].role == BFS_LAYOUT_ROWS &&
		    bfs_size_add(l->row_bytes, l->fields[i].f->row_bytes,
				 &l->row_bytes))
			return bfs_error_set(
			    err, -EFBIG, l->source, BFS_NO_OFFSET,
			    "the fields' bytes per sample add up to more "
			    "than 2^63-1 (at field '%s')",
			    l->fields[i].f->name);
	for (size_t r = 0; r < l->nragged; r++) {
		rc = ragged_max(l, &l->ragged[r], err);
		if (rc)
			return rc;
		d.ext[r] = l->ragged[r].ext_max;
	}
	for (size_t i = 0; i < l->nfields; i++)
		if (entry_bytes_checked(&l->fields[i], &d, &bytes) ||
		    bfs_size_add(data, bytes, &data))
			return bfs_error_set(
			    err, -EFBIG, l->source, BFS_NO_OFFSET,
			    "a batch of %" PRIu64 " samples of %" PRIu64
			    " bytes (field '%s': %" PRIu64 ") is more than "
			    "2^63-1 bytes",
			    l->rows_max, l->row_bytes, l->fields[i].name,
			    big ? big->f->row_bytes : 0);
	for (size_t i = 0; i < l->nfields; i++) {
		rc = header_shape_ok(l, &l->fields[i], &d, err);
		if (rc)
			return rc;
	}
	json = render(l, UINT64_MAX, UINT64_MAX, &d, NULL, 0);
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

/* Entry i: dataset field f (index ds_index), served in 'role'. */
static int add_entry(struct bfs_layout *l, const struct bfs_field *f,
		     size_t ds_index, enum bfs_layout_role role, size_t slot,
		     const char *name, struct bfs_error *err)
{
	struct bfs_layout_field *lf = &l->fields[l->nfields];
	enum bfs_dtype dt = role_rows(role) ? f->dtype : BFS_DT_INT64;
	const struct bfs_dtype_info *d = bfs_dtype_info(dt);

	if (!d || !d->st_name)
		return bfs_error_set(
		    err, -ENOTSUP, l->source, BFS_NO_OFFSET,
		    "field '%s' is %s, which has no safetensors "
		    "dtype code: batchfs cannot serve it (convert "
		    "it, e.g. complex128 -> complex64 or a real view)",
		    f->name, d ? d->torch_name : "invalid");
	lf->f = f;
	lf->ds_index = ds_index;
	lf->st_dtype = d->st_name;
	lf->name = name;
	lf->dtype = dt;
	lf->role = role;
	lf->slot = slot;
	l->nfields++;
	return 0;
}

static int by_name_ptr(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Sort the entries into file order; their names must be unique. */
static int order_entries(struct bfs_layout *l, struct bfs_error *err)
{
	const char **names =
	    malloc((l->nfields ? l->nfields : 1) * sizeof(*names));
	int rc = 0;

	if (!names)
		return -ENOMEM;
	qsort(l->fields, l->nfields, sizeof(*l->fields), field_cmp);
	for (size_t i = 0; i < l->nfields; i++)
		names[i] = l->fields[i].name;
	qsort(names, l->nfields, sizeof(*names), by_name_ptr);
	for (size_t i = 1; i < l->nfields && !rc; i++)
		if (!strcmp(names[i - 1], names[i]))
			rc = bfs_error_set(
			    err, -EINVAL, l->source, BFS_NO_OFFSET,
			    "the batch file would have two tensors named "
			    "'%s' (a ragged field adds NAME.lengths or "
			    "NAME.offsets): rename the field",
			    names[i]);
	free(names);
	return rc;
}

/* The end of both inits: file order and the proof, or the cleanup. */
static int finish_init(struct bfs_layout *l, int rc, struct bfs_error *err)
{
	if (!rc)
		rc = order_entries(l, err);
	if (!rc)
		rc = bound(l, err);
	if (rc)
		bfs_layout_fini(l);
	return rc;
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
	for (size_t i = 0; i < n && !rc; i++)
		rc =
		    fields[i]->ragged
			? bfs_error_set(err, -ENOTSUP, l->source, BFS_NO_OFFSET,
					"field '%s' is ragged: it needs "
					"bfs_layout_init_ragged",
					fields[i]->name)
			: add_entry(l, fields[i], i, BFS_LAYOUT_ROWS, 0,
				    fields[i]->name, err);
	return finish_init(l, rc, err);
}

/* The option for ragged field f among opts (NULL: none). Options naming
 * no ragged field, or one field twice, are refused. */
static int find_opts(const struct bfs_layout *l, const struct bfs_dataset *ds,
		     const struct bfs_ragged_opt *opts, size_t nopts,
		     struct bfs_error *err)
{
	for (size_t i = 0; i < nopts; i++) {
		const struct bfs_field *f = NULL;

		for (size_t k = 0; k < bfs_dataset_nfields(ds) && !f; k++)
			if (!strcmp(bfs_dataset_field(ds, k)->name,
				    opts[i].name))
				f = bfs_dataset_field(ds, k);
		if (!f || !f->ragged)
			return bfs_error_set(
			    err, -EINVAL, l->source, BFS_NO_OFFSET,
			    "--%s %s: the dataset has no ragged field '%s' "
			    "(a pair '%s.values' + '%s.offsets')",
			    opts[i].mode == BFS_RAGGED_PAD ? "pad" : "pack",
			    opts[i].name, opts[i].name, opts[i].name,
			    opts[i].name);
		for (size_t j = 0; j < i; j++)
			if (!strcmp(opts[j].name, opts[i].name))
				return bfs_error_set(
				    err, -EINVAL, l->source, BFS_NO_OFFSET,
				    "ragged field '%s' is named by two "
				    "--pad/--pack options",
				    opts[i].name);
	}
	return 0;
}

/* Ragged field f (dataset index i) as its option says. */
static int add_ragged(struct bfs_layout *l, const struct bfs_field *f, size_t i,
		      const struct bfs_ragged_opt *opts, size_t nopts,
		      char **names, struct bfs_error *err)
{
	struct bfs_layout_ragged *r = &l->ragged[l->nragged];
	const struct bfs_ragged_opt *o = NULL;
	char why[160], *extra = *names;
	int rc;

	for (size_t k = 0; k < nopts && !o; k++)
		if (!strcmp(opts[k].name, f->name))
			o = &opts[k];
	r->f = f;
	r->ds_index = i;
	r->mode = o ? o->mode : BFS_RAGGED_PAD;
	r->multiple = o && o->multiple ? o->multiple : 1;
	snprintf(r->value, sizeof(r->value), "%s",
		 o && o->value ? o->value : "0");
	if (bfs_ragged_pad_bytes(f->dtype, o ? o->value : NULL, r->pad, why,
				 sizeof(why)))
		return bfs_error_set(err, -EINVAL, l->source, BFS_NO_OFFSET,
				     "--pad %s: %s", f->name, why);
	rc = add_entry(l, f, i,
		       r->mode == BFS_RAGGED_PAD ? BFS_LAYOUT_PADDED
						 : BFS_LAYOUT_PACKED,
		       l->nragged, f->name, err);
	*names += sprintf(extra, "%s.%s", f->name,
			  r->mode == BFS_RAGGED_PAD ? "lengths" : "offsets") +
		  1;
	if (!rc)
		rc = add_entry(l, f, i,
			       r->mode == BFS_RAGGED_PAD ? BFS_LAYOUT_LENGTHS
							 : BFS_LAYOUT_OFFSETS,
			       l->nragged, extra, err);
	l->nragged++;
	return rc;
}

int bfs_layout_init_ragged(struct bfs_layout *l, const struct bfs_dataset *ds,
			   uint64_t rows_max, const struct bfs_ragged_opt *opts,
			   size_t nopts, struct bfs_error *err)
{
	size_t n = bfs_dataset_nfields(ds), nr = 0, chars = 1;
	struct bfs_shard_info sh = {0};
	char *names;
	int rc = 0;

	memset(l, 0, sizeof(*l));
	if (bfs_dataset_nshards(ds))
		bfs_dataset_shard(ds, 0, &sh);
	l->source = sh.path ? sh.path : "(dataset)";
	l->rows_max = rows_max;
	l->ds = ds;
	for (size_t i = 0; i < n; i++)
		if (bfs_dataset_field(ds, i)->ragged) {
			nr++;
			chars += strlen(bfs_dataset_field(ds, i)->name) + 9;
		}
	if (nr > BFS_LAYOUT_MAX_RAGGED)
		return bfs_error_set(err, -E2BIG, l->source, BFS_NO_OFFSET,
				     "%zu ragged fields: batchfs serves at "
				     "most %d",
				     nr, BFS_LAYOUT_MAX_RAGGED);
	l->fields = calloc(n + nr + 1, sizeof(*l->fields));
	l->ragged = calloc(nr + 1, sizeof(*l->ragged));
	l->names_ = names = calloc(chars, 1);
	if (!l->fields || !l->ragged || !names) {
		bfs_layout_fini(l);
		return -ENOMEM;
	}
	rc = find_opts(l, ds, opts, nopts, err);
	for (size_t i = 0; i < n && !rc; i++) {
		const struct bfs_field *f = bfs_dataset_field(ds, i);

		rc = f->ragged
			 ? add_ragged(l, f, i, opts, nopts, &names, err)
			 : add_entry(l, f, i, BFS_LAYOUT_ROWS, 0, f->name, err);
	}
	return finish_init(l, rc, err);
}

int bfs_layout_init(struct bfs_layout *l, const struct bfs_dataset *ds,
		    uint64_t rows_max, struct bfs_error *err)
{
	return bfs_layout_init_ragged(l, ds, rows_max, NULL, 0, err);
}

void bfs_layout_bind_order(struct bfs_layout *l, const struct bfs_order *o)
{
	l->order = o;
}

void bfs_layout_batch_name(const struct bfs_layout *l, struct bfs_batch_id id,
			   char *buf, size_t len)
{
	if (l->order)
		bfs_order_batch_name(l->order, id, buf, len);
	else
		snprintf(buf, len, "epoch %" PRIu64 " batch %" PRIu64, id.epoch,
			 id.batch);
}

void bfs_layout_fini(struct bfs_layout *l)
{
	if (!l)
		return;
	free(l->fields);
	free(l->ragged);
	free(l->names_);
	memset(l, 0, sizeof(*l));
}

/* ---- one batch -------------------------------------------------------- */

/* The extent of ragged field r over the spans of a batch: the longest
 * rounded up to the multiple (pad), or the sum (pack). Each len is at
 * most max_len (bfs_dataset_spans checks it): within ext_max. */
static uint64_t extent(const struct bfs_layout_ragged *r,
		       const struct bfs_span *sp, uint64_t rows)
{
	uint64_t x = 0;

	for (uint64_t i = 0; i < rows; i++)
		if (r->mode == BFS_RAGGED_PACK)
			x += sp[i].len;
		else if (sp[i].len > x)
			x = sp[i].len;
	if (r->mode == BFS_RAGGED_PAD && x % r->multiple)
		x += r->multiple - x % r->multiple;
	return x;
}

/* Spans of every ragged field of the batch (spans[slot * rows + i]) and
 * its extents into d. 0 or -errno. */
static int read_spans(const struct bfs_layout *l, const struct bfs_dataset *ds,
		      const uint64_t *idx, uint64_t rows, struct bfs_span *sp,
		      size_t nslots, struct bfs_layout_dims *d)
{
	int rc = 0;

	for (size_t r = 0; r < l->nragged && !rc; r++) {
		struct bfs_span *s = sp + (nslots > 1 ? r * rows : 0);

		rc = bfs_dataset_spans(ds, l->ragged[r].ds_index, idx,
				       (size_t)rows, s);
		if (!rc)
			d->ext[r] = extent(&l->ragged[r], s, rows);
	}
	return rc;
}

int bfs_layout_measure(const struct bfs_layout *l, const uint64_t *idx,
		       uint64_t rows, struct bfs_layout_dims *d)
{
	struct bfs_span *sp;
	int rc;

	memset(d, 0, sizeof(*d));
	d->rows = rows;
	if (!l->nragged)
		return 0;
	assert(rows <= l->rows_max); /* a caller's bug: sizes unproven */
	sp = malloc((rows ? rows : 1) * sizeof(*sp));
	if (!sp)
		return -ENOMEM;
	rc = read_spans(l, l->ds, idx, rows, sp, 1, d);
	free(sp);
	return rc;
}

int bfs_layout_batch_dims(const struct bfs_layout *l, struct bfs_order *o,
			  const struct bfs_batch_loc *at,
			  struct bfs_layout_dims *d)
{
	uint64_t rows = at->rows, *idx;
	int rc;

	memset(d, 0, sizeof(*d));
	d->rows = rows;
	if (!l->nragged)
		return 0;
	idx = malloc((rows ? rows : 1) * sizeof(*idx));
	if (!idx)
		return -ENOMEM;
	rc = bfs_order_batch(o, at->id, idx);
	if (!rc)
		rc = bfs_layout_measure(l, idx, rows, d);
	free(idx);
	return rc;
}

int bfs_layout_file_size(const struct bfs_layout *l, struct bfs_order *o,
			 const struct bfs_batch_loc *at, uint64_t *size)
{
	struct bfs_layout_dims d;
	int rc = bfs_layout_batch_dims(l, o, at, &d);

	if (!rc)
		*size = bfs_layout_size_dims(l, &d);
	return rc;
}

size_t bfs_layout_json_dims(const struct bfs_layout *l, struct bfs_batch_id id,
			    const struct bfs_layout_dims *d, char *buf,
			    size_t len)
{
	return render(l, id.epoch, id.batch, d, buf, len);
}

uint64_t bfs_layout_data_offset_dims(const struct bfs_layout *l,
				     const struct bfs_layout_dims *d)
{
	/* the widest numbers stand for every epoch and batch */
	return align_data(render(l, UINT64_MAX, UINT64_MAX, d, NULL, 0));
}

uint64_t bfs_layout_size_dims(const struct bfs_layout *l,
			      const struct bfs_layout_dims *d)
{
	uint64_t n = bfs_layout_data_offset_dims(l, d);

	assert(d->rows <= l->rows_max); /* a caller's bug: sizes unproven */
	for (size_t i = 0; i < l->nfields; i++)
		n += entry_bytes(&l->fields[i], d);
	return n;
}

uint64_t bfs_layout_header_dims(const struct bfs_layout *l,
				struct bfs_batch_id id,
				const struct bfs_layout_dims *d, void *dst)
{
	unsigned char *p = dst;
	size_t json = bfs_layout_json_dims(l, id, d, NULL, 0);
	uint64_t data = bfs_layout_data_offset_dims(l, d), n = data - 8;

	assert(json + 8 <= data); /* no number is wider than 20 digits */

	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(n >> (8 * i));
	/* Render all but the closing '}' (the NUL takes its place), then
	 * the '}': nothing lands past the header, which may end the file. */
	bfs_layout_json_dims(l, id, d, (char *)p + 8, json);
	p[8 + json - 1] = '}';
	memset(p + 8 + json, ' ', n - json);
	return data;
}

static uint8_t *put_le64(uint8_t *p, uint64_t v)
{
	for (int b = 0; b < 8; b++)
		*p++ = (uint8_t)(v >> (8 * b));
	return p;
}

/* NAME.lengths (offsets 0) or NAME.offsets (1) of spans sp into p. */
static void put_counts(uint8_t *p, const struct bfs_span *sp, uint64_t rows,
		       int offsets)
{
	uint64_t at = 0;

	if (offsets)
		p = put_le64(p, 0);
	for (uint64_t i = 0; i < rows; i++) {
		at += sp[i].len;
		p = put_le64(p, offsets ? at : sp[i].len);
	}
}

/* Entry lf of the batch into p. */
static int fill_entry(const struct bfs_layout *l, const struct bfs_dataset *ds,
		      const struct bfs_layout_field *lf, const uint64_t *idx,
		      const struct bfs_layout_dims *d,
		      const struct bfs_span *sp, bfs_layout_rows have,
		      uint8_t *p)
{
	const struct bfs_span *s;

	if (lf->role == BFS_LAYOUT_ROWS && have && have[lf->ds_index]) {
		for (uint64_t i = 0; i < d->rows; i++)
			memcpy(p + i * lf->f->row_bytes, have[lf->ds_index][i],
			       lf->f->row_bytes);
		return 0;
	}
	if (lf->role == BFS_LAYOUT_ROWS)
		return lf->f->row_bytes && d->rows
			   ? bfs_dataset_gather(ds, lf->ds_index, idx,
						(size_t)d->rows, p)
			   : 0;
	s = sp + lf->slot * d->rows;
	switch (lf->role) {
	case BFS_LAYOUT_ROWS:
		break;
	case BFS_LAYOUT_PADDED:
	case BFS_LAYOUT_PACKED:
		return bfs_dataset_gather_spans(
		    ds, lf->ds_index, idx, s, (size_t)d->rows,
		    lf->role == BFS_LAYOUT_PADDED ? d->ext[lf->slot] : 0,
		    l->ragged[lf->slot].pad, p);
	case BFS_LAYOUT_LENGTHS:
	case BFS_LAYOUT_OFFSETS:
		put_counts(p, s, d->rows, lf->role == BFS_LAYOUT_OFFSETS);
		return 0;
	}
	return -EINVAL;
}

int bfs_layout_fill(const struct bfs_layout *l, const struct bfs_dataset *ds,
		    struct bfs_batch_id id, const uint64_t *idx, uint64_t rows,
		    uint64_t size, void *dst)
{
	return bfs_layout_fill_from(l, ds, id, idx, rows, size, NULL, dst);
}

int bfs_layout_fill_from(const struct bfs_layout *l,
			 const struct bfs_dataset *ds, struct bfs_batch_id id,
			 const uint64_t *idx, uint64_t rows, uint64_t size,
			 bfs_layout_rows have, void *dst)
{
	struct bfs_layout_dims d = {.rows = rows};
	struct bfs_span *sp = NULL;
	unsigned char *p = dst;
	uint64_t n;
	int rc = 0;

	assert(rows <= l->rows_max); /* a caller's bug: sizes unproven */
	if (l->nragged) {
		if (bfs_size_mul(rows ? rows : 1, l->nragged * sizeof(*sp), &n))
			return -ENOMEM;
		sp = malloc((size_t)n);
		if (!sp)
			return -ENOMEM;
		rc = read_spans(l, ds, idx, rows, sp, l->nragged, &d);
	}
	if (!rc && bfs_layout_size_dims(l, &d) != size) {
		char name[96];

		bfs_layout_batch_name(l, id, name, sizeof(name));
		bfs_log(BFS_LOG_ERR, "layout",
			"%s: %s now measures %llu bytes, not %llu: its ragged "
			"offsets changed under us",
			l->source, name,
			(unsigned long long)bfs_layout_size_dims(l, &d),
			(unsigned long long)size);
		rc = -EIO;
	}
	if (!rc)
		p += bfs_layout_header_dims(l, id, &d, p);
	for (size_t i = 0; i < l->nfields && rc == 0; i++) {
		rc = fill_entry(l, ds, &l->fields[i], idx, &d, sp, have, p);
		p += entry_bytes(&l->fields[i], &d);
	}
	free(sp);
	return rc;
}

uint64_t bfs_layout_mean_slice(const struct bfs_layout *l)
{
	size_t used = 0;

	if (l->nragged) /* ragged batches are always gathered */
		return 0;
	for (size_t i = 0; i < l->nfields; i++)
		used += l->fields[i].f->row_bytes != 0;
	return used ? l->row_bytes / used : 0;
}
