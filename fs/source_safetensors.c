/* fs/source_safetensors: a safetensors file as a source (fs/README.md:
 * sources).
 *
 * The header is validated by fs/safetensors, the same strict parser that
 * reads batch files (schema, UTF-8, offsets tiling the data with no hole,
 * the exact file size). Each entry is a C-contiguous little-endian tensor
 * whose storage is its [begin, end) of the data. A dtype code torch has no
 * dtype for (F8_E8M0, C32, C128 ...) is refused naming the tensor; so is a
 * size that does not fit an int64 (possible only beside a zero size). The
 * file comes opened from fs/source_file; for a remote one, the length
 * and then the header are made present before they are read
 * (bfs_source_ensure). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/safetensors.h"
#include "fs/source_impl.h"

/* Tensor 't' of header 'h' over the data of file 'f'. */
static int add_tensor(struct bfs_source *s, size_t f,
		      const struct bfs_st_header *h,
		      const struct bfs_st_tensor *t, struct bfs_error *err)
{
	struct bfs_source_tensor *st;
	enum bfs_dtype dt = bfs_dtype_from_st(t->dtype);
	int rc;

	if (dt == BFS_DT_INVALID)
		return bfs_error_set(err, -EINVAL, s->path, t->entry_off,
				     "tensor '%s': dtype \"%s\" has no torch "
				     "dtype: batchfs cannot serve it",
				     t->name, t->dtype);
	if (t->ndim > BFS_MAX_DIMS)
		return bfs_error_set(err, -EINVAL, s->path, t->entry_off,
				     "tensor '%s' has %u dims (at most %d)",
				     t->name, t->ndim, BFS_MAX_DIMS);
	rc = bfs_source_tensor_new(s, t->name, "data", &st, err);
	if (rc)
		return rc;
	st->dtype = dt;
	st->ndim = (int)t->ndim;
	for (uint32_t d = 0; d < t->ndim; d++) {
		if (t->shape[d] > (uint64_t)INT64_MAX)
			return bfs_error_set(
			    err, -EOVERFLOW, s->path, t->entry_off,
			    "tensor '%s': size %" PRIu64 " is more than 2^63-1",
			    t->name, t->shape[d]);
		st->size[d] = (int64_t)t->shape[d];
	}
	if (bfs_source_strides(st, 0))
		return bfs_error_set(err, -EOVERFLOW, s->path, t->entry_off,
				     "tensor '%s': strides overflow", t->name);
	st->data = s->files[f].map + h->data_start + t->begin;
	st->data_bytes = t->end - t->begin;
	st->file = f;
	st->store_off = t->entry_off;
	return 0;
}

int bfs_source_load_safetensors(struct bfs_source *s, size_t f,
				struct bfs_error *err)
{
	const struct bfs_source_file *fl = &s->files[f];
	const char *path = fl->path;
	struct bfs_st_header *h = NULL;
	struct bfs_st_error e = {0};
	int rc;

	/* its length, checked before anything of its size is fetched or
	 * allocated, then its header (fetched, for a remote file) */
	rc = bfs_source_ensure(s, f, 0, 8, err);
	if (rc == 0 && fl->size >= 8) {
		uint64_t n = 0;

		if (bfs_st_header_len(fl->map, fl->size, &n, &e) == 0)
			rc = bfs_source_ensure(s, f, 0, 8 + n, err);
	}
	if (rc)
		return rc;
	if (e.reason[0]) /* the length's refusal */
		return bfs_error_set(err, -EINVAL, path, e.offset, "%s",
				     e.reason);
	rc = bfs_st_parse(fl->map, (size_t)fl->size, fl->size, 0, &h, &e);
	if (rc == -ENOMEM)
		return rc;
	if (rc && e.tensor[0])
		return bfs_error_set(err, -EINVAL, path, e.offset,
				     "tensor '%s': %s", e.tensor, e.reason);
	if (rc)
		return bfs_error_set(err, -EINVAL, path, e.offset, "%s",
				     e.reason);
	if (!h->ntensors)
		rc = bfs_error_set(err, -EINVAL, path, BFS_NO_OFFSET,
				   "holds no tensors");
	for (size_t i = 0; i < h->ntensors && !rc; i++)
		rc = add_tensor(s, f, h, &h->tensors[i], err);
	bfs_st_free(h);
	return rc;
}
