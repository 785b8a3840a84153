/* fs/remote/object over a transport of the test's own: the set, its
 * objects and their cache entries are real (a cache directory under
 * $BFS_TEST_TMP), but no request reaches a network. The fake transport
 * (fake_remote.h) makes an object of the size and version the test says
 * without a request and queues each range request; the test answers it
 * (its bytes, or an error) when it chooses, calling the request's 'done'
 * as fs/remote's thread would; a client destroyed fails what is still
 * queued with ECANCELED, as fs/remote does. The store's cache writes go
 * through --wrap=bfs_cache_write too (below).
 * - claims: two gathers of one chunk send one request and both read its
 *   bytes; a gather whose chunks overlap another's asks only for the rest
 *   and waits for the other's request;
 * - runs: chunks of one read merge over gaps of at most merge_gap absent
 *   chunks, not over wider ones nor over a present chunk; a run longer
 *   than request_max is cut into requests of request_max;
 * - in flight: a gather's requests never hold more than twice flight_max
 *   bytes, the read-ahead's never more than flight_max (both reached);
 * - the store thread: bytes that landed are in the cache file, and a set
 *   opened later over the same directory serves them without a request
 *   (but not to another version of the object); a chunk stored and
 *   evicted before its in-flight mark came off (--wrap=bfs_cache_write
 *   evicts it there) is fetched again by the gather that pinned it
 *   meanwhile (fs/remote/object_fetch.c: unmark);
 * - keep: the structure's ranges fetched in order of offset, and kept
 *   (pinned: never evicted) while the object is open;
 * - failures: a request that fails is fetched once more, then fails its
 *   waiters with its error; a later read fetches again; a replaced object
 *   (ESTALE) is not fetched again; EAGAIN from the transport is stored as
 *   EIO (not as the "fetch again" mark, which would send requests until
 *   the deadline); a request the transport refuses fails its waiters.
 * Waits are bounded (LIVENESS_S) and wait for states, never for time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fs/remote/object.h"
#include "fs/remote/object_impl.h"
#include "fs/remote/remote.h"
#include "fs/remote/remote_impl.h"
#include "tests/unit/fake_remote.h"

#define CHUNK	   4096u /* of every entry here */
#define LIVENESS_S 30	 /* a bound on waits, not a measure */
#define URL	   "https://fake.example/data/obj.bin"

static char base[512];

/* ---- the object's bytes ---------------------------------------------- */

/* Byte x of the object (never 0: a hole reads as 0). */
static uint8_t obj_byte(uint64_t x)
{
	return (uint8_t)((((x + 7) * 2654435761u) >> 16) | 1);
}

static void obj_fill(uint8_t *buf, uint64_t off, uint64_t len)
{
	for (uint64_t i = 0; i < len; i++)
		buf[i] = obj_byte(off + i);
}

static bool obj_equal(const uint8_t *buf, uint64_t off, uint64_t len)
{
	for (uint64_t i = 0; i < len; i++)
		if (buf[i] != obj_byte(off + i))
			return false;
	return true;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t liveness_deadline(void)
{
	return now_ns() + (uint64_t)LIVENESS_S * 1000000000u;
}

/* ---- the fake transport (fake_remote.h) and the store's write -------- */

/* Armed: the next bfs_cache_write of fs/remote/object (the store of a
 * fetch ahead) has its bytes evicted at once ('evicted' of them) and
 * holds the store there ('held'), before it lifts the in-flight marks,
 * until 'let_go'. [fake_remote.lock] */
static struct {
	bool armed, held, let_go;
	int64_t evicted;
} evict;

int __real_bfs_cache_write(struct bfs_cache_entry *e, uint64_t off,
			   const void *buf, uint64_t len);
int __wrap_bfs_cache_write(struct bfs_cache_entry *e, uint64_t off,
			   const void *buf, uint64_t len);

/* Wait (fake_remote.lock held) until ok(arg), within the liveness bound:
 * whether it came. */
static bool wait_for(bool (*ok)(void *), void *arg)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += LIVENESS_S;
	while (!ok(arg))
		if (pthread_cond_timedwait(&fake_remote.cond, &fake_remote.lock,
					   &until) == ETIMEDOUT)
			return ok(arg);
	return true;
}

static bool let_go(void *arg)
{
	return evict.let_go;
}

/* The store's write; armed, its chunks evicted as soon as written (as a
 * write of another object making room could), and the store held there
 * until the test lets it go. */
int __wrap_bfs_cache_write(struct bfs_cache_entry *e, uint64_t off,
			   const void *buf, uint64_t len)
{
	int rc = __real_bfs_cache_write(e, off, buf, len);
	int64_t n;
	bool armed;

	pthread_mutex_lock(&fake_remote.lock);
	armed = evict.armed && rc == 0;
	evict.armed = evict.armed && !armed;
	pthread_mutex_unlock(&fake_remote.lock);
	if (!armed)
		return rc;
	n = bfs_cache_evict(e, off, len);

	pthread_mutex_lock(&fake_remote.lock);
	evict.evicted = n;
	evict.held = true;
	pthread_cond_broadcast(&fake_remote.cond);
	wait_for(let_go, NULL); /* the test fails on its own bound */
	evict.held = false;
	pthread_mutex_unlock(&fake_remote.lock);
	return rc;
}

