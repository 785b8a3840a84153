/* fs/dataset: one source, or several with identical fields (shards,
 * concatenated along dim 0), seen as N samples of named fields. A source
 * is a torch.save archive, an .npz, .npy files or a safetensors file
 * (fs/source.h); shards of different kinds mix.
 *
 * Sample i of a fixed field f is a C-order little-endian row of
 * field->row_bytes bytes; bfs_dataset_gather() produces rows for any
 * storage offset, view, stride, Fortran order or byte order straight from
 * the read-only mappings.
 *
 * A ragged field NAME is a pair of tensors NAME.values ([total, ...]) and
 * NAME.offsets (int64 [n + 1], offsets[0] = 0, never decreasing,
 * offsets[n] = total): sample i is rows offsets[i] .. offsets[i+1] of
 * NAME.values, a variable number of rows of row_bytes bytes each
 * (fs/README.md: ragged fields). Its offsets are checked at open. */
#ifndef BFS_DATASET_H
#define BFS_DATASET_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/dtype.h"
#include "fs/error.h"
#include "fs/pickle.h"
#include "fs/source.h"

struct bfs_zip;

/* Memory a dataset's metadata may take (archive directories, pickle VMs
 * and their results, field tables, bindings): archives that need more
 * are refused at open. */
#define BFS_DATASET_META_BUDGET ((uint64_t)256 << 20)

struct bfs_field {
	char *name;
	enum bfs_dtype dtype;
	int ndim;		     /* per-row dims (tensor ndim - 1) */
	int64_t shape[BFS_MAX_DIMS]; /* per-row shape */
	uint64_t row_bytes;	     /* product(shape) * elsize */
	/* A ragged field (NAME.values + NAME.offsets): a sample is a
	 * variable number of rows; 'shape' is one row of NAME.values. */
	bool ragged;
	uint64_t max_len; /* ragged: the most rows one sample has */
	uint64_t total;	  /* ragged: rows of NAME.values, all shards */
};

/* One shard of a dataset, as reported by `batchfs inspect`. */
struct bfs_shard_info {
	const char *path;
	const struct bfs_source *source; /* kind, files, tensors */
	const struct bfs_zip *zip; /* torch, npz: records, offsets, prefix */
	uint64_t first_sample;	   /* global index of its sample 0 */
	uint64_t samples;
	int version;		      /* torch: the archive's version record */
	int big_endian;		      /* torch: byteorder record says "big" */
	enum bfs_container container; /* torch; DICT for other kinds */
	const struct bfs_pickle_result *pickle; /* torch, else NULL */
};

struct bfs_dataset;

/* Open the sources named by 'n_paths' paths (grouped into shards by
 * bfs_source_group: a run of .npy files is one shard) as one dataset.
 * Every shard must have the same field names, dtypes and per-row shapes;
 * every fixed field of a shard the same dim 0, and every ragged field
 * offsets with one entry more; ragged offsets must start at 0, never
 * decrease and end at the values' rows (a refusal names the field and the
 * first bad index). Big-endian data is byte-swapped on gather.
 * Returns 0 and sets *out, or -errno with 'err' naming the file, offset and
 * reason (e.g. "field 'labels' has 999 samples, 'images' has 1000").
 * Cost: maps each file, parses its headers, reads ragged offsets once. */
int bfs_dataset_open(struct bfs_dataset **out, const char *const *paths,
		     size_t n_paths, struct bfs_error *err);

/* bfs_dataset_open with only the fields 'fields' selects in every shard
 * (NAME[,NAME...]; NULL: all; bfs_source_select says how names and
 * dicts of them select). */
int bfs_dataset_open_select(struct bfs_dataset **out, const char *const *paths,
			    size_t n_paths, const char *fields,
			    struct bfs_error *err);

/* bfs_dataset_open_select where a path may be a URL (s3://, http://,
 * https://), opened in 'objects' (fs/remote/object; NULL: refused): only the
 * structure of each is fetched, and kept (fs/source). A remote file's
 * rows are there only while fs/fetch holds them: bfs_dataset_row
 * refuses them (-EAGAIN) until the object is sealed, and the gathers'
 * size and mtime checks leave them to the version pinned by fs/remote. */
int bfs_dataset_open_in(struct bfs_dataset **out, const char *const *paths,
			size_t n_paths, const char *fields,
			struct bfs_objects *objects, struct bfs_error *err);

/* The same over 'nsources' explicit sources: source i is made of
 * parts[first[i]] .. parts[first[i+1]] (bfs_source_open). */
int bfs_dataset_open_parts(struct bfs_dataset **out,
			   const struct bfs_source_part *parts,
			   const size_t *first, size_t nsources,
			   struct bfs_error *err);

/* Free everything; accepts NULL and half-built objects. */
void bfs_dataset_close(struct bfs_dataset *ds);

uint64_t bfs_dataset_samples(const struct bfs_dataset *ds);
size_t bfs_dataset_nfields(const struct bfs_dataset *ds);
/* Field 'i' in archive order (0 <= i < nfields). */
const struct bfs_field *bfs_dataset_field(const struct bfs_dataset *ds,
					  size_t i);
size_t bfs_dataset_nshards(const struct bfs_dataset *ds);
/* Shard 'i' (0 <= i < nshards); pointers live as long as 'ds'. */
void bfs_dataset_shard(const struct bfs_dataset *ds, size_t i,
		       struct bfs_shard_info *out);

/* Copy samples idx[0..n) of fixed field 'f' into 'dst', row after row
 * (n * row_bytes bytes), converting to C-order little-endian.
 * Thread-safe (read-only). Returns 0, -ERANGE for an index >= samples,
 * -EINVAL for a bad or ragged f, or -EIO when an archive shrank, faulted or
 * read short under us (truncated, replaced, an I/O error, a FUSE server's
 * short read), with a log line naming the file and sample
 * (bfs_dataset_fault: where). */
