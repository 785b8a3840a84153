/* fs/dataset: fields and rows over one or several torch.save archives.
 *
 * Open: each archive is mapped and parsed by fs/zip (which refuses
 * TorchScript archives), its version and byteorder records are checked,
 * data.pkl is run through the restricted VM of fs/pickle, and every tensor
 * is bound to its storage record "<prefix>/data/<key>" (record size must
 * equal numel x elsize of the storage type exactly, as torch checks).
 * Every top-level tensor is a field; all share dim 0 (= the archive's
 * sample count). Shards must have the same fields (by name, in any order),
 * dtypes and per-sample shapes; they are concatenated along dim 0.
 *
 * Limits (refused at open, naming the file and the field): a sample's
 * elements and bytes fit 2^63 - 1 (fs/size); at most BFS_MAX_FIELDS fields; the
 * metadata of all archives (directories, pickle VMs and results, field tables,
 * bindings) is charged to one budget, BFS_DATASET_META_BUDGET.
 *
 * Gather: a row is addressed as  base + (offset + s * stride0) * elsize  plus
 * the per-sample strides. At open the per-sample dims are simplified (size-1
 * dims dropped, mergeable dims merged) so a C-contiguous row is one memcpy;
 * anything else walks the dims with an odometer (no recursion), copying runs
 * of the innermost dim. Big-endian archives are swapped in the destination.
 * Cost (tests/bin/gather_bench: one thread, random rows, resident): the
 * copy is bound by memory latency (88 % of the time inside memcpy; 784-byte
 * rows 5.5 M, 256-byte rows 16 M, int64 rows 56-60 M rows per CPU-second).
 * The per-call fstat + sigaction below cost under 1 %, so they stay per
 * call (so does the signal-mask save of sigsetjmp: gather_bench's rows/s
 * with and without it differ by less than its run-to-run noise, 20 %);
 * software prefetch of the rows 4, 8 or 16 ahead was measured and gained
 * nothing beyond noise (3 %), so there is none. 4- and 8-byte rows
 * (scalar labels) are copied inline (was 45-52 M rows/s via the libc call).
 *
 * Faults: the archive stays mapped, never copied. A file truncated under us
 * would raise SIGBUS on access. Before each gather the size of the shards
 * touched is checked (shrunk => -EIO); as a second line of defence the copy
 * runs under a per-thread sigsetjmp with a process-wide SIGBUS handler
 * (installed, or re-installed if someone replaced it, by the gather that
 * finds it missing; see guard_install) that siglongjmp()s back when the
 * fault happened inside a guarded copy on that thread, and otherwise hands
 * the signal to whatever handler was installed before ours (or the default
 * action).
 * The size check is per row: a gather fails only when a row it needs
 * reaches past the file's end, so a truncated archive still serves the
 * batches whose rows are all before the cut.
 * Short reads: an archive on a FUSE file system whose server answers a
 * read short mid-file has told the kernel "end of file here": the kernel
 * lowers its cached size to that point and zero-fills the rest of the
 * page, which a copy would return as data (the pages after it fault). The
 * next stat that asks the server (fstat) raises the size again and drops
 * the pages. So the size is read from the kernel's cache (statx
 * AT_STATX_DONT_SYNC) before and after each copy: a cached size short of
 * the rows copied fails the gather after the copy (-EIO), and one found
 * short before it is refreshed with fstat, under the dataset's
 * 'copy_lock' held for writing, while copies hold it for reading: a
 * refresh waits for the copies in flight, whose checks then still see the
 * lowered size. (A stat by another process could raise it unseen; a read
 * from zero copy's replies is the kernel's copy, not checked after.)
 * Every -EIO of a gather or check leaves, for the calling thread, the
 * archive, sample and archive offset that could not be read
 * (bfs_dataset_fault), for the caller's log line.
 *
 * Advise: madvise(MADV_WILLNEED) starts reads of cold rows ahead of the
 * gather; on rows already in the page cache it is pure cost. Per-row
 * madvise of resident 784-byte rows ran at 2.2 M rows/s (0.24 us per
 * call, two fields per row) and was 42 % of the daemon's CPU on the
 * small-row benchmark. So each mapping keeps one word per 2 MiB CHUNK:
 * the first time a row of a chunk is advised (and again once the answer
 * is older than WINDOW = 1 s) one mincore() over the chunk says whether
 * all its pages are resident (11 us per chunk with page tables empty,
 * 1.1 us populated: ~6 ms a second for 1.1 GB, under 1 % of a core).
 * Rows in resident chunks are not advised; rows in other chunks are, as
 * before (coalesced page ranges), so cold data is still read ahead, and
 * a chunk that was evicted is advised again within a window. Measured
 * with tests/bin/gather_bench (1.4 M x 784 B rows + int64, one thread,
 * resident): advise 2.2 -> 90 M rows/s, advise + gather 1.45 -> 5.3-6.0
 * M rows/s (256-byte rows: 3.0 -> 14.5); end to end (batch 256, shuffled,
 * one epoch through a mount) 0.64 -> 1.20 GB/s and daemon CPU 2.47 ->
 * 0.75 s per epoch (push mode), 0.64 -> 1.13 GB/s, 1.42 -> 0.64 s (direct).
 *
 * Invariants: after open, a bfs_dataset is immutable except for the
 * advise words (relaxed atomics, only hints), so gather/advise are
 * thread-safe (copy_lock only orders copies against size refreshes). The
 * other mutable state is the thread-local jump-buffer pointer, fault
 * address and fault record, and the previous SIGBUS action (under
 * guard_lock). */
