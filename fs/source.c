/* fs/source: what every kind of source shares (see source.h; the files
 * are found and opened by source_file.c, the one room of the sources
 * that knows a URL; the loaders are source_torch.c, source_npy.c and
 * source_safetensors.c; source_rows.c finds the sample count).
 *
 * An open: each part's path is found (bfs_source_find: a directory, or a
 * file's kind by its first bytes; a URL's object in the objects the open
 * was given), then its file opened (bfs_source_file_open) and handed by
 * its index to its kind's loader; a directory's .npy files are opened one
 * by one. Paths grouped (bfs_source_group_in): a run of .npy paths whose
 * tensor names differ is one source.
 *
 * Every open ends alike (finish): 0-dim tensors become metadata (a
 * remote file's element made present first: bfs_source_ensure), names
 * must be unique, the fields asked for are selected (bfs_source_select),
 * the sample count is found, and one warning names the metadata.
 *
 * Memory: a source owns its files' mappings (or its zip, which owns the
 * archive's; bytes in memory are their owner's), its tensor table and
 * names; meta_bytes counts that heap so a dataset can bound the metadata
 * of all its shards together. */
#include "fs/source.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fs/log.h"
#include "fs/size.h"
#include "fs/source_impl.h"
#include "fs/zip.h"

/* Room for the metadata a warning line names. */
#define META_NAMES 512

const char *bfs_source_kind_name(enum bfs_source_kind k)
{
	static const char *const names[] = {
	    [BFS_SOURCE_TORCH] = "torch",
	    [BFS_SOURCE_NPZ] = "npz",
	    [BFS_SOURCE_NPY] = "npy",
	    [BFS_SOURCE_SAFETENSORS] = "safetensors",
	};
	return (unsigned)k < sizeof(names) / sizeof(names[0]) ? names[k] : "?";
}

int bfs_source_tensor_new(struct bfs_source *s, const char *name,
			  const char *store, struct bfs_source_tensor **out,
			  struct bfs_error *err)
{
	struct bfs_source_tensor *nt, *t;

	if (s->ntensors >= BFS_MAX_FIELDS)
		return bfs_error_set(err, -E2BIG, s->path, BFS_NO_OFFSET,
				     "more than %u tensors: refused",
				     BFS_MAX_FIELDS);
	nt = realloc(s->tensors, (s->ntensors + 1) * sizeof(*nt));
	if (!nt)
		return -ENOMEM;
	s->tensors = nt;
	t = memset(&nt[s->ntensors++], 0, sizeof(*t));
	t->name = strdup(name);
	t->store = strdup(store);
	if (!t->name || !t->store)
		return -ENOMEM;
	s->meta_bytes += sizeof(*t) + strlen(name) + strlen(store) + 2;
	*out = t;
	return 0;
}

int bfs_source_strides(struct bfs_source_tensor *t, int fortran)
{
	uint64_t st = 1, numel;

	if (bfs_size_prod(t->size, t->ndim, &numel))
		return -EOVERFLOW;
	for (int i = 0; i < t->ndim; i++) {
		int d = fortran ? i : t->ndim - 1 - i;

		t->stride[d] = numel ? (int64_t)st : 0;
		if (numel && bfs_size_mul(st, (uint64_t)t->size[d], &st))
			return -EOVERFLOW;
	}
	return 0;
}

