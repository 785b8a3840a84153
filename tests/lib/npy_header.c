/* tests/lib/npy_header: numpy's .npy header (npy_header.h). */
#include "tests/lib/npy_header.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

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
