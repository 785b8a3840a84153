/* fs/gather: a dataset's rows and ragged spans, copied straight from the
 * read-only mappings of its sources, safely (see dataset.h). What to read
 * ahead is fs/readahead's; rows read by the gathers themselves, fs/fetch's.
 *
 * Gather: a fixed field's row is addressed as  base + s * stride0  plus
 * its simplified per-row strides (fs/dataset.c binds them). A C-contiguous
 * row is one memcpy; anything else (a strided view, a Fortran-order .npy)
 * walks the dims with an odometer (no recursion), copying runs of the
 * innermost dim. Big-endian data is swapped in the destination. The copy
 * is bound by memory latency: the common case (copy_fast) prefetches rows
 * ahead so their cache misses overlap; 4- and 8-byte rows (scalar labels)
 * are copied inline (fs/README.md: the gather; figures in
 * tools/bench/RESULTS.md).
 *
 * Ragged fields: a sample's span (start, len) in NAME.values comes from
 * two adjacent offsets; bfs_dataset_spans reads them once per batch and
 * checks each span against what was proven at open (inside the shard's
 * values, at most max_len rows), so a file rewritten in place can never
 * make a batch larger than its size or a read leave the mapping. The
 * spans' rows are then copied like rows of a fixed field (one memcpy per
 * sample when the values are contiguous), packed or padded.
 *
 * Faults: the files stay mapped, never copied. A file truncated under us
 * would raise SIGBUS on access. Before each copy the files it reads are
 * checked against the rows it needs (a row past the end => -EIO; so a
 * truncated archive still serves the batches whose rows lie before the
 * cut); as a second line of defence the copy runs under a per-thread
 * sigsetjmp with a process-wide SIGBUS handler (installed, or re-installed
 * if someone replaced it, by the gather that finds it missing; see
 * guard_install) that siglongjmp()s back when the fault happened inside a
 * guarded copy on that thread, and otherwise hands the signal to whatever
 * handler was installed before ours (or the default action).
 * Short reads: a file on a FUSE file system whose server answers a read
 * short mid-file has told the kernel "end of file here": the kernel lowers
 * its cached size to that point and zero-fills the rest of the page, which
 * a copy would return as data. The next stat that asks the server (fstat)
 * raises the size again and drops the pages. So the size is read from the
 * kernel's cache (statx AT_STATX_DONT_SYNC) before and after each copy: a
 * cached size short of the rows copied fails the copy after it (-EIO), and
 * one found short before it is refreshed with fstat under the dataset's
 * copy_lock held for writing, while copies hold it for reading: a refresh
 * waits for the copies in flight, whose checks then still see the lowered
 * size. (A stat by another process could raise it unseen.)
 * A file modified since it was opened (its mtime moved: rewritten in
 * place, truncated) fails every copy that reads it, checked with the same
 * statx before and after each copy, so no batch mixes two versions of a
 * file (fs/README.md: a source that changes).
 * Remote files and bytes in memory are not checked so: a remote file is
 * its object's cache file, written as fetched (its mtime moves), its
 * version pinned by fs/remote. Its rows are in the mapping only while a
 * gather holds them (fs/fetch), so bfs_dataset_row refuses them (EAGAIN):
 * nothing serves a remote row from the mapping itself, until its object
 * is sealed (all of it in the cache, kept there until unmounted: then as
 * a local file's, bfs_source_file_sealed).
 * Every -EIO of a gather or check leaves, for the calling thread, the
 * file, sample and offset that could not be read (bfs_dataset_fault), for
 * the caller's log line.
 *
 * Thread-safety: the dataset is immutable after open except for the
 * changed flags (relaxed atomics: a change is said once); copy_lock only
 * orders copies against size refreshes.
 * The other mutable state is the thread-local jump-buffer pointer, fault
 * address and fault record, and the previous SIGBUS action (under
 * guard_lock). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fs/dataset_impl.h"
#include "fs/log.h"
#include "fs/npy.h"

#define MOD "dataset"

size_t bfs_dataset_shard_of(const struct bfs_dataset *ds, uint64_t g)
{
	size_t lo = 0, hi = ds->nshards;

	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (ds->shards[mid].first <= g)
			lo = mid;
		else
			hi = mid;
	}
	/* lo = the last shard starting at or before g: never an empty one
	 * (the shard after an empty one starts at the same sample). */
	return lo;
}

