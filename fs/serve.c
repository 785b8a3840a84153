/* fs/serve: open files and how their bytes reach readers (serve.h): the
 * core. The ways of serving live in files of their own behind a table of
 * operations (serve_impl.h has the map, and which way calls go); this
 * file owns the files and dispatches to their ways. The one mode it
 * names is direct, whose way also serves O_DIRECT opens in every mode.
 *
 * Ways. Every kind of file has a way, set up at create: batch files the
 * mode's (its table from serve_ways.c), and direct mode's for batch files
 * opened with O_DIRECT (the readers batchfs ships open them so:
 * batch_way), unless the mode's way holds the batch open (then the
 * mode's) or no_direct_open refuses such opens (a test's); in direct mode
 * the two are one way. stream/N and index/N/offsets have theirs
 * (serve_stream.c), texts the one below. Each open
 * sets the file's way, and every later call of that file goes through it:
 * read, done (after the reply), release, free. The mount-wide calls
 * (create, stop, destroy, the kernel's thread) go to every way that has
 * them.
 *
 * Pools. Each way's create says what its pool must do. The mode's way
 * gets the mount's pool (base->pool); the direct way and the streams
 * get base->plain, a pool of anonymous buffers with no hook: the same
 * pool when the mode's asks for nothing more (direct, cache), else one of
 * its own (passthrough's memfds and backing files, push's early pushes
 * would be paid for every batch read with direct I/O).
 *
 * Files. Every open makes a struct bfs_file: a text file (README,
 * dataset.json, stats, index/N/batch_K) holds the bytes the namespace
 * rendered at open; a batch file is located (fs/order) and sized
 * (fs/layout) here, once, then opened by its way with f->at handed down;
 * streams and offsets are sized by their way.
 *
 * Lifetime. A file has the open's reference plus one per reply in flight:
 * the kernel may send RELEASE as soon as the last reply is written, before
 * its thread has called bfs_serve_done, so whichever side drops the last
 * reference frees the file (its way's free first). Files still open at
 * destroy (unmounted with files open) are freed there.
 *
 * With debug logging (-v) each batch file's open (with the time it took:
 * in passthrough and push it waits for the batch) and its serving (read
 * to the end, pushed or handed over whole; the time since its open) are
 * logged; the pool logs materializing and evicting.
 *
 * Locks: s->lock guards the list of open files only; counters are atomic;
 * the pool, the order engine and the dataset are thread-safe. */
#include "fs/serve_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/log.h"

#define MOD "serve"

/* The kinds of file, each served its own way: KIND_DIRECT is a batch
 * file opened with O_DIRECT (no way of its own in direct mode: the
 * mode's serves it). */
enum kind {
	KIND_BATCH,
	KIND_DIRECT,
	KIND_STREAM,
	KIND_OFFSETS,
	KIND_TEXT,
	KINDS
};

struct bfs_serve {
	struct bfs_serve_base b;	 /* what the ways are handed */
	struct bfs_serve_way way[KINDS]; /* ops NULL: no such way */
	struct bfs_serve_way *direct;	 /* O_DIRECT batch files' */
	pthread_mutex_t lock;		 /* the list of open files */
	struct bfs_file *files;		 /* [lock] */
};

/* ---- texts: bytes rendered at open ------------------------------------- */

static int text_open(struct bfs_serve_way *w, struct bfs_file *f,
		     struct bfs_serve_how *how)
{
	how->direct_io = f->text.changes; /* every open reads it afresh */
	how->keep_cache = !f->text.changes;
	return 0;
}

static int text_read(struct bfs_serve_way *w, struct bfs_file *f, uint64_t off,
		     uint64_t n, struct bfs_serve_reply *r)
{
	r->iov[0].iov_base = f->text.bytes + off;
	r->iov[0].iov_len = (size_t)n;
	r->iovcnt = 1;
	return 0;
}

static void text_free(struct bfs_serve_way *w, struct bfs_file *f)
{
	free(f->text.bytes);
	f->text.bytes = NULL;
}

static const struct bfs_serve_ops text_ops = {
    .name = "text",
    .open = text_open,
    .read = text_read,
    .free = text_free,
};

/* ---- creation ---------------------------------------------------------- */

/* Whether pool options o ask for more than plain buffers. */
static bool pool_special(const struct bfs_pool_opts *o)
{
	return o->memfd || o->prepare || o->on_ready || o->on_free;
}

