/* mount/ops: the FUSE low-level adapter. Each handler decodes the request,
 * asks fs/tree or fs/pool, and sends exactly one reply at its end.
 *
 * Serving mode (where the choice is made: open_batch below). Default
 * --serve push: batch files are page-cache files (keep_cache) and each
 * batch is stored WHOLE into the kernel's page cache with notify_store
 * before its open is answered (or earlier, by the worker that gathered it,
 * when the kernel already knows its inode), so read() and mmap faults are
 * page-cache hits with no FUSE round trip, and mmap(MAP_SHARED) works.
 * The pool then drops its copy; if the kernel loses pages, READs come and
 * the pool re-gathers the same bytes (batches are pure functions of
 * dataset, options, epoch, batch). Pushed batches are kept under
 * --page-cache-mb by invalidating the oldest closed ones ('pushed' below).
 * --serve cache: plain page-cache mode (the kernel READs 128 KiB at a
 * time); --serve direct (--direct-io): direct_io, fastest read() but
 * MAP_SHARED fails with ENODEV on libfuse 3.14 (research/fuse-anchors.md
 * §2). In direct mode, batches of big rows stored as served are replied
 * from the archive mapping with no gather (zero copy, below).
 * Measurements: see the comment at open_batch.
 *
 * Text files: README, dataset.json and index files are rendered at open into
 * the handle (keep_cache: they never change); stats is rendered at open and
 * served with direct_io, so every open sees fresh counters.
 *
 * Names and attributes never change during a mount: entries and attributes
 * get a day of validity, unknown names are cached as negative entries. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <time.h>

#include "fs/log.h"
#include "mount/mount.h"

#define LONG_TIMEOUT 86400.0

struct bfs_handle {
	struct bfs_node node;
	uint64_t size;		 /* batch files: file size */
	_Atomic uint64_t served; /* batch files: bytes replied so far */
	atomic_bool consumed;	 /* batch files: reported to the pool */
	bool push_open;		 /* batch files: counted open in pushed */
	struct zc *zc;		 /* batch files served with no gather */
	char *text;		 /* text files: rendered contents */
	size_t text_len;
	/* Open's reference plus one per READ being replied. The kernel sends
	 * RELEASE as soon as the last READ reply has been written, which can
	 * be before the replying thread has returned from fuse_reply_buf:
	 * the handle is freed by whichever side drops the last reference. */
	atomic_uint refs;
	/* In the mount's list of open handles (handles_lock). */
	struct bfs_handle *prev, *next;
};

static void handle_link(struct bfs_mount *m, struct bfs_handle *h)
{
	pthread_mutex_lock(&m->handles_lock);
	h->next = m->handles;
	if (h->next)
		h->next->prev = h;
	m->handles = h;
	pthread_mutex_unlock(&m->handles_lock);
}

static void handle_free(struct bfs_handle *h)
{
	free(h->zc);
	free(h->text);
	free(h);
}

/* Drop a reference to 'h'; the last one unlinks and frees it. */
static void handle_put(struct bfs_mount *m, struct bfs_handle *h)
{
	if (atomic_fetch_sub(&h->refs, 1) != 1)
		return;
	pthread_mutex_lock(&m->handles_lock);
	if (h->prev)
		h->prev->next = h->next;
	else
		m->handles = h->next;
	if (h->next)
		h->next->prev = h->prev;
	pthread_mutex_unlock(&m->handles_lock);
	handle_free(h);
}

void bfs_mount_handles_init(struct bfs_mount *m)
{
	pthread_mutex_init(&m->handles_lock, NULL);
	m->handles = NULL;
}

void bfs_mount_handles_free(struct bfs_mount *m)
{
	while (m->handles) {
		struct bfs_handle *h = m->handles;

		m->handles = h->next;
		handle_free(h);
	}
	pthread_mutex_destroy(&m->handles_lock);
}

static struct bfs_mount *mnt_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static double attr_timeout(const struct stat *st)
{
	/* stats keeps a fixed size, but its times may change one day. */
	return (st->st_ino >> 60) == BFS_NODE_STATS ? 1.0 : LONG_TIMEOUT;
}

/* Bytes a READ of 'size' at 'off' gets from a file of 'total' bytes. */
static uint64_t read_len(uint64_t total, off_t off, size_t size)
{
	uint64_t left = (uint64_t)off < total ? total - (uint64_t)off : 0;

	return left < size ? left : size;
}

/* Count n more bytes replied from batch handle h. true once, for the
 * reply that reaches the end of the batch: it is then consumed. */
static bool batch_consumed(struct bfs_handle *h, uint64_t n)
{
	return atomic_fetch_add(&h->served, n) + n >= h->size &&
	       !atomic_exchange(&h->consumed, true);
}

/* The errno replied for a batch that cannot be served: not ready in time
 * (-ETIMEDOUT, logged by the pool) or a failed gather (-ERANGE) is EIO. */
static int batch_errno(int rc)
{
	return rc == -ETIMEDOUT || rc == -ERANGE ? EIO : -rc;
}

static void zc_init(struct bfs_mount *m);