static bool pending_at(void *arg)
{
	uint64_t off = *(uint64_t *)arg;

	for (size_t i = 0; i < fake_remote.npending; i++)
		if (fake_remote.pending[i]->off == off)
			return true;
	return false;
}

/* Answer the request for bytes from 'off' (once it is queued) with
 * 'result'. */
static void answer(uint64_t off, int result)
{
	struct bfs_remote_req *q = NULL;

	pthread_mutex_lock(&fake_remote.lock);
	if (wait_for(pending_at, &off))
		for (size_t i = 0; !q && i < fake_remote.npending; i++)
			if (fake_remote.pending[i]->off == off)
				q = fake_remote_take(i);
	pthread_mutex_unlock(&fake_remote.lock);
	if (!q)
		fail_msg("no request for byte %" PRIu64 " within %d s", off,
			 LIVENESS_S);
	fake_remote_complete(q, result);
}

/* Answer every request queued now with 'result'. */
static void answer_all(int result)
{
	for (;;) {
		struct bfs_remote_req *q = NULL;

		pthread_mutex_lock(&fake_remote.lock);
		if (fake_remote.npending)
			q = fake_remote_take(0);
		pthread_mutex_unlock(&fake_remote.lock);
		if (!q)
			return;
		fake_remote_complete(q, result);
	}
}

static size_t nsent(void)
{
	size_t n;

	pthread_mutex_lock(&fake_remote.lock);
	n = fake_remote.nsent;
	pthread_mutex_unlock(&fake_remote.lock);
	return n;
}

/* The requests sent were exactly want[0..n), in order. */
static void assert_sent(const struct fake_sent *want, size_t n)
{
	pthread_mutex_lock(&fake_remote.lock);
	for (size_t i = 0; i < n && i < fake_remote.nsent; i++)
		if (fake_remote.sent[i].off != want[i].off ||
		    fake_remote.sent[i].len != want[i].len) {
			struct fake_sent got = fake_remote.sent[i];

			pthread_mutex_unlock(&fake_remote.lock);
			fail_msg("request %zu: bytes %" PRIu64 "+%" PRIu64
				 ", want %" PRIu64 "+%" PRIu64,
				 i, got.off, got.len, want[i].off, want[i].len);
		}
	pthread_mutex_unlock(&fake_remote.lock);
	assert_int_equal(nsent(), n);
}

/* ---- sets, objects, waiters ------------------------------------------ */

static int setup(void **state)
{
	const char *tmp = getenv("BFS_TEST_TMP");

	snprintf(base, sizeof(base), "%s/object-XXXXXX", tmp ? tmp : "/tmp");
	return mkdtemp(base) ? 0 : -1;
}

/* A clean fake before each test. */
static int fake_reset(void **state)
{
	fake_remote_reset();
	pthread_mutex_lock(&fake_remote.lock);
	fake_remote.size = 0;
	fake_remote.etag = "\"v1\"";
	fake_remote.fill = obj_fill;
	evict.armed = false;
	evict.held = false;
	evict.let_go = false;
	evict.evicted = 0;
	pthread_mutex_unlock(&fake_remote.lock);
	return 0;
}

struct set_opts {
	uint64_t request_max, merge_gap, flight_max;
	uint64_t cache_bytes; /* the bound; 0: none */
};

/* A set over cache directory 'name' (under base). */
static struct bfs_objects *set_new(const char *name, struct set_opts so)
{
	char dir[700];
	struct bfs_objects_opts o = {.cache_dir = dir,
				     .chunk = CHUNK,
				     .request_max = so.request_max,
				     .merge_gap = so.merge_gap,
				     .flight_max = so.flight_max,
				     .cache_bytes = so.cache_bytes};
	struct bfs_objects *os = NULL;
	struct bfs_error err = {{0}};

	snprintf(dir, sizeof(dir), "%s/%s", base, name);
	if (bfs_objects_create(&os, &o, &err))
		fail_msg("bfs_objects_create %s: %s", dir, err.msg);
	return os;
}

/* The set destroyed, nothing left queued in the fake_remote. */
static void set_end(struct bfs_objects *os)
{
	pthread_mutex_lock(&fake_remote.lock);
	assert_int_equal(fake_remote.npending, 0);
	pthread_mutex_unlock(&fake_remote.lock);
	bfs_objects_destroy(os);
}

/* Object 'url' of 'size' bytes at version 'etag'. */
static struct bfs_object *obj_open(struct bfs_objects *os, const char *url,
				   uint64_t size, const char *etag)
{
	struct bfs_object *o = NULL;
	struct bfs_error err = {{0}};

	pthread_mutex_lock(&fake_remote.lock);
	fake_remote.size = size;
	fake_remote.etag = etag;
	pthread_mutex_unlock(&fake_remote.lock);
	if (bfs_objects_open(os, url, &o, &err))
		fail_msg("bfs_objects_open: %s", err.msg);
	assert_int_equal(bfs_object_size(o), size);
	return o;
}

