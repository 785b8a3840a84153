/* The worker pool hands out batches whose bytes equal a direct gather of
 * the order's indices, from any thread, in any order, under any budget;
 * a batch not ready within the timeout is -ETIMEDOUT; nothing leaks. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "fs/log.h"
#include "fs/pool.h"
#include "tests/lib/fixture.h"

static struct tf_fixture fx;

/* A demo archive of 300 samples (labels i64, images u8 [3,32,32]) written
 * by batchfs pack, opened as dataset with a shuffled order of batch 32. */
static int setup(void **state)
{
	const struct tf_spec spec = {.format = TF_DEMO,
				     .name = "pool_demo.pt",
				     .demo_rows = 300,
				     .order = {.sampler = BFS_SAMPLER_RANDOM,
					       .batch_size = 32,
					       .seed = 5,
					       .compat = BFS_TORCH_1_13,
					       .epochs = 4}};

	return tf_setup(&fx, &spec);
}

static int teardown(void **state)
{
	return tf_teardown(&fx);
}

static struct bfs_pool *pool(uint64_t budget, unsigned prefetch,
			     unsigned delay_ms, unsigned timeout_ms)
{
	struct bfs_pool_opts o = {.workers = 2,
				  .prefetch = prefetch,
				  .budget_bytes = budget,
				  .timeout_ms = timeout_ms,
				  .debug_delay_ms = delay_ms};
	struct bfs_pool *p;

	assert_int_equal(bfs_pool_create(&p, fx.ds, fx.order, &fx.layout, &o),
			 0);
	return p;
}

/* b holds exactly want[0..size): in its buffer, or in its memfd (which
 * is sealed: nobody may change a batch that readers map). */
static void expect_bytes(const struct bfs_batch *b, const void *want,
			 uint64_t size)
{
	uint8_t *got;

	if (bfs_batch_fd(b) < 0) {
		assert_memory_equal(bfs_batch_data(b), want, size);
		return;
	}
	assert_null(bfs_batch_data(b));
	got = malloc(size + 1);
	assert_int_equal(pread(bfs_batch_fd(b), got, size + 1, 0), size);
	assert_memory_equal(got, want, size);
	assert_int_equal(fcntl(bfs_batch_fd(b), F_GET_SEALS),
			 F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE |
			     F_SEAL_SEAL);
	free(got);
}

/* Batch k of epoch e (of lane 0). */
#define ID(e, k) ((struct bfs_batch_id){.epoch = (e), .batch = (k)})

/* Acquire batch id of fx.order (located first, as serve does): its
 * error, or 0 and *b; alone: without the prefetch window. */
static int get_id(struct bfs_pool *p, struct bfs_batch_id id, bool alone,
		  struct bfs_batch **b)
{
	struct bfs_batch_loc at;
	int rc = bfs_order_locate(fx.order, id, &at);

	*b = NULL;
	if (rc)
		return rc;
	return alone ? bfs_pool_acquire_alone(p, &at, b)
		     : bfs_pool_acquire(p, &at, b);
}

static int get(struct bfs_pool *p, uint64_t e, uint64_t k, struct bfs_batch **b)
{
	return get_id(p, ID(e, k), false, b);
}

static int get_alone(struct bfs_pool *p, uint64_t e, uint64_t k,
		     struct bfs_batch **b)
{
	return get_id(p, ID(e, k), true, b);
}

/* Acquire batch id and compare with a direct layout fill. */
static void expect_id(struct bfs_pool *p, struct bfs_batch_id id, bool read_all)
{
	uint64_t rows = bfs_order_batch_rows(fx.order, id.batch);
	uint64_t size = bfs_layout_size(&fx.layout, rows);
	uint64_t *idx = malloc(rows * sizeof(*idx));
	void *want = malloc(size);
	struct bfs_batch *b;

	assert_int_equal(bfs_order_batch(fx.order, id, idx), 0);
	assert_int_equal(
	    bfs_layout_fill(&fx.layout, fx.ds, id, idx, rows, size, want), 0);
	assert_int_equal(get_id(p, id, false, &b), 0);
	assert_int_equal(bfs_batch_size(b), size);
	expect_bytes(b, want, size);
	if (read_all) /* its reader has moved on */
		bfs_pool_drop(p, b);
	bfs_pool_release(p, b);
	free(want);
	free(idx);
}

/* expect_id of batch k of epoch e (of lane 0). */
static void expect_batch(struct bfs_pool *p, uint64_t e, uint64_t k,
			 bool read_all)
{
	expect_id(p, ID(e, k), read_all);
}

