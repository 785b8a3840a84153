/* fs/size: checked arithmetic for every size, extent, row, batch, header
 * and offset that untrusted input (archive metadata, options) can reach.
 *
 * One rule everywhere: a byte count, element count or offset is valid when
 * it fits BFS_SIZE_MAX = 2^63 - 1 (what torch allows for a storage, what
 * off_t and st_size can carry). Every helper returns 0 and the result, or
 * -EOVERFLOW (and leaves *out unspecified) when an intermediate or the
 * result exceeds it. Callers turn -EOVERFLOW into a refusal that names the
 * field and the product; no computation downstream of a check can then
 * wrap. Header-only arithmetic (no other fs/ dependency: the loader library
 * compiles fs/safetensors.c, which uses it, on its own); torch's numel and
 * storage-extent rules are in fs/size.c. */
#ifndef BFS_SIZE_H
#define BFS_SIZE_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#define BFS_SIZE_MAX ((uint64_t)INT64_MAX)

/* *out = a * b. */
static inline int bfs_size_mul(uint64_t a, uint64_t b, uint64_t *out)
{
	return __builtin_mul_overflow(a, b, out) || *out > BFS_SIZE_MAX
		   ? -EOVERFLOW
		   : 0;
}

/* *out = a + b. */
static inline int bfs_size_add(uint64_t a, uint64_t b, uint64_t *out)
{
	return __builtin_add_overflow(a, b, out) || *out > BFS_SIZE_MAX
		   ? -EOVERFLOW
		   : 0;
}

/* *out = a * b + c. */
static inline int bfs_size_mul_add(uint64_t a, uint64_t b, uint64_t c,
				   uint64_t *out)
{
	uint64_t p;

	return bfs_size_mul(a, b, &p) ? -EOVERFLOW : bfs_size_add(p, c, out);
}

/* The exact product of 'n' sizes (each >= 0): 0 when one of them is 0
 * (whatever the others), else the product, -EOVERFLOW above 2^63 - 1. */
int bfs_size_prod(const int64_t *size, int n, uint64_t *out);

/* torch's numel of a tensor of 'ndim' sizes (each >= 0): the product,
 * refused exactly when torch refuses it ("numel: integer multiplication
 * overflow"): a running product that wraps 64 bits before a zero size
 * resets it, or a final product above 2^63 - 1. Returns 0 or -EOVERFLOW. */
int bfs_size_numel(const int64_t *size, int ndim, uint64_t *out);

/* Bytes of storage a view needs from the storage's start, as torch's
 * computeStorageNbytes: (offset + 1 + sum (size[d] - 1) * stride[d]) *
 * elsize, 0 when any size is 0 (sizes, strides, offset >= 0).
 * Returns 0 or -EOVERFLOW. */
int bfs_size_extent(const int64_t *size, const int64_t *stride, int ndim,
		    uint64_t offset, uint64_t elsize, uint64_t *out);

/* A shape as text, "[40, 4611686018427387905]", into buf (always
 * NUL-terminated; cut with "..." when too long). Returns buf. */
const char *bfs_size_shape_str(char *buf, size_t len, const int64_t *size,
			       int ndim);

/* 'bytes' as GB (10^9 bytes) in exact decimal, no trailing zeros:
 * "0.05", "1", "1.234567891" (what --cache-gb reads back as the same
 * byte count), into buf (always NUL-terminated). Returns buf. */
const char *bfs_size_gb_str(char *buf, size_t len, uint64_t bytes);

#endif
