/* fs/remote: the client (fs/remote/remote.h): one thread drives a curl multi
 * handle; requests wait on two lists until they go on the wire.
 *
 *   ready   FIFO of requests to start now (a retry goes to the front: its
 *           deadline runs);
 *   later   retries waiting for their backoff (or Retry-After) to pass.
 *
 * At most 'max_in_flight' transfers are on the wire; the multi handle
 * keeps their connections for the next ones. A request's deadline starts
 * at its first try, not at submit: a long queue does not eat it.
 * Stopping (bfs_remote_cancel, bfs_remote_destroy): the thread leaves
 * its loop and fails every request, on the wire or waiting, with
 * -ECANCELED; a submit after is refused so. An object moves to another
 * client with bfs_remote_obj_move (a new client after the mount's fork).
 *
 * Locks: r->lock and a group's lock are never held together. The thread
 * calls 'done' callbacks and signals groups without r->lock. Counters
 * are atomic (read by bfs_remote_stats without the lock). */
#include "fs/remote/remote_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "fs/log.h"

extern char **environ;

#define DEFAULT_TIMEOUT_S 60.0
#define DEFAULT_STALL_S	  10.0
#define DEFAULT_IN_FLIGHT 64 /* why: fs/README.md: remote objects */
#define BACKOFF_FIRST_S	  0.05
#define BACKOFF_MAX_S	  2.0
/* An open (a mount's first request to its server) still unanswered after
 * this long, or failed once, says so in one line: where, why, until when
 * it retries. */
#define SAY_AFTER_S 2.0
/* An open whose every try was refused (connection refused: the host is
 * up and nothing listens on that port) gives up after this long rather
 * than at its deadline: a wrong endpoint or port is far likelier than a
 * server that is starting, and a mount should not take --timeout to say
 * so; a server starting on the same host within a few seconds is still
 * waited for. Everything else (no route, no DNS answer, a server that
 * accepts and stays silent) is retried until the deadline. */
#define REFUSED_GIVEUP_S 5.0

