/* fs/reader: reads of file ranges, many in flight (reader.h): reads ahead
 * into the page cache, and groups of reads into their caller's buffers
 * (the fetch backends made of them: fetch_local.c).
 *
 * A read ahead lands in one shared scratch buffer whose contents nobody
 * looks at (reads racing into it are harmless): the point is the pages
 * they leave in the page cache. So memory is one buffer of BFS_READER_MAX
 * bytes however deep the queue. A group's reads land in its caller's
 * buffers (below).
 *
 * io_uring: one ring of 'depth' entries under a mutex. A submit queues
 * one read and reaps what has completed; while 'depth' are in flight it
 * waits for a completion first. Buffered reads of uncached pages complete
 * asynchronously (the kernel's async buffered reads), so one thread keeps
 * 'depth' reads in flight. A completion thread is not needed: stats and
 * destroy reap too.
 *
 * In flight means taken by the kernel: counted from what the ring still
 * holds after a submit, so a submit that takes some entries or none is
 * counted right, and every read counted is reaped (destroy waits for
 * them, before the scratch goes). A wait cut short by a signal (EINTR:
 * SIGSTOP, a cgroup freeze) waits again. A group's reads
 * (bfs_reader_read_all) land in the caller's buffers, so the call returns
 * only once every read the kernel took has completed; when a submit takes
 * none, the entries it left are read with pread and turned into no-ops (a
 * later submit would still hand them over), and so is the rest of the
 * group. Entries prepared are kept (sqes) until taken, for that.
 *
 * Threads: a ring of queued ranges and THREADS_MAX threads at most, each
 * taking one and doing one pread.
 *
 * Lock: r->lock only, taken with no other lock held. It is held across
 * the ring's calls, waits for a completion included, and, for a group on
 * the ring, across the preads of the reads a failed submit left: that
 * reader is its caller's own, so nobody else waits for the lock. */
#include "fs/reader.h"

#include <assert.h>
#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fs/reader_impl.h"

#define THREADS_MAX 32u

static const char *const kind_names[] = {
    [BFS_READER_AUTO] = "auto",
    [BFS_READER_IO_URING] = "io_uring",
    [BFS_READER_THREADS] = "threads",
    [BFS_READER_NONE] = "none",
};

const char *bfs_reader_kind_name(enum bfs_reader_kind k)
{
	return k <= BFS_READER_NONE ? kind_names[k] : "?";
}

int bfs_reader_kind_parse(const char *s, enum bfs_reader_kind *out)
{
	for (int k = BFS_READER_AUTO; k <= BFS_READER_NONE; k++)
		if (!strcmp(s, kind_names[k])) {
			*out = (enum bfs_reader_kind)k;
			return 0;
		}
	return -EINVAL;
}

/* Reads waited for together (bfs_reader_read_all). [lock] */
struct group {
	size_t left;
	bool failed;
};

/* One queued read (threads): into the scratch, or into buf for a
 * group. */
struct range {
	int fd;
	uint64_t off, len;
	void *buf;
	struct group *g;
};

/* Faults to inject (tests): how many of the next submits fail (nothing
 * submitted), take only their first read, of the next waits fail with
 * EINTR. From BATCHFS_DEBUG_URING_* at creation (reader.h). */
struct faults {
	unsigned submit_fail, submit_short, wait_eintr;
};

struct bfs_reader {
	enum bfs_reader_kind kind;
	unsigned depth;
	void *scratch; /* BFS_READER_MAX bytes nobody reads */
	pthread_mutex_t lock;
	pthread_cond_t room; /* [lock] in_flight went down, or stop */
	pthread_cond_t work; /* [lock] threads: a range was queued */
	uint64_t in_flight;  /* [lock] queued or running */
	uint64_t reads;	     /* [lock] */
	uint64_t bytes;	     /* [lock] */
	bool stop;	     /* [lock] */
	/* io_uring */
	struct io_uring ring; /* [lock] */
	bool ring_up;
	struct io_uring_sqe **sqes; /* [lock] [depth]: the last prepared */
	uint64_t prepared;	    /* [lock] entries prepared, ever */
	struct faults fault;	    /* [lock] */
	/* threads */
	struct range *q; /* [lock] [depth], a ring */
	unsigned q_head, q_len;
	pthread_t *threads;
	unsigned nthreads;
};