#include "fs/dataset.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fs/log.h"
#include "fs/npy.h"
#include "fs/size.h"
#include "fs/zip.h"

#define MOD	    "dataset"
#define VERSION_MAX 10
#define META_BUDGET BFS_DATASET_META_BUDGET

/* Advise memory (see the file comment): residency is tracked per CHUNK of
 * a mapping, looked up again after WINDOW ticks of TICK_NS. */
#define CHUNK	  ((uint64_t)2 << 20)
#define TICK_NS	  125000000ull /* 1/8 s */
#define TICK_MASK 0x7fffffffu
#define WINDOW	  8u /* ticks: 1 s */

/* How one field of one shard is laid out in that shard's mapping. */
struct bind {
	const uint8_t *base; /* first byte of sample 0 of this field */
	uint64_t stride0;    /* bytes between samples */
	int ndim;	     /* simplified per-sample dims */
	int64_t size[BFS_MAX_DIMS];
	int64_t stride[BFS_MAX_DIMS]; /* in bytes */
	uint64_t span;		      /* bytes a row touches from its start */
	int contiguous;		      /* a row is row_bytes consecutive bytes */
};

struct shard {
	char *path;
	struct bfs_zip *zip;
	struct bfs_pickle_result pk;
	uint64_t first, samples;
	int version, big_endian;
	struct bind *binds; /* [nfields] */
	/* Advise memory, one word per CHUNK bytes of the mapping (NULL for
	 * archives opened from memory): 0 = never looked at, else
	 * tick << 1 | resident, written with relaxed atomics (see advise). */
	uint32_t *chunks;
	size_t nchunks;
};

struct bfs_dataset {
	struct shard *shards;
	size_t nshards;
	struct bfs_field *fields;
	size_t nfields;
	uint64_t samples;
	uint64_t meta_bytes; /* metadata charged so far (META_BUDGET) */
	/* Read-held by copies, write-held by size refreshes (see Faults);
	 * writers preferred, so a refresh is not starved by busy workers. */
	pthread_rwlock_t *copy_lock;
};

/* ---- opening ---------------------------------------------------------- */

/* The bytes of record "<prefix>/<rel>" into *data, *len; 0 or -ENOENT. */
static int record(const struct bfs_zip *z, const char *rel,
		  const uint8_t **data, uint64_t *len)
{
	const struct bfs_zip_entry *e = bfs_zip_find(z, rel);

	if (!e)
		return -ENOENT;
	*data = bfs_zip_data(z, e);
	*len = e->size;
	return 0;
}

/* Decimal digits and an optional final '\n', in 1..VERSION_MAX. */
static int parse_version(const uint8_t *rec, uint64_t len, int *out)
{
	uint64_t n = len && rec[len - 1] == '\n' ? len - 1 : len;
	int v = 0;

	for (uint64_t i = 0; i < n; i++) {
		if (rec[i] < '0' || rec[i] > '9')
			return -EINVAL;
		v = v * 10 + (rec[i] - '0');
		if (v > VERSION_MAX)
			return -EINVAL;
	}
	if (n == 0 || v < 1)
		return -EINVAL;
	*out = v;
	return 0;
}

/* The version record (torch writes "3\n"; it reads versions 1..10) and
 * the byteorder record, which must be exactly "little" or "big" (torch >=
 * 2.1 refuses anything else; absent = little). TorchScript archives were
 * refused by fs/zip already. */
static int check_kind(struct shard *sh, struct bfs_error *err)
{
	const struct bfs_zip *z = sh->zip;
	const uint8_t *rec;
	uint64_t len;
	char shown[64];
	int rc;

	rc = record(z, "version", &rec, &len);
	if (rc == -ENOENT)
		rc = record(z, ".data/version", &rec, &len);
	if (rc == -ENOENT)
		return bfs_error_set(err, -EINVAL, sh->path, BFS_NO_OFFSET,
				     "no 'version' record");
	if (parse_version(rec, len, &sh->version) < 0)
		return bfs_error_set(
		    err, -EINVAL, sh->path, BFS_NO_OFFSET,
		    "unsupported archive version: version record '%s' "
		    "(batchfs, like torch, reads versions 1..%d)",
		    bfs_error_quote(shown, sizeof(shown), rec,
				    len && rec[len - 1] == '\n' ? len - 1
								: len),
		    VERSION_MAX);
	rc = record(z, "byteorder", &rec, &len);
	if (rc == -ENOENT || (len == 6 && !memcmp(rec, "little", 6)))
		return 0;
	if (len == 3 && !memcmp(rec, "big", 3)) {
		sh->big_endian = 1;
		return 0;
	}
	return bfs_error_set(err, -EINVAL, sh->path, BFS_NO_OFFSET,
			     "byteorder record '%s' (%" PRIu64
			     " bytes) is neither 'little' nor 'big'",
			     bfs_error_quote(shown, sizeof(shown), rec, len),
			     len);
}

/* Drop size-1 dims and merge dims that are contiguous with each other.
 * Only for a non-empty view, whose extent fits 2^63 - 1: every dim of
 * size >= 2 then has (size - 1) x stride within it, so these products
 * cannot overflow; they are checked all the same. 0 or -EOVERFLOW. */
