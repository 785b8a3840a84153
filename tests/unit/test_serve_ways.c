/* fs/serve's table of the ways of serving (fs/serve_impl.h): every mode
 * has a way, named as the mode; and a mount serves its batch files through
 * its mode's table and nothing else: each open, read, reply done, release
 * and free of a batch file, and create, stop, destroy and the kernel's
 * calls of the mount, reach the table, once per call, in every mode, while
 * texts, streams and offsets opened in the same mount never do (a file's
 * way is its own, chosen at its open).
 *
 * The core asks serve_ways.c for the table (bfs_serve_ops_of); this test
 * is linked with ld --wrap=bfs_serve_ops_of, so the core gets a table of
 * counting wrappers over the real one, and serves the same bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/serve_impl.h"
#include "tests/lib/fixture.h"

enum { N = 16, ROW = 8192, B = 4, EPOCHS = 2 };

/* The calls a table can get. */
enum op {
	OP_CREATE,
	OP_STOP,
	OP_DESTROY,
	OP_STOP_KERNEL,
	OP_KERNEL_BUSY,
	OP_SETTLE,
	OP_OPEN,
	OP_READ,
	OP_DONE,
	OP_RELEASE,
	OP_FREE,
	OPS
};

#define MODES (BFS_SERVE_DIRECT + 1)

const struct bfs_serve_ops *__real_bfs_serve_ops_of(enum bfs_serve_mode m);

static struct {
	struct tf_fixture tf; /* the mount's data set */
	/* the counting tables handed to the core, the real ones under them */
	struct bfs_serve_ops fake[MODES];
	const struct bfs_serve_ops *real[MODES];
	atomic_int calls[MODES][OPS];
	atomic_int next_id;
} fx;

/* The mode whose (fake) table serves w, and the real table. */
static const struct bfs_serve_ops *real_of(struct bfs_serve_way *w, int op)
{
	ptrdiff_t m = w->ops - fx.fake;

	assert_true(m > 0 && m < MODES);
	atomic_fetch_add(&fx.calls[m][op], 1);
	return fx.real[m];
}

static int f_create(struct bfs_serve_way *w, struct bfs_pool_opts *po)
{
	const struct bfs_serve_ops *o = real_of(w, OP_CREATE);

	return o->create ? o->create(w, po) : 0;
}

static void f_stop(struct bfs_serve_way *w)
{
	const struct bfs_serve_ops *o = real_of(w, OP_STOP);

	if (o->stop)
		o->stop(w);
}

static void f_destroy(struct bfs_serve_way *w)
{
	const struct bfs_serve_ops *o = real_of(w, OP_DESTROY);

	if (o->destroy)
		o->destroy(w);
}

static void f_stop_kernel(struct bfs_serve_way *w)
{
	const struct bfs_serve_ops *o = real_of(w, OP_STOP_KERNEL);

	if (o->stop_kernel)
		o->stop_kernel(w);
}

static bool f_kernel_busy(struct bfs_serve_way *w)
{
	const struct bfs_serve_ops *o = real_of(w, OP_KERNEL_BUSY);

	return o->kernel_busy ? o->kernel_busy(w) : false;
}

static void f_settle(struct bfs_serve_way *w)
{
	const struct bfs_serve_ops *o = real_of(w, OP_SETTLE);

	if (o->settle)
		o->settle(w);
}

static int f_open(struct bfs_serve_way *w, struct bfs_file *f,
		  struct bfs_serve_how *how)
{
	return real_of(w, OP_OPEN)->open(w, f, how);
}

static int f_read(struct bfs_serve_way *w, struct bfs_file *f, uint64_t off,
		  uint64_t n, struct bfs_serve_reply *r)
{
	return real_of(w, OP_READ)->read(w, f, off, n, r);
}

static void f_done(struct bfs_serve_way *w, struct bfs_serve_reply *r)
{
	const struct bfs_serve_ops *o = real_of(w, OP_DONE);

	if (o->done)
		o->done(w, r);
}

static void f_release(struct bfs_serve_way *w, struct bfs_file *f)
{
	const struct bfs_serve_ops *o = real_of(w, OP_RELEASE);

	if (o->release)
		o->release(w, f);
}

static void f_free(struct bfs_serve_way *w, struct bfs_file *f)
{
	const struct bfs_serve_ops *o = real_of(w, OP_FREE);

	if (o->free)
		o->free(w, f);
}

/* What the core gets for mode m: a table whose every entry counts, then
 * does what the real one does (nothing where it has none). */