struct bfs_remote {
	pthread_t thread;
	CURLM *multi;	   /* the thread's only */
	struct xfer *wire; /* the thread's only: tries on the wire */
	char **env;	   /* AWS_* and HOME, copied at create */
	char *home, *s3_endpoint, *ca_file;
	double timeout_s, stall_s;
	unsigned max_in_flight;
	uint64_t rng; /* the thread's only: jitter */
	pthread_mutex_t lock;
	struct xfer *ready, *ready_tail; /* lock */
	struct xfer *later;		 /* lock */
	unsigned active;		 /* lock: on the wire */
	bool stopping;			 /* lock */
	bool aws_loaded;		 /* lock */
	int aws_rc;			 /* lock */
	struct bfs_remote_aws aws;	 /* lock */
	struct bfs_error aws_err;	 /* lock */
	struct bfs_remote_stats st;	 /* atomic */
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void count(uint64_t *field, int64_t n)
{
	__atomic_add_fetch(field, (uint64_t)n, __ATOMIC_RELAXED);
}

const char *bfs_remote_err_kind_name(enum bfs_remote_err_kind k)
{
	static const char *const names[BFS_REMOTE_E_KINDS] = {
	    [BFS_REMOTE_E_CONNECT] = "connect",
	    [BFS_REMOTE_E_RESET] = "reset",
	    [BFS_REMOTE_E_TIMEOUT] = "timeout",
	    [BFS_REMOTE_E_THROTTLED] = "throttled",
	    [BFS_REMOTE_E_SERVER] = "server",
	    [BFS_REMOTE_E_BAD_REPLY] = "bad_reply",
	    [BFS_REMOTE_E_STALE] = "stale",
	    [BFS_REMOTE_E_NOT_FOUND] = "not_found",
	    [BFS_REMOTE_E_DENIED] = "denied",
	    [BFS_REMOTE_E_OTHER] = "other",
	};

	return (unsigned)k < BFS_REMOTE_E_KINDS ? names[k] : "?";
}

void bfs_remote_stats(struct bfs_remote *r, struct bfs_remote_stats *out)
{
	const uint64_t *src = (const uint64_t *)&r->st;
	uint64_t *dst = (uint64_t *)out;

	_Static_assert(sizeof(struct bfs_remote_stats) % sizeof(uint64_t) == 0,
		       "bfs_remote_stats holds only uint64_t counters");
	for (size_t i = 0; i < sizeof(*out) / sizeof(uint64_t); i++)
		dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
}

/* ---- completion --------------------------------------------------- */

/* Tell the request's owner (without r->lock): its callback, then its
 * group. x is freed. */
static void complete(struct bfs_remote *r, struct xfer *x)
{
	struct bfs_remote_req *req = x->req;
	struct bfs_remote_group *g = req->group;
	bool failed;

	req->result = x->rc;
	req->tries = x->tries;
	if (!x->rc && x->kind == XFER_PROBE) {
		/* open: the object is not shared yet */
		struct bfs_remote_obj *o = req->obj;

		o->size = x->size;
		snprintf(o->etag, sizeof(o->etag), "%s", x->etag);
		snprintf(o->last_modified, sizeof(o->last_modified), "%s",
			 x->last_modified);
		o->etag_strong = o->etag[0] && strncmp(o->etag, "W/", 2);
	}
	if (x->rc) {
		char range[64] = "";

		if (x->kind == XFER_RANGE)
			snprintf(range, sizeof(range),
				 "bytes %" PRIu64 "-%" PRIu64 ": ", req->off,
				 req->off + req->len - 1);
		bfs_error_set(&req->err, x->rc, req->obj->name, BFS_NO_OFFSET,
			      "%s%s", range, x->msg);
	}
	failed = x->rc != 0;
	count(failed ? &r->st.failed : &r->st.done, 1);
	free(x);
	if (req->done)
		req->done(req);
	if (g) {
		pthread_mutex_lock(&g->lock);
		if (failed && !g->first_failed)
			g->first_failed = req;
		if (--g->pending == 0)
			pthread_cond_broadcast(&g->cond);
		pthread_mutex_unlock(&g->lock);
	}
}

/* "host:port" of url into buf ("?" when curl cannot parse it). */
static void host_port(const char *url, char *buf, size_t len)
{
	CURLU *u = curl_url();
	char *host = NULL, *port = NULL;

	snprintf(buf, len, "?");
	if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) ==
		CURLUE_OK)
		snprintf(buf, len, "%s:%s", host, port);
	curl_free(host);
	curl_free(port);
	curl_url_cleanup(u);
}

/* The one line of an open that waits for its server (x->said): where,
 * why ('why': the last try's failure, or that nothing came yet), and
 * until when it goes on (wall-clock time of its deadline). */
static void say_waiting(struct bfs_remote *r, struct xfer *x, double now,
			const char *why)
{
	char where[300], until[32];
	double end =
	    x->refused_only && x->started + REFUSED_GIVEUP_S < x->deadline
		? x->started + REFUSED_GIVEUP_S
		: x->deadline;
	time_t t = time(NULL) + (time_t)(end - now + 0.5);
	struct tm tm;

	if (x->said)
		return;
	x->said = true;
	host_port(x->req->obj->url, where, sizeof(where));
	if (!localtime_r(&t, &tm) ||
	    !strftime(until, sizeof(until), "%H:%M:%S", &tm))
		snprintf(until, sizeof(until), "?");
	if (x->refused_only)
		bfs_log(BFS_LOG_WARN, "remote",
			"%s (%s): connection refused (%.200s); retrying until "
			"%s (%.0f s: nothing listens there yet)",
			where, x->req->obj->name, why, until, end - x->started);
	else
		bfs_log(BFS_LOG_WARN, "remote",
			"%s (%s): %.220s; retrying until %s (--timeout %.0f s)",
			where, x->req->obj->name, why, until, r->timeout_s);
}

/* Opens on the wire with nothing back for SAY_AFTER_S say so. */
static void say_slow_opens(struct bfs_remote *r, double now)
{
	for (struct xfer *x = r->wire; x; x = x->next)
		if (x->kind == XFER_PROBE && !x->said &&
		    now - x->started >= SAY_AFTER_S)
			say_waiting(r, x, now, "nothing answered yet");
}

/* Full jitter within [d/2, d]. */
static double jitter(struct bfs_remote *r, double d)
{
	r->rng ^= r->rng << 13;
	r->rng ^= r->rng >> 7;
	r->rng ^= r->rng << 17;
	return d / 2 + d / 2 * (double)(r->rng >> 11) / (double)(1ULL << 53);
}

