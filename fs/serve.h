/* fs/serve: open files of a mount and how their bytes reach a reader,
 * with no FUSE in it and no inode numbers: it serves batches by their id
 * (fs/order.h: batch identity), an epoch's stream (stream/N: its batches
 * back to back) and where each batch starts in it (index/N/offsets), and
 * texts the namespace rendered (fs/tree, the room above, opens files
 * through here).
 *
 * A FUSE adapter (mount/) decodes each request, calls one function (here,
 * or bfs_tree_open for an open) and sends the one reply it describes:
 *   open     bfs_serve_open_batch / _stream / _offsets / _text -> a file
 *            and how to open it (flags, a passthrough backing id)
 *   read     bfs_serve_read     -> slices to reply, then bfs_serve_done
 *   release  bfs_serve_release
 * The few things only the kernel can do (store pages into its page cache,
 * drop them, register a backing file) are callbacks the adapter passes in
 * (struct bfs_serve_kernel), so this module is tested without FUSE
 * (tests/unit/test_serve.c).
 *
 * This comment is the contract of the serving modes of batch files; the
 * top README's table says the same for users. The measurements are in
 * the benchmark's results file (tools/bench/RESULTS.md). Streams are
 * read with direct I/O in every mode (bfs_serve_open_stream), and so is a
 * batch file opened with O_DIRECT (bfs_serve_open_batch: the readers
 * batchfs ships open them so; everyone else gets the mode). Inside,
 * each mode is a way of serving in a file of its own behind a table of
 * operations, chosen for each file at its open (serve_impl.h; fs/README.md:
 * how bytes reach readers).
 *
 * Modes (enum bfs_serve_mode):
 *   passthrough  each batch is materialized by a worker into its own memfd,
 *                registered as a backing file before anyone opens it; open
 *                replies with its backing id and the kernel serves read()
 *                and mmap() from the memfd: nothing reaches the daemon
 *   push         each batch is stored whole into the page cache at open
 *                (or earlier, by the worker); read() and mmap() are
 *                page-cache hits; the pushed pages are kept under a budget
 *   direct       direct I/O replies from a gathered buffer, or slices of
 *                the archive mapping (zero copy); mmap(MAP_SHARED) fails
 *   cache        the kernel's own page-cache READs (for comparison) */
#ifndef BFS_SERVE_H
#define BFS_SERVE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "fs/pool.h"

enum bfs_serve_mode {
	BFS_SERVE_AUTO = 0, /* passthrough where the kernel allows, else push */
	BFS_SERVE_PASSTHROUGH,
	BFS_SERVE_PUSH,
	BFS_SERVE_CACHE,
	BFS_SERVE_DIRECT,
};

/* "passthrough", "push", "cache", "direct" ("auto" for AUTO). */
const char *bfs_serve_mode_name(enum bfs_serve_mode m);
/* The mode named 's' (any of the names above): 0, or -EINVAL. */
int bfs_serve_mode_parse(const char *s, enum bfs_serve_mode *out);

/* What only the kernel can do, for the adapter to implement. Each but
 * backing_close returns 0 (backing_open: an id > 0) or -errno. Only
 * passthrough registers backing files; only push stores and drops pages,
 * on a thread of its own, never one that answers requests (a store can
 * wait for a READ: serve_push.c). */
struct bfs_serve_kernel {
	void *arg;
	/* Store [buf, buf+len) at 'off' into the page cache of the file of
	 * batch id (-ENOENT: the kernel has no inode for it yet). */
	int (*store)(void *arg, struct bfs_batch_id id, uint64_t off,
		     const void *buf, uint64_t len);
	/* Drop the pages of batch id's file from the page cache. */
	int (*inval)(void *arg, struct bfs_batch_id id);
	/* Register fd as a passthrough backing file: its id (> 0). */
	int (*backing_open)(void *arg, int fd);
	void (*backing_close)(void *arg, int id);
};

struct bfs_serve_opts {
	enum bfs_serve_mode mode;  /* not AUTO: the adapter decided */
	uint64_t page_cache_bytes; /* push: pushed batches kept, bytes */
	bool early_push;	   /* push: workers push before any open */
	bool zero_copy;		   /* direct: slices of the archive allowed */
	bool zc_no_check;    /* tests: skip the size check before a slice */
	bool zc_debug_stop;  /* tests: SIGSTOP the process once, between the
			      * check and the first zero-copy reply of rows */
	unsigned zc_max_iov; /* tests: fewer slices per READ (0: all) */
	bool no_direct_open; /* tests: refuse O_DIRECT opens of batch files
			      * (EINVAL), as a file system without direct
			      * I/O does: readers fall back to plain opens */
};