const struct bfs_serve_ops *__wrap_bfs_serve_ops_of(enum bfs_serve_mode m);
const struct bfs_serve_ops *__wrap_bfs_serve_ops_of(enum bfs_serve_mode m)
{
	const struct bfs_serve_ops *real = __real_bfs_serve_ops_of(m);

	if (!real)
		return NULL;
	fx.real[m] = real;
	fx.fake[m] = (struct bfs_serve_ops){
	    .name = real->name,
	    .create = f_create,
	    .stop = f_stop,
	    .destroy = f_destroy,
	    .stop_kernel = f_stop_kernel,
	    .kernel_busy = f_kernel_busy,
	    .settle = f_settle,
	    .open = f_open,
	    .read = f_read,
	    .done = f_done,
	    .release = f_release,
	    .free = f_free,
	};
	return &fx.fake[m];
}

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
	return atomic_fetch_add(&fx.next_id, 1) + 1;
}

static void k_backing_close(void *arg, int id)
{
}

static const struct bfs_serve_kernel fake_kernel = {
    .store = k_store,
    .inval = k_inval,
    .backing_open = k_backing_open,
    .backing_close = k_backing_close,
};

static void fill_rows(void *x, size_t n)
{
	for (size_t i = 0; i < n; i++)
		((uint8_t *)x)[i] = (uint8_t)(i * 17 + i / ROW);
}

static void fill_labels(void *y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		((int64_t *)y)[i] = 100 + (int64_t)i;
}

/* x: uint8 [N, ROW], y: int64 [N], shuffled (seed 7) into batches of B. */
static int setup(void **state)
{
	const struct tf_field fields[] = {
	    {"x", BFS_DT_UINT8, 2, {N, ROW}, .fill = fill_rows},
	    {"y", BFS_DT_INT64, 1, {N}, .fill = fill_labels},
	};
	const struct tf_spec spec = {.name = "ways.pt",
				     .fields = fields,
				     .nfields = 2,
				     .order = {.sampler = BFS_SAMPLER_RANDOM,
					       .n = N,
					       .batch_size = B,
					       .seed = 7,
					       .compat = BFS_TORCH_1_13,
					       .epochs = EPOCHS}};

	return tf_setup(&fx.tf, &spec);
}

static int teardown(void **state)
{
	return tf_teardown(&fx.tf);
}

/* Every mode but auto has a way: open and read at least, named as the
 * mode, and the name parses back to it; auto and unknown modes have none,
 * and a serve is not made in auto (the adapter decides first). */
static void every_mode_has_a_way_named_as_the_mode(void **state)
{
	const struct bfs_serve_opts so = {.mode = BFS_SERVE_AUTO};
	const struct bfs_pool_opts po = {.workers = 1, .timeout_ms = 30000};
	struct bfs_serve *s;

	for (int m = BFS_SERVE_PASSTHROUGH; m < MODES; m++) {
		const struct bfs_serve_ops *o = __real_bfs_serve_ops_of(m);
		enum bfs_serve_mode back = BFS_SERVE_AUTO;

		assert_non_null(o);
		assert_non_null(o->open);
		assert_non_null(o->read);
		assert_string_equal(o->name, bfs_serve_mode_name(m));
		assert_int_equal(bfs_serve_mode_parse(o->name, &back), 0);
		assert_int_equal(back, m);
	}
	assert_null(__real_bfs_serve_ops_of(BFS_SERVE_AUTO));
	assert_null(__real_bfs_serve_ops_of(MODES));
	assert_string_equal(bfs_serve_mode_name(BFS_SERVE_AUTO), "auto");
	assert_int_equal(
	    bfs_serve_mode_parse("zero", &(enum bfs_serve_mode){0}), -EINVAL);
	assert_int_equal(bfs_serve_create(&s, fx.tf.ds, fx.tf.order,
					  &fx.tf.layout, &po, &so,
					  &fake_kernel),
			 -EINVAL);
	assert_null(s);
}

/* The bytes of batch id, as the layout writes them; *size. */
static uint8_t *expected(struct bfs_batch_id id, uint64_t *size)
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

static int calls(enum bfs_serve_mode m, enum op op)
{
	return atomic_load(&fx.calls[m][op]);
}

/* Read and release a text, a stream and its offsets in s: none of it
 * reaches the mode's table. */
static void other_kinds(struct bfs_serve *s, enum bfs_serve_mode m)
{
	int before[OPS];
	struct bfs_serve_how how;
	struct bfs_serve_reply r;
	struct bfs_file *f;

	for (int op = 0; op < OPS; op++)
		before[op] = calls(m, op);
	assert_int_equal(
	    bfs_serve_open_text(s, strdup("text\n"), 5, false, &f, &how), 0);
	assert_int_equal(bfs_serve_read(s, f, 0, 5, &r), 0);
	assert_memory_equal(r.iov[0].iov_base, "text\n", 5);
	bfs_serve_done(s, &r);
	bfs_serve_release(s, f);
	assert_int_equal(bfs_serve_open_stream(
			     s, (struct bfs_batch_id){.epoch = 1}, &f, &how),
			 0);
	assert_true(how.direct_io);
	assert_int_equal(bfs_serve_read(s, f, 100, 5000, &r), 0);
	assert_int_equal(r.iovcnt, 1);
	bfs_serve_done(s, &r);
	bfs_serve_release(s, f);
	assert_int_equal(bfs_serve_open_offsets(
			     s, (struct bfs_batch_id){.epoch = 1}, &f, &how),
			 0);
	assert_int_equal(bfs_serve_read(s, f, 0, 21, &r), 0);
	assert_memory_equal(r.iov[0].iov_base, "00000000000000000000\n", 21);
	bfs_serve_done(s, &r);
	bfs_serve_release(s, f);
	for (int op = 0; op < OPS; op++)
		assert_int_equal(calls(m, op), before[op]);
}