/* ---- copying ---------------------------------------------------------- */

static void copy_elems(uint8_t *dst, const uint8_t *src, int64_t n,
		       int64_t stride, size_t es)
{
	for (int64_t i = 0; i < n; i++, dst += es, src += stride)
		switch (es) {
		case 1:
			*dst = *src;
			break;
		case 2:
			memcpy(dst, src, 2);
			break;
		case 4:
			memcpy(dst, src, 4);
			break;
		case 8:
			memcpy(dst, src, 8);
			break;
		default:
			memcpy(dst, src, es);
			break;
		}
}

/* One row of a non-contiguous field: odometer over the outer dims, runs of
 * the innermost dim. */
static void copy_strided(uint8_t *dst, const uint8_t *row, const struct bind *b,
			 size_t es)
{
	int64_t ctr[BFS_MAX_DIMS] = {0};
	int in = b->ndim - 1;
	int64_t n = b->size[in], st = b->stride[in];
	const uint8_t *src = row;

	for (;;) {
		if (st == (int64_t)es)
			memcpy(dst, src, (size_t)n * es);
		else
			copy_elems(dst, src, n, st, es);
		dst += (size_t)n * es;
		int d = in - 1;
		while (d >= 0 && ++ctr[d] == b->size[d]) {
			src -= (b->size[d] - 1) * b->stride[d];
			ctr[d] = 0;
			d--;
		}
		if (d < 0)
			return;
		src += b->stride[d];
	}
}

/* Rows [r, r + n) of bind b into dst (n * rb bytes), C order, LE. */
static void copy_run(uint8_t *dst, const struct bind *b, uint64_t r, uint64_t n,
		     uint64_t rb, const struct bfs_field *f)
{
	const struct bfs_dtype_info *di = bfs_dtype_info(f->dtype);
	const uint8_t *row = b->base + r * b->stride0;
	uint8_t *out = dst;

	if (b->contiguous && (b->stride0 == rb || n == 1))
		memcpy(out, row, n * rb);
	else
		for (uint64_t i = 0; i < n; i++, row += b->stride0, out += rb)
			if (b->contiguous)
				memcpy(out, row, rb);
			else
				copy_strided(out, row, b, di->size);
	if (b->swap)
		bfs_npy_byteswap(dst, n * rb, di->swap_unit);
}

/* ---- the SIGBUS guard -------------------------------------------------- */

/* 'guard_jmp' is set only while this thread copies from a mapping;
 * 'guard_addr' is the address of its last fault.
 * 'old_bus' (the handler we chain to) is written under 'guard_lock' when
 * we (re)install ours: someone else (a test harness, a host program) may
 * replace our handler after we installed it, so every guarded call checks
 * that ours is still in place (one sigaction call). */
static __thread sigjmp_buf *volatile guard_jmp;
static __thread const void *volatile guard_addr;
static struct sigaction old_bus;
static pthread_mutex_t guard_lock = PTHREAD_MUTEX_INITIALIZER;

/* The last -EIO of a gather or check on this thread (bfs_dataset_fault). */
static __thread struct bfs_dataset_fault last_fault;
static __thread bool have_fault;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	if (guard_jmp) {
		guard_addr = si->si_addr;
		siglongjmp(*guard_jmp, 1);
	}
	/* Not ours: give it to the previous handler, or die as by default. */
	if ((old_bus.sa_flags & SA_SIGINFO) && old_bus.sa_sigaction) {
		old_bus.sa_sigaction(sig, si, uc);
	} else if (old_bus.sa_handler != SIG_DFL &&
		   old_bus.sa_handler != SIG_IGN && old_bus.sa_handler) {
		old_bus.sa_handler(sig);
	} else {
		signal(SIGBUS, SIG_DFL);
		raise(SIGBUS);
	}
}

