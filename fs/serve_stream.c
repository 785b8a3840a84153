/* fs/serve_stream: stream/N and index/N/offsets (serve.h; fs/README.md:
 * streams), two kinds of file served the same way in every mode: each
 * has a table of its own (bfs_serve_stream_ops, bfs_serve_offsets_ops),
 * which the core gives the file at its open. Like a way of serving
 * (serve_impl.h) it gets the mount's objects from the core and calls the
 * pool, the order and fs/stream, never the core.
 *
 * A stream is opened with direct I/O in every mode: each read() is one
 * READ, copied out of the batches it spans, whole, into memory of the
 * reply's own (a READ answered short would end the reader's read()
 * there); a batch read to its end leaves the pool. The daemon never
 * stores a stream's pages into the page cache (a store waits on pages
 * that READs in flight hold locked: fs/README.md, streams). The offsets
 * file renders the lines each READ covers, so an open costs nothing
 * however long the epoch. */
#include "fs/serve_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- stream/N ------------------------------------------------------------ */

/* The stream of f->at.id's epoch: its size; -ENOENT past the epochs. */
static int stream_open(struct bfs_serve_way *w, struct bfs_file *f,
		       struct bfs_serve_how *how)
{
	struct bfs_batch_id end = f->at.id;
	int rc;

	end.batch = bfs_order_len(w->base->order); /* the stream's size */
	rc = bfs_stream_offset(w->base->streams, end, &f->size);
	if (rc < 0)
		return rc;
	/* Direct I/O in every mode: each read() is one READ, replied
	 * whole from the batches, and no page of a stream is ever stored
	 * into or dropped from the page cache by the daemon. */
	how->direct_io = true;
	return 0;
}

/* Copy [off, end) of a stream, which batch id (at [from, to) in it)
 * holds part of, into dst; a batch read to its end leaves the pool. */
static int stream_copy(struct bfs_serve_base *s, struct bfs_batch_id id,
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

/* [off, off + n) of stream f, whole, copied out of the batches it spans
 * (acquired with their prefetch window: its reader moves on) into
 * r->scratch. */
static int stream_read(struct bfs_serve_way *w, struct bfs_file *f,
		       uint64_t off, uint64_t n, struct bfs_serve_reply *r)
{
	struct bfs_serve_base *s = w->base;
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
			return bfs_serve_reader_errno(rc);
		at = end < to ? end : to;
	}
	atomic_fetch_add(&s->c.bytes, n);
	r->iov[0].iov_base = r->scratch;
	r->iov[0].iov_len = (size_t)n;
	r->iovcnt = 1;
	return 0;
}

const struct bfs_serve_ops bfs_serve_stream_ops = {
    .name = "stream",
    .open = stream_open,
    .read = stream_read,
};

/* ---- index/N/offsets ----------------------------------------------------- */

/* The offsets of f->at.id's epoch: a line per batch and one for the end;
 * -ENOENT past the epochs. */
static int offsets_open(struct bfs_serve_way *w, struct bfs_file *f,
			struct bfs_serve_how *how)
{
	struct bfs_order *order = w->base->order;

	if (!bfs_order_has(order, f->at.id))
		return -ENOENT;
	f->size = (bfs_order_len(order) + 1) * BFS_SERVE_OFFSET_LINE;
	how->keep_cache = true; /* it never changes */
	return 0;
}

/* [off, off + n) of index/N/offsets f: the lines it covers, rendered
 * into r->scratch. */
static int offsets_read(struct bfs_serve_way *w, struct bfs_file *f,
			uint64_t off, uint64_t n, struct bfs_serve_reply *r)
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
		rc = bfs_stream_offset(w->base->streams, id, &where);
		if (rc < 0)
			return bfs_serve_reader_errno(rc);
		at += snprintf(at, len - (size_t)(at - r->scratch), "%020llu\n",
			       (unsigned long long)where);
	}
	r->iov[0].iov_base = r->scratch + off % BFS_SERVE_OFFSET_LINE;
	r->iov[0].iov_len = (size_t)n;
	r->iovcnt = 1;
	return 0;
}

const struct bfs_serve_ops bfs_serve_offsets_ops = {
    .name = "offsets",
    .open = offsets_open,
    .read = offsets_read,
};
