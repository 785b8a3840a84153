/* The loader: batch files → ring of host slots → (CUDA) device slots, in
 * order.
 *
 * Ring: N slots. Batch k always uses slot k % N. Each slot has a host half
 * (one page-aligned region of a single mmap, pinned once at open with one
 * cuMemHostRegister in CUDA mode) and a device half (one cuMemAlloc for the
 * ring); in CPU mode the device half is the host half. A pinned ring is
 * MADV_DONTFORK: forked children (DataLoader workers) do not inherit it.
 *
 *   host half:  FREE → READING → READ → COPYING → FREE       (CUDA)
 *               FREE → READING → HELD ─(release)→ FREE        (CPU, or CUDA
 *                                                              KEEP_HOST)
 *   device half: FREE → QUEUED (copy enqueued, deliverable) → HELD (by the
 *                consumer) ─(release)→ RELEASING (its event being
 *                recorded; next() waits) → FREE
 *
 * Threads:
 *  - R readers: open a batch file when its slot's host half is FREE, then
 *    pread chunks straight into the host half (several readers share one
 *    batch); the reader finishing the last chunk parses the header. Files
 *    are opened with O_DIRECT (a batchfs mount then serves each pread
 *    with direct I/O, in every serve mode: its fastest path); a file
 *    system that refuses it (EINVAL at the open, or at a read: aligned
 *    sizes wanted) gets plain opens from then on (L->direct).
 *  - one copy thread (CUDA): once batch k is READ and the device half is
 *    FREE (the consumer released k-N, so its "released" event is recorded),
 *    enqueues on the copy stream: wait(released), HtoD copy, record(ready).
 *    It then waits for the oldest copy's "ready" (on the copy side, never
 *    the consumer's) and frees the host half for batch k+N. Events are
 *    blocking-sync, so that wait sleeps: with the default scheduling of
 *    the primary context it would spin a core for as long as the
 *    consumer's kernels hold the slot.
 *  - the consumer: next() waits for the batch's device half to be QUEUED
 *    and puts cuStreamWaitEvent(stream, ready) on its stream; release()
 *    records "released" on its stream. Neither waits for the GPU.
 *    release() may come from any thread, also during a next().
 *
 * Errors: the first failure of batch k (open, pread, short read, header,
 * CUDA) lowers err_batch to k; batches < err_batch are still delivered, and
 * next() returns err_code for batch err_batch and every call after it.
 *
 * Setup, reuse and teardown (open, reopen, close) are in open.c; the
 * object and the slot states are declared in internal.h.
 *
 * Lock: one mutex L->mu protects every field marked (mu); it is never held
 * across pread, open/close, header parsing or a driver call. Condition
 * variables: work_cv (readers), copy_cv (copy thread), ready_cv (consumer,
 * and open waiting for the copy thread to start).
 */
#include "loader/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int keep_host(const struct bfs_loader *L)
{
	return !L->gpu || (L->flags & BFS_LOADER_KEEP_HOST);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Record the failure of batch k (mu held). Only the lowest failing batch
 * is kept; everyone waiting is woken. */
static void latch(struct bfs_loader *L, uint64_t k, int code, const char *fmt,
		  ...) __attribute__((format(printf, 4, 5)));
static void latch(struct bfs_loader *L, uint64_t k, int code, const char *fmt,
		  ...)
{
	va_list ap;

	if (k >= L->err_batch)
		return;
	L->err_batch = k;
	L->err_code = code;
	va_start(ap, fmt);
	vsnprintf(L->err_msg, sizeof(L->err_msg), fmt, ap);
	va_end(ap);
	bfs_loader_log(&L->log, BFS_LOADER_LOG_ERR, "%s", L->err_msg);
	pthread_cond_broadcast(&L->work_cv);
	pthread_cond_broadcast(&L->copy_cv);
	pthread_cond_broadcast(&L->ready_cv);
}

/* ---- readers ---- */

/* After a read of fd refused with EINVAL: when fd was opened with
 * O_DIRECT (a file system that wants aligned sizes), it reads plainly
 * from now on, and so do the files opened after it; true when the read
 * may be tried again. */
static bool drop_direct(struct bfs_loader *L, int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || !(fl & O_DIRECT))
		return false;
	atomic_store(&L->direct, 0);
	return fcntl(fd, F_SETFL, fl & ~O_DIRECT) == 0;
}

