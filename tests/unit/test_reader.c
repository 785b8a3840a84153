/* The reader (fs/reader.h) reads file ranges exactly, by io_uring and by
 * threads; a range past the end of its file is -EIO; reads ahead are
 * counted, each at most BFS_READER_MAX bytes; the kinds' names parse back,
 * and "none" makes no reader. Under faults of the ring
 * (BATCHFS_DEBUG_URING_*, and real signals) a group of reads
 * (bfs_reader_read_all) stays exact and never hangs, and no read lands
 * in a caller's buffer after bfs_reader_read_all returned:
 * - a wait cut short (EINTR: a signal, SIGSTOP, a cgroup freeze) is
 *   waited again: reads in flight are reaped before the call returns;
 * - a submit that fails, submitting nothing (once, or always), or that
 *   takes only some reads: what was not taken is read otherwise, and is
 *   never handed to the kernel later into the caller's old buffer;
 * - bfs_reader_submit counts every read the kernel took, also those a
 *   failed submit left for the next one (stats: in flight, completed).
 * Reads in flight are held there by pipes the test writes to late. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "fs/reader.h"

#define FILE_BYTES ((size_t)(1 << 20) + 123)
#define LIVENESS_S 30 /* a bound on waits, not a measurement */
#define PIPE_READ  4096u
#define NPIPES	   2

static char path[512];
static uint8_t *content; /* the file's bytes */

static int setup(void **state)
{
	const char *tmp = getenv("BFS_TEST_TMP");
	uint32_t x = 12345;
	int fd;

	snprintf(path, sizeof(path), "%s/reader.XXXXXX", tmp ? tmp : "/tmp");
	fd = mkstemp(path);
	content = malloc(FILE_BYTES);
	if (fd < 0 || !content)
		return -1;
	for (size_t i = 0; i < FILE_BYTES; i++) {
		x = x * 1103515245u + 12345u;
		content[i] = (uint8_t)(x >> 16);
	}
	if (write(fd, content, FILE_BYTES) != (ssize_t)FILE_BYTES)
		return -1;
	return close(fd);
}

static int teardown(void **state)
{
	unlink(path);
	free(content);
	return 0;
}

/* A reader of 'kind' with the faults 'submit_fail', 'submit_short',
 * 'eintr' (BATCHFS_DEBUG_URING_*); skips the test when io_uring cannot be
 * set up here. */
static struct bfs_reader *reader(enum bfs_reader_kind kind, unsigned depth,
				 unsigned submit_fail, unsigned submit_short,
				 unsigned eintr)
{
	struct bfs_reader *r;
	char why[200], v[3][16];
	int rc;

	snprintf(v[0], sizeof(v[0]), "%u", submit_fail);
	snprintf(v[1], sizeof(v[1]), "%u", submit_short);
	snprintf(v[2], sizeof(v[2]), "%u", eintr);
	setenv("BATCHFS_DEBUG_URING_SUBMIT_FAIL", v[0], 1);
	setenv("BATCHFS_DEBUG_URING_SUBMIT_SHORT", v[1], 1);
	setenv("BATCHFS_DEBUG_URING_EINTR", v[2], 1);
	rc = bfs_reader_create(&r, kind, depth, why, sizeof(why));
	unsetenv("BATCHFS_DEBUG_URING_SUBMIT_FAIL");
	unsetenv("BATCHFS_DEBUG_URING_SUBMIT_SHORT");
	unsetenv("BATCHFS_DEBUG_URING_EINTR");
	if (rc < 0 && kind == BFS_READER_IO_URING) {
		print_message("io_uring cannot be set up here: %s\n", why);
		skip();
	}
	assert_int_equal(rc, 0);
	assert_int_equal(bfs_reader_kind(r), kind);
	return r;
}

/* n ranges of the file, of many sizes and alignments (some end at its
 * end), each into a buffer of its own; free with free_reads. */
static struct bfs_read *file_reads(int fd, size_t n)
{
	struct bfs_read *rd = calloc(n, sizeof(*rd));

