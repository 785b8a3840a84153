/* fs/source_file: a source's files, found and opened (source.h: struct
 * bfs_source_file; fs/README.md: sources, remote sources). The one room
 * of the sources that knows a URL: the loaders (source.c and those of
 * each kind) take a file opened here, by its index in s->files, and never
 * ask where its bytes come from.
 *
 * Finding (bfs_source_find): what a part's path names, by its first bytes
 * (never by its name): "\x93NUMPY" is a .npy file; "PK\3\4" is a ZIP, an
 * npz when its first member's name ends in ".npy" (numpy.savez names
 * every member so; torch.save's first record is "<stem>/data.pkl"), a
 * torch archive otherwise; '{' after an 8-byte length is a safetensors
 * file. Anything else goes to fs/zip, which names what it is instead (a
 * legacy torch.save file, not a ZIP at all). A directory holds .npy
 * files. A URL (s3://, http://, https://) is opened as an object of the
 * set the open was given (fs/remote/object; none: the URL is refused)
 * and its kind read from its first bytes, fetched and kept.
 *
 * Opening (bfs_source_file_open): a local file is mapped read-only whole
 * (a ZIP's by fs/zip, which owns the descriptor and the mapping); bytes
 * in memory are taken as they are. A URL's file is its object's cache
 * file, mapped like a local one but PROT_NONE: only where
 * bfs_source_ensure fetched the bytes (and keeps them, pinned, while the
 * source is open) is the mapping made readable, page by page. The
 * parsers ask for what they are about to read (fs/zip through its io;
 * the loaders for data.pkl, the small records, .npy and safetensors
 * headers, 0-dim tensors; fs/dataset for ragged offsets), a few ranges
 * at a time, so a mount fetches its structure in a few requests; a
 * parser that reads a byte nobody asked for faults (the mount fails,
 * loudly) instead of reading a hole's zeros as data. Once the source is
 * open and checked, bfs_source_unguard makes the whole mapping readable
 * and hands it to its object (bfs_object_map: bytes served from memory,
 * a full disk, are laid over it): from then on a row is read only while
 * fs/fetch holds it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/remote/object.h"
#include "fs/remote/remote.h"
#include "fs/source_impl.h"
#include "fs/zip.h"

/* Bytes a file's kind is recognised by, at most. */
#define SNIFF_BYTES 4096

bool bfs_source_fs_remote(long f_type)
{
	static const long types[] = {
	    0x6969,	/* NFS */
	    0xFF534D42, /* CIFS */
	    0xFE534D42, /* SMB2 */
	    0x517B,	/* SMB */
	    0x65735546, /* FUSE */
	    0x01021997, /* 9P */
	    0x00C36400, /* Ceph */
	    0x5346414F, /* AFS */
	    0x47504653, /* GPFS */
	    0x0BD00BD0, /* Lustre */
	};

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if ((f_type & 0xFFFFFFFF) == types[i])
			return true;
	return false;
}

int bfs_source_reopen(int fd, int flags)
{
	char proc[64];

	if (fd < 0) {
		errno = EBADF;
		return -1;
	}
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	return open(proc, O_RDONLY | O_CLOEXEC | flags);
}

bool bfs_source_path_is_url(const char *path)
{
	return bfs_remote_is_url(path);
}

const char *bfs_source_path_shown(char *buf, size_t len, const char *path)
{
	return bfs_remote_is_url(path) ? bfs_remote_url_display(buf, len, path)
				       : path;
}

/* The kind of a file from its first n bytes (the comment at the top). */
static enum bfs_source_kind sniff(const uint8_t *b, size_t n)
{
	if (n >= 6 && !memcmp(b, "\x93NUMPY", 6))
		return BFS_SOURCE_NPY;
	if (n >= 30 && !memcmp(b, "PK\3\4", 4)) {
		size_t nl = (size_t)(b[26] | b[27] << 8);

		if (nl >= 4 && 30 + nl <= n &&
		    !memcmp(b + 30 + nl - 4, ".npy", 4))
			return BFS_SOURCE_NPZ;
		return BFS_SOURCE_TORCH;
	}
	if (n >= 9 && b[8] == '{')
		return BFS_SOURCE_SAFETENSORS;
	return BFS_SOURCE_TORCH;
}

/* The object at URL 'url' (opened in os; NULL: a URL is refused, naming
 * it) into out, its kind from its first bytes (fetched and kept). 0 or
 * -errno with 'err'. */
