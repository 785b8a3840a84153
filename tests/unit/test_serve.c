/* fs/serve against a fake kernel (the callbacks a FUSE adapter passes in):
 * a file lives until its last reply is done, even when released first;
 * push keeps the page cache under its budget and never drops a batch that
 * is open; no request handler ever calls store or inval, and a store
 * that waits for a READ of its batch (as the kernel's does for a locked
 * page) never holds up the open nor the READ; zero-copy slices are exactly the
 * batch's bytes, rows straight from the archive mapping; opens of one batch
 * share one backing id, gone at the last release; a backing file that cannot be
 * registered fails the open with EIO, saying why; an O_DIRECT open is served
 * with direct I/O in every mode (no backing file, no push), except of a batch
 * open through passthrough, and fails with EINVAL where refused; streams
 * register no backing file, and a READ over more batches than a reply holds
 * is whole. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "fs/serve.h"
#include "tests/lib/fixture.h"

enum { N = 40, ROW = 8192, B = 8, EPOCHS = 4, MAXPOS = EPOCHS * (N / B) };

static struct {
	struct tf_fixture tf; /* the archive, open */
	const uint8_t *map;   /* the archive's mapping */
	uint64_t map_size;
} fx;

/* What the fake kernel was asked. */
static struct {
	pthread_mutex_t lock;
	int next_id, fail_backing;
	int backing_opens, backing_closes, live_ids;
	uint64_t stored[MAXPOS]; /* bytes stored per position */
	int invals[MAXPOS];
	int wrong_bytes;    /* stores or backing files unlike the batch */
	pthread_t handler;  /* the test's thread: a FUSE request's */
	int handler_calls;  /* stores and invals made on it */
	bool store_waits;   /* a store waits for 'answered' (a READ) */
	bool answered;	    /* a READ of the batch was answered */
	bool store_gave_up; /* ... not within the fake's bound */
	pthread_cond_t cond;
} kern = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

/* The fake kernel's bound on a store waiting for a READ: far beyond the
 * open's own bounded wait, so only a store made on the READ's own thread
 * (which can then never answer it) reaches it. */
#define STORE_WAIT_S 10

/* Batch k of epoch e (of lane 0). */
#define ID(e, k) ((struct bfs_batch_id){.epoch = (e), .batch = (k)})

/* The bytes of batch id, as the layout writes them; *size. */
static uint8_t *expected_id(struct bfs_batch_id id, uint64_t *size)
{
	uint64_t idx[B];
	struct bfs_batch_loc at;
	uint8_t *buf;

	assert_int_equal(bfs_order_locate(fx.tf.order, id, &at), 0);
	assert_int_equal(bfs_order_batch(fx.tf.order, id, idx), 0);
	assert_int_equal(
	    bfs_layout_file_size(&fx.tf.layout, fx.tf.order, &at, size), 0);
	buf = malloc(*size);
	assert_int_equal(bfs_layout_fill(&fx.tf.layout, fx.tf.ds, id, idx,
					 at.rows, *size, buf),
			 0);
	return buf;
}

static uint8_t *expected(uint64_t e, uint64_t k, uint64_t *size)
{
	return expected_id(ID(e, k), size);
}

static uint64_t pos(uint64_t e, uint64_t k)
{
	return bfs_order_pos(fx.tf.order, ID(e, k));
}

static int k_store(void *arg, struct bfs_batch_id id, uint64_t off,
		   const void *buf, uint64_t len)
{
	uint64_t size;
	uint8_t *want = expected_id(id, &size);

	pthread_mutex_lock(&kern.lock);
	kern.handler_calls += pthread_equal(pthread_self(), kern.handler);
	if (kern.store_waits) { /* a page locked by a READ in flight */
		struct timespec until;

		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += STORE_WAIT_S;
		while (!kern.answered &&
		       pthread_cond_timedwait(&kern.cond, &kern.lock, &until) ==
			   0)
			;
		kern.store_gave_up |= !kern.answered;
	}
	kern.stored[bfs_order_pos(fx.tf.order, id)] += len;
	kern.wrong_bytes += off + len > size || memcmp(want + off, buf, len);
	pthread_mutex_unlock(&kern.lock);
	free(want);
	return 0;
}

static int k_inval(void *arg, struct bfs_batch_id id)
{
	pthread_mutex_lock(&kern.lock);
	kern.handler_calls += pthread_equal(pthread_self(), kern.handler);
	kern.invals[bfs_order_pos(fx.tf.order, id)]++;
	pthread_mutex_unlock(&kern.lock);
	return 0;
}

static int k_backing_open(void *arg, int fd)
{
	int id;

	pthread_mutex_lock(&kern.lock);
	if (kern.fail_backing) {
		pthread_mutex_unlock(&kern.lock);
		return kern.fail_backing;
	}
	id = ++kern.next_id;
	kern.backing_opens++;
	kern.live_ids++;
	pthread_mutex_unlock(&kern.lock);
	return id;
}

static void k_backing_close(void *arg, int id)
{
	pthread_mutex_lock(&kern.lock);
	kern.backing_closes++;
	kern.live_ids--;
	pthread_mutex_unlock(&kern.lock);
}

/* Stores and invals made on the test's thread, a request handler's. */
static int handler_calls(void)
{
	int n;

	pthread_mutex_lock(&kern.lock);
	n = kern.handler_calls;
	pthread_mutex_unlock(&kern.lock);
	return n;
}

