/* The loader's CUDA backend against the fake driver (fake_libcuda.c, linked
 * and found through LD_LIBRARY_PATH; run by test_loader_cuda_fake.sh).
 *
 * Pins down: the stream/event protocol (the copy into a device slot waits
 * on the consumer's "released" event of the slot's previous batch; "ready"
 * is recorded right after each copy; the consumer stream waits on "ready"
 * inside next()), one host registration per ring at open and none until
 * close, every object freed at close (also with batches outstanding), and
 * the bytes that reach "device" memory, checked in stream order by a
 * delayed check standing in for the consumer's kernel. */
#include "tests/loader/cuda_util.h"
#include "tests/loader/fake_libcuda.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MARK_NEXT = 1, MARK_RELEASE = 2 };

/* Index of the next (dir 1) or previous (dir -1) stream operation on
 * 'stream' from i (other threads' calls interleave in the log). */
static size_t on_stream(const struct fake_rec *r, size_t n, size_t i,
			unsigned stream, int dir)
{
	for (i += (size_t)dir; i < n; i += (size_t)dir)
		if ((r[i].op == F_COPY || r[i].op == F_RECORD ||
		     r[i].op == F_WAIT) &&
		    r[i].stream == stream)
			return i;
	fail_msg("no operation on stream %u", stream);
	return 0;
}

/* Walk the call log of one loader run (records from 'from') and check the
 * stream/event protocol. 'consumer' = the consumer's stream id. */
static void check_protocol(size_t from, unsigned consumer, unsigned nslots,
			   unsigned nb)
{
	const struct fake_rec *r;
	size_t n, ncopies = 0, nreg = 0, nunreg = 0, first_copy = 0,
		  last_copy = 0;
	unsigned copy_stream = ~0u;
	/* per device slot (by dptr): ready event, released event and whether
	 * a copy / a release happened */
	struct {
		uint64_t d;
		unsigned ready, released, copies, releases;
	} sl[16] = {{0}};
	unsigned nsl = 0;

	fake_log(&r, &n);
#define SLOT(dptr)                                                             \
	({                                                                     \
		unsigned _j = 0;                                               \
		while (_j < nsl && sl[_j].d != (dptr))                         \
			_j++;                                                  \
		if (_j == nsl) {                                               \
			assert_true(nsl < 16);                                 \
			sl[nsl++].d = (dptr);                                  \
		}                                                              \
		_j;                                                            \
	})
	for (size_t i = from; i < n; i++) {
		const struct fake_rec *x = &r[i];
		if (x->op == F_REGISTER) {
			nreg++;
			assert_int_equal(ncopies, 0);
		} else if (x->op == F_UNREGISTER) {
			nunreg++;
		} else if (x->op == F_COPY) {
			unsigned j = SLOT(x->a);
			if (copy_stream == ~0u) {
				copy_stream = x->stream;
				first_copy = i;
			}
			assert_int_equal(x->stream, copy_stream);
			assert_int_not_equal(copy_stream, consumer);
			last_copy = i;
			ncopies++;
			/* ready recorded right after the copy, same stream */
			size_t a = on_stream(r, n, i, copy_stream, 1);
			assert_int_equal(r[a].op, F_RECORD);
			if (sl[j].copies)
				assert_int_equal(r[a].event, sl[j].ready);
			sl[j].ready = r[a].event;
			/* reuse: released by the consumer, and waited for */
			if (sl[j].copies) {
				size_t p = on_stream(r, n, i, copy_stream, -1);
				assert_int_equal(sl[j].releases, sl[j].copies);
				assert_int_equal(r[p].op, F_WAIT);
				assert_int_equal(r[p].event, sl[j].released);
			}
			sl[j].copies++;
		} else if (x->op == F_MARK && x->a == MARK_NEXT) {
			unsigned j = SLOT(x->n);
			/* next() put a wait on the ready event of this slot,
			 * on the consumer stream, after the copy */
			size_t w = on_stream(r, n, i, consumer, -1);
			assert_true(w >= from);
			assert_int_equal(r[w].op, F_WAIT);
			assert_int_equal(r[w].event, sl[j].ready);
			assert_true(sl[j].copies == sl[j].releases + 1);
		} else if (x->op == F_MARK && x->a == MARK_RELEASE) {
			unsigned j = SLOT(x->n);
			/* release() records on the consumer stream */
			size_t a = on_stream(r, n, i, consumer, 1);
			assert_int_equal(r[a].op, F_RECORD);
			sl[j].released = r[a].event;
			sl[j].releases++;
		}
	}
	assert_int_equal(ncopies, nb);
	assert_int_equal(nsl, nslots);
	assert_int_equal(nreg, 1);
	assert_int_equal(nunreg, 1);
	assert_true(first_copy > 0 && last_copy > first_copy);
	/* the unregistration comes after the last copy (at close) */
	for (size_t i = from; i < n; i++)
		if (r[i].op == F_UNREGISTER)
			assert_true(i > last_copy);
}