static void guard_install(void)
{
	struct sigaction sa, cur;

	if (sigaction(SIGBUS, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
	    cur.sa_sigaction == on_sigbus)
		return;
	pthread_mutex_lock(&guard_lock);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigbus;
	/* NODEFER: jumping out of the handler must not leave SIGBUS blocked. */
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGBUS, NULL, &cur) == 0 &&
	    !((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigbus))
		sigaction(SIGBUS, &sa, &old_bus);
	pthread_mutex_unlock(&guard_lock);
}

int bfs_dataset_guard(int (*fn)(void *), void *arg)
{
	sigjmp_buf jb;
	int rc;

	guard_install();
	/* Save the signal mask (1): a wrapper around our handler (a
	 * sanitizer's runs handlers with every signal blocked) would
	 * otherwise leave SIGBUS blocked after the jump, and the next fault
	 * on this thread would kill the process. */
	if (sigsetjmp(jb, 1)) {
		guard_jmp = NULL;
		return -EFAULT;
	}
	guard_jmp = &jb;
	rc = fn(arg);
	guard_jmp = NULL;
	return rc;
}

/* Remember a -EIO for bfs_dataset_fault; returns -EIO. */
static int fault(const char *path, uint64_t sample, uint64_t offset)
{
	last_fault = (struct bfs_dataset_fault){
	    .path = path, .sample = sample, .offset = offset};
	have_fault = true;
	return -EIO;
}

/* The same for a file modified since it was opened. */
static int fault_changed(const char *path, uint64_t sample)
{
	fault(path, sample, BFS_NO_OFFSET);
	last_fault.changed = true;
	return -EIO;
}

int bfs_dataset_fault(struct bfs_dataset_fault *out)
{
	if (!have_fault)
		return -ENOENT;
	*out = last_fault;
	return 0;
}

/* What the kernel has cached of a mapped file (no round trip to a FUSE or
 * network server), or with 'sync' what fstat finds: its size (-1 when
 * neither can say) and its modification time (as opened when unknown). */
static int64_t file_now(const struct bfs_source_file *fl, bool sync,
			struct timespec *mtime)
{
	struct statx sx;
	struct stat st;

	*mtime = fl->mtime;
	if (sync) {
		if (fstat(fl->fd, &st) < 0)
			return -1;
		*mtime = st.st_mtim;
		return (int64_t)st.st_size;
	}
	if (statx(fl->fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC,
		  STATX_SIZE | STATX_MTIME, &sx) < 0)
		return file_now(fl, true, mtime);
	if (sx.stx_mask & STATX_MTIME) {
		mtime->tv_sec = sx.stx_mtime.tv_sec;
		mtime->tv_nsec = sx.stx_mtime.tv_nsec;
	}
	return (int64_t)sx.stx_size;
}

/* t as "2026-11-25T17:01:02.123456789Z" into buf. */
static const char *utc(char *buf, size_t len, const struct timespec *t)
{
	struct tm tm;
	time_t sec = t->tv_sec;
	size_t n = 0;

	if (gmtime_r(&sec, &tm))
		n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf + n, len - n, ".%09ldZ", (long)t->tv_nsec);
	return buf;
}

/* Whether fl was modified since it was opened: a write or a truncation
 * moves its mtime. (Not its ctime: an unlink or a rename over its path
 * moves that too, and the bytes mapped stay what they were.) */
static bool modified(const struct bfs_source_file *fl,
		     const struct timespec *mtime)
{
	return mtime->tv_sec != fl->mtime.tv_sec ||
	       mtime->tv_nsec != fl->mtime.tv_nsec;
}

/* -EIO for sample s of field f, whose file fl (sh's file i) was modified
 * since it was opened; the first time, a log line says what changed and
 * what to do. */
static int changed(const struct bfs_dataset *ds, const struct shard *sh,
		   size_t i, size_t f, uint64_t s, int64_t size,
		   const struct timespec *mtime)
{
	const struct bfs_source_file *fl = &sh->src->files[i];
	char was[40], now[40];

	if (!atomic_exchange_explicit(&sh->changed[i], true,
				      memory_order_relaxed)) {
		bfs_log(BFS_LOG_ERR, MOD,
			"%s: changed under the mount (modified %s, %" PRId64
			" bytes; it was %s, %" PRIu64 " bytes when mounted): "
			"batches that read it now fail with EIO (first: "
			"sample %" PRIu64 " of field '%s'). To replace a "
			"mounted dataset, write a new file and rename it over "
			"the old one, then remount",
			fl->path, utc(now, sizeof(now), mtime), size,
			utc(was, sizeof(was), &fl->mtime), fl->size, s,
			ds->fields[f].name);
	}
	return fault_changed(fl->path, s);
}