static const struct bfs_serve_kernel fake = {
    .store = k_store,
    .inval = k_inval,
    .backing_open = k_backing_open,
    .backing_close = k_backing_close,
};

static void fill_rows(void *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		((uint8_t *)x)[i] = (uint8_t)(i * 31 + i / ROW);
}

static void fill_labels(void *y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		((int64_t *)y)[i] = 1000 + (int64_t)i;
}

/* "serve.pt": x uint8 [N, ROW], y int64 [N], shuffled (seed 3) into
 * batches of B. */
static int setup(void **state)
{
	const struct tf_field fields[] = {
	    {"x", BFS_DT_UINT8, 2, {N, ROW}, .fill = fill_rows},
	    {"y", BFS_DT_INT64, 1, {N}, .fill = fill_labels},
	};
	const struct tf_spec spec = {.name = "serve.pt",
				     .fields = fields,
				     .nfields = 2,
				     .order = {.sampler = BFS_SAMPLER_RANDOM,
					       .n = N,
					       .batch_size = B,
					       .seed = 3,
					       .compat = BFS_TORCH_1_13,
					       .epochs = EPOCHS}};
	struct bfs_shard_info si;
	int rc = tf_setup(&fx.tf, &spec);

	if (rc)
		return rc;
	bfs_dataset_shard(fx.tf.ds, 0, &si);
	fx.map = si.source->files[0].map;
	fx.map_size = si.source->files[0].size;
	return 0;
}

static int teardown(void **state)
{
	return tf_teardown(&fx.tf);
}

/* A serve of the fixture with options so, the fake kernel reset. */
static struct bfs_serve *serve_with(const struct bfs_serve_opts *so)
{
	const struct bfs_pool_opts po = {.workers = 2,
					 .prefetch = 0,
					 .budget_bytes = 64 << 20,
					 .timeout_ms = 30000};
	struct bfs_serve *s;

	pthread_mutex_lock(&kern.lock);
	memset(kern.stored, 0, sizeof(kern.stored));
	memset(kern.invals, 0, sizeof(kern.invals));
	kern.next_id = kern.backing_opens = kern.backing_closes = 0;
	kern.live_ids = kern.wrong_bytes = kern.fail_backing = 0;
	kern.handler = pthread_self();
	kern.handler_calls = 0;
	kern.store_waits = kern.answered = kern.store_gave_up = false;
	pthread_mutex_unlock(&kern.lock);
	assert_int_equal(bfs_serve_create(&s, fx.tf.ds, fx.tf.order,
					  &fx.tf.layout, &po, so, &fake),
			 0);
	return s;
}

static struct bfs_serve *serve(enum bfs_serve_mode mode, uint64_t pc_bytes,
			       unsigned max_iov)
{
	const struct bfs_serve_opts so = {.mode = mode,
					  .page_cache_bytes = pc_bytes,
					  .zero_copy = true,
					  .zc_max_iov = max_iov};

	return serve_with(&so);
}

/* The whole file f of 'size' bytes through READs of 'chunk' bytes,
 * compared with 'want'; counts slices that point into the archive. */
static void read_whole(struct bfs_serve *s, struct bfs_file *f,
		       const uint8_t *want, uint64_t size, uint64_t chunk,
		       unsigned *from_archive)
{
	for (uint64_t off = 0; off <= size; off += chunk) {
		struct bfs_serve_reply r;
		uint64_t at = off;

		assert_int_equal(bfs_serve_read(s, f, off, chunk, &r), 0);
		for (int i = 0; i < r.iovcnt; i++) {
			const uint8_t *p = r.iov[i].iov_base;

			assert_true(at + r.iov[i].iov_len <= size);
			assert_memory_equal(p, want + at, r.iov[i].iov_len);
			if (from_archive && p >= fx.map &&
			    p < fx.map + fx.map_size)
				(*from_archive)++;
			at += r.iov[i].iov_len;
		}
		assert_int_equal(
		    at, off < size ? (off + chunk < size ? off + chunk : size)
				   : size);
		bfs_serve_done(s, &r);
	}
}

/* The kernel may send RELEASE as soon as the last reply is written,
 * before the replying thread calls done: the reply's bytes stay valid
 * until then, for a text and for a batch (ASan checks the rest). */
static void a_file_lives_until_its_last_reply_is_done(void **state)
{
	struct bfs_serve *s = serve(BFS_SERVE_CACHE, 0, 0);
	struct bfs_serve_how how;
	struct bfs_serve_reply r;
	struct bfs_file *f;
	uint64_t size;
	uint8_t *want = expected(1, 2, &size);

	assert_int_equal(bfs_serve_open_text(s, strdup("hello, stats\n"), 13,
					     true, &f, &how),
			 0);
	assert_true(how.direct_io && !how.keep_cache);
	assert_int_equal(bfs_serve_read(s, f, 7, 100, &r), 0);
	bfs_serve_release(s, f);
	assert_int_equal(r.iovcnt, 1);
	assert_memory_equal(r.iov[0].iov_base, "stats\n", 6);
	bfs_serve_done(s, &r);

	assert_int_equal(bfs_serve_open_batch(s, ID(1, 2), 0, &f, &how), 0);
	assert_int_equal(bfs_serve_read(s, f, 4096, 1 << 20, &r), 0);
	bfs_serve_release(s, f);
	assert_memory_equal(r.iov[0].iov_base, want + 4096, size - 4096);
	bfs_serve_done(s, &r);
	assert_int_equal(bfs_serve_open_batch(s, ID(EPOCHS, 0), 0, &f, &how),
			 -ENOENT);
	assert_int_equal(bfs_serve_open_batch(s, ID(0, N / B), 0, &f, &how),
			 -ENOENT);
	bfs_serve_destroy(s);
	free(want);
}

