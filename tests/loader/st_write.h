/* Test helper: write safetensors batch files the way batchfs serves them
 * (README.md, "The batch file"): u64 LE header length, JSON padded with
 * spaces so the data starts at a multiple of 4096, tensors back to back in
 * the given order. */
#ifndef BFS_TEST_ST_WRITE_H
#define BFS_TEST_ST_WRITE_H

#include <stddef.h>
#include <stdint.h>

struct st_tensor {
	const char *name;
	const char *dtype; /* safetensors code */
	unsigned ndim;
	uint64_t shape[8];
	const void *data;
	uint64_t nbytes;
};

/* Write 'n' tensors to 'path'. 'extra_pad' more bytes of spaces are added
 * to the header before rounding (to test large headers). Returns the data
 * start offset (> 0) or -errno. */
long st_write(const char *path, const struct st_tensor *t, unsigned n,
	      unsigned epoch, unsigned batch, size_t extra_pad);

/* Deterministic pseudo-random bytes (splitmix64 of seed and position). */
void st_fill(void *buf, size_t n, uint64_t seed);

#endif