/* The shards idx[0..n) touch, each once (all of them when there are more
 * than 64: no bitmap). Start with *pos = *seen = 0; NULL at the end. */
static const struct shard *next_shard(const struct bfs_dataset *ds,
				      const uint64_t *idx, size_t n,
				      size_t *pos, uint64_t *seen)
{
	if (ds->nshards > 64)
		return *pos < ds->nshards ? &ds->shards[(*pos)++] : NULL;
	while (*pos < n) {
		size_t s = bfs_dataset_shard_of(ds, idx[(*pos)++]);

		if (*seen & (1ull << s))
			continue;
		*seen |= 1ull << s;
		return &ds->shards[s];
	}
	return NULL;
}

/* The file of sh that field f's rows live in. */
static const struct bfs_source_file *file_of(const struct shard *sh, size_t f)
{
	return &sh->src->files[sh->binds[f].file];
}

/* Bytes of f's file that sample g's row of field f needs (up to the end
 * of the row). A ragged field's spans are only known while copying: it
 * needs its whole values (and offsets) as mapped at open. */
static uint64_t row_end(const struct shard *sh, size_t f, uint64_t g)
{
	const struct bind *b = &sh->binds[f];

	if (sh->obinds && sh->obinds[f].base)
		return file_of(sh, f)->size;
	return (uint64_t)(b->base - file_of(sh, f)->map) +
	       (g - sh->first) * b->stride0 + b->span;
}

/* The largest of idx[0..n) in sh (rows of later samples lie further:
 * stride0 >= 0); false when none is in sh. */
static bool last_in(const struct shard *sh, const uint64_t *idx, size_t n,
		    uint64_t *hi)
{
	bool any = false;

	for (size_t i = 0; i < n; i++)
		if (idx[i] >= sh->first && idx[i] - sh->first < sh->samples &&
		    (!any || idx[i] > *hi)) {
			*hi = idx[i];
			any = true;
		}
	return any;
}

/* The first of idx[0..n) in sh whose row of field f reaches past byte
 * 'end' of its file: the one holding 'end' if any does. */
static uint64_t first_past(const struct shard *sh, size_t f,
			   const uint64_t *idx, size_t n, uint64_t end)
{
	uint64_t found = idx[0];
	bool any = false;

	for (size_t i = 0; i < n; i++) {
		uint64_t e;

		if (idx[i] < sh->first || idx[i] - sh->first >= sh->samples)
			continue;
		e = row_end(sh, f, idx[i]);
		if (e <= end)
			continue;
		if (e - sh->binds[f].span <= end)
			return idx[i];
		if (!any)
			found = idx[i];
		any = true;
	}
	return found;
}

/* One field f of one shard against its file's size: 0, or -EIO with a
 * log line when a row that idx[0..n) need lies past the end (hi: the
 * largest of them in sh, last_in). 'after': checked after the copy (a
 * short read meanwhile, see the file comment), else before it, where a
 * cached size found short is refreshed first. */