/* The try of x on the wire ended (removed from the multi handle): retry
 * it (onto 'later', under the lock) or complete it (onto *done). */
static void try_ended(struct bfs_remote *r, struct xfer *x, CURLcode cc,
		      struct xfer **done)
{
	double now, wait, backoff;
	uint64_t before = x->got;
	long oserr = 0;

	curl_easy_getinfo(x->easy, CURLINFO_OS_ERRNO, &oserr);
	bfs_remote_try_finish(x, cc);
	x->refused_only = (x->tries == 1 || x->refused_only) &&
			  cc == CURLE_COULDNT_CONNECT && oserr == ECONNREFUSED;
	count(&r->st.bytes, (int64_t)(x->got - before) +
				(x->kind == XFER_PROBE ? x->try_got : 0));
	curl_easy_cleanup(x->easy);
	x->easy = NULL;
	if (x->rc)
		count(&r->st.errors[x->kind_of_error], 1);
	now = now_s();
	backoff =
	    BACKOFF_FIRST_S * (double)(1u << (x->tries < 6 ? x->tries - 1 : 5));
	wait = jitter(r, backoff < BACKOFF_MAX_S ? backoff : BACKOFF_MAX_S);
	if (x->retry_after > wait)
		wait = x->retry_after;
	if (x->rc && x->retry && x->kind == XFER_PROBE && x->refused_only &&
	    now + wait - x->started > REFUSED_GIVEUP_S)
		x->deadline = now; /* refused throughout: give up now */
	if (x->rc && x->retry && now + wait < x->deadline) {
		if (x->kind == XFER_PROBE)
			say_waiting(r, x, now, x->msg);
		bfs_log(BFS_LOG_DEBUG, "remote",
			"%s: try %u of bytes %" PRIu64 "-%" PRIu64
			" failed (%s); again in %.2f s",
			x->req->obj->name, x->tries, x->try_start,
			x->kind == XFER_PROBE ? 0
					      : x->req->off + x->req->len - 1,
			x->msg, wait);
		count(&r->st.retries, 1);
		x->due = now + wait;
		pthread_mutex_lock(&r->lock);
		x->next = r->later;
		r->later = x;
		pthread_mutex_unlock(&r->lock);
		return;
	}
	if (x->rc && x->retry) {
		char last[sizeof(x->msg)];

		snprintf(last, sizeof(last), "%s", x->msg);
		if (x->refused_only)
			snprintf(x->msg, sizeof(x->msg),
				 "connection refused on each of %u tries in "
				 "%.1f s (is the endpoint's address and port "
				 "right?): %.220s",
				 x->tries, now - x->started, last);
		else
			snprintf(x->msg, sizeof(x->msg),
				 "gave up after %u tries in %.1f s (timeout "
				 "%.0f s): %.220s",
				 x->tries, now - x->started, r->timeout_s,
				 last);
		if (!x->timed_out)
			x->rc = -EIO;
	}
	x->next = *done;
	*done = x;
}

/* ---- the thread --------------------------------------------------- */

/* Under the lock: due retries to the front of 'ready'; the time until
 * the next one is due (or 'cap'). */
static double move_due(struct bfs_remote *r, double now, double cap)
{
	struct xfer **pp = &r->later, *x;
	double next = cap;

	while ((x = *pp)) {
		if (x->due <= now) {
			*pp = x->next;
			x->next = r->ready;
			r->ready = x;
			if (!r->ready_tail)
				r->ready_tail = x;
			continue;
		}
		if (x->due - now < next)
			next = x->due - now;
		pp = &x->next;
	}
	return next;
}

/* Under the lock: put ready requests on the wire while slots are free;
 * those that cannot start (no memory) onto *done. */
