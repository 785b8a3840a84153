/* fs/fetch_local: fs/reader's fetch backends (reader.h:
 * bfs_reader_backend; fs/fetch.h: the table of operations) over a
 * dataset's local files.
 *
 * Two tables of operations, io_uring's and the threads', each calling
 * its own way of reading (reader_impl.h): the kind is tested once, when
 * the backend is made, and a third, "none", reads nothing (--reader
 * none: rows are only advised).
 *
 * What is resident: every kind, "none" too, keeps the residency words of
 * the dataset's mapped local files (fetch_local_resident.c), and with
 * them decides what to advise (advise: rows not known resident) and
 * which of a batch's pages the read-ahead reads (pick: those not known
 * resident, never a ragged field's).
 *
 * Descriptors: every file is opened again (through /proc/self/fd: the
 * same file even when its path now names another), buffered and read
 * randomly (rfd: a file position and read-ahead state of their own,
 * apart from the mapping's) for the reads ahead, which one reader of the
 * backend's keeps in flight, and the gathers' buffered reads of rows;
 * and, for data that does not fit, with O_DIRECT (dfd) for the gathers'
 * reads of big rows. Bytes in memory (fd < 0)
 * get none. Where a file refuses O_DIRECT the gathers read no rows
 * (be.rows false); where a source lies on a FUSE or network file system
 * (bfs_source_fs_remote) nothing is read ahead (be.ahead false, said in
 * no_ahead): a read answered short there would leave zero-filled pages.
 *
 * Gatherers: a group of reads is waited for together on a reader that
 * nobody else uses meanwhile (reader.h: not mixed with reads ahead, and
 * a ring is not shared), so read_all takes an idle reader off a list, or
 * makes one, and puts it back after: as many as threads read at once (a
 * pool's workers), each kept for the next batch.
 *
 * Lock: b->lock guards the idle list only, held for a push or a pop. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "fs/dataset.h"
#include "fs/fetch.h"
#include "fs/log.h"
#include "fs/reader_impl.h"
#include "fs/source.h"

#define MOD "reader"

#define AHEAD_DEPTH    64u /* reads ahead in flight */
#define GATHER_DEPTH   64u /* a gatherer's reads in flight (io_uring) */
#define GATHER_THREADS 16u /* ... without io_uring: reader threads each */

/* A gathering thread's reader, kept for the next read_all. */
struct gatherer {
	struct bfs_reader *r;
	struct bfs_read *rd; /* [cap]: the reads, by descriptor */
	size_t cap;
	struct gatherer *next;
};

/* A backend over a dataset's files. */
struct backend {
	struct bfs_fetch_backend be; /* first: ops, rows, ahead, why */
	struct bfs_reader *ahead;    /* reads ahead (buffered: rfd) */
	struct bfs_resident *res;    /* what of the files is resident */
	enum bfs_reader_kind kind;   /* ahead's: the gatherers' too */
	size_t nfiles;
	int *rfd; /* [nfiles] buffered, read randomly */
	int *dfd; /* [nfiles] O_DIRECT (be.rows) */
	pthread_mutex_t lock;
	struct gatherer *idle; /* [lock] readers not in use */
};

static struct backend *backend_of(struct bfs_fetch_backend *be)
{
	return (struct backend *)be;
}

/* A reader for a read_all: one left idle, or a new one; NULL when none
 * can be made. */
static struct gatherer *gatherer_take(struct backend *b)
{
	struct gatherer *g;
	char why[200];

	pthread_mutex_lock(&b->lock);
	g = b->idle;
	if (g)
		b->idle = g->next;
	pthread_mutex_unlock(&b->lock);
	if (g)
		return g;
	g = calloc(1, sizeof(*g));
	if (g &&
	    bfs_reader_create(&g->r, b->kind,
			      b->kind == BFS_READER_IO_URING ? GATHER_DEPTH
							     : GATHER_THREADS,
			      why, sizeof(why)) == 0)
		return g;
	free(g);
	return NULL;
}

static void gatherer_put(struct backend *b, struct gatherer *g)
{
	pthread_mutex_lock(&b->lock);
	g->next = b->idle;
	b->idle = g;
	pthread_mutex_unlock(&b->lock);
}

/* r[0..n) as reads of b's O_DIRECT descriptors (rfd's, buffered, for a
 * buffered range), into g->rd. 0 or -ENOMEM. */
