/* fs/readahead: the memory policy and read-ahead of a dataset
 * (readahead.h; fs/README.md: cold data, with the figures).
 *
 * Residency. madvise(MADV_WILLNEED) starts reads of cold rows ahead of a
 * gather; on rows already in the page cache it is pure cost (it once took
 * 42 % of the daemon's CPU). So each mapped file has one word per 2 MiB
 * CHUNK: the first time a row of a chunk is advised (and again once the
 * answer is older than WINDOW = 1 s) one mincore() over the chunk says
 * whether all its pages are resident; rows in resident chunks are not
 * advised, rows in other chunks are (coalesced page ranges), so cold data
 * is still read ahead, and an evicted chunk is advised again within a
 * window. A word is tick << 1 | resident, 0 = never looked at.
 *
 * The read-in reads whole files, in order and in 32 MiB windows, with
 * MADV_POPULATE_READ: the kernel reads them sequentially (so a cold epoch
 * can run at the device's sequential rate rather than its random-read
 * rate) and maps every page, so no row costs a page fault on its first
 * touch. It runs on its own thread, every signal blocked (no fault can
 * come here: a shrunk file fails the madvise with EFAULT).
 *
 * The read-ahead thread keeps, per lane of the order, where its stream is
 * (follow: the readers' latest batch + 1) and the next batch to read
 * (next), and reads up to 'window' batches ahead of each stream, a batch
 * of each lane in turn: each batch's rows not known resident, as page
 * ranges sorted by file and offset and merged where they touch, handed
 * to fs/reader through descriptors of its own (rfd). It sleeps until a
 * stream moves so far that its lead is down to half the window, and
 * ends with the read-in (read_in) or at destroy.
 *
 * Fetch (data that does not fit): fields of rows of FETCH_MIN bytes or
 * more, stored as served, are read by each gathering thread itself with
 * O_DIRECT (dfd) into memory of its own (struct bfs_fetch, a reader each:
 * FETCH_DEPTH reads in flight on io_uring, FETCH_THREADS threads
 * otherwise); neither the advice nor the read-ahead thread touches them.
 *
 * Thread-safety: the words and counters are relaxed atomics (hints and
 * statistics; threads racing on one chunk store the same kind of
 * answer); follow, next and turn are under ra->lock (the thread waits on
 * 'moved'), never held across a read; a struct bfs_fetch is its thread's
 * own; the rest is immutable after creation. */
#include "fs/readahead.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "fs/log.h"
#include "fs/source.h"

#define MOD "readahead"

#define CHUNK	      ((uint64_t)2 << 20)
#define TICK_NS	      125000000ull /* 1/8 s */
#define TICK_MASK     0x7fffffffu
#define WINDOW	      8u		   /* ticks: 1 s */
#define WARM_WINDOW   ((uint64_t)32 << 20) /* the read-in checks for a stop */
#define FETCH_MIN     ((uint64_t)32 << 10) /* rows read with O_DIRECT */
#define FETCH_DEPTH   64u /* ... in flight per gathering thread (io_uring) */
#define FETCH_THREADS 16u /* ... without io_uring: reader threads each */

/* The residency words of one mapped file. */
struct chunks {
	_Atomic uint32_t *w; /* NULL for files given in memory */
	size_t n;
};

struct bfs_readahead {
	const struct bfs_dataset *ds;
	struct chunks *files; /* [bfs_dataset_nfiles] */
	size_t nfiles;
	_Atomic uint64_t warm_bytes, rows_resident, rows_advised, rows_read;
	_Atomic uint64_t batches_read;
	pthread_t warmer; /* the read-in, when the data fits */
	bool warming;
	atomic_bool read_in; /* it ended: the read-ahead thread stops */
	atomic_bool stop;

	/* The read-ahead thread (when a reader runs). */
	struct bfs_reader *rd;
	char why[200];		 /* how rows are read ahead, and why */
	int *rfd;		 /* [nfiles] the reads' own descriptors */
	struct bfs_order *order; /* the batches, by position */
	uint64_t window;	 /* batches read ahead of each lane's readers */
	pthread_t ahead;
	bool ahead_up;
	pthread_mutex_t lock;
	pthread_cond_t moved; /* [lock] readers moved, or stop */
	/* The readers of each lane of the order (a multi-rank mount's
	 * ranks), followed apart: a lane's positions are one range, which
	 * ends at lane_end (fs/order). */
	size_t lanes;
	uint64_t *lane_end; /* past each lane's last position */
	uint64_t *follow;   /* [lock] the readers' position + 1; 0: none */
	uint64_t *next;	    /* [lock] the next position to read ahead */
	size_t turn;	    /* [lock] the lane looked at first */