static void start_ready(struct bfs_remote *r, double now, struct xfer **done)
{
	struct xfer *x;

	while (r->active < r->max_in_flight && (x = r->ready)) {
		r->ready = x->next;
		if (!r->ready)
			r->ready_tail = NULL;
		if (!x->started) {
			x->started = now;
			x->deadline = now + r->timeout_s;
		}
		if (bfs_remote_try_start(x, now, r->stall_s, r->ca_file) ||
		    curl_multi_add_handle(r->multi, x->easy) != CURLM_OK) {
			if (x->easy)
				curl_easy_cleanup(x->easy);
			curl_slist_free_all(x->headers);
			x->easy = NULL;
			x->headers = NULL;
			x->rc = -ENOMEM;
			snprintf(x->msg, sizeof(x->msg),
				 "out of memory for a request");
			x->next = *done;
			*done = x;
			continue;
		}
		r->active++;
		x->next = r->wire;
		r->wire = x;
		count(&r->st.in_flight, 1);
		if (r->active > r->st.in_flight_max) /* only this thread */
			__atomic_store_n(&r->st.in_flight_max,
					 (uint64_t)r->active, __ATOMIC_RELAXED);
		count(&r->st.queued, -1);
		count(&r->st.requests, 1);
	}
}

/* Without the lock: the tries that ended, retried or onto *done. */
static void reap(struct bfs_remote *r, struct xfer **done)
{
	CURLMsg *m;
	int left;

	while ((m = curl_multi_info_read(r->multi, &left))) {
		struct xfer *x = NULL;

		if (m->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &x);
		curl_multi_remove_handle(r->multi, m->easy_handle);
		for (struct xfer **pp = &r->wire; *pp; pp = &(*pp)->next)
			if (*pp == x) {
				*pp = x->next;
				break;
			}
		pthread_mutex_lock(&r->lock);
		r->active--;
		pthread_mutex_unlock(&r->lock);
		count(&r->st.in_flight, -1);
		count(&r->st.queued, 1);
		try_ended(r, x, m->data.result, done);
	}
}

static void complete_all(struct bfs_remote *r, struct xfer *done)
{
	while (done) {
		struct xfer *next = done->next;

		count(&r->st.queued, -1);
		complete(r, done);
		done = next;
	}
}

/* Stopping: every request fails with -ECANCELED. */
static void cancel_all(struct bfs_remote *r)
{
	struct xfer *done = NULL, *x, *lists[2];
	int n = 0;

	pthread_mutex_lock(&r->lock);
	lists[0] = r->ready;
	lists[1] = r->later;
	r->ready = r->ready_tail = r->later = NULL;
	pthread_mutex_unlock(&r->lock);
	while ((x = r->wire)) {
		r->wire = x->next;
		curl_multi_remove_handle(r->multi, x->easy);
		curl_easy_cleanup(x->easy);
		x->easy = NULL;
		curl_slist_free_all(x->headers);
		x->headers = NULL;
		x->next = done;
		done = x;
		n++;
	}
	count(&r->st.in_flight, -n);
	count(&r->st.queued, n);
	for (int l = 0; l < 2; l++)
		while ((x = lists[l])) {
			lists[l] = x->next;
			x->next = done;
			done = x;
		}
	for (x = done; x; x = x->next) {
		x->rc = -ECANCELED;
		snprintf(x->msg, sizeof(x->msg), "cancelled: the client stops");
	}
	complete_all(r, done);
}

static void *loop(void *arg)
{
	struct bfs_remote *r = arg;

	for (;;) {
		struct xfer *done = NULL;
		double now = now_s(), wait;
		int running;
		long curl_ms = -1;

		pthread_mutex_lock(&r->lock);
		if (r->stopping) {
			pthread_mutex_unlock(&r->lock);
			break;
		}
		move_due(r, now, 1.0);
		start_ready(r, now, &done);
		pthread_mutex_unlock(&r->lock);
		complete_all(r, done);
		done = NULL;

		curl_multi_perform(r->multi, &running);
		reap(r, &done);
		complete_all(r, done);
		say_slow_opens(r, now_s());

		pthread_mutex_lock(&r->lock);
		wait = move_due(r, now_s(), 1.0);
		if (r->ready && r->active < r->max_in_flight)
			wait = 0;
		pthread_mutex_unlock(&r->lock);
		curl_multi_timeout(r->multi, &curl_ms);
		if (curl_ms >= 0 && curl_ms < wait * 1000)
			wait = (double)curl_ms / 1000;
		curl_multi_poll(r->multi, NULL, 0, (int)(wait * 1000), NULL);
	}
	cancel_all(r);
	return NULL;
}