/* Push: each open stores its batch whole (the right bytes); a second
 * open of a batch still in the ledger stores nothing; past the budget the
 * oldest closed batches are dropped, never one that is open. */
static void push_keeps_the_page_cache_under_its_budget(void **state)
{
	uint64_t size;
	uint8_t *want = expected(0, 0, &size);
	struct bfs_serve *s = serve(BFS_SERVE_PUSH, 2 * size + size / 2, 0);
	struct bfs_serve_how how;
	struct bfs_file *held, *f;
	struct bfs_stats st;

	assert_int_equal(bfs_serve_open_batch(s, ID(0, 0), 0, &held, &how), 0);
	assert_true(how.keep_cache);
	for (uint64_t k = 1; k < N / B; k++) {
		assert_int_equal(bfs_serve_open_batch(s, ID(0, k), 0, &f, &how),
				 0);
		bfs_serve_release(s, f);
	}
	assert_int_equal(bfs_serve_open_batch(s, ID(0, 4), 0, &f, &how), 0);
	bfs_serve_release(s, f); /* in the page cache still: not again */
	bfs_serve_settle(s);
	assert_int_equal(handler_calls(), 0);
	pthread_mutex_lock(&kern.lock);
	for (uint64_t k = 0; k < N / B; k++)
		assert_int_equal(kern.stored[pos(0, k)], size);
	assert_int_equal(kern.wrong_bytes, 0);
	/* a budget of 2.5 batches with batch 0 open: each push past it
	 * drops the oldest closed batch, 1, 2 and 3; 4 stays */
	assert_int_equal(kern.invals[pos(0, 0)], 0);
	assert_int_equal(kern.invals[pos(0, 1)], 1);
	assert_int_equal(kern.invals[pos(0, 2)], 1);
	assert_int_equal(kern.invals[pos(0, 3)], 1);
	assert_int_equal(kern.invals[pos(0, 4)], 0);
	pthread_mutex_unlock(&kern.lock);
	bfs_serve_stats(s, &st);
	assert_int_equal(st.batches_pushed, N / B);
	assert_int_equal(st.page_cache_drops, 3);
	bfs_serve_release(s, held);
	bfs_serve_destroy(s);
	free(want);
}

/* Push: the kernel's store of a batch waits for a page that a READ of
 * that batch holds (another file of it, opened when its push had not
 * begun, is being read). The open, on a request thread, must neither
 * make the store itself nor wait for it without a bound, and the READ
 * must be answered on that same thread: with a single request thread
 * (the worst case of all of them busy), anything else never ends. */
static void a_store_waiting_for_a_read_holds_no_request(void **state)
{
	uint64_t size;
	uint8_t *want = expected(1, 3, &size);
	struct bfs_serve *s = serve(BFS_SERVE_PUSH, 64 << 20, 0);
	struct bfs_serve_how how;
	struct bfs_serve_reply r;
	struct bfs_file *f;
	uint64_t stored;
	bool gave_up;
	int wrong;

	pthread_mutex_lock(&kern.lock);
	kern.store_waits = true;
	pthread_mutex_unlock(&kern.lock);
	assert_int_equal(bfs_serve_open_batch(s, ID(1, 3), 0, &f, &how), 0);
	assert_int_equal(bfs_serve_read(s, f, 0, size, &r), 0);
	assert_int_equal(r.iovcnt, 1);
	assert_memory_equal(r.iov[0].iov_base, want, size);
	bfs_serve_done(s, &r);
	pthread_mutex_lock(&kern.lock); /* the READ is answered */
	kern.answered = true;
	pthread_cond_broadcast(&kern.cond);
	pthread_mutex_unlock(&kern.lock);
	bfs_serve_release(s, f);
	bfs_serve_settle(s);
	pthread_mutex_lock(&kern.lock);
	gave_up = kern.store_gave_up;
	stored = kern.stored[pos(1, 3)];
	wrong = kern.wrong_bytes;
	pthread_mutex_unlock(&kern.lock);
	assert_false(gave_up);
	assert_int_equal(handler_calls(), 0);
	assert_int_equal(stored, size);
	assert_int_equal(wrong, 0);
	bfs_serve_destroy(s);
	free(want);
}

/* Direct mode, rows of 8 KiB stored as served: READs are answered with
 * slices whose bytes are the batch's, rows straight from the archive's
 * mapping; with fewer slices allowed per READ than a READ needs, the
 * pool's gathered buffer answers, the same bytes. */