int bfs_dataset_gather(const struct bfs_dataset *ds, size_t f,
		       const uint64_t *idx, size_t n, void *dst);

/* Where a sample of a ragged field lies: rows [start, start + len) of
 * NAME.values in the sample's shard. */
struct bfs_span {
	uint64_t start, len;
};

/* The spans of samples idx[0..n) of ragged field 'f', from its offsets
 * (O(n), under the SIGBUS guard). Returns 0, -EINVAL (f not ragged),
 * -ERANGE (an index >= samples) or -EIO when the archive faulted or its
 * offsets changed under us (a span outside the values or longer than
 * max_len: the file was rewritten in place), with a log line. */
int bfs_dataset_spans(const struct bfs_dataset *ds, size_t f,
		      const uint64_t *idx, size_t n, struct bfs_span *spans);

/* Copy the rows of samples idx[0..n) of ragged field 'f' (their spans,
 * from bfs_dataset_spans) into 'dst' as C-order little-endian rows:
 * width 0 packs them back to back (sum of len rows); width > 0 gives each
 * sample 'width' rows (>= every len), the rows after its own filled with
 * the element 'pad' (dtype size bytes, repeated). Returns 0, -EINVAL (bad
 * f, a len > width) or -EIO as bfs_dataset_gather. */
int bfs_dataset_gather_spans(const struct bfs_dataset *ds, size_t f,
			     const uint64_t *idx, const struct bfs_span *spans,
			     size_t n, uint64_t width, const void *pad,
			     void *dst);

/* Where row i of field f lies in the archive's read-only mapping, when it
 * can be served as it is stored: C-contiguous and little-endian (no gather
 * conversion). Returns 0 and sets *ptr (row_bytes bytes; any pointer when
 * row_bytes is 0), -ENOTSUP when the row needs bfs_dataset_gather (strided
 * view, big-endian data with multi-byte elements) or the field is ragged,
 * -ERANGE when i >= samples, -EINVAL for a bad f; -EAGAIN for a row of
 * a remote source not sealed yet (its bytes are there only while fs/fetch
 * holds them; once its object is sealed, 0 as for a local file). Cost:
 * O(log shards).
 * The bytes are the live mapping: touching them raises SIGBUS if the
 * archive was truncated under us. Call bfs_dataset_check first and only
 * let the kernel read them (a writev: a fault there is EFAULT). */
int bfs_dataset_row(const struct bfs_dataset *ds, size_t f, uint64_t i,
		    const void **ptr);

/* 0 when the files holding the rows of samples idx[0..n) (every field)
 * still reach past those rows, -EIO (with a log line naming the file and
 * sample, and the fault record) when one shrank below them (truncated,
 * replaced on disk, read short). One cached-size statx per field and
 * shard touched (an fstat when that looks short). */
int bfs_dataset_check(const struct bfs_dataset *ds, const uint64_t *idx,
		      size_t n);

/* Run fn(arg), which copies the rows of samples idx[0..n) of every fixed
 * field out of the mappings by other means (bfs_dataset_row's pointers
 * handed to pwritev), between the size checks a gather makes: -EIO (with
 * a log line and the fault record) when a file is too short for those
 * rows before fn, or read short while fn ran; else fn's result. fn must
 * not gather. */
int bfs_dataset_copy_checked(const struct bfs_dataset *ds, const uint64_t *idx,
			     size_t n, int (*fn)(void *), void *arg);

/* Where the archive could not be read, for a log line that names it. */
struct bfs_dataset_fault {
	const char *path; /* the archive (lives as long as the dataset) */
	uint64_t sample;  /* the sample being read */
	uint64_t offset;  /* archive byte offset of the fault (SIGBUS) or
			   * where the file now ends; BFS_NO_OFFSET: unknown */
	bool changed;	  /* the file was modified since it was opened */
};

/* 0 and *out when the calling thread's last bfs_dataset_gather or
 * bfs_dataset_check returned -EIO; -ENOENT otherwise. Per thread, like
 * errno; valid until that thread's next gather or check. */
int bfs_dataset_fault(struct bfs_dataset_fault *out);

/* The files the dataset maps, numbered 0 .. nfiles - 1 in shard order
 * (file i lives as long as the dataset). */
size_t bfs_dataset_nfiles(const struct bfs_dataset *ds);
const struct bfs_source_file *bfs_dataset_file(const struct bfs_dataset *ds,
					       size_t i);

/* Bytes of all files (their mapped sizes). */
uint64_t bfs_dataset_bytes(const struct bfs_dataset *ds);

/* Where row i of fixed field f lies: bytes [off, off + len) of file
 * 'file' (bfs_dataset_file), len the bytes the row touches from its start
 * (a strided row's span). For read-ahead: nothing is read. */
struct bfs_extent {
	size_t file;
	uint64_t off, len;
};

/* 0 and *out, -EINVAL (bad or ragged f) or -ERANGE (i >= samples).
 * Cost: O(log shards). */
int bfs_dataset_extent(const struct bfs_dataset *ds, size_t f, uint64_t i,
		       struct bfs_extent *out);

/* The same for the rows of sample i of ragged field f, its span 'sp'
 * (bfs_dataset_spans): the bytes of its values they touch (len 0 for an
 * empty sample). -EINVAL (f not ragged), -ERANGE (i, or a span outside
 * the values). */
int bfs_dataset_span_extent(const struct bfs_dataset *ds, size_t f, uint64_t i,
			    const struct bfs_span *sp, struct bfs_extent *out);

#endif
