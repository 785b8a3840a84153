/* fs/serve_cache: cache mode (serve.h), the kernel's own page cache: each
 * READ of a batch file is answered from the pool's buffer of its batch,
 * acquired with its prefetch window; the kernel keeps the pages it got
 * (keep_cache) and asks again for those it lost. For comparison with the
 * other modes (tools/bench/RESULTS.md). A way of serving (serve_impl.h):
 * it calls serve_batch.c, never the core. */
#include "fs/serve_impl.h"

static int cache_open(struct bfs_serve_way *w, struct bfs_file *f,
		      struct bfs_serve_how *how)
{
	how->keep_cache = true;
	return 0;
}

static int cache_read(struct bfs_serve_way *w, struct bfs_file *f, uint64_t off,
		      uint64_t n, struct bfs_serve_reply *r)
{
	atomic_fetch_add(&w->base->c.reads, 1);
	return bfs_serve_read_buffer(w->base, w->base->pool, f, off, n, false,
				     r);
}

const struct bfs_serve_ops bfs_serve_cache_ops = {
    .name = "cache",
    .open = cache_open,
    .read = cache_read,
};
