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
 *                consumer) ─(release)→ FREE
 *
 * Threads:
 *  - R readers: open a batch file when its slot's host half is FREE, then
 *    pread chunks straight into the host half (several readers share one
 *    batch); the reader finishing the last chunk parses the header.
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
 *
 * Errors: the first failure of batch k (open, pread, short read, header,
 * CUDA) lowers err_batch to k; batches < err_batch are still delivered, and
 * next() returns err_code for batch err_batch and every call after it.
 *
 * Lock: one mutex L->mu protects every field marked (mu); it is never held
 * across pread, open/close, header parsing or a driver call. Condition
 * variables: work_cv (readers), copy_cv (copy thread), ready_cv (consumer).
 */
#include "loader/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEF_SLOTS   3
#define DEF_READERS 4
#define DEF_CHUNK   (4u << 20)
#define SLOT_ALIGN  (2u << 20)
#define NONE	    UINT64_MAX
#ifndef MADV_POPULATE_WRITE
#define POPULATE_WRITE 23 /* Linux 5.14; older kernels: EINVAL, memset */
#else
#define POPULATE_WRITE MADV_POPULATE_WRITE
#endif

enum hstate { H_FREE, H_READING, H_READ, H_COPYING, H_HELD, H_FAILED };
enum dstate { D_FREE, D_QUEUED, D_HELD };

struct slot {
	unsigned char *host; /* slot_bytes, page aligned */
	uint64_t dev;	     /* device half (host address in CPU mode) */
	void *ready;	     /* CUevent: copy into dev done */
	void *released;	     /* CUevent: consumer done with dev */
	/* host half (mu) */
	enum hstate hs;
	uint64_t hbatch;
	int fd;
	uint64_t size;
	size_t nchunks; /* 0 while the file is being opened */
	size_t next_chunk, done_chunks;
	struct bfs_loader_meta *hmeta;
	/* device half (mu) */
	enum dstate ds;
	uint64_t dbatch;
	struct bfs_loader_meta *dmeta;
	int released_recorded; /* 'released' holds a record to wait on */
};

struct bfs_loader {
	struct bfs_loader_logger log;
	enum bfs_loader_mode mode;
	unsigned nslots, nreaders, flags;
	size_t chunk;
	char **files;
	uint64_t *sizes; /* st_size of each file at open */
	uint64_t nfiles;
	size_t slot_bytes, ring_bytes;
	unsigned char *ring;
	int registered;
	uint64_t dring;
	struct bfs_loader_gpu *gpu;
	struct slot *slots;
	pthread_t *readers;
	unsigned nstarted;
	pthread_t copier;
	int copier_started;
	int copier_live; /* (mu) the copy thread has not yet left */

	pthread_mutex_t mu;
	pthread_cond_t work_cv, copy_cv, ready_cv;
	int stop;		/* (mu) */
	uint64_t read_next;	/* (mu) next batch to open */
	uint64_t copy_next;	/* (mu) next batch to copy */
	uint64_t deliver_next;	/* (mu) next batch for next() */
	uint64_t err_batch;	/* (mu) lowest failed batch, NONE */
	int err_code;		/* (mu) */
	char err_msg[512];	/* (mu) */
	unsigned *inflight;	/* (mu) FIFO of slots with copies in flight */
	unsigned in_head, in_n; /* (mu) */
	struct bfs_loader_stats st; /* (mu) */
	char user_msg[512];	    /* consumer's copy of err_msg */
};

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