/* Read epochs 0..epochs-1 in order, every batch to its end. */
static void stream(struct bfs_pool *p, uint64_t epochs)
{
	for (uint64_t e = 0; e < epochs; e++)
		for (uint64_t k = 0; k < bfs_order_len(fx.order); k++)
			expect_batch(p, e, k, true);
}

/* Stats of p once ok(st) holds, polled (a state to wait for, never a
 * count at an instant); fails after a minute, a hang. */
static struct bfs_pool_stats
wait_stats(struct bfs_pool *p, bool (*ok)(const struct bfs_pool_stats *))
{
	struct bfs_pool_stats st;

	for (int i = 0; i < 6000; i++) {
		bfs_pool_stats(p, &st);
		if (ok(&st))
			return st;
		nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
	}
	fail_msg("pool state not reached in 60 s");
	return st;
}

/* Every open is one hit or one miss, whatever the timing. */
static void every_batch_equals_a_direct_gather(void **state)
{
	struct bfs_pool *p = pool(64 << 20, 4, 0, 30000);
	uint64_t len = bfs_order_len(fx.order);
	struct bfs_pool_stats st;

	stream(p, 2);
	bfs_pool_stats(p, &st);
	assert_int_equal(st.prefetch_hits + st.prefetch_misses, 2 * len);
	bfs_pool_destroy(p);
}

static bool window_ready(const struct bfs_pool_stats *st)
{
	return st->batches_materialized >= 1 + 4;
}

/* The batches after an acquire are gathered ahead: once they are (a
 * state waited for), acquiring the next one is a hit, not a miss. */
static void the_batch_after_a_read_one_is_a_prefetch_hit(void **state)
{
	struct bfs_pool *p = pool(64 << 20, 4, 0, 30000);
	struct bfs_pool_stats st;

	expect_batch(p, 1, 0, true);
	wait_stats(p, window_ready);
	expect_batch(p, 1, 1, true);
	bfs_pool_stats(p, &st);
	assert_int_equal(st.prefetch_hits, 1);
	assert_int_equal(st.prefetch_misses, 1); /* batch 0 itself */
	bfs_pool_destroy(p);
}

/* Streaming epochs, each batch read to its end, maps few buffers: a freed
 * buffer is kept as a spare and reused by the next batch of its size, so
 * a gather does not pay the page faults of a fresh mapping (a short last
 * batch takes a larger spare). So at most the batches alive at once
 * (prefetch window + the one read, + one per worker to be safe) plus one
 * short buffer are ever mapped; without reuse it would be one per batch. */
static void streaming_reuses_batch_buffers(void **state)
{
	enum { PREFETCH = 4, WORKERS = 2, EPOCHS = 4 };
	struct bfs_pool *p = pool(64 << 20, PREFETCH, 0, 30000);
	uint64_t len = bfs_order_len(fx.order);
	struct bfs_pool_stats st;

	stream(p, EPOCHS);
	bfs_pool_stats(p, &st);
	print_message("%llu batches materialized, %llu buffers mapped\n",
		      (unsigned long long)st.batches_materialized,
		      (unsigned long long)st.buffers_mapped);
	assert_true(st.batches_materialized >= EPOCHS * len);
	assert_true(st.buffers_mapped <= PREFETCH + 1 + WORKERS + 1);
	bfs_pool_destroy(p);
}

/* Hooks of a memfd pool: every batch is tagged by prepare before anyone
 * sees it, and every tagged batch is handed to on_free exactly once. */
static int hook_ready, hook_free;

static void tag_ready(void *arg, struct bfs_batch *b,
		      const struct bfs_batch_loc *at)
{
	__atomic_add_fetch(&hook_ready, 1, __ATOMIC_RELAXED);
	assert_true(bfs_batch_set_tag(
	    b, (int)(at->id.epoch * 1000 + at->id.batch + 1)));
	assert_false(bfs_batch_set_tag(b, 7)); /* one tag per batch */
}

static void tag_free(void *arg, struct bfs_batch *b)
{
	__atomic_add_fetch(&hook_free, 1, __ATOMIC_RELAXED);
}

static struct bfs_pool *memfd_pool(enum bfs_layout_fd_how write)
{
	struct bfs_pool_opts o = {.workers = 2,
				  .prefetch = 4,
				  .budget_bytes = 64 << 20,
				  .timeout_ms = 30000,
				  .memfd = true,
				  .memfd_write = write,
				  .prepare = tag_ready,
				  .on_free = tag_free};
	struct bfs_pool *p;