/* ---- io_uring ------------------------------------------------------------ */

/* User data of an entry: read i of a group is i + 1 (bfs_reader_read_all),
 * a read into the scratch 0, an entry taken back (a no-op) NOP. */
#define NOP UINT64_MAX

/* An entry for a new read while fewer than 'depth' are in flight or
 * prepared, else NULL; kept in r->sqes until the kernel takes it. */
static struct io_uring_sqe *ring_entry(struct bfs_reader *r)
{
	struct io_uring_sqe *sqe;

	if (r->in_flight + io_uring_sq_ready(&r->ring) >= r->depth)
		return NULL;
	sqe = io_uring_get_sqe(&r->ring);
	if (sqe)
		r->sqes[r->prepared++ % r->depth] = sqe;
	return sqe;
}

/* Hand the entries prepared to the kernel, and count those it took as in
 * flight: all, or the first few (a short submit: the others stay
 * prepared, for the next). The count is the ring's (what is still
 * prepared), never a return value taken on trust. Returns how many it
 * took, or -errno when it took none of those prepared. [lock] */
static int ring_submit(struct bfs_reader *r)
{
	unsigned ready = io_uring_sq_ready(&r->ring), took;
	int rc;

	if (!ready)
		return 0;
	if (r->fault.submit_fail) {
		r->fault.submit_fail--;
		rc = -EAGAIN; /* as the kernel when out of memory */
	} else if (ready > 1 && r->fault.submit_short) {
		/* The kernel is shown the first entry only: liburing hands
		 * it those up to sqe_tail. */
		r->fault.submit_short--;
		r->ring.sq.sqe_tail -= ready - 1;
		rc = io_uring_submit(&r->ring);
		r->ring.sq.sqe_tail += ready - 1;
	} else {
		rc = io_uring_submit(&r->ring);
	}
	took = ready - io_uring_sq_ready(&r->ring);
	r->in_flight += took;
	if (took)
		return (int)took;
	return rc < 0 ? rc : -EAGAIN;
}

/* The next completion, however long it takes: a wait cut short (EINTR: a
 * signal, SIGSTOP, a cgroup freeze) waits again, for a read in flight
 * writes into memory that is not given back until it completes. Only
 * with reads in flight. [lock] */
static struct io_uring_cqe *ring_wait(struct bfs_reader *r)
{
	struct io_uring_cqe *cqe = NULL;

	for (;;) {
		int rc;

		if (r->fault.wait_eintr) {
			r->fault.wait_eintr--;
			rc = -EINTR; /* as a signal, SIGSTOP, a freeze */
		} else {
			rc = io_uring_wait_cqe(&r->ring, &cqe);
		}
		if (rc == 0)
			return cqe;
		if (rc != -EINTR) /* not expected: no busy loop meanwhile */
			nanosleep(&(struct timespec){0, 1000000}, NULL);
	}
}

/* Count one completion. [lock] */
static void completed(struct bfs_reader *r, int res)
{
	r->in_flight--;
	r->reads++;
	if (res > 0)
		r->bytes += (uint64_t)res;
	pthread_cond_broadcast(&r->room);
}

/* Count completion cqe and let it go. False when it is a read of group rd
 * that failed or came back short. [lock] */
static bool take(struct bfs_reader *r, struct io_uring_cqe *cqe,
		 const struct bfs_read *rd)
{
	uint64_t d = io_uring_cqe_get_data64(cqe);
	int res = cqe->res;

	io_uring_cqe_seen(&r->ring, cqe);
	if (d == NOP) {
		r->in_flight--;
		return true;
	}
	assert(!d || rd); /* a group's read outside bfs_reader_read_all */
	completed(r, res);
	return !d || (res >= 0 && (uint64_t)res == rd[d - 1].len);
}