/* Thread-safe text of -errno. */
static const char *errstr(int rc)
{
	const char *s = strerrordesc_np(-rc);
	return s ? s : "unknown error";
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

/* pread exactly len bytes at off; -EIO (short read) or -errno. */
static int pread_full(int fd, unsigned char *p, size_t len, uint64_t off,
		      size_t *got)
{
	*got = 0;
	while (*got < len) {
		ssize_t n =
		    pread(fd, p + *got, len - *got, (off_t)(off + *got));
		if (n < 0 && errno == EINTR)
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
static void finish_batch(struct bfs_loader *L, struct slot *s)
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
		latch(L, k, rc, "%s: %s", L->files[k], msg);
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
static void read_chunk(struct bfs_loader *L, struct slot *s)
{
	size_t c = s->next_chunk++, got;
	uint64_t off = (uint64_t)c * L->chunk, k = s->hbatch;
	size_t len =
	    (size_t)(s->size - off < L->chunk ? s->size - off : L->chunk);
	int rc;

	pthread_mutex_unlock(&L->mu);
	rc = pread_full(s->fd, s->host + off, len, off, &got);
	pthread_mutex_lock(&L->mu);
	s->done_chunks++;
	L->st.bytes_read += got;
	if (rc == -EIO)
		latch(L, k, rc,
		      "%s: short read at offset %llu: got %zu of %zu bytes "
		      "(the file is shorter than its size %llu)",
		      L->files[k], (unsigned long long)(off + got), got, len,
		      (unsigned long long)s->size);
	else if (rc < 0)
		latch(L, k, rc, "%s: read at offset %llu: %s", L->files[k],
		      (unsigned long long)(off + got), errstr(rc));
	if (s->done_chunks == s->next_chunk &&
	    (s->next_chunk == s->nchunks || k >= L->err_batch))
		finish_batch(L, s);
}

/* Open batch read_next into its slot (mu held, dropped around open). The
 * size read is the one stat() gave at bfs_loader_open(): a file that shrank
 * since then ends in a short read, never in a silently shorter batch. */
static void start_batch(struct bfs_loader *L, struct slot *s)
{
	uint64_t k = L->read_next++;
	int fd, rc = 0;

	s->hs = H_READING;
	s->hbatch = k;
	s->size = L->sizes[k];
	s->nchunks = s->next_chunk = s->done_chunks = 0;
	pthread_mutex_unlock(&L->mu);
	fd = open(L->files[k], O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		rc = -errno;
	pthread_mutex_lock(&L->mu);
	if (rc < 0) {
		latch(L, k, rc, "%s: %s", L->files[k], errstr(rc));
		s->hs = H_FAILED;
		return;
	}
	s->fd = fd;
	s->nchunks =
	    s->size ? (size_t)((s->size + L->chunk - 1) / L->chunk) : 1;
}

/* A slot with chunks left to read, lowest batch first (mu held). */
static struct slot *pick_chunk(struct bfs_loader *L)
{
	struct slot *best = NULL;

	for (unsigned i = 0; i < L->nslots; i++) {
		struct slot *s = &L->slots[i];
		if (s->hs == H_READING && s->nchunks &&
		    s->next_chunk < s->nchunks && s->hbatch < L->err_batch &&
		    (!best || s->hbatch < best->hbatch))
			best = s;
	}
	return best;
}

static void *reader_main(void *arg)
{
	struct bfs_loader *L = arg;
	struct slot *s;

	pthread_mutex_lock(&L->mu);
	while (!L->stop) {
		uint64_t k = L->read_next;
		if ((s = pick_chunk(L)) != NULL) {
			read_chunk(L, s);
			pthread_cond_broadcast(&L->work_cv);
		} else if (k < L->nfiles && k < L->err_batch &&
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
	struct slot *s = &L->slots[k % L->nslots];
	void *wait_ev;
	int rc;

	if (k >= L->nfiles || k >= L->err_batch || s->hs != H_READ ||
	    s->hbatch != k || s->ds != D_FREE)
		return 0;
	wait_ev = s->released_recorded ? s->released : NULL;
	s->hs = H_COPYING;
	pthread_mutex_unlock(&L->mu);
	rc = bfs_loader_gpu_copy(L->gpu, s->dev, s->host, (size_t)s->size,
				 wait_ev, s->ready);
	pthread_mutex_lock(&L->mu);
	if (rc < 0) {
		latch(L, k, rc, "%s: %s", L->files[k],
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
	struct slot *s = &L->slots[L->inflight[L->in_head]];
	uint64_t k = s->hbatch;
	int rc;

	pthread_mutex_unlock(&L->mu);
	rc = bfs_loader_gpu_event_sync(L->gpu, s->ready);
	pthread_mutex_lock(&L->mu);
	L->in_head = (L->in_head + 1) % L->nslots;
	L->in_n--;
	if (rc < 0)
		latch(L, k, rc, "%s: %s", L->files[k],
		      bfs_loader_gpu_err(L->gpu));
	/* KEEP_HOST: the host copy lives while the consumer has the batch. */
	if ((L->flags & BFS_LOADER_KEEP_HOST) && s->ds != D_FREE &&
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

static void *copier_main(void *arg)
{
	struct bfs_loader *L = arg;
	int rc = bfs_loader_gpu_bind(L->gpu);

	pthread_mutex_lock(&L->mu);
	if (rc < 0)
		latch(L, L->copy_next, rc, "copy thread: %s",
		      bfs_loader_gpu_err(L->gpu));
	while (!L->stop) {
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
static void fill_batch(struct bfs_loader *L, struct slot *s,
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
	struct slot *s = NULL;
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
		} else if (k >= L->nfiles) {
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
			latch(L, k, rc, "%s: %s", L->files[k],
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
	struct slot *s;
	int rc = 0;

	if (!L || !b || b->slot >= L->nslots)
		return -EINVAL;
	s = &L->slots[b->slot];
	pthread_mutex_lock(&L->mu);
	if (s->ds != D_HELD || s->dbatch != b->index)
		rc = -EINVAL;
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
	pthread_mutex_unlock(&L->mu);
	return rc;
}

enum bfs_loader_mode bfs_loader_mode(const struct bfs_loader *L)
{
	return L && L->gpu ? BFS_LOADER_CUDA : BFS_LOADER_CPU;
}

uint64_t bfs_loader_count(const struct bfs_loader *L)
{
	return L ? L->nfiles : 0;
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

/* ---- open / close ---- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* "batch_<decimal>" without leading zeros → *k. */
static int batch_number(const char *name, uint64_t *k)
{
	const char *p = name + 6;

	if (strncmp(name, "batch_", 6) != 0 || !*p || (p[0] == '0' && p[1]))
		return 0;
	for (*k = 0; *p; p++) {
		if (*p < '0' || *p > '9' || *k > (UINT64_MAX - 9) / 10)
			return 0;
		*k = *k * 10 + (uint64_t)(*p - '0');
	}
	return 1;
}

/* The numbers of the batch_K files of 'dir', sorted, into *ks / *n. */
static int scan_dir(const struct bfs_loader *L, const char *dir, uint64_t **ks,
		    uint64_t *n)
{
	size_t cap = 0;
	struct dirent *e;
	DIR *d = opendir(dir);
	uint64_t k;
	int rc = 0;

	*ks = NULL;
	*n = 0;
	if (!d) {
		rc = -errno;
		bfs_loader_log(&L->log, BFS_LOADER_LOG_ERR, "%s: %s", dir,
			       errstr(rc));
		return rc;
	}
	while (rc == 0 && (e = readdir(d)) != NULL) {
		if (!batch_number(e->d_name, &k))
			continue;
		if (*n == cap) {
			void *q =
			    realloc(*ks, (cap ? cap * 2 : 64) * sizeof(k));
			if (!q) {
				rc = -ENOMEM;
				break;
			}
			*ks = q;
			cap = cap ? cap * 2 : 64;
		}
		(*ks)[(*n)++] = k;
	}
	closedir(d);
	if (rc == 0 && *n)
		qsort(*ks, (size_t)*n, sizeof(k), cmp_u64);
	return rc;
}

/* L->files from opts: the list as given, or batch_0..batch_{k-1} of dir. */
static int list_files(struct bfs_loader *L, const struct bfs_loader_opts *o)
{
	uint64_t *ks = NULL, n = 0;
	int rc = 0;

	if (o->files) {
		while (o->files[n])
			n++;
	} else {
		rc = scan_dir(L, o->dir, &ks, &n);
		for (uint64_t i = 0; rc == 0 && i < n; i++)
			if (ks[i] != i) {
				bfs_loader_log(&L->log, BFS_LOADER_LOG_ERR,
					       "%s: batch_%llu is missing",
					       o->dir, (unsigned long long)i);
				rc = -ENOENT;
			}
	}
	if (rc == 0 && n == 0) {
		bfs_loader_log(&L->log, BFS_LOADER_LOG_ERR,
			       "%s: no batch files",
			       o->dir ? o->dir : "file list");
		rc = -ENOENT;
	}
	if (rc == 0 && !(L->files = calloc((size_t)n + 1, sizeof(char *))))
		rc = -ENOMEM;
	for (uint64_t i = 0; rc == 0 && i < n; i++) {
		int w = o->files ? asprintf(&L->files[i], "%s", o->files[i])
				 : asprintf(&L->files[i], "%s/batch_%llu",
					    o->dir, (unsigned long long)i);
		if (w < 0) {
			L->files[i] = NULL;
			rc = -ENOMEM;
		}
	}
	L->nfiles = rc == 0 ? n : 0;
	free(ks);
	return rc;
}

/* Slot size = the largest file, rounded up to 2 MiB. */
static int size_slots(struct bfs_loader *L)
{
	uint64_t max = 1;
	struct stat sb;

	L->sizes = calloc((size_t)L->nfiles, sizeof(*L->sizes));
	if (!L->sizes)
		return -ENOMEM;
	for (uint64_t i = 0; i < L->nfiles; i++) {
		if (stat(L->files[i], &sb) < 0) {
			int rc = -errno;
			bfs_loader_log(&L->log, BFS_LOADER_LOG_ERR, "%s: %s",
				       L->files[i], errstr(rc));
			return rc;
		}
		if (!S_ISREG(sb.st_mode)) {
			bfs_loader_log(&L->log, BFS_LOADER_LOG_ERR,
				       "%s: not a regular file", L->files[i]);
			return -EINVAL;
		}
		L->sizes[i] = (uint64_t)sb.st_size;
		if (L->sizes[i] > max)
			max = L->sizes[i];
	}
	if (max > SIZE_MAX / 4 - SLOT_ALIGN)
		return -EFBIG;
	L->slot_bytes =
	    (size_t)(max + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
	if (L->nfiles < L->nslots)
		L->nslots = (unsigned)L->nfiles;
	L->ring_bytes = L->slot_bytes * L->nslots;
	return 0;
}

/* CUDA or CPU, following opts->mode. */
static int pick_mode(struct bfs_loader *L, const struct bfs_loader_opts *o)
{
	char why[256];
	int rc;

	if (o->mode == BFS_LOADER_CPU)
		return 0;
	rc = bfs_loader_gpu_open(&L->gpu, o->device, why, sizeof(why));
	if (rc == 0) {
		bfs_loader_log(&L->log, BFS_LOADER_LOG_DEBUG, "CUDA mode: %s",
			       why);
		return 0;
	}
	if (o->mode == BFS_LOADER_CUDA) {
		bfs_loader_log(&L->log, BFS_LOADER_LOG_ERR,
			       "CUDA mode requested but unavailable: %s", why);
		return rc;
	}
	bfs_loader_log(&L->log, BFS_LOADER_LOG_INFO,
		       "CPU mode: CUDA unavailable: %s", why);
	return 0;
}

/* Host ring (one mmap), slots, and in CUDA mode: one registration, the
 * device ring and the events. */
static int make_ring(struct bfs_loader *L)
{
	int rc = 0;

	/* Transparent huge pages where allowed (fewer faults and TLB misses
	 * for the kernel's copy into the ring), then populate up front so no
	 * read takes a page fault. */
	L->ring = mmap(NULL, L->ring_bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (L->ring == MAP_FAILED) {
		L->ring = NULL;
		return -ENOMEM;
	}
	madvise(L->ring, L->ring_bytes, MADV_HUGEPAGE);
	if (madvise(L->ring, L->ring_bytes, POPULATE_WRITE) != 0)
		memset(L->ring, 0, L->ring_bytes);
	L->slots = calloc(L->nslots, sizeof(*L->slots));
	L->inflight = calloc(L->nslots, sizeof(*L->inflight));
	if (!L->slots || !L->inflight)
		return -ENOMEM;
	for (unsigned i = 0; i < L->nslots; i++) {
		struct slot *s = &L->slots[i];
		s->host = L->ring + (size_t)i * L->slot_bytes;
		s->dev = (uint64_t)(uintptr_t)s->host;
		s->fd = -1;
		s->hbatch = s->dbatch = NONE;
	}
	if (!L->gpu)
		return 0;
	/* A forked child (a DataLoader worker) must not share pinned pages:
	 * whoever writes a copy-on-write page after the fork gets a new page,
	 * and if that is the parent, its ring is no longer what the driver
	 * pinned and copies from. */
	if (madvise(L->ring, L->ring_bytes, MADV_DONTFORK) != 0)
		return -errno;
	if ((rc = bfs_loader_gpu_push(L->gpu)) < 0)
		return rc;
	rc = bfs_loader_gpu_register(L->gpu, L->ring, L->ring_bytes);
	L->registered = rc == 0;
	L->st.pin_calls += rc == 0;
	if (rc == 0)
		rc = bfs_loader_gpu_alloc(L->gpu, L->ring_bytes, &L->dring);
	for (unsigned i = 0; rc == 0 && i < L->nslots; i++) {
		struct slot *s = &L->slots[i];
		s->dev = L->dring + (uint64_t)i * L->slot_bytes;
		rc = bfs_loader_gpu_event_create(L->gpu, &s->ready);
		if (rc == 0)
			rc = bfs_loader_gpu_event_create(L->gpu, &s->released);
	}
	bfs_loader_gpu_pop(L->gpu);
	if (rc < 0)
		bfs_loader_log(&L->log, BFS_LOADER_LOG_ERR, "CUDA setup: %s",
			       bfs_loader_gpu_err(L->gpu));
	return rc;
}

static int start_threads(struct bfs_loader *L)
{
	L->readers = calloc(L->nreaders, sizeof(*L->readers));
	if (!L->readers)
		return -ENOMEM;
	for (; L->nstarted < L->nreaders; L->nstarted++)
		if (pthread_create(&L->readers[L->nstarted], NULL, reader_main,
				   L))
			return -EAGAIN;
	if (L->gpu) {
		L->copier_live = 1;
		if (pthread_create(&L->copier, NULL, copier_main, L)) {
			L->copier_live = 0;
			return -EAGAIN;
		}
		L->copier_started = 1;
	}
	return 0;
}

static int check_opts(const struct bfs_loader_opts *o)
{
	if (!o || !o->dir == !o->files || o->mode > BFS_LOADER_CUDA ||
	    o->slots == 1 || o->slots > 256 || o->readers > 256 ||
	    (o->chunk && o->chunk < 4096))
		return -EINVAL;
	return 0;
}

int bfs_loader_open(struct bfs_loader **out, const struct bfs_loader_opts *o)
{
	struct bfs_loader *L;
	int rc;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (check_opts(o) < 0)
		return -EINVAL;
	L = calloc(1, sizeof(*L));
	if (!L)
		return -ENOMEM;
	pthread_mutex_init(&L->mu, NULL);
	pthread_cond_init(&L->work_cv, NULL);
	pthread_cond_init(&L->copy_cv, NULL);
	pthread_cond_init(&L->ready_cv, NULL);
	L->log = (struct bfs_loader_logger){o->log, o->log_arg, o->log_level};
	L->nslots = o->slots ? o->slots : DEF_SLOTS;
	L->nreaders = o->readers ? o->readers : DEF_READERS;
	L->chunk = o->chunk ? o->chunk : DEF_CHUNK;
	L->flags = o->flags;
	L->err_batch = NONE;
	rc = list_files(L, o);
	if (rc == 0)
		rc = size_slots(L);
	if (rc == 0)
		rc = pick_mode(L, o);
	if (rc == 0)
		rc = make_ring(L);
	if (rc == 0)
		rc = start_threads(L);
	if (rc < 0) {
		bfs_loader_close(L);
		return rc;
	}
	L->st.ring_bytes = L->ring_bytes;
	if (L->gpu)
		bfs_loader_gpu_unrelax(L->gpu);
	*out = L;
	return 0;
}

/* Undo make_ring's CUDA part: wait for the copy stream and the consumer's
 * recorded releases, then free in reverse order. */
static void free_gpu(struct bfs_loader *L)
{
	bfs_loader_gpu_relax(L->gpu); /* restored by gpu_close */
	if (bfs_loader_gpu_push(L->gpu) == 0) {
		bfs_loader_gpu_drain(L->gpu);
		for (unsigned i = 0; L->slots && i < L->nslots; i++) {
			struct slot *s = &L->slots[i];
			if (s->released_recorded)
				bfs_loader_gpu_event_sync(L->gpu, s->released);
			if (s->ready)
				bfs_loader_gpu_event_destroy(L->gpu, s->ready);
			if (s->released)
				bfs_loader_gpu_event_destroy(L->gpu,
							     s->released);
		}
		if (L->dring)
			bfs_loader_gpu_free(L->gpu, L->dring);
		if (L->registered)
			bfs_loader_gpu_unregister(L->gpu, L->ring);
		bfs_loader_gpu_pop(L->gpu);
	}
	bfs_loader_gpu_close(L->gpu);
}

void bfs_loader_close(struct bfs_loader *L)
{
	if (!L)
		return;
	pthread_mutex_lock(&L->mu);
	L->stop = 1;
	pthread_cond_broadcast(&L->work_cv);
	pthread_cond_broadcast(&L->copy_cv);
	pthread_cond_broadcast(&L->ready_cv);
	pthread_mutex_unlock(&L->mu);
	for (unsigned i = 0; i < L->nstarted; i++)
		pthread_join(L->readers[i], NULL);
	if (L->copier_started)
		pthread_join(L->copier, NULL);
	for (unsigned i = 0; L->slots && i < L->nslots; i++) {
		if (L->slots[i].fd >= 0)
			close(L->slots[i].fd);
		bfs_loader_meta_free(L->slots[i].hmeta);
		bfs_loader_meta_free(L->slots[i].dmeta);
	}
	if (L->gpu)
		free_gpu(L);
	if (L->ring)
		munmap(L->ring, L->ring_bytes);
	for (uint64_t i = 0; L->files && L->files[i]; i++)
		free(L->files[i]);
	free(L->files);
	free(L->sizes);
	free(L->slots);
	free(L->inflight);
	free(L->readers);
	pthread_cond_destroy(&L->work_cv);
	pthread_cond_destroy(&L->copy_cv);
	pthread_cond_destroy(&L->ready_cv);
	pthread_mutex_destroy(&L->mu);
	free(L);
}