static int check_field(const struct bfs_dataset *ds, const struct shard *sh,
		       size_t f, const uint64_t *idx, size_t n, uint64_t hi,
		       bool after)
{
	const struct bfs_source_file *fl = file_of(sh, f);
	struct timespec mt;
	uint64_t need, s;
	int64_t size;

	/* in memory; or remote: a cache file of its object's size, written
	 * as fetched (its mtime moves), its version pinned by fs/remote */
	if (!bfs_source_file_local(fl))
		return 0;
	need = row_end(sh, f, hi);
	if (!need)
		return 0;
	size = file_now(fl, false, &mt);
	if (modified(fl, &mt))
		return changed(ds, sh, sh->binds[f].file, f, hi, size, &mt);
	if (size >= (int64_t)need)
		return 0;
	if (!after) {
		pthread_rwlock_wrlock(ds->copy_lock);
		size = file_now(fl, true, &mt);
		pthread_rwlock_unlock(ds->copy_lock);
		if (modified(fl, &mt))
			return changed(ds, sh, sh->binds[f].file, f, hi, size,
				       &mt);
		if (size >= (int64_t)need)
			return 0;
	}
	s = size < 0 ? hi : first_past(sh, f, idx, n, (uint64_t)size);
	if (after)
		bfs_log(BFS_LOG_ERR, MOD,
			"%s: read short while field '%s' was copied (the file "
			"system reported its end at %" PRId64 " of %" PRIu64
			"); sample %" PRIu64 " not served",
			fl->path, ds->fields[f].name, size, fl->size, s);
	else
		bfs_log(BFS_LOG_ERR, MOD,
			"%s: archive truncated or unreadable (size now %" PRId64
			" < %" PRIu64 " mapped); sample %" PRIu64
			" of field '%s' not read",
			fl->path, size, fl->size, s, ds->fields[f].name);
	return fault(fl->path, s, size < 0 ? BFS_NO_OFFSET : (uint64_t)size);
}

/* Field f (SIZE_MAX: every field) of every shard idx[0..n) touch against
 * the size of its file; see check_field. */
static int check_shards(const struct bfs_dataset *ds, size_t f,
			const uint64_t *idx, size_t n, bool after)
{
	uint64_t seen = 0, hi = 0;
	size_t pos = 0;
	const struct shard *sh;
	int rc;

	while ((sh = next_shard(ds, idx, n, &pos, &seen))) {
		if (!last_in(sh, idx, n, &hi))
			continue;
		for (size_t g = 0; g < ds->nfields; g++)
			if ((f == SIZE_MAX || g == f) &&
			    (rc = check_field(ds, sh, g, idx, n, hi, after)))
				return rc;
	}
	return 0;
}

/* The shard holding global sample g. */
static const struct shard *shard_at(const struct bfs_dataset *ds, uint64_t g)
{
	return ds->nshards == 1 ? ds->shards
				: &ds->shards[bfs_dataset_shard_of(ds, g)];
}

/* Where row g of field fi starts, and its shard in *shp. */
static const uint8_t *row_at(const struct bfs_dataset *ds, size_t fi,
			     uint64_t g, const struct shard **shp)
{
	const struct shard *sh = shard_at(ds, g);

	*shp = sh;
	return sh->binds[fi].base + (g - sh->first) * sh->binds[fi].stride0;
}

/* ---- gathering -------------------------------------------------------- */

/* One guarded copy: what to copy and, on a fault, how far it got. */
struct job {
	const struct bfs_dataset *ds;
	size_t f;
	const uint64_t *idx;
	const struct bfs_span *spans; /* ragged; NULL for rows */
	size_t n;
	uint64_t width; /* ragged: rows per sample, 0 = packed */
	const void *pad;
	uint8_t *dst;
	volatile size_t at; /* the row being copied (copy_fast: none) */
};

/* How far ahead the fast loop issues the loads of rows (rows). */
#define AHEAD 8

/* The rows of one shard stored as served (contiguous, little-endian):
 * one copy each, the first cache line of the row AHEAD rows on asked for
 * early so the cache misses of random rows overlap; 4- and 8-byte rows
 * (scalar labels) are copied inline. No per-row bookkeeping: a fault's
 * row is found from its address afterwards (fault_at). */
static void copy_fast(uint8_t *dst, const uint8_t *base, uint64_t stride,
		      const uint64_t *idx, size_t n, uint64_t rb)
{
	size_t i = 0;

#define FAST_LOOP(SIZE)                                                        \
	for (; i < n; i++, dst += (SIZE)) {                                    \
		if (i + AHEAD < n)                                             \
			__builtin_prefetch(base + idx[i + AHEAD] * stride);    \
		memcpy(dst, base + idx[i] * stride, (SIZE));                   \
	}
	if (rb == 8)
		FAST_LOOP(8)
	else if (rb == 4)
		FAST_LOOP(4)
	else
		FAST_LOOP(rb)
#undef FAST_LOOP
}

