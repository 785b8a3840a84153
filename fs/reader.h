/* fs/reader: many reads of file ranges in flight at once: the backends of
 * the fetch room (fs/fetch.h; fs/README.md: cold data), for two uses:
 *   read ahead  bfs_reader_submit: the bytes are thrown away, what
 *               matters is that the pages are resident in the page cache
 *               when a gather copies the rows from the mapping;
 *   a group     bfs_reader_read_all: reads into the caller's buffers,
 *               waited for together (the rows of a batch that a gathering
 *               thread reads itself with O_DIRECT, on a reader of its
 *               own).
 *
 * Two ways, chosen at creation: io_uring (liburing; buffered reads the
 * kernel completes asynchronously, up to 'depth' in flight from one
 * thread), or, where io_uring cannot be set up (a seccomp filter, the
 * io_uring_disabled sysctl, an old kernel), a pool of threads each doing
 * one pread at a time. fs/fetch sees them as two backends
 * (bfs_reader_backend, in fetch_local.c: two tables of struct
 * bfs_fetch_ops over a dataset's files opened again, which also know
 * what of the files is resident: fetch_local_resident.c), which the
 * composition root makes and hands to it.
 *
 * Thread-safe: bfs_reader_submit may be called from any thread; it waits
 * while 'depth' reads are in flight (io_uring: a read ahead that finds
 * the ring full of reads the kernel has not taken is dropped: it is only
 * a hint).
 *
 * Faults, for tests (read by bfs_reader_create, counted per reader):
 * BATCHFS_DEBUG_URING_SUBMIT_FAIL=N fails the next N submits to the ring
 * with EAGAIN, submitting nothing; BATCHFS_DEBUG_URING_SUBMIT_SHORT=N
 * has the next N submits of several reads take only the first;
 * BATCHFS_DEBUG_URING_EINTR=N fails the next N waits for a completion
 * with EINTR (as a signal, SIGSTOP or a cgroup freeze does). */
#ifndef BFS_READER_H
#define BFS_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum bfs_reader_kind {
	BFS_READER_AUTO = 0, /* io_uring where it works, else threads */
	BFS_READER_IO_URING,
	BFS_READER_THREADS,
	BFS_READER_NONE, /* no asynchronous reads: advice only */
};

/* "auto", "io_uring", "threads", "none". */
const char *bfs_reader_kind_name(enum bfs_reader_kind k);
/* The kind named 's': 0, or -EINVAL. */
int bfs_reader_kind_parse(const char *s, enum bfs_reader_kind *out);

struct bfs_reader;

/* A reader of kind 'want' (AUTO: io_uring, else threads) with 'depth'
 * reads in flight at most. *out NULL and 0 for NONE. 'why' (len bytes)
 * says what was chosen and why (an io_uring that could not be set up).
 * Returns 0 or -errno (-ENOSYS and the like when io_uring was asked for
 * and cannot be had). */
int bfs_reader_create(struct bfs_reader **out, enum bfs_reader_kind want,
		      unsigned depth, char *why, size_t len);

/* Wait for the reads in flight, stop, free. Accepts NULL. */
void bfs_reader_destroy(struct bfs_reader *r);

/* The kind that runs (IO_URING or THREADS). */
enum bfs_reader_kind bfs_reader_kind(const struct bfs_reader *r);

/* Queue a read of bytes [off, off+len) of fd (len <= BFS_READER_MAX),
 * waiting while 'depth' are in flight. fd must stay open until the read
 * completes (bfs_reader_destroy waits for all). */
#define BFS_READER_MAX ((uint64_t)1 << 20)
void bfs_reader_submit(struct bfs_reader *r, int fd, uint64_t off,
		       uint64_t len);

/* One read into a caller's buffer (bfs_reader_read_all). */
struct bfs_read {
	int fd;
	uint64_t off, len;
	void *buf;
};

/* Read every one of reads[0..n) into its buffer, up to 'depth' at a time,
 * and wait for all: when it returns no read is in flight, the buffers are
 * the caller's again (a wait cut short by a signal waits again; reads a
 * failed submit did not hand to io_uring are read with pread). Not to be
 * mixed with bfs_reader_submit on one reader (a reader of its own per
 * caller). 0, or -EIO when one failed or came back short. */
int bfs_reader_read_all(struct bfs_reader *r, const struct bfs_read *reads,
			size_t n);

struct bfs_reader_stats {
	uint64_t in_flight; /* reads queued or running now */
	uint64_t reads;	    /* completed */
	uint64_t bytes;	    /* read (from the disk or the page cache) */
};
void bfs_reader_stats(struct bfs_reader *r, struct bfs_reader_stats *out);

/* The fetch backend (fs/fetch.h) of dataset 'ds' (borrowed; must
 * outlive it) on local files: a reader of kind 'want' (as
 * bfs_reader_create: AUTO, IO_URING, THREADS, NONE) reads ahead, 64 in
 * flight, through the files opened again (buffered, read randomly); with
 * 'direct' (data that does not fit), the gathers' reads of rows go to the
 * files opened with O_DIRECT, on readers of the same kind, one per
 * thread reading at a time, kept for the next (64 in flight on io_uring,
 * 16 threads otherwise), unless a file cannot be opened so (then
 * be->rows is false). Its
 * operations are io_uring's or the threads' ("io_uring", "threads"; for
 * NONE "none", which reads nothing); every kind keeps what of the files
 * is resident (a word per 2 MiB chunk of each mapped local file), with
 * which it advises rows and picks the read-ahead's pages (advise,
 * pick: those not known resident); 'why' says which and why, and a
 * source on a FUSE or network file system turns reading ahead off
 * (be->ahead false, no_ahead says why). 0, or -errno (-ENOSYS and the
 * like: the reader asked for cannot be had; logged, with the reason). */
struct bfs_dataset;
struct bfs_fetch_backend;
int bfs_reader_backend(struct bfs_fetch_backend **out,
		       const struct bfs_dataset *ds, enum bfs_reader_kind want,
		       bool direct);

#endif
