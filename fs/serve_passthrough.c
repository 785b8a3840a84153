/* fs/serve_passthrough: passthrough mode (serve.h), the kernel reads the
 * batch's memfd itself. A way of serving (serve_impl.h): it calls the
 * pool and serve_batch.c, never the core.
 *
 * Each batch is materialized by a worker into a memfd of its own and
 * registered as a backing file right there (the pool's prepare hook), so
 * an open only replies with its backing id. The open acquires the batch
 * and the file keeps that reference: the memfd and its id stay until the
 * last file of that batch is released (bfs_pool_release_last), so
 * concurrent opens of one inode share one backing file, as the kernel
 * requires; then the pool frees the batch and on_free drops the id. A
 * later open gathers it again, identical. READs never come here: the
 * kernel serves read() and mmap() from the memfd. */
#include "fs/serve_impl.h"

#include <errno.h>
#include <string.h>

#include "fs/log.h"

/* b's backing id, registering its memfd if no worker could. */
static int backing_of(struct bfs_serve_base *s, struct bfs_batch *b)
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
	struct bfs_serve_way *w = arg;
	int id = backing_of(w->base, b);
	char name[80];

	if (id < 0) {
		bfs_order_batch_name(w->base->order, at->id, name,
				     sizeof(name));
		bfs_log(BFS_LOG_WARN, "serve",
			"%s: cannot register its backing file: %s", name,
			strerror(-id));
	}
}

/* Pool on_free hook (under the pool's lock): the batch's memfd goes, and
 * its backing id with it. */
static void passthrough_gone(void *arg, struct bfs_batch *b)
{
	struct bfs_serve_way *w = arg;

	w->base->k.backing_close(w->base->k.arg, bfs_batch_tag(b));
	atomic_fetch_sub(&w->base->c.backing_now, 1);
}

static int passthrough_create(struct bfs_serve_way *w, struct bfs_pool_opts *po)
{
	po->memfd = true;
	po->prepare = passthrough_ready;
	po->on_free = passthrough_gone;
	return 0;
}

/* The batch of the open, kept by f until its release. */
static int passthrough_open(struct bfs_serve_way *w, struct bfs_file *f,
			    struct bfs_serve_how *how)
{
	struct bfs_serve_base *s = w->base;
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

/* The kernel reads the memfd: a READ here is a bug's. */
static int passthrough_read(struct bfs_serve_way *w, struct bfs_file *f,
			    uint64_t off, uint64_t n, struct bfs_serve_reply *r)
{
	atomic_fetch_add(&w->base->c.reads, 1);
	return -EIO;
}

/* The last file of a batch lets it go (its backing id with it). */
static void passthrough_release(struct bfs_serve_way *w, struct bfs_file *f)
{
	if (f->held)
		bfs_pool_release_last(w->base->pool, f->held);
	f->held = NULL;
}

/* Open at unmount: the pool is destroyed next. */
static void passthrough_free(struct bfs_serve_way *w, struct bfs_file *f)
{
	bfs_pool_release(w->base->pool, f->held);
	f->held = NULL;
}

const struct bfs_serve_ops bfs_serve_passthrough_ops = {
    .name = "passthrough",
    .create = passthrough_create,
    .open = passthrough_open,
    .read = passthrough_read,
    .release = passthrough_release,
    .free = passthrough_free,
};