	assert_non_null(rd);
	for (size_t i = 0; i < n; i++) {
		uint64_t len = i % 7 == 3 ? 1 : (i * 7919) % 150000 + 1;
		uint64_t off = i % 5 == 4 ? FILE_BYTES - len
					  : (i * 104729) % (FILE_BYTES - len);

		rd[i] = (struct bfs_read){fd, off, len, malloc(len)};
		assert_non_null(rd[i].buf);
		memset(rd[i].buf, 0xee, len);
	}
	return rd;
}

static void free_reads(struct bfs_read *rd, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(rd[i].buf);
	free(rd);
}

/* Every read of rd[0..n) holds the file's bytes. */
static void expect_file_bytes(const struct bfs_read *rd, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (memcmp(rd[i].buf, content + rd[i].off, rd[i].len))
			fail_msg("read %zu ([%llu, +%llu)): other bytes than "
				 "the file's",
				 i, (unsigned long long)rd[i].off,
				 (unsigned long long)rd[i].len);
}

/* Every byte of rd[0..n)'s buffers is 'c'. */
static void expect_untouched(const struct bfs_read *rd, size_t n, int c)
{
	for (size_t i = 0; i < n; i++)
		for (uint64_t j = 0; j < rd[i].len; j++)
			if (((uint8_t *)rd[i].buf)[j] != (uint8_t)c)
				fail_msg("read %zu: byte %llu written after "
					 "bfs_reader_read_all returned",
					 i, (unsigned long long)j);
}

/* ---- bfs_reader_read_all under a liveness bound --------------------- */

struct job {
	struct bfs_reader *r;
	const struct bfs_read *rd;
	size_t n;
	int rc;
	int fill; /* >= 0: then fill the buffers with it (reuse them) */
};

static void *job_main(void *arg)
{
	struct job *j = arg;

	j->rc = bfs_reader_read_all(j->r, j->rd, j->n);
	for (size_t i = 0; j->fill >= 0 && i < j->n; i++)
		memset(j->rd[i].buf, j->fill, j->rd[i].len);
	return NULL;
}

/* Wait for thread t at most LIVENESS_S; fails the test if it still runs
 * (what it uses is then left to it). */
static void join_bounded(pthread_t t)
{
	struct timespec end;

	clock_gettime(CLOCK_REALTIME, &end);
	end.tv_sec += LIVENESS_S;
	if (pthread_timedjoin_np(t, NULL, &end) != 0)
		fail_msg("bfs_reader_read_all still waits after %d s: it "
			 "hangs (waits for reads never submitted?)",
			 LIVENESS_S);
}

/* ---- plain reads ----------------------------------------------------- */

static void reads_ranges_exactly(enum bfs_reader_kind kind)
{
	int fd = open(path, O_RDONLY);
	struct bfs_reader *r = reader(kind, 4, 0, 0, 0);
	struct bfs_read *rd = file_reads(fd, 40);
	struct bfs_reader_stats s;

	assert_int_equal(bfs_reader_read_all(r, rd, 40), 0);
	expect_file_bytes(rd, 40);
	bfs_reader_stats(r, &s);
	assert_int_equal(s.in_flight, 0);
	assert_int_equal(s.reads, 40);
	bfs_reader_destroy(r);
	free_reads(rd, 40);
	close(fd);
}

static void io_uring_reads_ranges_exactly(void **state)
{
	reads_ranges_exactly(BFS_READER_IO_URING);
}

static void threads_read_ranges_exactly(void **state)
{
	reads_ranges_exactly(BFS_READER_THREADS);
}

/* A range that ends at the end of the file is whole; one past it comes
 * back short: -EIO. */
static void range_past_the_end_is_eio(enum bfs_reader_kind kind)
{
	int fd = open(path, O_RDONLY);
	struct bfs_reader *r = reader(kind, 4, 0, 0, 0);
	uint8_t a[100], b[100];
	struct bfs_read end = {fd, FILE_BYTES - sizeof(a), sizeof(a), a};
	struct bfs_read past[2] = {end, {fd, FILE_BYTES - 50, sizeof(b), b}};

	assert_int_equal(bfs_reader_read_all(r, &end, 1), 0);
	expect_file_bytes(&end, 1);
	memset(a, 0, sizeof(a));
	assert_int_equal(bfs_reader_read_all(r, past, 2), -EIO);
	expect_file_bytes(&end, 1); /* the whole one is read all the same */
	assert_memory_equal(b, content + FILE_BYTES - 50, 50);
	bfs_reader_destroy(r);
	close(fd);
}