/* Read nb batches in CUDA mode on the NULL stream; each batch is checked
 * on the consumer stream after 'check_delay' us, then released. */
static void run_ordered(unsigned nslots, unsigned nb, unsigned copy_delay,
			unsigned check_delay, unsigned flags)
{
	char dbuf[2100];
	const char *dir = ct_make_batches(dbuf, sizeof(dbuf), nb);
	struct bfs_loader *L;
	struct bfs_loader_batch b;
	struct bfs_loader_stats s;
	const struct fake_rec *r;
	size_t from, n;
	unsigned char *want;

	fake_config(copy_delay);
	fake_log(&r, &from);
	assert_int_equal(
	    bfs_loader_open(&L,
			    &(struct bfs_loader_opts){.dir = dir,
						      .mode = BFS_LOADER_CUDA,
						      .slots = nslots,
						      .readers = 3,
						      .chunk = 8192,
						      .flags = flags,
						      .log = ct_quiet}),
	    0);
	assert_int_equal(bfs_loader_mode(L), BFS_LOADER_CUDA);
	for (unsigned k = 0; k < nb; k++) {
		assert_int_equal(bfs_loader_next(L, &b, NULL), 0);
		fake_mark(MARK_NEXT, b.dev);
		assert_int_equal(b.index, k);
		want = ct_slurp(dir, k, &n);
		assert_int_equal(b.nbytes, n);
		if (flags & BFS_LOADER_KEEP_HOST) {
			assert_non_null(b.host);
			assert_memory_equal(b.host, want, n);
		} else {
			assert_null(b.host);
			assert_null(b.tensors[0].host);
		}
		assert_int_equal(b.ntensors, 3);
		/* tensors in file order: labels (I64), x (F32), rgb (U8) */
		assert_string_equal(b.tensors[0].name, "labels");
		assert_string_equal(b.tensors[1].name, "x");
		assert_int_equal(b.tensors[0].dev, b.dev + b.tensors[0].offset);
		assert_int_equal(b.tensors[0].offset, k == 1 ? 8192 : 4096);
		/* the consumer's "kernel": reads the whole batch later, in
		 * stream order */
		fake_enqueue_check(NULL, b.dev, want, n, check_delay);
		free(want);
		fake_mark(MARK_RELEASE, b.dev);
		assert_int_equal(bfs_loader_release(L, &b, NULL), 0);
	}
	assert_int_equal(bfs_loader_next(L, &b, NULL), BFS_LOADER_EOF);
	assert_int_equal(bfs_loader_stats(L, &s), 0);
	assert_int_equal(s.copies, nb);
	assert_int_equal(s.pin_calls, 1);
	bfs_loader_close(L);
	check_protocol(from, 0, nslots < nb ? nslots : nb, nb);
	ct_expect_clean_driver();
}

static void copies_wait_for_release_and_bytes_reach_the_device(void **st)
{
	struct fake_stats s0, s1;

	fake_stats(&s0);
	/* slow consumer: the copy engine must wait for the releases */
	run_ordered(2, 9, 100, 3000, 0);
	run_ordered(3, 10, 100, 2000, 0);
	/* slow copies: the consumer must wait for ready */
	run_ordered(3, 8, 3000, 0, 0);
	fake_stats(&s1);
	assert_int_equal(s1.checks - s0.checks, 27);
}

static void keep_host_keeps_the_host_copy_until_release(void **st)
{
	run_ordered(2, 6, 200, 500, BFS_LOADER_KEEP_HOST);
}