/* Bytes r of o (pinned, waited for) read and right. */
static void assert_reads_right(struct bfs_object *o, struct bfs_cache_range r)
{
	uint8_t *buf = malloc(r.len);

	assert_non_null(buf);
	assert_int_equal(bfs_object_read(o, buf, r.off, r.len), 0);
	assert_true(obj_equal(buf, r.off, r.len));
	free(buf);
}

/* The cache file of o holds the object's bytes r. */
static void assert_file_holds(struct bfs_object *o, struct bfs_cache_range r)
{
	uint8_t *buf = malloc(r.len);

	assert_non_null(buf);
	assert_int_equal(pread(bfs_object_fd(o), buf, r.len, (off_t)r.off),
			 (ssize_t)r.len);
	assert_true(obj_equal(buf, r.off, r.len));
	free(buf);
}

/* A thread that waits for a pinned range (bfs_object_wait, within the
 * liveness bound) and reads it. */
struct waiter {
	struct bfs_object *o;
	struct bfs_cache_range r;
	pthread_t t;
	bool done; /* fake_remote.lock */
	int rc, read_rc;
	bool right; /* the bytes read are the object's */
	struct bfs_error err;
};

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;
	uint8_t *buf;

	w->rc = bfs_object_wait(w->o, &w->r, 1, liveness_deadline(), &w->err);
	if (w->rc == 0 && (buf = malloc(w->r.len))) {
		w->read_rc = bfs_object_read(w->o, buf, w->r.off, w->r.len);
		w->right =
		    w->read_rc == 0 && obj_equal(buf, w->r.off, w->r.len);
		free(buf);
	}
	pthread_mutex_lock(&fake_remote.lock);
	w->done = true;
	pthread_cond_broadcast(&fake_remote.cond);
	pthread_mutex_unlock(&fake_remote.lock);
	return NULL;
}

static void waiter_start(struct waiter *w, struct bfs_object *o,
			 struct bfs_cache_range r)
{
	*w = (struct waiter){.o = o, .r = r};
	assert_int_equal(pthread_create(&w->t, NULL, waiter_main, w), 0);
}

static bool waiter_done(void *arg)
{
	return ((struct waiter *)arg)->done;
}

/* Wait for w to end (within the liveness bound), joined. */
static void waiter_join(struct waiter *w)
{
	bool done;

	pthread_mutex_lock(&fake_remote.lock);
	done = wait_for(waiter_done, w);
	pthread_mutex_unlock(&fake_remote.lock);
	if (!done)
		fail_msg("a wait did not end within %d s", LIVENESS_S);
	pthread_join(w->t, NULL);
}

static bool pending_or_done(void *arg)
{
	return fake_remote.npending || *(const bool *)arg;
}

/* Answer each request with 'result' as it comes, until *done (a flag of
 * a thread of the test, under fake_remote.lock) and none is queued. */
static void serve_while_not(const bool *done, int result)
{
	for (;;) {
		struct bfs_remote_req *q = NULL;
		bool ok;

		pthread_mutex_lock(&fake_remote.lock);
		ok = wait_for(pending_or_done, (void *)done);
		if (ok && fake_remote.npending)
			q = fake_remote_take(0);
		pthread_mutex_unlock(&fake_remote.lock);
		if (!ok)
			fail_msg("neither a request nor the wait's end within "
				 "%d s",
				 LIVENESS_S);
		if (!q)
			break;
		fake_remote_complete(q, result);
	}
}

/* Answer each request with 'result' as it comes, until w ended; joined. */
static void serve_until(struct waiter *w, int result)
{
	serve_while_not(&w->done, result);
	pthread_join(w->t, NULL);
}

/* ---- claims ---------------------------------------------------------- */

/* Waiters a and b ended, and both read the object's bytes. */
static void both_read_right(struct waiter *a, struct waiter *b)
{
	waiter_join(a);
	waiter_join(b);
	assert_int_equal(a->rc, 0);
	assert_int_equal(b->rc, 0);
	assert_true(a->right);
	assert_true(b->right);
}

static void
two_gathers_of_one_chunk_send_one_request_and_both_read_it(void **state)
{
	struct bfs_objects *os = set_new("claims", (struct set_opts){0});
	struct bfs_object *o = obj_open(os, URL, 8 * CHUNK, "\"v1\"");
	struct bfs_cache_range r = {CHUNK + 10, 100};
	struct waiter a, b;

	assert_int_equal(bfs_object_pin(o, &r, 1), 0);
	assert_int_equal(bfs_object_pin(o, &r, 1), 0);
	/* the second found the chunk claimed by the first's request */
	assert_sent((struct fake_sent[]){{CHUNK, CHUNK}}, 1);
	waiter_start(&a, o, r);
	waiter_start(&b, o, r);
	answer(CHUNK, 0);
	both_read_right(&a, &b);
	assert_int_equal(nsent(), 1);
	bfs_object_unpin(o, &r, 1);
	bfs_object_unpin(o, &r, 1);
	set_end(os);
}