static void io_uring_range_past_the_end_is_eio(void **state)
{
	range_past_the_end_is_eio(BFS_READER_IO_URING);
}

static void threads_range_past_the_end_is_eio(void **state)
{
	range_past_the_end_is_eio(BFS_READER_THREADS);
}

/* ---- reads held in flight by pipes ------------------------------------ */

struct pipes {
	int fd[NPIPES][2];
	unsigned delay_ms; /* the writer writes after this */
	pthread_t writer;
};

static void *writer_main(void *arg)
{
	struct pipes *p = arg;
	uint8_t data[PIPE_READ];

	usleep(p->delay_ms * 1000u);
	for (int i = 0; i < NPIPES; i++) {
		memset(data, 'A' + i, sizeof(data));
		if (write(p->fd[i][1], data, sizeof(data)) != sizeof(data))
			abort();
	}
	return NULL;
}

static void pipes_open(struct pipes *p, struct bfs_read *rd, uint8_t *buf)
{
	for (int i = 0; i < NPIPES; i++) {
		assert_int_equal(pipe(p->fd[i]), 0);
		rd[i] = (struct bfs_read){p->fd[i][0], 0, PIPE_READ,
					  buf + i * PIPE_READ};
	}
	memset(buf, 0xee, NPIPES * PIPE_READ);
}

/* The pipes are written to 'delay_ms' from now, from a thread. */
static void pipes_write_later(struct pipes *p, unsigned delay_ms)
{
	p->delay_ms = delay_ms;
	assert_int_equal(pthread_create(&p->writer, NULL, writer_main, p), 0);
}

static void pipes_close(struct pipes *p)
{
	pthread_join(p->writer, NULL);
	for (int i = 0; i < NPIPES; i++) {
		close(p->fd[i][0]);
		close(p->fd[i][1]);
	}
}

/* What the pipes' reads hold once written: 'A's, then 'B's. */
static void expect_pipe_bytes(const uint8_t *buf)
{
	for (int i = 0; i < NPIPES; i++)
		for (unsigned j = 0; j < PIPE_READ; j++)
			if (buf[i * PIPE_READ + j] != 'A' + i)
				fail_msg("pipe %d: byte %u is %#x", i, j,
					 buf[i * PIPE_READ + j]);
}

/* Waits cut short by EINTR (five: the group's and more) are waited
 * again: the call returns once both reads are in, with their bytes, and
 * nothing lands in the buffer after it returned (the caller reuses it
 * then: fills it with 0x5a). */
static void eintr_in_a_wait_reaps_every_read(void **state)
{
	struct bfs_reader *r = reader(BFS_READER_IO_URING, 4, 0, 0, 5);
	uint8_t buf[NPIPES * PIPE_READ];
	struct bfs_read rd[NPIPES];
	struct pipes p;
	int rc;

	pipes_open(&p, rd, buf);
	pipes_write_later(&p, 300);
	rc = bfs_reader_read_all(r, rd, NPIPES);
	if (rc == 0)
		expect_pipe_bytes(buf);
	memset(buf, 0x5a, sizeof(buf)); /* reused */
	pipes_close(&p);		/* written: reads in flight complete */
	bfs_reader_destroy(r);		/* reaps what is left */
	expect_untouched(rd, NPIPES, 0x5a);
	assert_int_equal(rc, 0);
}

static void on_signal(int sig)
{
}

struct signalled {
	struct job j;
	pthread_t t;
	atomic_bool done, release;
};

/* The job, then alive until released: io_uring cancels the reads of a
 * thread that exits. */
static void *signalled_main(void *arg)
{
	struct signalled *s = arg;

	job_main(&s->j);
	atomic_store(&s->done, true);
	while (!atomic_load(&s->release))
		usleep(1000);
	return NULL;
}

