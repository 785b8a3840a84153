/* fs/serve: open files and how their bytes reach readers (serve.h).
 *
 * Files. Every open makes a struct bfs_file: a text file (README,
 * dataset.json, stats, index/N/batch_K) holds the bytes the namespace
 * rendered at open; index/N/offsets renders the lines each READ covers
 * from fs/stream; stream/N (direct I/O in every mode) copies each READ
 * out of the batches it spans, whole, into memory of the reply's own;
 * batch files are served per mode:
 *   passthrough  open acquires the batch from the pool and keeps it (the
 *                file holds its reference): its memfd and backing id,
 *                registered by the worker that gathered it (prepare),
 *                stay until the last file of that batch is released
 *                (bfs_pool_release_last), so concurrent opens of one inode
 *                share one backing file, as the kernel requires; then the
 *                pool frees it and on_free drops the backing id. A later
 *                open gathers it again, identical. Reads never come here.
 *   push         fs/serve_push.c: stored whole into the page cache at open
 *   direct       READs reply from the pool's buffer, or straight from the
 *                archive (fs/serve_zc.c)
 *   cache        READs reply from the pool's buffer, 128 KiB at a time
 * A batch read to its end, through its file or a stream, leaves the pool
 * (bfs_pool_drop): its readers have moved on.
 *
 * Lifetime. A file has the open's reference plus one per reply in flight:
 * the kernel may send RELEASE as soon as the last reply is written, before
 * its thread has called bfs_serve_done, so whichever side drops the last
 * reference frees the file. Files still open at destroy (unmounted with
 * files open) are freed there.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "fs/log.h"

#define MOD "serve"

static const char *const mode_names[] = {
    [BFS_SERVE_AUTO] = "auto",	   [BFS_SERVE_PASSTHROUGH] = "passthrough",
    [BFS_SERVE_PUSH] = "push",	   [BFS_SERVE_CACHE] = "cache",
    [BFS_SERVE_DIRECT] = "direct",
};

const char *bfs_serve_mode_name(enum bfs_serve_mode m)
{
	return m <= BFS_SERVE_DIRECT ? mode_names[m] : "?";
}

int bfs_serve_mode_parse(const char *str, enum bfs_serve_mode *out)
{
	for (int m = BFS_SERVE_AUTO; m <= BFS_SERVE_DIRECT; m++)
		if (!strcmp(str, mode_names[m])) {
			*out = (enum bfs_serve_mode)m;
			return 0;
		}
	return -EINVAL;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- passthrough: a backing id per batch ------------------------------ */

/* b's backing id, registering its memfd if no worker could. */
static int backing_of(struct bfs_serve *s, struct bfs_batch *b)
{
	int id = bfs_batch_tag(b);

	if (id > 0)
		return id;
	id = s->k.backing_open(s->k.arg, bfs_batch_fd(b));
	if (id <= 0)
		return id ? id : -EIO;
	if (!bfs_batch_set_tag(b, id)) { /* another thread won: use its id */
		s->k.backing_close(s->k.arg, id);
		return bfs_batch_tag(b);
	}
	atomic_fetch_add(&s->c.backing_now, 1);
	atomic_fetch_add(&s->c.backing_all, 1);
	return id;
}

/* Pool prepare hook: register the batch's memfd before anyone opens it,
 * so an open only replies. A failure is retried by the open. */
static void passthrough_ready(void *arg, struct bfs_batch *b,
			      const struct bfs_batch_loc *at)
{
	struct bfs_serve *s = arg;
	int id = backing_of(s, b);
	char name[80];

	if (id < 0) {
		bfs_order_batch_name(s->order, at->id, name, sizeof(name));
		bfs_log(BFS_LOG_WARN, MOD,
			"%s: cannot register its backing file: %s", name,
			strerror(-id));
	}
}

/* Pool on_free hook (under the pool's lock): the batch's memfd goes, and
 * its backing id with it. */