	/* Data that does not fit: fields whose rows gathers read with
	 * O_DIRECT themselves (bfs_readahead_fetch). */
	bool cold;	  /* the memory policy found it does not fit */
	bool assume_cold; /* tests: as if it did not */
	bool *fetch;	  /* [nfields], NULL: none */
	int *dfd;	  /* [nfiles] O_DIRECT descriptors */
	_Atomic uint64_t rows_fetched, bytes_fetched;
};

/* One gathering thread's O_DIRECT reads and the memory they land in. */
struct bfs_fetch {
	struct bfs_reader *rd; /* its own: reads are waited for together */
	uint8_t *buf;	       /* page-aligned, 'cap' bytes */
	size_t cap;
	struct bfs_read *reads;
	const void **rowp;	 /* [nfields * rows] */
	const void *const **tab; /* [nfields]: rowp's rows, or NULL */
	size_t rows_cap;
};

/* ---- memory policy -------------------------------------------------- */

/* The first number in file dir/name; false when there is none ("max"). */
static bool read_u64(const char *dir, const char *name, uint64_t *v)
{
	char path[4096];
	unsigned long long x;
	FILE *f;
	bool ok;

	if (snprintf(path, sizeof(path), "%s/%s", dir, name) >=
	    (int)sizeof(path))
		return false;
	f = fopen(path, "r");
	ok = f && fscanf(f, "%llu", &x) == 1;
	if (f)
		fclose(f);
	if (ok)
		*v = x;
	return ok;
}

/* The room memory cgroup 'path' (v2: v1 false; v1: the memory
 * hierarchy's) leaves under mount point 'mnt': limit - usage, the
 * tightest of the cgroup and its ancestors. */
static uint64_t cgroup_room_at(const char *mnt, const char *path, bool v1)
{
	char dir[4096];
	uint64_t room = UINT64_MAX;
	size_t root = strlen(mnt);

	if (snprintf(dir, sizeof(dir), "%s%s", mnt, path) >= (int)sizeof(dir))
		return room;
	for (;;) {
		uint64_t lim, use;
		char *slash;

		if (read_u64(dir, v1 ? "memory.limit_in_bytes" : "memory.max",
			     &lim) &&
		    lim < (1ull << 62) && /* v1 writes "no limit" as ~2^63 */
		    read_u64(dir,
			     v1 ? "memory.usage_in_bytes" : "memory.current",
			     &use)) {
			uint64_t left = use < lim ? lim - use : 0;

			room = left < room ? left : room;
		}
		slash = strrchr(dir, '/');
		if (!slash || (size_t)(slash - dir) < root)
			break;
		*slash = '\0';
	}
	return room;
}

/* The mount point of the cgroup file system of this kind ("cgroup2", or
 * "cgroup" with the memory controller) into out; false when none. */
static bool cgroup_mount(bool v1, char *out, size_t len)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	char line[4096], mnt[2048], fs[64], opts[1024];
	bool found = false;

	while (!found && f && fgets(line, sizeof(line), f)) {
		const char *sep = strstr(line, " - ");

		if (!sep || sscanf(line, "%*s %*s %*s %*s %2047s", mnt) != 1 ||
		    sscanf(sep + 3, "%63s %*s %1023s", fs, opts) != 2)
			continue;
		found = v1 ? !strcmp(fs, "cgroup") && strstr(opts, "memory")
			   : !strcmp(fs, "cgroup2");
	}
	if (f)
		fclose(f);
	if (found && (size_t)snprintf(out, len, "%s", mnt) >= len)
		found = false;
	return found;
}

/* The room this process's memory cgroups leave (v2 and v1, whichever
 * limit it); UINT64_MAX when none limits it. A container's page cache
 * counts against its limit: an archive read in past it would only evict
 * itself. */
static uint64_t cgroup_room(void)
{
	FILE *f = fopen("/proc/self/cgroup", "r");
	char line[4096], mnt[2048];
	uint64_t room = UINT64_MAX, r;

	while (f && fgets(line, sizeof(line), f)) {
		char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
		bool v1;

		if (!b)
			continue;
		b[strcspn(b, "\n")] = '\0';
		*a = *b = '\0'; /* "ID:controllers:path" */
		v1 = strcmp(line, "0") != 0;
		if (v1 && !strstr(a + 1, "memory"))
			continue;
		if (!cgroup_mount(v1, mnt, sizeof(mnt)))
			continue;
		r = cgroup_room_at(mnt, strcmp(b + 1, "/") ? b + 1 : "", v1);
		room = r < room ? r : room;
	}
	if (f)
		fclose(f);
	return room;
}

/* The memory available to this process in bytes: MemAvailable of
 * /proc/meminfo, or less when a memory cgroup leaves less; 0 when
 * unknown. */
