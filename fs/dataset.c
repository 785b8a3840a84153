/* fs/dataset: fields and rows over one or several sources (shards).
 *
 * Open: each shard's source is opened by fs/source (torch archive, npz,
 * .npy files or safetensors: every kind yields tensors with sizes,
 * strides and an offset over its storage bytes, and a byte order). The
 * first shard's tensors name the fields: a pair NAME.values + NAME.offsets
 * is one ragged field NAME, every other tensor a fixed field. Shards must
 * have the same fields (by name, in any order), dtypes and per-row shapes;
 * they are concatenated along dim 0, whatever their kinds. A path may be
 * a URL, opened in the mount's objects (bfs_dataset_open_in;
 * fs/source_file); once every shard is open and checked, each source's
 * mappings are made readable whole (bfs_source_unguard), and a remote
 * file's rows are read from then on only while a gather holds them
 * (fs/fetch).
 *
 * Binding: a row is addressed as  base + (offset + s * stride0) * elsize
 * plus the per-row strides. The view must lie inside its storage (torch's
 * extent rule, for every kind). The per-row dims are simplified (size-1
 * dims dropped, mergeable dims merged) so a C-contiguous row is one
 * memcpy; anything else (a strided view, a Fortran-order .npy) is walked
 * by the gather (fs/gather.c).
 *
 * Ragged offsets are read once at open (a remote file's made present
 * first: bfs_source_ensure), under the SIGBUS guard: they must
 * be int64 [n + 1], start at 0, never decrease, stay within the values'
 * rows and end at them; a refusal names the field, the first bad index
 * and its value. The longest sample (max_len) bounds every batch file's
 * size in fs/layout.
 *
 * Limits (refused at open, naming the file and the field): a row's
 * elements and bytes fit 2^63 - 1 (fs/size); at most BFS_MAX_FIELDS
 * fields; the metadata of all shards (directories, pickle VMs and results,
 * field tables, bindings) is charged to one budget,
 * BFS_DATASET_META_BUDGET. */
#include "fs/dataset.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/dataset_impl.h"
#include "fs/size.h"
#include "fs/zip.h"

#define META_BUDGET BFS_DATASET_META_BUDGET

/* ---- binding ---------------------------------------------------------- */

/* Drop size-1 dims and merge dims that are contiguous with each other.
 * Only for a non-empty view, whose extent fits 2^63 - 1: every dim of
 * size >= 2 then has (size - 1) x stride within it, so these products
 * cannot overflow; they are checked all the same. 0 or -EOVERFLOW. */
static int simplify(struct bind *b, const struct bfs_source_tensor *t,
		    size_t es)
{
	int n = 0;

	for (int d = 1; d < t->ndim; d++) {
		uint64_t st, run, merged;

		if (t->size[d] == 1)
			continue;
		if (bfs_size_mul((uint64_t)t->stride[d], es, &st) ||
		    bfs_size_mul(st, (uint64_t)t->size[d], &run))
			return -EOVERFLOW;
		if (n && (uint64_t)b->stride[n - 1] == run) {
			if (bfs_size_mul((uint64_t)b->size[n - 1],
					 (uint64_t)t->size[d], &merged))
				return -EOVERFLOW;
			b->size[n - 1] = (int64_t)merged;
			b->stride[n - 1] = (int64_t)st;
			continue;
		}
		b->size[n] = t->size[d];
		b->stride[n] = (int64_t)st;
		n++;
	}
	b->ndim = n;
	b->contiguous = n == 0 || (n == 1 && b->stride[0] == (int64_t)es);
	return 0;
}

/* Bind tensor 't' of shard 'sh'. Its view must lie inside the storage
 * bytes its source gave it (torch's extent rule). */
static int bind_tensor(const struct shard *sh,
		       const struct bfs_source_tensor *t, struct bind *b,
		       struct bfs_error *err)
{
	const struct bfs_dtype_info *di = bfs_dtype_info(t->dtype);
	const char *path = sh->src->files[t->file].path;
	uint64_t extent, span = 0;

