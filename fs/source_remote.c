/* fs/source_remote: remote sources (s3://, http://, https://) as files
 * of a source (source.h; fs/README.md: remote sources).
 *
 * A remote file is its object's cache file (fs/remote/object), mapped like a
 * local archive but PROT_NONE: only where bfs_source_ensure fetched the
 * bytes (and keeps them, pinned, while the source is open) is the
 * mapping made readable, page by page. The parsers ask for what they are
 * about to read (fs/zip through its io; the loaders for data.pkl, the
 * small records, .npy and safetensors headers, 0-dim tensors; fs/dataset
 * for ragged offsets), a few ranges at a time, so a mount fetches its
 * structure in a few requests; a parser that reads a byte nobody asked
 * for faults (the mount fails, loudly) instead of reading a hole's zeros
 * as data. A URL's kind is read from its object's first bytes, kept
 * like the rest (bfs_source_sniff_url; without objects a URL is
 * refused). Once the source is open and checked, bfs_source_unguard makes
 * the whole mapping readable and hands it to its object (bfs_object_map:
 * bytes served from memory, a full disk, are laid over it): from then on
 * a row is read only while fs/fetch holds it. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/remote/object.h"
#include "fs/remote/remote.h"
#include "fs/source_impl.h"

int bfs_source_sniff_url(struct bfs_objects *os, const char *url,
			 enum bfs_source_kind *kind, struct bfs_object **obj,
			 struct bfs_error *err)
{
	uint8_t head[BFS_SOURCE_SNIFF];
	struct bfs_cache_range r = {0, BFS_SOURCE_SNIFF};
	char name[1024];
	ssize_t got;
	int rc;

	if (!os)
		return bfs_error_set(
		    err, -EINVAL,
		    bfs_remote_url_display(name, sizeof(name), url),
		    BFS_NO_OFFSET,
		    "a remote source: only batchfs mount reads those "
		    "(copy it here to inspect or pack it)");
	rc = bfs_objects_open(os, url, obj, err);
	if (rc)
		return rc;
	if (r.len > bfs_object_size(*obj))
		r.len = bfs_object_size(*obj);
	rc = bfs_object_keep(*obj, &r, 1, err);
	if (rc)
		return rc;
	got = pread(bfs_object_fd(*obj), head, (size_t)r.len, 0);
	*kind = bfs_source_sniff(head, got > 0 ? (size_t)got : 0);
	return 0;
}

/* A parser that reads a byte it did not ask for faults: it never reads a
 * hole's zeros. */
int bfs_source_map_remote(struct bfs_source_file *f, struct bfs_object *o,
			  struct bfs_error *err)
{
	struct stat st;
	void *m;
	int rc;

	f->remote = o;
	f->owned = true;
	f->size = bfs_object_size(o);
	f->fd = fcntl(bfs_object_fd(o), F_DUPFD_CLOEXEC, 0);
	if (f->fd < 0 || fstat(f->fd, &st) < 0) {
		rc = -errno;
		return bfs_error_set(err, rc, f->path, BFS_NO_OFFSET,
				     "its cache file: %s", strerror(-rc));
	}
	m = mmap(NULL, (size_t)f->size, PROT_NONE, MAP_SHARED, f->fd, 0);
	if (m == MAP_FAILED) {
		rc = -errno;
		return bfs_error_set(err, rc, f->path, BFS_NO_OFFSET,
				     "cannot map its cache file: %s",
				     strerror(-rc));
	}
	f->map = m;
	f->guarded = true;
	bfs_source_identify(f, &st);
	return 0;
}

int bfs_source_ensure_many(struct bfs_source *s, size_t file,
			   const struct bfs_zip_range *r, size_t n,
			   struct bfs_error *err)
{
	struct bfs_source_file *f = &s->files[file];
	struct bfs_cache_range *cr;
	long pgl = sysconf(_SC_PAGESIZE);
	uint64_t pg = pgl > 0 ? (uint64_t)pgl : 4096;
	int rc;

	if (!f->remote || !n)
		return 0;
	cr = malloc(n * sizeof(*cr));
	if (!cr)
		return bfs_error_set(err, -ENOMEM, f->path, BFS_NO_OFFSET,
				     "out of memory");
	for (size_t i = 0; i < n; i++) { /* within the object */
		uint64_t off = r[i].off < f->size ? r[i].off : f->size;

		cr[i].off = off;
		cr[i].len = r[i].len < f->size - off ? r[i].len : f->size - off;
	}
	rc = bfs_object_keep(f->remote, cr, n, err);
	for (size_t i = 0; rc == 0 && f->guarded && i < n; i++) {
		uint64_t a = cr[i].off & ~(pg - 1);
		uint64_t e = (cr[i].off + cr[i].len + pg - 1) & ~(pg - 1);

		if (cr[i].len && mprotect((void *)(f->map + a), (size_t)(e - a),
					  PROT_READ) < 0)
			rc = bfs_error_set(err, -errno, f->path, cr[i].off,
					   "cannot map what was fetched: %s",
					   strerror(errno));
	}
	free(cr);
	return rc;
}

int bfs_source_ensure(struct bfs_source *s, size_t file, uint64_t off,
		      uint64_t len, struct bfs_error *err)
{
	const struct bfs_zip_range r = {off, len};

	return bfs_source_ensure_many(s, file, &r, 1, err);
}

void bfs_source_unguard(struct bfs_source *s)
{
	for (size_t i = 0; s && i < s->nfiles; i++) {
		struct bfs_source_file *f = &s->files[i];

		if (f->guarded &&
		    mprotect((void *)f->map, (size_t)f->size, PROT_READ) == 0)
			f->guarded = false;
		if (f->remote && !f->guarded) /* bytes in memory go there */
			bfs_object_map(f->remote, f->map);
	}
}

/* fs/zip's io over file 'file' of source 's'. */
struct zip_io_arg {
	struct bfs_source *s;
	size_t file;
};

static int zip_ensure(void *arg, const struct bfs_zip_range *r, size_t n,
		      struct bfs_error *err)
{
	struct zip_io_arg *a = arg;

	return bfs_source_ensure_many(a->s, a->file, r, n, err);
}

int bfs_source_open_zip(struct bfs_source *s, const char *path,
			const uint8_t *mem, uint64_t size,
			enum bfs_zip_kind kind, size_t *file,
			struct bfs_error *err)
{
	int rc, f;

	if (!mem && s->next_obj) { /* remote: the file first, then the zip */
		struct zip_io_arg a = {s, 0};
		const struct bfs_zip_io io = {zip_ensure, &a};

		f = bfs_source_map(s, path, NULL, 0, err);
		if (f < 0)
			return f;
		a.file = *file = (size_t)f;
		return bfs_zip_open_io(&s->zip, s->files[f].map,
				       s->files[f].size, path, kind, &io, err);
	}
	rc = mem ? bfs_zip_open_mem_kind(&s->zip, mem, size, path, kind, err)
		 : bfs_zip_open_kind(&s->zip, path, kind, err);
	if (rc)
		return rc;
	f = bfs_source_map(s, path, s->zip->map, s->zip->map_size, err);
	if (f < 0)
		return f;
	*file = (size_t)f;
	/* the zip owns fd and mapping */
	return bfs_source_adopt_fd(s, (size_t)f, s->zip->fd, err);
}