static uint64_t mem_available(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	unsigned long long kb = 0;
	uint64_t room = cgroup_room();
	char line[128];

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return room < ((uint64_t)kb << 10) ? room : (uint64_t)kb << 10;
}

/* ---- the read-in and random access ----------------------------------- */

/* Read file fl in, window by window, until done or a stop. false when
 * stopped. */
static bool warm_file(struct bfs_readahead *ra,
		      const struct bfs_source_file *fl)
{
	for (uint64_t off = 0; fl->fd >= 0 && off < fl->size;
	     off += WARM_WINDOW) {
		uint64_t len =
		    fl->size - off < WARM_WINDOW ? fl->size - off : WARM_WINDOW;

		if (atomic_load(&ra->stop))
			return false;
		/* Faults the pages in, in order (the kernel reads ahead
		 * sequentially) and maps them; a shrunk file fails with
		 * EFAULT, no signal. Older kernels: just read ahead. */
		if (madvise((void *)(fl->map + off), (size_t)len,
			    MADV_POPULATE_READ) < 0 &&
		    errno == EINVAL)
			posix_fadvise(fl->fd, (off_t)off, (off_t)len,
				      POSIX_FADV_WILLNEED);
		atomic_fetch_add_explicit(&ra->warm_bytes, len,
					  memory_order_relaxed);
	}
	return true;
}

static void *warmer_main(void *arg)
{
	struct bfs_readahead *ra = arg;
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL); /* no fault can come here */
	for (size_t i = 0; i < ra->nfiles; i++)
		if (!warm_file(ra, bfs_dataset_file(ra->ds, i)))
			return NULL;
	/* Every row is resident now: reading ahead would only plan batches
	 * to find them there, a cost warm epochs of small rows measured
	 * (fs/README.md: cold data). Rows the kernel evicts later are
	 * advised by the workers, as without a reader. */
	pthread_mutex_lock(&ra->lock);
	atomic_store(&ra->read_in, true);
	pthread_cond_broadcast(&ra->moved);
	pthread_mutex_unlock(&ra->lock);
	return NULL;
}

/* Mark every mapping for random access. */
static void random_access(const struct bfs_readahead *ra)
{
	for (size_t i = 0; i < ra->nfiles; i++) {
		const struct bfs_source_file *fl = bfs_dataset_file(ra->ds, i);

		if (fl->fd >= 0 && fl->size)
			madvise((void *)fl->map, (size_t)fl->size, MADV_RANDOM);
	}
}

/* Read the data in, in the background, when it fits in half the memory
 * available; else mark it for random access. */
static void memory_policy(struct bfs_readahead *ra, uint64_t avail)
{
	uint64_t need = bfs_dataset_bytes(ra->ds);

	if (need > avail / 2 || ra->assume_cold) {
		bfs_log(BFS_LOG_INFO, "pool",
			"archives (%llu MiB) do not fit in half the memory "
			"available (%llu MiB, memory cgroups included)%s: read "
			"ahead batch by batch",
			(unsigned long long)(need >> 20),
			(unsigned long long)(avail >> 20),
			ra->assume_cold ? " or are taken not to "
					  "(BATCHFS_DEBUG_COLD)"
					: "");
		random_access(ra);
		ra->cold = true;
		return;
	}
	ra->warming = pthread_create(&ra->warmer, NULL, warmer_main, ra) == 0;
}

/* ---- advice ------------------------------------------------------------ */

/* A coarse clock for the residency words: ticks of TICK_NS, 31 bits. */
static uint32_t advise_tick(void)
{
	struct timespec ts;
	uint64_t ns;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	return (uint32_t)(ns / TICK_NS) & TICK_MASK;
}

/* 1 if chunk c of file fl was found fully resident within the last WINDOW
 * ticks; otherwise looks again (one mincore over the chunk) unless it was
 * found cold within the window, and remembers the answer. */
static int chunk_resident(const struct bfs_source_file *fl,
			  const struct chunks *m, size_t c, uint32_t tick,
			  size_t pg)
{
	uint32_t st = atomic_load_explicit(&m->w[c], memory_order_relaxed);
	unsigned char vec[CHUNK / 4096];
	uint64_t off = (uint64_t)c * CHUNK;
	size_t len, np;
	int res;

	if (st && ((tick - (st >> 1)) & TICK_MASK) < WINDOW)
		return (int)(st & 1);
	len = (size_t)(fl->size - off < CHUNK ? fl->size - off : CHUNK);
	np = (len + pg - 1) / pg;
	res = np <= sizeof(vec) &&
	      mincore((void *)(fl->map + off), len, vec) == 0;
	for (size_t i = 0; res && i < np; i++)
		res = vec[i] & 1;
	atomic_store_explicit(&m->w[c], tick << 1 | (uint32_t)res,
			      memory_order_relaxed);
	return res;
}

