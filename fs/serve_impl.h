/* fs/serve_impl.h: private to the files of fs/serve (serve.h); nothing
 * else includes it. It is the table of operations every way of serving
 * implements, and what the core hands a way.
 *
 * The files, and which way calls go (never back up):
 *
 *   serve.c    the core: open files, their references and lifetime, the
 *              dispatch of open/read/done/release/free, the mount-wide
 *              calls (create, stop, destroy, the kernel's thread); texts
 *     |        asks serve_ways.c for the mode's table once (at create),
 *     |        gives each file its way at its open, and calls a way only
 *     |        through its table (struct bfs_serve_ops)
 *     v
 *   serve_ways.c          which table serves each mode (it names the
 *                         tables below), the modes' names
 *   serve_passthrough.c   passthrough: a backing file per batch
 *   serve_push.c          push: stored whole into the page cache, by one
 *                         thread of its own
 *   serve_direct.c        direct: zero copy from the archive, or a buffer;
 *                         in every mode, the batch files opened O_DIRECT
 *   serve_cache.c         cache: the kernel's own READs, from a buffer
 *   serve_stream.c        stream/N and index/N/offsets (a kind of file,
 *                         not a mode: the same in every mode)
 *     |        a way gets a struct bfs_serve_way (the mount's objects,
 *     |        options, kernel callbacks and counters; its own state) and
 *     |        the file: it never calls into serve.c
 *     v
 *   serve_batch.c   what the ways of batch files share: counting a batch
 *                   served, replying from the pool's buffer
 *   serve_stats.c   the counters' snapshot and the stats file (for the
 *                   core's bfs_serve_stats, bfs_serve_render_stats)
 *     |
 *     v
 *   fs/pool, fs/order, fs/layout, fs/dataset, fs/stream, fs/log
 *
 * struct bfs_serve itself is the core's (serve.c): a way sees only its
 * struct bfs_serve_way. Adding a way of serving: its file with its table,
 * a line in serve_ways.c, a value in enum bfs_serve_mode. A file's way is
 * chosen when it is opened, so one mount serves files in several ways: a
 * batch file opened with O_DIRECT by direct mode's way (serve.c:
 * batch_way), every other one by the mount's mode's.
 *
 * Pools. The mode's way sets what its pool must do (memfds, hooks); the
 * direct reads and the streams need none of that. So when the mode's pool
 * has memfds or hooks (passthrough, push) the core makes a second, plain
 * pool for them (base->plain), each under the budget; otherwise one pool
 * serves all (base->plain == base->pool). */
#ifndef BFS_SERVE_IMPL_H
#define BFS_SERVE_IMPL_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "fs/serve.h"
#include "fs/stream.h"

struct bfs_zc;

struct serve_counters {
	_Atomic uint64_t opened, reads, served, bytes, pushed, drops, refills,
	    zero_copy, backing_now, backing_all, pushed_hits, direct_opens;
};

/* What the core hands every way: the mount's objects (borrowed, or made
 * at create: pool, streams), its options, the kernel's callbacks and the
 * counters. Set before any way's create; the pool after them. */
struct bfs_serve_base {
	const struct bfs_dataset *ds;
	struct bfs_order *order;
	const struct bfs_layout *layout;
	struct bfs_pool *pool;	     /* the mode's: its batch files' */
	struct bfs_pool *plain;	     /* direct reads' and streams' (no memfd,
				      * no hook): pool itself, or one of its own */
	struct bfs_streams *streams; /* offsets of batches in streams */
	struct bfs_serve_opts o;
	struct bfs_serve_kernel k;
	struct serve_counters c;
};

/* A way of serving, set up in a mount: its table, the base, its state. */
struct bfs_serve_way {
	const struct bfs_serve_ops *ops;
	struct bfs_serve_base *base;
	void *state; /* the way's own (ops->create), or NULL */
};

/* An open file. The core sets 'way', 'at', 'size' (a batch file's: the
 * core locates and sizes it; a stream's and offsets': the way sizes it),
 * 'opened_ns' and 'refs'; the union is its way's. */
struct bfs_file {
	struct bfs_serve_way *way; /* how it is served, chosen at open */
	struct bfs_batch_loc at;   /* batch files: the batch (located at
				    * open); streams, offsets: at.id's lane
				    * and epoch */
	uint64_t size;		   /* bytes */
	_Atomic uint64_t served;   /* batch files: bytes replied so far */
	atomic_bool consumed;	   /* batch files: counted read to the end */
	uint64_t opened_ns;	   /* batch files: when opened (monotonic) */
	union {			   /* the way's own */
		struct {
			struct bfs_batch *held; /* the open's batch */
			bool counted; /* in the way's table of open files */
		} pt;		      /* passthrough */
		struct {
			bool open;   /* counted open in the ledger */
			uint64_t id; /* ... on this entry */
		} push;
		struct bfs_zc *zc; /* direct: slices of the archive, or NULL */
		struct {
			char *bytes; /* rendered at open, f->size of them */
			bool changes;
		} text;
	};
	/* The open's reference plus one per reply in flight; the last one
	 * frees the file. [core] */
	atomic_uint refs;
	struct bfs_file *prev, *next; /* [core: its lock] the open files */
};