static void zero_copy_slices_are_the_batch_bytes(void **state)
{
	uint64_t size;
	uint8_t *want = expected(2, 3, &size);
	struct bfs_serve_how how;
	struct bfs_file *f;
	struct bfs_stats st;
	unsigned from_archive = 0;

	for (unsigned max_iov = 0; max_iov <= 2; max_iov += 2) {
		struct bfs_serve *s = serve(BFS_SERVE_DIRECT, 0, max_iov);

		assert_int_equal(bfs_serve_open_batch(s, ID(2, 3), 0, &f, &how),
				 0);
		assert_true(how.direct_io);
		read_whole(s, f, want, size, 1 << 20, &from_archive);
		read_whole(s, f, want, size, 5000, NULL);
		bfs_serve_release(s, f);
		bfs_serve_stats(s, &st);
		if (max_iov == 0) {
			assert_true(from_archive >= B);
			assert_int_equal(st.pool.batches_materialized, 0);
		} else {
			assert_true(st.pool.batches_materialized >= 1);
		}
		bfs_serve_destroy(s);
	}
	free(want);
}

/* Passthrough: concurrent opens of one batch reply with one backing id
 * (the kernel requires it), registered once and closed once, at the
 * last release; the next open registers the batch again. */
static void opens_of_one_batch_share_one_backing_id(void **state)
{
	struct bfs_serve *s = serve(BFS_SERVE_PASSTHROUGH, 0, 0);
	struct bfs_serve_how h1, h2, h3;
	struct bfs_file *a, *b, *c;

	assert_int_equal(bfs_serve_open_batch(s, ID(3, 1), 0, &a, &h1), 0);
	assert_int_equal(bfs_serve_open_batch(s, ID(3, 1), 0, &b, &h2), 0);
	assert_true(h1.backing_id > 0 && h1.backing_id == h2.backing_id);
	assert_false(h1.keep_cache); /* not allowed beside passthrough */
	bfs_serve_release(s, a);
	pthread_mutex_lock(&kern.lock);
	assert_int_equal(kern.backing_opens, 1);
	assert_int_equal(kern.backing_closes, 0);
	pthread_mutex_unlock(&kern.lock);
	bfs_serve_release(s, b);
	pthread_mutex_lock(&kern.lock);
	assert_int_equal(kern.backing_closes, 1);
	pthread_mutex_unlock(&kern.lock);
	assert_int_equal(bfs_serve_open_batch(s, ID(3, 1), 0, &c, &h3), 0);
	assert_true(h3.backing_id > 0 && h3.backing_id != h1.backing_id);
	bfs_serve_release(s, c);
	bfs_serve_destroy(s);
	assert_int_equal(kern.live_ids, 0);
}

/* A backing file that cannot be registered: the open fails with EIO, the
 * stats' last error says why, and nothing stays registered. */
static void a_failed_backing_open_fails_the_open_with_eio(void **state)
{
	struct bfs_serve *s = serve(BFS_SERVE_PASSTHROUGH, 0, 0);
	struct bfs_serve_how how;
	struct bfs_file *f = NULL;
	struct bfs_stats st;

	pthread_mutex_lock(&kern.lock);
	kern.fail_backing = -EPERM;
	pthread_mutex_unlock(&kern.lock);
	assert_int_equal(bfs_serve_open_batch(s, ID(0, 2), 0, &f, &how), -EIO);
	assert_null(f);
	bfs_serve_stats(s, &st);
	assert_non_null(strstr(st.pool.last_error.msg, "no backing file"));
	assert_int_equal(st.pool.last_error.batch, 2);
	bfs_serve_destroy(s);
	assert_int_equal(kern.live_ids, 0);
}

/* ---- opens with O_DIRECT ------------------------------------------------ */

static const enum bfs_serve_mode every_mode[] = {
    BFS_SERVE_PASSTHROUGH, BFS_SERVE_PUSH, BFS_SERVE_CACHE, BFS_SERVE_DIRECT};

/* An O_DIRECT open of a batch file is served as direct mode serves it in
 * every mode: direct I/O, no backing file registered, nothing pushed, the
 * rows straight from the archive (the fixture's rows allow zero copy),
 * the batch's bytes; counted in direct_opens. A plain open of the same
 * mount is served by its mode. */
static void
an_o_direct_open_is_served_with_direct_io_in_every_mode(void **state)
{
	uint64_t size;
	uint8_t *want = expected(1, 3, &size);

	for (size_t i = 0; i < sizeof(every_mode) / sizeof(every_mode[0]);
	     i++) {
		struct bfs_serve *s = serve(every_mode[i], 64 << 20, 0);
		struct bfs_serve_how how;
		struct bfs_file *f;
		struct bfs_stats st;
		unsigned from_archive = 0;

		assert_int_equal(bfs_serve_open_batch(s, ID(1, 3),
						      O_RDONLY | O_DIRECT, &f,
						      &how),
				 0);
		assert_true(how.direct_io);
		assert_false(how.keep_cache);
		assert_int_equal(how.backing_id, 0);
		read_whole(s, f, want, size, 1 << 20, &from_archive);
		assert_true(from_archive >= B);
		bfs_serve_release(s, f);
		bfs_serve_settle(s);
		bfs_serve_stats(s, &st);
		assert_int_equal(st.direct_opens, 1);
		assert_int_equal(st.batches_pushed, 0);
		assert_int_equal(kern.stored[pos(1, 3)], 0);
		assert_int_equal(kern.backing_opens, 0);
		/* a plain open: the mode's */
		assert_int_equal(
		    bfs_serve_open_batch(s, ID(1, 3), O_RDONLY, &f, &how), 0);
		assert_int_equal(how.backing_id > 0,
				 every_mode[i] == BFS_SERVE_PASSTHROUGH);
		assert_int_equal(how.direct_io,
				 every_mode[i] == BFS_SERVE_DIRECT);
		bfs_serve_release(s, f);
		bfs_serve_stats(s, &st);
		assert_int_equal(st.direct_opens, 1);
		bfs_serve_destroy(s);
		assert_int_equal(kern.live_ids, 0);
	}
	free(want);
}

