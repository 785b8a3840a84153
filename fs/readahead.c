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
 * Thread-safety: the words and counters are relaxed atomics (hints and
 * statistics; threads racing on one chunk store the same kind of
 * answer); the rest is immutable after creation. */
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
#include <time.h>
#include <unistd.h>

#include "fs/log.h"

#define MOD "readahead"

#define CHUNK	    ((uint64_t)2 << 20)
#define TICK_NS	    125000000ull /* 1/8 s */
#define TICK_MASK   0x7fffffffu
#define WINDOW	    8u			 /* ticks: 1 s */
#define WARM_WINDOW ((uint64_t)32 << 20) /* the read-in checks for a stop */

/* The residency words of one mapped file. */
struct chunks {
	_Atomic uint32_t *w; /* NULL for files given in memory */
	size_t n;
};

struct bfs_readahead {
	const struct bfs_dataset *ds;
	struct chunks *files; /* [bfs_dataset_nfiles] */
	size_t nfiles;
	_Atomic uint64_t warm_bytes, rows_resident, rows_advised;
	pthread_t warmer; /* the read-in, when the data fits */
	bool warming;
	atomic_bool stop;
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
			break;
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
static void memory_policy(struct bfs_readahead *ra)
{
	uint64_t need = bfs_dataset_bytes(ra->ds), avail = mem_available();

	if (need > avail / 2) {
		bfs_log(BFS_LOG_INFO, "pool",
			"archives (%llu MiB) do not fit in half the memory "
			"available (%llu MiB, memory cgroups included): read "
			"ahead batch by batch",
			(unsigned long long)(need >> 20),
			(unsigned long long)(avail >> 20));
		random_access(ra);
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

		if (bfs_dataset_field(ra->ds, f)->ragged)
			continue;
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

/* ---- creation ------------------------------------------------------------ */

int bfs_readahead_create(struct bfs_readahead **out,
			 const struct bfs_dataset *ds,
			 const struct bfs_readahead_opts *o)
{
	struct bfs_readahead *ra = calloc(1, sizeof(*ra));

	*out = NULL;
	if (!ra)
		return -ENOMEM;
	ra->ds = ds;
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
	atomic_init(&ra->stop, false);
	if (o->memory_policy)
		memory_policy(ra);
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
	if (ra->warming) {
		atomic_store(&ra->stop, true);
		pthread_join(ra->warmer, NULL);
	}
	for (size_t i = 0; ra->files && i < ra->nfiles; i++)
		free((void *)ra->files[i].w);
	free(ra->files);
	free(ra);
}

void bfs_readahead_stats(const struct bfs_readahead *ra,
			 struct bfs_readahead_stats *out)
{
	out->warm_bytes = atomic_load(&ra->warm_bytes);
	out->rows_resident = atomic_load(&ra->rows_resident);
	out->rows_advised = atomic_load(&ra->rows_advised);
}
