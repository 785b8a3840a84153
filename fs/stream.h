/* fs/stream: the stream of an epoch, its batch files back to back
 * (stream/N; fs/README.md: streams) — where batch k starts, which batch
 * holds byte x, how long the whole is — with no FUSE and no I/O in it.
 * A stream is an epoch of a lane: the lane and epoch of a batch id
 * (fs/order.h: batch identity).
 *
 * Without ragged fields every batch but the last has one size, whatever
 * its epoch and batch numbers (fs/layout.h: the data starts where 20-digit
 * numbers would put it), so it is arithmetic. With ragged fields each
 * batch's size depends on its samples' lengths: the offsets of an epoch
 * are measured once (O(samples), outside any lock other readers need) and
 * kept for the epochs in flight, 2 per lane (rank) + 2. */
#ifndef BFS_STREAM_H
#define BFS_STREAM_H

#include <stdint.h>

#include "fs/layout.h"
#include "fs/order.h"

struct bfs_streams;

/* Offsets of the epochs of 'order' laid out by 'l' (borrowed; they must
 * outlive it). 0, -ENOMEM or a layout error. */
int bfs_streams_create(struct bfs_streams **out, const struct bfs_layout *l,
		       struct bfs_order *order);
void bfs_streams_destroy(struct bfs_streams *s); /* accepts NULL */

/* Where batch id starts in the stream of its epoch: id.batch = the
 * batches per epoch gives the stream's size. Thread-safe. 0 or -errno
 * (-ENOENT: no such batch; -ENOMEM; a layout error). */
int bfs_stream_offset(struct bfs_streams *s, struct bfs_batch_id id,
		      uint64_t *off);

/* The batch that holds byte x of the stream of id's epoch (id->lane,
 * id->epoch) into id->batch, and where that batch starts and ends.
 * -ENOENT past the end (or no such epoch). Thread-safe. */
int bfs_stream_locate(struct bfs_streams *s, struct bfs_batch_id *id,
		      uint64_t x, uint64_t *start, uint64_t *end);

/* How many epoch tables have been measured so far (ragged layouts; 0 for
 * fixed ones): for tests. Thread-safe. */
uint64_t bfs_streams_measured(struct bfs_streams *s);

#endif