static int find_url(struct bfs_objects *os, const char *url,
		    struct bfs_source_found *out, struct bfs_error *err)
{
	uint8_t head[SNIFF_BYTES];
	struct bfs_cache_range r = {0, SNIFF_BYTES};
	struct bfs_object *o;
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
	rc = bfs_objects_open(os, url, &o, err);
	if (rc)
		return rc;
	if (r.len > bfs_object_size(o))
		r.len = bfs_object_size(o);
	rc = bfs_object_keep(o, &r, 1, err);
	if (rc)
		return rc;
	got = pread(bfs_object_fd(o), head, (size_t)r.len, 0);
	out->kind = sniff(head, got > 0 ? (size_t)got : 0);
	out->obj = o;
	out->path = bfs_object_name(o);
	return 0;
}

int bfs_source_find(struct bfs_objects *os, const char *path,
		    struct bfs_source_found *out, struct bfs_error *err)
{
	uint8_t head[SNIFF_BYTES];
	struct stat st;
	ssize_t got;
	int fd, rc;

	*out =
	    (struct bfs_source_found){.path = path, .kind = BFS_SOURCE_TORCH};
	if (bfs_remote_is_url(path))
		return find_url(os, path, out, err);
	if (stat(path, &st) < 0) {
		rc = -errno;
		return bfs_error_set(err, rc, path, BFS_NO_OFFSET,
				     "cannot open: %s", strerror(-rc));
	}
	if (S_ISDIR(st.st_mode)) {
		out->dir = true;
		return 0;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		return bfs_error_set(err, rc, path, BFS_NO_OFFSET,
				     "cannot open: %s", strerror(-rc));
	}
	got = pread(fd, head, sizeof(head), 0);
	close(fd);
	out->kind = sniff(head, got > 0 ? (size_t)got : 0);
	return 0;
}

void bfs_source_find_mem(struct bfs_source_found *out, const uint8_t *buf,
			 uint64_t size, const char *label)
{
	*out = (struct bfs_source_found){
	    .path = label,
	    .kind = sniff(buf, size < SNIFF_BYTES ? (size_t)size : SNIFF_BYTES),
	    .mem = buf,
	    .size = size,
	};
}

/* Record what file f is (st: its fstat): identity, times, owner, mode. */
static void identify(struct bfs_source_file *f, const struct stat *st)
{
	f->mtime = st->st_mtim;
	f->dev = (uint64_t)st->st_dev;
	f->ino = (uint64_t)st->st_ino;
	f->uid = st->st_uid;
	f->gid = st->st_gid;
	f->mode = st->st_mode & 07777;
}

/* A new file of s named 'path', nothing opened yet (fd -1). Its index, or
 * -ENOMEM. */
static int file_new(struct bfs_source *s, const char *path)
{
	struct bfs_source_file *f, *nf;

	nf = realloc(s->files, (s->nfiles + 1) * sizeof(*nf));
	if (!nf)
		return -ENOMEM;
	s->files = nf;
	f = memset(&nf[s->nfiles], 0, sizeof(*f));
	f->fd = -1;
	f->path = strdup(path);
	if (!f->path)
		return -ENOMEM;
	s->nfiles++;
	s->meta_bytes += sizeof(*f) + strlen(path) + 1;
	return (int)(s->nfiles - 1);
}

/* File f, a local path, opened and mapped read-only whole: an empty or
 * non-regular file is refused. 0 or -errno with 'err'. */
static int map_local(struct bfs_source_file *f, struct bfs_error *err)
{
	struct stat st;
	void *m;
	int rc;

	f->fd = open(f->path, O_RDONLY | O_CLOEXEC);
	f->owned = true;
	if (f->fd < 0 || fstat(f->fd, &st) < 0) {
		rc = -errno;
		return bfs_error_set(err, rc, f->path, BFS_NO_OFFSET,
				     "cannot open: %s", strerror(-rc));
	}
	if (!S_ISREG(st.st_mode) || st.st_size == 0)
		return bfs_error_set(
		    err, -EINVAL, f->path, BFS_NO_OFFSET, "%s",
		    S_ISREG(st.st_mode) ? "empty file" : "not a regular file");
	m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, f->fd, 0);
	if (m == MAP_FAILED) {
		rc = -errno;
		return bfs_error_set(err, rc, f->path, BFS_NO_OFFSET,
				     "cannot map: %s", strerror(-rc));
	}
	f->map = m;
	f->size = (uint64_t)st.st_size;
	identify(f, &st);
	return 0;
}