/* The table of a way of serving. 'open' and 'read' are required; every
 * other entry may be NULL (nothing to do). */
struct bfs_serve_ops {
	const char *name; /* the mode's (bfs_serve_mode_name), or the kind's */

	/* ---- mount-wide ---- */
	/* At bfs_serve_create, before the pool exists: w->state, and the
	 * pool options the way needs in *po (its hooks get w as their
	 * argument). 0 or -errno; destroy then undoes what was made. */
	int (*create)(struct bfs_serve_way *w, struct bfs_pool_opts *po);
	/* At bfs_serve_destroy, before the pool goes (the way's jobs hold
	 * batches), then after it (its workers called into the way). */
	void (*stop)(struct bfs_serve_way *w);
	void (*destroy)(struct bfs_serve_way *w);
	/* bfs_serve_stop_kernel, _kernel_busy and _settle (serve.h), for a
	 * way that calls into the kernel. */
	void (*stop_kernel)(struct bfs_serve_way *w);
	bool (*kernel_busy)(struct bfs_serve_way *w);
	void (*settle)(struct bfs_serve_way *w);

	/* ---- per file ---- */
	/* Whether the kernel may hold batch file f's inode open in this way,
	 * so that every open of it must be served this way too (passthrough:
	 * the kernel refuses an open without the backing file while one with
	 * it is open). NULL: never. */
	bool (*holds)(struct bfs_serve_way *w, const struct bfs_file *f);
	/* Open f: set *how (the core's defaults: noflush), hold what f
	 * needs. 0 or -errno; a failed open holds nothing. */
	int (*open)(struct bfs_serve_way *w, struct bfs_file *f,
		    struct bfs_serve_how *how);
	/* The reply to a READ of [off, off + n) of f (0 < n, off + n <=
	 * f->size): slices in r, and what they pin in r->batch and r->more
	 * (batches of r->pool) or r->scratch (malloc'd), which the core lets
	 * go at bfs_serve_done. 0 or -errno. */
	int (*read)(struct bfs_serve_way *w, struct bfs_file *f, uint64_t off,
		    uint64_t n, struct bfs_serve_reply *r);
	/* The reply r (of r->file) was sent, whatever it was. */
	void (*done)(struct bfs_serve_way *w, struct bfs_serve_reply *r);
	/* The kernel released f; replies of it may still be in flight. */
	void (*release)(struct bfs_serve_way *w, struct bfs_file *f);
	/* f's last reference went, or the serve is destroyed with f open
	 * (not released): let go of what f still holds. */
	void (*free)(struct bfs_serve_way *w, struct bfs_file *f);
};

/* ---- fs/serve_ways.c: the table ---- */

/* The way of serving batch files in mode m (not AUTO); NULL for none. */
const struct bfs_serve_ops *bfs_serve_ops_of(enum bfs_serve_mode m);

/* Each way's table (serve_ways.c and the core name them, nothing else). */
extern const struct bfs_serve_ops bfs_serve_passthrough_ops;
extern const struct bfs_serve_ops bfs_serve_push_ops;
extern const struct bfs_serve_ops bfs_serve_direct_ops;
extern const struct bfs_serve_ops bfs_serve_cache_ops;
extern const struct bfs_serve_ops bfs_serve_stream_ops;
extern const struct bfs_serve_ops bfs_serve_offsets_ops;

/* ---- fs/serve_batch.c: what the ways of batch files share ---- */

/* Count n more bytes of batch file f handed to its reader: true once,
 * when they reach its end (the batch is then served). */
bool bfs_serve_consumed(struct bfs_serve_base *b, struct bfs_file *f,
			uint64_t n);

/* Reply [off, off + n) of batch file f from 'pool''s buffer of its batch
 * (r->batch), acquired with its prefetch window, or 'alone' (no
 * successors gathered: the reader does not walk the batches through
 * this buffer); a batch read to its end leaves the pool. 0 or -errno. */
int bfs_serve_read_buffer(struct bfs_serve_base *b, struct bfs_pool *pool,
			  struct bfs_file *f, uint64_t off, uint64_t n,
			  bool alone, struct bfs_serve_reply *r);

/* -ETIMEDOUT (logged by the pool) and -ERANGE (a failed gather) reach a
 * reader as EIO; the rest as they are. */
static inline int bfs_serve_reader_errno(int rc)
{
	return rc == -ETIMEDOUT || rc == -ERANGE ? -EIO : rc;
}

static inline uint64_t bfs_serve_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- fs/serve_stats.c ---- */

/* bfs_serve_stats and bfs_serve_render_stats (serve.h) of the mount whose
 * base is b, served in 'mode' (its name). */
void bfs_serve_stats_of(struct bfs_serve_base *b, struct bfs_stats *out);
void bfs_serve_stats_render(struct bfs_serve_base *b, const char *mode,
			    uint64_t lookups, char *buf, size_t len,
			    size_t *pos);

#endif