static int by_fd(const struct backend *b, struct gatherer *g,
		 const struct bfs_fetch_range *r, size_t n)
{
	if (n > g->cap) {
		struct bfs_read *rd = realloc(g->rd, n * sizeof(*rd));

		if (!rd)
			return -ENOMEM;
		g->rd = rd;
		g->cap = n;
	}
	for (size_t i = 0; i < n; i++) {
		int *fd = r[i].buffered ? b->rfd : b->dfd;

		g->rd[i] = (struct bfs_read){
		    r[i].file < b->nfiles ? fd[r[i].file] : -1, r[i].off,
		    r[i].len, r[i].buf};
	}
	return 0;
}

/* r[0..n) read with 'read_all' on a reader of the caller's for the time
 * of the call. */
static int
gather_by(struct backend *b, const struct bfs_fetch_range *r, size_t n,
	  int (*read_all)(struct bfs_reader *, const struct bfs_read *, size_t))
{
	struct gatherer *g = gatherer_take(b);
	int rc = g ? by_fd(b, g, r, n) : -ENOMEM;

	if (rc == 0)
		rc = read_all(g->r, g->rd, n);
	if (g)
		gatherer_put(b, g);
	return rc;
}

/* Bytes [off, off + len) of 'file' read ahead with 'submit', in pieces
 * of BFS_READER_MAX at most. */
static void ahead_by(struct backend *b, size_t file, uint64_t off, uint64_t len,
		     void (*submit)(struct bfs_reader *, int, uint64_t,
				    uint64_t))
{
	int fd = file < b->nfiles ? b->rfd[file] : -1;

	for (uint64_t o = off; fd >= 0 && o < off + len; o += BFS_READER_MAX)
		submit(b->ahead, fd, o,
		       off + len - o < BFS_READER_MAX ? off + len - o
						      : BFS_READER_MAX);
}

static int uring_be_read_all(struct bfs_fetch_backend *be,
			     const struct bfs_fetch_range *r, size_t n)
{
	return gather_by(backend_of(be), r, n, bfs_reader_uring_read_all);
}

static void uring_be_ahead(struct bfs_fetch_backend *be, size_t file,
			   uint64_t off, uint64_t len, uint64_t when)
{
	ahead_by(backend_of(be), file, off, len, bfs_reader_uring_submit);
}

static int threads_be_read_all(struct bfs_fetch_backend *be,
			       const struct bfs_fetch_range *r, size_t n)
{
	return gather_by(backend_of(be), r, n, bfs_reader_threads_read_all);
}

static void threads_be_ahead(struct bfs_fetch_backend *be, size_t file,
			     uint64_t off, uint64_t len, uint64_t when)
{
	ahead_by(backend_of(be), file, off, len, bfs_reader_threads_submit);
}

static void be_advise(struct bfs_fetch_backend *be, const uint64_t *idx,
		      size_t n, const bool *fields, struct bfs_fetch_tally *out)
{
	bfs_resident_advise(backend_of(be)->res, idx, n, fields, out);
}

static size_t be_pick(struct bfs_fetch_backend *be, struct bfs_fetch_range *r,
		      size_t n, bool ragged, uint64_t *resident)
{
	return bfs_resident_pick(backend_of(be)->res, r, n, ragged, resident);
}

static void be_stats(struct bfs_fetch_backend *be,
		     struct bfs_fetch_backend_stats *out)
{
	struct backend *b = backend_of(be);
	struct bfs_reader_stats s = {0};

	if (b->ahead)
		bfs_reader_stats(b->ahead, &s);
	*out = (struct bfs_fetch_backend_stats){s.in_flight, s.reads, s.bytes};
}

static void be_destroy(struct bfs_fetch_backend *be)
{
	struct backend *b = backend_of(be);

	bfs_reader_destroy(b->ahead); /* waits for the reads in flight */
	bfs_resident_destroy(b->res);
	while (b->idle) {
		struct gatherer *g = b->idle;

		b->idle = g->next;
		bfs_reader_destroy(g->r);
		free(g->rd);
		free(g);
	}
	for (size_t i = 0; i < b->nfiles; i++) {
		if (b->rfd && b->rfd[i] >= 0)
			close(b->rfd[i]);
		if (b->dfd && b->dfd[i] >= 0)
			close(b->dfd[i]);
	}
	free(b->rfd);
	free(b->dfd);
	pthread_mutex_destroy(&b->lock);
	free(b);
}