/* One mount in mode m: each call of a batch file and of the mount goes
 * through m's table, once, and the bytes are the batch's. */
static void serve_through_the_table(enum bfs_serve_mode m)
{
	const struct bfs_pool_opts po = {
	    .workers = 2, .budget_bytes = 64 << 20, .timeout_ms = 30000};
	const struct bfs_serve_opts so = {
	    .mode = m, .page_cache_bytes = 64 << 20, .zero_copy = true};
	struct bfs_batch_id id = {.epoch = 1, .batch = 2};
	uint64_t size;
	uint8_t *want = expected(id, &size);
	struct bfs_serve_how how;
	struct bfs_serve_reply r;
	struct bfs_file *f;
	struct bfs_serve *s;

	memset(fx.calls[m], 0, sizeof(fx.calls[m]));
	assert_int_equal(bfs_serve_create(&s, fx.tf.ds, fx.tf.order,
					  &fx.tf.layout, &po, &so,
					  &fake_kernel),
			 0);
	assert_int_equal(bfs_serve_mode(s), m);
	assert_int_equal(calls(m, OP_CREATE), 1);
	assert_int_equal(bfs_serve_open_batch(s, id, 0, &f, &how), 0);
	assert_int_equal(calls(m, OP_OPEN), 1);
	for (uint64_t off = 0; off < size; off += size / 2 + 1) {
		int rc = bfs_serve_read(s, f, off, size / 2 + 1, &r);

		if (m == BFS_SERVE_PASSTHROUGH) { /* the kernel reads */
			assert_int_equal(rc, -EIO);
		} else {
			uint64_t at = off;

			assert_int_equal(rc, 0);
			for (int i = 0; i < r.iovcnt; i++) {
				assert_memory_equal(r.iov[i].iov_base,
						    want + at,
						    r.iov[i].iov_len);
				at += r.iov[i].iov_len;
			}
			assert_true(at > off);
		}
		bfs_serve_done(s, &r);
	}
	assert_int_equal(calls(m, OP_READ), 2);
	assert_int_equal(calls(m, OP_DONE), 2);
	assert_int_equal(calls(m, OP_FREE), 0);
	bfs_serve_release(s, f);
	assert_int_equal(calls(m, OP_RELEASE), 1);
	assert_int_equal(calls(m, OP_FREE), 1);
	other_kinds(s, m);
	bfs_serve_settle(s);
	assert_int_equal(calls(m, OP_SETTLE), 1);
	bfs_serve_stop_kernel(s);
	assert_int_equal(calls(m, OP_STOP_KERNEL), 1);
	assert_false(bfs_serve_kernel_busy(s));
	assert_int_equal(calls(m, OP_KERNEL_BUSY), 1);
	/* a file still open at destroy is freed there, through its way */
	assert_int_equal(bfs_serve_open_batch(s, id, 0, &f, &how), 0);
	bfs_serve_destroy(s);
	assert_int_equal(calls(m, OP_FREE), 2);
	assert_int_equal(calls(m, OP_STOP), 1);
	assert_int_equal(calls(m, OP_DESTROY), 1);
	assert_int_equal(calls(m, OP_OPEN), 2);
	assert_int_equal(calls(m, OP_RELEASE), 1);
	free(want);
}

static void passthrough_goes_through_its_table(void **state)
{
	serve_through_the_table(BFS_SERVE_PASSTHROUGH);
}

static void push_goes_through_its_table(void **state)
{
	serve_through_the_table(BFS_SERVE_PUSH);
}

static void cache_goes_through_its_table(void **state)
{
	serve_through_the_table(BFS_SERVE_CACHE);
}

static void direct_goes_through_its_table(void **state)
{
	serve_through_the_table(BFS_SERVE_DIRECT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(every_mode_has_a_way_named_as_the_mode),
	    cmocka_unit_test(passthrough_goes_through_its_table),
	    cmocka_unit_test(push_goes_through_its_table),
	    cmocka_unit_test(cache_goes_through_its_table),
	    cmocka_unit_test(direct_goes_through_its_table),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
