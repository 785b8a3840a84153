/* fs/source_torch: a torch.save archive as a source (fs/README.md:
 * torch.save archives).
 *
 * The archive is mapped and parsed by fs/zip (which refuses TorchScript
 * archives), its version and byteorder records are checked, data.pkl is
 * run through the restricted VM of fs/pickle, and every tensor is bound to
 * its storage record "<prefix>/data/<key>", whose size must equal numel x
 * elsize of the storage type exactly (as torch checks). The view's extent
 * within that storage is checked by fs/dataset, for every kind alike. The
 * archive comes opened from fs/source_file, its ZIP parsed (s->zip); for
 * a remote one, the records read here (version, byteorder, data.pkl) are
 * made present together first (need_records; bfs_source_ensure). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/size.h"
#include "fs/source_impl.h"
#include "fs/zip.h"

#define VERSION_MAX 10

/* The bytes of record "<prefix>/<rel>" into *data, *len; 0 or -ENOENT. */
static int record(const struct bfs_zip *z, const char *rel,
		  const uint8_t **data, uint64_t *len)
{
	const struct bfs_zip_entry *e = bfs_zip_find(z, rel);

	if (!e)
		return -ENOENT;
	*data = bfs_zip_data(z, e);
	*len = e->size;
	return 0;
}

/* Decimal digits and an optional final '\n', in 1..VERSION_MAX. */
static int parse_version(const uint8_t *rec, uint64_t len, int *out)
{
	uint64_t n = len && rec[len - 1] == '\n' ? len - 1 : len;
	int v = 0;

	for (uint64_t i = 0; i < n; i++) {
		if (rec[i] < '0' || rec[i] > '9')
			return -EINVAL;
		v = v * 10 + (rec[i] - '0');
		if (v > VERSION_MAX)
			return -EINVAL;
	}
	if (n == 0 || v < 1)
		return -EINVAL;
	*out = v;
	return 0;
}

/* The version record (torch writes "3\n"; it reads versions 1..10) and
 * the byteorder record, which must be exactly "little" or "big" (torch >=
 * 2.1 refuses anything else; absent = little). */
static int check_kind(struct bfs_source *s, struct bfs_error *err)
{
	const struct bfs_zip *z = s->zip;
	const uint8_t *rec;
	uint64_t len;
	char shown[64];
	int rc;

	rc = record(z, "version", &rec, &len);
	if (rc == -ENOENT)
		rc = record(z, ".data/version", &rec, &len);
	if (rc == -ENOENT)
		return bfs_error_set(err, -EINVAL, s->path, BFS_NO_OFFSET,
				     "no 'version' record");
	if (parse_version(rec, len, &s->version) < 0)
		return bfs_error_set(
		    err, -EINVAL, s->path, BFS_NO_OFFSET,
		    "unsupported archive version: version record '%s' "
		    "(batchfs, like torch, reads versions 1..%d)",
		    bfs_error_quote(shown, sizeof(shown), rec,
				    len && rec[len - 1] == '\n' ? len - 1
								: len),
		    VERSION_MAX);
	rc = record(z, "byteorder", &rec, &len);
	if (rc == -ENOENT || (len == 6 && !memcmp(rec, "little", 6)))
		return 0;
	if (len == 3 && !memcmp(rec, "big", 3)) {
		s->big_endian = true;
		return 0;
	}
	return bfs_error_set(err, -EINVAL, s->path, BFS_NO_OFFSET,
			     "byteorder record '%s' (%" PRIu64
			     " bytes) is neither 'little' nor 'big'",
			     bfs_error_quote(shown, sizeof(shown), rec, len),
			     len);
}

/* Heap of a parsed archive: its record table and names. */
static uint64_t zip_bytes(const struct bfs_zip *z)
{
	uint64_t n = sizeof(*z);

	for (size_t i = 0; i < z->n_entries; i++)
		n += sizeof(z->entries[i]) + sizeof(size_t) +
		     strlen(z->entries[i].name) + 1;
	return n;
}

/* Heap of a pickle result: its tensor table and names. */
static uint64_t pickle_bytes(const struct bfs_pickle_result *pk)
{
	uint64_t n = pk->n_tensors * sizeof(*pk->tensors);

	for (size_t i = 0; i < pk->n_tensors; i++)
		n += strlen(pk->tensors[i].name) +
		     strlen(pk->tensors[i].storage_key) + 2;
	return n;
}

/* Tensor 't' over its storage record "data/<key>": the record must hold
 * exactly the storage the pickle declared (as torch checks). */
