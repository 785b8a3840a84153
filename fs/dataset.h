/* fs/dataset: one archive, or several with identical fields (shards,
 * concatenated along dim 0), seen as N samples of named fields.
 *
 * Sample i of field f is a C-order little-endian row of
 * field->row_bytes bytes; bfs_dataset_gather() produces rows for any
 * storage offset, view or stride straight from the read-only mappings. */
#ifndef BFS_DATASET_H
#define BFS_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "fs/dtype.h"
#include "fs/error.h"
#include "fs/pickle.h"

struct bfs_zip;

/* Memory a dataset's metadata may take (archive directories, pickle VMs
 * and their results, field tables, bindings): archives that need more
 * are refused at open. */
#define BFS_DATASET_META_BUDGET ((uint64_t)256 << 20)

struct bfs_field {
	char *name;
	enum bfs_dtype dtype;
	int ndim;		     /* per-sample dims (tensor ndim - 1) */
	int64_t shape[BFS_MAX_DIMS]; /* per-sample shape */
	uint64_t row_bytes;	     /* product(shape) * elsize */
};

/* One archive of a dataset, as reported by `batchfs inspect`. */
struct bfs_shard_info {
	const char *path;
	const struct bfs_zip *zip; /* records, offsets, prefix */
	uint64_t first_sample;	   /* global index of its sample 0 */
	uint64_t samples;
	int version;	/* the archive's version record */
	int big_endian; /* byteorder record says "big" */
	enum bfs_container container;
	const struct bfs_pickle_result *pickle; /* tensors as pickled */
};

struct bfs_dataset;

/* Open 'n_paths' archives as one dataset. Every archive must have the same
 * field names, dtypes and per-sample shapes; every field of an archive must
 * have the same dim 0. Big-endian archives are byte-swapped on gather.
 * Returns 0 and sets *out, or -errno with 'err' naming the file, offset and
 * reason (e.g. "field 'labels' has 999 samples, 'images' has 1000").
 * Cost: maps each archive, parses its directory and pickle; no data read. */
int bfs_dataset_open(struct bfs_dataset **out, const char *const *paths,
		     size_t n_paths, struct bfs_error *err);

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

/* Copy samples idx[0..n) of field 'f' into 'dst', row after row
 * (n * row_bytes bytes), converting to C-order little-endian.
 * Thread-safe (read-only). Returns 0, -ERANGE for an index >= samples, or
 * -EIO when an archive shrank, faulted or read short under us (truncated,
 * replaced, an I/O error, a FUSE server's short read), with a log line
 * naming the file and sample (bfs_dataset_fault: where). */
int bfs_dataset_gather(const struct bfs_dataset *ds, size_t f,
		       const uint64_t *idx, size_t n, void *dst);

/* Where row i of field f lies in the archive's read-only mapping, when it
 * can be served as it is stored: C-contiguous and little-endian (no gather
 * conversion). Returns 0 and sets *ptr (row_bytes bytes; any pointer when
 * row_bytes is 0), -ENOTSUP when the row needs bfs_dataset_gather (strided
 * view, big-endian archive with multi-byte elements), -ERANGE when
 * i >= samples, -EINVAL for a bad f. Cost: O(log shards), no I/O.
 * The bytes are the live mapping: touching them raises SIGBUS if the
 * archive was truncated under us. Call bfs_dataset_check first and only
 * let the kernel read them (a writev: a fault there is EFAULT). */
int bfs_dataset_row(const struct bfs_dataset *ds, size_t f, uint64_t i,
		    const void **ptr);

/* 0 when every archive holding samples idx[0..n) still has at least its
 * mapped size, -EIO (with a log line naming the file and sample) when one
 * shrank (truncated or replaced on disk). One fstat per archive touched. */
int bfs_dataset_check(const struct bfs_dataset *ds, const uint64_t *idx,
		      size_t n);

/* Where the archive could not be read, for a log line that names it. */
struct bfs_dataset_fault {
	const char *path; /* the archive (lives as long as the dataset) */
	uint64_t sample;  /* the sample being read */
	uint64_t offset;  /* archive byte offset of the fault (SIGBUS) or
			   * where the file now ends; BFS_NO_OFFSET: unknown */
};

/* 0 and *out when the calling thread's last bfs_dataset_gather or
 * bfs_dataset_check returned -EIO; -ENOENT otherwise. Per thread, like
 * errno; valid until that thread's next gather or check. */
int bfs_dataset_fault(struct bfs_dataset_fault *out);

/* Advise the kernel that samples idx[0..n) of every field will be read
 * soon (madvise MADV_WILLNEED on their pages). Best effort, never fails. */
void bfs_dataset_advise(const struct bfs_dataset *ds, const uint64_t *idx,
			size_t n);

#endif
