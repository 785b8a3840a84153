/* fs/source_impl: what the rooms of the sources share: the opener
 * (source_file.c, the one that knows a URL), what every kind shares
 * (source.c, source_rows.c) and the loaders of each kind (source_torch.c,
 * source_npy.c, source_safetensors.c), which take a file the opener
 * opened. Not a public header: nothing outside fs/source*.c includes it. */
#ifndef BFS_SOURCE_IMPL_H
#define BFS_SOURCE_IMPL_H

#include "fs/source.h"
#include "fs/zip.h"

/* ---- source_file.c: the opener, the one room of the sources that
 * knows a URL; the loaders take the files it opened by their index. */

/* What a part's path names, found by its first bytes (bfs_source_find),
 * and what bfs_source_file_open opens. */
struct bfs_source_found {
	const char *path;	   /* its name: the path, or a URL's object's */
	bool dir;		   /* a directory (nothing else is set) */
	enum bfs_source_kind kind; /* by its first bytes */
	struct bfs_object *obj;	   /* a URL's object, opened (NULL: local) */
	const uint8_t *mem;	   /* bytes in memory (NULL: a path) */
	uint64_t size;		   /* of them */
};

/* What 'path' names into *out: a directory, or a file and its kind (a
 * URL's object opened in os, its first bytes fetched and kept; NULL os:
 * a URL is refused, naming it). 0 or -errno with 'err' (a path that
 * cannot be opened). */
int bfs_source_find(struct bfs_objects *os, const char *path,
		    struct bfs_source_found *out, struct bfs_error *err);

/* The same for the bytes [buf, buf + size) named 'label'. */
void bfs_source_find_mem(struct bfs_source_found *out, const uint8_t *buf,
			 uint64_t size, const char *label);

/* The file 'at' (not a directory) opened as a new file of s, named
 * at->path and mapped read-only whole: a local file by fs/zip for a ZIP
 * kind (torch, npz: the archive parsed as s->zip, every range it reads
 * ensured first for a remote one), else here (an empty or non-regular
 * file refused); a URL's object's cache file mapped PROT_NONE but for
 * what bfs_source_ensure makes readable; bytes in memory as they are.
 * The file's index in s->files, or -errno with 'err'. */
int bfs_source_file_open(struct bfs_source *s,
			 const struct bfs_source_found *at,
			 struct bfs_error *err);

/* The name of 'path' for users: a URL without its query and
 * user:password (into buf), else the path itself. */
const char *bfs_source_path_shown(char *buf, size_t len, const char *path);

/* bfs_source_ensure of n ranges of one file at once (fetched together). */
int bfs_source_ensure_many(struct bfs_source *s, size_t file,
			   const struct bfs_zip_range *r, size_t n,
			   struct bfs_error *err);

/* ---- source.c: what every kind shares --------------------------------- */

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

/* The loaders: fill 's' (kind, tensors and the kind's own fields) from
 * its file 'file', opened by bfs_source_file_open (a torch archive's or
 * an npz's ZIP in s->zip); refusals name the file by its path. */
int bfs_source_load_torch(struct bfs_source *s, size_t file, uint64_t mem_limit,
			  struct bfs_error *err);
int bfs_source_load_npz(struct bfs_source *s, size_t file,
			struct bfs_error *err);
/* One .npy file as tensor 'name' (NULL: from the file name). */
int bfs_source_load_npy(struct bfs_source *s, size_t file, const char *name,
			struct bfs_error *err);
/* Every *.npy file of directory 'path', in name order, each opened by
 * bfs_source_file_open. */
int bfs_source_load_npy_dir(struct bfs_source *s, const char *path,
			    struct bfs_error *err);
int bfs_source_load_safetensors(struct bfs_source *s, size_t file,
				struct bfs_error *err);

#endif
