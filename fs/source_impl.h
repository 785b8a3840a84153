/* fs/source_impl: what fs/source.c shares with the loaders of each kind
 * (source_torch.c, source_npy.c, source_safetensors.c). Not a public
 * header: nothing outside fs/source*.c includes it. */
#ifndef BFS_SOURCE_IMPL_H
#define BFS_SOURCE_IMPL_H

#include <sys/stat.h>

#include "fs/source.h"
#include "fs/zip.h"

/* Bytes a source's kind is recognised by, at most. */
#define BFS_SOURCE_SNIFF 4096

/* The kind of a file from its first n bytes (source.c's comment). */
enum bfs_source_kind bfs_source_sniff(const uint8_t *b, size_t n);

/* Record what file f is (st: its fstat): identity, times, owner, mode. */
void bfs_source_identify(struct bfs_source_file *f, const struct stat *st);

/* source_remote.c: the object at URL 'url' (opened in os; NULL: a URL is
 * refused, naming it), its kind from its first bytes (fetched and kept).
 * 0 or -errno with 'err'. */
int bfs_source_sniff_url(struct bfs_objects *os, const char *url,
			 enum bfs_source_kind *kind, struct bfs_object **obj,
			 struct bfs_error *err);

/* File f (its path set) is object o's cache file, mapped PROT_NONE:
 * readable only where bfs_source_ensure made it so. 0 or -errno. */
int bfs_source_map_remote(struct bfs_source_file *f, struct bfs_object *o,
			  struct bfs_error *err);

/* Map 'path' read-only as a new file of 's' (or, when mem is not NULL,
 * take [mem, mem+size) as its bytes). Returns the file's index or -errno
 * with 'err'. An empty or non-regular file is refused. */
int bfs_source_map(struct bfs_source *s, const char *path, const uint8_t *mem,
		   uint64_t size, struct bfs_error *err);

/* The ZIP archive at 'path' (or in [mem, mem+size)) of 'kind' as s->zip,
 * its file one of s's (*file): a remote one (s->next_obj) parsed with
 * every range it reads ensured first (fs/zip's io), a local one mapped
 * by fs/zip. 0 or -errno with 'err'. */
int bfs_source_open_zip(struct bfs_source *s, const char *path,
			const uint8_t *mem, uint64_t size,
			enum bfs_zip_kind kind, size_t *file,
			struct bfs_error *err);

/* bfs_source_ensure of n ranges of one file at once (fetched together). */
int bfs_source_ensure_many(struct bfs_source *s, size_t file,
			   const struct bfs_zip_range *r, size_t n,
			   struct bfs_error *err);

/* Let file 'f' of 's' read through 'fd' (a mapping someone else made of
 * it, e.g. the zip's; -1: bytes in memory) and record what the file is
 * now: its identity and times (struct bfs_source_file). 0, or -errno with
 * 'err' (the file changed size since it was mapped). */
int bfs_source_adopt_fd(struct bfs_source *s, size_t f, int fd,
			struct bfs_error *err);

/* A zeroed new tensor at the end of s->tensors (NULL when out of memory),
 * named a copy of 'name' and whose storage is named by 'store' (both
 * copied; at most BFS_MAX_FIELDS tensors, then -E2BIG with 'err'). */
int bfs_source_tensor_new(struct bfs_source *s, const char *name,
			  const char *store, struct bfs_source_tensor **out,
			  struct bfs_error *err);

/* Append metadata entry (key, json, what), all copied, to s->meta.
 * 0 or -ENOMEM. */
int bfs_source_meta_add(struct bfs_source *s, const char *key, const char *json,
			const char *what);

/* source_rows.c: the sample count of s (its fields' most shared first
 * dimension, among the tensors not left_out) into s->samples; every
 * tensor of another first dimension, and every left_out one, leaves
 * s->tensors: the first as metadata (its values read when small), the
 * others dropped. 0 or -errno with 'err' (a tie: naming the fields and
 * the --fields that picks each). */
int bfs_source_rows(struct bfs_source *s, struct bfs_error *err);

/* C-order (fortran 0) or Fortran-order strides, in elements, of a tensor
 * of sizes t->size[0..ndim); strides of an empty tensor are 0 (never
 * used). 0 or -EOVERFLOW (a non-empty tensor's strides past 2^63 - 1:
 * impossible once its bytes fit). */
int bfs_source_strides(struct bfs_source_tensor *t, int fortran);

/* The tensor name of a .npy file: its base name without ".npy", cut to
 * len - 1 bytes (a file name has at most 255). Returns buf. */
const char *bfs_source_npy_name(const char *path, char *buf, size_t len);

/* The loaders: fill 's' (kind, files, tensors and the kind's own fields)
 * from 'path', or from [mem, mem+size) when mem is not NULL. */
int bfs_source_load_torch(struct bfs_source *s, const char *path,
			  const uint8_t *mem, uint64_t size, uint64_t mem_limit,
			  struct bfs_error *err);
int bfs_source_load_npz(struct bfs_source *s, const char *path,
			const uint8_t *mem, uint64_t size,
			struct bfs_error *err);
/* One .npy file as tensor 'name' (NULL: from the file name). */
int bfs_source_load_npy(struct bfs_source *s, const char *path,
			const char *name, const uint8_t *mem, uint64_t size,
			struct bfs_error *err);
/* Every *.npy file of directory 'path', in name order. */
int bfs_source_load_npy_dir(struct bfs_source *s, const char *path,
			    struct bfs_error *err);
int bfs_source_load_safetensors(struct bfs_source *s, const char *path,
				const uint8_t *mem, uint64_t size,
				struct bfs_error *err);

#endif
