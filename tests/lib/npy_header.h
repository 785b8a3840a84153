/* tests/lib/npy_header: numpy's .npy header, written for tests (the
 * product only reads them: fs/npy). */
#ifndef BFS_TESTS_NPY_HEADER_H
#define BFS_TESTS_NPY_HEADER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "fs/dtype.h"

/* Write numpy's header for a little-endian C-order array of 'dtype' and
 * 'shape[ndim]' into buf[cap], padded with spaces and '\n' so that the data
 * starts at a multiple of 'align' (64 = numpy's ARRAY_ALIGN; 4096 for
 * page-aligned data). Returns the header length (= data offset) or
 * -EINVAL (dtype without a numpy descr) / -ENOSPC (cap too small). */
ssize_t ta_npy_header(char *buf, size_t cap, enum bfs_dtype dtype, int ndim,
		      const int64_t *shape, size_t align);

/* A .npy file at 'path': that header (data at a multiple of 'align')
 * and the array's 'bytes' bytes of 'data'. 0 or -errno. */
int ta_npy_write(const char *path, enum bfs_dtype dtype, int ndim,
		 const int64_t *shape, const void *data, size_t bytes,
		 size_t align);

#endif