static void bfs_init(void *userdata, struct fuse_conn_info *conn)
{
	zc_init(userdata);
	/* More than the kernel's 12 async requests in flight (readahead,
	 * async direct I/O): research/fuse-anchors.md §2. */
	conn->max_background = 64;
	conn->congestion_threshold = 48;
	if (conn->capable & FUSE_CAP_READDIRPLUS)
		conn->want |= FUSE_CAP_READDIRPLUS;
	conn->want &= ~(unsigned)FUSE_CAP_READDIRPLUS_AUTO;
}

static void bfs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	int rc;

	memset(&e, 0, sizeof(e));
	rc = bfs_tree_lookup(mnt_of(req)->tree, parent, name, &e.attr);
	if (rc == 0) {
		e.ino = e.attr.st_ino;
		e.attr_timeout = attr_timeout(&e.attr);
		e.entry_timeout = LONG_TIMEOUT;
	} else if (rc == -ENOENT) {
		e.ino = 0; /* negative entry, cached as long */
		e.entry_timeout = LONG_TIMEOUT;
		rc = 0;
	}
	if (rc == 0)
		fuse_reply_entry(req, &e);
	else
		fuse_reply_err(req, -rc);
}

static void bfs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	fuse_reply_none(req); /* inode numbers are arithmetic: nothing held */
}

static void bfs_forget_multi(fuse_req_t req, size_t count,
			     struct fuse_forget_data *forgets)
{
	fuse_reply_none(req);
}

static void bfs_getattr(fuse_req_t req, fuse_ino_t ino,
			struct fuse_file_info *fi)
{
	struct stat st;
	int rc = bfs_tree_getattr(mnt_of(req)->tree, ino, &st);

	if (rc == 0)
		fuse_reply_attr(req, &st, attr_timeout(&st));
	else
		fuse_reply_err(req, -rc);
}

static void bfs_erofs(fuse_req_t req)
{
	fuse_reply_err(req, EROFS);
}

static void bfs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
			int to_set, struct fuse_file_info *fi)
{
	bfs_erofs(req);
}

static void bfs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode, dev_t rdev)
{
	bfs_erofs(req);
}

static void bfs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode)
{
	bfs_erofs(req);
}

static void bfs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	bfs_erofs(req);
}

static void bfs_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		       fuse_ino_t newparent, const char *newname,
		       unsigned int flags)
{
	bfs_erofs(req);
}

static void bfs_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
			const char *name)
{
	bfs_erofs(req);
}

static void bfs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
		     const char *newname)
{
	bfs_erofs(req);
}

static void bfs_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		       mode_t mode, struct fuse_file_info *fi)
{
	bfs_erofs(req);
}

static void bfs_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
		      size_t size, off_t off, struct fuse_file_info *fi)
{
	bfs_erofs(req);
}

static void bfs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			 const char *value, size_t size, int flags)
{
	bfs_erofs(req);
}

static void bfs_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	bfs_erofs(req);
}

/* ---- batches pushed into the kernel's page cache (BFS_SERVE_PUSH) ----
 *
 * A FIFO of the batch inodes whose bytes were stored with notify_store,
 * with their sizes and how many handles have them open. It answers "is
 * this batch already in the kernel?" (a second open, concurrent or later,
 * does not gather and push again) and keeps the kernel's copies of batches
 * under a byte budget: past it, the oldest batches nobody has open are
 * invalidated (notify_inval_inode), so the page cache does not grow with
 * every epoch read. The kernel may also drop pages on its own (reclaim);
 * then reads of them come to the daemon as READs and the pool re-gathers
 * the same bytes (batches are pure functions of epoch and batch). */

#define PUSHED_MAX  4096u	/* batches tracked at once */
#define TRIM_BATCH  64u		/* invalidations per trim call */
#define STORE_CHUNK (64u << 20) /* bytes per notify_store (u32 lengths) */
#define PUSH_WAIT_S 2		/* an open waits this long for a push */

struct pushed_entry {
	uint64_t ino; /* 0: forgotten (a failed push) */
	uint64_t bytes;
	unsigned opens;
	bool pushing; /* entered, not stored yet: opens wait (pushed_enter) */
};

struct bfs_pushed {
	pthread_mutex_t lock;
	pthread_cond_t stored; /* [L] some entry stopped 'pushing' */
	uint64_t budget;
	uint64_t bytes;			      /* [L] sum of entries */
	unsigned head, count;		      /* [L] oldest at head */
	struct pushed_entry ring[PUSHED_MAX]; /* [L] */
};

int bfs_pushed_create(struct bfs_pushed **out, uint64_t budget_bytes)
{
	struct bfs_pushed *pb = calloc(1, sizeof(*pb));

	*out = pb;
	if (!pb)
		return -ENOMEM;
	pthread_mutex_init(&pb->lock, NULL);
	pthread_cond_init(&pb->stored, NULL);
	pb->budget = budget_bytes;
	return 0;
}

void bfs_pushed_destroy(struct bfs_pushed *pb)
{
	if (!pb)
		return;
	pthread_cond_destroy(&pb->stored);
	pthread_mutex_destroy(&pb->lock);
	free(pb);
}