static int simplify(struct bind *b, const struct bfs_pickle_tensor *t,
		    size_t es)
{
	int n = 0;

	for (int d = 1; d < t->ndim; d++) {
		uint64_t st, run, merged;

		if (t->size[d] == 1)
			continue;
		if (bfs_size_mul((uint64_t)t->stride[d], es, &st) ||
		    bfs_size_mul(st, (uint64_t)t->size[d], &run))
			return -EOVERFLOW;
		if (n && (uint64_t)b->stride[n - 1] == run) {
			if (bfs_size_mul((uint64_t)b->size[n - 1],
					 (uint64_t)t->size[d], &merged))
				return -EOVERFLOW;
			b->size[n - 1] = (int64_t)merged;
			b->stride[n - 1] = (int64_t)st;
			continue;
		}
		b->size[n] = t->size[d];
		b->stride[n] = (int64_t)st;
		n++;
	}
	b->ndim = n;
	b->contiguous = n == 0 || (n == 1 && b->stride[0] == (int64_t)es);
	return 0;
}

/* Bind tensor 't' of shard 'sh' to its storage record "data/<key>". The
 * pickle VM proved the view lies inside the storage it declared; here the
 * record must hold exactly that storage (as torch checks). */
static int bind_tensor(struct shard *sh, const struct bfs_pickle_tensor *t,
		       struct bind *b, struct bfs_error *err)
{
	const struct bfs_dtype_info *di = bfs_dtype_info(t->dtype);
	const struct bfs_dtype_info *si = bfs_dtype_info(t->storage_dtype);
	const struct bfs_zip_entry *e;
	uint64_t nbytes, extent, span = 0;
	char *rel = NULL;

	if (!di || !si ||
	    (t->storage_dtype != t->dtype && t->storage_dtype != BFS_DT_UINT8))
		return bfs_error_set(err, -EINVAL, sh->path, BFS_NO_OFFSET,
				     "field '%s': unsupported dtype/storage",
				     t->name);
	if (asprintf(&rel, "data/%s", t->storage_key) < 0)
		return -ENOMEM;
	e = bfs_zip_find(sh->zip, rel);
	free(rel);
	if (!e)
		return bfs_error_set(
		    err, -EINVAL, sh->path, BFS_NO_OFFSET,
		    "field '%s': storage record '%s/data/%s' missing", t->name,
		    sh->zip->prefix, t->storage_key);
	if (bfs_size_mul(t->storage_numel, si->size, &nbytes) ||
	    nbytes != e->size)
		return bfs_error_set(err, -EINVAL, sh->path, e->lfh_off,
				     "field '%s': record '%s' has %" PRIu64
				     " bytes, storage needs %" PRIu64 " x %zu",
				     t->name, e->name, e->size,
				     t->storage_numel, si->size);
	if (bfs_size_extent(t->size, t->stride, t->ndim, t->offset, di->size,
			    &extent) ||
	    extent > nbytes)
		return bfs_error_set(err, -EINVAL, sh->path, e->lfh_off,
				     "field '%s': view exceeds its storage "
				     "record '%s'",
				     t->name, e->name);
	/* extent 0: an empty view; its offset is not used. */
	b->base =
	    bfs_zip_data(sh->zip, e) + (extent ? t->offset * di->size : 0);
	/* Sample s is at stride0 * s: within the extent for s < size[0]. */
	b->stride0 = t->size[0] > 1 ? (uint64_t)t->stride[0] * di->size : 0;
	if (!extent) { /* nothing is ever read: any strides will do */
		b->contiguous = 1;
		return 0;
	}
	if (simplify(b, t, di->size))
		return bfs_error_set(err, -EOVERFLOW, sh->path, e->lfh_off,
				     "field '%s': strides overflow", t->name);
	for (int d = 0; d < b->ndim; d++)
		span += (uint64_t)(b->size[d] - 1) * (uint64_t)b->stride[d];
	b->span = span + di->size; /* both within the extent */
	return 0;
}

/* Charge 'bytes' of metadata read from 'path' to the dataset's budget:
 * 0, or -E2BIG with the refusal recorded. */
static int charge(struct bfs_dataset *ds, const char *path, uint64_t bytes,
		  struct bfs_error *err)
{
	if (bytes > META_BUDGET - ds->meta_bytes)
		return bfs_error_set(
		    err, -E2BIG, path, BFS_NO_OFFSET,
		    "the metadata of this dataset (%zu archive(s) so far) "
		    "needs more than %llu MiB of memory: refused",
		    ds->nshards, (unsigned long long)(META_BUDGET >> 20));
	ds->meta_bytes += bytes;
	return 0;
}

/* Field f from tensor t (shard 0): its per-sample shape and bytes, which
 * must fit 2^63 - 1 (fs/layout bounds all fields' bytes together). */
static int make_field(struct bfs_field *f, const struct bfs_pickle_tensor *t,
		      const char *path, struct bfs_error *err)
{
	size_t es = bfs_dtype_info(t->dtype)->size;
	uint64_t elems;
	char shape[160];

	f->name = strdup(t->name);
	if (!f->name)
		return -ENOMEM;
	f->dtype = t->dtype;
	f->ndim = t->ndim - 1;
	memcpy(f->shape, t->size + 1, (size_t)f->ndim * sizeof(*f->shape));
	if (bfs_size_prod(f->shape, f->ndim, &elems) ||
	    bfs_size_mul(elems, es, &f->row_bytes))
		return bfs_error_set(
		    err, -EOVERFLOW, path, BFS_NO_OFFSET,
		    "field '%s': a sample of shape %s x %zu bytes is more "
		    "than 2^63-1 bytes per sample",
		    f->name,
		    bfs_size_shape_str(shape, sizeof(shape), f->shape, f->ndim),
		    es);
	return 0;
}