/* Whether field f's rows are copied by copy_fast: one shard, its rows
 * stored as served. */
static bool rows_fast(const struct bfs_dataset *ds, size_t f)
{
	const struct bind *b = &ds->shards[0].binds[f];

	return ds->nshards == 1 && b->contiguous && !b->swap;
}

/* The copy loop of a fixed field. */
static int copy_rows(void *arg)
{
	struct job *j = arg;
	const struct bfs_field *f = &j->ds->fields[j->f];
	size_t unit = bfs_dtype_info(f->dtype)->swap_unit;
	uint64_t rb = f->row_bytes;
	uint8_t *dst = j->dst;
	const struct bind *b0 = &j->ds->shards[0].binds[j->f];

	if (!rb)
		return 0;
	if (rows_fast(j->ds, j->f)) {
		copy_fast(dst, b0->base, b0->stride0, j->idx, j->n, rb);
		return 0;
	}
	for (size_t i = 0; i < j->n; i++, dst += rb) {
		const struct shard *sh;
		const uint8_t *row = row_at(j->ds, j->f, j->idx[i], &sh);
		const struct bind *b = &sh->binds[j->f];

		j->at = i;
		/* scalar labels: a constant size is copied inline, no call */
		if (b->contiguous && rb == 8)
			memcpy(dst, row, 8);
		else if (b->contiguous && rb == 4)
			memcpy(dst, row, 4);
		else if (b->contiguous)
			memcpy(dst, row, rb);
		else
			copy_strided(dst, row, b,
				     bfs_dtype_info(f->dtype)->size);
		if (b->swap)
			bfs_npy_byteswap(dst, rb, unit);
	}
	return 0;
}

/* Fill 'rows' rows of rb bytes at dst with the element 'pad' of es bytes. */
static void fill_pad(uint8_t *dst, uint64_t rows, uint64_t rb,
		     const uint8_t *pad, size_t es)
{
	uint64_t n = rows * rb;
	bool zero = true;

	for (size_t i = 0; i < es; i++)
		zero = zero && !pad[i];
	if (zero) {
		memset(dst, 0, n);
		return;
	}
	for (uint64_t i = 0; i < n; i += es)
		memcpy(dst + i, pad, es);
}

/* The copy loop of a ragged field. */
static int copy_spans(void *arg)
{
	struct job *j = arg;
	const struct bfs_field *f = &j->ds->fields[j->f];
	size_t es = bfs_dtype_info(f->dtype)->size;
	uint64_t rb = f->row_bytes;
	uint8_t *dst = j->dst;

	for (size_t i = 0; i < j->n; i++) {
		const struct shard *sh = shard_at(j->ds, j->idx[i]);
		uint64_t len = j->spans[i].len;

		j->at = i;
		if (len && rb)
			copy_run(dst, &sh->binds[j->f], j->spans[i].start, len,
				 rb, f);
		dst += len * rb;
		if (j->width && rb) {
			fill_pad(dst, j->width - len, rb, j->pad, es);
			dst += (j->width - len) * rb;
		}
	}
	return 0;
}

/* Where in its file a fault at address a in shard sh lies (for the log
 * line), or BFS_NO_OFFSET. */
static uint64_t fault_offset(const struct shard *sh, uintptr_t a,
			     const char **path)
{
	*path = sh->src->path;
	for (size_t i = 0; i < sh->src->nfiles; i++) {
		const struct bfs_source_file *fl = &sh->src->files[i];
		uintptr_t m = (uintptr_t)fl->map;

		if (fl->map && a >= m && a - m < fl->size) {
			*path = fl->path;
			return (uint64_t)(a - m);
		}
	}
	return BFS_NO_OFFSET;
}

/* The index in j->idx of the row (of copy_fast, one shard) holding
 * address a; 0 when none does (a fault in the AHEAD prefetch cannot
 * happen: prefetches do not fault). */
static size_t fault_at(const struct job *j, uintptr_t a)
{
	const struct bind *b = &j->ds->shards[0].binds[j->f];

	for (size_t i = 0; i < j->n; i++) {
		uintptr_t r = (uintptr_t)(b->base + j->idx[i] * b->stride0);

		if (a >= r && a - r < b->span)
			return i;
	}
	return 0;
}