/* The same with real signals: SIGUSR1 (a handler, so the wait returns
 * EINTR) sent again and again to the thread waiting for the reads, then
 * the pipes written. That thread reuses the buffers once the call
 * returns: no read may land there after (the reader destroyed, which
 * waits for any still in flight). */
static void signals_during_the_wait_reap_every_read(void **state)
{
	struct bfs_reader *r = reader(BFS_READER_IO_URING, 4, 0, 0, 0);
	struct sigaction sa = {.sa_handler = on_signal}, old;
	static uint8_t buf[NPIPES * PIPE_READ];
	static struct signalled s;
	struct bfs_read rd[NPIPES];
	struct pipes p;

	pipes_open(&p, rd, buf);
	sigemptyset(&sa.sa_mask);
	assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
	s.j = (struct job){r, rd, NPIPES, 0, 0x5a};
	atomic_init(&s.done, false);
	atomic_init(&s.release, false);
	assert_int_equal(pthread_create(&s.t, NULL, signalled_main, &s), 0);
	for (int i = 0; i < 30 && !atomic_load(&s.done); i++) {
		usleep(10000);
		pthread_kill(s.t, SIGUSR1);
	}
	pipes_write_later(&p, 0);
	pipes_close(&p);
	bfs_reader_destroy(r);
	atomic_store(&s.release, true);
	pthread_join(s.t, NULL);
	sigaction(SIGUSR1, &old, NULL);
	expect_untouched(rd, NPIPES, 0x5a);
	assert_int_equal(s.j.rc, 0);
}

/* ---- submits that fail or fall short ---------------------------------- */

/* With 'submit_fail' / 'submit_short' faults, two groups on one reader:
 * each exact, within the liveness bound; the first one's buffers,
 * reused (0x5a) once it returned, are not written by the second (no
 * read left in the ring from the first goes out later). */
static void faulty_submits_stay_exact(unsigned submit_fail,
				      unsigned submit_short)
{
	int fd = open(path, O_RDONLY);
	struct bfs_reader *r =
	    reader(BFS_READER_IO_URING, 8, submit_fail, submit_short, 0);
	struct bfs_read *a = file_reads(fd, 40), *b = file_reads(fd, 40);
	struct bfs_reader_stats s;
	struct job *j;
	pthread_t t;

	for (int round = 0; round < 2; round++) {
		struct bfs_read *rd = round ? b : a;

		for (size_t i = 0; round && i < 40; i++)
			memset(a[i].buf, 0x5a, a[i].len); /* a reused */
		j = malloc(sizeof(*j));
		assert_non_null(j);
		*j = (struct job){r, rd, 40, -1, -1};
		assert_int_equal(pthread_create(&t, NULL, job_main, j), 0);
		join_bounded(t);
		assert_int_equal(j->rc, 0);
		free(j);
		expect_file_bytes(rd, 40);
	}
	bfs_reader_stats(r, &s);
	assert_int_equal(s.in_flight, 0);
	bfs_reader_destroy(r);
	expect_untouched(a, 40, 0x5a);
	free_reads(a, 40);
	free_reads(b, 40);
	close(fd);
}

static void a_submit_that_fails_once_is_read_otherwise(void **state)
{
	faulty_submits_stay_exact(1, 0);
}

static void submits_that_always_fail_are_read_otherwise(void **state)
{
	faulty_submits_stay_exact(1000000, 0);
}

static void short_submits_read_every_range(void **state)
{
	faulty_submits_stay_exact(0, 1000000);
}

static void short_and_failing_submits_read_every_range(void **state)
{
	faulty_submits_stay_exact(3, 5);
}

/* bfs_reader_submit: the first submit fails (its read stays in the
 * ring), the second takes both reads: two in flight, and both counted
 * once completed. */