	assert_int_equal(bfs_pool_create(&p, fx.ds, fx.order, &fx.layout, &o),
			 0);
	return p;
}

/* Passthrough's storage: each batch in its own sealed memfd, the same
 * bytes whether gathered into a buffer and written once or written as
 * slices straight from the archive; never reused; shmem accounted; the
 * hooks run once per batch. */
static void memfd_batches_equal_a_direct_gather_both_ways(void **state)
{
	const enum bfs_layout_fd_how ways[] = {BFS_LAYOUT_FD_GATHER,
					       BFS_LAYOUT_FD_SLICES};
	uint64_t len = bfs_order_len(fx.order);

	for (int w = 0; w < 2; w++) {
		struct bfs_pool *p = memfd_pool(ways[w]);
		struct bfs_pool_stats st;
		struct bfs_batch *b;

		hook_ready = hook_free = 0;
		for (uint64_t k = 0; k < len; k++)
			expect_batch(p, 1, k, true);
		assert_int_equal(get(p, 2, 0, &b), 0);
		assert_true(bfs_batch_tag(b) == 2001);
		bfs_pool_stats(p, &st);
		assert_true(st.shmem_bytes > 0);
		/* all of it but the prefetches being gathered right now */
		assert_true(st.shmem_bytes <= st.cache_bytes);
		assert_true(st.buffers_mapped == st.batches_materialized);
		bfs_pool_release(p, b);
		bfs_pool_destroy(p);
		/* gathers finishing after the snapshot have run it too */
		assert_true((uint64_t)hook_ready >= st.batches_materialized);
		assert_int_equal(hook_free, hook_ready);
	}
}

/* release_last: a batch stays while a reference remains, leaves the pool
 * with the last one, and is gathered again (identical) when asked. */
static void release_last_lets_the_batch_go_with_its_last_reader(void **state)
{
	struct bfs_pool *p = memfd_pool(BFS_LAYOUT_FD_AUTO);
	struct bfs_batch *a, *b, *c, *d;
	struct bfs_pool_stats st0, st1;

	hook_ready = hook_free = 0;
	assert_int_equal(get_alone(p, 3, 1, &a), 0);
	assert_int_equal(get_alone(p, 3, 1, &b), 0);
	assert_ptr_equal(a, b); /* one batch, one backing file */
	bfs_pool_stats(p, &st0);
	bfs_pool_release_last(p, a); /* b still holds it */
	assert_int_equal(get_alone(p, 3, 1, &c), 0);
	assert_ptr_equal(c, b);
	bfs_pool_release_last(p, c);
	bfs_pool_release_last(p, b); /* the last: it goes */
	assert_int_equal(hook_free, 1);
	assert_int_equal(get_alone(p, 3, 1, &d), 0);
	bfs_pool_stats(p, &st1); /* nothing else was asked for: no prefetch */
	assert_int_equal(st1.batches_materialized,
			 st0.batches_materialized + 1);
	bfs_pool_release(p, d);
	expect_batch(p, 3, 1, false); /* gathered again, same bytes */
	bfs_pool_destroy(p);
}

static void out_of_range_batches_are_enoent(void **state)
{
	struct bfs_pool *p = pool(64 << 20, 2, 0, 30000);
	struct bfs_batch *b;

	struct bfs_batch_loc at;

	/* the order has no such batch */
	assert_int_equal(get(p, 0, bfs_order_len(fx.order), &b), -ENOENT);
	assert_int_equal(get(p, 4, 0, &b), -ENOENT); /* epochs 0 .. 3 */
	/* nor does the pool take a batch the order did not locate */
	assert_int_equal(bfs_order_locate(fx.order, ID(3, 0), &at), 0);
	at.id.lane = 1; /* one lane */
	assert_int_equal(bfs_pool_acquire(p, &at, &b), -ENOENT);
	at.id.lane = 0;
	at.pos = bfs_order_positions(fx.order);
	assert_int_equal(bfs_pool_acquire(p, &at, &b), -ENOENT);
	assert_null(b);
	bfs_pool_destroy(p);
}

static bool some_prefetch_dropped(const struct bfs_pool_stats *st)
{
	return st->prefetch_skipped > 0;
}