/* The mount's pools: the mode's (*mode, from its way's create) and, when
 * it is special, a plain one for the direct reads and the streams. */
static int make_pools(struct bfs_serve *s, struct bfs_pool_opts *mode,
		      struct bfs_pool_opts *plain)
{
	int rc;

	if (!pool_special(mode)) { /* one pool serves every way */
		mode->rows_in_place |= plain->rows_in_place;
		rc = bfs_pool_create(&s->b.pool, s->b.ds, s->b.order,
				     s->b.layout, mode);
		s->b.plain = s->b.pool;
		return rc;
	}
	rc =
	    bfs_pool_create(&s->b.pool, s->b.ds, s->b.order, s->b.layout, mode);
	if (rc == 0)
		rc = bfs_pool_create(&s->b.plain, s->b.ds, s->b.order,
				     s->b.layout, plain);
	return rc;
}

int bfs_serve_create(struct bfs_serve **out, const struct bfs_dataset *ds,
		     struct bfs_order *order, const struct bfs_layout *layout,
		     const struct bfs_pool_opts *po,
		     const struct bfs_serve_opts *o,
		     const struct bfs_serve_kernel *kernel)
{
	const struct bfs_serve_ops *ops[KINDS] = {
	    [KIND_BATCH] = bfs_serve_ops_of(o->mode),
	    [KIND_DIRECT] = o->mode == BFS_SERVE_DIRECT
				? NULL
				: bfs_serve_ops_of(BFS_SERVE_DIRECT),
	    [KIND_STREAM] = &bfs_serve_stream_ops,
	    [KIND_OFFSETS] = &bfs_serve_offsets_ops,
	    [KIND_TEXT] = &text_ops,
	};
	struct bfs_serve *s;
	struct bfs_pool_opts mode = *po, plain;
	int rc = 0;

	*out = NULL;
	if (!ops[KIND_BATCH]) /* AUTO, or no such mode */
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->b.ds = ds;
	s->b.order = order;
	s->b.layout = layout;
	s->b.o = *o;
	s->b.k = *kernel;
	pthread_mutex_init(&s->lock, NULL);
	/* The pools' memory and hooks are their ways' to ask */
	mode.memfd = false;
	mode.rows_in_place = false;
	plain = mode;
	mode.hook_arg = &s->way[KIND_BATCH];
	s->direct =
	    ops[KIND_DIRECT] ? &s->way[KIND_DIRECT] : &s->way[KIND_BATCH];
	for (int k = 0; k < KINDS; k++) {
		struct bfs_serve_way *w = &s->way[k];

		w->ops = ops[k];
		w->base = &s->b;
		if (w->ops && w->ops->create) {
			rc =
			    w->ops->create(w, k == KIND_BATCH ? &mode : &plain);
			if (rc < 0)
				goto err_destroy;
		}
	}
	rc = make_pools(s, &mode, &plain);
	if (rc == 0)
		rc = bfs_streams_create(&s->b.streams, layout, order);
	if (rc < 0)
		goto err_destroy;
	*out = s;
	return 0;
err_destroy:
	bfs_serve_destroy(s);
	return rc;
}

/* f's way lets go of what it holds, then f goes. */
static void file_free(struct bfs_file *f)
{
	if (f->way->ops->free)
		f->way->ops->free(f->way, f);
	free(f);
}

