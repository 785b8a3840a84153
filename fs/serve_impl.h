/* fs/serve_impl.h: private to fs/serve.c (files, open/read/release, the
 * passthrough hooks), fs/serve_push.c (the page-cache push ledger) and
 * fs/serve_zc.c (zero copy from the archive); nothing else includes it. */
#ifndef BFS_SERVE_IMPL_H
#define BFS_SERVE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "fs/serve.h"
#include "fs/stream.h"

struct bfs_zc;
struct bfs_pushed;

struct bfs_file {
	bool batch;		 /* a batch file (else a text or a stream) */
	bool stream;		 /* stream/N: an epoch's batches in a row */
	bool offsets;		 /* index/N/offsets: where they start */
	struct bfs_batch_loc at; /* batch files: the batch (located at
				  * open); streams, offsets: at.id's lane
				  * and epoch */
	uint64_t size;		 /* batch files, streams, offsets: size */
	_Atomic uint64_t served; /* batch files: bytes replied so far */
	atomic_bool consumed;	 /* batch files: counted read to the end */
	uint64_t opened_ns;	 /* batch files: when opened (monotonic) */
	bool push_open;		 /* push: counted open in the ledger */
	uint64_t push_id;	 /* push: ... on this entry */
	struct bfs_batch *held;	 /* passthrough: the open's batch */
	struct bfs_zc *zc;	 /* direct: slices of the archive */
	char *text;		 /* text files: rendered at open */
	size_t text_len;
	/* The open's reference plus one per reply in flight; the last one
	 * frees the file. */
	atomic_uint refs;
	struct bfs_file *prev, *next; /* [s->lock] the open files */
};

struct serve_counters {
	_Atomic uint64_t opened, reads, served, bytes, pushed, drops, refills,
	    zero_copy, backing_now, backing_all, pushed_hits;
};

struct bfs_serve {
	const struct bfs_dataset *ds;
	struct bfs_order *order;
	const struct bfs_layout *layout;
	struct bfs_pool *pool;
	struct bfs_serve_opts o; /* o.why points at 'why' */
	char *why;
	struct bfs_serve_kernel k;
	struct bfs_pushed *pushed;   /* push mode: batches in the page cache */
	struct bfs_streams *streams; /* offsets of batches in streams */
	bool zero_copy;		     /* direct: slices of the archive */
	struct serve_counters c;
	pthread_mutex_t lock;	/* the list of open files */
	struct bfs_file *files; /* [lock] */
};

/* ---- fs/serve_push.c ---- */

/* s->pushed: the ledger of pushed batches (by position), kept under
 * 'budget' bytes, and the thread that makes every store and invalidation
 * (s->k). 0 or -errno. */
int bfs_pushed_create(struct bfs_serve *s, uint64_t budget);
/* Stop the thread: queued stores are dropped (their batches released:
 * the pool must still be there), and workers that push from then on
 * find the ledger closed. Accepts NULL. */
void bfs_pushed_stop(struct bfs_pushed *pb);
/* Stop, then free (after the pool: its workers call into the ledger).
 * Accepts NULL. */
void bfs_pushed_destroy(struct bfs_pushed *pb);

/* Push-mode open of batch file f: have it stored whole into the page
 * cache unless it is there already, and wait for that (a bounded while:
 * READs serve what is not stored). 0 or -errno (the batch cannot be
 * had). */
int bfs_serve_push_open(struct bfs_serve *s, struct bfs_file *f);

/* Push-mode release of f: its ledger entry closes, the page cache is
 * trimmed to its budget. */
void bfs_serve_push_release(struct bfs_serve *s, struct bfs_file *f);

/* Pool on_ready hook in push mode: push b before anyone opens it (when
 * the kernel knows its inode). */
void bfs_serve_push_ready(void *arg, struct bfs_batch *b,
			  const struct bfs_batch_loc *at);

/* ---- fs/serve_zc.c ---- */

/* Whether zero copy can serve this dataset at all (logged once). */
bool bfs_serve_zc_eligible(const struct bfs_serve *s);

/* Plan f's slices (f->zc), or leave it NULL when a READ could need too
 * many slices or a row needs a gather. 0 or -errno. */
int bfs_serve_zc_open(struct bfs_serve *s, struct bfs_file *f);

/* The slices of [off, off+n) of f into r; 1 when they fit, 0 when the
 * READ needs the pool's buffer instead, -EIO when an archive shrank. */
int bfs_serve_zc_read(struct bfs_serve *s, struct bfs_file *f, uint64_t off,
		      uint64_t n, struct bfs_serve_reply *r);

/* After a reply of rows from the archive (r->zc_rows): the same check
 * again; a source that changed meanwhile is logged and kept as
 * last_error, naming f's batch. */
void bfs_serve_zc_after(struct bfs_serve *s, struct bfs_file *f);

void bfs_serve_zc_free(struct bfs_zc *z);

/* ---- fs/serve.c ---- */

/* Count n more bytes of batch file f handed to its reader: true once,
 * when they reach its end (the batch is then served). */
bool bfs_serve_consumed(struct bfs_serve *s, struct bfs_file *f, uint64_t n);

#endif
