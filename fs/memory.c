/* fs/memory: the memory policy (memory.h; fs/README.md: cold data, with
 * the figures).
 *
 * The probe: MemAvailable from meminfo; the memory cgroups from the
 * process's cgroup file ("ID:controllers:path" lines: ID 0 is the v2
 * hierarchy, others v1, of which the one with the memory controller
 * counts), each found under its hierarchy's mount point (mountinfo: file
 * system "cgroup2", or "cgroup" with "memory" in its super options); the
 * room a cgroup leaves is limit - usage (v2 memory.max and
 * memory.current, v1 memory.limit_in_bytes and memory.usage_in_bytes,
 * where "no limit" is written as about 2^63), the tightest of the cgroup
 * and its ancestors up to the mount point.
 *
 * The policy (apply): the dataset's files are read in when they fit in
 * half the memory available; else (or when opts.assume_cold,
 * BATCHFS_DEBUG_COLD, says they do not) their mappings are marked
 * MADV_RANDOM. Remote files (their own cache) are neither counted, read
 * in nor advised; files in memory (fd < 0) are counted, never read in
 * nor advised.
 *
 * The read-in reads whole files, in order and in 32 MiB windows, with
 * MADV_POPULATE_READ: the kernel reads them sequentially (so a cold epoch
 * can run at the device's sequential rate rather than its random-read
 * rate) and maps every page, so no row costs a page fault on its first
 * touch. It runs on its own thread, every signal blocked (no fault can
 * come here: a shrunk file fails the madvise with EFAULT), checks for a
 * stop between windows, and sets read_in once every file is read.
 *
 * Thread-safety: bytes, read_in and stop are atomics; the rest is set
 * before the thread starts and immutable after. */
#include "fs/memory.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "fs/log.h"
#include "fs/source.h"

#define MOD "memory"

#define WARM_WINDOW ((uint64_t)32 << 20) /* the read-in checks for a stop */

struct bfs_memory {
	const struct bfs_dataset *ds;
	uint64_t avail; /* at creation */
	bool cold;	/* does not fit, or taken not to */
	pthread_t warmer;
	bool warming; /* the read-in thread was started */
	_Atomic uint64_t bytes;
	atomic_bool read_in; /* it ended, every file read */
	atomic_bool stop;
};

/* ---- the probe ----------------------------------------------------------- */

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
 * "cgroup" with the memory controller) in mountinfo file 'path', into
 * out; false when none. */
static bool cgroup_mount(const char *path, bool v1, char *out, size_t len)
{
	FILE *f = fopen(path, "r");
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
 * limit it); UINT64_MAX when none limits it. */
static uint64_t cgroup_room(const struct bfs_memory_files *fs)
{
	FILE *f = fopen(fs->cgroup, "r");
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
		if (!cgroup_mount(fs->mountinfo, v1, mnt, sizeof(mnt)))
			continue;
		r = cgroup_room_at(mnt, strcmp(b + 1, "/") ? b + 1 : "", v1);
		room = r < room ? r : room;
	}
	if (f)
		fclose(f);
	return room;
}