/* Counters, one struct for the whole mount (rendered as `stats`). */
struct bfs_stats {
	struct bfs_pool_stats pool;  /* the mode's pool, and the work of the
				      * plain one (serve_stats.c) */
	uint64_t batches_opened;     /* opens of batch files */
	uint64_t batch_reads;	     /* READs of batch files answered here
				      * (none in passthrough) */
	uint64_t batches_served;     /* read to the end, pushed whole, or
				      * opened in passthrough (whole) */
	uint64_t bytes_served;	     /* of those: bytes replied, pushed or
				      * handed over as a backing file */
	uint64_t batches_pushed;     /* stored whole into the page cache */
	uint64_t page_cache_drops;   /* pushed batches invalidated for room */
	uint64_t page_cache_refills; /* READs of a pushed batch's lost pages */
	uint64_t batches_zero_copy;  /* read straight from the archive */
	uint64_t backing_files;	     /* passthrough ids registered now */
	uint64_t backing_opened;     /* ... in all */
	uint64_t direct_opens;	     /* batch files opened O_DIRECT and served
				      * with direct I/O (in any mode) */
	/* What the plain pool holds where it is one of its own (passthrough,
	 * push: the batches of direct reads and streams, under a budget of
	 * their own); 0 where one pool serves all (pool.cache_* then). */
	uint64_t direct_cache_bytes, direct_cache_batches;
	enum bfs_serve_mode mode;
};

struct bfs_serve;
struct bfs_file; /* an open file */

/* How the adapter answers an open. */
struct bfs_serve_how {
	int backing_id; /* > 0: reply FOPEN_PASSTHROUGH with this id */
	bool direct_io, keep_cache, noflush;
};

/* The slices of a READ reply; valid until bfs_serve_done. */
#define BFS_SERVE_MAX_IOV 1024
#define BFS_SERVE_MORE	  63 /* batches a stream's reply holds, and one */
struct bfs_serve_reply {
	struct iovec iov[BFS_SERVE_MAX_IOV];
	int iovcnt;
	/* private: what bfs_serve_done lets go */
	struct bfs_file *file;
	struct bfs_pool *pool;	 /* of batch and more */
	struct bfs_batch *batch; /* a batch the slices point into */
	struct bfs_batch *more[BFS_SERVE_MORE]; /* a stream's others */
	int nmore;
	char *scratch; /* offsets' lines; a stream's bytes, copied when a
			* READ spans more batches than it can hold */
	bool zc_rows;  /* rows replied from the archive: checked again */
};

/* Serve 'layout's batches of 'ds' in 'order' (every lane, epochs 0 ..
 * bfs_order_epochs - 1) in mode o->mode: creates the worker pool (po; its
 * hooks, memfd and rows-in-place choices are the mode's, set here), the
 * push ledger or the zero-copy plan. Borrowed objects and 'kernel' must
 * outlive the serve. Returns 0 or -errno (-EINVAL: o->mode is AUTO or no
 * mode). */
int bfs_serve_create(struct bfs_serve **out, const struct bfs_dataset *ds,
		     struct bfs_order *order, const struct bfs_layout *layout,
		     const struct bfs_pool_opts *po,
		     const struct bfs_serve_opts *o,
		     const struct bfs_serve_kernel *kernel);

/* Close what is still open, stop the workers, free. Accepts NULL. */
void bfs_serve_destroy(struct bfs_serve *s);

/* The mode served. */
enum bfs_serve_mode bfs_serve_mode(const struct bfs_serve *s);

/* Open the file of batch id, read-only (the caller refused writes), for
 * an open(2) with 'oflags'. The open locates the batch once (fs/order)
 * and hands that down: the pool or zero copy asks the order only for its
 * samples. With O_DIRECT in oflags the batch is served as direct mode
 * serves it, whatever the mount's mode (how->direct_io; zero copy where
 * the rows allow, else a buffer of the plain pool: no memfd, no backing
 * file, no push), unless the mode's way holds the batch open already
 * (passthrough: the kernel requires every open of that inode to be
 * passthrough too). Returns 0 with *f and *how set, or -ENOENT (no such
 * batch), -EIO (the batch cannot be had: its gather failed or timed out,
 * logged), -ENOMEM, -EINVAL (O_DIRECT refused: opts.no_direct_open). */