static void
an_overlapping_gather_asks_for_the_rest_and_waits_for_the_first(void **state)
{
	struct bfs_objects *os = set_new("overlap", (struct set_opts){0});
	struct bfs_object *o = obj_open(os, URL, 8 * CHUNK, "\"v1\"");
	struct bfs_cache_range ra = {0, 2 * CHUNK}, rb = {CHUNK, 2 * CHUNK};
	struct bfs_cache_range rest = {2 * CHUNK, CHUNK};
	struct bfs_error err = {{0}};
	struct waiter a, b;

	assert_int_equal(bfs_object_pin(o, &ra, 1), 0);
	assert_int_equal(bfs_object_pin(o, &rb, 1), 0);
	assert_sent((struct fake_sent[]){{0, 2 * CHUNK}, {2 * CHUNK, CHUNK}},
		    2);
	/* b's own chunk lands; its other one is still a's to fetch */
	answer(2 * CHUNK, 0);
	assert_int_equal(
	    bfs_object_wait(o, &rest, 1, liveness_deadline(), NULL), 0);
	assert_int_equal(bfs_object_wait(o, &rb, 1, 0, &err), -ETIMEDOUT);
	assert_non_null(strstr(err.msg, "chunk at byte 4096: its request "
					"still in flight"));
	assert_int_equal(nsent(), 2); /* a wait sends nothing for a claim */
	waiter_start(&a, o, ra);
	waiter_start(&b, o, rb);
	answer(0, 0);
	both_read_right(&a, &b);
	assert_int_equal(nsent(), 2);
	bfs_object_unpin(o, &ra, 1);
	bfs_object_unpin(o, &rb, 1);
	set_end(os);
}

/* ---- runs ------------------------------------------------------------ */

/* Nothing in flight in os: every request's store is over (its writes'
 * own pins of the chunks let go, its in-flight marks lifted), which is
 * after its waiters woke. Bounded polling of that state. */
static void wait_stored(struct bfs_objects *os)
{
	struct bfs_objects_stats st;

	for (int i = 0; i < LIVENESS_S * 1000; i++) {
		bfs_objects_stats(os, &st);
		if (!st.flight_bytes)
			return;
		usleep(1000);
	}
	fail_msg("bytes still in flight after %d s", LIVENESS_S);
}

/* Pin r[0..n) of o (all absent), answer what was sent, wait, unpin; then
 * wait for the stores to be over. */
static void fetch_all(struct bfs_object *o, const struct bfs_cache_range *r,
		      size_t n)
{
	assert_int_equal(bfs_object_pin(o, r, n), 0);
	answer_all(0);
	assert_int_equal(bfs_object_wait(o, r, n, liveness_deadline(), NULL),
			 0);
	for (size_t i = 0; i < n; i++)
		assert_reads_right(o, r[i]);
	bfs_object_unpin(o, r, n);
	wait_stored(o->os);
}

static void close_runs_merge_over_a_small_gap_far_ones_do_not(void **state)
{
	/* merge_gap: two chunks */
	struct bfs_objects *os =
	    set_new("merge", (struct set_opts){.merge_gap = 2 * CHUNK});
	struct bfs_object *o = obj_open(os, URL, 32 * CHUNK, "\"v1\"");
	/* rows not on chunk boundaries: chunks 0, 3 (two absent between:
	 * merged), 7 and 8 (three absent between: not), 10 (one between) */
	const struct bfs_cache_range r[] = {{100, 200},
					    {3 * CHUNK + 10, 5},
					    {7 * CHUNK + 4000, 200},
					    {10 * CHUNK, 1}};

	fetch_all(o, r, 4);
	assert_sent(
	    (struct fake_sent[]){{0, 4 * CHUNK}, {7 * CHUNK, 4 * CHUNK}}, 2);
	set_end(os);
}

static void a_gap_holding_a_present_chunk_is_not_fetched_again(void **state)
{
	struct bfs_objects *os =
	    set_new("merge-present", (struct set_opts){.merge_gap = 2 * CHUNK});
	struct bfs_object *o = obj_open(os, URL, 32 * CHUNK, "\"v1\"");
	const struct bfs_cache_range one = {CHUNK, CHUNK};
	const struct bfs_cache_range r[] = {{0, CHUNK}, {2 * CHUNK, CHUNK}};

	fetch_all(o, &one, 1);
	fetch_all(o, r, 2);
	assert_sent((struct fake_sent[]){{CHUNK, CHUNK},
					 {0, CHUNK},
					 {2 * CHUNK, CHUNK}},
		    3);
	set_end(os);
}

static void a_run_longer_than_request_max_is_cut_into_requests(void **state)
{
	struct bfs_objects *os =
	    set_new("cut", (struct set_opts){.request_max = 4 * CHUNK});
	/* the last chunk short */
	struct bfs_object *o = obj_open(os, URL, 10 * CHUNK + 123, "\"v1\"");
	const struct bfs_cache_range r = {5, 10 * CHUNK + 100};

	fetch_all(o, &r, 1);
	assert_sent((struct fake_sent[]){{0, 4 * CHUNK},
					 {4 * CHUNK, 4 * CHUNK},
					 {8 * CHUNK, 2 * CHUNK + 123}},
		    3);
	set_end(os);
}

/* ---- in flight ------------------------------------------------------- */

/* A thread that pins (a gather) or fetches ahead (the read-ahead) one
 * range: either may wait for room in flight. */