/* The entry of ino, newest first (recent batches are the usual hits). [L] */
static struct pushed_entry *pushed_find(struct bfs_pushed *pb, uint64_t ino)
{
	for (unsigned i = pb->count; i-- > 0;) {
		struct pushed_entry *x = &pb->ring[(pb->head + i) % PUSHED_MAX];

		if (x->ino == ino)
			return x;
	}
	return NULL;
}

/* Record batch ino, 'opens' = 1 for an open handle, 0 for a worker
 * pushing ahead of any open. Returns 1: new entry, the caller pushes the
 * batch (then pushed_stored); 0: already pushed; -ENOSPC: no slot
 * (workers leave a quarter of the slots to opens), nothing tracked: READs
 * serve. An open that finds the batch still being pushed waits for the
 * store: were it to return, its reads would be READs locking the pages the
 * store then waits for, answered only by another FUSE thread (none once
 * the loop stops at SIGTERM: the daemon hung). The wait is bounded
 * (PUSH_WAIT_S), so opens never hold every FUSE thread. */
static int pushed_enter(struct bfs_pushed *pb, uint64_t ino, uint64_t bytes,
			unsigned opens)
{
	struct pushed_entry *x;
	struct timespec until;
	int rc = 0;

	pthread_mutex_lock(&pb->lock);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += PUSH_WAIT_S;
	while (opens && (x = pushed_find(pb, ino)) && x->pushing)
		if (pthread_cond_timedwait(&pb->stored, &pb->lock, &until))
			break; /* bounded: FUSE threads must not all wait */
	x = pushed_find(pb, ino);
	if (x) {
		x->opens += opens;
	} else if (pb->count >= (opens ? PUSHED_MAX : PUSHED_MAX / 4 * 3)) {
		rc = -ENOSPC;
	} else {
		x = &pb->ring[(pb->head + pb->count++) % PUSHED_MAX];
		*x = (struct pushed_entry){.ino = ino,
					   .bytes = bytes,
					   .opens = opens,
					   .pushing = true};
		pb->bytes += bytes;
		rc = 1;
	}
	pthread_mutex_unlock(&pb->lock);
	return rc;
}

/* The push of ino entered by pushed_enter is over (stored or failed):
 * opens waiting for it go on. */
static void pushed_stored(struct bfs_pushed *pb, uint64_t ino)
{
	struct pushed_entry *x;

	pthread_mutex_lock(&pb->lock);
	x = pushed_find(pb, ino);
	if (x)
		x->pushing = false;
	pthread_cond_broadcast(&pb->stored);
	pthread_mutex_unlock(&pb->lock);
}

/* A handle of ino closes; 'failed' = its push failed: forget the entry
 * (the kernel holds none or part of it; READs serve the rest). */
static void pushed_close(struct bfs_pushed *pb, uint64_t ino, bool failed)
{
	struct pushed_entry *x;

	pthread_mutex_lock(&pb->lock);
	x = pushed_find(pb, ino);
	if (x && x->opens)
		x->opens--;
	if (x && failed) {
		pb->bytes -= x->bytes;
		*x = (struct pushed_entry){0}; /* a hole, trimmed in turn */
	}
	pthread_mutex_unlock(&pb->lock);
}

/* Take the oldest entries nobody has open off the record until it is
 * under budget (and a quarter of the slots are free); their inodes go to
 * 'inos' for invalidation. Open ones move to the tail. Returns how many. */
static unsigned pushed_trim(struct bfs_pushed *pb, uint64_t *inos)
{
	unsigned n = 0;

	pthread_mutex_lock(&pb->lock);
	for (unsigned seen = 0, len = pb->count;
	     seen < len && n < TRIM_BATCH &&
	     (pb->bytes > pb->budget || pb->count > PUSHED_MAX / 4 * 3);
	     seen++) {
		struct pushed_entry x = pb->ring[pb->head];

		pb->head = (pb->head + 1) % PUSHED_MAX;
		pb->count--;
		if (x.opens) { /* still open: keep it, newest */
			pb->ring[(pb->head + pb->count++) % PUSHED_MAX] = x;
			continue;
		}
		pb->bytes -= x.bytes;
		if (x.ino)
			inos[n++] = x.ino;
	}
	pthread_mutex_unlock(&pb->lock);
	return n;
}

/* Invalidate what pushed_trim says is over budget. Called on a FUSE
 * thread with no lock held: the kernel waits on pages locked by a READ in
 * flight, which another FUSE thread answers. */
static void trim_page_cache(struct bfs_mount *m)
{
	uint64_t inos[TRIM_BATCH];
	unsigned n = pushed_trim(m->pushed, inos), dropped = 0;

	for (unsigned i = 0; i < n; i++) {
		int rc = fuse_lowlevel_notify_inval_inode(m->se, inos[i], 0, 0);

		/* -ENOENT: the kernel forgot the inode, pages and all */
		if (rc == 0 || rc == -ENOENT)
			dropped++;
	}
	if (dropped)
		bfs_pool_note_drops(m->pool, dropped);
}