int bfs_serve_open_batch(struct bfs_serve *s, struct bfs_batch_id id,
			 int oflags, struct bfs_file **f,
			 struct bfs_serve_how *how);

/* Open stream/N of epoch id.epoch of lane id.lane (id.batch unused),
 * read-only: that epoch's batch files back to back, with direct I/O in
 * every mode (each read() is one READ, and the daemon never stores pages
 * of a stream into the page cache). A READ is replied whole, from the
 * plain pool's buffers of the batches it spans (acquired with their
 * prefetch window; copied first only when it spans more than
 * BFS_SERVE_MORE + 1); each batch read to its end leaves the pool, so
 * memory stays flat over an epoch. 0, -ENOENT, -ENOMEM. */
int bfs_serve_open_stream(struct bfs_serve *s, struct bfs_batch_id id,
			  struct bfs_file **f, struct bfs_serve_how *how);

/* Open index/N/offsets of the epoch of id (as bfs_serve_open_stream):
 * line K is where batch K starts in stream/N, 20 digits and a newline (so
 * at byte 21 x K), the last line the stream's size. Each READ renders the
 * lines it covers (fs/stream's offsets), so an open costs nothing however
 * long the epoch. 0, -ENOENT, -ENOMEM. */
#define BFS_SERVE_OFFSET_LINE 21
int bfs_serve_open_offsets(struct bfs_serve *s, struct bfs_batch_id id,
			   struct bfs_file **f, struct bfs_serve_how *how);

/* The offsets of batches in streams (fs/stream), for the namespace. */
struct bfs_streams *bfs_serve_streams(struct bfs_serve *s);

/* Open a text file whose bytes the caller rendered: 'text' (malloc'd,
 * 'len' bytes) now belongs to the file. 'changes': its content may differ
 * at the next open (stats), so it is read with direct I/O, afresh at every
 * open. 0, or -ENOMEM (text freed). */
int bfs_serve_open_text(struct bfs_serve *s, char *text, size_t len,
			bool changes, struct bfs_file **f,
			struct bfs_serve_how *how);

/* The reply to a READ of [off, off+size) of f: slices in r (r->iovcnt 0
 * past the end). 0 or -errno (-EIO: the batch cannot be had). Call
 * bfs_serve_done(s, r) after the reply is sent, whatever it was. */
int bfs_serve_read(struct bfs_serve *s, struct bfs_file *f, uint64_t off,
		   uint64_t size, struct bfs_serve_reply *r);
void bfs_serve_done(struct bfs_serve *s, struct bfs_serve_reply *r);

/* The kernel released f. It is freed once no reply of it is pending (the
 * kernel can send RELEASE as soon as the last reply is written, before
 * the replying thread has called bfs_serve_done). */
void bfs_serve_release(struct bfs_serve *s, struct bfs_file *f);

/* A request was interrupted (its reader got a signal): every wait of an
 * open or a READ for a batch is woken, and the waits of threads whose
 * bfs_cancel flag (fs/pool.h: interrupts) is set end with -EINTR, which
 * bfs_serve_open_batch, bfs_serve_open_stream and bfs_serve_read then
 * return. What was being gathered goes on, for later readers; no other
 * file is disturbed. Thread-safe. */
void bfs_serve_interrupt(struct bfs_serve *s);

/* Unmounting: no call into the kernel starts any more (stores still
 * queued are dropped). One may be in flight, waiting on a READ: the
 * adapter answers requests until bfs_serve_kernel_busy says it is over,
 * then destroys. */
void bfs_serve_stop_kernel(struct bfs_serve *s);
bool bfs_serve_kernel_busy(struct bfs_serve *s);

/* Tests: wait until every store and invalidation asked for so far is
 * made (the fake kernel never waits). */
void bfs_serve_settle(struct bfs_serve *s);

/* A snapshot of every counter. */
void bfs_serve_stats(struct bfs_serve *s, struct bfs_stats *out);

/* The stats file: "name value" lines, fixed width so its size never
 * changes ('lookups': the namespace's count of batch lookups), appended
 * at *pos with snprintf semantics (buf NULL measures it). Serve mode,
 * every counter, then the last error in four lines. */
void bfs_serve_render_stats(struct bfs_serve *s, uint64_t lookups, char *buf,
			    size_t len, size_t *pos);

#endif