static void close_with_batches_outstanding_frees_everything(void **st)
{
	char dbuf[2100];
	const char *dir = ct_make_batches(dbuf, sizeof(dbuf), 6);
	struct bfs_loader *L;
	struct bfs_loader_batch b;

	fake_config(500);
	assert_int_equal(
	    bfs_loader_open(
		&L,
		&(struct bfs_loader_opts){.dir = dir, .mode = BFS_LOADER_CUDA}),
	    0);
	assert_int_equal(bfs_loader_next(L, &b, NULL), 0);
	assert_int_equal(bfs_loader_next(L, &b, NULL), 0);
	bfs_loader_close(L);
	ct_expect_clean_driver();
	/* and straight after open, copies possibly in flight */
	assert_int_equal(
	    bfs_loader_open(
		&L,
		&(struct bfs_loader_opts){.dir = dir, .mode = BFS_LOADER_CUDA}),
	    0);
	bfs_loader_close(L);
	ct_expect_clean_driver();
}

static void auto_picks_cuda_and_a_bad_device_is_refused(void **st)
{
	char dbuf[2100];
	const char *dir = ct_make_batches(dbuf, sizeof(dbuf), 2);
	struct bfs_loader *L;

	assert_int_equal(
	    bfs_loader_open(
		&L, &(struct bfs_loader_opts){.dir = dir, .log = ct_quiet}),
	    0);
	assert_int_equal(bfs_loader_mode(L), BFS_LOADER_CUDA);
	bfs_loader_close(L);
	assert_int_equal(
	    bfs_loader_open(&L,
			    &(struct bfs_loader_opts){.dir = dir,
						      .device = 1,
						      .mode = BFS_LOADER_CUDA,
						      .log = ct_quiet}),
	    -ENODEV);
	assert_int_equal(
	    bfs_loader_open(&L, &(struct bfs_loader_opts){.dir = dir,
							  .device = 1,
							  .log = ct_quiet}),
	    0);
	assert_int_equal(bfs_loader_mode(L), BFS_LOADER_CPU);
	bfs_loader_close(L);
	ct_expect_clean_driver();
}

/* While the consumer computes (a 2 ms "kernel" per batch on its stream,
 * 2 slots so the copies wait for releases), nothing the loader does waits
 * by spinning: on a real driver each such wait burns a core for as long as
 * the consumer's kernels run. */
static void no_wait_of_the_loader_spins_while_the_consumer_computes(void **st)
{
	char dbuf[2100];
	const char *dir = ct_make_batches(dbuf, sizeof(dbuf), 6);
	struct fake_stats s0, s1;
	struct bfs_loader *L;
	struct bfs_loader_batch b;
	struct bfs_loader_stats ls;

	fake_config(100);
	fake_stats(&s0);
	L = ct_open(dir, 2, 0);
	while (bfs_loader_next(L, &b, NULL) == 0) {
		fake_sleep(NULL, 2000);
		assert_int_equal(bfs_loader_release(L, &b, NULL), 0);
	}
	assert_int_equal(bfs_loader_stats(L, &ls), 0);
	assert_int_equal(ls.copies, 6);
	bfs_loader_close(L);
	fake_stats(&s1);
	assert_int_equal(s1.spin_syncs - s0.spin_syncs, 0);
	assert_true(s1.blocking_syncs > s0.blocking_syncs);
	ct_expect_clean_driver();
}

/* Calls of 'op' in the fake's log from record 'from' on. */
static size_t count_ops(size_t from, enum fake_op op)
{
	const struct fake_rec *r;
	size_t n, c = 0;

	fake_log(&r, &n);
	for (size_t i = from; i < n; i++)
		c += r[i].op == op;
	return c;
}

/* A training loop reopens the loader on each epoch's directory: the ring
 * is pinned and the device ring allocated once for all epochs (a new
 * loader per epoch may find the device memory taken by then), every
 * epoch's bytes arrive, and an epoch left half read is dropped. */