/* Store the whole batch into the kernel's page cache for inode ino. */
static int store_batch(struct bfs_mount *m, fuse_ino_t ino,
		       const struct bfs_batch *b)
{
	const char *data = bfs_batch_data(b);
	uint64_t size = bfs_batch_size(b);
	int rc = 0;

	for (uint64_t off = 0; rc == 0 && off < size; off += STORE_CHUNK) {
		size_t n = size - off < STORE_CHUNK ? (size_t)(size - off)
						    : STORE_CHUNK;
		struct fuse_bufvec bv = FUSE_BUFVEC_INIT(n);

		bv.buf[0].mem = (void *)(data + off);
		rc = fuse_lowlevel_notify_store(m->se, ino, (off_t)off, &bv, 0);
	}
	return rc;
}

/* Push b (referenced; NULL: it could not be had) for ino, just entered
 * in m->pushed: stored, the pool drops its copy; not, the entry is
 * forgotten and READs serve the batch. Then keep the page cache under
 * budget. Returns whether b was stored. */
static bool push_entered(struct bfs_mount *m, fuse_ino_t ino,
			 struct bfs_batch *b)
{
	bool stored = b && store_batch(m, ino, b) == 0;

	if (stored)
		bfs_pool_pushed(m->pool, b);
	else
		pushed_close(m->pushed, ino, true);
	pushed_stored(m->pushed, ino);
	trim_page_cache(m);
	return stored;
}

void bfs_mount_on_ready(void *arg, struct bfs_batch *b, uint64_t e, uint64_t k)
{
	struct bfs_mount *m = arg;
	struct bfs_node n = {.kind = BFS_NODE_BATCH, .epoch = e, .batch = k};
	uint64_t ino = bfs_tree_ino(&n);

	/* A failed store is usually -ENOENT: the kernel has no inode yet */
	if (pushed_enter(m->pushed, ino, bfs_batch_size(b), 0) > 0)
		push_entered(m, ino, b);
}

/* Open of a batch in push mode: unless another open already pushed it,
 * wait for the batch (at most --timeout: then EIO), store it whole into
 * the page cache, and let the pool drop its copy. Every read() and mmap
 * fault of this open is then a page-cache hit with no FUSE round trip. A
 * failed store is not an error: READs serve the batch. */
static int push_batch(struct bfs_mount *m, struct bfs_handle *h, fuse_ino_t ino)
{
	struct bfs_batch *b = NULL;
	int rc = pushed_enter(m->pushed, ino, h->size, 1);

	h->push_open = rc >= 0;
	if (rc == 0) /* already in the page cache: ready before it was asked */
		bfs_pool_note_hit(m->pool);
	if (rc <= 0)
		return 0;
	rc = bfs_pool_acquire(m->pool, h->node.epoch, h->node.batch, &b);
	h->push_open = push_entered(m, ino, b); /* b: NULL when rc < 0 */
	bfs_pool_release(m->pool, b);
	return rc;
}

/* ---- zero copy: batches replied straight from the archive mapping ----
 *
 * When every row of every field is stored as served (C-contiguous,
 * little-endian: bfs_dataset_row), a READ of [off, off+n) of a batch is
 * one fuse_reply_iov whose slices are the handle's rendered header and
 * the rows in the archive's read-only mapping: the kernel's copy into the
 * reader's pages is the only copy (no gather into a pool buffer). Slices
 * adjacent in memory merge (sequential order: one slice per field). A
 * handle is served this way when a READ of ZC_READ_MAX bytes cannot need
 * more than ZC_MAX_IOV slices; otherwise (small rows, big batches) and for
 * a READ that would anyway, the pool's gathered buffer serves it.
 * Prefetch becomes advise: an open advises its batch and the batches up to
 * zc_ahead (--prefetch) after it (each once, zc_advised), so cold rows are
 * read ahead with no buffer held.
 * Faults: before each reply that touches rows, the archives are fstat()ed
 * (bfs_dataset_check): a truncated one gives EIO. If it shrinks between
 * the check and the writev, the kernel's copy from our iovec faults inside
 * the kernel: writev fails with EFAULT (no signal reaches the daemon) and
 * the kernel ends the READ with EIO (fuse_dev_do_write: copy_out_args
 * error -> out.h.error = -EIO); tests/mount/test_mount_zerocopy.py checks
 * both (BATCHFS_DEBUG_ZC_NO_CHECK skips the check). The daemon itself
 * never touches the rows. BATCHFS_DEBUG_ZC_MAX_IOV lowers the slice cap
 * of a READ (not the open's estimate), so tests reach the per-READ
 * fallback; BATCHFS_DEBUG_NO_ZERO_COPY turns it off (measurements). */

#define ZC_MAX_IOV   1023u	/* fuse_reply_iov: IOV_MAX minus the header */
#define ZC_READ_MAX  (1u << 20) /* largest READ (libfuse 3.14: 256 pages) */
#define ZC_MIN_SLICE 4096u	/* mean bytes per row slice worth it */

struct zc {
	uint64_t rows, data_off;
	uint64_t *idx;	     /* [rows] sample indices of the batch */
	const uint8_t **row; /* [nfields][rows] in file order */
	char head[];	     /* data_off (+1 scratch) header bytes */
};