void bfs_serve_destroy(struct bfs_serve *s)
{
	if (!s)
		return;
	while (s->files) { /* open at unmount: nothing replies any more */
		struct bfs_file *f = s->files;

		s->files = f->next;
		file_free(f);
	}
	for (int k = 0; k < KINDS; k++) /* their jobs hold batches */
		if (s->way[k].ops && s->way[k].ops->stop)
			s->way[k].ops->stop(&s->way[k]);
	if (s->b.plain != s->b.pool)
		bfs_pool_destroy(s->b.plain);
	bfs_pool_destroy(s->b.pool);
	for (int k = 0; k < KINDS; k++) /* workers called into them */
		if (s->way[k].ops && s->way[k].ops->destroy)
			s->way[k].ops->destroy(&s->way[k]);
	bfs_streams_destroy(s->b.streams);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

enum bfs_serve_mode bfs_serve_mode(const struct bfs_serve *s)
{
	return s->b.o.mode;
}

/* ---- files --------------------------------------------------------------- */

static void file_link(struct bfs_serve *s, struct bfs_file *f)
{
	pthread_mutex_lock(&s->lock);
	f->next = s->files;
	if (f->next)
		f->next->prev = f;
	s->files = f;
	pthread_mutex_unlock(&s->lock);
}

/* Drop a reference to f; the last one unlinks and frees it. */
static void file_put(struct bfs_serve *s, struct bfs_file *f)
{
	if (atomic_fetch_sub(&f->refs, 1) != 1)
		return;
	pthread_mutex_lock(&s->lock);
	if (f->prev)
		f->prev->next = f->next;
	else
		s->files = f->next;
	if (f->next)
		f->next->prev = f->prev;
	pthread_mutex_unlock(&s->lock);
	file_free(f);
}

/* A new file (one reference: the open's), and the defaults of its open
 * reply; NULL when out of memory. */
static struct bfs_file *file_new(struct bfs_serve_how *how)
{
	struct bfs_file *f = calloc(1, sizeof(*f));

	memset(how, 0, sizeof(*how));
	how->noflush = true; /* read-only: nothing to flush at close */
	if (f)
		atomic_init(&f->refs, 1);
	return f;
}

/* Open f the way w serves it. */
static int open_as(struct bfs_serve_way *w, struct bfs_file *f,
		   struct bfs_serve_how *how)
{
	f->way = w;
	return w->ops->open(w, f, how);
}

/* The end of an open that returned rc: f is linked and handed out, or
 * freed (a failed open holds nothing). */
static int opened(struct bfs_serve *s, struct bfs_file *f, int rc,
		  struct bfs_file **out)
{
	if (rc < 0) {
		free(f);
		return bfs_serve_reader_errno(rc);
	}
	file_link(s, f);
	*out = f;
	return 0;
}

/* The way batch file f (located) is served for an open with 'oflags':
 * the mount's mode, or direct mode's for an O_DIRECT open (the readers
 * batchfs ships: reads sized to the file, each one READ replied from the
 * plain pool or the archive itself) unless the mode's way holds f's batch
 * open, where the kernel wants every open of it alike. NULL: the open is
 * refused (no_direct_open). */
static struct bfs_serve_way *batch_way(struct bfs_serve *s,
				       const struct bfs_file *f, int oflags)
{
	struct bfs_serve_way *mode = &s->way[KIND_BATCH];

	if (!(oflags & O_DIRECT))
		return mode;
	if (s->b.o.no_direct_open)
		return NULL;
	if (s->direct != mode && mode->ops->holds && mode->ops->holds(mode, f))
		return mode;
	return s->direct;
}

/* Open batch id as f: located once (fs/order), sized (fs/layout: no
 * call into the order for a fixed layout, its samples for a ragged
 * one), then opened by its way, with f->at handed down. */
static int open_batch(struct bfs_serve *s, struct bfs_batch_id id, int oflags,
		      struct bfs_file *f, struct bfs_serve_how *how)
{
	struct bfs_serve_way *w;
	char name[80];
	int rc = bfs_order_locate(s->b.order, id, &f->at);

	if (rc)
		return rc;
	rc = bfs_layout_file_size(s->b.layout, s->b.order, &f->at, &f->size);
	if (rc)
		return rc;
	w = batch_way(s, f, oflags);
	if (!w)
		return -EINVAL;
	f->opened_ns = bfs_serve_now_ns();
	atomic_fetch_add(&s->b.c.opened, 1);
	if (w == s->direct && (oflags & O_DIRECT))
		atomic_fetch_add(&s->b.c.direct_opens, 1);
	rc = open_as(w, f, how);
	if (bfs_log_wants(BFS_LOG_DEBUG)) {
		bfs_order_batch_name(s->b.order, id, name, sizeof(name));
		bfs_log(BFS_LOG_DEBUG, MOD, "%s: open (%s): %s in %.3f ms",
			name, f->way->ops->name, rc < 0 ? strerror(-rc) : "ok",
			(double)(bfs_serve_now_ns() - f->opened_ns) / 1e6);
	}
	return rc;
}

int bfs_serve_open_batch(struct bfs_serve *s, struct bfs_batch_id id,
			 int oflags, struct bfs_file **out,
			 struct bfs_serve_how *how)
{
	struct bfs_file *f = file_new(how);

	*out = NULL;
	if (!f)
		return -ENOMEM;
	return opened(s, f, open_batch(s, id, oflags, f, how), out);
}

/* The epoch of id (its lane and epoch; batch 0), for streams and their
 * offsets. */
static struct bfs_batch_id epoch_of(struct bfs_batch_id id)
{
	return (struct bfs_batch_id){.lane = id.lane, .epoch = id.epoch};
}

int bfs_serve_open_stream(struct bfs_serve *s, struct bfs_batch_id id,
			  struct bfs_file **out, struct bfs_serve_how *how)
{
	struct bfs_file *f = file_new(how);

	*out = NULL;
	if (!f)
		return -ENOMEM;
	f->at.id = epoch_of(id);
	return opened(s, f, open_as(&s->way[KIND_STREAM], f, how), out);
}

int bfs_serve_open_offsets(struct bfs_serve *s, struct bfs_batch_id id,
			   struct bfs_file **out, struct bfs_serve_how *how)
{
	struct bfs_file *f = file_new(how);

	*out = NULL;
	if (!f)
		return -ENOMEM;
	f->at.id = epoch_of(id);
	return opened(s, f, open_as(&s->way[KIND_OFFSETS], f, how), out);
}

struct bfs_streams *bfs_serve_streams(struct bfs_serve *s)
{
	return s->b.streams;
}

int bfs_serve_open_text(struct bfs_serve *s, char *text, size_t len,
			bool changes, struct bfs_file **out,
			struct bfs_serve_how *how)
{
	struct bfs_file *f = file_new(how);

	*out = NULL;
	if (!f) {
		free(text);
		return -ENOMEM;
	}
	f->text.bytes = text;
	f->text.changes = changes;
	f->size = len;
	return opened(s, f, open_as(&s->way[KIND_TEXT], f, how), out);
}

/* ---- reads --------------------------------------------------------------- */

int bfs_serve_read(struct bfs_serve *s, struct bfs_file *f, uint64_t off,
		   uint64_t size, struct bfs_serve_reply *r)
{
	uint64_t n = off < f->size ? f->size - off : 0;

	if (n > size)
		n = size;
	r->iovcnt = 0;
	r->pool = NULL;
	r->batch = NULL;
	r->nmore = 0;
	r->scratch = NULL;
	r->zc_rows = false;
	r->file = f;
	atomic_fetch_add(&f->refs, 1); /* a slice may point into f */
	if (!n)
		return 0;
	return f->way->ops->read(f->way, f, off, n, r);
}

void bfs_serve_done(struct bfs_serve *s, struct bfs_serve_reply *r)
{
	struct bfs_file *f = r->file;

	if (r->batch)
		bfs_pool_release(r->pool, r->batch);
	r->batch = NULL;
	while (r->nmore > 0)
		bfs_pool_release(r->pool, r->more[--r->nmore]);
	free(r->scratch);
	r->scratch = NULL;
	if (f && f->way->ops->done)
		f->way->ops->done(f->way, r);
	r->zc_rows = false;
	if (f)
		file_put(s, f);
	r->file = NULL;
}

void bfs_serve_release(struct bfs_serve *s, struct bfs_file *f)
{
	if (f->way->ops->release)
		f->way->ops->release(f->way, f);
	file_put(s, f);
}

void bfs_serve_interrupt(struct bfs_serve *s)
{
	bfs_pool_interrupt(s->b.pool);
	if (s->b.plain != s->b.pool)
		bfs_pool_interrupt(s->b.plain);
}

/* ---- the kernel's thread, counters ------------------------------------- */

void bfs_serve_stop_kernel(struct bfs_serve *s)
{
	for (int k = 0; k < KINDS; k++)
		if (s->way[k].ops && s->way[k].ops->stop_kernel)
			s->way[k].ops->stop_kernel(&s->way[k]);
}

bool bfs_serve_kernel_busy(struct bfs_serve *s)
{
	for (int k = 0; k < KINDS; k++)
		if (s->way[k].ops && s->way[k].ops->kernel_busy &&
		    s->way[k].ops->kernel_busy(&s->way[k]))
			return true;
	return false;
}

void bfs_serve_settle(struct bfs_serve *s)
{
	for (int k = 0; k < KINDS; k++)
		if (s->way[k].ops && s->way[k].ops->settle)
			s->way[k].ops->settle(&s->way[k]);
}

void bfs_serve_stats(struct bfs_serve *s, struct bfs_stats *out)
{
	bfs_serve_stats_of(&s->b, out);
}

void bfs_serve_render_stats(struct bfs_serve *s, uint64_t lookups, char *buf,
			    size_t len, size_t *pos)
{
	bfs_serve_stats_render(&s->b, bfs_serve_mode_name(s->b.o.mode), lookups,
			       buf, len, pos);
}