/* Passthrough: while a batch has a file open with its backing file, an
 * O_DIRECT open of it gets that backing file too (the kernel refuses any
 * other open of the inode), and reads nothing through the serve; once
 * released, O_DIRECT opens are direct again. Other batches are not
 * concerned. */
static void
an_o_direct_open_of_a_batch_held_by_passthrough_is_passthrough(void **state)
{
	struct bfs_serve *s = serve(BFS_SERVE_PASSTHROUGH, 0, 0);
	struct bfs_serve_how h1, h2, h3, h4;
	struct bfs_file *a, *b, *c, *d;
	struct bfs_stats st;

	assert_int_equal(bfs_serve_open_batch(s, ID(2, 1), O_RDONLY, &a, &h1),
			 0);
	assert_true(h1.backing_id > 0);
	assert_int_equal(
	    bfs_serve_open_batch(s, ID(2, 1), O_RDONLY | O_DIRECT, &b, &h2), 0);
	assert_int_equal(h2.backing_id, h1.backing_id);
	assert_int_equal(
	    bfs_serve_open_batch(s, ID(2, 2), O_RDONLY | O_DIRECT, &c, &h3), 0);
	assert_int_equal(h3.backing_id, 0);
	assert_true(h3.direct_io);
	bfs_serve_stats(s, &st);
	assert_int_equal(st.direct_opens, 1);
	bfs_serve_release(s, a);
	bfs_serve_release(s, b);
	bfs_serve_release(s, c);
	assert_int_equal(
	    bfs_serve_open_batch(s, ID(2, 1), O_RDONLY | O_DIRECT, &d, &h4), 0);
	assert_int_equal(h4.backing_id, 0);
	assert_true(h4.direct_io);
	bfs_serve_release(s, d);
	bfs_serve_destroy(s);
	assert_int_equal(kern.live_ids, 0);
}

/* no_direct_open (BATCHFS_DEBUG_NO_DIRECT_OPEN): O_DIRECT opens of batch
 * files fail with EINVAL, as on a file system without direct I/O; plain
 * opens, and streams, are served as ever. */
static void o_direct_opens_refused_fail_with_einval(void **state)
{
	const struct bfs_serve_opts so = {.mode = BFS_SERVE_PASSTHROUGH,
					  .zero_copy = true,
					  .no_direct_open = true};
	struct bfs_serve *s = serve_with(&so);
	struct bfs_serve_how how;
	struct bfs_file *f = NULL;
	struct bfs_stats st;

	assert_int_equal(
	    bfs_serve_open_batch(s, ID(0, 1), O_RDONLY | O_DIRECT, &f, &how),
	    -EINVAL);
	assert_null(f);
	assert_int_equal(bfs_serve_open_batch(s, ID(0, 1), O_RDONLY, &f, &how),
			 0);
	assert_true(how.backing_id > 0);
	bfs_serve_release(s, f);
	assert_int_equal(bfs_serve_open_stream(s, ID(0, 0), &f, &how), 0);
	bfs_serve_release(s, f);
	bfs_serve_stats(s, &st);
	assert_int_equal(st.direct_opens, 0);
	assert_int_equal(st.batches_opened, 1);
	bfs_serve_destroy(s);
}

/* ---- streams and their offsets ----------------------------------------- */

/* A dataset, an order and a layout to serve: the fixture's (fixed fields),
 * or one made here (a tests/lib/fixture of its own, torn down after). */

#define RN   50	 /* ragged mount: samples */
#define RB   6	 /* ... batch size: 9 batches, the last of 2 */
#define RROW 512 /* ... int16 elements per row of t (1 KiB) */

/* "serve_ragged.pt": t.values int16 [total, RROW] (0 .. 63 rows per
 * sample, so an epoch's stream is over 1 MiB), t.offsets, label int64,
 * shuffled (seed 5) into batches of RB, t padded. */
static void ragged_mount(struct tf_fixture *m)
{
	int64_t offs[RN + 1] = {0}, label[RN];
	uint32_t x = 99;
	int16_t *vals;
	int rc;

	for (int i = 0; i < RN; i++) {
		x = x * 1103515245u + 12345u;
		offs[i + 1] = offs[i] + (x >> 16) % 64;
		label[i] = 7 * i;
	}
	vals = malloc((size_t)offs[RN] * RROW * sizeof(*vals));
	assert_non_null(vals);
	for (int64_t i = 0; i < offs[RN] * RROW; i++)
		vals[i] = (int16_t)(i * 13);
	{
		const struct tf_field fields[] = {
		    {"t.values",
		     BFS_DT_INT16,
		     2,
		     {offs[RN], RROW},
		     .data = vals},
		    {"t.offsets", BFS_DT_INT64, 1, {RN + 1}, .data = offs},
		    {"label", BFS_DT_INT64, 1, {RN}, .data = label},
		};
		const struct tf_spec spec = {
		    .name = "serve_ragged.pt",
		    .fields = fields,
		    .nfields = 3,
		    .order = {.sampler = BFS_SAMPLER_RANDOM,
			      .n = RN,
			      .batch_size = RB,
			      .seed = 5,
			      .compat = BFS_TORCH_1_13,
			      .epochs = EPOCHS}};

		rc = tf_setup(m, &spec);
	}
	free(vals);
	if (rc)
		fail_msg("ragged mount: %s", m->err.msg);
}