	if (bfs_size_extent(t->size, t->stride, t->ndim, t->offset, di->size,
			    &extent) ||
	    extent > t->data_bytes)
		return bfs_error_set(err, -EINVAL, path, t->store_off,
				     "field '%s': view exceeds its storage %s",
				     t->name, t->store);
	/* extent 0: an empty view; its offset is not used. */
	b->base = t->data + (extent ? t->offset * di->size : 0);
	/* Row s is at stride0 * s: within the extent for s < size[0]. */
	b->stride0 = t->size[0] > 1 ? (uint64_t)t->stride[0] * di->size : 0;
	b->rows = (uint64_t)t->size[0];
	b->swap = t->big_endian && di->swap_unit > 1;
	b->file = t->file;
	if (!extent) { /* nothing is ever read: any strides will do */
		b->contiguous = true;
		return 0;
	}
	if (simplify(b, t, di->size))
		return bfs_error_set(err, -EOVERFLOW, path, t->store_off,
				     "field '%s': strides overflow", t->name);
	for (int d = 0; d < b->ndim; d++)
		span += (uint64_t)(b->size[d] - 1) * (uint64_t)b->stride[d];
	b->span = span + di->size; /* both within the extent */
	return 0;
}

/* Charge 'bytes' of metadata read from 'path' to the dataset's budget:
 * 0, or -E2BIG with the refusal recorded. */
static int charge(struct bfs_dataset *ds, const char *path, uint64_t bytes,
		  struct bfs_error *err)
{
	if (bytes > META_BUDGET - ds->meta_bytes)
		return bfs_error_set(
		    err, -E2BIG, path, BFS_NO_OFFSET,
		    "the metadata of this dataset (%zu archive(s) so far) "
		    "needs more than %llu MiB of memory: refused",
		    ds->nshards, (unsigned long long)(META_BUDGET >> 20));
	ds->meta_bytes += bytes;
	return 0;
}

/* ---- fields ----------------------------------------------------------- */