static int by_name(const void *a, const void *b, void *arg)
{
	const struct bfs_source_tensor *t = arg;

	return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

/* Tensor names are unique (a group of .npy files may repeat one). */
static int check_unique(struct bfs_source *s, struct bfs_error *err)
{
	size_t *ix = malloc((s->ntensors ? s->ntensors : 1) * sizeof(*ix));
	int rc = 0;

	if (!ix)
		return -ENOMEM;
	for (size_t i = 0; i < s->ntensors; i++)
		ix[i] = i;
	qsort_r(ix, s->ntensors, sizeof(*ix), by_name, s->tensors);
	for (size_t i = 1; i < s->ntensors && !rc; i++) {
		const struct bfs_source_tensor *a = &s->tensors[ix[i - 1]];
		const struct bfs_source_tensor *b = &s->tensors[ix[i]];

		if (!strcmp(a->name, b->name))
			rc = bfs_error_set(
			    err, -EINVAL, s->files[b->file].path, BFS_NO_OFFSET,
			    "tensor name '%s' comes twice (also from %s)",
			    a->name, s->files[a->file].path);
	}
	free(ix);
	return rc;
}

int bfs_source_meta_add(struct bfs_source *s, const char *key, const char *json,
			const char *what)
{
	struct bfs_source_meta *m = s->meta;
	size_t n = s->nmeta;

	if (!(n & (n - 1))) { /* 0, 1, 2, 4 ...: room for as many again */
		m = realloc(s->meta, (n ? 2 * n : 1) * sizeof(*m));
		if (!m)
			return -ENOMEM;
		s->meta = m;
	}
	m = &s->meta[s->nmeta++];
	m->key = strdup(key);
	m->json = strdup(json);
	m->what = strdup(what);
	if (!m->key || !m->json || !m->what)
		return -ENOMEM;
	s->meta_bytes +=
	    sizeof(*m) + strlen(key) + strlen(json) + strlen(what) + 3;
	return 0;
}

/* 0-dim tensor t of s as metadata: its element read (through the file
 * descriptor, where a short file is an error, not a SIGBUS) into a
 * metadata entry. 0 or -errno with 'err'. */
static int scalar_meta(struct bfs_source *s, const struct bfs_source_tensor *t,
		       struct bfs_error *err)
{
	const struct bfs_dtype_info *di = bfs_dtype_info(t->dtype);
	const struct bfs_source_file *f = &s->files[t->file];
	uint8_t b[16] = {0};
	char json[160];
	uint64_t off, end;
	int rc;

	if (!di || di->size > sizeof(b) ||
	    bfs_size_mul(t->offset, di->size, &off) ||
	    bfs_size_add(off, di->size, &end) || end > t->data_bytes)
		return bfs_error_set(err, -EINVAL, f->path, t->store_off,
				     "0-dim tensor '%s': its element (offset "
				     "%llu) lies outside %s",
				     t->name, (unsigned long long)t->offset,
				     t->store);
	off += (uint64_t)(t->data - f->map);
	rc = bfs_source_ensure(s, t->file, off, di->size, err);
	if (rc)
		return rc;
	if (!bfs_source_file_local(f)) /* a remote one: through its guard */
		memcpy(b, f->map + off, di->size);
	else if (pread(f->fd, b, di->size, (off_t)off) != (ssize_t)di->size)
		return bfs_error_set(err, -EIO, f->path, off,
				     "0-dim tensor '%s': cannot read its "
				     "element",
				     t->name);
	for (size_t k = 0; t->big_endian && di->size > 1 && k < di->size;
	     k += di->swap_unit)
		for (size_t a = k, z = k + di->swap_unit - 1; a < z; a++, z--) {
			uint8_t c = b[a];

			b[a] = b[z];
			b[z] = c;
		}
	if (bfs_pickle_json_scalar(t->dtype, b, json, sizeof(json)))
		snprintf(json, sizeof(json),
			 "{\"__type__\": \"torch.Tensor\", \"dtype\": \"%s\"}",
			 di->torch_name);
	return bfs_source_meta_add(s, t->name, json, "a 0-dim tensor");
}

/* 0-dim tensors (no sample dimension: a mean, a std) become metadata;
 * a source left with no tensor is refused. */
static int scalars_to_meta(struct bfs_source *s, struct bfs_error *err)
{
	size_t kept = 0, n = s->ntensors;
	int rc = 0;

	for (size_t i = 0; i < n; i++) {
		struct bfs_source_tensor *t = &s->tensors[i];

		if (t->ndim || rc) {
			s->tensors[kept++] = *t;
			continue;
		}
		rc = scalar_meta(s, t, err);
		free(t->name);
		free(t->store);
	}
	s->ntensors = kept;
	if (!rc && !kept && n)
		rc = bfs_error_set(err, -EINVAL, s->path, BFS_NO_OFFSET,
				   "holds no tensor with a sample dimension: "
				   "only 0-dim tensors (metadata), nothing to "
				   "serve");
	return rc;
}

/* One warning line naming the metadata of s, and the globals outside the
 * allowlist its inert objects come from. */
static void warn_meta(const struct bfs_source *s)
{
	size_t n = s->nmeta + s->nmeta_dropped, at = 0, shown = 0;
	const char *foreign = s->pk.foreign;
	char list[META_NAMES] = "", tensors[128] = "";

	for (size_t i = 0; i < s->nmeta; i++) {
		const struct bfs_source_meta *m = &s->meta[i];
		int k = snprintf(list + at, sizeof(list) - at, "%s'%s' (%s)",
				 at ? ", " : "", m->key, m->what);

		if (k < 0 || at + (size_t)k + 24 >= sizeof(list)) {
			list[at] = 0; /* room kept for ", and N more" */
			break;
		}
		at += (size_t)k;
		shown++;
	}
	if (shown < n)
		snprintf(list + at, sizeof(list) - at, "%sand %zu more",
			 at ? ", " : "", n - shown);
	if (s->nmeta_tensors)
		snprintf(tensors, sizeof(tensors),
			 "; of them, %zu tensor%s whose first dimension is "
			 "not the %" PRIu64 " samples of the fields",
			 s->nmeta_tensors, s->nmeta_tensors > 1 ? "s" : "",
			 s->samples);
	if (n)
		bfs_log(BFS_LOG_WARN, "source",
			"%s: %zu value%s beside the tensors, not served "
			"(metadata, in dataset.json): %s%s%s%s%s",
			s->path, n, n > 1 ? "s" : "", list, tensors,
			foreign ? "; kept inert, never called: globals "
				  "outside the allowlist "
				: "",
			foreign ? foreign : "",
			foreign ? " (torch.load(weights_only=True) refuses "
				  "this archive)"
				: "");
}

/* The file 'at' opened (fs/source_file) and loaded by its kind's loader
 * ('name': a .npy file's tensor name, NULL: from the file name). */
static int load_file(struct bfs_source *s, const struct bfs_source_found *at,
		     const char *name, uint64_t mem_limit,
		     struct bfs_error *err)
{
	int f = bfs_source_file_open(s, at, err);

	if (f < 0)
		return f;
	switch (at->kind) {
	case BFS_SOURCE_NPZ:
		return bfs_source_load_npz(s, (size_t)f, err);
	case BFS_SOURCE_NPY:
		return bfs_source_load_npy(s, (size_t)f, name, err);
	case BFS_SOURCE_SAFETENSORS:
		return bfs_source_load_safetensors(s, (size_t)f, err);
	case BFS_SOURCE_TORCH:
		break;
	}
	return bfs_source_load_torch(s, (size_t)f, mem_limit, err);
}

/* One part alone: a file of any kind (a URL's object: its name is the
 * file's), or a directory. */
static int load_one(struct bfs_source *s, const struct bfs_source_part *p,
		    uint64_t mem_limit, struct bfs_error *err)
{
	struct bfs_source_found at;
	int rc = bfs_source_find(s->objects, p->path, &at, err);

	if (rc)
		return rc;
	if (at.dir) {
		s->kind = BFS_SOURCE_NPY;
		return bfs_source_load_npy_dir(s, p->path, err);
	}
	s->kind = at.kind;
	return load_file(s, &at, p->name, mem_limit, err);
}

/* Several parts: a group of .npy files. */
static int load_group(struct bfs_source *s, const struct bfs_source_part *p,
		      size_t n, struct bfs_error *err)
{
	s->kind = BFS_SOURCE_NPY;
	for (size_t i = 0; i < n; i++) {
		struct bfs_source_found at;
		int rc = bfs_source_find(s->objects, p[i].path, &at, err);

		if (rc)
			return rc;
		if (at.dir || at.kind != BFS_SOURCE_NPY)
			return bfs_error_set(
			    err, -EINVAL, at.path, BFS_NO_OFFSET,
			    "is %s, not a .npy file: only .npy files are "
			    "grouped into one shard",
			    at.dir ? "a directory"
				   : bfs_source_kind_name(at.kind));
		rc = load_file(s, &at, p[i].name, 0, err);
		if (rc)
			return rc;
	}
	return 0;
}

static struct bfs_source *source_new(const char *path)
{
	struct bfs_source *s = calloc(1, sizeof(*s));

	if (s && !(s->path = strdup(path))) {
		free(s);
		s = NULL;
	}
	return s;
}

/* Common tail of both opens: 0-dim tensors to metadata, uniqueness,
 * the fields selected (NULL: all), the sample count (tensors of another
 * first dimension to metadata), the metadata's warning, then *out or a
 * cleanup. */
static int finish(struct bfs_source **out, struct bfs_source *s, int rc,
		  const char *fields, struct bfs_error *err)
{
	if (rc == 0)
		rc = scalars_to_meta(s, err);
	if (rc == 0)
		rc = check_unique(s, err);
	if (rc == 0 && fields)
		rc = bfs_source_select(s, fields, err);
	if (rc == 0)
		rc = bfs_source_rows(s, err);
	if (rc == 0)
		warn_meta(s);
	if (rc == -ENOMEM)
		bfs_error_set(err, rc, s->path, BFS_NO_OFFSET, "out of memory");
	if (rc) {
		bfs_source_close(s);
		return rc;
	}
	*out = s;
	return 0;
}

int bfs_source_open(struct bfs_source **out,
		    const struct bfs_source_part *parts, size_t n,
		    uint64_t mem_limit, struct bfs_error *err)
{
	return bfs_source_open_in(out, parts, n, mem_limit, NULL, err);
}

int bfs_source_open_in(struct bfs_source **out,
		       const struct bfs_source_part *parts, size_t n,
		       uint64_t mem_limit, struct bfs_objects *objects,
		       struct bfs_error *err)
{
	return bfs_source_open_select(out, parts, n, mem_limit, objects, NULL,
				      err);
}

int bfs_source_open_select(struct bfs_source **out,
			   const struct bfs_source_part *parts, size_t n,
			   uint64_t mem_limit, struct bfs_objects *objects,
			   const char *fields, struct bfs_error *err)
{
	struct bfs_source *s;
	char shown[1024];

	*out = NULL;
	if (!n)
		return bfs_error_set(err, -EINVAL, NULL, BFS_NO_OFFSET,
				     "no source given");
	if (n > BFS_MAX_FIELDS)
		return bfs_error_set(err, -E2BIG, parts[0].path, BFS_NO_OFFSET,
				     "more than %u .npy files in one shard",
				     BFS_MAX_FIELDS);
	s = source_new(
	    bfs_source_path_shown(shown, sizeof(shown), parts[0].path));
	if (!s)
		return -ENOMEM;
	s->objects = objects;
	return finish(out, s,
		      n == 1 ? load_one(s, parts, mem_limit, err)
			     : load_group(s, parts, n, err),
		      fields, err);
}

int bfs_source_open_mem(struct bfs_source **out, const uint8_t *buf,
			uint64_t size, const char *label, uint64_t mem_limit,
			struct bfs_error *err)
{
	struct bfs_source *s = source_new(label);
	struct bfs_source_found at;
	int rc;

	*out = NULL;
	if (!s)
		return -ENOMEM;
	bfs_source_find_mem(&at, buf, size, label);
	s->kind = at.kind;
	rc = load_file(s, &at, NULL, mem_limit, err);
	return finish(out, s, rc, NULL, err);
}

/* How 'want' (length n) selects tensor name 'name': 0 not at all, 1 as
 * it is, 2 with "want." cut off its front. */
static int selects(const char *want, size_t n, const char *name,
		   bool ragged_stem)
{
	if (strlen(name) == n && !memcmp(name, want, n))
		return 1;
	if (strncmp(name, want, n) || name[n] != '.')
		return 0;
	return ragged_stem ? 1 : 2;
}

/* Whether the tensors under "want." are exactly a ragged pair (so 'want'
 * names one field, NAME.values + NAME.offsets). */
static bool ragged_stem(const struct bfs_source *s, const char *want, size_t n)
{
	int seen = 0;

	for (size_t i = 0; i < s->ntensors; i++) {
		const char *t = s->tensors[i].name;

		if (strncmp(t, want, n) || t[n] != '.')
			continue;
		if (strcmp(t + n, ".values") && strcmp(t + n, ".offsets"))
			return false;
		seen++;
	}
	return seen == 2;
}

/* The first few tensor names of s, for a message. */
static void some_names(const struct bfs_source *s, char *buf, size_t len)
{
	size_t at = 0;

	buf[0] = 0;
	for (size_t i = 0; i < s->ntensors && at + 8 < len; i++) {
		int k = snprintf(buf + at, len - at, "%s%s", i ? ", " : "",
				 s->tensors[i].name);

		if (k < 0 || (size_t)k >= len - at) {
			snprintf(buf + at, len - at, ", ...");
			break;
		}
		at += (size_t)k;
	}
}

/* Why ITEM w (n bytes, of which NAME is the first nl) selects nothing:
 * what NAME is in the metadata, or what tensors there are. -EINVAL. */
static int selects_nothing(const struct bfs_source *s, const char *w, size_t n,
			   size_t nl, struct bfs_error *err)
{
	char names[300];

	some_names(s, names, sizeof(names));
	for (size_t i = 0; i < s->nmeta; i++)
		if (strlen(s->meta[i].key) == nl &&
		    !memcmp(s->meta[i].key, w, nl))
			return bfs_error_set(
			    err, -EINVAL, s->path, BFS_NO_OFFSET,
			    "--fields: '%.*s' is metadata here (%s), not a "
			    "tensor to serve: dataset.json gives its value "
			    "under \"metadata\"; its tensors: %s",
			    (int)nl, w, s->meta[i].what, names);
	return bfs_error_set(err, -EINVAL, s->path, BFS_NO_OFFSET,
			     "--fields: '%.*s'%s%.*s%s is no field (nor a dict "
			     "of them) here; its tensors: %s",
			     (int)nl, w, nl < n ? " (in " : "",
			     nl < n ? (int)n : 0, w, nl < n ? ")" : "", names);
}

/* Two ITEMs (at fields + a and + b) that would give one field 'name'. */
static int same_name(const struct bfs_source *s, const char *fields, size_t a,
		     size_t b, const char *name, struct bfs_error *err)
{
	const char *x = fields + a, *y = fields + b;

	if (a == b)
		return bfs_error_set(err, -EINVAL, s->path, BFS_NO_OFFSET,
				     "--fields: '%.*s' would give two fields "
				     "named '%s'",
				     (int)strcspn(x, ","), x, name);
	return bfs_error_set(err, -EINVAL, s->path, BFS_NO_OFFSET,
			     "--fields: '%.*s' and '%.*s' would both be field "
			     "'%s'",
			     (int)strcspn(x, ","), x, (int)strcspn(y, ","), y,
			     name);
}

/* The names the ITEMs of 'fields' give the tensors of s: name[i] (NULL:
 * not kept), item[i] the offset of the ITEM that selects tensor i.
 * 0 or -errno with 'err'. */
static int select_names(const struct bfs_source *s, const char *fields,
			char **name, size_t *item, struct bfs_error *err)
{
	size_t n;
	int rc = 0;

	for (const char *w = fields; *w && !rc; w += n + (w[n] == ',')) {
		const char *eq;
		size_t nl;
		bool stem, any = false;

		n = strcspn(w, ",");
		eq = memchr(w, '=', n);
		nl = eq ? (size_t)(eq - w) : n;
		if (eq && nl + 1 == n)
			return bfs_error_set(err, -EINVAL, s->path,
					     BFS_NO_OFFSET,
					     "--fields: '%.*s' gives no new "
					     "name (NAME=NEWNAME)",
					     (int)n, w);
		stem = ragged_stem(s, w, nl);
		for (size_t i = 0; nl && i < s->ntensors && !rc; i++) {
			const char *t = s->tensors[i].name;
			int how = selects(w, nl, t, stem);

			any |= how != 0;
			if (!how || name[i]) /* the first ITEM wins */
				continue;
			item[i] = (size_t)(w - fields);
			if (eq) /* NEWNAME instead of NAME */
				rc =
				    asprintf(&name[i], "%.*s%s",
					     (int)(n - nl - 1), eq + 1, t + nl);
			else
				rc = asprintf(&name[i], "%s",
					      how == 2 ? t + nl + 1 : t);
			rc = rc < 0 ? -ENOMEM : 0;
		}
		if (!any && !rc)
			rc = selects_nothing(s, w, n, nl, err);
	}
	for (size_t i = 0; i < s->ntensors && !rc; i++)
		for (size_t j = i + 1; name[i] && j < s->ntensors && !rc; j++)
			if (name[j] && !strcmp(name[i], name[j]))
				rc = same_name(s, fields, item[i], item[j],
					       name[i], err);
	return rc;
}

int bfs_source_select(struct bfs_source *s, const char *fields,
		      struct bfs_error *err)
{
	size_t nt = s->ntensors;
	char **name = calloc(nt + 1, sizeof(*name));
	size_t *item = calloc(nt + 1, sizeof(*item));
	int rc =
	    name && item ? select_names(s, fields, name, item, err) : -ENOMEM;

	for (size_t i = 0; i < nt && !rc; i++) {
		struct bfs_source_tensor *t = &s->tensors[i];

		t->left_out = !name[i];
		if (t->left_out)
			continue;
		if (strlen(name[i]) > strlen(t->name))
			s->meta_bytes += strlen(name[i]) - strlen(t->name);
		free(t->name);
		t->name = name[i];
		name[i] = NULL;
	}
	for (size_t i = 0; name && i < nt; i++)
		free(name[i]); /* NULL but after an error */
	free(name);
	free(item);
	return rc;
}

void bfs_source_close(struct bfs_source *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->ntensors; i++) {
		free(s->tensors[i].name);
		free(s->tensors[i].store);
	}
	free(s->tensors);
	for (size_t i = 0; i < s->nmeta; i++) {
		free(s->meta[i].key);
		free(s->meta[i].json);
		free(s->meta[i].what);
	}
	free(s->meta);
	for (size_t i = 0; i < s->nfiles; i++) {
		struct bfs_source_file *f = &s->files[i];

		if (f->owned && f->map)
			munmap((void *)f->map, (size_t)f->size);
		if (f->owned && f->fd >= 0)
			close(f->fd);
		free(f->path);
	}
	free(s->files);
	bfs_pickle_result_free(&s->pk);
	bfs_zip_close(s->zip);
	free(s->path);
	free(s);
}