/* 1 when every field of every shard is stored as served, in slices of
 * ZC_MIN_SLICE bytes on average (see the measurements at open_batch). */
static bool zc_eligible(const struct bfs_dataset *ds,
			const struct bfs_layout *l)
{
	size_t used = 0;

	for (size_t i = 0; i < l->nfields; i++)
		used += l->fields[i].f->row_bytes != 0;
	if (!used || l->row_bytes / used < ZC_MIN_SLICE)
		return false;
	for (size_t s = 0; s < bfs_dataset_nshards(ds); s++) {
		struct bfs_shard_info si;

		bfs_dataset_shard(ds, s, &si);
		for (size_t f = 0; si.samples && f < bfs_dataset_nfields(ds);
		     f++) {
			const void *p;

			if (bfs_dataset_row(ds, f, si.first_sample, &p) < 0)
				return false;
		}
	}
	return true;
}

static void zc_init(struct bfs_mount *m)
{
	const char *cap = getenv("BATCHFS_DEBUG_ZC_MAX_IOV");
	struct bfs_pool_stats st;

	bfs_pool_stats(m->pool, &st);
	m->zc_ahead = (unsigned)st.prefetch_depth;
	m->zc_no_check = getenv("BATCHFS_DEBUG_ZC_NO_CHECK") != NULL;
	m->zc_max_iov = cap ? (unsigned)strtoul(cap, NULL, 10) : ZC_MAX_IOV;
	if (m->zc_max_iov < 1 || m->zc_max_iov > ZC_MAX_IOV)
		m->zc_max_iov = ZC_MAX_IOV;
	m->zero_copy = m->serve == BFS_SERVE_DIRECT &&
		       !getenv("BATCHFS_DEBUG_NO_ZERO_COPY") &&
		       zc_eligible(m->ds, &m->layout);
	atomic_init(&m->zc_advised, 0);
	bfs_log(BFS_LOG_INFO, "mount", "zero copy: %s",
		m->zero_copy ? "on" : "off");
}

/* Most slices a READ of ZC_READ_MAX bytes of a 'rows' batch can need. */
static uint64_t zc_worst_slices(const struct bfs_layout *l, uint64_t rows)
{
	uint64_t n = 1; /* the header */

	for (size_t i = 0; i < l->nfields; i++) {
		uint64_t rb = l->fields[i].f->row_bytes;
		uint64_t s = rb ? ZC_READ_MAX / rb + 2 : 0;

		n += s < rows ? s : rows;
	}
	return n;
}

/* Advise the batches after stream position pos not advised yet. */
static void zc_advise_ahead(struct bfs_mount *m, uint64_t pos, uint64_t len)
{
	uint64_t from = pos + 1, to = pos + 1 + m->zc_ahead;
	uint64_t done = atomic_load(&m->zc_advised);
	uint64_t cap = bfs_order_batch_rows(m->order, 0);
	uint64_t *idx;

	if (done > from && done <= to)
		from = done;
	if (from >= to)
		return;
	while (done < to &&
	       !atomic_compare_exchange_weak(&m->zc_advised, &done, to))
		;
	idx = malloc((cap ? cap : 1) * sizeof(*idx));
	for (uint64_t q = from; idx && q < to; q++) {
		struct bfs_node n = {
		    .kind = BFS_NODE_BATCH, .epoch = q / len, .batch = q % len};
		uint64_t rows = bfs_order_batch_rows(m->order, n.batch);
		struct stat st;

		if (bfs_tree_getattr(m->tree, bfs_tree_ino(&n), &st) < 0)
			break; /* past the last epoch */
		if (bfs_order_batch(m->order, n.epoch, n.batch, idx) == 0)
			bfs_dataset_advise(m->ds, idx, rows);
	}
	free(idx);
}

/* Set up h->zc for a zero-copy batch; leaves it NULL (the pool serves)
 * when a row needs a gather or a READ could need too many slices. */
static int zc_open(struct bfs_mount *m, struct bfs_handle *h)
{
	const struct bfs_layout *l = &m->layout;
	uint64_t e = h->node.epoch, k = h->node.batch;
	uint64_t rows = bfs_order_batch_rows(m->order, k);
	uint64_t data = bfs_layout_data_offset(l, e, k, rows);
	struct zc *z;
	int rc = 0;

	if (!m->zero_copy || zc_worst_slices(l, rows) > ZC_MAX_IOV)
		return 0;
	z = malloc(sizeof(*z) + data + 8 + rows * sizeof(uint64_t) * 2 +
		   l->nfields * rows * sizeof(void *));
	if (!z)
		return -ENOMEM;
	z->rows = rows;
	z->data_off = data;
	z->idx = (uint64_t *)(z->head + data + 8); /* data: 4096 multiple */
	z->row = (const uint8_t **)(z->idx + rows);
	rc = bfs_order_batch(m->order, e, k, z->idx);
	for (size_t i = 0; rc == 0 && i < l->nfields; i++)
		for (uint64_t r = 0; rc == 0 && r < rows; r++)
			rc = bfs_dataset_row(
			    m->ds, l->fields[i].ds_index, z->idx[r],
			    (const void **)&z->row[i * rows + r]);
	if (rc < 0) {
		free(z);
		return rc == -ENOTSUP ? 0 : rc;
	}
	bfs_layout_header(l, e, k, rows, z->head);
	h->zc = z;
	bfs_dataset_advise(m->ds, z->idx, rows);
	zc_advise_ahead(m, e * bfs_order_len(m->order) + k,
			bfs_order_len(m->order));
	return 0;
}

