/* fs/remote/object: a mount's remote objects behind their cache entries: the
 * set, its client and store thread, the objects (object.h; fetching and
 * storing: object_fetch.c; fs/README.md: remote sources).
 *
 * Fork: threads do not survive it, so bfs_objects_suspend waits for the
 * fetches in flight and stops the client and the store thread, and
 * bfs_objects_resume starts them again in the daemon and moves every
 * object to the new client (its pinned version kept). bfs_objects_abort
 * cancels the requests in flight (at unmount).
 *
 * Lock order: os->lock, then o->lock. os->lock guards the job list, the
 * bytes in flight and the objects; o->lock the in-flight marks, the kept
 * ranges, the last failure and the chunks in memory. Counters are
 * atomics. */
#include "fs/remote/object.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/remote/object_impl.h"

#define REQUEST_MAX ((uint64_t)8 << 20)
#define MERGE_GAP   ((uint64_t)256 << 10)
#define FLIGHT_MAX  ((uint64_t)128 << 20)

/* ---- objects --------------------------------------------------------- */

const char *bfs_object_name(const struct bfs_object *o)
{
	return o->name;
}

uint64_t bfs_object_size(const struct bfs_object *o)
{
	return o->size;
}

int bfs_object_fd(const struct bfs_object *o)
{
	return bfs_cache_fd(o->e);
}

void bfs_object_map(struct bfs_object *o, const void *map)
{
	pthread_mutex_lock(&o->lock);
	if (o->map && o->map != map)
		o->maps_many = true;
	o->map = (char *)map;
	pthread_mutex_unlock(&o->lock);
}

static void object_close(struct bfs_object *o)
{
	if (!o)
		return;
	for (size_t i = 0; o->e && i < o->nkept; i++)
		bfs_cache_unpin(o->e, o->kept[i].off, o->kept[i].len);
	if (o->e && atomic_load(&o->sealed))
		bfs_cache_unpin(o->e, 0, o->size);
	bfs_cache_close(o->e);
	bfs_remote_close(o->ro);
	if (o->url) {
		explicit_bzero(o->url, strlen(o->url));
		free(o->url);
	}
	free(o->flight);
	free(o->mem);
	free(o->kept);
	pthread_mutex_destroy(&o->lock);
	free(o);
}

/* The cache entry of o (opened as o->ro), and its geometry. */
static int open_entry(struct bfs_objects *os, struct bfs_object *o,
		      struct bfs_error *err)
{
	struct bfs_remote_info in;
	struct bfs_cache_key k;
	int rc;

	bfs_remote_obj_info(o->ro, &in);
	if (!in.size)
		return bfs_error_set(err, -EINVAL, o->name, BFS_NO_OFFSET,
				     "an empty object");
	if (!in.etag[0] && !in.last_modified[0])
		return bfs_error_set(err, -EINVAL, o->name, BFS_NO_OFFSET,
				     "the server sends neither an ETag nor "
				     "Last-Modified: its version cannot be "
				     "pinned, so it cannot be mounted");
	k = (struct bfs_cache_key){.url = in.where,
				   .query = in.query,
				   .etag = in.etag,
				   .last_modified = in.last_modified,
				   .size = in.size};
	rc = bfs_cache_open(os->cache, &k, &o->e, err);
	if (rc)
		return rc;
	o->size = in.size;
	o->chunk = bfs_cache_chunk(o->e);
	o->shift = (unsigned)__builtin_ctz(o->chunk);
	o->nchunks = (o->size + o->chunk - 1) >> o->shift;
	o->flight = calloc(o->nchunks, 1);
	o->mem = calloc(o->nchunks, 1);
	return o->flight && o->mem ? 0 : -ENOMEM;
}

int bfs_objects_open(struct bfs_objects *os, const char *url,
		     struct bfs_object **out, struct bfs_error *err)
{
	struct bfs_object *o;
	int rc;

	*out = NULL;
	pthread_mutex_lock(&os->lock);
	for (o = os->objects; o && strcmp(o->url, url); o = o->next)
		;
	pthread_mutex_unlock(&os->lock);
	if (o) {
		*out = o;
		return 0;
	}
	o = calloc(1, sizeof(*o));
	if (!o || !(o->url = strdup(url))) {
		free(o);
		return -ENOMEM;
	}
	pthread_mutex_init(&o->lock, NULL);
	o->os = os;
	bfs_remote_url_display(o->name, sizeof(o->name), url);
	rc = os->r ? bfs_remote_open(os->r, url, &o->ro, err) : -ECANCELED;
	if (rc == 0)
		rc = open_entry(os, o, err);
	if (rc) {
		if (rc == -ENOMEM && err && !err->msg[0])
			bfs_error_set(err, rc, o->name, BFS_NO_OFFSET,
				      "out of memory");
		object_close(o);
		return rc;
	}
	pthread_mutex_lock(&os->lock);
	o->next = os->objects;
	os->objects = o;
	pthread_mutex_unlock(&os->lock);
	bfs_object_count(&os->nobjects, 1);
	*out = o;
	return 0;
}