static void one_ring_serves_every_epoch(void **state)
{
	char d[3][2100];
	struct bfs_loader *L;
	struct bfs_loader_batch b;
	struct bfs_loader_stats ls;
	size_t from;
	const struct fake_rec *r;
	unsigned u;
	CUstream s = ct_stream(CU_STREAM_NON_BLOCKING, &u);

	for (int e = 0; e < 3; e++)
		ct_make_batches(d[e], sizeof(d[e]), 5);
	fake_config(100);
	fake_log(&r, &from);
	L = ct_open(d[0], 2, 0);
	ct_read_all(L, d[0], 5, s, 300);
	assert_int_equal(bfs_loader_reopen(L, d[1], NULL), 0);
	for (int k = 0; k < 2; k++) { /* half of epoch 1 */
		assert_int_equal(bfs_loader_next(L, &b, s), 0);
		assert_int_equal(bfs_loader_release(L, &b, s), 0);
	}
	assert_int_equal(bfs_loader_reopen(L, d[2], NULL), 0);
	ct_read_all(L, d[2], 5, s, 300);
	assert_int_equal(bfs_loader_reopen(L, d[1], NULL), 0);
	ct_read_all(L, d[1], 5, s, 0);
	assert_int_equal(bfs_loader_stats(L, &ls), 0);
	assert_int_equal(ls.pin_calls, 1);
	assert_int_equal(ls.batches, 17);
	bfs_loader_close(L);
	assert_int_equal(count_ops(from, F_REGISTER), 1);
	assert_int_equal(count_ops(from, F_ALLOC), 1);
	ct_stream_destroy(s);
	ct_expect_clean_driver();
}

/* Reopen keeps the loader as it was when it cannot switch: a batch still
 * held (-EBUSY), a file larger than the ring's slots (-EFBIG), a missing
 * directory; and clears a latched error when it can. */
static void reopen_refuses_what_it_cannot_serve(void **state)
{
	char d0[2100], d1[2100], big[2100], path[2200];
	struct bfs_loader *L;
	struct bfs_loader_batch b;
	unsigned char *blob = calloc(1, 3 << 20);
	FILE *f;

	ct_make_batches(d0, sizeof(d0), 3);
	ct_make_batches(d1, sizeof(d1), 3);
	ct_make_batches(big, sizeof(big), 1);
	snprintf(path, sizeof(path), "%s/batch_0", big);
	f = fopen(path, "ab"); /* 3 MiB more than a 2 MiB slot */
	assert_int_equal(fwrite(blob, 1, 3 << 20, f), 3 << 20);
	fclose(f);
	free(blob);
	/* batch 2's header corrupt (its size unchanged): it fails whenever it
	 * is read (a truncation after the open raced with its read, which
	 * may come as soon as batch 0's copy is done) */
	snprintf(path, sizeof(path), "%s/batch_2", d0);
	f = fopen(path, "r+b");
	assert_non_null(f);
	assert_int_equal(fseek(f, 8, SEEK_SET), 0);
	assert_int_equal(fputc('X', f), 'X');
	fclose(f);
	L = ct_open(d0, 2, 0);
	assert_int_equal(bfs_loader_next(L, &b, NULL), 0);
	assert_int_equal(bfs_loader_reopen(L, d1, NULL), -EBUSY);
	assert_true(ct_logged("still held"));
	assert_int_equal(bfs_loader_release(L, &b, NULL), 0);
	assert_int_equal(bfs_loader_reopen(L, big, NULL), -EFBIG);
	assert_true(ct_logged("open a new loader"));
	assert_int_equal(bfs_loader_reopen(L, "/nonexistent", NULL), -ENOENT);
	assert_int_equal(bfs_loader_reopen(L, NULL, NULL), -EINVAL);
	/* still epoch 0, at batch 1 */
	assert_int_equal(bfs_loader_next(L, &b, NULL), 0);
	assert_int_equal(b.index, 1);
	assert_int_equal(bfs_loader_release(L, &b, NULL), 0);
	/* a failure latched in one epoch is gone in the next */
	assert_int_equal(bfs_loader_next(L, &b, NULL), -EBADMSG);
	assert_int_equal(bfs_loader_reopen(L, d1, NULL), 0);
	assert_string_equal(bfs_loader_errmsg(L), "");
	ct_read_all(L, d1, 3, NULL, 0);
	bfs_loader_close(L);
	ct_expect_clean_driver();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(
		copies_wait_for_release_and_bytes_reach_the_device),
	    cmocka_unit_test(keep_host_keeps_the_host_copy_until_release),
	    cmocka_unit_test(close_with_batches_outstanding_frees_everything),
	    cmocka_unit_test(auto_picks_cuda_and_a_bad_device_is_refused),
	    cmocka_unit_test(
		no_wait_of_the_loader_spins_while_the_consumer_computes),
	    cmocka_unit_test(one_ring_serves_every_epoch),
	    cmocka_unit_test(reopen_refuses_what_it_cannot_serve),
	};
	return ct_run(tests, sizeof(tests) / sizeof(tests[0]));
}