/* 1 if every chunk that bytes [off, end) of file i touch is known
 * resident (offsets page-aligned). */
static int range_resident(const struct bfs_readahead *ra, size_t i,
			  uint64_t off, uint64_t end, uint32_t tick, size_t pg)
{
	const struct chunks *m = &ra->files[i];
	const struct bfs_source_file *fl = bfs_dataset_file(ra->ds, i);

	if (!m->w)
		return 1; /* a file in memory: nothing to read ahead */
	for (size_t c = off / CHUNK; c <= (end - 1) / CHUNK; c++)
		if (!chunk_resident(fl, m, c, tick, pg))
			return 0;
	return 1;
}

void bfs_readahead_rows(struct bfs_readahead *ra, const uint64_t *idx, size_t n)
{
	long pgl = sysconf(_SC_PAGESIZE);
	uint64_t pg = pgl >= 4096 ? (uint64_t)pgl : 4096, mask = pg - 1;
	uint32_t tick = advise_tick();

	for (size_t f = 0; f < bfs_dataset_nfields(ra->ds); f++) {
		const uint8_t *lo = NULL, *hi = NULL; /* pending, coalesced */

		if (bfs_dataset_field(ra->ds, f)->ragged ||
		    (ra->fetch && ra->fetch[f]))
			continue; /* read by the gather itself */
		for (size_t i = 0; i < n; i++) {
			struct bfs_extent x;
			const uint8_t *map;
			uint64_t a, e;

			if (bfs_dataset_extent(ra->ds, f, idx[i], &x) < 0 ||
			    !x.len)
				continue;
			map = bfs_dataset_file(ra->ds, x.file)->map;
			a = x.off & ~mask;
			e = (x.off + x.len + mask) & ~mask;
			if (range_resident(ra, x.file, a, e, tick,
					   (size_t)pg)) {
				atomic_fetch_add_explicit(&ra->rows_resident, 1,
							  memory_order_relaxed);
				continue;
			}
			atomic_fetch_add_explicit(&ra->rows_advised, 1,
						  memory_order_relaxed);
			if (hi && map + a <= hi && map + e >= lo) {
				lo = map + a < lo ? map + a : lo;
				hi = map + e > hi ? map + e : hi;
				continue;
			}
			if (hi)
				madvise((void *)lo, (size_t)(hi - lo),
					MADV_WILLNEED);
			lo = map + a;
			hi = map + e;
		}
		if (hi)
			madvise((void *)lo, (size_t)(hi - lo), MADV_WILLNEED);
	}
}

/* ---- reading ahead of the readers ------------------------------------ */

/* A page range of one file to read. */
struct span {
	size_t file;
	uint64_t off, end;
};