/* Take what has completed; with 'wait', at least one when any is in
 * flight. False when a read of group rd failed or came back short.
 * [lock] */
static bool reap(struct bfs_reader *r, bool wait, const struct bfs_read *rd)
{
	struct io_uring_cqe *cqe;
	bool ok = true;

	if (wait && r->in_flight && !take(r, ring_wait(r), rd))
		ok = false;
	while (r->in_flight && io_uring_peek_cqe(&r->ring, &cqe) == 0)
		if (!take(r, cqe, rd))
			ok = false;
	return ok;
}

void bfs_reader_uring_submit(struct bfs_reader *r, int fd, uint64_t off,
			     uint64_t len)
{
	struct io_uring_sqe *sqe;

	pthread_mutex_lock(&r->lock);
	while (!(sqe = ring_entry(r)) && r->in_flight)
		reap(r, true, NULL);
	if (sqe) { /* else the ring is full of reads not taken: dropped */
		io_uring_prep_read(sqe, fd, r->scratch, (unsigned)len,
				   (__u64)off);
		io_uring_sqe_set_data64(sqe, 0);
	}
	/* Reads a failed submit did not hand over stay prepared, for the
	 * next one: into the scratch, which lasts as long as the reader. */
	ring_submit(r);
	reap(r, false, NULL);
	pthread_mutex_unlock(&r->lock);
}

/* ---- threads ------------------------------------------------------------- */