static void reads_a_failed_submit_left_are_counted(void **state)
{
	struct bfs_reader *r = reader(BFS_READER_IO_URING, 4, 1, 0, 0);
	uint8_t buf[NPIPES * PIPE_READ];
	struct bfs_read rd[NPIPES];
	struct bfs_reader_stats s;
	struct pipes p;
	time_t end = time(NULL) + LIVENESS_S;

	pipes_open(&p, rd, buf);
	bfs_reader_submit(r, rd[0].fd, 0, PIPE_READ);
	bfs_reader_submit(r, rd[1].fd, 0, PIPE_READ);
	bfs_reader_stats(r, &s);
	assert_int_equal(s.in_flight, 2);
	pipes_write_later(&p, 0);
	pipes_close(&p);
	do {
		usleep(1000);
		bfs_reader_stats(r, &s);
	} while ((s.reads < 2 || s.in_flight) && time(NULL) < end);
	assert_int_equal(s.reads, 2);
	assert_int_equal(s.in_flight, 0);
	assert_int_equal(s.bytes, 2 * PIPE_READ);
	bfs_reader_destroy(r);
}

/* ---- reads ahead and names -------------------------------------------- */

/* Reads ahead (bfs_reader_submit) complete and are counted, by either
 * kind: a read asks for at most BFS_READER_MAX bytes, and one that runs
 * past the end of the file counts what it got. */
static void reads_ahead_are_counted(enum bfs_reader_kind kind)
{
	int fd = open(path, O_RDONLY);
	struct bfs_reader *r = reader(kind, 2, 0, 0, 0);
	struct bfs_reader_stats s;
	time_t end = time(NULL) + LIVENESS_S;

	bfs_reader_submit(r, fd, 0, 2 * BFS_READER_MAX);
	bfs_reader_submit(r, fd, 4096, 1000);
	bfs_reader_submit(r, fd, FILE_BYTES - 100, 1000);
	do {
		usleep(1000);
		bfs_reader_stats(r, &s);
	} while ((s.reads < 3 || s.in_flight) && time(NULL) < end);
	assert_int_equal(s.reads, 3);
	assert_int_equal(s.in_flight, 0);
	assert_int_equal(s.bytes, BFS_READER_MAX + 1000 + 100);
	bfs_reader_destroy(r);
	close(fd);
}

static void io_uring_reads_ahead_are_counted(void **state)
{
	reads_ahead_are_counted(BFS_READER_IO_URING);
}

static void threads_reads_ahead_are_counted(void **state)
{
	reads_ahead_are_counted(BFS_READER_THREADS);
}

/* Each kind's name parses back to it (what --reader takes); another name
 * is -EINVAL; "none" makes no reader, and says so. */
static void kind_names_parse_back_and_none_is_no_reader(void **state)
{
	struct bfs_reader *r = (struct bfs_reader *)1;
	enum bfs_reader_kind k;
	char why[200] = "";

	for (int i = BFS_READER_AUTO; i <= BFS_READER_NONE; i++) {
		assert_int_equal(
		    bfs_reader_kind_parse(
			bfs_reader_kind_name((enum bfs_reader_kind)i), &k),
		    0);
		assert_int_equal(k, i);
	}
	assert_int_equal(bfs_reader_kind_parse("uring", &k), -EINVAL);
	assert_int_equal(
	    bfs_reader_create(&r, BFS_READER_NONE, 4, why, sizeof(why)), 0);
	assert_null(r);
	assert_non_null(strstr(why, "none"));
	bfs_reader_destroy(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(io_uring_reads_ranges_exactly),
	    cmocka_unit_test(threads_read_ranges_exactly),
	    cmocka_unit_test(io_uring_range_past_the_end_is_eio),
	    cmocka_unit_test(threads_range_past_the_end_is_eio),
	    cmocka_unit_test(eintr_in_a_wait_reaps_every_read),
	    cmocka_unit_test(signals_during_the_wait_reap_every_read),
	    cmocka_unit_test(a_submit_that_fails_once_is_read_otherwise),
	    cmocka_unit_test(submits_that_always_fail_are_read_otherwise),
	    cmocka_unit_test(short_submits_read_every_range),
	    cmocka_unit_test(short_and_failing_submits_read_every_range),
	    cmocka_unit_test(reads_a_failed_submit_left_are_counted),
	    cmocka_unit_test(io_uring_reads_ahead_are_counted),
	    cmocka_unit_test(threads_reads_ahead_are_counted),
	    cmocka_unit_test(kind_names_parse_back_and_none_is_no_reader),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