/* A serve of m in 'mode' over the fake kernel, with no prefetch. */
static struct bfs_serve *serve_mount(struct tf_fixture *m,
				     enum bfs_serve_mode mode)
{
	const struct bfs_pool_opts po = {.workers = 2,
					 .prefetch = 0,
					 .budget_bytes = 64 << 20,
					 .timeout_ms = 30000};
	const struct bfs_serve_opts so = {.mode = mode, .zero_copy = true};
	struct bfs_serve *s;

	pthread_mutex_lock(&kern.lock);
	kern.fail_backing = 0;
	kern.handler = pthread_self();
	kern.store_waits = false;
	pthread_mutex_unlock(&kern.lock);
	assert_int_equal(
	    bfs_serve_create(&s, m->ds, m->order, &m->layout, &po, &so, &fake),
	    0);
	return s;
}

/* Epoch e of m as its batch files back to back, each written by the
 * layout on its own (malloc'd); *size, and where batch k starts in
 * starts[0 .. len] (starts[len] = *size). */
static uint8_t *stream_of(struct tf_fixture *m, uint64_t e, uint64_t *starts,
			  uint64_t *size)
{
	uint64_t len = bfs_order_len(m->order), at = 0;
	uint8_t *all = NULL;

	for (uint64_t k = 0; k < len; k++) {
		uint64_t rows = bfs_order_batch_rows(m->order, k), idx[64], bs;
		struct bfs_batch_loc loc;

		assert_true(rows <= 64);
		assert_int_equal(bfs_order_locate(m->order, ID(e, k), &loc), 0);
		assert_int_equal(bfs_order_batch(m->order, ID(e, k), idx), 0);
		assert_int_equal(
		    bfs_layout_file_size(&m->layout, m->order, &loc, &bs), 0);
		all = realloc(all, at + bs);
		assert_non_null(all);
		assert_int_equal(bfs_layout_fill(&m->layout, m->ds, ID(e, k),
						 idx, rows, bs, all + at),
				 0);
		starts[k] = at;
		at += bs;
	}
	starts[len] = at;
	*size = at;
	return all;
}

/* A READ of [off, off + n) of f is slices of exactly the bytes of
 * want[0 .. total) there (none past the end), at most one per batch
 * it spans (pointing into the batches' buffers: no copy). */
static void read_is(struct bfs_serve *s, struct bfs_file *f, uint64_t off,
		    uint64_t n, const uint8_t *want, uint64_t total)
{
	uint64_t expect = off < total ? (n < total - off ? n : total - off) : 0;
	struct bfs_serve_reply r;
	uint64_t at = off;

	assert_int_equal(bfs_serve_read(s, f, off, n, &r), 0);
	if (!expect)
		assert_int_equal(r.iovcnt, 0);
	else
		assert_in_range(r.iovcnt, 1, BFS_SERVE_MORE + 1);
	for (int i = 0; i < r.iovcnt; i++) {
		if (memcmp(r.iov[i].iov_base, want + at, r.iov[i].iov_len))
			fail_msg("READ [%llu, +%llu): other bytes than the "
				 "batch files' at %llu",
				 (unsigned long long)off, (unsigned long long)n,
				 (unsigned long long)at);
		at += r.iov[i].iov_len;
	}
	assert_int_equal(at - off, expect);
	bfs_serve_done(s, &r);
}

/* Reads of stream/e of m in every mode: within a batch, across two and
 * three batches, the last batch, past the end, single bytes at each
 * batch's edges, 1 MiB reads, then the whole stream in 4097-byte reads:
 * always the batch files' bytes back to back; the open says direct I/O
 * (no page cache, no backing file), and a stream past the epochs is
 * -ENOENT. */