struct fetcher {
	struct bfs_object *o;
	struct bfs_cache_range r;
	bool ahead;
	pthread_t t;
	bool done; /* fake_remote.lock */
	int rc;
};

static void *fetcher_main(void *arg)
{
	struct fetcher *f = arg;

	if (f->ahead)
		bfs_object_ahead(f->o, &f->r, 1, 1);
	else
		f->rc = bfs_object_pin(f->o, &f->r, 1);
	pthread_mutex_lock(&fake_remote.lock);
	f->done = true;
	pthread_cond_broadcast(&fake_remote.cond);
	pthread_mutex_unlock(&fake_remote.lock);
	return NULL;
}

static bool fetcher_done(void *arg)
{
	return ((struct fetcher *)arg)->done;
}

struct full {
	size_t bound, total;
};

/* The bound's worth of requests queued, or every one sent. */
static bool full_or_all_sent(void *arg)
{
	const struct full *f = arg;

	return fake_remote.npending && (fake_remote.npending >= f->bound ||
					fake_remote.nsent >= f->total);
}

/* Fetch all of o through a fetcher ('ahead' or a gather) while the fake
 * answers one request at a time, each only once 'bound' are queued (or
 * all 'total' were sent): the most queued at once is then the bound the
 * set keeps, never more. */
static void fetch_bounded(struct bfs_object *o, bool ahead, size_t bound,
			  size_t total)
{
	struct fetcher f = {
	    .o = o, .r = {0, bfs_object_size(o)}, .ahead = ahead};
	struct full want = {bound, total};

	pthread_mutex_lock(&fake_remote.lock);
	fake_remote.nsent = 0;
	fake_remote.max_pending = 0;
	fake_remote.max_pending_bytes = 0;
	pthread_mutex_unlock(&fake_remote.lock);
	assert_int_equal(pthread_create(&f.t, NULL, fetcher_main, &f), 0);
	for (size_t i = 0; i < total; i++) {
		struct bfs_remote_req *q = NULL;

		pthread_mutex_lock(&fake_remote.lock);
		if (wait_for(full_or_all_sent, &want))
			q = fake_remote_take(0);
		pthread_mutex_unlock(&fake_remote.lock);
		if (!q)
			fail_msg("request %zu of %zu: not %zu queued within "
				 "%d s",
				 i, total, bound, LIVENESS_S);
		fake_remote_complete(q, 0);
	}
	pthread_mutex_lock(&fake_remote.lock);
	if (!wait_for(fetcher_done, &f))
		fail_msg("the fetch did not end within %d s", LIVENESS_S);
	pthread_mutex_unlock(&fake_remote.lock);
	pthread_join(f.t, NULL);
	assert_int_equal(f.rc, 0);
	pthread_mutex_lock(&fake_remote.lock);
	assert_int_equal(fake_remote.nsent, total);
	assert_int_equal(fake_remote.max_pending, bound);
	pthread_mutex_unlock(&fake_remote.lock);
}

static void requests_in_flight_never_pass_the_bound(void **state)
{
	/* requests of 4 chunks, 8 chunks in flight: a gather's 16 */
	struct bfs_objects *os =
	    set_new("flight", (struct set_opts){.request_max = 4 * CHUNK,
						.flight_max = 8 * CHUNK});
	struct bfs_object *g =
	    obj_open(os, URL "?gather", 64 * CHUNK, "\"v1\"");
	struct bfs_object *a = obj_open(os, URL "?ahead", 64 * CHUNK, "\"v1\"");
	const struct bfs_cache_range all = {0, 64 * CHUNK};

	fetch_bounded(g, false, 4, 16); /* twice flight_max */
	assert_int_equal(fake_remote.max_pending_bytes, 16 * CHUNK);
	assert_int_equal(bfs_object_wait(g, &all, 1, liveness_deadline(), NULL),
			 0);
	assert_reads_right(g, all);
	bfs_object_unpin(g, &all, 1);

	fetch_bounded(a, true, 2, 16); /* flight_max */
	assert_int_equal(fake_remote.max_pending_bytes, 8 * CHUNK);
	/* what the read-ahead fetched is there: a gather sends nothing */
	assert_int_equal(bfs_object_pin(a, &all, 1), 0);
	assert_int_equal(bfs_object_wait(a, &all, 1, liveness_deadline(), NULL),
			 0);
	assert_reads_right(a, all);
	bfs_object_unpin(a, &all, 1);
	assert_int_equal(nsent(), 16);
	set_end(os);
}

/* ---- the store thread ------------------------------------------------ */