static int span_cmp(const void *a, const void *b)
{
	const struct span *x = a, *y = b;

	if (x->file != y->file)
		return x->file < y->file ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/* The rows of the batch at position 'pos' that are not known resident,
 * as page ranges into sp (room for rows * fields), sorted by file and
 * offset and merged where they touch. Returns how many. */
static size_t plan_batch(struct bfs_readahead *ra, uint64_t pos, uint64_t *idx,
			 struct span *sp)
{
	uint32_t tick = advise_tick();
	struct bfs_batch_loc at;
	size_t n = 0, m = 0;
	uint64_t rows;

	if (bfs_order_locate_pos(ra->order, pos, &at) < 0 ||
	    bfs_order_batch(ra->order, at.id, idx) < 0)
		return 0;
	rows = at.rows;
	for (size_t f = 0; f < bfs_dataset_nfields(ra->ds); f++)
		for (uint64_t i = 0; i < rows && !(ra->fetch && ra->fetch[f]);
		     i++) {
			struct bfs_extent x;
			uint64_t a, e;

			if (bfs_dataset_extent(ra->ds, f, idx[i], &x) < 0 ||
			    !x.len || !ra->files[x.file].w)
				continue;
			a = x.off & ~(uint64_t)4095;
			e = (x.off + x.len + 4095) & ~(uint64_t)4095;
			if (range_resident(ra, x.file, a, e, tick, 4096)) {
				atomic_fetch_add_explicit(&ra->rows_resident, 1,
							  memory_order_relaxed);
				continue;
			}
			sp[n++] = (struct span){x.file, a, e};
		}
	atomic_fetch_add_explicit(&ra->rows_read, n, memory_order_relaxed);
	qsort(sp, n, sizeof(*sp), span_cmp);
	for (size_t i = 0; i < n; i++) {
		if (m && sp[m - 1].file == sp[i].file &&
		    sp[i].off <= sp[m - 1].end) {
			if (sp[i].end > sp[m - 1].end)
				sp[m - 1].end = sp[i].end;
			continue;
		}
		sp[m++] = sp[i];
	}
	return m;
}

/* Read batch pos's rows that are not resident. */
static void read_batch(struct bfs_readahead *ra, uint64_t pos, uint64_t *idx,
		       struct span *sp)
{
	size_t n = plan_batch(ra, pos, idx, sp);

	for (size_t i = 0; i < n && !atomic_load(&ra->stop); i++)
		for (uint64_t o = sp[i].off; o < sp[i].end; o += BFS_READER_MAX)
			bfs_reader_submit(ra->rd, ra->rfd[sp[i].file], o,
					  sp[i].end - o < BFS_READER_MAX
					      ? sp[i].end - o
					      : BFS_READER_MAX);
	atomic_fetch_add_explicit(&ra->batches_read, 1, memory_order_relaxed);
}

/* The next position of lane l to read ahead, or UINT64_MAX when the
 * window after its readers is read. [lock] */
static uint64_t lane_ahead(struct bfs_readahead *ra, size_t l)
{
	uint64_t end = ra->lane_end[l];

	if (ra->follow[l] && ra->next[l] < ra->follow[l])
		ra->next[l] = ra->follow[l]; /* behind the readers: skip */
	if (ra->follow[l] && ra->next[l] < ra->follow[l] + ra->window &&
	    ra->next[l] < end)
		return ra->next[l]++;
	return UINT64_MAX;
}

/* The next position to read ahead, waiting until there is one within the
 * window after a lane's readers; UINT64_MAX at stop or once the read-in
 * ended. Lanes take turns, a batch each. [lock] */
static uint64_t next_ahead(struct bfs_readahead *ra)
{
	for (;;) {
		if (atomic_load(&ra->stop) || atomic_load(&ra->read_in))
			return UINT64_MAX;
		for (size_t i = 0; i < ra->lanes; i++) {
			size_t l = (ra->turn + i) % ra->lanes;
			uint64_t pos = lane_ahead(ra, l);

			if (pos != UINT64_MAX) {
				ra->turn = l + 1;
				return pos;
			}
		}
		pthread_cond_wait(&ra->moved, &ra->lock);
	}
}

static void *ahead_main(void *arg)
{
	struct bfs_readahead *ra = arg;
	uint64_t rows = bfs_order_batch_rows(ra->order, 0), pos;
	uint64_t *idx = malloc((rows ? rows : 1) * sizeof(*idx));
	struct span *sp =
	    malloc((rows ? rows : 1) * (bfs_dataset_nfields(ra->ds) + 1) *
		   sizeof(*sp));
	sigset_t all;

	sigfillset(&all); /* reads fail, they do not fault */
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	pthread_mutex_lock(&ra->lock);
	while (idx && sp && (pos = next_ahead(ra)) != UINT64_MAX) {
		pthread_mutex_unlock(&ra->lock);
		read_batch(ra, pos, idx, sp);
		pthread_mutex_lock(&ra->lock);
	}
	pthread_mutex_unlock(&ra->lock);
	free(idx);
	free(sp);
	return NULL;
}

/* The thread is woken when the readers went back, or when what it has
 * read ahead of them is down to half the window: one wake-up per half
 * window of batches, not one per batch. */
void bfs_readahead_follow(struct bfs_readahead *ra,
			  const struct bfs_batch_loc *at)
{
	uint64_t pos = at->pos;
	size_t l = at->id.lane;

	if (!bfs_readahead_reads(ra) || l >= ra->lanes ||
	    pos >= ra->lane_end[l])
		return;
	pthread_mutex_lock(&ra->lock);
	if (pos + 1 < ra->follow[l])
		ra->next[l] = pos + 1; /* the readers went back: follow */
	if (ra->follow[l] != pos + 1) {
		ra->follow[l] = pos + 1;
		if (ra->next[l] <= ra->follow[l] + ra->window / 2)
			pthread_cond_signal(&ra->moved);
	}
	pthread_mutex_unlock(&ra->lock);
}

/* Bytes of pages one batch of 'rows' rows reads at most (a row of len
 * bytes touches len / 4096 + 2 pages at most). */
static uint64_t batch_pages(const struct bfs_dataset *ds, uint64_t rows)
{
	uint64_t n = 0;

	for (size_t f = 0; f < bfs_dataset_nfields(ds); f++) {
		struct bfs_extent x;

		if (bfs_dataset_extent(ds, f, 0, &x) == 0)
			n += (x.len / 4096 + 2) * 4096;
	}
	return n * rows;
}

/* Open every file again for the reads (their own file position and
 * read-ahead state, apart from the mapping's) and start the read-ahead
 * thread. 0 or -errno. */
static int start_ahead(struct bfs_readahead *ra,
		       const struct bfs_readahead_opts *o, uint64_t avail)
{
	uint64_t bytes = o->bytes, per;
	bool remote = false;
	struct statfs sf;

	ra->rfd = malloc((ra->nfiles ? ra->nfiles : 1) * sizeof(*ra->rfd));
	if (!ra->rfd)
		return -ENOMEM;
	for (size_t i = 0; i < ra->nfiles; i++) {
		int fd = bfs_dataset_file(ra->ds, i)->fd;

		ra->rfd[i] = bfs_source_reopen(fd, 0);
		if (ra->rfd[i] < 0 && fd >= 0)
			ra->rfd[i] = dup(fd);
		if (ra->rfd[i] >= 0)
			posix_fadvise(ra->rfd[i], 0, 0, POSIX_FADV_RANDOM);
		remote |= fd >= 0 && fstatfs(fd, &sf) == 0 &&
			  bfs_source_fs_remote((long)sf.f_type);
	}
	if (remote) {
		snprintf(ra->why + strlen(ra->why),
			 sizeof(ra->why) - strlen(ra->why),
			 "; no read ahead into the page cache: a source is on "
			 "a FUSE or network file system (a read answered short "
			 "there would leave zero-filled pages)");
		return 0;
	}
	ra->order = o->order;
	ra->lanes = bfs_order_lanes(o->order);
	ra->lane_end = calloc(ra->lanes, sizeof(*ra->lane_end));
	ra->follow = calloc(ra->lanes, sizeof(*ra->follow));
	ra->next = calloc(ra->lanes, sizeof(*ra->next));
	if (!ra->lane_end || !ra->follow || !ra->next)
		return -ENOMEM;
	for (size_t l = 0; l < ra->lanes; l++)
		ra->lane_end[l] = bfs_order_lane_end(o->order, l);
	if (!bytes)
		bytes = avail / 4 < (256ull << 20) ? avail / 4 : 256ull << 20;
	per = batch_pages(ra->ds, bfs_order_batch_rows(o->order, 0));
	ra->window = per ? bytes / per / ra->lanes : 2; /* shared fairly */
	if (ra->window < 2)
		ra->window = 2;
	snprintf(ra->why + strlen(ra->why), sizeof(ra->why) - strlen(ra->why),
		 "; up to %llu batches ahead%s (%llu MiB)%s",
		 (unsigned long long)ra->window,
		 ra->lanes > 1 ? " of each rank" : "",
		 (unsigned long long)(bytes >> 20),
		 ra->warming ? " until the read-in at mount ends" : "");
	ra->ahead_up = pthread_create(&ra->ahead, NULL, ahead_main, ra) == 0;
	return ra->ahead_up ? 0 : -EAGAIN;
}

bool bfs_readahead_reads(const struct bfs_readahead *ra)
{
	return ra->ahead_up &&
	       !atomic_load_explicit(&ra->read_in, memory_order_relaxed);
}

/* ---- rows read by the gathers themselves (data that does not fit) ---- */

/* Whether field f's rows are read with O_DIRECT: fixed, rows of
 * FETCH_MIN bytes or more, stored as served in every shard. */
static bool fetchable(const struct bfs_dataset *ds, size_t f)
{
	const struct bfs_field *fl = bfs_dataset_field(ds, f);

	if (fl->ragged || fl->row_bytes < FETCH_MIN)
		return false;
	for (size_t i = 0; i < bfs_dataset_nshards(ds); i++) {
		struct bfs_shard_info si;
		const void *p;

		bfs_dataset_shard(ds, i, &si);
		if (si.samples &&
		    bfs_dataset_row(ds, f, si.first_sample, &p) < 0)
			return false;
	}
	return true;
}

/* Decide which fields are fetched and open the files with O_DIRECT
 * (not every file system has it: then none is). */
static void start_fetch(struct bfs_readahead *ra)
{
	size_t nf = bfs_dataset_nfields(ra->ds), any = 0;

	ra->fetch = calloc(nf ? nf : 1, sizeof(*ra->fetch));
	ra->dfd = malloc((ra->nfiles ? ra->nfiles : 1) * sizeof(*ra->dfd));
	if (!ra->fetch || !ra->dfd)
		goto none;
	for (size_t i = 0; i < ra->nfiles; i++)
		ra->dfd[i] = -1;
	for (size_t i = 0; i < ra->nfiles; i++) {
		int fd = bfs_dataset_file(ra->ds, i)->fd;

		ra->dfd[i] = bfs_source_reopen(fd, O_DIRECT);
		if (fd >= 0 && ra->dfd[i] < 0)
			goto none;
	}
	for (size_t f = 0; f < nf; f++)
		any += ra->fetch[f] = fetchable(ra->ds, f);
	if (any) {
		snprintf(ra->why + strlen(ra->why),
			 sizeof(ra->why) - strlen(ra->why),
			 "; rows of >= %llu KiB read with O_DIRECT by the "
			 "gathers",
			 (unsigned long long)(FETCH_MIN >> 10));
		return;
	}
none:
	free(ra->fetch);
	ra->fetch = NULL;
}

struct bfs_fetch *bfs_readahead_fetcher(struct bfs_readahead *ra)
{
	struct bfs_fetch *w;
	char why[200];

	if (!ra->fetch)
		return NULL;
	w = calloc(1, sizeof(*w));
	if (w &&
	    bfs_reader_create(&w->rd, bfs_reader_kind(ra->rd),
			      bfs_reader_kind(ra->rd) == BFS_READER_IO_URING
				  ? FETCH_DEPTH
				  : FETCH_THREADS,
			      why, sizeof(why)) == 0)
		return w;
	bfs_fetch_free(w);
	return NULL;
}

void bfs_fetch_free(struct bfs_fetch *w)
{
	if (!w)
		return;
	bfs_reader_destroy(w->rd);
	if (w->buf)
		munmap(w->buf, w->cap);
	free(w->reads);
	free(w->rowp);
	free(w->tab);
	free(w);
}

/* Room in w for n rows of every field, and 'bytes' of reads. */
static int fetch_fit(struct bfs_fetch *w, size_t nf, size_t n, size_t bytes)
{
	if (n > w->rows_cap) {
		free(w->reads);
		free(w->rowp);
		w->reads = malloc(n * nf * sizeof(*w->reads));
		w->rowp = malloc(n * nf * sizeof(*w->rowp));
		w->rows_cap = w->reads && w->rowp ? n : 0;
	}
	if (!w->tab)
		w->tab = calloc(nf ? nf : 1, sizeof(*w->tab));
	if (bytes > w->cap) {
		if (w->buf)
			munmap(w->buf, w->cap);
		w->cap = (bytes + 4095) & ~(size_t)4095;
		w->buf = mmap(NULL, w->cap, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (w->buf == MAP_FAILED) {
			w->buf = NULL;
			w->cap = 0;
		}
	}
	return w->rows_cap >= n && w->tab && w->cap >= bytes ? 0 : -ENOMEM;
}

int bfs_readahead_fetch(struct bfs_readahead *ra, struct bfs_fetch *w,
			const uint64_t *idx, size_t n, bfs_layout_rows *have)
{
	size_t nf = bfs_dataset_nfields(ra->ds), nr = 0, bytes = 0;
	int rc;

	*have = NULL;
	for (size_t f = 0; f < nf; f++) /* the memory needed */
		for (size_t i = 0; ra->fetch[f] && i < n; i++) {
			struct bfs_extent x;

			if (bfs_dataset_extent(ra->ds, f, idx[i], &x) < 0)
				return -ERANGE;
			bytes += ((x.off + x.len + 4095) & ~(uint64_t)4095) -
				 (x.off & ~(uint64_t)4095);
		}
	rc = fetch_fit(w, nf, n, bytes);
	bytes = 0;
	for (size_t f = 0; rc == 0 && f < nf; f++) {
		w->tab[f] = ra->fetch[f] ? w->rowp + f * n : NULL;
		for (size_t i = 0; ra->fetch[f] && i < n; i++) {
			struct bfs_extent x;
			uint64_t a, e;

			bfs_dataset_extent(ra->ds, f, idx[i], &x);
			a = x.off & ~(uint64_t)4095;
			e = (x.off + x.len + 4095) & ~(uint64_t)4095;
			w->reads[nr++] = (struct bfs_read){
			    ra->dfd[x.file], a, e - a, w->buf + bytes};
			w->rowp[f * n + i] = w->buf + bytes + (x.off - a);
			bytes += e - a;
		}
	}
	if (rc == 0)
		rc = bfs_reader_read_all(w->rd, w->reads, nr);
	if (rc == 0) {
		atomic_fetch_add_explicit(&ra->rows_fetched, nr,
					  memory_order_relaxed);
		atomic_fetch_add_explicit(&ra->bytes_fetched, bytes,
					  memory_order_relaxed);
		*have = (bfs_layout_rows)w->tab;
	}
	return rc;
}

/* ---- creation ------------------------------------------------------------ */

int bfs_readahead_create(struct bfs_readahead **out,
			 const struct bfs_dataset *ds,
			 const struct bfs_readahead_opts *o)
{
	struct bfs_readahead *ra = calloc(1, sizeof(*ra));
	uint64_t avail;
	int rc;

	*out = NULL;
	if (!ra)
		return -ENOMEM;
	pthread_mutex_init(&ra->lock, NULL);
	pthread_cond_init(&ra->moved, NULL);
	ra->ds = ds;
	ra->assume_cold = o->assume_cold;
	ra->nfiles = bfs_dataset_nfiles(ds);
	ra->files = calloc(ra->nfiles ? ra->nfiles : 1, sizeof(*ra->files));
	if (!ra->files)
		goto err_free;
	for (size_t i = 0; i < ra->nfiles; i++) {
		const struct bfs_source_file *fl = bfs_dataset_file(ds, i);
		struct chunks *m = &ra->files[i];

		if (fl->fd < 0)
			continue; /* in memory: nothing to read ahead */
		m->n = (size_t)((fl->size + CHUNK - 1) / CHUNK);
		m->w = calloc(m->n ? m->n : 1, sizeof(*m->w));
		if (!m->w)
			goto err_free;
	}
	avail = mem_available();
	if (o->memory_policy)
		memory_policy(ra, avail);
	rc = bfs_reader_create(&ra->rd, o->order ? o->reader : BFS_READER_NONE,
			       o->depth ? o->depth : 64, ra->why,
			       sizeof(ra->why));
	if (rc < 0)
		bfs_log(BFS_LOG_ERR, MOD,
			"rows cannot be read ahead as asked: %s", ra->why);
	if (rc == 0 && ra->rd && ra->cold && !o->no_fetch)
		start_fetch(ra);
	if (rc == 0 && ra->rd)
		rc = start_ahead(ra, o, avail);
	if (rc < 0) {
		bfs_readahead_destroy(ra);
		return rc;
	}
	*out = ra;
	return 0;
err_free:
	bfs_readahead_destroy(ra);
	return -ENOMEM;
}

void bfs_readahead_destroy(struct bfs_readahead *ra)
{
	if (!ra)
		return;
	atomic_store(&ra->stop, true);
	if (ra->warming)
		pthread_join(ra->warmer, NULL);
	if (ra->ahead_up) {
		pthread_mutex_lock(&ra->lock);
		pthread_cond_broadcast(&ra->moved);
		pthread_mutex_unlock(&ra->lock);
		pthread_join(ra->ahead, NULL);
	}
	bfs_reader_destroy(ra->rd); /* waits for the reads in flight */
	for (size_t i = 0; ra->rfd && i < ra->nfiles; i++)
		if (ra->rfd[i] >= 0)
			close(ra->rfd[i]);
	free(ra->rfd);
	free(ra->lane_end);
	free(ra->follow);
	free(ra->next);
	for (size_t i = 0; ra->dfd && i < ra->nfiles; i++)
		if (ra->dfd[i] >= 0)
			close(ra->dfd[i]);
	free(ra->dfd);
	free(ra->fetch);
	pthread_cond_destroy(&ra->moved);
	pthread_mutex_destroy(&ra->lock);
	for (size_t i = 0; ra->files && i < ra->nfiles; i++)
		free((void *)ra->files[i].w);
	free(ra->files);
	free(ra);
}

void bfs_readahead_stats(struct bfs_readahead *ra,
			 struct bfs_readahead_stats *out)
{
	struct bfs_reader_stats r = {0};

	out->warm_bytes = atomic_load(&ra->warm_bytes);
	out->rows_resident = atomic_load(&ra->rows_resident);
	out->rows_advised = atomic_load(&ra->rows_advised);
	out->rows_read = atomic_load(&ra->rows_read);
	out->rows_fetched = atomic_load(&ra->rows_fetched);
	out->bytes_fetched = atomic_load(&ra->bytes_fetched);
	out->batches_read = atomic_load(&ra->batches_read);
	if (ra->rd)
		bfs_reader_stats(ra->rd, &r);
	out->reads_in_flight = r.in_flight;
	out->bytes_read = r.bytes;
	out->reader = bfs_reader_kind_name(ra->rd ? bfs_reader_kind(ra->rd)
						  : BFS_READER_NONE);
	out->reader_why = ra->why;
	out->distance = 0;
	if (ra->ahead_up) {
		pthread_mutex_lock(&ra->lock);
		for (size_t l = 0; l < ra->lanes; l++)
			if (ra->follow[l] && ra->next[l] > ra->follow[l] &&
			    ra->next[l] - ra->follow[l] > out->distance)
				out->distance = ra->next[l] - ra->follow[l];
		pthread_mutex_unlock(&ra->lock);
	}
}