/* Append [p, p+len) to iov[0..*cnt), merged with the last slice when
 * adjacent. false when a new slice does not fit. */
static bool zc_add(struct iovec *iov, unsigned *cnt, unsigned max,
		   const void *p, size_t len)
{
	struct iovec *last = *cnt ? &iov[*cnt - 1] : NULL;

	if (last && (const char *)last->iov_base + last->iov_len == p) {
		last->iov_len += len;
		return true;
	}
	if (*cnt == max)
		return false;
	iov[*cnt].iov_base = (void *)p;
	iov[*cnt].iov_len = len;
	(*cnt)++;
	return true;
}

/* The slices of bytes [off, end) of h's batch (end <= size), at most
 * 'max' of them. Returns the slice count; *reached = where they end
 * (< end when more slices were needed). */
static unsigned zc_iov(const struct bfs_mount *m, const struct zc *z,
		       uint64_t off, uint64_t end, struct iovec *iov,
		       unsigned max, uint64_t *reached)
{
	const struct bfs_layout *l = &m->layout;
	uint64_t fstart = z->data_off, p = off;
	unsigned cnt = 0;

	if (p < z->data_off) {
		uint64_t n = (end < z->data_off ? end : z->data_off) - p;

		zc_add(iov, &cnt, max, z->head + p, (size_t)n);
		p += n;
	}
	for (size_t i = 0; i < l->nfields && fstart < end; i++) {
		uint64_t rb = l->fields[i].f->row_bytes;
		uint64_t fend = fstart + z->rows * rb;
		uint64_t stop = end < fend ? end : fend;

		for (; p < stop;) {
			uint64_t r = (p - fstart) / rb, w = (p - fstart) % rb;
			uint64_t n = rb - w < stop - p ? rb - w : stop - p;

			if (!zc_add(iov, &cnt, max, z->row[i * z->rows + r] + w,
				    (size_t)n))
				goto out;
			p += n;
		}
		fstart = fend;
	}
out:
	*reached = p;
	return cnt;
}

static void read_batch(fuse_req_t req, struct bfs_mount *m,
		       struct bfs_handle *h, size_t size, off_t off);

/* Serve [off, off+size) of a zero-copy batch (see above). */
static void read_zc(fuse_req_t req, struct bfs_mount *m, struct bfs_handle *h,
		    size_t size, off_t off)
{
	struct iovec iov[ZC_MAX_IOV];
	const struct zc *z = h->zc;
	uint64_t n = read_len(h->size, off, size), end = (uint64_t)off + n;
	uint64_t reached;
	unsigned cnt;
	int rc = 0;
	bool last;

	cnt = zc_iov(m, z, (uint64_t)off, end, iov, m->zc_max_iov, &reached);
	if (reached < end) { /* too many slices: the pool's buffer serves */
		read_batch(req, m, h, size, off);
		return;
	}
	if (end > z->data_off && !m->zc_no_check)
		rc = bfs_dataset_check(m->ds, z->idx, z->rows);
	if (rc < 0) {
		fuse_reply_err(req, EIO);
		return;
	}
	last = n && batch_consumed(h, n);
	bfs_pool_note_served(m->pool, n, last);
	atomic_fetch_add(&h->refs, 1); /* iov[0] may point into h->zc */
	if (cnt)
		fuse_reply_iov(req, iov, (int)cnt); /* EFAULT: kernel EIO */
	else
		fuse_reply_buf(req, NULL, 0);
	handle_put(m, h);
}

