/* fs/dataset_impl: the dataset's internals, shared by fs/dataset.c
 * (opening: sources, fields, bindings, ragged offsets) and fs/gather.c
 * (rows, ragged spans, the SIGBUS guard, the checks of sizes and mtimes).
 * Not a public header.
 *
 * Invariants after bfs_dataset_open: everything here is immutable except
 * the changed flags (relaxed atomics: say a change once), so the gather
 * side is thread-safe; copy_lock only orders copies against refreshes of a
 * file's size (gather.c). */
#ifndef BFS_DATASET_IMPL_H
#define BFS_DATASET_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "fs/dataset.h"
#include "fs/source.h"

/* How one tensor of one shard is laid out in that shard's mapping. */
struct bind {
	const uint8_t *base; /* first byte of row 0 */
	uint64_t stride0;    /* bytes between rows (dim 0) */
	uint64_t rows;	     /* its dim 0 */
	int ndim;	     /* simplified per-row dims */
	int64_t size[BFS_MAX_DIMS];
	int64_t stride[BFS_MAX_DIMS]; /* in bytes */
	uint64_t span;		      /* bytes a row touches from its start */
	bool contiguous;	      /* a row is row_bytes consecutive bytes */
	bool swap;		      /* big-endian multi-byte elements */
	size_t file;		      /* in the shard's source files */
};

struct shard {
	struct bfs_source *src;
	uint64_t first, samples;
	struct bind *binds;  /* [nfields]: the field (ragged: its values) */
	struct bind *obinds; /* [nfields]: ragged offsets; NULL when none */
	size_t file0;	     /* the dataset's number of its first file */
	/* [src->nfiles]: the file was found modified since it was opened,
	 * and the log said so (once: relaxed atomics) */
	atomic_bool *changed;
};

struct bfs_dataset {
	struct shard *shards;
	size_t nshards;
	struct bfs_field *fields;
	size_t nfields;
	size_t nragged; /* fields with ragged set */
	uint64_t samples;
	uint64_t meta_bytes; /* metadata charged so far (the budget) */
	const char *select;  /* --fields (borrowed, while opening), or NULL */
	struct bfs_objects *objects; /* URLs opened there (while opening) */
	/* every shard's files, numbered in shard order (bfs_dataset_file) */
	const struct bfs_source_file **files;
	size_t nfiles;
	/* Read-held by copies, write-held by size refreshes (gather.c:
	 * short reads); writers preferred, so a refresh is not starved. */
	pthread_rwlock_t *copy_lock;
};

/* The shard holding global sample 'g' (binary search). */
size_t bfs_dataset_shard_of(const struct bfs_dataset *ds, uint64_t g);

/* Offset i of a ragged field's offsets tensor, as stored (swapped when
 * big-endian). Reads the mapping: call under bfs_dataset_guard. */
int64_t bfs_dataset_offset_at(const struct bind *ob, uint64_t i);

/* Run fn(arg) with the SIGBUS guard up: a fault in a mapping makes it
 * return -EFAULT instead of killing the process (fn must hold no resource
 * that a jump out of it would leak, and never return -EFAULT itself).
 * Returns fn's result or -EFAULT; the caller logs and says -EIO. */
int bfs_dataset_guard(int (*fn)(void *), void *arg);

#endif