/* pread exactly len bytes at off; -EIO (short read) or -errno. */
static int pread_full(struct bfs_loader *L, int fd, unsigned char *p,
		      size_t len, uint64_t off, size_t *got)
{
	*got = 0;
	while (*got < len) {
		ssize_t n =
		    pread(fd, p + *got, len - *got, (off_t)(off + *got));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EINVAL && drop_direct(L, fd))
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		*got += (size_t)n;
	}
	return 0;
}

/* The last chunk of slot s is in (mu held, dropped while parsing). */
static void finish_batch(struct bfs_loader *L, struct bfs_loader_slot *s)
{
	uint64_t k = s->hbatch;
	struct bfs_loader_meta *m = NULL;
	char msg[400];
	int fd = s->fd, rc = -ECANCELED, dead = k >= L->err_batch;

	s->fd = -1;
	pthread_mutex_unlock(&L->mu);
	close(fd);
	if (!dead)
		rc = bfs_loader_meta_parse(s->host, s->size, &m, msg,
					   sizeof(msg));
	pthread_mutex_lock(&L->mu);
	if (rc < 0 && rc != -ECANCELED)
		latch(L, k, rc, "%s: %s", L->fl.names[k], msg);
	if (k >= L->err_batch) {
		bfs_loader_meta_free(m);
		s->hs = H_FAILED;
		return;
	}
	if (L->gpu) {
		s->hmeta = m;
		s->hs = H_READ;
		pthread_cond_signal(&L->copy_cv);
		return;
	}
	s->hs = H_HELD;
	s->ds = D_QUEUED;
	s->dbatch = k;
	s->dmeta = m;
	pthread_cond_broadcast(&L->ready_cv);
}

/* Read one chunk of s (mu held, dropped during the pread). */
static void read_chunk(struct bfs_loader *L, struct bfs_loader_slot *s)
{
	size_t c = s->next_chunk++, got;
	uint64_t off = (uint64_t)c * L->chunk, k = s->hbatch;
	size_t len =
	    (size_t)(s->size - off < L->chunk ? s->size - off : L->chunk);
	int rc;

	pthread_mutex_unlock(&L->mu);
	rc = pread_full(L, s->fd, s->host + off, len, off, &got);
	pthread_mutex_lock(&L->mu);
	s->done_chunks++;
	L->st.bytes_read += got;
	if (rc == -EIO)
		latch(L, k, rc,
		      "%s: short read at offset %llu: got %zu of %zu bytes "
		      "(the file is shorter than its size %llu)",
		      L->fl.names[k], (unsigned long long)(off + got), got, len,
		      (unsigned long long)s->size);
	else if (rc < 0)
		latch(L, k, rc, "%s: read at offset %llu: %s", L->fl.names[k],
		      (unsigned long long)(off + got), bfs_loader_errstr(rc));
	if (s->done_chunks == s->next_chunk &&
	    (s->next_chunk == s->nchunks || k >= L->err_batch))
		finish_batch(L, s);
}

/* Open batch file 'path' read-only, with O_DIRECT while L->direct; *direct
 * says whether it was. EINVAL or EOPNOTSUPP: O_DIRECT is refused for good
 * (plain opens from now on); EIO: not now (a batchfs mount whose kernel
 * holds the batch open through passthrough for a plain open it saw
 * first), so this one file opens plainly. An fd, or -1 with errno. */
static int open_file(struct bfs_loader *L, const char *path, int *direct)
{
	*direct = 0;
	if (atomic_load(&L->direct)) {
		int fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);

		if (fd >= 0) {
			*direct = 1;
			return fd;
		}
		if (errno == EINVAL || errno == EOPNOTSUPP)
			atomic_store(&L->direct, 0);
		else if (errno != EIO)
			return -1;
	}
	return open(path, O_RDONLY | O_CLOEXEC);
}

/* Open batch read_next into its slot (mu held, dropped around open). The
 * size read is the one stat() gave at bfs_loader_open(): a file that shrank
 * since then ends in a short read, never in a silently shorter batch. */
