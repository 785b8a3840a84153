/* fs/source_npy: .npy files, directories of them, and numpy.savez .npz
 * files as sources (fs/README.md: sources).
 *
 * A .npy file (or an npz member, which is a .npy file stored in the ZIP)
 * is one tensor: its header is parsed by fs/npy, and the data must fill the
 * rest of the file exactly, as numpy writes it. Fortran order becomes
 * Fortran strides (dim 0 fastest), so the gather reads it transposed into
 * C order; a '>' descr marks the tensor big-endian (swapped on gather).
 * npz members are found through fs/zip in its npz mode: stored only (a
 * savez_compressed file is refused with advice), ZIP64 or not. Each
 * file comes opened from fs/source_file (an npz's ZIP with it), but a
 * directory's, which are opened here one by one. For a remote file, the
 * headers are made present before they are parsed, all of an npz's at
 * once: their fixed parts, then the whole headers (need_headers;
 * bfs_source_ensure). */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fs/npy.h"
#include "fs/source_impl.h"
#include "fs/zip.h"

const char *bfs_source_npy_name(const char *path, char *buf, size_t len)
{
	const char *b = strrchr(path, '/');
	size_t n;

	b = b ? b + 1 : path;
	n = strlen(b);
	if (n > 4 && !strcmp(b + n - 4, ".npy"))
		n -= 4;
	if (n >= len)
		n = len - 1;
	memcpy(buf, b, n);
	buf[n] = 0;
	return buf;
}

/* Tensor 'name' from the .npy bytes [p, p+len) in file 'file' ('label'
 * names them in refusals, offsets relative to p). */
static int npy_tensor(struct bfs_source *s, size_t file, const uint8_t *p,
		      uint64_t len, const char *label, const char *name,
		      struct bfs_error *err)
{
	struct bfs_source_tensor *t;
	struct bfs_npy h;
	char *store = NULL;
	int rc = bfs_npy_parse_exact(p, len, label, &h, err);

	if (rc)
		return rc;
	if (asprintf(&store, "'%s'", label) < 0)
		return -ENOMEM;
	rc = bfs_source_tensor_new(s, name, store, &t, err);
	free(store);
	if (rc)
		return rc;
	t->dtype = h.dtype;
	t->ndim = h.ndim;
	memcpy(t->size, h.shape, (size_t)h.ndim * sizeof(*t->size));
	if (bfs_source_strides(t, h.fortran))
		return bfs_error_set(err, -EOVERFLOW, label, 0,
				     "strides overflow");
	t->data = p + h.data_off;
	t->data_bytes = h.data_bytes;
	t->store_off = (uint64_t)(t->data - s->files[file].map);
	t->file = file;
	t->big_endian = h.big_endian != 0;
	return 0;
}

/* The .npy headers of n arrays of file f (array i: bytes [r[i].off, +
 * r[i].len)) readable, for a remote file fetched together: their fixed
 * part (magic, version, header length), then each whole header, unless
 * its length is past BFS_NPY_MAX_HEADER (fs/npy refuses it then, with
 * the offset: nothing of its size is fetched). Nothing of the data. 0 or
 * -errno with 'err'. */
static int need_headers(struct bfs_source *s, size_t f,
			const struct bfs_zip_range *r, size_t n,
			struct bfs_error *err)
{
	struct bfs_zip_range *h = calloc(n ? n : 1, sizeof(*h));
	int rc;

	if (!h)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		h[i] = (struct bfs_zip_range){r[i].off,
					      r[i].len < 12 ? r[i].len : 12};
	rc = bfs_source_ensure_many(s, f, h, n, err);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		const uint8_t *p = s->files[f].map + r[i].off;
		uint64_t end = 12;

		if (h[i].len >= 10 && p[6] == 1)
			end = 10 + (uint64_t)(p[8] | p[9] << 8);
		else if (h[i].len >= 12)
			end = 12 + ((uint64_t)p[8] | (uint64_t)p[9] << 8 |
				    (uint64_t)p[10] << 16 |
				    (uint64_t)p[11] << 24);
		if (end > 12 + (uint64_t)BFS_NPY_MAX_HEADER)
			end = 12;
		h[i].len = end < r[i].len ? end : r[i].len;
	}
	if (rc == 0)
		rc = bfs_source_ensure_many(s, f, h, n, err);
	free(h);
	return rc;
}