static int by_tensor_name(const void *a, const void *b, void *arg)
{
	const struct bfs_source_tensor *t = arg;

	return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

/* Tensor indexes of 's' sorted by name; NULL when out of memory. */
static size_t *name_index(const struct bfs_source *s)
{
	size_t *ix = malloc((s->ntensors ? s->ntensors : 1) * sizeof(*ix));

	if (!ix)
		return NULL;
	for (size_t i = 0; i < s->ntensors; i++)
		ix[i] = i;
	qsort_r(ix, s->ntensors, sizeof(*ix), by_tensor_name, s->tensors);
	return ix;
}

/* The index in s's tensors of the one named 'name' followed by 'suffix'
 * (ix: name_index), or SIZE_MAX. */
static size_t tensor_named(const struct bfs_source *s, const size_t *ix,
			   const char *name, const char *suffix)
{
	size_t lo = 0, hi = s->ntensors, nl = strlen(name);

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const char *t = s->tensors[ix[mid]].name;
		int d = strncmp(name, t, nl);

		if (!d)
			d = strcmp(suffix, t + nl);
		if (d == 0)
			return ix[mid];
		if (d < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return SIZE_MAX;
}

/* 1 when tensor 'name' is NAME + 'suffix' and 's' also has NAME +
 * 'other' (a ragged pair); the stem NAME's length in *stem. */
static int pair_part(const struct bfs_source *s, const size_t *ix,
		     const char *name, const char *suffix, const char *other,
		     size_t *stem)
{
	size_t n = strlen(name), sl = strlen(suffix);
	char *base;
	int found;

	if (n <= sl || strcmp(name + n - sl, suffix))
		return 0;
	base = strndup(name, n - sl);
	if (!base)
		return -ENOMEM;
	found = tensor_named(s, ix, base, other) != SIZE_MAX;
	free(base);
	*stem = n - sl;
	return found;
}

/* Field f from tensor t (shard 0): its per-row shape and bytes, which
 * must fit 2^63 - 1 (fs/layout bounds all fields' bytes together). */
static int make_field(struct bfs_field *f, const struct bfs_source_tensor *t,
		      size_t name_len, const char *path, struct bfs_error *err)
{
	size_t es = bfs_dtype_info(t->dtype)->size;
	uint64_t elems;
	char shape[160];

	f->name = strndup(t->name, name_len);
	if (!f->name)
		return -ENOMEM;
	f->dtype = t->dtype;
	f->ndim = t->ndim - 1;
	memcpy(f->shape, t->size + 1, (size_t)f->ndim * sizeof(*f->shape));
	if (bfs_size_prod(f->shape, f->ndim, &elems) ||
	    bfs_size_mul(elems, es, &f->row_bytes))
		return bfs_error_set(
		    err, -EOVERFLOW, path, BFS_NO_OFFSET,
		    "field '%s': a %s of shape %s x %zu bytes is more than "
		    "2^63-1 bytes per %s",
		    f->name, f->ragged ? "row" : "sample",
		    bfs_size_shape_str(shape, sizeof(shape), f->shape, f->ndim),
		    es, f->ragged ? "row" : "sample");
	return 0;
}

/* Fields of the first shard become the dataset's fields: NAME.values +
 * NAME.offsets make ragged field NAME (where NAME.values is), every other
 * tensor a fixed field. */
static int make_fields(struct bfs_dataset *ds, const struct bfs_source *s,
		       struct bfs_error *err)
{
	size_t *ix = name_index(s);
	int rc;

	if (!ix)
		return -ENOMEM;
	rc = charge(ds, s->path, s->ntensors * sizeof(*ds->fields), err);
	ds->fields = rc ? NULL : calloc(s->ntensors, sizeof(*ds->fields));
	if (!rc && !ds->fields)
		rc = -ENOMEM;
	for (size_t i = 0; i < s->ntensors && !rc; i++) {
		const struct bfs_source_tensor *t = &s->tensors[i];
		struct bfs_field *f = &ds->fields[ds->nfields];
		size_t stem = strlen(t->name);
		int r;

		r = pair_part(s, ix, t->name, ".offsets", ".values", &stem);
		if (r)
			rc = r < 0 ? r : 0;
		else if ((r = pair_part(s, ix, t->name, ".values", ".offsets",
					&stem)) < 0)
			rc = r;
		else {
			f->ragged = r == 1;
			if (!f->ragged)
				stem = strlen(t->name);
			ds->nragged += f->ragged;
			ds->nfields++;
			rc = make_field(f, t, stem, s->path, err);
			if (!rc && f->ragged &&
			    tensor_named(s, ix, f->name, "") != SIZE_MAX)
				rc = bfs_error_set(
				    err, -EINVAL, s->path, BFS_NO_OFFSET,
				    "tensor '%s' and the ragged pair "
				    "'%s.values' + '%s.offsets' would both be "
				    "field '%s'",
				    f->name, f->name, f->name, f->name);
		}
	}
	free(ix);
	return rc;
}

/* "uint8 [3, 32, 32]": a field's dtype and per-row shape. */
static const char *describe(char *buf, size_t len, enum bfs_dtype dt,
			    const int64_t *shape, int ndim)
{
	char sh[160];

	snprintf(buf, len, "%s %s", bfs_dtype_info(dt)->torch_name,
		 bfs_size_shape_str(sh, sizeof(sh), shape, ndim));
	return buf;
}

/* Tensor NAME + 'suffix' of shard 'sh' for field f, into *at. */
static int find_part(const struct bfs_dataset *ds, const struct shard *sh,
		     const size_t *ix, const struct bfs_field *f,
		     const char *suffix, size_t *at, struct bfs_error *err)
{
	*at = tensor_named(sh->src, ix, f->name, suffix);
	if (*at != SIZE_MAX)
		return 0;
	return bfs_error_set(err, -EINVAL, sh->src->path, BFS_NO_OFFSET,
			     "has no field '%s%s', which '%s' has (shards "
			     "must have the same fields)",
			     f->name, suffix, ds->shards[0].src->path);
}

/* Shard 'sh' must have the dataset's fields (by name, in any order), each
 * with the same dtype and per-row shape: map[i] = the index in sh's
 * tensors of dataset field i (ragged: of its values; omap[i] of its
 * offsets). */
static int match_fields(const struct bfs_dataset *ds, const struct shard *sh,
			size_t *map, size_t *omap, struct bfs_error *err)
{
	const struct bfs_source *s = sh->src;
	size_t *ix = name_index(s);
	char a[200], b[200];
	int rc = 0;

	if (!ix)
		return -ENOMEM;
	for (size_t i = 0; i < ds->nfields && !rc; i++) {
		const struct bfs_field *f = &ds->fields[i];
		const struct bfs_source_tensor *t;

		rc = find_part(ds, sh, ix, f, f->ragged ? ".values" : "",
			       &map[i], err);
		if (!rc && f->ragged)
			rc =
			    find_part(ds, sh, ix, f, ".offsets", &omap[i], err);
		if (rc)
			break;
		t = &s->tensors[map[i]];
		if (t->dtype == f->dtype && t->ndim - 1 == f->ndim &&
		    !memcmp(t->size + 1, f->shape,
			    (size_t)f->ndim * sizeof(*f->shape)))
			continue;
		rc = bfs_error_set(
		    err, -EINVAL, s->path, BFS_NO_OFFSET,
		    "field '%s' is %s per %s here but %s in '%s' (shards "
		    "must have the same dtypes and per-sample shapes)",
		    t->name,
		    describe(a, sizeof(a), t->dtype, t->size + 1, t->ndim - 1),
		    f->ragged ? "row" : "sample",
		    describe(b, sizeof(b), f->dtype, f->shape, f->ndim),
		    ds->shards[0].src->path);
	}
	if (!rc && s->ntensors != ds->nfields + ds->nragged)
		rc = bfs_error_set(err, -EINVAL, s->path, BFS_NO_OFFSET,
				   "has %zu tensors, '%s' has %zu (shards "
				   "must have the same fields)",
				   s->ntensors, ds->shards[0].src->path,
				   ds->nfields + ds->nragged);
	free(ix);
	return rc;
}

/* ---- ragged offsets --------------------------------------------------- */

/* Walk offsets[0 .. n] of a ragged field (under the guard): the first bad
 * index and why, or the longest sample. */
struct walk {
	const struct bind *ob;
	uint64_t n, rows;     /* samples, rows of the values */
	uint64_t at, max_len; /* the bad index; the longest */
	int64_t v, prev;      /* offsets[at], offsets[at - 1] */
	enum { W_OK, W_FIRST, W_DOWN, W_PAST, W_END } why;
};

static int walk_offsets(void *arg)
{
	struct walk *w = arg;
	int64_t prev = bfs_dataset_offset_at(w->ob, 0);

	w->v = prev;
	if (prev != 0)
		return w->why = W_FIRST, 0;
	for (uint64_t i = 1; i <= w->n; i++) {
		int64_t v = bfs_dataset_offset_at(w->ob, i);

		w->at = i;
		w->v = v;
		w->prev = prev;
		if (v < prev)
			return w->why = W_DOWN, 0;
		if ((uint64_t)v > w->rows)
			return w->why = W_PAST, 0;
		if ((uint64_t)(v - prev) > w->max_len)
			w->max_len = (uint64_t)(v - prev);
		prev = v;
	}
	if ((uint64_t)prev != w->rows)
		w->why = W_END;
	return 0;
}

/* The offsets of ragged field f in shard sh: a 1-D int64 tensor of
 * samples + 1 entries, then the walk. */
static int check_offsets(struct bfs_dataset *ds, struct shard *sh, size_t fi,
			 const struct bfs_source_tensor *ot,
			 struct bfs_error *err)
{
	struct bfs_field *f = &ds->fields[fi];
	const char *path = sh->src->files[ot->file].path;
	struct walk w = {.ob = &sh->obinds[fi],
			 .n = sh->samples,
			 .rows = sh->binds[fi].rows};
	uint64_t at;
	char d[200];
	int rc;

	if (ot->dtype != BFS_DT_INT64 || ot->ndim != 1)
		return bfs_error_set(
		    err, -EINVAL, path, ot->store_off,
		    "ragged field '%s': %s.offsets must be a 1-D int64 "
		    "tensor, not %s",
		    f->name, f->name,
		    describe(d, sizeof(d), ot->dtype, ot->size, ot->ndim));
	if ((uint64_t)ot->size[0] != sh->samples + 1)
		return bfs_error_set(
		    err, -EINVAL, path, ot->store_off,
		    "ragged field '%s': %s.offsets has %" PRId64
		    " entries, but the shard has %" PRIu64
		    " samples: it needs one more (n + 1)",
		    f->name, f->name, ot->size[0], sh->samples);
	rc = bfs_source_ensure(
	    sh->src, ot->file,
	    (uint64_t)(ot->data - sh->src->files[ot->file].map), ot->data_bytes,
	    err);
	if (rc)
		return rc;
	rc = bfs_dataset_guard(walk_offsets, &w);
	if (rc == -EFAULT)
		return bfs_error_set(err, -EIO, path, BFS_NO_OFFSET,
				     "ragged field '%s': the file faulted "
				     "while its offsets were read",
				     f->name);
	at = (uint64_t)(w.ob->base + w.at * w.ob->stride0 -
			sh->src->files[ot->file].map);
	switch (w.why) {
	case W_OK:
		break;
	case W_FIRST:
		return bfs_error_set(err, -EINVAL, path, at,
				     "ragged field '%s': %s.offsets[0] is "
				     "%" PRId64 ", must be 0",
				     f->name, f->name, w.v);
	case W_DOWN:
		return bfs_error_set(
		    err, -EINVAL, path, at,
		    "ragged field '%s': %s.offsets[%" PRIu64 "] = %" PRId64
		    " is less than %s.offsets[%" PRIu64 "] = %" PRId64
		    " (offsets must not decrease)",
		    f->name, f->name, w.at, w.v, f->name, w.at - 1, w.prev);
	case W_PAST:
		return bfs_error_set(
		    err, -EINVAL, path, at,
		    "ragged field '%s': %s.offsets[%" PRIu64 "] = %" PRId64
		    " is past the end of %s.values (%" PRIu64 " rows)",
		    f->name, f->name, w.at, w.v, f->name, w.rows);
	case W_END:
		return bfs_error_set(
		    err, -EINVAL, path, at,
		    "ragged field '%s': %s.offsets[%" PRIu64 "] = %" PRId64
		    " must equal the rows of %s.values (%" PRIu64 ")",
		    f->name, f->name, w.n, w.v, f->name, w.rows);
	}
	if (w.max_len > f->max_len)
		f->max_len = w.max_len;
	return bfs_size_add(f->total, w.rows, &f->total)
		   ? bfs_error_set(err, -EOVERFLOW, path, BFS_NO_OFFSET,
				   "ragged field '%s': too many rows", f->name)
		   : 0;
}

/* ---- shards ----------------------------------------------------------- */

/* The shard's sample count: the dim 0 all its fixed fields share, or (all
 * ragged) the entries of the first offsets minus one. */
static int count_samples(const struct bfs_dataset *ds, struct shard *sh,
			 const size_t *map, const size_t *omap,
			 struct bfs_error *err)
{
	const struct bfs_source_tensor *t0 = NULL;

	for (size_t i = 0; i < ds->nfields; i++) {
		const struct bfs_source_tensor *t = &sh->src->tensors[map[i]];

		if (ds->fields[i].ragged)
			continue;
		if (!t0) {
			t0 = t;
			sh->samples = (uint64_t)t->size[0];
		} else if ((uint64_t)t->size[0] != sh->samples) {
			return bfs_error_set(
			    err, -EINVAL, sh->src->path, BFS_NO_OFFSET,
			    "field '%s' has %" PRId64 " samples, '%s' has "
			    "%" PRIu64 " (all fields must share dim 0: "
			    "batchfs mount --fields picks the fields to "
			    "serve%s%.*s)",
			    t->name, t->size[0], t0->name, sh->samples,
			    strchr(t0->name, '.') ? ": --fields " : "",
			    strchr(t0->name, '.')
				? (int)(strchr(t0->name, '.') - t0->name)
				: 0,
			    t0->name);
		}
	}
	if (!t0) {
		const struct bfs_source_tensor *ot = &sh->src->tensors[omap[0]];

		sh->samples = ot->size[0] > 0 ? (uint64_t)ot->size[0] - 1 : 0;
	}
	return 0;
}

/* Bind every dataset field to its tensor(s) in shard sh, count its
 * samples and check its ragged offsets. */
static int bind_shard(struct bfs_dataset *ds, struct shard *sh,
		      const size_t *map, const size_t *omap,
		      struct bfs_error *err)
{
	const struct bfs_source *s = sh->src;
	int rc;

	sh->binds = calloc(ds->nfields, sizeof(*sh->binds));
	sh->obinds = calloc(ds->nfields, sizeof(*sh->obinds));
	sh->changed = calloc(s->nfiles ? s->nfiles : 1, sizeof(*sh->changed));
	if (!sh->binds || !sh->obinds || !sh->changed)
		return -ENOMEM;
	rc = charge(ds, s->path,
		    2 * ds->nfields * sizeof(*sh->binds) +
			s->nfiles * sizeof(*sh->changed),
		    err);
	if (!rc)
		rc = count_samples(ds, sh, map, omap, err);
	for (size_t i = 0; i < ds->nfields && !rc; i++) {
		rc = bind_tensor(sh, &s->tensors[map[i]], &sh->binds[i], err);
		if (!rc && ds->fields[i].ragged)
			rc = bind_tensor(sh, &s->tensors[omap[i]],
					 &sh->obinds[i], err);
		if (!rc && ds->fields[i].ragged)
			rc =
			    check_offsets(ds, sh, i, &s->tensors[omap[i]], err);
	}
	return rc;
}

static int open_shard(struct bfs_dataset *ds, struct shard *sh,
		      const struct bfs_source_part *parts, size_t nparts,
		      struct bfs_error *err)
{
	size_t *map;
	int rc;

	rc = bfs_source_open_select(&sh->src, parts, nparts,
				    META_BUDGET - ds->meta_bytes, ds->objects,
				    ds->select, err);
	if (rc)
		return rc;
	rc = charge(ds, sh->src->path, sh->src->meta_bytes, err);
	/* no tensor of a source is 0-dim: those are its metadata */
	if (!rc && !ds->fields)
		rc = make_fields(ds, sh->src, err);
	if (rc)
		return rc;
	map = calloc(2 * ds->nfields + 1, sizeof(*map));
	if (!map)
		return -ENOMEM;
	rc = match_fields(ds, sh, map, map + ds->nfields, err);
	if (!rc)
		rc = bind_shard(ds, sh, map, map + ds->nfields, err);
	free(map);
	return rc;
}

/* A writer-preferring rwlock (the dataset's copy_lock), or NULL. */
static pthread_rwlock_t *lock_new(void)
{
	pthread_rwlock_t *l = malloc(sizeof(*l));
	pthread_rwlockattr_t a;

	if (!l || pthread_rwlockattr_init(&a)) {
		free(l);
		return NULL;
	}
	pthread_rwlockattr_setkind_np(
	    &a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	if (pthread_rwlock_init(l, &a)) {
		free(l);
		l = NULL;
	}
	pthread_rwlockattr_destroy(&a);
	return l;
}

/* Number every shard's files in shard order (ds->files, shard->file0).
 * 0 or -ENOMEM. */
static int number_files(struct bfs_dataset *ds)
{
	size_t n = 0;

	for (size_t i = 0; i < ds->nshards; i++)
		n += ds->shards[i].src->nfiles;
	ds->files = calloc(n ? n : 1, sizeof(*ds->files));
	if (!ds->files)
		return -ENOMEM;
	for (size_t i = 0; i < ds->nshards; i++) {
		const struct bfs_source *s = ds->shards[i].src;

		ds->shards[i].file0 = ds->nfiles;
		for (size_t f = 0; f < s->nfiles; f++)
			ds->files[ds->nfiles++] = &s->files[f];
	}
	return 0;
}

static int open_parts(struct bfs_dataset **out,
		      const struct bfs_source_part *parts, const size_t *first,
		      size_t nsources, const char *fields,
		      struct bfs_objects *objects, struct bfs_error *err)
{
	struct bfs_dataset *ds;
	int rc = -ENOMEM;

	*out = NULL;
	if (!nsources)
		return bfs_error_set(err, -EINVAL, NULL, BFS_NO_OFFSET,
				     "no archive given");
	ds = calloc(1, sizeof(*ds));
	if (!ds)
		return -ENOMEM;
	ds->shards = calloc(nsources, sizeof(*ds->shards));
	ds->copy_lock = lock_new();
	ds->select = fields;
	ds->objects = objects;
	if (!ds->shards || !ds->copy_lock)
		goto err_close;
	for (size_t i = 0; i < nsources; i++) {
		struct shard *sh = &ds->shards[i];
		const char *path = parts[first[i]].path;

		ds->nshards = i + 1;
		rc = open_shard(ds, sh, parts + first[i],
				first[i + 1] - first[i], err);
		if (rc == -ENOMEM)
			bfs_error_set(err, rc, path, BFS_NO_OFFSET,
				      "out of memory");
		if (rc)
			goto err_close;
		sh->first = ds->samples;
		if (bfs_size_add(ds->samples, sh->samples, &ds->samples)) {
			rc = bfs_error_set(err, -EOVERFLOW, path, BFS_NO_OFFSET,
					   "too many samples");
			goto err_close;
		}
	}
	rc = number_files(ds);
	if (rc)
		goto err_close;
	ds->select = NULL;
	ds->objects = NULL;
	for (size_t i = 0; i < ds->nshards; i++) /* read by holds from now */
		bfs_source_unguard(ds->shards[i].src);
	*out = ds;
	return 0;
err_close:
	bfs_dataset_close(ds);
	return rc;
}

int bfs_dataset_open_parts(struct bfs_dataset **out,
			   const struct bfs_source_part *parts,
			   const size_t *first, size_t nsources,
			   struct bfs_error *err)
{
	return open_parts(out, parts, first, nsources, NULL, NULL, err);
}

int bfs_dataset_open(struct bfs_dataset **out, const char *const *paths,
		     size_t n_paths, struct bfs_error *err)
{
	return bfs_dataset_open_select(out, paths, n_paths, NULL, err);
}

int bfs_dataset_open_select(struct bfs_dataset **out, const char *const *paths,
			    size_t n_paths, const char *fields,
			    struct bfs_error *err)
{
	return bfs_dataset_open_in(out, paths, n_paths, fields, NULL, err);
}

int bfs_dataset_open_in(struct bfs_dataset **out, const char *const *paths,
			size_t n_paths, const char *fields,
			struct bfs_objects *objects, struct bfs_error *err)
{
	struct bfs_source_part *parts = NULL;
	size_t *first = NULL, ns = 0;
	int rc;

	*out = NULL;
	if (!n_paths)
		return bfs_error_set(err, -EINVAL, NULL, BFS_NO_OFFSET,
				     "no archive given");
	rc = bfs_source_group_in(paths, n_paths, objects, &parts, &first, &ns,
				 err);
	if (rc == 0)
		rc = open_parts(out, parts, first, ns, fields, objects, err);
	free(parts);
	free(first);
	return rc;
}

void bfs_dataset_close(struct bfs_dataset *ds)
{
	if (!ds)
		return;
	for (size_t i = 0; ds->shards && i < ds->nshards; i++) {
		struct shard *sh = &ds->shards[i];

		free(sh->binds);
		free(sh->obinds);
		free(sh->changed);
		bfs_source_close(sh->src);
	}
	for (size_t i = 0; ds->fields && i < ds->nfields; i++)
		free(ds->fields[i].name);
	free(ds->fields);
	free(ds->shards);
	free(ds->files);
	if (ds->copy_lock)
		pthread_rwlock_destroy(ds->copy_lock);
	free(ds->copy_lock);
	free(ds);
}

uint64_t bfs_dataset_samples(const struct bfs_dataset *ds)
{
	return ds->samples;
}

size_t bfs_dataset_nfields(const struct bfs_dataset *ds)
{
	return ds->nfields;
}

const struct bfs_field *bfs_dataset_field(const struct bfs_dataset *ds,
					  size_t i)
{
	return i < ds->nfields ? &ds->fields[i] : NULL;
}

size_t bfs_dataset_nshards(const struct bfs_dataset *ds)
{
	return ds->nshards;
}

size_t bfs_dataset_nfiles(const struct bfs_dataset *ds)
{
	return ds->nfiles;
}

const struct bfs_source_file *bfs_dataset_file(const struct bfs_dataset *ds,
					       size_t i)
{
	return ds->files[i];
}

uint64_t bfs_dataset_bytes(const struct bfs_dataset *ds)
{
	uint64_t n = 0;

	for (size_t i = 0; i < ds->nfiles; i++)
		n += ds->files[i]->size;
	return n;
}

void bfs_dataset_shard(const struct bfs_dataset *ds, size_t i,
		       struct bfs_shard_info *out)
{
	const struct shard *sh = &ds->shards[i];
	const struct bfs_source *s = sh->src;

	memset(out, 0, sizeof(*out));
	out->path = s->path;
	out->source = s;
	out->zip = s->zip;
	out->first_sample = sh->first;
	out->samples = sh->samples;
	out->version = s->version;
	out->big_endian = s->big_endian;
	out->container =
	    s->kind == BFS_SOURCE_TORCH ? s->pk.container : BFS_CONTAINER_DICT;
	out->pickle = s->kind == BFS_SOURCE_TORCH ? &s->pk : NULL;
}