int bfs_source_group(const char *const *paths, size_t n,
		     struct bfs_source_part **parts, size_t **first,
		     size_t *nsources, struct bfs_error *err)
{
	return bfs_source_group_in(paths, n, NULL, parts, first, nsources, err);
}

/* The tensor name a .npy path gives (a URL's: from its name for users,
 * without its query). */
static const char *npy_name(const char *path, char *buf, size_t len)
{
	char shown[1024];

	return bfs_source_npy_name(
	    bfs_source_path_shown(shown, sizeof(shown), path), buf, len);
}

int bfs_source_group_in(const char *const *paths, size_t n,
			struct bfs_objects *objects,
			struct bfs_source_part **parts, size_t **first,
			size_t *nsources, struct bfs_error *err)
{
	struct bfs_source_part *p = calloc(n ? n : 1, sizeof(*p));
	size_t *f = calloc(n + 1, sizeof(*f)), ns = 0, run = 0;
	char a[256], b[256];
	int rc = 0;

	if (!p || !f) {
		rc = -ENOMEM;
		goto err_free;
	}
	for (size_t i = 0; i < n; i++) {
		struct bfs_source_found at;
		bool again = false;

		p[i].path = paths[i];
		rc = bfs_source_find(objects, paths[i], &at, err);
		if (rc)
			goto err_free;
		if (!at.dir && at.kind == BFS_SOURCE_NPY && run) {
			npy_name(paths[i], a, sizeof(a));
			for (size_t j = i - run; j < i && !again; j++)
				again = !strcmp(
				    a, npy_name(paths[j], b, sizeof(b)));
			if (!again) { /* same shard as the previous .npy */
				run++;
				continue;
			}
		}
		f[ns++] = i;
		run = !at.dir && at.kind == BFS_SOURCE_NPY ? 1 : 0;
	}
	f[ns] = n;
	*parts = p;
	*first = f;
	*nsources = ns;
	return 0;
err_free:
	free(p);
	free(f);
	return rc;
}