uint64_t bfs_memory_available(const struct bfs_memory_files *files)
{
	const struct bfs_memory_files fs = {
	    .meminfo =
		files && files->meminfo ? files->meminfo : "/proc/meminfo",
	    .cgroup =
		files && files->cgroup ? files->cgroup : "/proc/self/cgroup",
	    .mountinfo = files && files->mountinfo ? files->mountinfo
						   : "/proc/self/mountinfo",
	};
	FILE *f = fopen(fs.meminfo, "r");
	unsigned long long kb = 0;
	uint64_t room = cgroup_room(&fs);
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
static bool warm_file(struct bfs_memory *m, const struct bfs_source_file *fl)
{
	for (uint64_t off = 0; bfs_source_file_local(fl) && off < fl->size;
	     off += WARM_WINDOW) {
		uint64_t len =
		    fl->size - off < WARM_WINDOW ? fl->size - off : WARM_WINDOW;

		if (atomic_load(&m->stop))
			return false;
		/* Faults the pages in, in order (the kernel reads ahead
		 * sequentially) and maps them; a shrunk file fails with
		 * EFAULT, no signal. Older kernels: just read ahead. */
		if (madvise((void *)(fl->map + off), (size_t)len,
			    MADV_POPULATE_READ) < 0 &&
		    errno == EINVAL)
			posix_fadvise(fl->fd, (off_t)off, (off_t)len,
				      POSIX_FADV_WILLNEED);
		atomic_fetch_add_explicit(&m->bytes, len, memory_order_relaxed);
	}
	return true;
}

static void *warmer_main(void *arg)
{
	struct bfs_memory *m = arg;
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL); /* no fault can come here */
	for (size_t i = 0; i < bfs_dataset_nfiles(m->ds); i++)
		if (!warm_file(m, bfs_dataset_file(m->ds, i)))
			return NULL;
	atomic_store(&m->read_in, true);
	return NULL;
}

/* Mark every mapping for random access. */
static void random_access(const struct bfs_dataset *ds)
{
	for (size_t i = 0; i < bfs_dataset_nfiles(ds); i++) {
		const struct bfs_source_file *fl = bfs_dataset_file(ds, i);

		if (bfs_source_file_local(fl) && fl->size)
			madvise((void *)fl->map, (size_t)fl->size, MADV_RANDOM);
	}
}

/* Read the data in, in the background, when it fits in half the memory
 * available; else mark it for random access. */
static void apply(struct bfs_memory *m, bool assume_cold)
{
	uint64_t need = 0;

	for (size_t i = 0; i < bfs_dataset_nfiles(m->ds); i++) {
		const struct bfs_source_file *fl = bfs_dataset_file(m->ds, i);

		if (!bfs_source_file_remote(fl)) /* its own cache */
			need += fl->size;
	}

	if (need > m->avail / 2 || assume_cold) {
		bfs_log(BFS_LOG_INFO, MOD,
			"archives (%llu MiB) do not fit in half the memory "
			"available (%llu MiB, memory cgroups included)%s: read "
			"ahead batch by batch",
			(unsigned long long)(need >> 20),
			(unsigned long long)(m->avail >> 20),
			assume_cold ? " or are taken not to "
				      "(BATCHFS_DEBUG_COLD)"
				    : "");
		random_access(m->ds);
		m->cold = true;
		return;
	}
	m->warming = pthread_create(&m->warmer, NULL, warmer_main, m) == 0;
}

/* ---- the object ---------------------------------------------------------- */

int bfs_memory_create(struct bfs_memory **out, const struct bfs_dataset *ds,
		      const struct bfs_memory_opts *o)
{
	struct bfs_memory *m = calloc(1, sizeof(*m));

	*out = NULL;
	if (!m)
		return -ENOMEM;
	m->ds = ds;
	m->avail = bfs_memory_available(o->files);
	if (o->policy)
		apply(m, o->assume_cold);
	*out = m;
	return 0;
}

void bfs_memory_destroy(struct bfs_memory *m)
{
	if (!m)
		return;
	atomic_store(&m->stop, true);
	if (m->warming)
		pthread_join(m->warmer, NULL);
	free(m);
}

uint64_t bfs_memory_avail(const struct bfs_memory *m)
{
	return m->avail;
}

bool bfs_memory_cold(const struct bfs_memory *m)
{
	return m && m->cold;
}

bool bfs_memory_reading_in(const struct bfs_memory *m)
{
	return m && m->warming;
}

bool bfs_memory_read_in(const struct bfs_memory *m)
{
	return m && atomic_load_explicit(&m->read_in, memory_order_relaxed);
}

uint64_t bfs_memory_read_in_bytes(const struct bfs_memory *m)
{
	return m ? atomic_load_explicit(&m->bytes, memory_order_relaxed) : 0;
}