static void start_batch(struct bfs_loader *L, struct bfs_loader_slot *s)
{
	uint64_t k = L->read_next++;
	int fd, rc = 0, direct;

	s->hs = H_READING;
	s->hbatch = k;
	s->hgen = L->gen;
	s->size = L->fl.sizes[k];
	s->nchunks = s->next_chunk = s->done_chunks = 0;
	pthread_mutex_unlock(&L->mu);
	fd = open_file(L, L->fl.names[k], &direct);
	if (fd < 0)
		rc = -errno;
	pthread_mutex_lock(&L->mu);
	L->st.direct_files += fd >= 0 && direct;
	if (rc < 0) {
		latch(L, k, rc, "%s: %s", L->fl.names[k],
		      bfs_loader_errstr(rc));
		s->hs = H_FAILED;
		return;
	}
	s->fd = fd;
	s->nchunks =
	    s->size ? (size_t)((s->size + L->chunk - 1) / L->chunk) : 1;
}

/* A slot with chunks left to read, lowest batch first (mu held). */
static struct bfs_loader_slot *pick_chunk(struct bfs_loader *L)
{
	struct bfs_loader_slot *best = NULL;

	for (unsigned i = 0; i < L->nslots; i++) {
		struct bfs_loader_slot *s = &L->slots[i];
		if (s->hs == H_READING && s->nchunks &&
		    s->next_chunk < s->nchunks && s->hbatch < L->err_batch &&
		    (!best || s->hbatch < best->hbatch))
			best = s;
	}
	return best;
}

void *bfs_loader_reader_main(void *arg)
{
	struct bfs_loader *L = arg;
	struct bfs_loader_slot *s;

	pthread_mutex_lock(&L->mu);
	while (!L->stop) {
		uint64_t k = L->read_next;
		if ((s = pick_chunk(L)) != NULL) {
			read_chunk(L, s);
			pthread_cond_broadcast(&L->work_cv);
		} else if (k < L->fl.n && k < L->err_batch &&
			   L->slots[k % L->nslots].hs == H_FREE) {
			start_batch(L, &L->slots[k % L->nslots]);
			pthread_cond_broadcast(&L->work_cv);
		} else {
			pthread_cond_wait(&L->work_cv, &L->mu);
		}
	}
	pthread_mutex_unlock(&L->mu);
	return NULL;
}

/* ---- copy thread (CUDA mode) ---- */

/* Enqueue the copy of batch copy_next if it is read and its device half
 * is free. Returns 1 if it did something (mu held, dropped for the
 * driver calls). */
static int try_copy(struct bfs_loader *L)
{
	uint64_t k = L->copy_next;
	struct bfs_loader_slot *s = &L->slots[k % L->nslots];
	void *wait_ev;
	int rc;

	if (k >= L->fl.n || k >= L->err_batch || s->hs != H_READ ||
	    s->hbatch != k || s->ds != D_FREE)
		return 0;
	wait_ev = s->released_recorded ? s->released : NULL;
	s->hs = H_COPYING;
	pthread_mutex_unlock(&L->mu);
	rc = bfs_loader_gpu_copy(L->gpu, s->dev, s->host, (size_t)s->size,
				 wait_ev, s->ready);
	pthread_mutex_lock(&L->mu);
	if (rc < 0) {
		latch(L, k, rc, "%s: %s", L->fl.names[k],
		      bfs_loader_gpu_err(L->gpu));
		s->hs = H_FAILED;
		return 1;
	}
	s->ds = D_QUEUED;
	s->dbatch = k;
	s->dmeta = s->hmeta;
	s->hmeta = NULL;
	L->copy_next++;
	L->st.copies++;
	L->inflight[(L->in_head + L->in_n++) % L->nslots] =
	    (unsigned)(s - L->slots);
	pthread_cond_broadcast(&L->ready_cv);
	return 1;
}

/* Wait for the oldest copy in flight; then its host half may be refilled
 * (mu held, dropped while waiting). */
