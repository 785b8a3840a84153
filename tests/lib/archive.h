/* tests/lib/archive: a tiny torch.save-like archive writer for the C tests
 * and fuzz targets (independent of `batchfs pack` and of torch): a stored
 * ZIP (CRC 0 = "not computed", no ZIP64) under the prefix "arc" holding a
 * protocol-2 data.pkl of a dict of tensors as torch.save pickles them
 * (_rebuild_tensor_v2 over persistent storage ids), the storages, and the
 * small records. Any geometry can be written, including what torch would
 * refuse (that is the point). */
#ifndef BFS_TEST_ARCHIVE_H
#define BFS_TEST_ARCHIVE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/dtype.h"

struct ta_tensor {
	const char *name;
	enum bfs_dtype dtype; /* of the tensor and its typed storage */
	const char *key;      /* storage key: record "arc/data/<key>" */
	int64_t numel;	      /* storage elements, as pickled */
	int64_t offset;	      /* storage offset */
	int ndim;
	int64_t size[BFS_MAX_DIMS], stride[BFS_MAX_DIMS];
};

struct ta_storage {
	const char *key;
	const void *data;
	size_t size;
};

/* The archive's bytes, malloc'd into *out (never NULL: aborts when out of
 * memory); returns their length. version, byteorder: the records' contents
 * (NULL: no such record); extra: the name of one more 1-byte record under
 * "arc/" (NULL: none). */
size_t ta_build(uint8_t **out, const struct ta_tensor *ts, size_t nt,
		const struct ta_storage *st, size_t ns, const char *version,
		const char *byteorder, const char *extra);

/* Write [b, b+n) to 'path' (created or truncated). 0 or -errno. */
int ta_write(const char *path, const uint8_t *b, size_t n);

/* A thread that truncates the file at 'path' to 4096 bytes and back to
 * its size, over and over, until ta_flip_stop: archives shrinking under a
 * reader, at every instant. */
struct ta_flip {
	const char *path;
	int64_t size;
	int stop; /* __atomic: read by the flipping thread */
	pthread_t thread;
};

/* Start flipping 'path' (its current size is restored at the end). */
void ta_flip_start(struct ta_flip *fl, const char *path);
/* Stop, join, and leave the file at its original size. */
void ta_flip_stop(struct ta_flip *fl);

#endif