static int none_read_all(struct bfs_fetch_backend *be,
			 const struct bfs_fetch_range *r, size_t n)
{
	return -ENOSYS;
}

static void none_ahead(struct bfs_fetch_backend *be, size_t file, uint64_t off,
		       uint64_t len, uint64_t when)
{
}

static const struct bfs_fetch_ops uring_ops = {
    .name = "io_uring",
    .read_all = uring_be_read_all,
    .ahead = uring_be_ahead,
    .pick = be_pick,
    .advise = be_advise,
    .stats = be_stats,
    .destroy = be_destroy,
};

static const struct bfs_fetch_ops threads_ops = {
    .name = "threads",
    .read_all = threads_be_read_all,
    .ahead = threads_be_ahead,
    .pick = be_pick,
    .advise = be_advise,
    .stats = be_stats,
    .destroy = be_destroy,
};

/* BFS_READER_NONE: reads nothing (rows are only advised). */
static const struct bfs_fetch_ops none_ops = {
    .name = "none",
    .read_all = none_read_all,
    .ahead = none_ahead,
    .pick = be_pick,
    .advise = be_advise,
    .stats = be_stats,
    .destroy = be_destroy,
};

/* Open ds's files again: rfd buffered, read randomly (a file position
 * and read-ahead state of their own, apart from the mapping's), and, for
 * 'direct', dfd with O_DIRECT (rows: not every file system has it, then
 * none). Note a source on a FUSE or network file system: nothing is read
 * ahead there. */
static int open_files(struct backend *b, const struct bfs_dataset *ds,
		      bool direct)
{
	bool remote = false, odirect = direct;
	struct statfs sf;

	b->rfd = malloc((b->nfiles ? b->nfiles : 1) * sizeof(*b->rfd));
	b->dfd = malloc((b->nfiles ? b->nfiles : 1) * sizeof(*b->dfd));
	if (!b->rfd || !b->dfd)
		return -ENOMEM;
	for (size_t i = 0; i < b->nfiles; i++)
		b->rfd[i] = b->dfd[i] = -1;
	for (size_t i = 0; i < b->nfiles; i++) {
		int fd = bfs_dataset_file(ds, i)->fd;

		if (direct) {
			b->dfd[i] = bfs_source_reopen(fd, O_DIRECT);
			odirect &= fd < 0 || b->dfd[i] >= 0;
		}
		b->rfd[i] = bfs_source_reopen(fd, 0);
		if (b->rfd[i] < 0 && fd >= 0)
			b->rfd[i] = dup(fd);
		if (b->rfd[i] >= 0)
			posix_fadvise(b->rfd[i], 0, 0, POSIX_FADV_RANDOM);
		remote |= fd >= 0 && fstatfs(fd, &sf) == 0 &&
			  bfs_source_fs_remote((long)sf.f_type);
	}
	b->be.rows = odirect;
	b->be.ahead = !remote;
	if (remote)
		b->be.no_ahead =
		    "no read ahead into the page cache: a source is on a FUSE "
		    "or network file system (a read answered short there "
		    "would leave zero-filled pages)";
	return 0;
}

int bfs_reader_backend(struct bfs_fetch_backend **out,
		       const struct bfs_dataset *ds, enum bfs_reader_kind want,
		       bool direct)
{
	struct backend *b = calloc(1, sizeof(*b));
	int rc;

	*out = NULL;
	if (!b)
		return -ENOMEM;
	pthread_mutex_init(&b->lock, NULL);
	b->be.ops = &none_ops;
	rc = bfs_resident_create(&b->res, ds);
	if (rc < 0) {
		be_destroy(&b->be);
		return rc;
	}
	rc = bfs_reader_create(&b->ahead, want, AHEAD_DEPTH, b->be.why,
			       sizeof(b->be.why));
	if (rc < 0) {
		bfs_log(BFS_LOG_ERR, MOD,
			"rows cannot be read ahead as asked: %s", b->be.why);
		be_destroy(&b->be);
		return rc;
	}
	if (b->ahead) {
		b->kind = bfs_reader_kind(b->ahead);
		b->be.ops =
		    b->kind == BFS_READER_IO_URING ? &uring_ops : &threads_ops;
		b->nfiles = bfs_dataset_nfiles(ds);
		rc = open_files(b, ds, direct);
		if (rc < 0) {
			be_destroy(&b->be);
			return rc;
		}
	}
	*out = &b->be;
	return 0;
}