static void a_budget_smaller_than_a_batch_still_serves_it_alone(void **state)
{
	struct bfs_pool *p = pool(4096, 8, 0, 30000);
	struct bfs_pool_stats st;

	for (uint64_t k = 0; k < 4; k++)
		expect_batch(p, 1, k, false); /* never read to the end */
	bfs_pool_stats(p, &st);
	assert_true(st.cache_batches <= 1);
	/* batches 4.. of the window are never demanded: dropped for want of
	 * room once a worker gets to them */
	wait_stats(p, some_prefetch_dropped);
	bfs_pool_destroy(p);
}

/* Peeks at far epochs leave their prefetch windows behind, ahead of the
 * stream: once the last RECENT (8) acquires are elsewhere, a prefetch
 * evicts them for room instead of being dropped (they used to hold their
 * room until the stream reached their epoch, and a prefetch that found the
 * budget full of them was dropped: the reader then waited for a gather). */
static void windows_left_by_peeks_do_not_starve_the_prefetch(void **state)
{
	enum { PREFETCH = 2, ORPHANS = 6 };
	uint64_t rows = bfs_order_batch_rows(fx.order, 0);
	uint64_t size = bfs_layout_size(&fx.layout, rows);
	uint64_t len = bfs_order_len(fx.order);
	struct bfs_pool *p =
	    pool(ORPHANS * ((size + 4095) & ~4095ull), PREFETCH, 0, 30000);
	const uint64_t peek[2][2] = {{3, 0}, {2, 5}};
	struct bfs_pool_stats st;
	struct bfs_batch *b;

	for (int i = 0; i < 2; i++) { /* a peek and its window, all READY */
		for (uint64_t k = peek[i][1]; k <= peek[i][1] + PREFETCH; k++) {
			int (*how)(struct bfs_pool *, uint64_t, uint64_t,
				   struct bfs_batch **) =
			    k == peek[i][1] ? get : get_alone;

			assert_int_equal(how(p, peek[i][0], k, &b), 0);
			bfs_pool_release(p, b); /* not read to its end */
		}
	}
	bfs_pool_stats(p, &st);
	assert_int_equal(st.cache_batches, ORPHANS); /* the budget is full */
	/* 8 acquires of the last batch (no window after it): the peeks are
	 * no longer recent */
	for (int i = 0; i < 8; i++) {
		assert_int_equal(get(p, 3, len - 1, &b), 0);
		bfs_pool_release(p, b);
	}
	stream(p, 2);
	bfs_pool_stats(p, &st);
	print_message("%llu prefetches dropped, %llu evictions\n",
		      (unsigned long long)st.prefetch_skipped,
		      (unsigned long long)st.evictions);
	assert_int_equal(st.prefetch_skipped, 0);
	bfs_pool_destroy(p);
}

static bool three_ready(const struct bfs_pool_stats *st)
{
	return st->batches_materialized >= 3;
}

/* Two ranks from one pool (an order with two lanes): rank 0 reads one
 * batch and stops, its prefetch window (2) READY; rank 1 then reads two
 * whole epochs through a budget of 4 batches: room for rank 0's window
 * and one batch and one prefetch of its own, not its whole window.
 * Rank 1's prefetches and demands find room without rank 0's window, so
 * rank 0's next batches are still there: prefetch hits, exact bytes. */
static void a_fast_rank_does_not_evict_a_slow_ranks_window(void **state)
{
	enum { PREFETCH = 2, EPOCHS = 4 };
	const uint32_t ranks[2] = {0, 1};
	struct bfs_order_opts o = {.sampler = BFS_SAMPLER_DISTRIBUTED,
				   .n = bfs_dataset_samples(fx.ds),
				   .batch_size = 32,
				   .seed = 9,
				   .world_size = 2,
				   .shuffle = true,
				   .ranks = ranks,
				   .nranks = 2,
				   .epochs = EPOCHS};
	struct bfs_order *saved = fx.order, *two;
	uint64_t rows, size, len, hits;
	struct bfs_pool_stats st;
	struct bfs_pool *p;
	struct bfs_batch *b;

	assert_int_equal(bfs_order_create(&two, &o, NULL), 0);
	fx.order = two; /* expect_batch and pool() use fx.order */
	rows = bfs_order_batch_rows(two, 0);
	size = (bfs_layout_size(&fx.layout, rows) + 4095) & ~4095ull;
	len = bfs_order_len(two);
	p = pool((PREFETCH + 2) * size, PREFETCH, 0, 30000);
	assert_int_equal(get(p, 0, 0, &b), 0); /* rank 0 */
	bfs_pool_release(p, b);
	wait_stats(p, three_ready);	 /* batch 0 and its window, READY */
	for (uint64_t e = 0; e < 2; e++) /* rank 1: epochs 0, 1 */
		for (uint64_t k = 0; k < len; k++)
			expect_id(p, (struct bfs_batch_id){1, e, k}, true);
	bfs_pool_stats(p, &st);
	hits = st.prefetch_hits;
	expect_batch(p, 0, 1, true); /* rank 0 goes on */
	expect_batch(p, 0, 2, true);
	bfs_pool_stats(p, &st);
	print_message("%llu evictions, %llu prefetches dropped\n",
		      (unsigned long long)st.evictions,
		      (unsigned long long)st.prefetch_skipped);
	assert_int_equal(st.prefetch_hits - hits, 2);
	bfs_pool_destroy(p);
	bfs_order_destroy(two);
	fx.order = saved;
}