static void retire_copy(struct bfs_loader *L)
{
	struct bfs_loader_slot *s = &L->slots[L->inflight[L->in_head]];
	uint64_t k = s->hbatch;
	int rc, old = s->hgen != L->gen; /* a copy from before a reopen */

	pthread_mutex_unlock(&L->mu);
	rc = bfs_loader_gpu_event_sync(L->gpu, s->ready);
	pthread_mutex_lock(&L->mu);
	L->in_head = (L->in_head + 1) % L->nslots;
	L->in_n--;
	if (rc < 0 && old)
		latch(L, 0, rc, "a copy of the previous file list: %s",
		      bfs_loader_gpu_err(L->gpu));
	else if (rc < 0)
		latch(L, k, rc, "%s: %s", L->fl.names[k],
		      bfs_loader_gpu_err(L->gpu));
	/* KEEP_HOST: the host copy lives while the consumer has the batch. */
	if ((L->flags & BFS_LOADER_KEEP_HOST) && !old && s->ds != D_FREE &&
	    s->dbatch == k)
		s->hs = H_HELD;
	else
		s->hs = H_FREE;
	pthread_cond_broadcast(&L->work_cv);
}

/* CPU time of the calling thread, ns. */
static uint64_t thread_cpu_ns(clockid_t clk)
{
	struct timespec ts;
	if (clock_gettime(clk, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void *bfs_loader_copier_main(void *arg)
{
	struct bfs_loader *L = arg;
	int rc = bfs_loader_gpu_bind(L->gpu);

	pthread_mutex_lock(&L->mu);
	if (rc < 0) {
		L->gpu_failed = 1;
		snprintf(L->why, sizeof(L->why), "copy thread: %s",
			 bfs_loader_gpu_err(L->gpu));
	}
	L->copier_up = rc < 0 ? rc : 1; /* start_threads waits for it */
	pthread_cond_broadcast(&L->ready_cv);
	while (rc == 0 && !L->stop) {
		if (try_copy(L))
			continue;
		if (L->in_n)
			retire_copy(L);
		else
			pthread_cond_wait(&L->copy_cv, &L->mu);
	}
	L->st.copy_cpu_ns += thread_cpu_ns(CLOCK_THREAD_CPUTIME_ID);
	L->copier_live = 0;
	pthread_mutex_unlock(&L->mu);
	return NULL;
}

/* ---- consumer API ---- */

/* Point the tensors of the batch in slot s at its memory and fill *b. */
static void fill_batch(struct bfs_loader *L, struct bfs_loader_slot *s,
		       struct bfs_loader_batch *b, int host_ok)
{
	struct bfs_loader_meta *m = s->dmeta;

	for (uint32_t i = 0; i < m->ntensors; i++) {
		struct bfs_loader_tensor *t = &m->tensors[i];
		t->host = host_ok ? s->host + t->offset : NULL;
		t->dev = s->dev + t->offset;
	}
	memset(b, 0, sizeof(*b));
	b->index = s->dbatch;
	b->nbytes = m->file_size;
	b->ntensors = m->ntensors;
	b->tensors = m->tensors;
	b->host = host_ok ? s->host : NULL;
	b->dev = s->dev;
	b->slot = (uint32_t)(s - L->slots);
}

int bfs_loader_next(struct bfs_loader *L, struct bfs_loader_batch *b,
		    void *stream)
{
	struct bfs_loader_slot *s = NULL;
	uint64_t t0 = 0, k;
	int rc = 0;

	if (!L || !b)
		return -EINVAL;
	pthread_mutex_lock(&L->mu);
	k = L->deliver_next;
	for (;;) {
		s = &L->slots[k % L->nslots];
		if (k >= L->err_batch) {
			rc = L->err_code;
			snprintf(L->user_msg, sizeof(L->user_msg), "%s",
				 L->err_msg);
		} else if (k >= L->fl.n) {
			rc = BFS_LOADER_EOF;
		} else if (s->ds == D_QUEUED && s->dbatch == k) {
			s->ds = D_HELD;
			L->deliver_next++;
			L->st.batches++;
			fill_batch(L, s, b, keep_host(L));
		} else if (s->ds == D_HELD) {
			rc = -EBUSY;
		} else {
			if (!t0)
				t0 = now_ns();
			pthread_cond_wait(&L->ready_cv, &L->mu);
			continue;
		}
		break;
	}
	if (t0)
		L->st.wait_ns += now_ns() - t0;
	pthread_mutex_unlock(&L->mu);
	if (rc == 0 && L->gpu) {
		rc = bfs_loader_gpu_push(L->gpu);
		if (rc == 0) {
			rc = bfs_loader_gpu_stream_wait(L->gpu, stream,
							s->ready);
			bfs_loader_gpu_pop(L->gpu);
		}
		if (rc < 0) {
			pthread_mutex_lock(&L->mu);
			latch(L, k, rc, "%s: %s", L->fl.names[k],
			      bfs_loader_gpu_err(L->gpu));
			snprintf(L->user_msg, sizeof(L->user_msg), "%s",
				 L->err_msg);
			pthread_mutex_unlock(&L->mu);
		}
	}
	return rc;
}

int bfs_loader_release(struct bfs_loader *L, const struct bfs_loader_batch *b,
		       void *stream)
{
	struct bfs_loader_slot *s;
	int rc = 0;

	if (!L || !b || b->slot >= L->nslots)
		return -EINVAL;
	s = &L->slots[b->slot];
	pthread_mutex_lock(&L->mu);
	if (s->ds != D_HELD || s->dbatch != b->index)
		rc = -EINVAL;
	else
		s->ds = D_RELEASING; /* a second release is refused */
	pthread_mutex_unlock(&L->mu);
	if (rc < 0)
		return rc;
	if (L->gpu) {
		rc = bfs_loader_gpu_push(L->gpu);
		if (rc == 0) {
			rc = bfs_loader_gpu_record(L->gpu, s->released, stream);
			bfs_loader_gpu_pop(L->gpu);
		}
	}
	pthread_mutex_lock(&L->mu);
	if (rc < 0)
		latch(L, L->deliver_next, rc, "release of batch %llu: %s",
		      (unsigned long long)b->index, bfs_loader_gpu_err(L->gpu));
	s->released_recorded = L->gpu && rc == 0;
	s->ds = D_FREE;
	bfs_loader_meta_free(s->dmeta);
	s->dmeta = NULL;
	if (s->hs == H_HELD)
		s->hs = H_FREE;
	pthread_cond_broadcast(&L->work_cv);
	pthread_cond_signal(&L->copy_cv);
	pthread_cond_broadcast(&L->ready_cv); /* a next() waiting for it */
	pthread_mutex_unlock(&L->mu);
	return rc;
}

enum bfs_loader_mode bfs_loader_mode(const struct bfs_loader *L)
{
	return L && L->gpu ? BFS_LOADER_CUDA : BFS_LOADER_CPU;
}

uint64_t bfs_loader_count(const struct bfs_loader *L)
{
	return L ? L->fl.n : 0;
}

const char *bfs_loader_errmsg(const struct bfs_loader *L)
{
	return L ? L->user_msg : "";
}

int bfs_loader_stats(const struct bfs_loader *L, struct bfs_loader_stats *st)
{
	struct bfs_loader *M = (struct bfs_loader *)L; /* lock only */

	clockid_t clk;

	if (!L || !st)
		return -EINVAL;
	pthread_mutex_lock(&M->mu);
	*st = L->st;
	/* a live copy thread cannot exit while mu is held */
	if (L->copier_live && pthread_getcpuclockid(L->copier, &clk) == 0)
		st->copy_cpu_ns += thread_cpu_ns(clk);
	pthread_mutex_unlock(&M->mu);
	return 0;
}

const char *bfs_loader_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case BFS_LOADER_EOF:
		return "end of batches";
	case -EBADMSG:
		return "bad batch file header";
	case -EIO:
		return "I/O error (short read or CUDA failure)";
	case -EBUSY:
		return "every ring slot is held by the caller";
	case -ENODEV:
		return "no usable CUDA device";
	case -ENOSYS:
		return "no CUDA driver";
	default:
		/* strerrordesc_np: thread-safe, NULL when unknown. */
		if (err < 0 && strerrordesc_np(-err))
			return strerrordesc_np(-err);
		return "unknown result";
	}
}