static void stream_reads_are_the_batch_files(struct tf_fixture *m, uint64_t e)
{
	static const enum bfs_serve_mode modes[] = {
	    BFS_SERVE_CACHE, BFS_SERVE_PUSH, BFS_SERVE_DIRECT,
	    BFS_SERVE_PASSTHROUGH};
	uint64_t len = bfs_order_len(m->order), starts[64], total;
	uint8_t *want;

	assert_true(len < 64 && len >= 4);
	want = stream_of(m, e, starts, &total);
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		struct bfs_serve *s = serve_mount(m, modes[i]);
		struct bfs_serve_how how;
		struct bfs_file *f;
		uint64_t last = starts[len - 1];

		assert_int_equal(
		    bfs_serve_open_stream(s, ID(EPOCHS, 0), &f, &how), -ENOENT);
		assert_int_equal(bfs_serve_open_stream(s, ID(e, 0), &f, &how),
				 0);
		assert_true(how.direct_io);
		assert_false(how.keep_cache);
		assert_int_equal(how.backing_id, 0);
		read_is(s, f, starts[1] + 10, 100, want, total);
		read_is(s, f, starts[2] - 50, 100, want, total);
		read_is(s, f, starts[1] - 10, starts[3] - starts[1] + 20, want,
			total);
		read_is(s, f, last, total - last, want, total);
		read_is(s, f, total - 10, 1 << 20, want, total);
		read_is(s, f, total, 4096, want, total);
		read_is(s, f, total + 5, 1, want, total);
		for (uint64_t k = 0; k <= len; k++) {
			if (k)
				read_is(s, f, starts[k] - 1, 1, want, total);
			read_is(s, f, starts[k], 1, want, total);
		}
		for (uint64_t off = 0; off < total; off += 1 << 20)
			read_is(s, f, off, 1 << 20, want, total);
		read_is(s, f, 12345, 1 << 20, want, total);
		for (uint64_t off = 0; off < total; off += 4097)
			read_is(s, f, off, 4097, want, total);
		bfs_serve_release(s, f);
		bfs_serve_destroy(s);
	}
	free(want);
}

static void fixed_stream_reads_are_the_batch_files(void **state)
{
	stream_reads_are_the_batch_files(&fx.tf, 2);
}

static void ragged_stream_reads_are_the_batch_files(void **state)
{
	struct tf_fixture m;
	uint64_t starts[64], total;

	ragged_mount(&m);
	free(stream_of(&m, 1, starts, &total));
	assert_true(total > (1 << 20)); /* 1 MiB reads are whole */
	assert_true(starts[2] - starts[1] != starts[1] - starts[0] ||
		    starts[3] - starts[2] != starts[1] - starts[0]);
	stream_reads_are_the_batch_files(&m, 1);
	tf_teardown(&m);
}

/* Reading stream/e of m from start to end in 'chunk'-byte READs
 * gathers each batch once and leaves none in the pool. */
static void stream_read_through_leaves_nothing(struct tf_fixture *m, uint64_t e,
					       uint64_t chunk)
{
	uint64_t len = bfs_order_len(m->order), starts[64], total;
	uint8_t *want = stream_of(m, e, starts, &total);
	struct bfs_serve *s = serve_mount(m, BFS_SERVE_CACHE);
	struct bfs_serve_how how;
	struct bfs_file *f;
	struct bfs_stats st;

	assert_int_equal(bfs_serve_open_stream(s, ID(e, 0), &f, &how), 0);
	for (uint64_t off = 0; off < total; off += chunk) {
		read_is(s, f, off, chunk, want, total);
		bfs_serve_stats(s, &st);
		assert_true(st.pool.cache_batches <= 1); /* the one it is in */
	}
	bfs_serve_release(s, f);
	bfs_serve_stats(s, &st);
	assert_int_equal(st.pool.batches_materialized, len);
	assert_int_equal(st.pool.cache_batches, 0);
	assert_int_equal(st.pool.evictions, 0);
	bfs_serve_destroy(s);
	free(want);
}

static void each_batch_read_through_a_stream_leaves_the_pool(void **state)
{
	struct tf_fixture r;

	ragged_mount(&r);
	stream_read_through_leaves_nothing(&fx.tf, 3, 5000);
	stream_read_through_leaves_nothing(&r, 2, 5000);
	stream_read_through_leaves_nothing(&r, 0, 1 << 20);
	tf_teardown(&r);
}

/* Streams come from the plain pool in every mode: reading one through a
 * passthrough mount registers no backing file (no memfd, no hook). */
static void a_stream_registers_no_backing_file(void **state)
{
	uint64_t starts[64], total;
	uint8_t *want = stream_of(&fx.tf, 1, starts, &total);
	struct bfs_serve *s = serve(BFS_SERVE_PASSTHROUGH, 0, 0);
	struct bfs_serve_how how;
	struct bfs_file *f;
	struct bfs_stats st;

	assert_int_equal(bfs_serve_open_stream(s, ID(1, 0), &f, &how), 0);
	for (uint64_t off = 0; off < total; off += 1 << 20)
		read_is(s, f, off, 1 << 20, want, total);
	bfs_serve_release(s, f);
	bfs_serve_stats(s, &st);
	assert_int_equal(st.pool.shmem_bytes, 0);
	pthread_mutex_lock(&kern.lock);
	assert_int_equal(kern.backing_opens, 0);
	pthread_mutex_unlock(&kern.lock);
	bfs_serve_destroy(s);
	free(want);
}

#define TN   300 /* tiny mount: samples of 16 bytes, a batch each */
#define TROW 16

/* A READ of a stream spanning more batches than a reply holds (tiny
 * batches: a 1 MiB READ spans 255 of them) is whole and exact, the bytes
 * copied; READs at every offset within such a span too. */