static void a_slow_batch_times_out(void **state)
{
	/* the gather waits a minute (cut short by destroy), the read 50 ms */
	struct bfs_pool *p = pool(64 << 20, 0, 60000, 50);
	struct bfs_batch *b;
	struct bfs_pool_stats st;

	assert_int_equal(get(p, 0, 3, &b), -ETIMEDOUT);
	assert_null(b);
	bfs_pool_stats(p, &st);
	assert_int_equal(st.timeouts, 1);
	bfs_pool_destroy(p); /* joins the worker still gathering */
}

/* A reader waiting for batch (0, k) under its own cancel flag. */
struct waiter {
	struct bfs_pool *p;
	uint64_t k;
	struct bfs_cancel *cancel; /* NULL: none */
	atomic_bool waiting;	   /* about to acquire */
	int rc;
	struct bfs_batch *b;
};

static void *wait_batch(void *arg)
{
	struct waiter *w = arg;

	if (w->cancel)
		bfs_cancel_enter(w->cancel);
	atomic_store(&w->waiting, true);
	w->rc = get(w->p, 0, w->k, &w->b);
	bfs_cancel_leave();
	return NULL;
}

static void
an_interrupted_acquire_returns_eintr_and_keeps_the_batch(void **state)
{
	/* gathers take 300 ms; a read would wait 20 s (the bound if the
	 * interrupt were lost: -ETIMEDOUT, not -EINTR) */
	struct bfs_pool *p = pool(64 << 20, 0, 300, 20000);
	struct bfs_cancel set = {true}, flag = {false};
	struct waiter a = {.p = p, .k = 5, .cancel = &flag},
		      other = {.p = p, .k = 6};
	struct timespec pause = {0, 20 * 1000 * 1000};
	pthread_t ta, to;
	struct bfs_batch *b;

	/* already interrupted: at once, the batch not ready yet */
	bfs_cancel_enter(&set);
	assert_int_equal(get(p, 0, 3, &b), -EINTR);
	assert_null(b);
	bfs_cancel_leave();
	/* interrupted while it waits; a reader of another batch, and one
	 * without a flag, is not disturbed */
	pthread_create(&ta, NULL, wait_batch, &a);
	pthread_create(&to, NULL, wait_batch, &other);
	while (!atomic_load(&a.waiting) || !atomic_load(&other.waiting))
		nanosleep(&pause, NULL);
	nanosleep(&pause, NULL);
	atomic_store(&flag.set, true);
	bfs_pool_interrupt(p);
	pthread_join(ta, NULL);
	pthread_join(to, NULL);
	assert_int_equal(a.rc, -EINTR);
	assert_null(a.b);
	assert_int_equal(other.rc, 0);
	bfs_pool_release(p, other.b);
	/* the interrupted batches were still gathered, for later readers */
	assert_int_equal(get(p, 0, 3, &b), 0);
	bfs_pool_release(p, b);
	assert_int_equal(get(p, 0, 5, &b), 0);
	bfs_pool_release(p, b);
	bfs_pool_destroy(p);
}

static void *hammer(void *arg)
{
	struct bfs_pool *p = arg;
	uint64_t len = bfs_order_len(fx.order);
	unsigned seed = (unsigned)(uintptr_t)pthread_self();

	for (int i = 0; i < 60; i++) {
		uint64_t e = (uint64_t)rand_r(&seed) % 4;
		uint64_t k = (uint64_t)rand_r(&seed) % len;
		expect_batch(p, e, k, rand_r(&seed) % 2);
	}
	return NULL;
}

