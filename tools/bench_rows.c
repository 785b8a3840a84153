/* tools/bench_rows: random preads of a dataset's rows (bench_rows.h).
 *
 * The threads share one counter into a shuffled list of samples; each
 * reads its sample's rows into its own buffer with pread. With a depth
 * (--uring), one thread keeps that many reads in flight on an io_uring
 * instead, each read into a slot of its own: the curve of the device's
 * random-read rate against queue depth. Nothing here touches the
 * mappings the dataset made: it only asks fs/dataset where each row lies
 * (bfs_dataset_extent). */
#include "tools/bench_rows.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fs/dataset.h"
#include "fs/source.h"

struct rows_job {
	const struct bfs_dataset *ds;
	const uint64_t *order;
	uint64_t n;
	_Atomic uint64_t next, bytes;
	atomic_int failed;
	size_t buf_len;
	int *dfd; /* O_DIRECT descriptors, or NULL */
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Where sample i's field f lies, as read: with O_DIRECT the aligned
 * pages holding it. Returns the descriptor, or -1 for a ragged field
 * (not read) or an extent that cannot be had. */
static int row_read(const struct rows_job *j, uint64_t i, size_t f,
		    uint64_t *off, uint64_t *len, uint64_t *payload)
{
	struct bfs_extent x;

	if (bfs_dataset_extent(j->ds, f, i, &x) < 0 || !x.len)
		return -1;
	*off = x.off;
	*len = *payload = x.len;
	if (!j->dfd)
		return bfs_dataset_file(j->ds, x.file)->fd;
	*off = x.off & ~(uint64_t)4095;
	*len = ((x.off + x.len + 4095) & ~(uint64_t)4095) - *off;
	return j->dfd[x.file];
}

/* Sample i's rows, one pread each, into buf. */
static int read_sample(struct rows_job *j, uint64_t i, void *buf)
{
	for (size_t f = 0; f < bfs_dataset_nfields(j->ds); f++) {
		uint64_t off, len, payload;
		int fd = row_read(j, i, f, &off, &len, &payload);

		if (fd < 0)
			continue; /* ragged fields are not read */
		if (pread(fd, buf, len, (off_t)off) < 0)
			return -errno;
		atomic_fetch_add(&j->bytes, payload);
	}
	return 0;
}

/* The job's reads from this thread through one io_uring, 'depth' in
 * flight, each into a slot of 'slot' bytes of its own. 0, or -errno. */
static int rows_uring(struct rows_job *j, unsigned depth)
{
	size_t slot = (j->buf_len + 8192 + 4095) & ~(size_t)4095;
	size_t nf = bfs_dataset_nfields(j->ds), f = 0;
	unsigned *free_slot, nfree = depth, inflight = 0;
	struct io_uring ring;
	char *bufs = NULL;
	uint64_t k = 0;
	int rc;

	rc = io_uring_queue_init(depth, &ring, 0);
	if (rc < 0)
		return rc;
	free_slot = malloc(depth * sizeof(*free_slot));
	if (!free_slot || posix_memalign((void **)&bufs, 4096, slot * depth)) {
		free(free_slot);
		io_uring_queue_exit(&ring);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < depth; i++)
		free_slot[i] = i;
	for (;;) {
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;

		while (nfree && k < j->n) { /* the next row that is read */
			uint64_t off, len, payload;
			int fd =
			    row_read(j, j->order[k], f, &off, &len, &payload);
			struct io_uring_sqe *sqe;
			unsigned s;

			if (++f == nf) {
				f = 0;
				k++;
			}
			if (fd < 0)
				continue;
			sqe = io_uring_get_sqe(&ring);
			s = free_slot[--nfree];
			io_uring_prep_read(sqe, fd, bufs + (size_t)s * slot,
					   (unsigned)len, off);
			io_uring_sqe_set_data64(sqe, (uint64_t)s << 32 |
							 (uint32_t)payload);
			inflight++;
		}
		if (!inflight)
			break;
		rc = io_uring_submit_and_wait(&ring, 1);
		if (rc < 0 && rc != -EINTR)
			break;
		rc = 0;
		io_uring_for_each_cqe(&ring, head, cqe)
		{
			uint64_t d = io_uring_cqe_get_data64(cqe);

			if (cqe->res < 0 && !rc)
				rc = cqe->res;
			atomic_fetch_add(&j->bytes, (uint32_t)d);
			free_slot[nfree++] = (unsigned)(d >> 32);
			inflight--;
			seen++;
		}
		io_uring_cq_advance(&ring, seen);
		if (rc)
			break;
	}
	while (inflight) { /* a failure: the slots are still the kernel's */
		struct io_uring_cqe *cqe;

		if (io_uring_wait_cqe(&ring, &cqe) == 0) {
			io_uring_cqe_seen(&ring, cqe);
			inflight--;
		}
	}
	io_uring_queue_exit(&ring);
	free(bufs);
	free(free_slot);
	return rc;
}

static void *rows_thread(void *arg)
{
	struct rows_job *j = arg;
	void *buf = NULL;
	uint64_t k;

	if (posix_memalign(&buf, 4096, j->buf_len + 8192))
		buf = NULL;
	while (buf && !atomic_load(&j->failed) &&
	       (k = atomic_fetch_add(&j->next, 1)) < j->n)
		if (read_sample(j, j->order[k], buf) < 0)
			atomic_store(&j->failed, 1);
	if (!buf)
		atomic_store(&j->failed, 1);
	free(buf);
	return NULL;
}

/* The most bytes one row of any fixed field spans. */
static size_t widest_row(const struct bfs_dataset *ds)
{
	size_t w = 1;

	for (size_t f = 0; f < bfs_dataset_nfields(ds); f++) {
		struct bfs_extent x;

		if (bfs_dataset_extent(ds, f, 0, &x) == 0 && x.len > w)
			w = (size_t)x.len;
	}
	return w;
}

/* 0 .. n-1 shuffled (Fisher-Yates over a xorshift seeded 'seed'). */
static uint64_t *shuffled(uint64_t n, uint64_t seed)
{
	uint64_t *v = malloc((n ? n : 1) * sizeof(*v)), s = seed | 1;

	for (uint64_t i = 0; v && i < n; i++)
		v[i] = i;
	for (uint64_t i = n; v && i > 1; i--) {
		uint64_t r, t;

		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		r = s % i;
		t = v[i - 1];
		v[i - 1] = v[r];
		v[r] = t;
	}
	return v;
}

int bfs_bench_rows(char **paths, int n, unsigned threads, unsigned depth,
		   uint64_t seed, uint64_t limit, bool direct)
{
	struct bfs_error err = {{0}};
	struct bfs_dataset *ds = NULL;
	struct rows_job j = {0};
	pthread_t *t = NULL;
	uint64_t *order = NULL;
	double t0, secs;
	unsigned started = 0;
	int rc = 1;

	if (bfs_dataset_open(&ds, (const char *const *)paths, (size_t)n,
			     &err)) {
		fprintf(stderr, "batchfs bench: %s\n", err.msg);
		return 1;
	}
	for (size_t i = 0; i < bfs_dataset_nfiles(ds); i++)
		if (bfs_dataset_file(ds, i)->fd >= 0)
			posix_fadvise(bfs_dataset_file(ds, i)->fd, 0, 0,
				      POSIX_FADV_RANDOM);
	j.ds = ds;
	j.n = bfs_dataset_samples(ds);
	if (direct) {
		j.dfd = malloc((bfs_dataset_nfiles(ds) + 1) * sizeof(*j.dfd));
		for (size_t i = 0; j.dfd && i < bfs_dataset_nfiles(ds); i++)
			j.dfd[i] = -1; /* none open yet */
		for (size_t i = 0; j.dfd && i < bfs_dataset_nfiles(ds); i++) {
			const struct bfs_source_file *fl =
			    bfs_dataset_file(ds, i);

			j.dfd[i] = bfs_source_reopen(fl->fd, O_DIRECT);
			if (j.dfd[i] < 0 && fl->fd >= 0) {
				fprintf(stderr,
					"batchfs bench: --direct: %s: cannot "
					"open with O_DIRECT: %s\n",
					fl->path, strerror(errno));
				goto out;
			}
		}
	}
	order = shuffled(j.n, seed);
	t = calloc(threads, sizeof(*t));
	if (!order || !t)
		goto out;
	if (limit && limit < j.n)
		j.n = limit;
	j.order = order;
	j.buf_len = widest_row(ds);
	t0 = now();
	if (depth) {
		int e = rows_uring(&j, depth);

		if (e < 0) {
			fprintf(stderr,
				"batchfs bench: --rows --depth %u: %s\n", depth,
				strerror(-e));
			goto out;
		}
		threads = started = 1;
	}
	for (; !depth && started < threads; started++)
		if (pthread_create(&t[started], NULL, rows_thread, &j))
			break;
	for (unsigned i = 0; !depth && i < started; i++)
		pthread_join(t[i], NULL);
	secs = now() - t0;
	if (atomic_load(&j.failed) || started < threads) {
		fprintf(stderr, "batchfs bench: --rows: a read failed\n");
		goto out;
	}
	printf("rows samples=%llu bytes=%llu seconds=%.6f samples/s=%.1f "
	       "threads=%u depth=%u\n",
	       (unsigned long long)j.n, (unsigned long long)j.bytes, secs,
	       secs > 0 ? (double)j.n / secs : 0.0, threads, depth);
	fflush(stdout);
	rc = 0;
out:
	free(t);
	free(order);
	for (size_t i = 0; j.dfd && i < bfs_dataset_nfiles(ds); i++)
		if (j.dfd[i] >= 0)
			close(j.dfd[i]);
	free(j.dfd);
	bfs_dataset_close(ds);
	return rc;
}
