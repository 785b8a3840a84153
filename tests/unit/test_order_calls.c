/* Opening a batch asks fs/order for its place once and for its samples
 * once: an open locates the batch (bfs_order_locate) and hands what it
 * learnt down to the layout, the pool, zero copy and push, which ask the
 * order nothing more but the samples they gather (bfs_order_batch, in
 * the worker or in zero copy). A ragged batch asks for its samples once
 * more, to measure its size. Counted for an open, every READ of the
 * batch and its release, in every serve mode, with debug logging off.
 *
 * How: this program is linked with -Wl,--wrap for every function of
 * fs/order the other rooms call (tests/module.mk), so calls from outside
 * fs/order come through the wrappers below, which count the outermost
 * ones (a call fs/order makes to itself across its files runs inside a
 * counted one, on the same thread, and is not counted). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/serve.h"
#include "tests/lib/fixture.h"

enum { N = 40, ROW = 8192, B = 8, EPOCHS = 3 };

static atomic_int calls;   /* outermost calls into fs/order */
static __thread int depth; /* this thread's calls in progress */

static void enter(void)
{
	if (depth++ == 0)
		atomic_fetch_add(&calls, 1);
}

static void leave(void)
{
	depth--;
}

#define WRAP(ret, name, params, args)                                          \
	ret __real_##name params;                                              \
	ret __wrap_##name params;                                              \
	ret __wrap_##name params                                               \
	{                                                                      \
		ret result_;                                                   \
		enter();                                                       \
		result_ = __real_##name args;                                  \
		leave();                                                       \
		return result_;                                                \
	}

/* clang-format off */
WRAP(size_t, bfs_order_lanes, (const struct bfs_order *o), (o))
WRAP(bool, bfs_order_ranked, (const struct bfs_order *o), (o))
WRAP(uint32_t, bfs_order_world_size, (const struct bfs_order *o), (o))
WRAP(uint32_t, bfs_order_rank_of_lane, (const struct bfs_order *o, size_t l),
     (o, l))
WRAP(int, bfs_order_lane_of_rank,
     (const struct bfs_order *o, uint64_t r, size_t *l), (o, r, l))
WRAP(uint64_t, bfs_order_epochs, (const struct bfs_order *o), (o))
WRAP(uint64_t, bfs_order_positions, (const struct bfs_order *o), (o))
WRAP(bool, bfs_order_has, (const struct bfs_order *o, struct bfs_batch_id id),
     (o, id))
WRAP(uint64_t, bfs_order_pos,
     (const struct bfs_order *o, struct bfs_batch_id id), (o, id))
WRAP(struct bfs_batch_id, bfs_order_id, (const struct bfs_order *o, uint64_t p),
     (o, p))
WRAP(int, bfs_order_locate,
     (const struct bfs_order *o, struct bfs_batch_id id,
      struct bfs_batch_loc *at), (o, id, at))
WRAP(int, bfs_order_locate_pos,
     (const struct bfs_order *o, uint64_t p, struct bfs_batch_loc *at),
     (o, p, at))
WRAP(size_t, bfs_order_lane_of, (const struct bfs_order *o, uint64_t p), (o, p))
WRAP(uint64_t, bfs_order_lane_end, (const struct bfs_order *o, size_t l),
     (o, l))
WRAP(uint64_t, bfs_order_epoch_serial,
     (const struct bfs_order *o, struct bfs_batch_id id), (o, id))
WRAP(int, bfs_order_epoch_of_serial,
     (const struct bfs_order *o, uint64_t s, struct bfs_batch_id *id),
     (o, s, id))
WRAP(uint64_t, bfs_order_len, (const struct bfs_order *o), (o))
WRAP(uint64_t, bfs_order_batch_rows, (const struct bfs_order *o, uint64_t k),
     (o, k))
WRAP(int, bfs_order_batch,
     (struct bfs_order *o, struct bfs_batch_id id, uint64_t *idx),
     (o, id, idx))
WRAP(int, bfs_order_describe, (const struct bfs_order *o, char *b, size_t n),
     (o, b, n))
/* clang-format on */

void __real_bfs_order_batch_name(const struct bfs_order *o,
				 struct bfs_batch_id id, char *buf, size_t len);
void __wrap_bfs_order_batch_name(const struct bfs_order *o,
				 struct bfs_batch_id id, char *buf, size_t len);
void __wrap_bfs_order_batch_name(const struct bfs_order *o,
				 struct bfs_batch_id id, char *buf, size_t len)
{
	enter();
	__real_bfs_order_batch_name(o, id, buf, len);
	leave();
}

/* ---- a dataset and the serve of it ---- */

static struct tf_fixture fixed_fx, ragged_fx; /* datasets only: no order */

static int k_store(void *arg, struct bfs_batch_id id, uint64_t off,
		   const void *buf, uint64_t len)
{
	return 0;
}

static int k_inval(void *arg, struct bfs_batch_id id)
{
	return 0;
}

static int k_backing_open(void *arg, int fd)
{
	return 1; /* one id for every batch: one is open at a time here */
}

static void k_backing_close(void *arg, int id)
{
}