/* File f is object o's cache file, mapped PROT_NONE: readable only where
 * bfs_source_ensure made it so. A parser that reads a byte it did not ask
 * for faults: it never reads a hole's zeros. 0 or -errno with 'err'. */
static int map_remote(struct bfs_source_file *f, struct bfs_object *o,
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
	identify(f, &st);
	return 0;
}

/* Let file 'i' of 's', mapped by its zip, read through the zip's 'fd' (-1:
 * bytes in memory) and record what the file is now: its identity and
 * times. 0, or -errno with 'err' (the file changed size since it was
 * mapped). */
static int adopt_fd(struct bfs_source *s, size_t i, int fd,
		    struct bfs_error *err)
{
	struct bfs_source_file *f = &s->files[i];
	struct stat st;

	f->fd = fd;
	if (fd < 0)
		return 0; /* bytes in memory */
	if (fstat(fd, &st) < 0)
		return bfs_error_set(err, -errno, f->path, BFS_NO_OFFSET,
				     "cannot stat: %s", strerror(errno));
	if ((uint64_t)st.st_size != f->size)
		return bfs_error_set(err, -EIO, f->path, BFS_NO_OFFSET,
				     "changed size while it was opened "
				     "(%llu bytes mapped, %llu now)",
				     (unsigned long long)f->size,
				     (unsigned long long)st.st_size);
	identify(f, &st);
	return 0;
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

/* The ZIP archive 'at' (a torch archive or an npz) as s->zip, its file a
 * new one of s: a remote one mapped first, then parsed with every range
 * it reads ensured first (fs/zip's io), a local one mapped by fs/zip. The
 * file's index or -errno with 'err'. */
static int open_zip(struct bfs_source *s, const struct bfs_source_found *at,
		    struct bfs_error *err)
{
	enum bfs_zip_kind kind =
	    at->kind == BFS_SOURCE_NPZ ? BFS_ZIP_NPZ : BFS_ZIP_TORCH;
	int rc, f;

	if (at->obj) { /* remote: the file first, then the zip */
		struct zip_io_arg a = {s, 0};
		const struct bfs_zip_io io = {zip_ensure, &a};

		f = file_new(s, at->path);
		if (f < 0)
			return f;
		rc = map_remote(&s->files[f], at->obj, err);
		if (rc)
			return rc;
		a.file = (size_t)f;
		rc = bfs_zip_open_io(&s->zip, s->files[f].map, s->files[f].size,
				     at->path, kind, &io, err);
		return rc ? rc : f;
	}
	rc = at->mem ? bfs_zip_open_mem_kind(&s->zip, at->mem, at->size,
					     at->path, kind, err)
		     : bfs_zip_open_kind(&s->zip, at->path, kind, err);
	if (rc)
		return rc;
	f = file_new(s, at->path);
	if (f < 0)
		return f;
	s->files[f].map = s->zip->map;
	s->files[f].size = s->zip->map_size;
	/* the zip owns fd and mapping */
	rc = adopt_fd(s, (size_t)f, s->zip->fd, err);
	return rc ? rc : f;
}

int bfs_source_file_open(struct bfs_source *s,
			 const struct bfs_source_found *at,
			 struct bfs_error *err)
{
	int rc, f;

	if (at->kind == BFS_SOURCE_TORCH || at->kind == BFS_SOURCE_NPZ)
		return open_zip(s, at, err);
	f = file_new(s, at->path);
	if (f < 0)
		return f;
	if (at->mem) { /* the caller's */
		s->files[f].map = at->mem;
		s->files[f].size = at->size;
		return f;
	}
	rc = at->obj ? map_remote(&s->files[f], at->obj, err)
		     : map_local(&s->files[f], err);
	return rc ? rc : f;
}

bool bfs_source_file_sealed(const struct bfs_source_file *f)
{
	return f->remote && bfs_object_sealed(f->remote);
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
		/* An object the cache cannot keep: its pages come and go
		 * with its chunks, and a gather's fault wants one row's
		 * pages, never the readahead around them (in a tight memory
		 * cgroup that readahead pushed out the rows being gathered:
		 * 12x slower). */
		if (f->remote && !f->guarded && !bfs_object_sealable(f->remote))
			madvise((void *)f->map, (size_t)f->size, MADV_RANDOM);
	}
}
