/* fs/npy: the NumPy .npy header (format versions 1-3; fs/README.md:
 * sources), parsed from untrusted bytes and written in numpy's own layout.
 *
 * Only what batchfs needs: one array, a dtype batchfs knows (fs/dtype.h),
 * C or Fortran order (the caller says whether it can use the latter). The
 * data that follows the header is the caller's business (it may be
 * larger than RAM: callers map it or read it in pieces). */
#ifndef BFS_NPY_H
#define BFS_NPY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "fs/dtype.h"
#include "fs/error.h"

/* Longest header accepted (numpy's own limit is 10,000 characters). */
#define BFS_NPY_MAX_HEADER 65536

struct bfs_npy {
	enum bfs_dtype dtype;
	int big_endian; /* descr '>': data must be swapped by swap_unit */
	int fortran;	/* fortran_order True: dim 0 varies fastest */
	int ndim;
	int64_t shape[BFS_MAX_DIMS];
	uint64_t data_off;   /* bytes before the data (magic .. header end) */
	uint64_t data_bytes; /* product(shape) * elsize, within 2^63 - 1 */
};

/* Parse the header at the start of [buf, buf+len) ('len' may exceed the
 * header). Refuses, with 'err' naming 'label', the offset and the reason:
 * bad magic/version, a truncated header, object/structured or unknown
 * dtypes, negative shapes, a size past 2^63 - 1 bytes (fs/size's rule).
 * Returns 0, or -EINVAL (-EAGAIN when 'len' is too short to hold the whole
 * header: call again with at least out->data_off bytes). */
int bfs_npy_parse(const uint8_t *buf, size_t len, const char *label,
		  struct bfs_npy *out, struct bfs_error *err);

/* [p, p+len) is one whole .npy file (a file's mapping, an .npz member):
 * its header, then exactly the data the header describes. Returns 0, or
 * -EINVAL with 'err' naming 'label' (a truncated header or data, bytes
 * after the data, and every refusal of bfs_npy_parse). */
int bfs_npy_parse_exact(const uint8_t *p, uint64_t len, const char *label,
			struct bfs_npy *out, struct bfs_error *err);

/* Read and parse the header of the open file 'fd' (from offset 0, with
 * pread; the file position is not used). Also checks that the file holds
 * exactly data_off + data_bytes bytes. Returns 0 or -errno with 'err'. */
int bfs_npy_read_header(int fd, const char *label, struct bfs_npy *out,
			struct bfs_error *err);

/* Reverse the byte order of every 'unit'-byte group of [p, p+bytes) in
 * place (unit = bfs_dtype_info()->swap_unit: the element size, half of it
 * for complex). Used for big-endian .npy data and big-endian archives. */
void bfs_npy_byteswap(void *p, uint64_t bytes, size_t unit);

#endif
