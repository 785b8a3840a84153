/* batchfs pack: write torch.save archives from .npy files, .npz files,
 * safetensors files, lists of arrays (ragged fields) or a synthetic demo
 * dataset; tools/pack_zip.c writes each archive as torch.save would.
 *
 * Inputs become columns: every field of every input dataset (fs/dataset
 * reads them as `batchfs mount` does: Fortran order transposed, byte
 * order swapped, NAME.values + NAME.offsets pairs ragged), every
 * NAME=@LIST.npz (a ragged column whose sample i is the list's member i),
 * or the demo's two generated columns. All columns have the same samples.
 * A fixed column is written as one tensor [rows, ...]; a ragged one as
 * NAME.values [rows of its samples, ...] and NAME.offsets int64 [rows + 1]
 * (from 0), which `batchfs mount` serves as ragged field NAME.
 *
 * Shards: --shard-size SIZE cuts the samples greedily so that each
 * archive's data stays within SIZE bytes (at least one sample each); every
 * shard is a complete dataset (ragged offsets start at 0 in each), named
 * OUT-00000-of-0000N.pt, and all of them mounted together are the input.
 *
 * Memory: one copy buffer of 1 MiB, or of the largest row (or sample of a
 * ragged column) when that is larger; inputs are streamed. Progress: with
 * more than 1 GB to write and stderr a terminal, one line is redrawn on
 * stderr at most 4 times a second (bytes written, rate, ETA), and erased
 * before anything else is printed, so that the terminal keeps only the
 * "wrote OUT: ..., N bytes" lines; BATCHFS_DEBUG_PROGRESS_MIN overrides
 * the 1 GB (tests). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/dataset.h"
#include "fs/npy.h"
#include "fs/size.h"
#include "fs/zip.h"
#include "tools/cli.h"
#include "tools/cmd.h"
#include "tools/pack.h"

#define CHUNK	     (1u << 20)
#define DEMO_SIDE    32
#define PROGRESS_MIN 1000000000ull /* bytes: 1 GB */

/* A NAME=@LIST.npz input: sample i is member i, in the file's order. */
struct list {
	const char *path;
	struct bfs_zip *z;
	const uint8_t **data; /* [n] each member's data */
	uint64_t *offs;	      /* [n + 1] rows before member i */
	bool swap;	      /* big-endian members */
	uint64_t n;
};

enum col_kind { COL_FIELD, COL_LIST, COL_DEMO };

/* One field of the output. */
struct col {
	const char *name;
	const char *origin; /* named in refusals */
	enum col_kind kind;
	const struct bfs_dataset *ds; /* COL_FIELD */
	size_t f;
	struct list *list; /* COL_LIST */
	int demo;	   /* COL_DEMO: 1 images, 2 labels */
	enum bfs_dtype dtype;
	int ndim; /* per row */
	int64_t shape[BFS_MAX_DIMS];
	uint64_t row_bytes;
	bool ragged;
	uint64_t max_len; /* ragged: rows of the longest sample */
};

struct progress {
	bool on, drawn; /* drawn: a line is on the terminal now */
	bool started;	/* drawn at least once (the first write draws) */
	uint64_t total, done;
	struct timespec t0, last;
};

struct plan {
	struct col *cols;
	size_t ncols;
	uint64_t n;	  /* samples */
	uint64_t *bounds; /* shard s: samples [bounds[s], bounds[s+1]) */
	size_t nshards;
	uint8_t *buf; /* the copy buffer */
	uint64_t cap;
	uint64_t *idx;		/* CHUNK / 8 indices */
	struct bfs_span *spans; /* CHUNK / 8 spans */
	struct progress pg;
	uint64_t written; /* bytes of the archives written so far */
};

#define IDX_MAX (CHUNK / 8)

/* ---- progress ------------------------------------------------------------ */

