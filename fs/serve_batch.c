/* fs/serve_batch: what the ways of serving batch files share
 * (serve_impl.h): the count of a batch file's bytes handed to its reader,
 * and replies from the pool's buffer of a batch (cache mode, direct mode
 * without zero copy, a push-mode batch whose pages the kernel lost).
 *
 * Below the ways: it calls the pool, the order and the log, never a way
 * or the core. A batch read to its end, through its file, leaves the pool
 * (bfs_pool_drop): its reader has moved on. */
#include "fs/serve_impl.h"

#include <stdio.h>

#include "fs/log.h"

bool bfs_serve_consumed(struct bfs_serve_base *b, struct bfs_file *f,
			uint64_t n)
{
	char name[80];

	atomic_fetch_add(&b->c.bytes, n);
	if (atomic_fetch_add(&f->served, n) + n < f->size ||
	    atomic_exchange(&f->consumed, true))
		return false;
	atomic_fetch_add(&b->c.served, 1);
	if (bfs_log_wants(BFS_LOG_DEBUG)) {
		bfs_order_batch_name(b->order, f->at.id, name, sizeof(name));
		bfs_log(BFS_LOG_DEBUG, "serve",
			"%s: served (%llu bytes), %.3f ms after its open", name,
			(unsigned long long)f->size,
			(double)(bfs_serve_now_ns() - f->opened_ns) / 1e6);
	}
	return true;
}

int bfs_serve_read_buffer(struct bfs_serve_base *b, struct bfs_pool *pool,
			  struct bfs_file *f, uint64_t off, uint64_t n,
			  bool alone, struct bfs_serve_reply *r)
{
	int rc = alone ? bfs_pool_acquire_alone(pool, &f->at, &r->batch)
		       : bfs_pool_acquire(pool, &f->at, &r->batch);

	if (rc < 0)
		return bfs_serve_reader_errno(rc);
	r->pool = pool;
	r->iov[0].iov_base = (char *)bfs_batch_data(r->batch) + off;
	r->iov[0].iov_len = (size_t)n;
	r->iovcnt = 1;
	/* Counted before the reply: a reader may look at stats as soon as
	 * it has its bytes. */
	if (bfs_serve_consumed(b, f, n))
		bfs_pool_drop(pool, r->batch);
	return 0;
}