int bfs_source_load_npy(struct bfs_source *s, size_t f, const char *name,
			struct bfs_error *err)
{
	const struct bfs_source_file *fl = &s->files[f];
	char stem[256];
	int rc;

	if (!name)
		name = bfs_source_npy_name(fl->path, stem, sizeof(stem));
	rc = need_headers(s, f, &(struct bfs_zip_range){0, fl->size}, 1, err);
	if (rc)
		return rc;
	return npy_tensor(s, f, fl->map, fl->size, fl->path, name, err);
}

/* The local .npy file at 'path' opened and loaded, its tensor named after
 * it. */
static int load_npy_path(struct bfs_source *s, const char *path,
			 struct bfs_error *err)
{
	const struct bfs_source_found at = {.path = path,
					    .kind = BFS_SOURCE_NPY};
	int f = bfs_source_file_open(s, &at, err);

	return f < 0 ? f : bfs_source_load_npy(s, (size_t)f, NULL, err);
}

static int by_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int bfs_source_load_npy_dir(struct bfs_source *s, const char *path,
			    struct bfs_error *err)
{
	DIR *d = opendir(path);
	struct dirent *de;
	char **names = NULL, *full = NULL;
	size_t n = 0, cap = 0;
	int rc = 0;

	if (!d) {
		rc = -errno;
		return bfs_error_set(err, rc, path, BFS_NO_OFFSET,
				     "cannot open directory: %s",
				     strerror(-rc));
	}
	while ((de = readdir(d)) && !rc) {
		size_t len = strlen(de->d_name);

		if (len <= 4 || strcmp(de->d_name + len - 4, ".npy"))
			continue;
		if (n == cap) {
			char **nn =
			    realloc(names, (cap = cap * 2 + 16) * sizeof(*nn));
			if (!nn) {
				rc = -ENOMEM;
				break;
			}
			names = nn;
		}
		if (!(names[n] = strdup(de->d_name)))
			rc = -ENOMEM;
		else
			n++;
	}
	closedir(d);
	if (!rc && !n)
		rc = bfs_error_set(err, -EINVAL, path, BFS_NO_OFFSET,
				   "directory holds no .npy files");
	if (!rc)
		qsort(names, n, sizeof(*names), by_str);
	for (size_t i = 0; i < n && !rc; i++) {
		if (asprintf(&full, "%s/%s", path, names[i]) < 0) {
			rc = -ENOMEM;
			break;
		}
		rc = load_npy_path(s, full, err);
		free(full);
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return rc;
}

int bfs_source_load_npz(struct bfs_source *s, size_t f, struct bfs_error *err)
{
	const char *path = s->files[f].path;
	struct bfs_zip_range *h = malloc(s->zip->n_entries * sizeof(*h));
	int rc = h ? 0 : -ENOMEM;

	for (size_t i = 0; rc == 0 && i < s->zip->n_entries; i++)
		h[i] = (struct bfs_zip_range){s->zip->entries[i].data_off,
					      s->zip->entries[i].size};
	if (rc == 0) /* every member's header, fetched together */
		rc = need_headers(s, f, h, s->zip->n_entries, err);
	free(h);
	if (rc)
		return rc;
	for (size_t i = 0; i < s->zip->n_entries && !rc; i++) {
		const struct bfs_zip_entry *e = &s->zip->entries[i];
		size_t len = strlen(e->name);
		char *label = NULL, *name;

		s->meta_bytes += sizeof(*e) + len + 1;
		if (len <= 4 || strcmp(e->name + len - 4, ".npy"))
			return bfs_error_set(err, -EINVAL, path, e->lfh_off,
					     "member '%s' is not a .npy array "
					     "(an .npz holds NAME.npy members)",
					     e->name);
		name = strndup(e->name, len - 4);
		if (!name || asprintf(&label, "%s:%s", path, e->name) < 0) {
			free(name);
			return -ENOMEM;
		}
		rc = npy_tensor(s, f, bfs_zip_data(s->zip, e), e->size, label,
				name, err);
		free(label);
		free(name);
	}
	return rc;
}