static double secs(const struct timespec *a, const struct timespec *b)
{
	return (double)(b->tv_sec - a->tv_sec) +
	       (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

static const char *gb(char *buf, size_t len, double bytes)
{
	if (bytes >= 1e9)
		snprintf(buf, len, "%.2f GB", bytes / 1e9);
	else
		snprintf(buf, len, "%.1f MB", bytes / 1e6);
	return buf;
}

static void progress_start(struct progress *p, uint64_t total)
{
	const char *min = getenv("BATCHFS_DEBUG_PROGRESS_MIN");
	uint64_t floor = min ? strtoull(min, NULL, 10) : PROGRESS_MIN;

	memset(p, 0, sizeof(*p));
	p->total = total;
	p->on = total > floor && isatty(STDERR_FILENO);
	clock_gettime(CLOCK_MONOTONIC, &p->t0);
	p->last = p->t0;
}

/* Erase the progress line, if one is drawn, so that what is printed next
 * (on stdout or stderr, the same terminal) starts a clean line. */
static void progress_clear(struct progress *p)
{
	if (!p->drawn)
		return;
	fprintf(stderr, "\r\033[K");
	fflush(stderr);
	p->drawn = false;
}

/* 'n' more bytes written; draw at the first, then at most every 0.25 s. */
static void progress_add(struct progress *p, uint64_t n)
{
	struct timespec now;
	char a[32], b[32], r[32];
	double t, rate;

	p->done += n;
	if (!p->on)
		return;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (p->started && secs(&p->last, &now) < 0.25)
		return;
	p->last = now;
	p->drawn = p->started = true;
	t = secs(&p->t0, &now);
	rate = t > 0 ? (double)p->done / t : 0;
	fprintf(stderr,
		"\rbatchfs pack: %s of %s (%3.0f%%), %s/s, ETA %.0f s \033[K",
		gb(a, sizeof(a), (double)p->done),
		gb(b, sizeof(b), (double)p->total),
		p->total ? 100.0 * (double)p->done / (double)p->total : 100.0,
		gb(r, sizeof(r), rate),
		rate > 0 ? (double)(p->total - p->done) / rate : 0.0);
}

/* ---- columns ------------------------------------------------------------- */

/* Rows of sample i of column c (1 for a fixed column). */
static int sample_rows(struct plan *pl, const struct col *c, uint64_t a,
		       uint64_t n, uint64_t *lens)
{
	int rc = 0;

	if (!c->ragged) {
		for (uint64_t i = 0; i < n; i++)
			lens[i] = 1;
		return 0;
	}
	if (c->kind == COL_LIST) {
		for (uint64_t i = 0; i < n; i++)
			lens[i] =
			    c->list->offs[a + i + 1] - c->list->offs[a + i];
		return 0;
	}
	for (uint64_t i = 0; i < n; i++)
		pl->idx[i] = a + i;
	rc = bfs_dataset_spans(c->ds, c->f, pl->idx, (size_t)n, pl->spans);
	for (uint64_t i = 0; !rc && i < n; i++)
		lens[i] = pl->spans[i].len;
	return rc;
}

/* Deterministic demo content for bytes [off, off+n) of the images or
 * labels tensor: pixel = a hash of its flat index, label = (i*7) % 10. */
static void demo_fill(int kind, uint64_t off, uint8_t *p, size_t n)
{
	if (kind == 1) {
		for (size_t i = 0; i < n; i++) {
			uint64_t x = (off + i) * 0x9E3779B97F4A7C15ull;
			x ^= x >> 29;
			p[i] = (uint8_t)(x >> 32);
		}
		return;
	}
	for (size_t i = 0; i < n; i += 8) {
		int64_t v = (int64_t)((((off + i) / 8) * 7) % 10);
		memcpy(p + i, &v, 8);
	}
}

/* Write bytes from the buffer, counting progress. */
static void emit(struct plan *pl, struct pack_out *o, const void *p, uint64_t n)
{
	pack_out_write(o, p, (size_t)n);
	progress_add(&pl->pg, n);
}

/* Rows of fixed column c for samples [a, b). */
static int write_rows(struct plan *pl, struct pack_out *o, const struct col *c,
		      uint64_t a, uint64_t b)
{
	uint64_t per = c->row_bytes ? pl->cap / c->row_bytes : IDX_MAX;
	int rc = 0;

	if (per > IDX_MAX)
		per = IDX_MAX;
	for (uint64_t s = a; s < b && !rc; s += per) {
		uint64_t k = b - s < per ? b - s : per;

		if (c->kind == COL_DEMO) {
			demo_fill(c->demo, s * c->row_bytes, pl->buf,
				  (size_t)(k * c->row_bytes));
		} else {
			for (uint64_t i = 0; i < k; i++)
				pl->idx[i] = s + i;
			rc = bfs_dataset_gather(c->ds, c->f, pl->idx, (size_t)k,
						pl->buf);
		}
		if (!rc)
			emit(pl, o, pl->buf, k * c->row_bytes);
	}
	return rc;
}

/* The values of ragged column c for samples [s, s + k) into the buffer;
 * *bytes = how many. The caller sized k so they fit. */
static int gather_values(struct plan *pl, const struct col *c, uint64_t s,
			 uint64_t k, uint64_t *bytes)
{
	const struct list *l = c->list;
	size_t unit = bfs_dtype_info(c->dtype)->swap_unit;
	uint8_t *p = pl->buf;

	if (c->kind == COL_FIELD) {
		*bytes = 0;
		for (uint64_t i = 0; i < k; i++)
			*bytes += pl->spans[i].len * c->row_bytes;
		return bfs_dataset_gather_spans(c->ds, c->f, pl->idx, pl->spans,
						(size_t)k, 0, NULL, pl->buf);
	}
	for (uint64_t i = s; i < s + k; i++) {
		uint64_t n = (l->offs[i + 1] - l->offs[i]) * c->row_bytes;

		memcpy(p, l->data[i], (size_t)n);
		if (l->swap)
			bfs_npy_byteswap(p, n, unit);
		p += n;
	}
	*bytes = (uint64_t)(p - pl->buf);
	return 0;
}

/* NAME.values of ragged column c for samples [a, b), in groups that fit
 * the buffer; their lengths into lens[] (b - a of them, for the offsets)
 * as they go. */
static int write_values(struct plan *pl, struct pack_out *o,
			const struct col *c, uint64_t a, uint64_t b,
			uint64_t *lens)
{
	int rc = 0;

	for (uint64_t s = a; s < b && !rc;) {
		uint64_t k = b - s < IDX_MAX ? b - s : IDX_MAX, fit = 0,
			 used = 0;
		uint64_t bytes = 0;

		rc = sample_rows(pl, c, s, k, lens + (s - a));
		while (!rc && fit < k &&
		       used + lens[s - a + fit] * c->row_bytes <= pl->cap)
			used += lens[s - a + fit++] * c->row_bytes;
		if (rc)
			break;
		if (!fit) /* cap holds the longest sample: a changed input */
			return -EIO;
		rc = gather_values(pl, c, s, fit, &bytes);
		if (!rc)
			emit(pl, o, pl->buf, bytes);
		s += fit;
	}
	return rc;
}

/* NAME.offsets from the lengths: 0, then the running sum. */
static void write_offsets(struct plan *pl, struct pack_out *o,
			  const uint64_t *lens, uint64_t n)
{
	int64_t *v = (int64_t *)pl->buf;
	uint64_t at = 0, k = 0;

	v[k++] = 0;
	for (uint64_t i = 0; i < n; i++) {
		at += lens[i];
		v[k++] = (int64_t)at;
		if (k == IDX_MAX || i + 1 == n) {
			emit(pl, o, v, k * 8);
			k = 0;
		}
	}
	if (k)
		emit(pl, o, v, k * 8);
}

/* ---- shards -------------------------------------------------------------- */

/* Rows of ragged column c over samples [a, b). */
static int total_rows(struct plan *pl, const struct col *c, uint64_t a,
		      uint64_t b, uint64_t *rows)
{
	uint64_t lens[256];
	int rc = 0;

	*rows = 0;
	for (uint64_t s = a; s < b && !rc; s += 256) {
		uint64_t k = b - s < 256 ? b - s : 256;

		rc = sample_rows(pl, c, s, k, lens);
		for (uint64_t i = 0; !rc && i < k; i++)
			*rows += lens[i];
	}
	return rc;
}

/* The tensors of the archive of samples [a, b). */
static int shard_tensors(struct plan *pl, uint64_t a, uint64_t b,
			 struct pack_tensor *t, char **names)
{
	size_t k = 0;
	int rc = 0;

	for (size_t i = 0; i < pl->ncols && !rc; i++) {
		const struct col *c = &pl->cols[i];
		struct pack_tensor *v = &t[k++];
		uint64_t rows;

		v->name = c->name;
		v->dtype = c->dtype;
		v->ndim = c->ndim + 1;
		v->shape[0] = (int64_t)(b - a);
		memcpy(v->shape + 1, c->shape, (size_t)c->ndim * 8);
		if (!c->ragged)
			continue;
		if (asprintf(&names[2 * i], "%s.values", c->name) < 0 ||
		    asprintf(&names[2 * i + 1], "%s.offsets", c->name) < 0)
			return -ENOMEM;
		v->name = names[2 * i];
		rc = total_rows(pl, c, a, b, &rows);
		v->shape[0] = (int64_t)rows;
		t[k++] = (struct pack_tensor){
		    names[2 * i + 1], BFS_DT_INT64, 1, {(int64_t)(b - a + 1)}};
	}
	return rc;
}

/* " (1.2 MB)" for 'bytes' of 1 MB or more, else "". */
static const char *readable(char *buf, size_t len, uint64_t bytes)
{
	char n[32];

	if (bytes < 1000000)
		return "";
	snprintf(buf, len, " (%s)", gb(n, sizeof(n), (double)bytes));
	return buf;
}

/* The line for archive 'path' once it is written: its tensors, samples
 * and size on disk (the total of all archives in pl->written). 0, or 1
 * when it cannot be found (message printed). */
static int said_written(struct plan *pl, const char *path, size_t nt,
			uint64_t a, uint64_t b)
{
	struct stat st;
	char size[48];

	if (stat(path, &st) < 0) {
		fprintf(stderr, "batchfs pack: %s: %s\n", path,
			strerror(errno));
		return 1;
	}
	pl->written += (uint64_t)st.st_size;
	printf("wrote %s: %zu tensors, samples %" PRIu64 "..%" PRIu64
	       ", %" PRIu64 " bytes%s\n",
	       path, nt, a, b ? b - 1 : 0, (uint64_t)st.st_size,
	       readable(size, sizeof(size), (uint64_t)st.st_size));
	fflush(stdout);
	return 0;
}

/* Write shard 'path' of samples [a, b). 0 or 1 (message printed). */
static int write_shard(struct plan *pl, const char *path, uint64_t a,
		       uint64_t b)
{
	struct pack_tensor *t = calloc(2 * pl->ncols, sizeof(*t));
	char **names = calloc(2 * pl->ncols, sizeof(*names));
	uint64_t *lens = malloc((b - a + 1) * sizeof(*lens));
	struct pack_out *o = NULL;
	size_t nt = 0, rec = 0;
	int rc = -ENOMEM;

	if (t && names && lens)
		rc = shard_tensors(pl, a, b, t, names);
	for (size_t i = 0; i < pl->ncols; i++)
		nt += pl->cols[i].ragged ? 2 : 1;
	if (!rc && !(o = pack_out_open(path, t, nt)))
		rc = -EIO;
	for (size_t i = 0; i < pl->ncols && !rc; i++) {
		const struct col *c = &pl->cols[i];
		struct pack_tensor *v = &t[rec];
		uint64_t bytes = (uint64_t)v->shape[0] * c->row_bytes;

		pack_out_begin(o, rec++, bytes);
		rc = c->ragged ? write_values(pl, o, c, a, b, lens)
			       : write_rows(pl, o, c, a, b);
		if (rc) /* the archive is discarded */
			break;
		pack_out_end(o);
		if (!c->ragged)
			continue;
		pack_out_begin(o, rec++, (b - a + 1) * 8);
		write_offsets(pl, o, lens, b - a);
		pack_out_end(o);
	}
	progress_clear(&pl->pg); /* what follows starts a clean line */
	if (rc && rc != -EIO)
		fprintf(stderr, "batchfs pack: %s: %s\n", path,
			rc == -ENOMEM ? "out of memory"
				      : "reading the input failed (truncated "
					"or changed under us?)");
	rc = o ? pack_out_close(o, rc != 0) || rc : 1;
	if (!rc)
		rc = said_written(pl, path, nt, a, b);
	for (size_t i = 0; names && i < 2 * pl->ncols; i++)
		free(names[i]);
	free(names);
	free(t);
	free(lens);
	return rc ? 1 : 0;
}

/* Bytes sample i takes in an archive. */
static int sample_bytes(struct plan *pl, uint64_t a, uint64_t n,
			uint64_t *bytes)
{
	uint64_t lens[256];
	int rc = 0;

	memset(bytes, 0, n * sizeof(*bytes));
	for (size_t c = 0; c < pl->ncols && !rc; c++) {
		const struct col *col = &pl->cols[c];

		rc = sample_rows(pl, col, a, n, lens);
		for (uint64_t i = 0; !rc && i < n; i++)
			bytes[i] +=
			    lens[i] * col->row_bytes + (col->ragged ? 8 : 0);
	}
	return rc;
}

/* Cut [0, n) into shards of at most 'size' bytes of data each (at least
 * one sample); size 0: one shard. Also sums the bytes (progress). A shard
 * holds its samples' bytes plus the first entry (0) of each offsets. */
static int plan_shards(struct plan *pl, uint64_t size, uint64_t *total)
{
	uint64_t base = 0, acc, bytes[256];
	size_t cap = 16;
	int rc = 0;

	for (size_t c = 0; c < pl->ncols; c++)
		base += pl->cols[c].ragged ? 8 : 0;
	acc = *total = base;
	pl->bounds = malloc(cap * sizeof(*pl->bounds));
	if (!pl->bounds)
		return -ENOMEM;
	pl->bounds[0] = 0;
	pl->nshards = 1;
	for (uint64_t s = 0; s < pl->n && !rc; s += 256) {
		uint64_t k = pl->n - s < 256 ? pl->n - s : 256;

		rc = sample_bytes(pl, s, k, bytes);
		for (uint64_t i = 0; !rc && i < k; i++) {
			if (size && acc > base && acc + bytes[i] > size) {
				if (pl->nshards + 1 == cap) {
					uint64_t *nb =
					    realloc(pl->bounds,
						    (cap *= 2) * sizeof(*nb));
					if (!nb)
						return -ENOMEM;
					pl->bounds = nb;
				}
				pl->bounds[pl->nshards++] = s + i;
				acc = base;
				*total += base;
			}
			acc += bytes[i];
			*total += bytes[i];
		}
	}
	pl->bounds[pl->nshards] = pl->n;
	return rc;
}

/* "OUT-00001-of-00004.pt" for shard i of n (OUT.pt itself when n = 1
 * and no --shard-size was asked). */
static char *shard_path(const char *out, size_t i, size_t n, bool sharded)
{
	const char *slash = strrchr(out, '/'), *dot = strrchr(out, '.');
	char *p = NULL;
	int len;

	if (!sharded)
		return strdup(out);
	if (!dot || (slash && dot < slash) || dot == (slash ? slash + 1 : out))
		dot = out + strlen(out);
	len = (int)(dot - out);
	if (asprintf(&p, "%.*s-%05zu-of-%05zu%s", len, out, i, n, dot) < 0)
		return NULL;
	return p;
}

/* ---- inputs -------------------------------------------------------------- */

struct inputs {
	struct bfs_dataset **ds; /* --from-* files, then the .npy group */
	size_t nds;
	struct list **lists;
	size_t nlists;
	struct bfs_source_part *npy; /* NAME=FILE.npy */
	size_t nnpy;
	const char **from; /* --from-* paths */
	const char **from_kind;
	size_t nfrom;
	int64_t demo;
};

static void list_free(struct list *l)
{
	if (!l)
		return;
	bfs_zip_close(l->z);
	free(l->data);
	free(l->offs);
	free(l);
}

/* NAME=@LIST.npz: every member a .npy of the same dtype and row shape,
 * C order (or 1-D). Returns the list or NULL (message printed). */
static struct list *list_open(const char *path, struct col *c)
{
	struct list *l = calloc(1, sizeof(*l));
	struct bfs_error err = {{0}};
	int rc =
	    l ? bfs_zip_open_kind(&l->z, path, BFS_ZIP_NPZ, &err) : -ENOMEM;

	if (!rc) {
		l->path = path;
		l->n = l->z->n_entries;
		l->data = calloc(l->n ? l->n : 1, sizeof(*l->data));
		l->offs = calloc(l->n + 1, sizeof(*l->offs));
		rc = l->data && l->offs ? 0 : -ENOMEM;
	}
	for (uint64_t i = 0; !rc && i < l->n; i++) {
		const struct bfs_zip_entry *e = &l->z->entries[i];
		struct bfs_npy h;

		rc = bfs_npy_parse_exact(bfs_zip_data(l->z, e), e->size,
					 e->name, &h, &err);
		if (!rc && h.ndim < 1)
			rc = bfs_error_set(&err, -EINVAL, e->name, 0,
					   "a 0-dim array: each member of a "
					   "list is one sample [len, ...]");
		else if (!rc && h.fortran && h.ndim > 1)
			rc = bfs_error_set(&err, -EINVAL, e->name, 0,
					   "Fortran order: save the list's "
					   "arrays with np.ascontiguousarray");
		else if (!rc && i == 0) {
			c->dtype = h.dtype;
			c->ndim = h.ndim - 1;
			memcpy(c->shape, h.shape + 1, (size_t)c->ndim * 8);
			l->swap = h.big_endian != 0;
		} else if (!rc &&
			   (h.dtype != c->dtype || h.ndim - 1 != c->ndim ||
			    memcmp(c->shape, h.shape + 1,
				   (size_t)c->ndim * 8) ||
			    (h.big_endian != 0) != l->swap))
			rc = bfs_error_set(&err, -EINVAL, e->name, 0,
					   "dtype, row shape or byte order "
					   "differs from the list's first "
					   "member");
		if (rc)
			break;
		l->data[i] = bfs_zip_data(l->z, e) + h.data_off;
		l->offs[i + 1] = l->offs[i] + (uint64_t)h.shape[0];
		if ((uint64_t)h.shape[0] > c->max_len)
			c->max_len = (uint64_t)h.shape[0];
	}
	if (!rc && !l->n)
		rc = bfs_error_set(&err, -EINVAL, path, BFS_NO_OFFSET,
				   "an empty list");
	if (rc) {
		fprintf(stderr, "batchfs pack: %s%s%s\n",
			strstr(err.msg, path) ? "" : path,
			strstr(err.msg, path) ? "" : ": ",
			err.msg[0] ? err.msg : strerror(-rc));
		list_free(l);
		return NULL;
	}
	return l;
}

bool bfs_pack_list_hint(const char *cmd, const char *path)
{
	struct bfs_zip *z = NULL;
	int64_t first = -1;
	bool list, differ = false;

	if (bfs_zip_open_kind(&z, path, BFS_ZIP_NPZ, NULL) < 0)
		return false;
	list = z->n_entries >= 2;
	for (size_t i = 0; list && i < z->n_entries; i++) {
		const struct bfs_zip_entry *e = &z->entries[i];
		unsigned long k = 0;
		struct bfs_npy h;
		int used = 0;

		list = sscanf(e->name, "arr_%lu.npy%n", &k, &used) == 1 &&
		       !e->name[used] && k < z->n_entries &&
		       !bfs_npy_parse_exact(bfs_zip_data(z, e), e->size,
					    e->name, &h, NULL) &&
		       h.ndim >= 1;
		if (list && first >= 0 && h.shape[0] != first)
			differ = true;
		if (list && first < 0)
			first = h.shape[0];
	}
	bfs_zip_close(z);
	if (!list || !differ)
		return false;
	fprintf(stderr,
		"batchfs %s: %s looks like np.savez(f, *arrays), one sample "
		"per member: `batchfs pack -o OUT.pt NAME=@%s` packs it as "
		"ragged field NAME (NAME.values + NAME.offsets), which "
		"`batchfs mount OUT.pt` serves\n",
		cmd, path, path);
	return true;
}

/* The dataset of one --from-* file; checks the kind it was given as. */
static struct bfs_dataset *open_from(const char *path, const char *kind)
{
	struct bfs_source_part part = {path, NULL};
	size_t first[2] = {0, 1};
	struct bfs_dataset *ds = NULL;
	struct bfs_shard_info si;
	struct bfs_error err = {{0}};

	if (bfs_dataset_open_parts(&ds, &part, first, 1, &err)) {
		fprintf(stderr, "batchfs pack: %s\n", err.msg);
		bfs_pack_list_hint("pack", path);
		return NULL;
	}
	bfs_dataset_shard(ds, 0, &si);
	if (strcmp(bfs_source_kind_name(si.source->kind), kind)) {
		fprintf(stderr, "batchfs pack: %s: --from-%s, but this is %s\n",
			path, kind, bfs_source_kind_name(si.source->kind));
		bfs_dataset_close(ds);
		return NULL;
	}
	return ds;
}

/* The file field fl of dataset ds comes from (a .npy group has several). */
static const char *field_origin(const struct bfs_dataset *ds,
				const struct bfs_field *fl)
{
	struct bfs_shard_info si;
	size_t n = strlen(fl->name);

	bfs_dataset_shard(ds, 0, &si);
	for (size_t t = 0; t < si.source->ntensors; t++) {
		const struct bfs_source_tensor *st = &si.source->tensors[t];

		if (!strncmp(st->name, fl->name, n) &&
		    (!st->name[n] || (fl->ragged && st->name[n] == '.')))
			return si.source->files[st->file].path;
	}
	return si.path;
}

/* Every field of dataset ds as columns. */
static void add_fields(struct plan *pl, const struct bfs_dataset *ds)
{
	for (size_t f = 0; f < bfs_dataset_nfields(ds); f++) {
		const struct bfs_field *fl = bfs_dataset_field(ds, f);
		struct col *c = &pl->cols[pl->ncols++];

		*c = (struct col){.name = fl->name,
				  .origin = field_origin(ds, fl),
				  .kind = COL_FIELD,
				  .ds = ds,
				  .f = f,
				  .dtype = fl->dtype,
				  .ndim = fl->ndim,
				  .row_bytes = fl->row_bytes,
				  .ragged = fl->ragged,
				  .max_len = fl->max_len};
		memcpy(c->shape, fl->shape, sizeof(c->shape));
	}
}

/* Columns of the demo: images uint8 [N,3,32,32], labels int64 [N]. */
static void demo_cols(struct plan *pl, int64_t n)
{
	pl->cols[0] = (struct col){.name = "images",
				   .origin = "--demo",
				   .kind = COL_DEMO,
				   .demo = 1,
				   .dtype = BFS_DT_UINT8,
				   .ndim = 3,
				   .shape = {3, DEMO_SIDE, DEMO_SIDE},
				   .row_bytes = 3 * DEMO_SIDE * DEMO_SIDE};
	pl->cols[1] = (struct col){.name = "labels",
				   .origin = "--demo",
				   .kind = COL_DEMO,
				   .demo = 2,
				   .dtype = BFS_DT_INT64,
				   .row_bytes = 8};
	pl->ncols = 2;
	pl->n = (uint64_t)n;
}

/* Inputs of different lengths: the one with fewest samples is blamed
 * (a file cut short is the usual cause), beside one with most. Returns 1. */
static int say_mismatch(const char *short_file, const char *short_field,
			uint64_t short_n, const char *long_file,
			const char *long_field, uint64_t long_n)
{
	fprintf(stderr,
		"batchfs pack: %s: field '%s' has %" PRIu64 " samples, but %s "
		"(field '%s') has %" PRIu64 ": all inputs are one dataset "
		"(the same first dimension)\n",
		short_file, short_field, short_n, long_file, long_field,
		long_n);
	return 1;
}

/* Samples of column c. */
static uint64_t col_samples(const struct plan *pl, const struct col *c)
{
	return c->kind == COL_LIST    ? c->list->n
	       : c->kind == COL_FIELD ? bfs_dataset_samples(c->ds)
				      : pl->n;
}

/* Every column: torch must have its dtype, names unique, the same
 * samples everywhere; sizes the copy buffer. 0 or 1 (message printed). */
static int check_cols(struct plan *pl)
{
	uint64_t need = CHUNK, n = 0;
	size_t lo = 0, hi = 0; /* columns with fewest and most samples */

	for (size_t i = 1; i < pl->ncols; i++) {
		if (col_samples(pl, &pl->cols[i]) <
		    col_samples(pl, &pl->cols[lo]))
			lo = i;
		if (col_samples(pl, &pl->cols[i]) >
		    col_samples(pl, &pl->cols[hi]))
			hi = i;
	}
	if (pl->ncols && lo != hi &&
	    col_samples(pl, &pl->cols[lo]) != col_samples(pl, &pl->cols[hi]))
		return say_mismatch(pl->cols[lo].origin, pl->cols[lo].name,
				    col_samples(pl, &pl->cols[lo]),
				    pl->cols[hi].origin, pl->cols[hi].name,
				    col_samples(pl, &pl->cols[hi]));

	for (size_t i = 0; i < pl->ncols; i++) {
		const struct col *c = &pl->cols[i];
		const struct bfs_dtype_info *di = bfs_dtype_info(c->dtype);
		uint64_t big;

		if (!di->storage) {
			fprintf(stderr,
				"batchfs pack: %s: field '%s' is %s, which "
				"has no torch storage type (torch.save cannot "
				"hold it); convert it first\n",
				c->origin, c->name, di->torch_name);
			return 1;
		}
		for (size_t j = 0; j < i; j++)
			if (!strcmp(pl->cols[j].name, c->name)) {
				fprintf(stderr,
					"batchfs pack: %s: field '%s' is also "
					"in %s\n",
					c->origin, c->name, pl->cols[j].origin);
				return 1;
			}
		n = col_samples(pl, c);
		if (bfs_size_mul(c->ragged ? c->max_len : 1, c->row_bytes,
				 &big) ||
		    big > ((uint64_t)1 << 40)) {
			fprintf(stderr,
				"batchfs pack: %s: a sample of field '%s' is "
				"too large to copy\n",
				c->origin, c->name);
			return 1;
		}
		need = big > need ? big : need;
	}
	pl->n = n;
	pl->cap = need;
	pl->buf = malloc((size_t)need);
	pl->idx = malloc(IDX_MAX * sizeof(*pl->idx));
	pl->spans = malloc(IDX_MAX * sizeof(*pl->spans));
	if (!pl->buf || !pl->idx || !pl->spans) {
		fprintf(stderr, "batchfs pack: out of memory\n");
		return 1;
	}
	return 0;
}

/* ---- command line ------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: batchfs pack -o OUT.pt [--shard-size SIZE] INPUT...\n"
	    "       batchfs pack --demo N -o OUT.pt [--shard-size SIZE]\n"
	    "\n"
	    "Write torch.save archives (torch's exact ZIP64 layout: stored\n"
	    "records, 64-byte aligned data, real CRC-32s) holding a dict of\n"
	    "tensors, so that torch.load(OUT, weights_only=True) returns\n"
	    "{NAME: tensor, ...} and `batchfs mount OUT` serves them. All\n"
	    "inputs are one dataset: the same number of samples. INPUT is:\n"
	    "  NAME=FILE.npy         field NAME (Fortran order and big-endian\n"
	    "                        arrays are written C order, "
	    "little-endian)\n"
	    "  NAME=@LIST.npz        ragged field NAME from a list of arrays,\n"
	    "                        np.savez(LIST, *arrays): sample i is\n"
	    "                        member i, [len_i, ...]; written as\n"
	    "                        NAME.values + NAME.offsets (int64, n + "
	    "1)\n"
	    "  --from-npz FILE.npz   every array of an .npz (numpy.savez)\n"
	    "  --from-safetensors FILE\n"
	    "                        every tensor of a safetensors file\n"
	    "A NAME.values + NAME.offsets pair in an input stays a ragged\n"
	    "field. The fields of --from-npz and --from-safetensors files\n"
	    "come first (in their order), then NAME=... in argument order.\n"
	    "Supported dtypes: those torch.save can hold (bool, uint8,\n"
	    "int8..int64, float16, bfloat16, float32, float64, complex64,\n"
	    "complex128); refused: uint16..64, object, string and\n"
	    "structured arrays.\n"
	    "\n"
	    "  -o, --output OUT.pt   the archive to write (replaced "
	    "atomically)\n"
	    "      --shard-size SIZE write several archives of at most SIZE\n"
	    "                        bytes of data each (K, M, G, T suffixes "
	    "=\n"
	    "                        2^10..2^40), OUT-00000-of-0000N.pt ...;\n"
	    "                        each is a whole dataset, all of them\n"
	    "                        together are the input\n"
	    "      --demo N          a synthetic dataset instead of inputs:\n"
	    "                        images uint8 [N,3,32,32], labels int64 "
	    "[N]\n"
	    "                        (deterministic content)\n"
	    "  -h, --help            this help\n"
	    "\n"
	    "Inputs are streamed through a 1 MiB buffer (they may exceed "
	    "RAM).\n"
	    "With more than 1 GB to write, a progress line (bytes written,\n"
	    "rate, ETA) is drawn on stderr when it is a terminal, and erased\n"
	    "for the line each archive gets once written (its size).\n");
}

/* "64M" -> 64 << 20. 0 or -1. */
static int parse_size(const char *s, uint64_t *out)
{
	static const char units[] = "KMGT";
	char *end;
	unsigned long long v;
	const char *u;

	if (!s || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || !v)
		return -1;
	if (*end) {
		u = strchr(units, *end);
		if (!u || end[1])
			return -1;
		if (bfs_size_mul(v, (uint64_t)1 << (10 * (u - units + 1)), out))
			return -1;
		return 0;
	}
	*out = v;
	return 0;
}

/* Whether NAME is half of a ragged pair (NAME.values, NAME.offsets),
 * whose first dimensions differ from the samples by design. */
static bool ragged_half(const char *name)
{
	size_t n = strlen(name);

	return (n > 7 && !strcmp(name + n - 7, ".values")) ||
	       (n > 8 && !strcmp(name + n - 8, ".offsets"));
}

/* The NAME=FILE.npy inputs (read as one dataset) have the same samples,
 * or the file with fewest is blamed (say_mismatch) before the dataset's
 * own check, which names the group's first file. Files whose header
 * cannot be read, and ragged halves, are left to that check. 0 or 1. */
static int check_npy_samples(const struct bfs_source_part *npy, size_t n)
{
	int64_t rows[2] = {-1, -1}; /* fewest, most */
	size_t at[2] = {0, 0};

	for (size_t i = 0; i < n; i++) {
		struct bfs_npy h;
		int fd = ragged_half(npy[i].name)
			     ? -1
			     : open(npy[i].path, O_RDONLY | O_CLOEXEC);
		int rc = fd < 0
			     ? -1
			     : bfs_npy_read_header(fd, npy[i].path, &h, NULL);

		if (fd >= 0)
			close(fd);
		if (rc || h.ndim < 1)
			continue;
		if (rows[0] < 0 || h.shape[0] < rows[0])
			rows[0] = h.shape[0], at[0] = i;
		if (h.shape[0] > rows[1])
			rows[1] = h.shape[0], at[1] = i;
	}
	if (rows[0] == rows[1])
		return 0;
	return say_mismatch(npy[at[0]].path, npy[at[0]].name, (uint64_t)rows[0],
			    npy[at[1]].path, npy[at[1]].name,
			    (uint64_t)rows[1]);
}

/* The FILE of a NAME=FILE argument split by check_args. */
static const char *arg_file(const char *arg)
{
	return arg + strlen(arg) + 1;
}

/* Open the inputs into columns. 0, 1 (message printed) or 2 (usage). */
static int open_inputs(struct plan *pl, struct inputs *in, char **args,
		       size_t nargs)
{
	size_t ncols = 0;

	for (size_t i = 0; i < in->nfrom; i++) {
		struct bfs_dataset *ds =
		    open_from(in->from[i], in->from_kind[i]);

		if (!ds)
			return 1;
		in->ds[in->nds++] = ds;
		ncols += bfs_dataset_nfields(ds);
	}
	for (size_t i = 0; i < nargs; i++)
		if (arg_file(args[i])[0] != '@')
			in->npy[in->nnpy++] = (struct bfs_source_part){
			    arg_file(args[i]), args[i]};
	if (in->nnpy) {
		size_t first[2] = {0, in->nnpy};
		struct bfs_error err = {{0}};
		struct bfs_dataset *ds = NULL;

		if (check_npy_samples(in->npy, in->nnpy))
			return 1;
		if (bfs_dataset_open_parts(&ds, in->npy, first, 1, &err)) {
			fprintf(stderr, "batchfs pack: %s\n", err.msg);
			return 1;
		}
		in->ds[in->nds++] = ds;
		ncols += bfs_dataset_nfields(ds);
	}
	pl->cols = calloc(ncols + nargs + 2, sizeof(*pl->cols));
	if (!pl->cols)
		return 1;
	if (in->demo >= 0) {
		demo_cols(pl, in->demo);
		return check_cols(pl);
	}
	for (size_t i = 0; i < in->nds; i++)
		add_fields(pl, in->ds[i]);
	for (size_t i = 0; i < nargs; i++) {
		const char *file = arg_file(args[i]) + 1;
		struct col *c;

		if (file[-1] != '@')
			continue;
		c = &pl->cols[pl->ncols];
		*c = (struct col){.name = args[i],
				  .origin = file,
				  .kind = COL_LIST,
				  .ragged = true};
		c->list = in->lists[in->nlists] = list_open(file, c);
		if (!c->list)
			return 1;
		in->nlists++;
		c->row_bytes = bfs_dtype_info(c->dtype)->size;
		for (int d = 0; d < c->ndim; d++)
			c->row_bytes *= (uint64_t)c->shape[d];
		pl->ncols++;
	}
	return check_cols(pl);
}

/* NAME=FILE arguments: each has a name, a file, no name twice. Each is
 * split in place: args[i] is NAME, args[i] + strlen + 1 is FILE. */
static int check_args(char **args, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char *a = args[i], *eq = strchr(a, '=');

		if (!eq || eq == a || !eq[1] || (eq[1] == '@' && !eq[2]))
			return bfs_cli_bad_usage("pack", usage,
						 "expected NAME=FILE.npy or "
						 "NAME=@LIST.npz",
						 a);
		*eq = 0;
		for (size_t j = 0; j < i; j++)
			if (!strcmp(args[j], a))
				return bfs_cli_bad_usage(
				    "pack", usage, "duplicate field name", a);
	}
	return 0;
}

static int write_all(struct plan *pl, const char *out, uint64_t shard_size)
{
	uint64_t total;
	int rc = plan_shards(pl, shard_size, &total);

	if (rc) {
		fprintf(stderr, "batchfs pack: %s\n",
			rc == -ENOMEM ? "out of memory"
				      : "reading the input failed");
		return 1;
	}
	progress_start(&pl->pg, total);
	for (size_t s = 0; s < pl->nshards && !rc; s++) {
		char *p = shard_path(out, s, pl->nshards, shard_size != 0);

		rc = p ? write_shard(pl, p, pl->bounds[s], pl->bounds[s + 1])
		       : 1;
		free(p);
	}
	progress_clear(&pl->pg);
	if (!rc && pl->nshards > 1) {
		char size[48];

		printf("wrote %zu archives, %" PRIu64 " bytes%s in all\n",
		       pl->nshards, pl->written,
		       readable(size, sizeof(size), pl->written));
	}
	return rc;
}

static void plan_free(struct plan *pl, struct inputs *in)
{
	for (size_t i = 0; i < in->nds; i++)
		bfs_dataset_close(in->ds[i]);
	for (size_t i = 0; i < in->nlists; i++)
		list_free(in->lists[i]);
	free(in->ds);
	free(in->lists);
	free(in->npy);
	free(in->from);
	free(in->from_kind);
	free(pl->cols);
	free(pl->bounds);
	free(pl->buf);
	free(pl->idx);
	free(pl->spans);
}

int bfs_cmd_pack(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"output", required_argument, NULL, 'o'},
	    {"demo", required_argument, NULL, 'd'},
	    {"from-npz", required_argument, NULL, 'z'},
	    {"from-safetensors", required_argument, NULL, 's'},
	    {"shard-size", required_argument, NULL, 'S'},
	    {"help", no_argument, NULL, 'h'},
	    {0},
	};
	struct inputs in = {.demo = -1};
	struct plan pl = {0};
	const char *outp = NULL;
	uint64_t shard = 0;
	size_t nargs;
	int c, rc = 1;
	char *end;

	in.from = calloc((size_t)argc, sizeof(*in.from));
	in.from_kind = calloc((size_t)argc, sizeof(*in.from_kind));
	in.ds = calloc((size_t)argc + 1, sizeof(*in.ds));
	in.lists = calloc((size_t)argc, sizeof(*in.lists));
	in.npy = calloc((size_t)argc, sizeof(*in.npy));
	if (!in.from || !in.from_kind || !in.ds || !in.lists || !in.npy)
		goto out;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
		switch (c) {
		case 'o':
			outp = optarg;
			break;
		case 'd':
			errno = 0;
			in.demo = strtoll(optarg, &end, 10);
			if (errno || *end || end == optarg || in.demo < 0) {
				rc = bfs_cli_bad_usage(
				    "pack", usage,
				    "--demo wants a sample count", optarg);
				goto out;
			}
			break;
		case 'z':
		case 's':
			in.from_kind[in.nfrom] =
			    c == 'z' ? "npz" : "safetensors";
			in.from[in.nfrom++] = optarg;
			break;
		case 'S':
			if (parse_size(optarg, &shard)) {
				rc = bfs_cli_bad_usage(
				    "pack", usage,
				    "--shard-size wants a size (e.g. 512M)",
				    optarg);
				goto out;
			}
			break;
		case 'h':
			usage(stdout);
			rc = 0;
			goto out;
		default:
			rc = bfs_cli_bad_usage("pack", usage,
					       "unknown or incomplete option",
					       argv[optind - 1]);
			goto out;
		}
	}
	nargs = (size_t)(argc - optind);
	if (!outp)
		rc =
		    bfs_cli_bad_usage("pack", usage, "missing -o OUT.pt", NULL);
	else if ((in.demo >= 0) == (nargs + in.nfrom > 0))
		rc = bfs_cli_bad_usage("pack", usage,
				       in.demo >= 0
					   ? "--demo takes no other input"
					   : "nothing to pack (NAME=FILE.npy, "
					     "NAME=@LIST.npz, --from-npz, "
					     "--from-safetensors)",
				       NULL);
	else
		rc = check_args(argv + optind, nargs);
	if (!rc)
		rc = open_inputs(&pl, &in, argv + optind, nargs);
	if (!rc)
		rc = write_all(&pl, outp, shard);
out:
	plan_free(&pl, &in);
	return rc;
}
