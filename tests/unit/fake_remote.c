/* The fake transport of fake_remote.h. */
#include "tests/unit/fake_remote.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/remote/remote.h"

struct fake_remote fake_remote = {.lock = PTHREAD_MUTEX_INITIALIZER,
				  .cond = PTHREAD_COND_INITIALIZER};

int __wrap_bfs_remote_submit(struct bfs_remote_req *req);
int __wrap_bfs_remote_open(struct bfs_remote *r, const char *url,
			   struct bfs_remote_obj **out, struct bfs_error *err);
void __real_bfs_remote_destroy(struct bfs_remote *r);
void __wrap_bfs_remote_destroy(struct bfs_remote *r);

/* An object of the size and version the test set, opened without a
 * request (freed by the real bfs_remote_close). */
int __wrap_bfs_remote_open(struct bfs_remote *r, const char *url,
			   struct bfs_remote_obj **out, struct bfs_error *err)
{
	struct bfs_remote_obj *o = calloc(1, sizeof(*o));

	*out = NULL;
	if (!o || !(o->url = strdup(url))) {
		free(o);
		return -ENOMEM;
	}
	o->r = r;
	bfs_remote_url_display(o->name, sizeof(o->name), url);
	bfs_remote_url_display(o->where, sizeof(o->where), url);
	pthread_mutex_lock(&fake_remote.lock);
	o->size = fake_remote.size;
	snprintf(o->etag, sizeof(o->etag), "%s",
		 fake_remote.etag ? fake_remote.etag : "\"v1\"");
	pthread_mutex_unlock(&fake_remote.lock);
	o->etag_strong = true;
	*out = o;
	return 0;
}

/* Queued for the test to answer; checked as fs/remote checks it. */
int __wrap_bfs_remote_submit(struct bfs_remote_req *req)
{
	struct fake_remote *f = &fake_remote;
	const struct bfs_remote_obj *o = req->obj;
	int rc = 0;

	if (!o || !req->buf || !req->len || req->off > o->size ||
	    req->len > o->size - req->off)
		return -EINVAL;
	pthread_mutex_lock(&f->lock);
	if (f->nsent < FAKE_REMOTE_MAX)
		f->sent[f->nsent] = (struct fake_sent){req->off, req->len};
	f->nsent++;
	if (f->refuse)
		rc = f->refuse;
	else if (f->npending == FAKE_REMOTE_MAX)
		rc = -ENOMEM;
	if (rc == 0) {
		f->pending[f->npending++] = req;
		f->pending_bytes += req->len;
		if (f->npending > f->max_pending)
			f->max_pending = f->npending;
		if (f->pending_bytes > f->max_pending_bytes)
			f->max_pending_bytes = f->pending_bytes;
	}
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
	return rc;
}

struct bfs_remote_req *fake_remote_take(size_t i)
{
	struct fake_remote *f = &fake_remote;
	struct bfs_remote_req *q = f->pending[i];

	memmove(&f->pending[i], &f->pending[i + 1],
		(f->npending - i - 1) * sizeof(f->pending[0]));
	f->npending--;
	f->pending_bytes -= q->len;
	pthread_cond_broadcast(&f->cond);
	return q;
}

struct bfs_remote_req *fake_remote_next(void)
{
	struct bfs_remote_req *q = NULL;

	pthread_mutex_lock(&fake_remote.lock);
	while (!fake_remote.npending && !fake_remote.stop)
		pthread_cond_wait(&fake_remote.cond, &fake_remote.lock);
	if (fake_remote.npending)
		q = fake_remote_take(0);
	pthread_mutex_unlock(&fake_remote.lock);
	return q;
}

void fake_remote_complete(struct bfs_remote_req *q, int result)
{
	if (result == 0)
		fake_remote.fill(q->buf, q->off, q->len);
	else
		bfs_error_set(&q->err, result, q->obj->name, BFS_NO_OFFSET,
			      "bytes %" PRIu64 "-%" PRIu64
			      ": the fake transport fails them: %s",
			      q->off, q->off + q->len - 1, strerror(-result));
	q->result = result;
	q->tries = 1;
	if (q->done)
		q->done(q); /* q may be gone after this */
}

/* As fs/remote: what is still queued fails with ECANCELED ('done'
 * called), then the client goes. */
void __wrap_bfs_remote_destroy(struct bfs_remote *r)
{
	for (;;) {
		struct bfs_remote_req *q = NULL;

		pthread_mutex_lock(&fake_remote.lock);
		for (size_t i = 0; !q && i < fake_remote.npending; i++)
			if (fake_remote.pending[i]->obj->r == r)
				q = fake_remote_take(i);
		pthread_mutex_unlock(&fake_remote.lock);
		if (!q)
			break;
		fake_remote_complete(q, -ECANCELED);
	}
	__real_bfs_remote_destroy(r);
}

void fake_remote_reset(void)
{
	pthread_mutex_lock(&fake_remote.lock);
	fake_remote.refuse = 0;
	fake_remote.nsent = 0;
	fake_remote.npending = fake_remote.max_pending = 0;
	fake_remote.pending_bytes = fake_remote.max_pending_bytes = 0;
	fake_remote.stop = false;
	pthread_mutex_unlock(&fake_remote.lock);
}