/* ---- the client --------------------------------------------------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* The variables the AWS settings may read: AWS_* and HOME. */
static char **copy_env(const char *const *envp)
{
	size_t n = 0, k = 0;
	char **out;

	for (const char *const *e = envp; e && *e; e++)
		n++;
	out = calloc(n + 1, sizeof(*out));
	if (!out)
		return NULL;
	for (const char *const *e = envp; e && *e; e++) {
		if (strncmp(*e, "AWS_", 4) && strncmp(*e, "HOME=", 5))
			continue;
		if (!(out[k++] = strdup(*e)))
			return out; /* freed by the caller's destroy */
	}
	return out;
}

static void free_env(char **env)
{
	for (char **e = env; e && *e; e++) {
		explicit_bzero(*e, strlen(*e));
		free(*e);
	}
	free(env);
}

int bfs_remote_create(struct bfs_remote **out,
		      const struct bfs_remote_opts *opts, struct bfs_error *err)
{
	struct bfs_remote *r;
	struct timespec ts;
	int rc;

	*out = NULL;
	pthread_once(&curl_once, curl_init);
	if (curl_init_rc != CURLE_OK)
		return bfs_error_set(err, -EIO, "libcurl", BFS_NO_OFFSET,
				     "cannot start: %s",
				     curl_easy_strerror(curl_init_rc));
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	pthread_mutex_init(&r->lock, NULL);
	r->timeout_s =
	    opts->timeout_s > 0 ? opts->timeout_s : DEFAULT_TIMEOUT_S;
	r->stall_s = opts->stall_s > 0 ? opts->stall_s : DEFAULT_STALL_S;
	if (r->stall_s > r->timeout_s)
		r->stall_s = r->timeout_s;
	r->max_in_flight =
	    opts->max_in_flight ? opts->max_in_flight : DEFAULT_IN_FLIGHT;
	clock_gettime(CLOCK_REALTIME, &ts);
	r->rng = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)(uintptr_t)r ^
		 (uint64_t)ts.tv_sec;
	r->rng |= 1;
	r->env =
	    copy_env(opts->envp ? opts->envp : (const char *const *)environ);
	if (!r->env || (opts->home && !(r->home = strdup(opts->home))) ||
	    (opts->s3_endpoint &&
	     !(r->s3_endpoint = strdup(opts->s3_endpoint))) ||
	    (opts->ca_file && !(r->ca_file = strdup(opts->ca_file)))) {
		rc = -ENOMEM;
		goto err_free;
	}
	r->multi = curl_multi_init();
	if (!r->multi) {
		rc = bfs_error_set(err, -EIO, "libcurl", BFS_NO_OFFSET,
				   "cannot start a multi handle");
		goto err_free;
	}
	curl_multi_setopt(r->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS,
			  (long)r->max_in_flight);
	curl_multi_setopt(r->multi, CURLMOPT_MAXCONNECTS,
			  (long)r->max_in_flight);
	rc = -pthread_create(&r->thread, NULL, loop, r);
	if (rc) {
		bfs_error_set(err, rc, "remote", BFS_NO_OFFSET,
			      "cannot start a thread: %s", strerror(-rc));
		goto err_free;
	}
	*out = r;
	return 0;
err_free:
	if (r->multi)
		curl_multi_cleanup(r->multi);
	free_env(r->env);
	free(r->home);
	free(r->s3_endpoint);
	free(r->ca_file);
	pthread_mutex_destroy(&r->lock);
	free(r);
	return rc;
}

void bfs_remote_cancel(struct bfs_remote *r)
{
	/* the thread leaves its loop and cancels all; submit refuses */
	pthread_mutex_lock(&r->lock);
	r->stopping = true;
	pthread_mutex_unlock(&r->lock);
	curl_multi_wakeup(r->multi);
}

