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
 * kernel serves read() and mmap() from the memfd.
 *
 * Which batches have files open (the way's state, 'holds'): the kernel
 * refuses an open without FOPEN_PASSTHROUGH of an inode that has a file
 * open with its backing file (EIO to the opener). So while a batch has a
 * passthrough file open, an O_DIRECT open of it, which the core would
 * give direct mode's way, is served here too. A file counts from the
 * start of its open (before it waits for its batch) to its release: the
 * count covers what the kernel holds, whose backing goes before the
 * RELEASE comes. An O_DIRECT open decided just before a plain open of the
 * same batch counted can still reach the kernel after it (EIO; the
 * readers batchfs ships then open again without O_DIRECT).
 *
 * Lock: opens->lock guards the table only; nothing else is called with
 * it held. */
#include "fs/serve_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fs/log.h"

#define OPEN_BUCKETS 1024u

/* A batch (by position) with files open, and how many. */
struct open_batch {
	uint64_t pos;
	unsigned files;
	struct open_batch *next;
};

struct opens {
	pthread_mutex_t lock;
	struct open_batch *bucket[OPEN_BUCKETS]; /* [lock] */
};

static struct open_batch **slot(struct opens *o, uint64_t pos)
{
	struct open_batch **pp =
	    &o->bucket[(pos * 0x9E3779B97F4A7C15ull >> 40) % OPEN_BUCKETS];

	while (*pp && (*pp)->pos != pos)
		pp = &(*pp)->next;
	return pp;
}

/* One more file of the batch at pos open. false when out of memory. */
static bool opens_add(struct opens *o, uint64_t pos)
{
	struct open_batch **pp, *e;

	pthread_mutex_lock(&o->lock);
	pp = slot(o, pos);
	e = *pp;
	if (!e && (e = calloc(1, sizeof(*e))) != NULL) {
		e->pos = pos;
		*pp = e;
	}
	if (e)
		e->files++;
	pthread_mutex_unlock(&o->lock);
	return e != NULL;
}

static void opens_drop(struct opens *o, uint64_t pos)
{
	struct open_batch **pp, *e;

	pthread_mutex_lock(&o->lock);
	pp = slot(o, pos);
	e = *pp;
	if (e && --e->files == 0) {
		*pp = e->next;
		free(e);
	}
	pthread_mutex_unlock(&o->lock);
}

static bool opens_has(struct opens *o, uint64_t pos)
{
	bool has;

	pthread_mutex_lock(&o->lock);
	has = *slot(o, pos) != NULL;
	pthread_mutex_unlock(&o->lock);
	return has;
}

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
	struct opens *o = calloc(1, sizeof(*o));

	w->state = o;
	if (!o)
		return -ENOMEM;
	pthread_mutex_init(&o->lock, NULL);
	po->memfd = true;
	po->prepare = passthrough_ready;
	po->on_free = passthrough_gone;
	return 0;
}

static void passthrough_destroy(struct bfs_serve_way *w)
{
	struct opens *o = w->state;

	if (!o)
		return;
	for (unsigned i = 0; i < OPEN_BUCKETS; i++)
		while (o->bucket[i]) {
			struct open_batch *e = o->bucket[i];

			o->bucket[i] = e->next;
			free(e);
		}
	pthread_mutex_destroy(&o->lock);
	free(o);
	w->state = NULL;
}

static bool passthrough_holds(struct bfs_serve_way *w, const struct bfs_file *f)
{
	return opens_has(w->state, f->at.pos);
}

/* f no longer counts among the batch's open files. */
static void uncount(struct bfs_serve_way *w, struct bfs_file *f)
{
	if (f->pt.counted)
		opens_drop(w->state, f->at.pos);
	f->pt.counted = false;
}

/* The batch of the open, kept by f until its release. */
static int passthrough_open(struct bfs_serve_way *w, struct bfs_file *f,
			    struct bfs_serve_how *how)
{
	struct bfs_serve_base *s = w->base;
	int rc;

	if (!opens_add(w->state, f->at.pos))
		return -ENOMEM;
	f->pt.counted = true;
	rc = bfs_pool_acquire(s->pool, &f->at, &f->pt.held);
	if (rc < 0) {
		uncount(w, f);
		return rc;
	}
	how->backing_id = backing_of(s, f->pt.held);
	if (how->backing_id <= 0) {
		bfs_pool_note_error(
		    s->pool, f->at.id,
		    "no backing file (%s): open fails with EIO",
		    strerror(how->backing_id ? -how->backing_id : EIO));
		bfs_pool_release(s->pool, f->pt.held);
		f->pt.held = NULL;
		uncount(w, f);
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
	if (f->pt.held)
		bfs_pool_release_last(w->base->pool, f->pt.held);
	f->pt.held = NULL;
	uncount(w, f);
}

/* Open at unmount: the pool is destroyed next. */
static void passthrough_free(struct bfs_serve_way *w, struct bfs_file *f)
{
	bfs_pool_release(w->base->pool, f->pt.held);
	f->pt.held = NULL;
	uncount(w, f);
}

const struct bfs_serve_ops bfs_serve_passthrough_ops = {
    .name = "passthrough",
    .create = passthrough_create,
    .destroy = passthrough_destroy,
    .holds = passthrough_holds,
    .open = passthrough_open,
    .read = passthrough_read,
    .release = passthrough_release,
    .free = passthrough_free,
};