/* ---- the set ----------------------------------------------------------- */

/* The client and the store thread. 0 or -errno with err. */
static int start(struct bfs_objects *os, struct bfs_error *err)
{
	int rc = bfs_remote_create(&os->r, &os->ropt, err);

	if (rc)
		return rc;
	os->stop = false;
	rc = -pthread_create(&os->store, NULL, bfs_object_store_main, os);
	if (rc)
		return bfs_error_set(err, rc, "remote", BFS_NO_OFFSET,
				     "cannot start a thread: %s",
				     strerror(-rc));
	os->store_up = true;
	return 0;
}

/* Stop the client (its requests cancelled, their jobs stored as failed)
 * and then the store thread, once every job is stored. */
static void stop(struct bfs_objects *os)
{
	struct bfs_remote_stats st;

	if (os->r) { /* its counters go on in the next client's */
		bfs_remote_stats(os->r, &st);
		os->before.requests += st.requests;
		os->before.bytes += st.bytes;
		os->before.retries += st.retries;
	}
	bfs_remote_destroy(os->r); /* 'landed' for every request */
	os->r = NULL;
	if (os->store_up) {
		pthread_mutex_lock(&os->lock);
		os->stop = true;
		pthread_cond_broadcast(&os->landed);
		pthread_cond_broadcast(&os->room);
		pthread_mutex_unlock(&os->lock);
		pthread_join(os->store, NULL);
		os->store_up = false;
	}
}

/* 'env' (environ's form) copied. */
static char **copy_env(const char *const *env)
{
	size_t n = 0;
	char **out;

	while (env && env[n])
		n++;
	out = calloc(n + 1, sizeof(*out));
	for (size_t i = 0; out && i < n; i++)
		if (!(out[i] = strdup(env[i]))) {
			for (size_t k = 0; k < i; k++)
				free(out[k]);
			free(out);
			return NULL;
		}
	return out;
}

static char *dup_or_null(const char *s, bool *oom)
{
	char *d = s ? strdup(s) : NULL;

	*oom = *oom || (s && !d);
	return d;
}

extern char **environ;

int bfs_objects_create(struct bfs_objects **out,
		       const struct bfs_objects_opts *o, struct bfs_error *err)
{
	struct bfs_objects *os = calloc(1, sizeof(*os));
	const struct bfs_cache_opts co = {.limit_bytes = o->cache_bytes,
					  .limit_from_free = o->cache_from_free,
					  .chunk_size = o->chunk};
	char dir[4096];
	bool oom = false;
	int rc;

	*out = NULL;
	if (!os)
		return -ENOMEM;
	pthread_mutex_init(&os->lock, NULL);
	pthread_cond_init(&os->room, NULL);
	pthread_cond_init(&os->landed, NULL);
	os->ropt = o->remote;
	os->s3_endpoint = dup_or_null(o->remote.s3_endpoint, &oom);
	os->home = dup_or_null(o->remote.home, &oom);
	os->ca_file = dup_or_null(o->remote.ca_file, &oom);
	os->envp = copy_env(o->remote.envp ? o->remote.envp
					   : (const char *const *)environ);
	os->ropt.s3_endpoint = os->s3_endpoint;
	os->ropt.home = os->home;
	os->ropt.ca_file = os->ca_file;
	os->ropt.envp = (const char *const *)os->envp;
	if (os->ropt.timeout_s <= 0)
		os->ropt.timeout_s = 60;
	os->limit_free = !o->cache_bytes && o->cache_from_free;
	os->request_max = o->request_max ? o->request_max : REQUEST_MAX;
	os->merge_gap = o->merge_gap ? o->merge_gap : MERGE_GAP;
	os->flight_max = o->flight_max ? o->flight_max : FLIGHT_MAX;
	os->mem_max = 2 * os->flight_max;
	rc = oom || !os->envp ? -ENOMEM : 0;
	if (rc == 0 && o->cache_dir)
		snprintf(dir, sizeof(dir), "%s", o->cache_dir);
	else if (rc == 0 &&
		 (rc = bfs_cache_default_dir(dir, sizeof(dir), os->envp)) < 0)
		bfs_error_set(err, rc, "--cache-dir", BFS_NO_OFFSET,
			      "no cache directory: HOME is not set (name "
			      "one with --cache-dir)");
	if (rc == 0 && !(os->dir = strdup(dir)))
		rc = -ENOMEM;
	if (rc == 0)
		rc = bfs_cache_create(&os->cache, os->dir, &co, err);
	if (rc == 0)
		rc = start(os, err);
	if (rc) {
		if (rc == -ENOMEM && err && !err->msg[0])
			bfs_error_set(err, rc, "remote", BFS_NO_OFFSET,
				      "out of memory");
		bfs_objects_destroy(os);
		return rc;
	}
	*out = os;
	return 0;
}