/* Run the copy 'fn' of job j guarded, between the size checks of the
 * files it reads (before: truncated; after: read short meanwhile); a
 * fault is logged and is -EIO, with the thread's fault record. */
static int run_job(struct job *j, int (*fn)(void *))
{
	const struct shard *sh;
	const char *path;
	uint64_t off;
	int rc;

	rc = check_shards(j->ds, j->f, j->idx, j->n, false);
	if (rc)
		return rc;
	pthread_rwlock_rdlock(j->ds->copy_lock);
	rc = bfs_dataset_guard(fn, j);
	if (!rc)
		rc = check_shards(j->ds, j->f, j->idx, j->n, true);
	pthread_rwlock_unlock(j->ds->copy_lock);
	if (rc != -EFAULT)
		return rc;
	if (fn == copy_rows && rows_fast(j->ds, j->f))
		j->at = fault_at(j, (uintptr_t)guard_addr);
	sh = shard_at(j->ds, j->idx[j->at]);
	off = fault_offset(sh, (uintptr_t)guard_addr, &path);
	bfs_log(BFS_LOG_ERR, MOD,
		"%s: SIGBUS reading sample %" PRIu64 " of field '%s' at "
		"archive offset %" PRId64 " (archive truncated, replaced or "
		"unreadable)",
		path, j->idx[j->at], j->ds->fields[j->f].name,
		off == BFS_NO_OFFSET ? (int64_t)-1 : (int64_t)off);
	return fault(path, j->idx[j->at], off);
}

static int check_idx(const struct bfs_dataset *ds, const uint64_t *idx,
		     size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (idx[i] >= ds->samples)
			return -ERANGE;
	return 0;
}

int bfs_dataset_gather(const struct bfs_dataset *ds, size_t f,
		       const uint64_t *idx, size_t n, void *dst)
{
	struct job j = {ds, f, idx, NULL, n, 0, NULL, dst, 0};

	have_fault = false;
	if (f >= ds->nfields || ds->fields[f].ragged)
		return -EINVAL;
	return check_idx(ds, idx, n) ?: run_job(&j, copy_rows);
}

int64_t bfs_dataset_offset_at(const struct bind *ob, uint64_t i)
{
	uint8_t b[8];
	int64_t v;

	memcpy(b, ob->base + i * ob->stride0, 8);
	if (ob->swap)
		bfs_npy_byteswap(b, 8, 8);
	memcpy(&v, b, 8);
	return v;
}

/* The spans of job j, checked against what open proved. */
static int read_spans(void *arg)
{
	struct job *j = arg;
	const struct bfs_field *f = &j->ds->fields[j->f];
	struct bfs_span *out = (struct bfs_span *)j->dst;

	for (size_t i = 0; i < j->n; i++) {
		const struct shard *sh = shard_at(j->ds, j->idx[i]);
		const struct bind *ob = &sh->obinds[j->f];
		uint64_t s = j->idx[i] - sh->first;
		int64_t a = bfs_dataset_offset_at(ob, s);
		int64_t b = bfs_dataset_offset_at(ob, s + 1);

		j->at = i;
		if (a < 0 || b < a || (uint64_t)b > sh->binds[j->f].rows ||
		    (uint64_t)(b - a) > f->max_len)
			return -ESTALE;
		out[i].start = (uint64_t)a;
		out[i].len = (uint64_t)(b - a);
	}
	return 0;
}

int bfs_dataset_spans(const struct bfs_dataset *ds, size_t f,
		      const uint64_t *idx, size_t n, struct bfs_span *spans)
{
	struct job j = {ds, f, idx, NULL, n, 0, NULL, (uint8_t *)spans, 0};
	int rc;

	have_fault = false;
	if (f >= ds->nfields || !ds->fields[f].ragged)
		return -EINVAL;
	rc = check_idx(ds, idx, n) ?: run_job(&j, read_spans);
	if (rc != -ESTALE)
		return rc;
	bfs_log(BFS_LOG_ERR, MOD,
		"%s: the offsets of ragged field '%s' changed under us at "
		"sample %" PRIu64 " (the file was rewritten in place)",
		shard_at(ds, idx[j.at])->src->path, ds->fields[f].name,
		idx[j.at]);
	return fault(shard_at(ds, idx[j.at])->src->path, idx[j.at],
		     BFS_NO_OFFSET);
}

