/* tests/lib/npy_header: numpy's .npy header (npy_header.h). */
#include "tests/lib/npy_header.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

ssize_t ta_npy_header(char *buf, size_t cap, enum bfs_dtype dtype, int ndim,
		      const int64_t *shape, size_t align)
{
	const struct bfs_dtype_info *di = bfs_dtype_info(dtype);
	char dict[BFS_MAX_DIMS * 24 + 128];
	size_t n, total;
	int k;

	if (!di || !di->numpy_descr || ndim < 0 || ndim > BFS_MAX_DIMS ||
	    !align)
		return -EINVAL;
	k = snprintf(dict, sizeof(dict),
		     "{'descr': '%s', 'fortran_order': False, 'shape': (",
		     di->numpy_descr);
	for (int d = 0; d < ndim; d++)
		k += snprintf(dict + k, sizeof(dict) - (size_t)k, "%s%" PRId64,
			      d ? ", " : "", shape[d]);
	k += snprintf(dict + k, sizeof(dict) - (size_t)k, "%s), }",
		      ndim == 1 ? "," : "");
	n = (size_t)k;
	/* magic(6) + version(2) + u16 length(2) + dict + spaces + '\n' */
	total = (10 + n + 1 + align - 1) / align * align;
	if (total - 10 > 0xFFFF || total > cap)
		return -ENOSPC;
	memcpy(buf, "\x93NUMPY", 6);
	buf[6] = 1;
	buf[7] = 0;
	buf[8] = (char)((total - 10) & 0xFF);
	buf[9] = (char)((total - 10) >> 8);
	memcpy(buf + 10, dict, n);
	memset(buf + 10 + n, ' ', total - 10 - n - 1);
	buf[total - 1] = '\n';
	return (ssize_t)total;
}

int ta_npy_write(const char *path, enum bfs_dtype dtype, int ndim,
		 const int64_t *shape, const void *data, size_t bytes,
		 size_t align)
{
	size_t cap = 65536 + align;
	char *hdr = malloc(cap);
	ssize_t n =
	    hdr ? ta_npy_header(hdr, cap, dtype, ndim, shape, align) : -ENOMEM;
	int fd = n < 0 ? -1 : open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	int rc = n < 0 ? (int)n : fd < 0 ? -errno : 0;

	if (rc == 0 && (write(fd, hdr, (size_t)n) != n ||
			write(fd, data, bytes) != (ssize_t)bytes))
		rc = -EIO;
	if (fd >= 0 && close(fd) < 0 && rc == 0)
		rc = -errno;
	free(hdr);
	return rc;
}
