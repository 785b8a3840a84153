/* fs/size: torch's numel and storage-extent rules over fs/size.h's checked
 * arithmetic, and shapes as text for the refusals that quote them.
 *
 * torch (c10/util/safe_numerics.h, TensorImpl::safe_compute_numel) flags a
 * numel overflow when the running product of the sizes wraps 64 bits, even
 * if a later size is 0, and when the product exceeds int64; the storage a
 * view needs (computeStorageNbytes) is 0 when a size is 0, otherwise
 * (offset + 1 + sum (size - 1) * stride) * elsize, every step checked. */
#include "fs/size.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

int bfs_size_prod(const int64_t *size, int n, uint64_t *out)
{
	*out = 1;
	for (int d = 0; d < n; d++)
		if (size[d] == 0) {
			*out = 0;
			return 0;
		}
	for (int d = 0; d < n; d++)
		if (bfs_size_mul(*out, (uint64_t)size[d], out))
			return -EOVERFLOW;
	return 0;
}

int bfs_size_numel(const int64_t *size, int ndim, uint64_t *out)
{
	uint64_t prod = 1;
	bool wrapped = false;

	for (int d = 0; d < ndim; d++)
		wrapped |=
		    __builtin_mul_overflow(prod, (uint64_t)size[d], &prod);
	*out = prod;
	return wrapped || prod > BFS_SIZE_MAX ? -EOVERFLOW : 0;
}

int bfs_size_extent(const int64_t *size, const int64_t *stride, int ndim,
		    uint64_t offset, uint64_t elsize, uint64_t *out)
{
	uint64_t last = offset;

	*out = 0;
	for (int d = 0; d < ndim; d++)
		if (size[d] == 0)
			return 0;
	for (int d = 0; d < ndim; d++)
		if (bfs_size_mul_add((uint64_t)(size[d] - 1),
				     (uint64_t)stride[d], last, &last))
			return -EOVERFLOW;
	return bfs_size_add(last, 1, &last) ? -EOVERFLOW
					    : bfs_size_mul(last, elsize, out);
}

const char *bfs_size_shape_str(char *buf, size_t len, const int64_t *size,
			       int ndim)
{
	size_t pos = 1;

	if (len < 8) { /* no room for "[...]" */
		if (len)
			buf[0] = 0;
		return buf;
	}
	buf[0] = '[';
	for (int d = 0; d < ndim; d++) {
		char item[32];
		int n = snprintf(item, sizeof(item), "%s%lld", d ? ", " : "",
				 (long long)size[d]);

		if (pos + (size_t)n + 2 > len) { /* item, ']', NUL */
			pos = pos + 5 > len ? len - 5 : pos;
			memcpy(buf + pos, "...", 3);
			pos += 3;
			break;
		}
		memcpy(buf + pos, item, (size_t)n);
		pos += (size_t)n;
	}
	buf[pos++] = ']';
	buf[pos] = 0;
	return buf;
}

const char *bfs_size_gb_str(char *buf, size_t len, uint64_t bytes)
{
	uint64_t frac = bytes % 1000000000u;
	int n;

	if (!frac) {
		snprintf(buf, len, "%llu",
			 (unsigned long long)(bytes / 1000000000u));
		return buf;
	}
	n = snprintf(buf, len, "%llu.%09llu",
		     (unsigned long long)(bytes / 1000000000u),
		     (unsigned long long)frac);
	if (n > 0 && (size_t)n < len)
		while (buf[n - 1] == '0')
			buf[--n] = '\0';
	return buf;
}
