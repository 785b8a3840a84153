/* fs/layout_fd: writing a whole batch file into a file descriptor (a
 * fresh memfd, for passthrough), beside fs/layout's writer into memory;
 * the two ways and how one is chosen are in layout_fd.c. */
#ifndef BFS_LAYOUT_FD_H
#define BFS_LAYOUT_FD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/dataset.h"
#include "fs/layout.h"

/* How a batch is written into a descriptor. */
enum bfs_layout_fd_how {
	BFS_LAYOUT_FD_AUTO = 0, /* by the layout: rows of >= 4 KiB stored as
				 * served: SLICES, else GATHER */
	BFS_LAYOUT_FD_GATHER,	/* gather into a reused buffer, one pwrite */
	BFS_LAYOUT_FD_SLICES,	/* pwritev straight from the archive */
};

/* One writer per thread: the choice, and the reused buffer. */
struct bfs_layout_fd {
	const struct bfs_layout *l;
	const struct bfs_dataset *ds;
	bool slices;
	void *scratch; /* gathered batches, reused (anonymous memory) */
	size_t scratch_len;
};

/* A writer of l's batches of ds, written 'how'. Nothing allocated yet. */
void bfs_layout_fd_init(struct bfs_layout_fd *w, const struct bfs_layout *l,
			const struct bfs_dataset *ds,
			enum bfs_layout_fd_how how);

/* Free the buffer. Accepts a zeroed writer. */
void bfs_layout_fd_fini(struct bfs_layout_fd *w);

/* The whole batch file of batch id, of samples idx[0..rows),
 * 'size' bytes (bfs_layout_fill's size), into fd from offset 0, the rows
 * of some fields from 'have' (bfs_layout_fill_from; NULL: none). Returns
 * 0 or -errno: bfs_layout_fill's, bfs_layout_pwrite's (but -ENOTSUP:
 * then the batch is gathered), -ENOMEM, or the -errno of the write. */
int bfs_layout_fd_write(struct bfs_layout_fd *w, struct bfs_batch_id id,
			const uint64_t *idx, uint64_t rows, uint64_t size,
			bfs_layout_rows have, int fd);

/* Write the whole batch file into 'fd' from offset 0 with pwritev, the
 * rows straight from the archive mappings (no copy in this process):
 * the header from a small buffer, then one slice per row (adjacent slices
 * merge; rows of fields in 'have' from there, bfs_layout_fill_from).
 * Only when every row is stored as served (bfs_dataset_row) and
 * no field is ragged: -ENOTSUP otherwise, before anything is written.
 * Returns 0, -ENOTSUP, -EIO (an archive shrank or changed: caught by the
 * checks around the copy, or the kernel's copy faulted, with a log line),
 * -ENOMEM or the -errno of pwritev. */
int bfs_layout_pwrite(const struct bfs_layout *l, const struct bfs_dataset *ds,
		      struct bfs_batch_id id, const uint64_t *idx,
		      uint64_t rows, bfs_layout_rows have, int fd);

#endif