static void *reader_main(void *arg)
{
	struct bfs_reader *r = arg;
	sigset_t all;

	sigfillset(&all); /* reads of a shrunk file fail: no fault here */
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	pthread_mutex_lock(&r->lock);
	for (;;) {
		struct range g;
		ssize_t got;

		while (!r->stop && !r->q_len)
			pthread_cond_wait(&r->work, &r->lock);
		if (!r->q_len)
			break; /* stopped, nothing left */
		g = r->q[r->q_head];
		r->q_head = (r->q_head + 1) % r->depth;
		r->q_len--;
		pthread_mutex_unlock(&r->lock);
		got = pread(g.fd, g.buf ? g.buf : r->scratch, (size_t)g.len,
			    (off_t)g.off);
		pthread_mutex_lock(&r->lock);
		if (g.g) {
			g.g->failed |= got != (ssize_t)g.len;
			g.g->left--;
		}
		completed(r, (int)got);
	}
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

void bfs_reader_threads_submit(struct bfs_reader *r, int fd, uint64_t off,
			       uint64_t len)
{
	pthread_mutex_lock(&r->lock);
	while (!r->stop && r->in_flight >= r->depth)
		pthread_cond_wait(&r->room, &r->lock);
	if (!r->stop) {
		r->q[(r->q_head + r->q_len) % r->depth] =
		    (struct range){fd, off, len, NULL, NULL};
		r->q_len++;
		r->in_flight++;
		pthread_cond_signal(&r->work);
	}
	pthread_mutex_unlock(&r->lock);
}

static int threads_start(struct bfs_reader *r)
{
	unsigned n = r->depth < THREADS_MAX ? r->depth : THREADS_MAX;

	r->q = calloc(r->depth, sizeof(*r->q));
	r->threads = calloc(n, sizeof(*r->threads));
	if (!r->q || !r->threads)
		return -ENOMEM;
	for (; r->nthreads < n; r->nthreads++)
		if (pthread_create(&r->threads[r->nthreads], NULL, reader_main,
				   r))
			return r->nthreads ? 0 : -EAGAIN;
	return 0;
}

/* Group reads on the threads: queued as room allows, then waited for. */
int bfs_reader_threads_read_all(struct bfs_reader *r, const struct bfs_read *rd,
				size_t n)
{
	struct group g = {.left = n};

	pthread_mutex_lock(&r->lock);
	for (size_t i = 0; i < n; i++) {
		while (!r->stop && r->in_flight >= r->depth)
			pthread_cond_wait(&r->room, &r->lock);
		if (r->stop) {
			g.left -= n - i;
			g.failed = true;
			break;
		}
		r->q[(r->q_head + r->q_len) % r->depth] = (struct range){
		    rd[i].fd, rd[i].off, rd[i].len, rd[i].buf, &g};
		r->q_len++;
		r->in_flight++;
		pthread_cond_signal(&r->work);
	}
	while (g.left)
		pthread_cond_wait(&r->room, &r->lock);
	pthread_mutex_unlock(&r->lock);
	return g.failed ? -EIO : 0;
}

/* rd's read with pread: false when it failed or came back short. */
static bool read_one(const struct bfs_read *rd)
{
	ssize_t got;

	do
		got = pread(rd->fd, rd->buf, (size_t)rd->len, (off_t)rd->off);
	while (got < 0 && errno == EINTR);
	return got == (ssize_t)rd->len;
}

/* The entries the kernel did not take (a submit failed): group rd's reads
 * among them are done here with pread, and every one becomes a no-op, for
 * a later submit may still hand them to the kernel, and a read must not
 * land in a buffer given back to its caller. False when a read failed or
 * came back short. [lock] */
static bool take_back(struct bfs_reader *r, const struct bfs_read *rd)
{
	unsigned ready = io_uring_sq_ready(&r->ring);
	bool ok = true;

	for (unsigned i = 0; i < ready; i++) {
		struct io_uring_sqe *sqe =
		    r->sqes[(r->prepared - ready + i) % r->depth];
		uint64_t d = sqe->user_data;

		if (d && d != NOP && !read_one(&rd[d - 1]))
			ok = false;
		io_uring_prep_nop(sqe);
		io_uring_sqe_set_data64(sqe, NOP);
	}
	return ok;
}

/* Group reads on the ring (the caller's own): 'depth' in flight. Every
 * read the kernel took has completed when this returns; once a submit
 * fails, what it did not take and the rest of the group are read with
 * pread. */
int bfs_reader_uring_read_all(struct bfs_reader *r, const struct bfs_read *rd,
			      size_t n)
{
	struct io_uring_sqe *sqe;
	bool ok = true, ring = true;
	size_t next = 0;

	pthread_mutex_lock(&r->lock);
	while (next < n || r->in_flight ||
	       (ring && io_uring_sq_ready(&r->ring))) {
		while (ring && next < n && (sqe = ring_entry(r))) {
			io_uring_prep_read(sqe, rd[next].fd, rd[next].buf,
					   (unsigned)rd[next].len,
					   (__u64)rd[next].off);
			io_uring_sqe_set_data64(sqe, next + 1);
			next++;
		}
		if (ring && (ring_submit(r) < 0 || !r->in_flight)) {
			if (!take_back(r, rd))
				ok = false;
			ring = false;
		}
		for (; !ring && next < n; next++)
			if (!read_one(&rd[next]))
				ok = false;
		if (!reap(r, true, rd))
			ok = false;
	}
	pthread_mutex_unlock(&r->lock);
	return ok ? 0 : -EIO;
}

int bfs_reader_read_all(struct bfs_reader *r, const struct bfs_read *reads,
			size_t n)
{
	return r->kind == BFS_READER_IO_URING
		   ? bfs_reader_uring_read_all(r, reads, n)
		   : bfs_reader_threads_read_all(r, reads, n);
}

/* ---- the reader ------------------------------------------------------------
 */

/* The count in environment variable 'name' (0 when unset). */
static unsigned env_count(const char *name)
{
	const char *v = getenv(name);

	return v ? (unsigned)strtoul(v, NULL, 10) : 0;
}

/* Set up io_uring (kind IO_URING) or the threads, as 'want' says. */
static int start(struct bfs_reader *r, enum bfs_reader_kind want, char *why,
		 size_t len)
{
	int rc = -ENOSYS;

	if (want != BFS_READER_THREADS) {
		r->sqes = calloc(r->depth, sizeof(*r->sqes));
		if (!r->sqes)
			return -ENOMEM;
		rc = io_uring_queue_init(r->depth, &r->ring, 0);
		r->ring_up = rc == 0;
		if (r->ring_up) {
			r->kind = BFS_READER_IO_URING;
			snprintf(why, len, "io_uring, %u reads in flight",
				 r->depth);
			return 0;
		}
		if (want == BFS_READER_IO_URING) {
			snprintf(why, len, "io_uring cannot be set up: %s",
				 strerror(-rc));
			return rc;
		}
	}
	r->kind = BFS_READER_THREADS;
	if (want == BFS_READER_THREADS)
		snprintf(why, len, "%u reader threads (asked for)",
			 r->depth < THREADS_MAX ? r->depth : THREADS_MAX);
	else
		snprintf(why, len,
			 "%u reader threads: io_uring cannot be set up here "
			 "(%s)",
			 r->depth < THREADS_MAX ? r->depth : THREADS_MAX,
			 strerror(-rc));
	return threads_start(r);
}

int bfs_reader_create(struct bfs_reader **out, enum bfs_reader_kind want,
		      unsigned depth, char *why, size_t len)
{
	struct bfs_reader *r;
	int rc;

	*out = NULL;
	if (want == BFS_READER_NONE) {
		snprintf(why, len, "none: rows are only advised (madvise)");
		return 0;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->depth = depth ? depth : 1;
	r->fault = (struct faults){
	    .submit_fail = env_count("BATCHFS_DEBUG_URING_SUBMIT_FAIL"),
	    .submit_short = env_count("BATCHFS_DEBUG_URING_SUBMIT_SHORT"),
	    .wait_eintr = env_count("BATCHFS_DEBUG_URING_EINTR"),
	};
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->room, NULL);
	pthread_cond_init(&r->work, NULL);
	r->scratch = mmap(NULL, BFS_READER_MAX, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (r->scratch == MAP_FAILED) {
		r->scratch = NULL;
		rc = -ENOMEM;
	} else {
		rc = start(r, want, why, len);
	}
	if (rc < 0) {
		bfs_reader_destroy(r);
		return rc;
	}
	*out = r;
	return 0;
}

void bfs_reader_destroy(struct bfs_reader *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	r->stop = true;
	pthread_cond_broadcast(&r->work);
	pthread_cond_broadcast(&r->room);
	while (r->ring_up && r->in_flight)
		reap(r, true, NULL);
	pthread_mutex_unlock(&r->lock);
	for (unsigned i = 0; i < r->nthreads; i++)
		pthread_join(r->threads[i], NULL); /* after the queue drains */
	if (r->ring_up)
		io_uring_queue_exit(&r->ring);
	if (r->scratch)
		munmap(r->scratch, BFS_READER_MAX);
	free(r->sqes);
	free(r->q);
	free(r->threads);
	pthread_cond_destroy(&r->work);
	pthread_cond_destroy(&r->room);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

enum bfs_reader_kind bfs_reader_kind(const struct bfs_reader *r)
{
	return r->kind;
}

void bfs_reader_submit(struct bfs_reader *r, int fd, uint64_t off, uint64_t len)
{
	if (len > BFS_READER_MAX)
		len = BFS_READER_MAX;
	if (r->kind == BFS_READER_IO_URING)
		bfs_reader_uring_submit(r, fd, off, len);
	else
		bfs_reader_threads_submit(r, fd, off, len);
}

void bfs_reader_stats(struct bfs_reader *r, struct bfs_reader_stats *out)
{
	pthread_mutex_lock(&r->lock);
	if (r->ring_up)
		reap(r, false, NULL);
	out->in_flight = r->in_flight;
	out->reads = r->reads;
	out->bytes = r->bytes;
	pthread_mutex_unlock(&r->lock);
}