static void a_stream_read_over_many_batches_is_whole(void **state)
{
	uint8_t rows[TN * TROW], *want = NULL;
	const struct tf_field fields[] = {
	    {"x", BFS_DT_UINT8, 2, {TN, TROW}, .data = rows}};
	const struct tf_spec spec = {.name = "serve_tiny.pt",
				     .fields = fields,
				     .nfields = 1,
				     .order = {.sampler = BFS_SAMPLER_RANDOM,
					       .n = TN,
					       .batch_size = 1,
					       .seed = 8,
					       .compat = BFS_TORCH_1_13,
					       .epochs = 2}};
	struct tf_fixture m;
	uint64_t total = 0, idx[1];
	struct bfs_serve_how how;
	struct bfs_file *f;
	struct bfs_serve *s;

	for (size_t i = 0; i < sizeof(rows); i++)
		rows[i] = (uint8_t)(i * 7 + i / TROW);
	assert_int_equal(tf_setup(&m, &spec), 0);
	for (uint64_t k = 0; k < TN; k++) { /* the batch files, end to end */
		struct bfs_batch_loc at;
		uint64_t bs;

		assert_int_equal(bfs_order_locate(m.order, ID(1, k), &at), 0);
		assert_int_equal(bfs_order_batch(m.order, ID(1, k), idx), 0);
		assert_int_equal(
		    bfs_layout_file_size(&m.layout, m.order, &at, &bs), 0);
		want = realloc(want, total + bs);
		assert_non_null(want);
		assert_int_equal(bfs_layout_fill(&m.layout, m.ds, ID(1, k), idx,
						 1, bs, want + total),
				 0);
		total += bs;
	}
	assert_true(total > (1 << 20));
	s = serve_mount(&m, BFS_SERVE_PASSTHROUGH);
	assert_int_equal(bfs_serve_open_stream(s, ID(1, 0), &f, &how), 0);
	for (uint64_t off = 0; off < total; off += 1 << 20)
		read_is(s, f, off, 1 << 20, want, total);
	read_is(s, f, 12345, 1 << 20, want, total);
	read_is(s, f, 100, 300000, want, total);
	bfs_serve_release(s, f);
	bfs_serve_destroy(s);
	tf_teardown(&m);
	free(want);
}

/* index/N/offsets of m: line K is where batch K starts in stream/N (the
 * sum of the batch files before it), 20 digits and a newline, the last
 * line the stream's size; READs at any offset and of any size give those
 * bytes; past the end, none; past the epochs, -ENOENT. */
static void offsets_lines_are_where_batches_start(struct tf_fixture *m,
						  uint64_t e)
{
	uint64_t len = bfs_order_len(m->order), starts[64], total;
	uint8_t *want = stream_of(m, e, starts, &total);
	struct bfs_serve *s = serve_mount(m, BFS_SERVE_CACHE);
	size_t size = (size_t)(len + 1) * BFS_SERVE_OFFSET_LINE;
	char *lines = malloc(size + 1);
	struct bfs_serve_how how;
	struct bfs_file *f;

	for (uint64_t k = 0; k <= len; k++)
		snprintf(lines + k * BFS_SERVE_OFFSET_LINE,
			 BFS_SERVE_OFFSET_LINE + 1, "%020llu\n",
			 (unsigned long long)starts[k]);
	assert_int_equal(bfs_serve_open_offsets(s, ID(EPOCHS, 0), &f, &how),
			 -ENOENT);
	assert_int_equal(bfs_serve_open_offsets(s, ID(e, 0), &f, &how), 0);
	read_is(s, f, 0, 1 << 20, (uint8_t *)lines, size);
	for (uint64_t off = 0; off < size; off += 7)
		read_is(s, f, off, 1, (uint8_t *)lines, size);
	for (uint64_t off = 0; off < size; off += 13)
		read_is(s, f, off, 30, (uint8_t *)lines, size);
	read_is(s, f, 3 * BFS_SERVE_OFFSET_LINE - 1, 2 * BFS_SERVE_OFFSET_LINE,
		(uint8_t *)lines, size);
	read_is(s, f, size - 5, 100, (uint8_t *)lines, size);
	read_is(s, f, size, 1, (uint8_t *)lines, size);
	bfs_serve_release(s, f);
	bfs_serve_destroy(s);
	free(lines);
	free(want);
}

static void offsets_lines_are_where_batches_start_in_streams(void **state)
{
	struct tf_fixture r;

	ragged_mount(&r);
	offsets_lines_are_where_batches_start(&fx.tf, 1);
	offsets_lines_are_where_batches_start(&r, 3);
	tf_teardown(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(a_file_lives_until_its_last_reply_is_done),
	    cmocka_unit_test(push_keeps_the_page_cache_under_its_budget),
	    cmocka_unit_test(a_store_waiting_for_a_read_holds_no_request),
	    cmocka_unit_test(zero_copy_slices_are_the_batch_bytes),
	    cmocka_unit_test(opens_of_one_batch_share_one_backing_id),
	    cmocka_unit_test(a_failed_backing_open_fails_the_open_with_eio),
	    cmocka_unit_test(
		an_o_direct_open_is_served_with_direct_io_in_every_mode),
	    cmocka_unit_test(
		an_o_direct_open_of_a_batch_held_by_passthrough_is_passthrough),
	    cmocka_unit_test(o_direct_opens_refused_fail_with_einval),
	    cmocka_unit_test(fixed_stream_reads_are_the_batch_files),
	    cmocka_unit_test(ragged_stream_reads_are_the_batch_files),
	    cmocka_unit_test(each_batch_read_through_a_stream_leaves_the_pool),
	    cmocka_unit_test(offsets_lines_are_where_batches_start_in_streams),
	    cmocka_unit_test(a_stream_registers_no_backing_file),
	    cmocka_unit_test(a_stream_read_over_many_batches_is_whole),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