static void fetched_chunks_are_in_the_cache_for_a_later_set(void **state)
{
	const uint64_t size = 6 * CHUNK + 100;
	const struct bfs_cache_range all = {0, size};
	struct bfs_objects *os = set_new("store", (struct set_opts){0});
	struct bfs_object *o = obj_open(os, URL, size, "\"v1\"");
	struct bfs_objects_stats st;
	struct waiter w;

	assert_int_equal(bfs_object_pin(o, &all, 1), 0);
	waiter_start(&w, o, all);
	serve_until(&w, 0);
	assert_int_equal(w.rc, 0);
	assert_true(w.right);
	bfs_object_unpin(o, &all, 1);
	assert_file_holds(o, all);
	set_end(os);

	/* a set opened later over the directory: no request */
	fake_reset(state);
	os = set_new("store", (struct set_opts){0});
	o = obj_open(os, URL, size, "\"v1\"");
	assert_int_equal(bfs_object_pin(o, &all, 1), 0);
	assert_int_equal(bfs_object_wait(o, &all, 1, liveness_deadline(), NULL),
			 0);
	assert_reads_right(o, all);
	bfs_object_unpin(o, &all, 1);
	assert_int_equal(nsent(), 0);
	bfs_objects_stats(os, &st);
	assert_int_equal(st.present_bytes, 7 * CHUNK); /* whole chunks */
	assert_int_equal(st.miss_chunks, 0);
	set_end(os);

	/* another version of the object is not served those bytes */
	os = set_new("store", (struct set_opts){0});
	o = obj_open(os, URL, size, "\"v2\"");
	assert_int_equal(bfs_object_pin(o, &all, 1), 0);
	assert_int_equal(nsent(), 1);
	waiter_start(&w, o, all);
	serve_until(&w, 0);
	assert_int_equal(w.rc, 0);
	bfs_object_unpin(o, &all, 1);
	set_end(os);
}

static bool store_held(void *arg)
{
	return evict.held;
}

static void
a_chunk_evicted_before_its_mark_came_off_is_fetched_again(void **state)
{
	struct bfs_objects *os = set_new("evicted", (struct set_opts){0});
	struct bfs_object *o = obj_open(os, URL, 4 * CHUNK, "\"v1\"");
	const struct bfs_cache_range r = {CHUNK + 10, 100};
	struct waiter w;
	bool held;

	pthread_mutex_lock(&fake_remote.lock);
	evict.armed = true;
	pthread_mutex_unlock(&fake_remote.lock);
	bfs_object_ahead(o, &r, 1, 1);
	assert_sent((struct fake_sent[]){{CHUNK, CHUNK}}, 1);
	answer(CHUNK, 0);
	/* stored, evicted, its in-flight mark still on */
	pthread_mutex_lock(&fake_remote.lock);
	held = wait_for(store_held, NULL);
	pthread_mutex_unlock(&fake_remote.lock);
	if (!held)
		fail_msg("the store did not write within %d s", LIVENESS_S);
	assert_int_equal(evict.evicted, CHUNK);
	/* a gather pins it now: absent but in flight, it asks for nothing */
	assert_int_equal(bfs_object_pin(o, &r, 1), 0);
	assert_int_equal(nsent(), 1);
	waiter_start(&w, o, r);
	pthread_mutex_lock(&fake_remote.lock);
	evict.let_go = true;
	pthread_cond_broadcast(&fake_remote.cond);
	pthread_mutex_unlock(&fake_remote.lock);
	/* the mark comes off: the waiter fetches it again */
	serve_until(&w, 0);
	assert_int_equal(w.rc, 0);
	assert_true(w.right);
	assert_sent((struct fake_sent[]){{CHUNK, CHUNK}, {CHUNK, CHUNK}}, 2);
	bfs_object_unpin(o, &r, 1);
	set_end(os);
}

/* A thread that keeps ranges of an object (bfs_object_keep waits). */
struct keeper {
	struct bfs_object *o;
	struct bfs_cache_range r[2];
	pthread_t t;
	bool done; /* fake_remote.lock */
	int rc;
	struct bfs_error err;
};

static void *keeper_main(void *arg)
{
	struct keeper *k = arg;

	k->rc = bfs_object_keep(k->o, k->r, 2, &k->err);
	pthread_mutex_lock(&fake_remote.lock);
	k->done = true;
	pthread_cond_broadcast(&fake_remote.cond);
	pthread_mutex_unlock(&fake_remote.lock);
	return NULL;
}

static void kept_structure_is_fetched_in_order_and_never_evicted(void **state)
{
	struct bfs_objects *os =
	    set_new("keep", (struct set_opts){.merge_gap = 2 * CHUNK});
	struct bfs_object *o = obj_open(os, URL, 16 * CHUNK, "\"v1\"");
	/* the end records first, as a parser asks for them */
	struct keeper k = {.o = o, .r = {{5 * CHUNK + 7, 10}, {0, 100}}};
	const struct bfs_cache_range row = {8 * CHUNK, CHUNK};

	assert_int_equal(pthread_create(&k.t, NULL, keeper_main, &k), 0);
	serve_while_not(&k.done, 0);
	pthread_join(k.t, NULL);
	if (k.rc)
		fail_msg("keep: %s", k.err.msg);
	/* in order of offset; four absent chunks between: two requests */
	assert_sent((struct fake_sent[]){{0, CHUNK}, {5 * CHUNK, CHUNK}}, 2);
	assert_reads_right(o, k.r[0]);
	assert_reads_right(o, k.r[1]);
	/* a row fetched, read and let go may be evicted; the kept chunks
	 * stay pinned while the object is open */
	fetch_all(o, &row, 1);
	assert_int_equal(bfs_cache_evict(o->e, 0, 16 * CHUNK), CHUNK);
	assert_true(bfs_cache_present(o->e, 0, CHUNK));
	assert_true(bfs_cache_present(o->e, 5 * CHUNK, CHUNK));
	assert_false(bfs_cache_present(o->e, 8 * CHUNK, CHUNK));
	set_end(os);
}