void bfs_objects_destroy(struct bfs_objects *os)
{
	if (!os)
		return;
	stop(os);
	while (os->objects) {
		struct bfs_object *o = os->objects;

		os->objects = o->next;
		object_close(o);
	}
	bfs_cache_destroy(os->cache);
	for (char **e = os->envp; e && *e; e++) {
		explicit_bzero(*e, strlen(*e));
		free(*e);
	}
	free(os->envp);
	free(os->s3_endpoint);
	free(os->home);
	free(os->ca_file);
	free(os->dir);
	pthread_cond_destroy(&os->room);
	pthread_cond_destroy(&os->landed);
	pthread_mutex_destroy(&os->lock);
	free(os);
}

void bfs_objects_abort(struct bfs_objects *os)
{
	/* os->r changes only at suspend and resume, on the mount's thread,
	 * which is the one calling */
	if (os && os->r)
		bfs_remote_cancel(os->r);
}

void bfs_objects_suspend(struct bfs_objects *os)
{
	pthread_mutex_lock(&os->lock);
	while (os->flight_bytes) /* fetches in flight, to the end */
		pthread_cond_wait(&os->room, &os->lock);
	pthread_mutex_unlock(&os->lock);
	stop(os);
}

int bfs_objects_resume(struct bfs_objects *os, struct bfs_error *err)
{
	int rc = start(os, err);

	pthread_mutex_lock(&os->lock);
	for (struct bfs_object *o = os->objects; rc == 0 && o; o = o->next)
		bfs_remote_obj_move(o->ro, os->r);
	pthread_mutex_unlock(&os->lock);
	return rc;
}

const char *bfs_objects_dir(const struct bfs_objects *os)
{
	return os->dir;
}

uint64_t bfs_objects_limit(const struct bfs_objects *os)
{
	return bfs_cache_limit(os->cache);
}

bool bfs_objects_limit_from_free(const struct bfs_objects *os)
{
	return os->limit_free;
}

void bfs_objects_far_gap(struct bfs_objects *os, uint64_t gap, uint64_t after)
{
	os->far_gap = gap;
	os->far = after;
}

void bfs_objects_set_now(struct bfs_objects *os, uint64_t when)
{
	atomic_store_explicit(&os->now, when, memory_order_relaxed);
	bfs_cache_set_now(os->cache, when);
}

void bfs_objects_count_held(struct bfs_objects *os, uint64_t bytes)
{
	bfs_object_count(&os->held_bytes, bytes);
}

void bfs_objects_stats(struct bfs_objects *os, struct bfs_objects_stats *out)
{
	struct bfs_remote_stats rs = {0};
	struct bfs_cache_stats cs = {0};

	memset(out, 0, sizeof(*out));
	if (!os)
		return;
	if (os->r)
		bfs_remote_stats(os->r, &rs);
	bfs_cache_stats(os->cache, &cs);
	out->objects = atomic_load(&os->nobjects);
	out->requests = os->before.requests + rs.requests;
	out->bytes = os->before.bytes + rs.bytes;
	out->in_flight = rs.in_flight;
	out->retries = os->before.retries + rs.retries;
	out->fetches = atomic_load(&os->fetches);
	out->fetch_bytes = atomic_load(&os->fetch_bytes);
	out->fetch_failed = atomic_load(&os->fetch_failed);
	out->held_bytes = atomic_load(&os->held_bytes);
	out->mem_bytes = atomic_load(&os->mem_served);
	out->waits = atomic_load(&os->waits);
	pthread_mutex_lock(&os->lock);
	out->flight_bytes = os->flight_bytes;
	for (struct bfs_object *o = os->objects; o; o = o->next)
		out->sealed += bfs_object_sealed(o);
	pthread_mutex_unlock(&os->lock);
	out->hit_chunks = cs.hit_chunks;
	out->miss_chunks = cs.miss_chunks;
	out->evicted_chunks = cs.evicted_chunks;
	out->evicted_bytes = cs.evicted_bytes;
	out->present_bytes = cs.present_bytes;
	out->limit_bytes = cs.limit_bytes;
}