/* The serving mode, chosen by measurement. 2-vCPU shared VM (load ~2 from
 * other jobs: +-30 %), Python reader: every batch, one open each,
 * readinto() a 1 MiB buffer; median of 3 runs, same run for all rows:
 *   A: pack --demo 100000 (308 MB), --batch-size 256 --seed 1 (775 KiB
 *      batches), epochs 0-1 (619 MB)
 *   B: uint8 [10000,3,224,224] rows (147 KiB) + int64 labels (1.5 GB),
 *      --batch-size 64 --shuffle, epoch 0
 *                                        A (GB/s)            B (GB/s)
 *   --serve push (default)              1.47 (1.27..1.50)   2.41 (2.32..2.61)
 *   --serve push, no worker-side push   1.49 (1.02..1.77)   -
 *   --serve cache (old default)         1.42 (1.23..1.48)   2.28 (1.72..2.42)
 *   --serve direct (--direct-io)        2.39 (1.65..2.40)   4.26 (3.90..4.33)
 *   null FUSE server, direct_io, 1 MiB  4.67                4.64
 *   read() of a page-cached plain file  9.09                8.71
 * (a throw-away script of the serving-mode task, run with nice -n 5; the
 * same reader as tools/bench's read_epoch_py.) 3 epochs of A with
 * --cache-mb 64: daemon RssAnon
 * peak 5 MiB in every mode; page cache grew 64 MB (push: bounded by
 * --page-cache-mb), 879 MB (cache), 0 (direct); throughput 2.06 / 2.15 / 4.09
 * GB/s on a quieter machine. Pushing whole batches at open removes the 128 KiB
 * READ round trips, but the kernel still copies every byte twice (store into
 * fresh page-cache pages, then read out), so it is no faster than the kernel's
 * own readahead here: the hypothesis "push = direct-io speed" failed (push is
 * 0.55-0.6x direct). push stays the default because it is the fastest
 * mode in which mmap(MAP_SHARED) works (tied with cache within noise),
 * it keeps the page cache bounded, and an open never returns before the
 * whole batch is resident (mmap readers fault nothing to the daemon).
 * Readers that only read() should use --direct-io. FUSE threads (direct,
 * earlier run): 1: 1.89, 2: 2.66, 4: 2.47, 8: 2.16 GB/s -> 4 by default.
 *
 * Zero copy (the section above), same machine, later run, nice -n 5, one
 * run for all rows, median of 3 (GB/s payload; daemon CPU s per epoch of
 * the Python reader): B' = uint8 [7200,3,224,224] + int64 via batchfs
 * pack, batch 64, --shuffle; C = uint8 [1400000,784] + int64, batch 256,
 * --shuffle. Python readinto 1 MiB (epoch 0) / `batchfs bench --read`
 * (epoch 1):
 *                                   B' py / C-read / cpu    C py / C-read / cpu
 *   direct, zero copy               3.81 / 4.49 / 0.23      0.43 / 0.45 / 2.36
 *   direct, gathered (before)       3.05 / 3.79 / 0.46      1.88 / 1.59 / 0.75
 *   push (default, gathered)        1.95 / 2.02 / 0.59      1.40 / 1.54 / 0.94
 *   null FUSE server (1 MiB)        4.95 (C-read)
 *   page-cache read of the archive  8.60
 * Big rows: zero copy is 0.91x the null server (was 0.77x) at half the
 * daemon CPU. Small rows: 513 slices of 784 or 8 bytes per READ are 4x
 * slower than one gathered buffer (the kernel pins and maps a page per
 * slice), so zero copy needs ZC_MIN_SLICE bytes per slice on average;
 * C is gathered. Push from the archive (hand-written FUSE_NOTIFY_STORE
 * writev of header + row slices, no gather) was measured on B' too:
 * 1.59 / 1.84 GB/s vs 1.92 / 1.85 gathered (workers gather and push
 * ahead in parallel; the open-time store from the mapping does not), so
 * it was not kept. */
static int open_batch(struct bfs_mount *m, struct bfs_handle *h, fuse_ino_t ino,
		      struct fuse_file_info *fi)
{
	h->size = bfs_tree_batch_size(m->tree, h->node.epoch, h->node.batch);
	if (m->serve == BFS_SERVE_DIRECT) {
		fi->direct_io = 1;
		return zc_open(m, h);
	}
	fi->keep_cache = 1; /* the pages pushed (or read) stay valid */
	return m->serve == BFS_SERVE_PUSH ? push_batch(m, h, ino) : 0;
}

static void bfs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct bfs_mount *m = mnt_of(req);
	struct bfs_handle *h = NULL;
	int rc;

	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		rc = -EROFS;
		goto out;
	}
	h = calloc(1, sizeof(*h));
	if (!h) {
		rc = -ENOMEM;
		goto out;
	}
	atomic_init(&h->refs, 1);
	rc = bfs_tree_decode(m->tree, ino, &h->node);
	if (rc < 0)
		goto out;
	switch (h->node.kind) {
	case BFS_NODE_BATCH:
		rc = open_batch(m, h, ino, fi);
		break;
	case BFS_NODE_README:
	case BFS_NODE_DATASET:
	case BFS_NODE_STATS:
	case BFS_NODE_INDEXFILE:
		rc = bfs_tree_render(m->tree, ino, &h->text, &h->text_len);
		if (h->node.kind == BFS_NODE_STATS)
			fi->direct_io = 1;
		else
			fi->keep_cache = 1;
		break;
	default:
		rc = -EISDIR;
		break;
	}
out:
	if (rc == 0) {
		handle_link(m, h);
		fi->fh = (uint64_t)(uintptr_t)h;
		fuse_reply_open(req, fi);
	} else {
		if (h)
			handle_free(h);
		fuse_reply_err(req, batch_errno(rc));
	}
}

/* Serve [off, off+size) of a batch from the pool's buffer. */
static void read_batch(fuse_req_t req, struct bfs_mount *m,
		       struct bfs_handle *h, size_t size, off_t off)
{
	struct bfs_batch *b = NULL;
	uint64_t n = read_len(h->size, off, size);
	int rc = 0;

