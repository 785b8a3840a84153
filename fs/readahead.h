/* fs/readahead: one room for what is resident and what to read ahead
 * (fs/README.md: cold data) — the memory policy and the read-ahead of a
 * dataset's rows, between the dataset (which copies rows) and the pool
 * (which decides which batches come next).
 *
 * Memory policy, decided once at creation: data that fits in half the
 * memory available (the smaller of MemAvailable and what the memory
 * cgroups leave: a container's page cache counts against its limit) is
 * read in sequentially in the background (the read-in); data that does
 * not is marked for random access (a page fault reads its page, not the
 * device's read-ahead window around it).
 *
 * Read-ahead: bfs_readahead_rows asks the kernel (madvise WILLNEED) for
 * the rows of samples that a batch will need, skipping rows in 2 MiB
 * chunks already known resident (one mincore per chunk, remembered for a
 * second), so resident data costs almost nothing. And the read-ahead
 * thread follows the readers of each lane (rank) of the order
 * (bfs_readahead_follow: the batch they are at) and reads the rows of the
 * batches after it, as many as its byte budget allows, with many reads in
 * flight (fs/reader: io_uring, or reader threads): the order of every epoch is
 * known, so reads can start long before a gather needs them, sorted by offset
 * and coalesced. It stops once the read-in of data that fits has ended (every
 * row is resident), and does not run for sources on a FUSE or network file
 * system (a read answered short there leaves zero-filled pages in the page
 * cache).
 *
 * Data that does not fit: the page cache cannot keep it, so rows of big
 * fields (>= 32 KiB a row, stored as served) are read by the gathering
 * thread itself, with O_DIRECT straight into memory of its own, all the
 * rows of a batch in flight at once (bfs_readahead_fetch): no page cache
 * to fill, map and reclaim. The read-ahead thread and the advice leave
 * those fields alone.
 *
 * Thread-safe: the residency words and counters are relaxed atomics; the
 * streams followed are under a mutex of their own. */
#ifndef BFS_READAHEAD_H
#define BFS_READAHEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/dataset.h"
#include "fs/layout.h"
#include "fs/order.h"
#include "fs/reader.h"

struct bfs_readahead;

struct bfs_readahead_opts {
	/* Apply the memory policy (read in data that fits, mark the rest for
	 * random access). false: advice only (tests, measurements:
	 * BATCHFS_DEBUG_NO_WARM). */
	bool memory_policy;
	/* Asynchronous reads of the batches ahead of the readers: how
	 * (BFS_READER_AUTO: io_uring where it can be set up, else threads;
	 * NONE: none), with 'depth' reads in flight (0: 64), of the batches
	 * of 'order' (NULL: none; each lane's up to its end), at most
	 * 'bytes' of pages read ahead of the readers (0: a quarter of the
	 * memory available, 256 MiB at most). */
	enum bfs_reader_kind reader;
	unsigned depth;
	/* Never read rows with O_DIRECT (bfs_readahead_fetch): they are
	 * served from the mapping, which must have them in the page cache. */
	bool no_fetch;
	/* Tests: apply the memory policy as if the data did not fit. */
	bool assume_cold;
	struct bfs_order *order;
	uint64_t bytes;
};

/* Counters since creation. */
struct bfs_readahead_stats {
	uint64_t warm_bytes;	  /* read in at creation (data that fits) */
	uint64_t rows_resident;	  /* rows found in memory when advised or
				   * about to be read ahead */
	uint64_t rows_advised;	  /* rows the kernel was asked to read */
	uint64_t rows_read;	  /* rows read ahead (fs/reader) */
	uint64_t reads_in_flight; /* now */
	uint64_t bytes_read;	  /* by the reads ahead */
	uint64_t batches_read;	  /* batches whose rows were read ahead */
	uint64_t distance;	  /* batches read ahead of the readers, now */
	uint64_t rows_fetched;	  /* rows read with O_DIRECT by gathers */
	uint64_t bytes_fetched;	  /* ... bytes */
	const char *reader;	  /* "io_uring", "threads", "none" */
	const char *reader_why;	  /* how rows are read ahead, and why */
};

/* The readers of at's lane are at batch 'at' (their latest): the
 * read-ahead thread reads the batches after it. Cheap. */
void bfs_readahead_follow(struct bfs_readahead *ra,
			  const struct bfs_batch_loc *at);

/* A gathering thread's means to read rows itself (one per thread), or
 * NULL when no field is read so (data that fits in memory, rows under 32
 * KiB or not stored as served, no reader, no O_DIRECT). Free with
 * bfs_fetch_free. */
struct bfs_fetch;
struct bfs_fetch *bfs_readahead_fetcher(struct bfs_readahead *ra);
void bfs_fetch_free(struct bfs_fetch *w);

/* The rows of the fields read so, of samples idx[0..n), read with
 * O_DIRECT into w's memory, all in flight at once: *have (valid until
 * w's next fetch) for bfs_layout_fill_from. 0, or -errno (a read failed
 * or came back short: gather from the mapping instead, which finds and
 * names the fault). The caller checks the files (bfs_dataset_check)
 * after the reads, before it trusts the bytes. */
int bfs_readahead_fetch(struct bfs_readahead *ra, struct bfs_fetch *w,
			const uint64_t *idx, size_t n, bfs_layout_rows *have);

/* Whether the read-ahead thread runs (rows of batches ahead are read):
 * not once the read-in of data that fits has ended, when every row is
 * resident (then workers advise the rows of their batches, cheap on
 * resident chunks). */
bool bfs_readahead_reads(const struct bfs_readahead *ra);

/* The read-ahead of 'ds' (borrowed; must outlive it): applies the memory
 * policy, logging what it decided, and starts the read-in thread when the
 * data fits; makes the reader o->reader asks for and, with o->order,
 * starts the read-ahead thread; and, for data that does not fit, picks
 * the fields whose rows gathers read with O_DIRECT (unless o->no_fetch).
 * 0 or -errno (-ENOSYS and the like: the reader asked for cannot be had,
 * logged). */
int bfs_readahead_create(struct bfs_readahead **out,
			 const struct bfs_dataset *ds,
			 const struct bfs_readahead_opts *o);

/* Stop the read-in (it checks between 32 MiB windows), free. Accepts
 * NULL. */
void bfs_readahead_destroy(struct bfs_readahead *ra);

/* Ask the kernel to read the rows of samples idx[0..n) (every fixed field;
 * ragged fields are not advised: that needs their offsets) that are not
 * known resident. Best effort, never fails; an index out of range is
 * skipped. */
void bfs_readahead_rows(struct bfs_readahead *ra, const uint64_t *idx,
			size_t n);

void bfs_readahead_stats(struct bfs_readahead *ra,
			 struct bfs_readahead_stats *out);

#endif