static int bind_storage(struct bfs_source *s, const struct bfs_pickle_tensor *t,
			struct bfs_error *err)
{
	const struct bfs_dtype_info *di = bfs_dtype_info(t->dtype);
	const struct bfs_dtype_info *si = bfs_dtype_info(t->storage_dtype);
	const struct bfs_zip_entry *e;
	struct bfs_source_tensor *st;
	uint64_t nbytes;
	char *rel = NULL, *store = NULL;
	int rc;

	if (!di || !si ||
	    (t->storage_dtype != t->dtype && t->storage_dtype != BFS_DT_UINT8))
		return bfs_error_set(err, -EINVAL, s->path, BFS_NO_OFFSET,
				     "field '%s': unsupported dtype/storage",
				     t->name);
	if (asprintf(&rel, "data/%s", t->storage_key) < 0)
		return -ENOMEM;
	e = bfs_zip_find(s->zip, rel);
	free(rel);
	if (!e)
		return bfs_error_set(
		    err, -EINVAL, s->path, BFS_NO_OFFSET,
		    "field '%s': storage record '%s/data/%s' missing", t->name,
		    s->zip->prefix, t->storage_key);
	if (bfs_size_mul(t->storage_numel, si->size, &nbytes) ||
	    nbytes != e->size)
		return bfs_error_set(err, -EINVAL, s->path, e->lfh_off,
				     "field '%s': record '%s' has %" PRIu64
				     " bytes, storage needs %" PRIu64 " x %zu",
				     t->name, e->name, e->size,
				     t->storage_numel, si->size);
	if (asprintf(&store, "record '%s'", e->name) < 0)
		return -ENOMEM;
	rc = bfs_source_tensor_new(s, t->name, store, &st, err);
	free(store);
	if (rc)
		return rc;
	st->dtype = t->dtype;
	st->ndim = t->ndim;
	memcpy(st->size, t->size, sizeof(st->size));
	memcpy(st->stride, t->stride, sizeof(st->stride));
	st->offset = t->offset;
	st->data = bfs_zip_data(s->zip, e);
	st->data_bytes = e->size;
	st->big_endian = s->big_endian;
	st->store_off = e->lfh_off;
	return 0;
}

/* The records read here (the version and byteorder records, data.pkl)
 * readable in file f (fetched at once, for a remote archive); a data.pkl
 * past BFS_PICKLE_MAX is not fetched (bfs_pickle_load refuses it). */
static int need_records(struct bfs_source *s, size_t f, struct bfs_error *err)
{
	static const char *const rels[] = {"version", ".data/version",
					   "byteorder", "data.pkl"};
	struct bfs_zip_range r[4];
	size_t n = 0;

	for (size_t i = 0; i < 4; i++) {
		const struct bfs_zip_entry *e = bfs_zip_find(s->zip, rels[i]);

		if (e && (i < 3 || e->size <= BFS_PICKLE_MAX))
			r[n++] = (struct bfs_zip_range){e->data_off, e->size};
	}
	return bfs_source_ensure_many(s, f, r, n, err);
}

int bfs_source_load_torch(struct bfs_source *s, size_t f, uint64_t mem_limit,
			  struct bfs_error *err)
{
	const char *path = s->files[f].path;
	const struct bfs_zip_entry *pkl;
	uint64_t zb;
	char *label = NULL;
	int rc = need_records(s, f, err);

	if (rc)
		return rc;
	zb = zip_bytes(s->zip);
	if (zb > mem_limit)
		return bfs_error_set(err, -E2BIG, path, BFS_NO_OFFSET,
				     "the archive's directory needs more "
				     "memory than the dataset's metadata "
				     "may take: refused");
	rc = check_kind(s, err);
	if (rc)
		return rc;
	pkl = bfs_zip_find(s->zip, "data.pkl");
	if (!pkl)
		return bfs_error_set(err, -EINVAL, path, BFS_NO_OFFSET,
				     "no '%s/data.pkl' record", s->zip->prefix);
	if (asprintf(&label, "%s:%s", path, pkl->name) < 0)
		return -ENOMEM;
	rc = bfs_pickle_load(bfs_zip_data(s->zip, pkl), pkl->size, label,
			     mem_limit - zb, &s->pk, err);
	free(label);
	if (rc)
		return rc;
	s->meta_bytes += zb + pickle_bytes(&s->pk);
	s->nmeta_dropped = s->pk.n_meta_dropped;
	for (size_t i = 0; i < s->pk.n_meta && !rc; i++)
		rc =
		    bfs_source_meta_add(s, s->pk.meta[i].key,
					s->pk.meta[i].json, s->pk.meta[i].what);
	if (rc)
		return rc;
	for (size_t i = 0; i < s->pk.n_tensors && !rc; i++)
		rc = bind_storage(s, &s->pk.tensors[i], err);
	return rc;
}