static void
concurrent_readers_under_a_small_budget_get_right_bytes(void **state)
{
	struct bfs_pool *p = pool(3 * 110000, 3, 0, 30000);
	pthread_t t[4];
	struct bfs_pool_stats st;

	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, hammer, p);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	bfs_pool_stats(p, &st);
	assert_true(st.cache_bytes <= st.cache_budget_bytes);
	assert_int_equal(st.errors, 0);
	bfs_pool_destroy(p);
}

static int sigbus_logs;
static void count_sigbus(enum bfs_log_level level, const char *line)
{
	__atomic_add_fetch(&sigbus_logs, strstr(line, "SIGBUS") != NULL,
			   __ATOMIC_RELAXED);
}

/* Workers gather while the archive is truncated and restored under them
 * (tests/lib/archive's flipper): a copy that faults must come back as
 * -EIO through fs/dataset's SIGBUS guard. Regression: workers blocked
 * every signal, and the kernel kills a process whose thread faults with
 * SIGBUS blocked (it forces the default action), so the daemon died with
 * no log line when an archive shrank during a prefetch. */
static void archive_shrinking_under_worker_gathers_gives_eio(void **state)
{
	enum { N = 64, ROW = 64 * 1024, ROUNDS = 3000 };
	const struct tf_field x = {
	    .name = "x", .dtype = BFS_DT_UINT8, .ndim = 2, .shape = {N, ROW}};
	const struct tf_spec spec = {.name = "shrink.pt",
				     .fields = &x,
				     .nfields = 1,
				     .order = {.sampler = BFS_SAMPLER_RANDOM,
					       .n = N,
					       .batch_size = 8,
					       .seed = 3,
					       .epochs = 1u << 20}};
	struct bfs_pool_opts po = {.workers = 2,
				   .prefetch = 8,
				   .budget_bytes = 64 << 20,
				   .timeout_ms = 30000};
	struct tf_fixture sh; /* x: zeros */
	struct bfs_order *order;
	struct bfs_pool *p;
	struct ta_flip fl;
	int ok = 0, eio = 0;

	assert_int_equal(tf_setup(&sh, &spec), 0);
	order = sh.order;
	assert_int_equal(bfs_pool_create(&p, sh.ds, order, &sh.layout, &po), 0);
	bfs_log_setup(BFS_LOG_ERR, count_sigbus);
	ta_flip_start(&fl, sh.path);
	for (uint64_t pos = 0; pos < ROUNDS; pos++) {
		struct bfs_batch *b = NULL;
		struct bfs_batch_loc at;
		int rc = bfs_order_locate_pos(order, pos, &at);

		assert_int_equal(rc, 0);
		rc = bfs_pool_acquire(p, &at, &b);

		assert_true(rc == 0 || rc == -EIO);
		rc ? eio++ : ok++;
		if (b)
			bfs_pool_drop(p, b);
		bfs_pool_release(p, b);
	}
	ta_flip_stop(&fl);
	bfs_pool_destroy(p);
	bfs_log_setup(BFS_LOG_INFO, NULL);
	print_message("shrink: %d batches ok, %d -EIO, %d faults caught\n", ok,
		      eio, sigbus_logs);
	tf_teardown(&sh);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(every_batch_equals_a_direct_gather),
	    cmocka_unit_test(the_batch_after_a_read_one_is_a_prefetch_hit),
	    cmocka_unit_test(streaming_reuses_batch_buffers),
	    cmocka_unit_test(memfd_batches_equal_a_direct_gather_both_ways),
	    cmocka_unit_test(
		release_last_lets_the_batch_go_with_its_last_reader),
	    cmocka_unit_test(out_of_range_batches_are_enoent),
	    cmocka_unit_test(
		a_budget_smaller_than_a_batch_still_serves_it_alone),
	    cmocka_unit_test(windows_left_by_peeks_do_not_starve_the_prefetch),
	    cmocka_unit_test(a_fast_rank_does_not_evict_a_slow_ranks_window),
	    cmocka_unit_test(a_slow_batch_times_out),
	    cmocka_unit_test(
		an_interrupted_acquire_returns_eintr_and_keeps_the_batch),
	    cmocka_unit_test(
		concurrent_readers_under_a_small_budget_get_right_bytes),
	    cmocka_unit_test(archive_shrinking_under_worker_gathers_gives_eio),
	};
	if (!getenv("BATCHFS")) {
		printf("skip: BATCHFS (for batchfs pack) is not set\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}
