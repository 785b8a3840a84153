/* fs/serve_stream: stream/N and index/N/offsets (serve.h; fs/README.md:
 * streams), two kinds of file served the same way in every mode: each
 * has a table of its own (bfs_serve_stream_ops, bfs_serve_offsets_ops),
 * which the core gives the file at its open. Like a way of serving
 * (serve_impl.h) it gets the mount's objects from the core and calls the
 * pool, the order and fs/stream, never the core.
 *
 * A stream is opened with direct I/O in every mode: each read() is one
 * READ, answered whole (a READ answered short would end the reader's
 * read() there) with a slice into the buffer of each batch it spans, in
 * the plain pool (serve_impl.h: anonymous memory, no memfd, no hook,
 * whatever the mode), the batches held until the reply is sent; a batch
 * read to its end leaves the pool. The daemon never
 * stores a stream's pages into the page cache (a store waits on pages
 * that READs in flight hold locked: fs/README.md, streams). The offsets
 * file renders the lines each READ covers, so an open costs nothing
 * however long the epoch. */
#include "fs/serve_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- stream/N ------------------------------------------------------------ */

/* The stream of f->at.id's epoch: its size; -ENOENT past the epochs. */
static int stream_open(struct bfs_serve_way *w, struct bfs_file *f,
		       struct bfs_serve_how *how)
{
	struct bfs_batch_id end = f->at.id;
	int rc;

	/* the stream's size */
	end.batch = bfs_order_epoch_len(w->base->order, end.epoch);
	rc = bfs_stream_offset(w->base->streams, end, &f->size);
	if (rc < 0)
		return rc;
	/* Direct I/O in every mode: each read() is one READ, replied
	 * whole from the batches, and no page of a stream is ever stored
	 * into or dropped from the page cache by the daemon. */
	how->direct_io = true;
	return 0;
}

/* The plain pool's batch id (at [from, to) in its stream), acquired
 * with its prefetch window into *b, and checked to be to - from bytes;
 * read to its end by [.., end) of the stream, it leaves the pool (the
 * reference in *b keeps it until the reply is sent). */
static int stream_batch(struct bfs_serve_base *s, struct bfs_batch_id id,
			uint64_t from, uint64_t to, uint64_t end,
			struct bfs_batch **b)
{
	struct bfs_batch_loc at;
	int rc = bfs_order_locate(s->order, id, &at);

	*b = NULL;
	if (rc == 0)
		rc = bfs_pool_acquire(s->plain, &at, b);
	if (rc < 0)
		return rc;
	if (bfs_batch_size(*b) != to - from || !bfs_batch_data(*b)) {
		bfs_pool_release(s->plain, *b);
		*b = NULL;
		return -EIO;
	}
	if (end >= to) /* read to its end */
		bfs_pool_drop(s->plain, *b);
	return 0;
}

/* Hold b in r (r->batch, then r->more): false when r holds all it can. */
static bool hold(struct bfs_serve_reply *r, struct bfs_batch *b)
{
	if (!r->batch)
		r->batch = b;
	else if (r->nmore < BFS_SERVE_MORE)
		r->more[r->nmore++] = b;
	else
		return false;
	return true;
}

/* [off, off + n) of stream f, whole, from the batches it spans (acquired
 * with their prefetch window: its reader moves on): a slice into each
 * batch's buffer, the batches held by r until the reply is sent. A READ
 * that spans more batches than r can hold (tiny batches) is copied into
 * r->scratch instead, a batch at a time. */
static int stream_read(struct bfs_serve_way *w, struct bfs_file *f,
		       uint64_t off, uint64_t n, struct bfs_serve_reply *r)
{
	struct bfs_serve_base *s = w->base;
	uint64_t end = off + n, at = off;

	atomic_fetch_add(&s->c.reads, 1);
	r->pool = s->plain;
	while (at < end) {
		struct bfs_batch_id id = f->at.id;
		struct bfs_batch *b;
		uint64_t from, to, take;
		const char *bytes;
		int rc = bfs_stream_locate(s->streams, &id, at, &from, &to);

		if (rc == 0)
			rc = stream_batch(s, id, from, to, end, &b);
		if (rc < 0)
			return bfs_serve_reader_errno(rc);
		take = (end < to ? end : to) - at;
		bytes = (const char *)bfs_batch_data(b) + (at - from);
		if (!r->scratch && hold(r, b)) {
			r->iov[r->iovcnt].iov_base = (void *)bytes;
			r->iov[r->iovcnt++].iov_len = (size_t)take;
		} else { /* copied: the slices so far move too */
			if (!r->scratch && !(r->scratch = malloc(n))) {
				bfs_pool_release(s->plain, b);
				return -ENOMEM;
			}
			memcpy(r->scratch + (at - off), bytes, take);
			bfs_pool_release(s->plain, b);
		}
		at += take;
	}
	if (r->scratch) { /* the slices held before the copy began */
		uint64_t pos = off;

		for (int i = 0; i < r->iovcnt; i++) {
			memcpy(r->scratch + (pos - off), r->iov[i].iov_base,
			       r->iov[i].iov_len);
			pos += r->iov[i].iov_len;
		}
		r->iov[0].iov_base = r->scratch;
		r->iov[0].iov_len = (size_t)n;
		r->iovcnt = 1;
	}
	atomic_fetch_add(&s->c.bytes, n);
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

	if (f->at.id.lane >= bfs_order_lanes(order) ||
	    f->at.id.epoch >= bfs_order_epochs(order))
		return -ENOENT;
	f->size = (bfs_order_epoch_len(order, f->at.id.epoch) + 1) *
		  BFS_SERVE_OFFSET_LINE;
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