static const struct bfs_serve_kernel kernel = {
    .store = k_store,
    .inval = k_inval,
    .backing_open = k_backing_open,
    .backing_close = k_backing_close,
};

/* x: uint8 [N, ROW] (rows big enough for zero copy), y: int64 [N]; with
 * 'ragged', t: a ragged int16 field of lengths 0 .. 4. */
static int dataset(struct tf_fixture *fx, const char *name, bool ragged)
{
	static uint8_t rows[N * ROW];
	static int64_t labels[N], offs[N + 1];
	static int16_t vals[N * 4];
	struct tf_field fields[] = {
	    {"x", BFS_DT_UINT8, 2, {N, ROW}, .data = rows},
	    {"y", BFS_DT_INT64, 1, {N}, .data = labels},
	    {"t.values", BFS_DT_INT16, 1, {N * 4}, .data = vals},
	    {"t.offsets", BFS_DT_INT64, 1, {N + 1}, .data = offs},
	};
	const struct tf_spec spec = {
	    .name = name, .fields = fields, .nfields = ragged ? 4 : 2};
	int rc;

	for (int i = 0; i < N; i++) {
		labels[i] = i;
		offs[i + 1] = offs[i] + i % 5;
	}
	fields[2].shape[0] = offs[N];
	rc = tf_setup(fx, &spec);
	if (rc)
		print_error("%s: %s\n", name, fx->err.msg);
	return rc;
}

static int setup(void **state)
{
	if (dataset(&fixed_fx, "calls_fixed.pt", false) ||
	    dataset(&ragged_fx, "calls_ragged.pt", true))
		return -1;
	return 0;
}

static int teardown(void **state)
{
	tf_teardown(&fixed_fx);
	tf_teardown(&ragged_fx);
	return 0;
}

/* The calls into fs/order of opening batch 'id' of 'ds' in 'mode', reading
 * it whole (where READs come to the daemon) and releasing it, on a serve with
 * no prefetch window, no read-ahead thread and debug logging off (what else
 * asks the order runs for the batches after this one). */
static int calls_to_open(struct bfs_dataset *ds, enum bfs_serve_mode mode,
			 struct bfs_batch_id id)
{
	struct bfs_order_opts oo = {.sampler = BFS_SAMPLER_RANDOM,
				    .n = N,
				    .batch_size = B,
				    .seed = 3,
				    .epochs = EPOCHS};
	const struct bfs_pool_opts po = {
	    .workers = 1, .budget_bytes = 64 << 20, .timeout_ms = 30000};
	const struct bfs_serve_opts so = {
	    .mode = mode, .page_cache_bytes = 64 << 20, .zero_copy = true};
	struct bfs_order *order;
	struct bfs_serve *s;
	struct bfs_layout l;
	struct bfs_serve_how how;
	struct bfs_file *f;
	uint64_t off = 0;
	int n;

	assert_int_equal(bfs_layout_init(&l, ds, B, NULL), 0);
	assert_int_equal(bfs_order_create(&order, &oo, NULL), 0);
	bfs_layout_bind_order(&l, order);
	assert_int_equal(bfs_serve_create(&s, ds, order, &l, &po, &so, &kernel),
			 0);
	atomic_store(&calls, 0);
	assert_int_equal(bfs_serve_open_batch(s, id, 0, &f, &how), 0);
	/* passthrough and push: the kernel reads, READs never come here */
	while (mode == BFS_SERVE_CACHE || mode == BFS_SERVE_DIRECT) {
		struct bfs_serve_reply r;
		uint64_t got = 0;

		assert_int_equal(bfs_serve_read(s, f, off, 1 << 20, &r), 0);
		for (int i = 0; i < r.iovcnt; i++)
			got += r.iov[i].iov_len;
		bfs_serve_done(s, &r);
		if (!got)
			break;
		off += got;
	}
	bfs_serve_release(s, f);
	bfs_serve_settle(s);
	n = atomic_load(&calls);
	bfs_serve_destroy(s);
	bfs_order_destroy(order);
	bfs_layout_fini(&l);
	return n;
}

static void opening_a_batch_asks_the_order_twice(void **state)
{
	static const enum bfs_serve_mode modes[] = {
	    BFS_SERVE_PASSTHROUGH, BFS_SERVE_PUSH, BFS_SERVE_CACHE,
	    BFS_SERVE_DIRECT};
	/* the last batch of the last epoch: no batch of the lane after it,
	 * so nothing is read ahead */
	const struct bfs_batch_id last = {.epoch = EPOCHS - 1,
					  .batch = N / B - 1};

	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		int fixed = calls_to_open(fixed_fx.ds, modes[i], last);
		int ragged = calls_to_open(ragged_fx.ds, modes[i], last);

		print_message("--serve %s: %d calls into fs/order (fixed), "
			      "%d (ragged)\n",
			      bfs_serve_mode_name(modes[i]), fixed, ragged);
		assert_int_equal(fixed, 2);  /* locate, samples */
		assert_int_equal(ragged, 3); /* + samples to measure it */
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(opening_a_batch_asks_the_order_twice),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