/* ---- sealing ---------------------------------------------------------- */

/* Sealed only once every byte is there; then every chunk stays pinned (an
 * eviction of the whole object takes nothing) until the object is
 * closed, and a second seal takes no second pin. */
static void an_object_all_in_the_cache_is_sealed_until_closed(void **state)
{
	struct bfs_objects *os = set_new("seal", (struct set_opts){0});
	const uint64_t size = 4 * CHUNK + 100;
	struct bfs_object *o = obj_open(os, URL, size, "\"v1\"");
	const struct bfs_cache_range head = {0, 2 * CHUNK},
				     tail = {2 * CHUNK, 2 * CHUNK + 100};
	struct bfs_cache_entry *e = o->e;

	assert_false(bfs_object_seal(o)); /* nothing there */
	fetch_all(o, &head, 1);
	assert_false(bfs_object_seal(o)); /* half */
	assert_false(bfs_object_sealed(o));
	assert_false(bfs_cache_pinned(e, 0, size));
	fetch_all(o, &tail, 1);
	assert_true(bfs_object_seal(o));
	assert_true(bfs_object_sealed(o));
	assert_true(bfs_object_seal(o)); /* already: nothing more pinned */
	assert_int_equal(bfs_cache_evict(e, 0, size), 0);
	assert_true(bfs_cache_present(e, 0, size));
	assert_reads_right(o, (struct bfs_cache_range){0, size});
	/* a second set over the same directory: the entry still pinned by
	 * the first; once that is gone, its chunks may go */
	{
		struct bfs_objects *os2 = set_new("seal", (struct set_opts){0});
		struct bfs_object *o2 = obj_open(os2, URL, size, "\"v1\"");

		assert_true(bfs_cache_pinned(o2->e, 0, size));
		set_end(os);
		assert_false(bfs_cache_pinned(o2->e, 0, size));
		assert_int_equal(bfs_cache_evict(o2->e, 0, size),
				 (int64_t)size);
		set_end(os2);
	}
}

/* An object bigger than half the bound is never sealed, all there or
 * not: its chunks stay evictable. */
static void an_object_over_half_the_bound_is_never_sealed(void **state)
{
	const uint64_t size = 6 * CHUNK;
	struct bfs_objects *os = set_new(
	    "seal-bound", (struct set_opts){.cache_bytes = 2 * size - CHUNK});
	struct bfs_object *o = obj_open(os, URL, size, "\"v1\"");
	const struct bfs_cache_range all = {0, size};

	fetch_all(o, &all, 1);
	assert_true(bfs_cache_present(o->e, 0, size));
	assert_false(bfs_object_seal(o));
	assert_false(bfs_object_sealed(o));
	assert_false(bfs_cache_pinned(o->e, 0, size));
	assert_int_equal(bfs_cache_evict(o->e, 0, size), (int64_t)size);
	set_end(os);
}

/* ---- failures -------------------------------------------------------- */

static void
a_failed_request_is_fetched_once_more_then_fails_its_waiters(void **state)
{
	struct bfs_objects *os = set_new("fail", (struct set_opts){0});
	struct bfs_object *o = obj_open(os, URL, 4 * CHUNK, "\"v1\"");
	const struct bfs_cache_range r = {CHUNK, 2 * CHUNK};
	struct waiter a, b;
	size_t n;

	assert_int_equal(bfs_object_pin(o, &r, 1), 0);
	assert_int_equal(bfs_object_pin(o, &r, 1), 0);
	waiter_start(&a, o, r);
	waiter_start(&b, o, r);
	answer(CHUNK, -EIO);
	serve_until(&a, -EIO);
	serve_until(&b, -EIO);
	assert_int_equal(a.rc, -EIO);
	assert_int_equal(b.rc, -EIO);
	assert_non_null(strstr(a.err.msg, "the fake transport fails them"));
	assert_non_null(strstr(b.err.msg, "the fake transport fails them"));
	/* once more per waiter at most: the second may find the first's
	 * fetch again in flight */
	n = nsent();
	assert_true(n >= 2 && n <= 3);
	bfs_object_unpin(o, &r, 1);
	bfs_object_unpin(o, &r, 1);

	/* a later read fetches again */
	assert_int_equal(bfs_object_pin(o, &r, 1), 0);
	assert_int_equal(nsent(), n + 1);
	waiter_start(&a, o, r);
	serve_until(&a, 0);
	assert_int_equal(a.rc, 0);
	assert_true(a.right);
	bfs_object_unpin(o, &r, 1);
	set_end(os);
}

static void
a_wait_after_one_failure_gets_the_bytes_of_the_second_fetch(void **state)
{
	struct bfs_objects *os = set_new("fail-once", (struct set_opts){0});
	struct bfs_object *o = obj_open(os, URL, 4 * CHUNK, "\"v1\"");
	const struct bfs_cache_range r = {CHUNK + 1, CHUNK};
	struct waiter w;

	assert_int_equal(bfs_object_pin(o, &r, 1), 0);
	waiter_start(&w, o, r);
	answer(CHUNK, -ETIMEDOUT);
	serve_until(&w, 0);
	assert_int_equal(w.rc, 0);
	assert_true(w.right);
	assert_sent(
	    (struct fake_sent[]){{CHUNK, 2 * CHUNK}, {CHUNK, 2 * CHUNK}}, 2);
	bfs_object_unpin(o, &r, 1);
	set_end(os);
}