void bfs_remote_destroy(struct bfs_remote *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	r->stopping = true;
	pthread_mutex_unlock(&r->lock);
	curl_multi_wakeup(r->multi);
	pthread_join(r->thread, NULL);
	curl_multi_cleanup(r->multi);
	free_env(r->env);
	free(r->home);
	free(r->s3_endpoint);
	free(r->ca_file);
	bfs_remote_aws_clear(&r->aws);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

/* ---- requests ----------------------------------------------------- */

static int enqueue(struct bfs_remote_req *req, enum xfer_kind kind)
{
	struct bfs_remote *r = req->obj->r;
	struct bfs_remote_group *g = req->group;
	struct xfer *x = calloc(1, sizeof(*x));

	if (!x)
		return -ENOMEM;
	x->r = r;
	x->req = req;
	x->kind = kind;
	req->result = 0;
	req->tries = 0;
	req->err.msg[0] = 0;
	if (g) {
		pthread_mutex_lock(&g->lock);
		g->pending++;
		pthread_mutex_unlock(&g->lock);
	}
	pthread_mutex_lock(&r->lock);
	if (r->stopping) {
		pthread_mutex_unlock(&r->lock);
		free(x);
		if (g) {
			pthread_mutex_lock(&g->lock);
			if (--g->pending == 0)
				pthread_cond_broadcast(&g->cond);
			pthread_mutex_unlock(&g->lock);
		}
		return -ECANCELED;
	}
	count(&r->st.queued, 1);
	if (r->ready_tail)
		r->ready_tail->next = x;
	else
		r->ready = x;
	r->ready_tail = x;
	pthread_mutex_unlock(&r->lock);
	curl_multi_wakeup(r->multi);
	return 0;
}

int bfs_remote_submit(struct bfs_remote_req *req)
{
	const struct bfs_remote_obj *o = req->obj;

	if (!o || !req->buf || !req->len || req->off > o->size ||
	    req->len > o->size - req->off)
		return -EINVAL;
	return enqueue(req, XFER_RANGE);
}

void bfs_remote_group_init(struct bfs_remote_group *g)
{
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->cond, NULL);
	g->pending = 0;
	g->first_failed = NULL;
}

void bfs_remote_group_destroy(struct bfs_remote_group *g)
{
	pthread_cond_destroy(&g->cond);
	pthread_mutex_destroy(&g->lock);
}

int bfs_remote_group_wait(struct bfs_remote_group *g)
{
	int rc;

	pthread_mutex_lock(&g->lock);
	while (g->pending)
		pthread_cond_wait(&g->cond, &g->lock);
	rc = g->first_failed ? g->first_failed->result : 0;
	pthread_mutex_unlock(&g->lock);
	return rc;
}

/* Run req (of 'kind') and wait for it; its message into err. */
static int run_one(struct bfs_remote_req *req, enum xfer_kind kind,
		   struct bfs_error *err)
{
	struct bfs_remote_group g;
	int rc;

	bfs_remote_group_init(&g);
	req->group = &g;
	rc = enqueue(req, kind);
	if (!rc) {
		bfs_remote_group_wait(&g);
		rc = req->result;
	}
	bfs_remote_group_destroy(&g);
	if (rc && err && !err->msg[0])
		snprintf(err->msg, sizeof(err->msg), "%s",
			 req->err.msg[0] ? req->err.msg : strerror(-rc));
	return rc;
}

int bfs_remote_read(struct bfs_remote_obj *o, void *buf, size_t len,
		    uint64_t off, struct bfs_error *err)
{
	struct bfs_remote_req req = {
	    .obj = o, .off = off, .len = len, .buf = buf};

	if (!len || off > o->size || len > o->size - off)
		return bfs_error_set(err, -EINVAL, o->name, BFS_NO_OFFSET,
				     "bytes %" PRIu64 "+%zu: past the end of "
				     "the object (%" PRIu64 " bytes)",
				     off, len, o->size);
	return run_one(&req, XFER_RANGE, err);
}

/* ---- objects ------------------------------------------------------ */

/* The AWS settings, read once (a copy into *a, which the caller wipes). */
static int aws_settings(struct bfs_remote *r, struct bfs_remote_aws *a,
			struct bfs_error *err)
{
	int rc;

	pthread_mutex_lock(&r->lock);
	if (!r->aws_loaded) {
		r->aws_rc = bfs_remote_aws_load(
		    &r->aws, (const char *const *)r->env, r->home, &r->aws_err);
		r->aws_loaded = true;
	}
	rc = r->aws_rc;
	if (rc && err && !err->msg[0])
		memcpy(err->msg, r->aws_err.msg, sizeof(err->msg));
	if (!rc)
		*a = r->aws;
	pthread_mutex_unlock(&r->lock);
	return rc;
}