	if ((uint64_t)off < h->size) {
		/* Push mode: a READ means the kernel lost pages of a batch
		 * pushed at open; re-gather it without its successors. A
		 * zero-copy batch: its successors are not gathered either. */
		rc = m->serve == BFS_SERVE_PUSH || h->zc
			 ? bfs_pool_acquire_alone(m->pool, h->node.epoch,
						  h->node.batch, &b)
			 : bfs_pool_acquire(m->pool, h->node.epoch,
					    h->node.batch, &b);
	}
	if (rc < 0) {
		fuse_reply_err(req, batch_errno(rc)); /* -EIO, -ENOMEM ... */
		return;
	}
	/* Account before replying: the reader may look at stats as soon as
	 * it has its bytes. */
	if (b)
		bfs_pool_served(m->pool, b, n, batch_consumed(h, n));
	fuse_reply_buf(req, b ? (const char *)bfs_batch_data(b) + off : NULL,
		       (size_t)n);
	bfs_pool_release(m->pool, b);
}

static void bfs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	struct bfs_handle *h = (struct bfs_handle *)(uintptr_t)fi->fh;
	struct bfs_mount *m = mnt_of(req);
	size_t n;

	if (h->node.kind == BFS_NODE_BATCH) {
		if (h->zc)
			read_zc(req, m, h, size, off);
		else
			read_batch(req, m, h, size, off);
		return;
	}
	n = (size_t)read_len(h->text_len, off, size);
	atomic_fetch_add(&h->refs, 1);
	fuse_reply_buf(req, n ? h->text + off : NULL, n); /* frees req */
	handle_put(m, h);
}

static void bfs_release(fuse_req_t req, fuse_ino_t ino,
			struct fuse_file_info *fi)
{
	struct bfs_handle *h = (struct bfs_handle *)(uintptr_t)fi->fh;
	struct bfs_mount *m = mnt_of(req);
	bool trim = h->push_open; /* h may be freed by handle_put */

	if (trim)
		pushed_close(m->pushed, ino, false);
	handle_put(m, h);
	fuse_reply_err(req, 0);
	if (trim) /* after the reply: nobody waits for this */
		trim_page_cache(m);
}

static void bfs_opendir(fuse_req_t req, fuse_ino_t ino,
			struct fuse_file_info *fi)
{
	struct stat st;
	int rc = bfs_tree_getattr(mnt_of(req)->tree, ino, &st);

	if (rc == 0 && !S_ISDIR(st.st_mode))
		rc = -ENOTDIR;
	if (rc == 0) {
		fi->cache_readdir = 1; /* listings never change */
		fi->keep_cache = 1;
		fuse_reply_open(req, fi);
	} else {
		fuse_reply_err(req, -rc);
	}
}

/* Fill up to 'size' bytes of entries from entry number 'off'. */
static void readdir_common(fuse_req_t req, fuse_ino_t ino, size_t size,
			   off_t off, bool plus)
{
	struct bfs_mount *m = mnt_of(req);
	char *buf = malloc(size ? size : 1);
	size_t pos = 0;
	int rc = buf ? 0 : -ENOMEM;

	for (uint64_t i = (uint64_t)off; rc >= 0; i++) {
		char name[64];
		struct fuse_entry_param e;
		size_t need;

		memset(&e, 0, sizeof(e));
		rc = bfs_tree_dirent(m->tree, ino, i, name, sizeof(name),
				     &e.attr);
		if (rc <= 0)
			break;
		if (plus) {
			e.ino = e.attr.st_ino;
			e.attr_timeout = attr_timeout(&e.attr);
			e.entry_timeout = LONG_TIMEOUT;
			need = fuse_add_direntry_plus(
			    req, buf + pos, size - pos, name, &e, (off_t)i + 1);
		} else {
			need = fuse_add_direntry(req, buf + pos, size - pos,
						 name, &e.attr, (off_t)i + 1);
		}
		if (need > size - pos)
			break;
		pos += need;
	}
	if (rc < 0 && pos == 0)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_buf(req, buf, pos);
	free(buf);
}

static void bfs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			struct fuse_file_info *fi)
{
	readdir_common(req, ino, size, off, false);
}

static void bfs_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
			    off_t off, struct fuse_file_info *fi)
{
	readdir_common(req, ino, size, off, true);
}

static void bfs_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv;

	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = BFS_TREE_BLKSIZE;
	sv.f_frsize = 4096;
	sv.f_namemax = 255;
	sv.f_flag = ST_RDONLY;
	fuse_reply_statfs(req, &sv);
}

const struct fuse_lowlevel_ops bfs_mount_ops = {
    .init = bfs_init,
    .lookup = bfs_lookup,
    .forget = bfs_forget,
    .forget_multi = bfs_forget_multi,
    .getattr = bfs_getattr,
    .setattr = bfs_setattr,
    .mknod = bfs_mknod,
    .mkdir = bfs_mkdir,
    .unlink = bfs_unlink,
    .rmdir = bfs_unlink,
    .rename = bfs_rename,
    .symlink = bfs_symlink,
    .link = bfs_link,
    .create = bfs_create,
    .write = bfs_write,
    .setxattr = bfs_setxattr,
    .removexattr = bfs_removexattr,
    .open = bfs_open,
    .read = bfs_read,
    .release = bfs_release,
    .opendir = bfs_opendir,
    .readdir = bfs_readdir,
    .readdirplus = bfs_readdirplus,
    .statfs = bfs_statfs,
};
