/* fs/readahead: which batches to read ahead of the readers, and when
 * (fs/README.md: cold data) — between the pool (which decides which
 * batches come next and where each lane's readers are) and fs/fetch
 * (which finds a batch's rows, knows through its backend what is
 * resident, and reads), over fs/memory (whether the data is being read
 * in).
 *
 * Advice: bfs_readahead_rows hands the samples of a batch about to be
 * gathered to the fetch (bfs_fetch_advise), whose backend asks the kernel
 * (madvise WILLNEED) for the rows not known resident (fs/reader's: one
 * mincore per 2 MiB chunk, remembered for a second), so resident data
 * costs almost nothing; here are the counters.
 *
 * The read-ahead thread follows the readers of each lane (rank) of the
 * order (bfs_readahead_follow: the batch they are at) and hands the
 * batches after it to fs/fetch, as many as its byte budget allows, each
 * with when it is next needed on a clock of batches read (one tick per
 * batch a lane's readers move to; a batch d ahead in its lane is needed
 * d x lanes ticks from now): the order of every epoch is known, so reads
 * can start long before a gather needs them. The fetch's backend picks
 * what to read (a local file's rows not known resident; a remote
 * object's, ragged fields' too, all). It runs only where fs/fetch reads
 * ahead (a backend, no source on a FUSE or network file system), and
 * reads nothing more once the read-in of data that fits (fs/memory) has
 * ended, when every row is resident, unless the fetch says to read on
 * (remote files, never read in: bfs_fetch_reads_after_read_in).
 *
 * The fields whose rows the gathers read themselves (fs/fetch: data that
 * does not fit) are neither advised nor read ahead.
 *
 * Thread-safe: the counters are relaxed atomics; the streams followed
 * are under a mutex of their own. */
#ifndef BFS_READAHEAD_H
#define BFS_READAHEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/dataset.h"
#include "fs/fetch.h"
#include "fs/memory.h"
#include "fs/order.h"

struct bfs_readahead;

/* What the read-ahead works with, all borrowed (they must outlive it). */
struct bfs_readahead_opts {
	/* The batches the thread reads ahead, each lane's up to its end.
	 * NULL: no thread (advice only). */
	struct bfs_order *order;
	/* The memory policy: the thread stops reading when its read-in has
	 * ended, and its budget is a share of the memory it measured. NULL:
	 * no read-in (the memory is measured here when needed). */
	struct bfs_memory *memory;
	/* Advises, reads ahead, and says which fields the gathers read
	 * themselves. NULL: no thread, every fixed field advised (through
	 * a fetch of the read-ahead's own over fs/reader's "none"
	 * backend). */
	struct bfs_fetch *fetch;
	/* At most this many bytes of pages read ahead of the readers (0: a
	 * quarter of the memory available, 256 MiB at most). */
	uint64_t bytes;
	/* What one row costs at least where it lands, for the window:
	 * a page (0: 4096), a remote object's cache chunk. */
	uint64_t granule;
	/* Beyond the window, the batches after the readers whose rows come
	 * to about this many bytes (granules touched, shared between the
	 * lanes; at least the window, at most two epochs) are planned:
	 * their ranges told to the fetch with when they are needed, nothing
	 * read (bfs_fetch_plan_rows: a bounded cache then evicts by the
	 * order's real next uses). 0, or a fetch that plans nothing: none. */
	uint64_t plan_bytes;
};

/* Counters since creation: the read-in (fs/memory), the advice and the
 * read-ahead (here) and fs/fetch's reads. */
#define BFS_READAHEAD_WHY (BFS_FETCH_WHY + 256) /* fs/fetch's, and ours */
struct bfs_readahead_stats {
	uint64_t warm_bytes;	  /* read in at creation (data that fits) */
	uint64_t rows_resident;	  /* rows found in memory when advised or
				   * about to be read ahead */
	uint64_t rows_advised;	  /* rows the kernel was asked to read */
	uint64_t rows_read;	  /* rows read ahead (fs/fetch) */
	uint64_t reads_in_flight; /* now */
	uint64_t bytes_read;	  /* by the reads ahead */
	uint64_t batches_read;	  /* batches whose rows were read ahead */
	uint64_t distance;	  /* batches read ahead of the readers, now */
	uint64_t rows_fetched;	  /* rows read with O_DIRECT by gathers */
	uint64_t bytes_fetched;	  /* ... bytes */
	const char *reader;	  /* "io_uring", "threads", "remote", "none" */
	char reader_why[BFS_READAHEAD_WHY]; /* how rows are read, and why */
	struct bfs_objects_stats objects;   /* remote objects (fs/fetch's) */
};

/* The read-ahead of 'ds' (borrowed; must outlive it): with o->order and
 * a fetch that reads ahead, the read-ahead thread. 0 or -errno. */
int bfs_readahead_create(struct bfs_readahead **out,
			 const struct bfs_dataset *ds,
			 const struct bfs_readahead_opts *o);

/* Stop the thread, free. Accepts NULL. */
void bfs_readahead_destroy(struct bfs_readahead *ra);

/* The readers of at's lane are at batch 'at' (their latest): the
 * read-ahead thread reads the batches after it. Cheap. Accepts NULL. */
void bfs_readahead_follow(struct bfs_readahead *ra,
			  const struct bfs_batch_loc *at);

/* Whether the read-ahead thread reads (rows of batches ahead are read):
 * not once the read-in of data that fits has ended, when every row is
 * resident (then workers advise the rows of their batches, cheap on
 * resident chunks). Accepts NULL (false). */
bool bfs_readahead_reads(const struct bfs_readahead *ra);

/* Ask the kernel to read the rows of samples idx[0..n) (every fixed field;
 * ragged fields are not advised: that needs their offsets) that are not
 * known resident, through the fetch (bfs_fetch_advise). Best effort,
 * never fails; an index out of range is skipped. Accepts NULL (does
 * nothing). */
void bfs_readahead_rows(struct bfs_readahead *ra, const uint64_t *idx,
			size_t n);

/* A snapshot of the counters; with ra NULL, zeros and reader "none". */
void bfs_readahead_stats(struct bfs_readahead *ra,
			 struct bfs_readahead_stats *out);

#endif