/* An s3:// object: its HTTP URL, its signing. */
static int s3_setup(struct bfs_remote_obj *o, const char *url,
		    struct bfs_error *err)
{
	struct bfs_remote_aws *a = malloc(sizeof(*a));
	char *key = malloc(strlen(url) + 1), *http = NULL;
	char endpoint[BFS_REMOTE_FIELD_MAX + 64];
	size_t cap = 3 * strlen(url) + sizeof(endpoint) + 16;
	int rc = -ENOMEM;

	if (!a || !key || !(http = malloc(cap)))
		goto out;
	rc = bfs_remote_s3_split(url, o->bucket, sizeof(o->bucket), key,
				 strlen(url) + 1, err);
	if (rc)
		goto out;
	o->key = key;
	key = NULL;
	rc = aws_settings(o->r, a, err);
	if (rc)
		goto out;
	if (o->r->s3_endpoint)
		snprintf(endpoint, sizeof(endpoint), "%s", o->r->s3_endpoint);
	else if (a->endpoint[0])
		snprintf(endpoint, sizeof(endpoint), "%s", a->endpoint);
	else
		snprintf(endpoint, sizeof(endpoint),
			 "https://s3.%s.amazonaws.com", a->region);
	rc = bfs_remote_s3_http_url(http, cap, url, endpoint, err);
	if (rc)
		goto out;
	o->url = http;
	http = NULL;
	snprintf(o->auth, sizeof(o->auth), "%s", a->source);
	if (a->access_key[0]) {
		snprintf(o->sigv4, sizeof(o->sigv4), "aws:amz:%s:s3",
			 a->region);
		rc = -ENOMEM;
		if (!(o->user = strdup(a->access_key)) ||
		    !(o->secret = strdup(a->secret_key)))
			goto out;
		if (a->session_token[0] &&
		    asprintf(&o->token_header, "x-amz-security-token: %s",
			     a->session_token) < 0) {
			o->token_header = NULL;
			goto out;
		}
	}
	rc = 0;
out:
	bfs_remote_aws_clear(a);
	free(a);
	free(key);
	free(http);
	return rc;
}

static void wipe_free(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

void bfs_remote_close(struct bfs_remote_obj *o)
{
	if (!o)
		return;
	wipe_free(o->url);
	wipe_free(o->user);
	wipe_free(o->secret);
	wipe_free(o->token_header);
	free(o->key);
	free(o);
}

int bfs_remote_open(struct bfs_remote *r, const char *url,
		    struct bfs_remote_obj **out, struct bfs_error *err)
{
	struct bfs_remote_obj *o;
	char byte;
	struct bfs_remote_req probe = {.off = 0, .len = 1, .buf = &byte};
	int rc;

	*out = NULL;
	if (!bfs_remote_is_url(url))
		return bfs_error_set(err, -EINVAL, url ? url : "(null)",
				     BFS_NO_OFFSET,
				     "not an s3://, http:// or https:// URL");
	rc = bfs_remote_url_check(url, err);
	if (rc)
		return rc;
	o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	o->r = r;
	bfs_remote_url_display(o->name, sizeof(o->name), url);
	if (strncasecmp(url, "s3://", 5) == 0) {
		o->s3 = true;
		rc = s3_setup(o, url, err);
	} else {
		o->url = strdup(url);
		rc = o->url ? 0 : -ENOMEM;
	}
	if (rc)
		goto err_close;
	bfs_remote_url_display(o->where, sizeof(o->where), o->url);
	probe.obj = o;
	rc = run_one(&probe, XFER_PROBE, err);
	if (rc)
		goto err_close;
	*out = o;
	return 0;
err_close:
	bfs_remote_close(o);
	return rc;
}

void bfs_remote_obj_info(const struct bfs_remote_obj *o,
			 struct bfs_remote_info *out)
{
	out->name = o->name;
	out->size = o->size;
	out->etag = o->etag;
	out->last_modified = o->last_modified;
	out->auth = o->auth;
	out->where = o->where;
	out->query = o->s3 ? NULL : strpbrk(o->url, "?#");
	out->query = out->query && *out->query == '?' ? out->query + 1 : NULL;
}

void bfs_remote_obj_move(struct bfs_remote_obj *o, struct bfs_remote *to)
{
	o->r = to;
}