/* Fields of the first shard become the dataset's fields. */
static int make_fields(struct bfs_dataset *ds, const struct shard *sh,
		       struct bfs_error *err)
{
	int rc;

	rc = charge(ds, sh->path, sh->pk.n_tensors * sizeof(*ds->fields), err);
	if (rc)
		return rc;
	ds->fields = calloc(sh->pk.n_tensors, sizeof(*ds->fields));
	if (!ds->fields)
		return -ENOMEM;
	ds->nfields = sh->pk.n_tensors;
	for (size_t i = 0; i < ds->nfields && !rc; i++)
		rc = make_field(&ds->fields[i], &sh->pk.tensors[i], sh->path,
				err);
	return rc;
}

static int by_tensor_name(const void *a, const void *b, void *arg)
{
	const struct bfs_pickle_tensor *t = arg;

	return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

/* The index in sh's tensors of the one named 'name' (ix: tensor indexes
 * sorted by name), or SIZE_MAX. */
static size_t tensor_named(const struct shard *sh, const size_t *ix,
			   const char *name)
{
	size_t lo = 0, hi = sh->pk.n_tensors;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int d = strcmp(name, sh->pk.tensors[ix[mid]].name);

		if (d == 0)
			return ix[mid];
		if (d < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return SIZE_MAX;
}

/* "uint8 [3, 32, 32]": a field's dtype and per-sample shape. */
static const char *describe(char *buf, size_t len, enum bfs_dtype dt,
			    const int64_t *shape, int ndim)
{
	char sh[160];

	snprintf(buf, len, "%s %s", bfs_dtype_info(dt)->torch_name,
		 bfs_size_shape_str(sh, sizeof(sh), shape, ndim));
	return buf;
}

/* Shard 'sh' must have the dataset's fields (by name, in any order), each
 * with the same dtype and per-sample shape: map[i] = the index in sh's
 * tensors of dataset field i. */
static int match_fields(const struct bfs_dataset *ds, const struct shard *sh,
			size_t *map, struct bfs_error *err)
{
	const struct shard *s0 = &ds->shards[0];
	size_t *ix = malloc(sh->pk.n_tensors * sizeof(*ix));
	char a[200], b[200];
	int rc = 0;

	if (!ix)
		return -ENOMEM;
	for (size_t i = 0; i < sh->pk.n_tensors; i++)
		ix[i] = i;
	qsort_r(ix, sh->pk.n_tensors, sizeof(*ix), by_tensor_name,
		sh->pk.tensors);
	for (size_t i = 0; i < ds->nfields && !rc; i++) {
		const struct bfs_field *f = &ds->fields[i];
		const struct bfs_pickle_tensor *t;

		map[i] = tensor_named(sh, ix, f->name);
		if (map[i] == SIZE_MAX) {
			rc =
			    bfs_error_set(err, -EINVAL, sh->path, BFS_NO_OFFSET,
					  "has no field '%s', which '%s' has "
					  "(shards must have the same fields)",
					  f->name, s0->path);
			break;
		}
		t = &sh->pk.tensors[map[i]];
		if (t->dtype == f->dtype && t->ndim - 1 == f->ndim &&
		    !memcmp(t->size + 1, f->shape,
			    (size_t)f->ndim * sizeof(*f->shape)))
			continue;
		rc = bfs_error_set(
		    err, -EINVAL, sh->path, BFS_NO_OFFSET,
		    "field '%s' is %s per sample here but %s in '%s' (shards "
		    "must have the same dtypes and per-sample shapes)",
		    f->name,
		    describe(a, sizeof(a), t->dtype, t->size + 1, t->ndim - 1),
		    describe(b, sizeof(b), f->dtype, f->shape, f->ndim),
		    s0->path);
	}
	if (!rc && sh->pk.n_tensors != ds->nfields)
		rc = bfs_error_set(err, -EINVAL, sh->path, BFS_NO_OFFSET,
				   "has %zu fields, '%s' has %zu (shards must "
				   "have the same fields)",
				   sh->pk.n_tensors, s0->path, ds->nfields);
	free(ix);
	return rc;
}

/* Heap of a parsed archive: its record table and names. */
static uint64_t zip_bytes(const struct bfs_zip *z)
{
	uint64_t n = sizeof(*z);

	for (size_t i = 0; i < z->n_entries; i++)
		n += sizeof(z->entries[i]) + sizeof(size_t) +
		     strlen(z->entries[i].name) + 1;
	return n;
}

/* Heap of a pickle result: its tensor table and names. */
static uint64_t pickle_bytes(const struct bfs_pickle_result *pk)
{
	uint64_t n = pk->n_tensors * sizeof(*pk->tensors);

	for (size_t i = 0; i < pk->n_tensors; i++)
		n += strlen(pk->tensors[i].name) +
		     strlen(pk->tensors[i].storage_key) + 2;
	return n;
}

/* Parse shard 'sh' at 'path': archive, kind, pickle. */
static int load_shard(struct bfs_dataset *ds, struct shard *sh,
		      const char *path, struct bfs_error *err)
{
	const struct bfs_zip_entry *pkl;
	char *label = NULL;
	int rc;

	sh->path = strdup(path);
	if (!sh->path)
		return -ENOMEM;
	rc = bfs_zip_open(&sh->zip, path, err);
	if (!rc)
		rc = charge(ds, path, zip_bytes(sh->zip), err);
	if (!rc)
		rc = check_kind(sh, err);
	if (rc)
		return rc;
	pkl = bfs_zip_find(sh->zip, "data.pkl");
	if (!pkl)
		return bfs_error_set(err, -EINVAL, path, BFS_NO_OFFSET,
				     "no '%s/data.pkl' record",
				     sh->zip->prefix);
	if (asprintf(&label, "%s:%s", path, pkl->name) < 0)
		return -ENOMEM;
	rc = bfs_pickle_load(bfs_zip_data(sh->zip, pkl), pkl->size, label,
			     META_BUDGET - ds->meta_bytes, &sh->pk, err);
	free(label);
	for (size_t i = 0; !rc && i < sh->pk.n_tensors; i++)
		if (sh->pk.tensors[i].ndim == 0)
			rc = bfs_error_set(err, -EINVAL, path, BFS_NO_OFFSET,
					   "field '%s' is a 0-dim tensor (no "
					   "sample dimension)",
					   sh->pk.tensors[i].name);
	return rc ? rc : charge(ds, path, pickle_bytes(&sh->pk), err);
}

/* Bind every dataset field to its tensor in shard sh (map: field ->
 * tensor index) and take the shard's sample count from them. */
static int bind_shard(struct bfs_dataset *ds, struct shard *sh,
		      const size_t *map, struct bfs_error *err)
{
	const struct bfs_pickle_tensor *t0 = &sh->pk.tensors[map[0]];
	int rc;

	sh->nchunks = sh->zip->fd >= 0
			  ? (size_t)((sh->zip->map_size + CHUNK - 1) / CHUNK)
			  : 0;
	rc = charge(ds, sh->path,
		    ds->nfields * sizeof(*sh->binds) +
			sh->nchunks * sizeof(*sh->chunks),
		    err);
	if (rc)
		return rc;
	sh->binds = calloc(ds->nfields, sizeof(*sh->binds));
	sh->chunks = calloc(sh->nchunks ? sh->nchunks : 1, sizeof(*sh->chunks));
	if (!sh->binds || !sh->chunks)
		return -ENOMEM;
	sh->samples = (uint64_t)t0->size[0];
	for (size_t i = 0; i < ds->nfields && !rc; i++) {
		const struct bfs_pickle_tensor *t = &sh->pk.tensors[map[i]];

		rc = bind_tensor(sh, t, &sh->binds[i], err);
		if (!rc && (uint64_t)t->size[0] != sh->samples)
			rc = bfs_error_set(
			    err, -EINVAL, sh->path, BFS_NO_OFFSET,
			    "field '%s' has %" PRId64 " samples, '%s' has "
			    "%" PRIu64 " (all fields must share dim 0)",
			    t->name, t->size[0], t0->name, sh->samples);
	}
	return rc;
}

static int open_shard(struct bfs_dataset *ds, struct shard *sh,
		      const char *path, struct bfs_error *err)
{
	size_t *map;
	int rc = load_shard(ds, sh, path, err);

	if (!rc && !ds->fields)
		rc = make_fields(ds, sh, err);
	if (rc)
		return rc;
	map = malloc(ds->nfields * sizeof(*map));
	if (!map)
		return -ENOMEM;
	rc = match_fields(ds, sh, map, err);
	if (!rc)
		rc = bind_shard(ds, sh, map, err);
	free(map);
	return rc;
}

/* A writer-preferring rwlock (copy_lock), or NULL. */
static pthread_rwlock_t *lock_new(void)
{
	pthread_rwlock_t *l = malloc(sizeof(*l));
	pthread_rwlockattr_t a;

	if (!l || pthread_rwlockattr_init(&a)) {
		free(l);
		return NULL;
	}
	pthread_rwlockattr_setkind_np(
	    &a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	if (pthread_rwlock_init(l, &a)) {
		free(l);
		l = NULL;
	}
	pthread_rwlockattr_destroy(&a);
	return l;
}

int bfs_dataset_open(struct bfs_dataset **out, const char *const *paths,
		     size_t n_paths, struct bfs_error *err)
{
	struct bfs_dataset *ds;
	int rc = -ENOMEM;

	*out = NULL;
	if (!n_paths)
		return bfs_error_set(err, -EINVAL, NULL, BFS_NO_OFFSET,
				     "no archive given");
	ds = calloc(1, sizeof(*ds));
	if (!ds)
		return -ENOMEM;
	ds->copy_lock = lock_new();
	ds->shards = calloc(n_paths, sizeof(*ds->shards));
	if (!ds->shards || !ds->copy_lock)
		goto err_close;
	for (size_t i = 0; i < n_paths; i++) {
		struct shard *sh = &ds->shards[i];
		ds->nshards = i + 1;
		rc = open_shard(ds, sh, paths[i], err);
		if (rc == -ENOMEM)
			bfs_error_set(err, rc, paths[i], BFS_NO_OFFSET,
				      "out of memory");
		if (rc)
			goto err_close;
		sh->first = ds->samples;
		if (__builtin_add_overflow(ds->samples, sh->samples,
					   &ds->samples)) {
			rc = bfs_error_set(err, -EOVERFLOW, paths[i],
					   BFS_NO_OFFSET, "too many samples");
			goto err_close;
		}
	}
	*out = ds;
	return 0;
err_close:
	bfs_dataset_close(ds);
	return rc;
}

void bfs_dataset_close(struct bfs_dataset *ds)
{
	if (!ds)
		return;
	for (size_t i = 0; ds->shards && i < ds->nshards; i++) {
		struct shard *sh = &ds->shards[i];
		free(sh->binds);
		free(sh->chunks);
		bfs_pickle_result_free(&sh->pk);
		bfs_zip_close(sh->zip);
		free(sh->path);
	}
	for (size_t i = 0; ds->fields && i < ds->nfields; i++)
		free(ds->fields[i].name);
	free(ds->fields);
	free(ds->shards);
	if (ds->copy_lock)
		pthread_rwlock_destroy(ds->copy_lock);
	free(ds->copy_lock);
	free(ds);
}

uint64_t bfs_dataset_samples(const struct bfs_dataset *ds)
{
	return ds->samples;
}

size_t bfs_dataset_nfields(const struct bfs_dataset *ds)
{
	return ds->nfields;
}

const struct bfs_field *bfs_dataset_field(const struct bfs_dataset *ds,
					  size_t i)
{
	return i < ds->nfields ? &ds->fields[i] : NULL;
}

size_t bfs_dataset_nshards(const struct bfs_dataset *ds)
{
	return ds->nshards;
}

void bfs_dataset_shard(const struct bfs_dataset *ds, size_t i,
		       struct bfs_shard_info *out)
{
	const struct shard *sh = &ds->shards[i];

	out->path = sh->path;
	out->zip = sh->zip;
	out->first_sample = sh->first;
	out->samples = sh->samples;
	out->version = sh->version;
	out->big_endian = sh->big_endian;
	out->container = sh->pk.container;
	out->pickle = &sh->pk;
}

/* ---- gathering -------------------------------------------------------- */

/* The shard holding global sample 'g' (binary search over first). */
static size_t shard_of(const struct bfs_dataset *ds, uint64_t g)
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

/* The SIGBUS guard. 'guard_jmp' is set only while this thread copies from
 * a mapping. 'old_bus' (the handler we chain to) is written under
 * 'guard_lock' when we (re)install ours: someone else (a test harness, a
 * host program) may replace our handler after we installed it, so every
 * gather checks that ours is still in place (one sigaction call). */
static __thread sigjmp_buf *volatile guard_jmp;
static __thread const void *volatile guard_addr; /* the faulting address */
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

/* Remember a -EIO for bfs_dataset_fault; returns -EIO. */
static int fault(const struct shard *sh, uint64_t sample, uint64_t offset)
{
	last_fault = (struct bfs_dataset_fault){
	    .path = sh->path, .sample = sample, .offset = offset};
	have_fault = true;
	return -EIO;
}

/* The size of sh's archive as the kernel has it cached (no round trip to
 * a FUSE or network server), or with 'sync' as fstat finds it. */
static int64_t archive_size(const struct shard *sh, bool sync)
{
	struct statx sx;
	struct stat st;

	if (sync)
		return fstat(sh->zip->fd, &st) == 0 ? (int64_t)st.st_size : -1;
	if (statx(sh->zip->fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC,
		  STATX_SIZE, &sx) < 0)
		return archive_size(sh, true);
	return (int64_t)sx.stx_size;
}

/* The shards idx[0..n) touch, each once (all of them when there are more
 * than 64: no bitmap). Start with *pos = *seen = 0; NULL at the end. */
static struct shard *next_shard(const struct bfs_dataset *ds,
				const uint64_t *idx, size_t n, size_t *pos,
				uint64_t *seen)
{
	if (ds->nshards > 64)
		return *pos < ds->nshards ? &ds->shards[(*pos)++] : NULL;
	while (*pos < n) {
		size_t s = shard_of(ds, idx[(*pos)++]);

		if (*seen & (1ull << s))
			continue;
		*seen |= 1ull << s;
		return &ds->shards[s];
	}
	return NULL;
}

/* Where the row of sample g (in sh) of field fi ends in the archive. */
static uint64_t row_end(const struct shard *sh, size_t fi, uint64_t g)
{
	const struct bind *b = &sh->binds[fi];

	return (uint64_t)(b->base - sh->zip->map) +
	       (g - sh->first) * b->stride0 + b->span;
}

/* The end of the furthest row that samples idx[0..n) in sh have in field
 * fi, or in any field when fi is SIZE_MAX (0: none in sh); *sample: its
 * sample. Rows of later samples lie further (stride0 >= 0). */
static uint64_t rows_end(const struct bfs_dataset *ds, const struct shard *sh,
			 size_t fi, const uint64_t *idx, size_t n,
			 uint64_t *sample)
{
	uint64_t end = 0, hi = 0;
	bool any = false;

	for (size_t i = 0; i < n; i++)
		if (idx[i] >= sh->first && idx[i] - sh->first < sh->samples &&
		    (!any || idx[i] > hi)) {
			hi = idx[i];
			any = true;
		}
	for (size_t f = 0; any && f < ds->nfields; f++)
		if ((fi == SIZE_MAX || f == fi) && sh->binds[f].span &&
		    row_end(sh, f, hi) > end)
			end = row_end(sh, f, hi);
	*sample = hi;
	return end;
}

/* The first of idx[0..n) in sh whose row of field fi (SIZE_MAX: any)
 * reaches past byte 'end': the one that holds 'end' if any does. */
static uint64_t first_past(const struct bfs_dataset *ds, const struct shard *sh,
			   size_t fi, const uint64_t *idx, size_t n,
			   uint64_t end)
{
	uint64_t found = idx[0];
	bool any = false;

	for (size_t i = 0; i < n; i++) {
		if (idx[i] < sh->first || idx[i] - sh->first >= sh->samples)
			continue;
		for (size_t f = 0; f < ds->nfields; f++) {
			uint64_t e = row_end(sh, f, idx[i]);

			if ((fi != SIZE_MAX && f != fi) || e <= end)
				continue;
			if (e - sh->binds[f].span <= end)
				return idx[i]; /* the row holding 'end' */
			if (!any)
				found = idx[i];
			any = true;
		}
	}
	return found;
}

/* Before a copy: -EIO (with a log line) if a row that idx[0..n) need from
 * a touched archive (field fi, SIZE_MAX: all fields) lies past its end.
 * A cached size found short is refreshed first (a short read, see the
 * file comment). */
static int check_shards(const struct bfs_dataset *ds, size_t fi,
			const uint64_t *idx, size_t n)
{
	uint64_t seen = 0, need, sample;
	size_t pos = 0;
	struct shard *sh;
	int64_t size;

	while ((sh = next_shard(ds, idx, n, &pos, &seen))) {
		need = rows_end(ds, sh, fi, idx, n, &sample);
		if (sh->zip->fd < 0 || !need ||
		    archive_size(sh, false) >= (int64_t)need)
			continue;
		pthread_rwlock_wrlock(ds->copy_lock);
		size = archive_size(sh, true);
		pthread_rwlock_unlock(ds->copy_lock);
		if (size >= (int64_t)need)
			continue;
		sample = size < 0
			     ? sample
			     : first_past(ds, sh, fi, idx, n, (uint64_t)size);
		bfs_log(BFS_LOG_ERR, MOD,
			"%s: archive truncated or unreadable (size now %" PRId64
			" < %" PRIu64 " mapped); sample %" PRIu64 "%s%s%s not "
			"read",
			sh->path, size, sh->zip->map_size, sample,
			fi != SIZE_MAX ? " of field '" : "",
			fi != SIZE_MAX ? ds->fields[fi].name : "",
			fi != SIZE_MAX ? "'" : "");
		return fault(sh, sample,
			     size < 0 ? BFS_NO_OFFSET : (uint64_t)size);
	}
	return 0;
}

/* After the copy of field fi from idx[0..n), copy_lock still held: -EIO
 * (logged) if the kernel's cached size of a touched archive fell short of
 * the rows copied meanwhile (a short read: the copy may hold zeros). */
static int check_copied(const struct bfs_dataset *ds, size_t fi,
			const uint64_t *idx, size_t n)
{
	uint64_t seen = 0, need, sample;
	size_t pos = 0;
	struct shard *sh;
	int64_t size;

	while ((sh = next_shard(ds, idx, n, &pos, &seen))) {
		need = rows_end(ds, sh, fi, idx, n, &sample);
		if (sh->zip->fd < 0 || !need ||
		    (size = archive_size(sh, false)) >= (int64_t)need)
			continue;
		sample = first_past(ds, sh, fi, idx, n, (uint64_t)size);
		bfs_log(BFS_LOG_ERR, MOD,
			"%s: read short while field '%s' was copied (the file "
			"system reported its end at %" PRId64 " of %" PRIu64
			"); sample %" PRIu64 " not served",
			sh->path, ds->fields[fi].name, size, sh->zip->map_size,
			sample);
		return fault(sh, sample, (uint64_t)size);
	}
	return 0;
}

/* Where row g of field fi starts, and its shard in *shp. */
static const uint8_t *row_at(const struct bfs_dataset *ds, size_t fi,
			     uint64_t g, const struct shard **shp)
{
	const struct shard *sh =
	    ds->nshards == 1 ? ds->shards : &ds->shards[shard_of(ds, g)];

	*shp = sh;
	return sh->binds[fi].base + (g - sh->first) * sh->binds[fi].stride0;
}

/* The copy loop proper; runs under the SIGBUS guard. '*at' tracks the
 * sample being copied so a fault can be reported. */
static void copy_rows(const struct bfs_dataset *ds, size_t fi,
		      const uint64_t *idx, size_t n, uint8_t *dst,
		      volatile size_t *at)
{
	const struct bfs_field *f = &ds->fields[fi];
	size_t es = bfs_dtype_info(f->dtype)->size;
	size_t unit = bfs_dtype_info(f->dtype)->swap_unit;
	uint64_t rb = f->row_bytes;

	if (!rb)
		return;
	for (size_t i = 0; i < n; i++, dst += rb) {
		const struct shard *sh;
		const uint8_t *row = row_at(ds, fi, idx[i], &sh);
		const struct bind *b = &sh->binds[fi];

		*at = i;
		/* scalar labels: a constant size is copied inline, no call */
		if (b->contiguous && rb == 8)
			memcpy(dst, row, 8);
		else if (b->contiguous && rb == 4)
			memcpy(dst, row, 4);
		else if (b->contiguous)
			memcpy(dst, row, rb);
		else
			copy_strided(dst, row, b, es);
		if (sh->big_endian && unit > 1)
			bfs_npy_byteswap(dst, rb, unit);
	}
}

int bfs_dataset_gather(const struct bfs_dataset *ds, size_t f,
		       const uint64_t *idx, size_t n, void *dst)
{
	sigjmp_buf jb;
	volatile size_t at = 0;
	uint8_t *volatile out = dst; /* live across sigsetjmp */
	int rc;

	have_fault = false;
	if (f >= ds->nfields)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (idx[i] >= ds->samples)
			return -ERANGE;
	rc = check_shards(ds, f, idx, n);
	if (rc)
		return rc;
	guard_install();
	pthread_rwlock_rdlock(ds->copy_lock);
	/* Save the signal mask (1): a wrapper around our handler (a
	 * sanitizer's runs handlers with every signal blocked) would
	 * otherwise leave SIGBUS blocked after the jump, and the next fault
	 * on this thread would kill the process. */
	if (sigsetjmp(jb, 1)) {
		guard_jmp = NULL;
		pthread_rwlock_unlock(ds->copy_lock);
		const struct shard *sh = &ds->shards[shard_of(ds, idx[at])];
		uintptr_t a = (uintptr_t)guard_addr,
			  m = (uintptr_t)sh->zip->map;
		uint64_t off = a >= m && a - m < sh->zip->map_size
				   ? (uint64_t)(a - m)
				   : BFS_NO_OFFSET;
		bfs_log(BFS_LOG_ERR, MOD,
			"%s: SIGBUS reading sample %" PRIu64 " of field '%s' "
			"at archive offset %" PRId64
			" (archive truncated, replaced or unreadable)",
			sh->path, idx[at], ds->fields[f].name,
			off == BFS_NO_OFFSET ? (int64_t)-1 : (int64_t)off);
		return fault(sh, idx[at], off);
	}
	guard_jmp = &jb;
	copy_rows(ds, f, idx, n, out, &at);
	guard_jmp = NULL;
	rc = check_copied(ds, f, idx, n);
	pthread_rwlock_unlock(ds->copy_lock);
	return rc;
}

int bfs_dataset_check(const struct bfs_dataset *ds, const uint64_t *idx,
		      size_t n)
{
	have_fault = false;
	for (size_t i = 0; i < n; i++)
		if (idx[i] >= ds->samples)
			return -ERANGE;
	return check_shards(ds, SIZE_MAX, idx, n);
}

int bfs_dataset_fault(struct bfs_dataset_fault *out)
{
	if (!have_fault)
		return -ENOENT;
	*out = last_fault;
	return 0;
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
	row = row_at(ds, f, i, &sh);
	if (!sh->binds[f].contiguous ||
	    (sh->big_endian &&
	     bfs_dtype_info(ds->fields[f].dtype)->swap_unit > 1))
		return -ENOTSUP;
	*ptr = row;
	return 0;
}

/* ---- advising --------------------------------------------------------- */

/* A coarse clock for the advise memory: ticks of TICK_NS, 31 bits. */
static uint32_t advise_tick(void)
{
	struct timespec ts;
	uint64_t ns;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	return (uint32_t)(ns / TICK_NS) & TICK_MASK;
}

/* 1 if chunk c of sh was found fully resident within the last WINDOW
 * ticks; otherwise looks again (one mincore over the chunk) unless it was
 * found cold within the window, and remembers the answer. Threads racing
 * on one chunk both look and store the same kind of answer: harmless. */
static int chunk_resident(const struct shard *sh, size_t c, uint32_t tick,
			  size_t pg)
{
	uint32_t st = __atomic_load_n(&sh->chunks[c], __ATOMIC_RELAXED);
	unsigned char vec[CHUNK / 4096];
	uint64_t off = (uint64_t)c * CHUNK;
	size_t len, np;
	int res;

	if (st && ((tick - (st >> 1)) & TICK_MASK) < WINDOW)
		return (int)(st & 1);
	len = (size_t)(sh->zip->map_size - off < CHUNK ? sh->zip->map_size - off
						       : CHUNK);
	np = (len + pg - 1) / pg;
	res = np <= sizeof(vec) &&
	      mincore((void *)(sh->zip->map + off), len, vec) == 0;
	for (size_t i = 0; res && i < np; i++)
		res = vec[i] & 1;
	__atomic_store_n(&sh->chunks[c], tick << 1 | (uint32_t)res,
			 __ATOMIC_RELAXED);
	return res;
}

/* 1 if every chunk that [a, e) (page-aligned, inside the mapping of sh)
 * touches is known resident. */
static int range_resident(const struct shard *sh, uintptr_t a, uintptr_t e,
			  uint32_t tick, size_t pg)
{
	uintptr_t m = (uintptr_t)sh->zip->map;

	if (!sh->chunks)
		return 1; /* an archive in memory: nothing to read ahead */
	for (size_t c = (a - m) / CHUNK; c <= (e - 1 - m) / CHUNK; c++)
		if (!chunk_resident(sh, c, tick, pg))
			return 0;
	return 1;
}

void bfs_dataset_advise(const struct bfs_dataset *ds, const uint64_t *idx,
			size_t n)
{
	long pgl = sysconf(_SC_PAGESIZE);
	size_t pg = pgl >= 4096 ? (size_t)pgl : 4096;
	uintptr_t mask = (uintptr_t)pg - 1;
	uint32_t tick = advise_tick();

	for (size_t fi = 0; fi < ds->nfields; fi++) {
		uintptr_t lo = 0, hi = 0; /* pending range, coalesced */
		for (size_t i = 0; i < n; i++) {
			if (idx[i] >= ds->samples)
				continue;
			const struct shard *sh;
			uintptr_t a = (uintptr_t)row_at(ds, fi, idx[i], &sh);
			const struct bind *b = &sh->binds[fi];
			if (!b->span)
				continue;
			uintptr_t e = a + b->span;
			a &= ~mask;
			e = (e + mask) & ~mask;
			if (range_resident(sh, a, e, tick, pg))
				continue;
			if (hi && a <= hi && e >= lo) {
				lo = a < lo ? a : lo;
				hi = e > hi ? e : hi;
				continue;
			}
			if (hi)
				madvise((void *)lo, hi - lo, MADV_WILLNEED);
			lo = a;
			hi = e;
		}
		if (hi)
			madvise((void *)lo, hi - lo, MADV_WILLNEED);
	}
}