static void passthrough_free(void *arg, struct bfs_batch *b)
{
	struct bfs_serve *s = arg;

	s->k.backing_close(s->k.arg, bfs_batch_tag(b));
	atomic_fetch_sub(&s->c.backing_now, 1);
}

/* ---- creation ---------------------------------------------------------- */

int bfs_serve_create(struct bfs_serve **out, const struct bfs_dataset *ds,
		     struct bfs_order *order, const struct bfs_layout *layout,
		     const struct bfs_pool_opts *po,
		     const struct bfs_serve_opts *o,
		     const struct bfs_serve_kernel *kernel)
{
	struct bfs_serve *s = calloc(1, sizeof(*s));
	struct bfs_pool_opts popts = *po;
	int rc = -ENOMEM;

	*out = NULL;
	if (!s)
		return -ENOMEM;
	s->ds = ds;
	s->order = order;
	s->layout = layout;
	s->o = *o;
	s->k = *kernel;
	pthread_mutex_init(&s->lock, NULL);
	popts.hook_arg = s;
	popts.memfd = o->mode == BFS_SERVE_PASSTHROUGH;
	if (o->mode == BFS_SERVE_PASSTHROUGH) {
		popts.prepare = passthrough_ready;
		popts.on_free = passthrough_free;
	} else if (o->mode == BFS_SERVE_PUSH && o->early_push) {
		popts.on_ready = bfs_serve_push_ready;
	}
	if (o->mode == BFS_SERVE_PUSH) {
		rc = bfs_pushed_create(s, o->page_cache_bytes);
		if (rc < 0)
			goto err_destroy;
	}
	s->zero_copy = o->mode == BFS_SERVE_DIRECT && o->zero_copy &&
		       bfs_serve_zc_eligible(s);
	popts.rows_in_place = s->zero_copy;
	rc = bfs_pool_create(&s->pool, ds, order, layout, &popts);
	if (rc == 0)
		rc = bfs_streams_create(&s->streams, layout, order);
	if (rc < 0)
		goto err_destroy;
	if (s->zero_copy) /* the mode and why: mount/session logs them */
		bfs_log(BFS_LOG_INFO, MOD,
			"direct mode: batches whose rows allow it are "
			"replied straight from the archive (zero copy)");
	*out = s;
	return 0;
err_destroy:
	bfs_serve_destroy(s);
	return rc;
}

static void file_free(struct bfs_file *f)
{
	bfs_serve_zc_free(f->zc);
	free(f->text);
	free(f);
}