int bfs_dataset_gather_spans(const struct bfs_dataset *ds, size_t f,
			     const uint64_t *idx, const struct bfs_span *spans,
			     size_t n, uint64_t width, const void *pad,
			     void *dst)
{
	struct job j = {ds, f, idx, spans, n, width, pad, dst, 0};

	have_fault = false;
	if (f >= ds->nfields || !ds->fields[f].ragged || (width && !pad))
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		const struct shard *sh;

		if (idx[i] >= ds->samples)
			return -ERANGE;
		sh = shard_at(ds, idx[i]);
		if ((width && spans[i].len > width) ||
		    spans[i].start > sh->binds[f].rows ||
		    spans[i].len > sh->binds[f].rows - spans[i].start)
			return -EINVAL;
	}
	return run_job(&j, copy_spans);
}

int bfs_dataset_check(const struct bfs_dataset *ds, const uint64_t *idx,
		      size_t n)
{
	have_fault = false;
	return check_idx(ds, idx, n)
		   ?: check_shards(ds, SIZE_MAX, idx, n, false);
}

int bfs_dataset_copy_checked(const struct bfs_dataset *ds, const uint64_t *idx,
			     size_t n, int (*fn)(void *), void *arg)
{
	int rc;

	have_fault = false;
	rc = check_idx(ds, idx, n) ?: check_shards(ds, SIZE_MAX, idx, n, false);
	if (rc)
		return rc;
	pthread_rwlock_rdlock(ds->copy_lock);
	rc = fn(arg);
	if (!rc)
		rc = check_shards(ds, SIZE_MAX, idx, n, true);
	pthread_rwlock_unlock(ds->copy_lock);
	return rc;
}

int bfs_dataset_row(const struct bfs_dataset *ds, size_t f, uint64_t i,
		    const void **ptr)
{
	const struct shard *sh;
	const uint8_t *row;

	if (f >= ds->nfields)
		return -EINVAL;
	if (i >= ds->samples)
		return -ERANGE;
	if (ds->fields[f].ragged)
		return -ENOTSUP;
	row = row_at(ds, f, i, &sh);
	if (!sh->binds[f].contiguous || sh->binds[f].swap)
		return -ENOTSUP;
	if (bfs_source_file_remote(file_of(sh, f)) &&
	    !bfs_source_file_sealed(file_of(sh, f)))
		return -EAGAIN; /* there only while a gather holds it */
	*ptr = row;
	return 0;
}

int bfs_dataset_extent(const struct bfs_dataset *ds, size_t f, uint64_t i,
		       struct bfs_extent *out)
{
	const struct shard *sh;
	const struct bfs_source_file *fl;
	const uint8_t *row;

	if (f >= ds->nfields || ds->fields[f].ragged)
		return -EINVAL;
	if (i >= ds->samples)
		return -ERANGE;
	row = row_at(ds, f, i, &sh);
	fl = file_of(sh, f);
	out->file = sh->file0 + sh->binds[f].file;
	out->off = (uint64_t)(row - fl->map);
	out->len = sh->binds[f].span;
	return 0;
}

int bfs_dataset_span_extent(const struct bfs_dataset *ds, size_t f, uint64_t i,
			    const struct bfs_span *sp, struct bfs_extent *out)
{
	const struct shard *sh;
	const struct bind *b;

	if (f >= ds->nfields || !ds->fields[f].ragged)
		return -EINVAL;
	if (i >= ds->samples)
		return -ERANGE;
	sh = shard_at(ds, i);
	b = &sh->binds[f];
	if (sp->start > b->rows || sp->len > b->rows - sp->start)
		return -ERANGE;
	out->file = sh->file0 + b->file;
	out->off =
	    (uint64_t)(b->base - file_of(sh, f)->map) + sp->start * b->stride0;
	out->len = sp->len ? (sp->len - 1) * b->stride0 + b->span : 0;
	return 0;
}