/* A wait for bytes [0, len) of an object in cache directory 'name',
 * every request answered with 'result': the wait's error is 'want', after
 * 'requests' requests. */
static void answered_with(const char *name, uint64_t len, int result, int want,
			  size_t requests)
{
	struct bfs_objects *os = set_new(name, (struct set_opts){0});
	struct bfs_object *o = obj_open(os, URL, 4 * CHUNK, "\"v1\"");
	const struct bfs_cache_range r = {0, len};
	struct waiter w;

	assert_int_equal(bfs_object_pin(o, &r, 1), 0);
	waiter_start(&w, o, r);
	serve_until(&w, result);
	assert_int_equal(w.rc, want);
	assert_int_equal(nsent(), requests);
	bfs_object_unpin(o, &r, 1);
	set_end(os);
}

static void a_replaced_object_is_not_fetched_again(void **state)
{
	answered_with("stale", CHUNK, -ESTALE, -ESTALE, 1);
}

/* Stored as EAGAIN, the wait would fetch again until its deadline. */
static void eagain_from_the_transport_is_stored_as_eio(void **state)
{
	answered_with("eagain", CHUNK, -EAGAIN, -EIO, 2);
}

/* The transport's ENOSPC is its failure, not the cache's want of room:
 * the request's buffer (never filled) is not stored chunk by chunk. It
 * is fetched once more, as failures are. */
static void a_request_failed_for_want_of_room_stores_nothing(void **state)
{
	answered_with("enospc", 2 * CHUNK, -ENOSPC, -ENOSPC, 2);
}

static void a_request_the_transport_refuses_fails_its_waiters(void **state)
{
	struct bfs_objects *os = set_new("refused", (struct set_opts){0});
	struct bfs_object *o = obj_open(os, URL, 4 * CHUNK, "\"v1\"");
	const struct bfs_cache_range r = {0, CHUNK};
	struct bfs_error err = {{0}};

	pthread_mutex_lock(&fake_remote.lock);
	fake_remote.refuse = -ENOMEM;
	pthread_mutex_unlock(&fake_remote.lock);
	assert_int_equal(bfs_object_pin(o, &r, 1), 0);
	assert_int_equal(bfs_object_wait(o, &r, 1, liveness_deadline(), &err),
			 -ENOMEM);
	assert_non_null(strstr(err.msg, "cannot request bytes 0-4095"));
	assert_int_equal(nsent(), 2); /* tried once more */
	pthread_mutex_lock(&fake_remote.lock);
	fake_remote.refuse = 0;
	pthread_mutex_unlock(&fake_remote.lock);
	bfs_object_unpin(o, &r, 1);

	/* once the transport takes requests again, a read gets its bytes */
	fetch_all(o, &r, 1);
	assert_int_equal(nsent(), 3);
	set_end(os);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup(
		two_gathers_of_one_chunk_send_one_request_and_both_read_it,
		fake_reset),
	    cmocka_unit_test_setup(
		an_overlapping_gather_asks_for_the_rest_and_waits_for_the_first,
		fake_reset),
	    cmocka_unit_test_setup(
		close_runs_merge_over_a_small_gap_far_ones_do_not, fake_reset),
	    cmocka_unit_test_setup(
		a_gap_holding_a_present_chunk_is_not_fetched_again, fake_reset),
	    cmocka_unit_test_setup(
		a_run_longer_than_request_max_is_cut_into_requests, fake_reset),
	    cmocka_unit_test_setup(requests_in_flight_never_pass_the_bound,
				   fake_reset),
	    cmocka_unit_test_setup(
		fetched_chunks_are_in_the_cache_for_a_later_set, fake_reset),
	    cmocka_unit_test_setup(
		a_chunk_evicted_before_its_mark_came_off_is_fetched_again,
		fake_reset),
	    cmocka_unit_test_setup(
		kept_structure_is_fetched_in_order_and_never_evicted,
		fake_reset),
	    cmocka_unit_test_setup(
		an_object_all_in_the_cache_is_sealed_until_closed, fake_reset),
	    cmocka_unit_test_setup(
		an_object_over_half_the_bound_is_never_sealed, fake_reset),
	    cmocka_unit_test_setup(
		a_failed_request_is_fetched_once_more_then_fails_its_waiters,
		fake_reset),
	    cmocka_unit_test_setup(
		a_wait_after_one_failure_gets_the_bytes_of_the_second_fetch,
		fake_reset),
	    cmocka_unit_test_setup(a_replaced_object_is_not_fetched_again,
				   fake_reset),
	    cmocka_unit_test_setup(eagain_from_the_transport_is_stored_as_eio,
				   fake_reset),
	    cmocka_unit_test_setup(
		a_request_failed_for_want_of_room_stores_nothing, fake_reset),
	    cmocka_unit_test_setup(
		a_request_the_transport_refuses_fails_its_waiters, fake_reset),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