void bfs_serve_destroy(struct bfs_serve *s)
{
	if (!s)
		return;
	while (s->files) { /* open at unmount: nothing replies any more */
		struct bfs_file *f = s->files;

		s->files = f->next;
		bfs_pool_release(s->pool, f->held);
		file_free(f);
	}
	bfs_pushed_stop(s->pushed); /* its jobs hold batches */
	bfs_pool_destroy(s->pool);
	bfs_pushed_destroy(s->pushed); /* workers pushed into it */
	bfs_streams_destroy(s->streams);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

enum bfs_serve_mode bfs_serve_mode(const struct bfs_serve *s)
{
	return s->o.mode;
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

bool bfs_serve_consumed(struct bfs_serve *s, struct bfs_file *f, uint64_t n)
{
	char name[80];

	atomic_fetch_add(&s->c.bytes, n);
	if (atomic_fetch_add(&f->served, n) + n < f->size ||
	    atomic_exchange(&f->consumed, true))
		return false;
	atomic_fetch_add(&s->c.served, 1);
	if (bfs_log_wants(BFS_LOG_DEBUG)) {
		bfs_order_batch_name(s->order, f->at.id, name, sizeof(name));
		bfs_log(BFS_LOG_DEBUG, MOD,
			"%s: served (%llu bytes), %.3f ms after its open", name,
			(unsigned long long)f->size,
			(double)(now_ns() - f->opened_ns) / 1e6);
	}
	return true;
}

/* The batch of a passthrough open, kept by f until its release. */
static int passthrough_open(struct bfs_serve *s, struct bfs_file *f,
			    struct bfs_serve_how *how)
{
	int rc = bfs_pool_acquire(s->pool, &f->at, &f->held);

	if (rc < 0)
		return rc;
	how->backing_id = backing_of(s, f->held);
	if (how->backing_id <= 0) {
		bfs_pool_note_error(
		    s->pool, f->at.id,
		    "no backing file (%s): open fails with EIO",
		    strerror(how->backing_id ? -how->backing_id : EIO));
		bfs_pool_release(s->pool, f->held);
		f->held = NULL;
		return -EIO;
	}
	bfs_serve_consumed(s, f, f->size); /* handed over whole */
	return 0;
}

static int open_batch_as(struct bfs_serve *s, struct bfs_file *f,
			 struct bfs_serve_how *how)
{
	switch (s->o.mode) {
	case BFS_SERVE_PASSTHROUGH:
		return passthrough_open(s, f, how);
	case BFS_SERVE_PUSH:
		how->keep_cache = true; /* the pages pushed stay valid */
		return bfs_serve_push_open(s, f);
	case BFS_SERVE_DIRECT:
		how->direct_io = true;
		return s->zero_copy ? bfs_serve_zc_open(s, f) : 0;
	default:
		how->keep_cache = true;
		return 0;
	}
}

/* Open batch id as f: located once (fs/order), sized (fs/layout: no
 * call into the order for a fixed layout, its samples for a ragged
 * one), then opened as the mode does, with f->at handed down. */
static int open_batch(struct bfs_serve *s, struct bfs_batch_id id,
		      struct bfs_file *f, struct bfs_serve_how *how)
{
	char name[80];
	int rc = bfs_order_locate(s->order, id, &f->at);

	if (rc)
		return rc;
	rc = bfs_layout_file_size(s->layout, s->order, &f->at, &f->size);
	if (rc)
		return rc;
	f->opened_ns = now_ns();
	atomic_fetch_add(&s->c.opened, 1);
	rc = open_batch_as(s, f, how);
	if (bfs_log_wants(BFS_LOG_DEBUG)) {
		bfs_order_batch_name(s->order, id, name, sizeof(name));
		bfs_log(BFS_LOG_DEBUG, MOD, "%s: open (%s): %s in %.3f ms",
			name, bfs_serve_mode_name(s->o.mode),
			rc < 0 ? strerror(-rc) : "ok",
			(double)(now_ns() - f->opened_ns) / 1e6);
	}
	return rc;
}

/* -ETIMEDOUT (logged by the pool) and -ERANGE (a failed gather) reach a
 * reader as EIO; the rest as they are. */
static int reader_errno(int rc)
{
	return rc == -ETIMEDOUT || rc == -ERANGE ? -EIO : rc;
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

int bfs_serve_open_batch(struct bfs_serve *s, struct bfs_batch_id id,
			 struct bfs_file **out, struct bfs_serve_how *how)
{
	struct bfs_file *f = file_new(how);
	int rc;

	*out = NULL;
	if (!f)
		return -ENOMEM;
	f->batch = true;
	rc = open_batch(s, id, f, how);
	if (rc < 0) {
		file_free(f);
		return reader_errno(rc);
	}
	file_link(s, f);
	*out = f;
	return 0;
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
	struct bfs_batch_id end = epoch_of(id);
	int rc;

	*out = NULL;
	if (!f)
		return -ENOMEM;
	f->stream = true;
	f->at.id = epoch_of(id);
	end.batch = bfs_order_len(s->order); /* the stream's size */
	rc = bfs_stream_offset(s->streams, end, &f->size);
	if (rc < 0) {
		file_free(f);
		return reader_errno(rc);
	}
	/* Direct I/O in every mode: each read() is one READ, replied
	 * whole from the batches, and no page of a stream is ever stored
	 * into or dropped from the page cache by the daemon (a store waits
	 * on pages that READs in flight hold locked: fs/README.md,
	 * streams). */
	how->direct_io = true;
	file_link(s, f);
	*out = f;
	return 0;
}

int bfs_serve_open_offsets(struct bfs_serve *s, struct bfs_batch_id id,
			   struct bfs_file **out, struct bfs_serve_how *how)
{
	struct bfs_file *f;

	*out = NULL;
	if (!bfs_order_has(s->order, epoch_of(id)))
		return -ENOENT;
	f = file_new(how);
	if (!f)
		return -ENOMEM;
	f->offsets = true;
	f->at.id = epoch_of(id);
	f->size = (bfs_order_len(s->order) + 1) * BFS_SERVE_OFFSET_LINE;
	how->keep_cache = true; /* it never changes */
	file_link(s, f);
	*out = f;
	return 0;
}

struct bfs_streams *bfs_serve_streams(struct bfs_serve *s)
{
	return s->streams;
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
	f->text = text;
	f->text_len = len;
	how->direct_io = changes; /* every open reads it afresh */
	how->keep_cache = !changes;
	file_link(s, f);
	*out = f;
	return 0;
}

/* ---- reads --------------------------------------------------------------- */

static int read_batch(struct bfs_serve *s, struct bfs_file *f, uint64_t off,
		      uint64_t n, struct bfs_serve_reply *r)
{
	int rc;

	atomic_fetch_add(&s->c.reads, 1);
	if (s->o.mode == BFS_SERVE_PASSTHROUGH) /* the kernel reads */
		return -EIO;
	if (s->zero_copy && f->zc) {
		rc = bfs_serve_zc_read(s, f, off, n, r);
		if (rc != 0)
			return rc < 0 ? rc : 0;
	}
	/* Push: a READ means the kernel lost pages of a pushed batch; a
	 * zero-copy batch needs one READ's worth: neither re-gathers its
	 * successors. */
	if (s->o.mode == BFS_SERVE_PUSH || f->zc) {
		atomic_fetch_add(&s->c.refills, s->o.mode == BFS_SERVE_PUSH);
		rc = bfs_pool_acquire_alone(s->pool, &f->at, &r->batch);
	} else {
		rc = bfs_pool_acquire(s->pool, &f->at, &r->batch);
	}
	if (rc < 0)
		return reader_errno(rc);
	r->iov[0].iov_base = (char *)bfs_batch_data(r->batch) + off;
	r->iov[0].iov_len = (size_t)n;
	r->iovcnt = 1;
	/* Counted before the reply: a reader may look at stats as soon as
	 * it has its bytes. */
	if (bfs_serve_consumed(s, f, n))
		bfs_pool_drop(s->pool, r->batch);
	return 0;
}

/* Copy [off, end) of stream f, which batch id (at [from, to) in it)
 * holds part of, into dst; a batch read to its end leaves the pool. */
static int stream_copy(struct bfs_serve *s, struct bfs_batch_id id,
		       uint64_t from, uint64_t to, uint64_t off, uint64_t end,
		       char *dst)
{
	uint64_t take = (end < to ? end : to) - off;
	struct bfs_batch_loc at;
	struct bfs_batch *b;
	const char *bytes;
	int rc = bfs_order_locate(s->order, id, &at);

	if (rc == 0)
		rc = bfs_pool_acquire(s->pool, &at, &b);
	if (rc < 0)
		return rc;
	bytes = bfs_batch_data(b);
	if (bfs_batch_size(b) != to - from)
		rc = -EIO;
	else if (bytes) /* anonymous memory */
		memcpy(dst, bytes + (off - from), take);
	else if (pread(bfs_batch_fd(b), dst, take, (off_t)(off - from)) !=
		 (ssize_t)take) /* a memfd (passthrough) */
		rc = -EIO;
	if (!rc && off + take == to) /* read to its end */
		bfs_pool_drop(s->pool, b);
	bfs_pool_release(s->pool, b);
	return rc;
}

/* [off, off + n) of stream f, whole (a READ answered short would end the
 * reader's read() there), copied out of the batches it spans (acquired with
 * their prefetch window: its reader moves on) into r->scratch. */
static int read_stream(struct bfs_serve *s, struct bfs_file *f, uint64_t off,
		       uint64_t n, struct bfs_serve_reply *r)
{
	uint64_t end = off + n, at = off;

	atomic_fetch_add(&s->c.reads, 1);
	r->scratch = malloc(n);
	if (!r->scratch)
		return -ENOMEM;
	while (at < end) {
		struct bfs_batch_id id = f->at.id;
		uint64_t from, to;
		int rc = bfs_stream_locate(s->streams, &id, at, &from, &to);

		if (rc == 0)
			rc = stream_copy(s, id, from, to, at, end,
					 r->scratch + (at - off));
		if (rc < 0)
			return reader_errno(rc);
		at = end < to ? end : to;
	}
	atomic_fetch_add(&s->c.bytes, n);
	r->iov[0].iov_base = r->scratch;
	r->iov[0].iov_len = (size_t)n;
	r->iovcnt = 1;
	return 0;
}

/* [off, off + n) of index/N/offsets f: the lines it covers, rendered
 * into r->scratch. */
static int read_offsets(struct bfs_serve *s, struct bfs_file *f, uint64_t off,
			uint64_t n, struct bfs_serve_reply *r)
{
	uint64_t first = off / BFS_SERVE_OFFSET_LINE;
	uint64_t last = (off + n - 1) / BFS_SERVE_OFFSET_LINE;
	size_t len = (size_t)(last - first + 1) * BFS_SERVE_OFFSET_LINE + 1;
	char *at;

	r->scratch = malloc(len);
	if (!r->scratch)
		return -ENOMEM;
	at = r->scratch;
	for (uint64_t k = first; k <= last; k++) {
		struct bfs_batch_id id = f->at.id;
		uint64_t where;
		int rc;

		id.batch = k;
		rc = bfs_stream_offset(s->streams, id, &where);

		if (rc < 0)
			return reader_errno(rc);
		at += snprintf(at, len - (size_t)(at - r->scratch), "%020llu\n",
			       (unsigned long long)where);
	}
	r->iov[0].iov_base = r->scratch + off % BFS_SERVE_OFFSET_LINE;
	r->iov[0].iov_len = (size_t)n;
	r->iovcnt = 1;
	return 0;
}

int bfs_serve_read(struct bfs_serve *s, struct bfs_file *f, uint64_t off,
		   uint64_t size, struct bfs_serve_reply *r)
{
	uint64_t total = f->text ? f->text_len : f->size;
	uint64_t n = off < total ? total - off : 0;
	int rc = 0;

	if (n > size)
		n = size;
	r->iovcnt = 0;
	r->batch = NULL;
	r->scratch = NULL;
	r->zc_rows = false;
	r->file = f;
	atomic_fetch_add(&f->refs, 1); /* a slice may point into f */
	if (!n)
		return 0;
	if (f->batch) {
		rc = read_batch(s, f, off, n, r);
	} else if (f->stream) {
		rc = read_stream(s, f, off, n, r);
	} else if (f->offsets) {
		rc = read_offsets(s, f, off, n, r);
	} else {
		r->iov[0].iov_base = f->text + off;
		r->iov[0].iov_len = (size_t)n;
		r->iovcnt = 1;
	}
	return rc;
}

void bfs_serve_done(struct bfs_serve *s, struct bfs_serve_reply *r)
{
	bfs_pool_release(s->pool, r->batch);
	r->batch = NULL;
	free(r->scratch);
	r->scratch = NULL;
	if (r->zc_rows) /* the reply is written: was the source steady? */
		bfs_serve_zc_after(s, r->file);
	r->zc_rows = false;
	if (r->file)
		file_put(s, r->file);
	r->file = NULL;
}

void bfs_serve_release(struct bfs_serve *s, struct bfs_file *f)
{
	if (f->held) /* passthrough: the last one lets the batch go */
		bfs_pool_release_last(s->pool, f->held);
	f->held = NULL;
	if (f->push_open)
		bfs_serve_push_release(s, f);
	file_put(s, f);
}
