/* tests/lib/geometry: see geometry.h.
 *
 * The model uses exact unsigned 128-bit arithmetic and the rules as
 * written (torch: a running product of the sizes that reaches 2^64 before
 * a zero size, or a numel above 2^63 - 1, is refused; a view's storage
 * need is (offset + 1 + sum (size - 1) x stride) x elsize, 0 when a size
 * is 0, and at most 2^63 - 1; batchfs: a sample's bytes, all fields'
 * bytes per sample, and a batch file of 'batch' rows fit 2^63 - 1; the
 * sample count is the dim 0 of the most tensors of more than 1024
 * elements, then of the most tensors, a tie refused, the other tensors
 * metadata; complex32/complex128 cannot be served), not
 * fs/size's helpers, so a bug in those shows up as a disagreement. */
#include "tests/lib/geometry.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fs/dataset.h"
#include "fs/layout.h"
#include "fs/safetensors.h"

typedef unsigned __int128 u128;

#define LIM	     ((u128)INT64_MAX)
#define GATHER_MAX   (16u << 20) /* largest batch file gathered */
#define HEADER_BYTES 4096u	 /* 3 short fields: the JSON fits a page */

static const enum bfs_dtype dtypes[] = {
    BFS_DT_BOOL,       BFS_DT_UINT8,   BFS_DT_INT16,
    BFS_DT_FLOAT32,    BFS_DT_INT64,   BFS_DT_COMPLEX64,
    BFS_DT_COMPLEX128, BFS_DT_FLOAT16, BFS_DT_FLOAT64,
};

static const int64_t huge[] = {
    1ll << 31, 1ll << 32,	(1ll << 32) + 8, 1ll << 40, 1ll << 59,
    1ll << 61, (1ll << 61) - 1, 3ll << 61,	 1ll << 62, (1ll << 62) + 1,
    INT64_MAX, INT64_MAX / 3,	(1ll << 31) + 1, 1ll << 21, 4294967297ll * 3,
};
#define NHUGE (sizeof(huge) / sizeof(huge[0]))

struct src {
	uint64_t (*next)(void *);
	void *arg;
};

static uint64_t pick(struct src *s, uint64_t n)
{
	return n ? s->next(s->arg) % n : 0;
}

static int64_t draw_size(struct src *s)
{
	switch (pick(s, 12)) {
	case 0:
		return 0;
	case 1:
	case 2:
		return (int64_t)huge[pick(s, NHUGE)];
	case 3:
		return -1 - (int64_t)pick(s, 2);
	default:
		return 1 + (int64_t)pick(s, 4);
	}
}

static int64_t draw_stride(struct src *s, int64_t contiguous)
{
	switch (pick(s, 10)) {
	case 0:
	case 1:
	case 2:
		return 0;
	case 3:
		return (int64_t)huge[pick(s, NHUGE)];
	case 4:
		return -1;
	case 5:
	case 6:
		return 1 + (int64_t)pick(s, 8);
	default:
		return contiguous;
	}
}

/* Exact bytes of storage the view of t needs (model); > LIM when it is
 * too big or a size/stride/offset is negative (refused anyway). */
static u128 model_need(const struct ta_tensor *t, size_t es)
{
	u128 last = 0;

	if (t->offset < 0)
		return LIM + 1;
	for (int d = 0; d < t->ndim; d++)
		if (t->size[d] < 0 || t->stride[d] < 0)
			return LIM + 1;
	for (int d = 0; d < t->ndim; d++)
		if (t->size[d] == 0)
			return 0;
	last = (u128)t->offset;
	for (int d = 0; d < t->ndim; d++)
		last += (u128)(t->size[d] - 1) * (u128)t->stride[d];
	if (last + 1 > LIM)
		return LIM + 1;
	return (last + 1) * es;
}

void geo_draw(struct geo_case *c, uint64_t (*next)(void *), void *arg)
{
	static const char *const names[] = {"a", "b", "c"};
	struct src s = {next, arg};
	int64_t samples = pick(&s, 8) ? (int64_t)pick(&s, 7) : draw_size(&s);

	memset(c, 0, sizeof(*c));
	c->nfields = 1 + pick(&s, GEO_FIELDS);
	for (size_t f = 0; f < c->nfields; f++) {
		struct ta_tensor *t = &c->t[f];
		size_t es;
		int64_t contiguous = 1;
		u128 need;

		t->name = names[f];
		t->key = names[f];
		t->dtype = dtypes[pick(&s, sizeof(dtypes) / sizeof(*dtypes))];
		es = bfs_dtype_info(t->dtype)->size;
		t->ndim = 1 + (int)pick(&s, 4);
		t->size[0] = pick(&s, 7) ? samples : draw_size(&s);
		for (int d = 1; d < t->ndim; d++)
			t->size[d] = draw_size(&s);
		for (int d = t->ndim - 1; d >= 0; d--) {
			t->stride[d] = draw_stride(&s, contiguous);
			contiguous *= t->size[d] > 0 && t->size[d] < 1000
					  ? t->size[d]
					  : 1;
		}
		t->offset = pick(&s, 2)	  ? 0
			    : pick(&s, 5) ? (int64_t)pick(&s, 16)
			    : pick(&s, 2) ? (int64_t)huge[pick(&s, NHUGE)]
					  : -1;
		need = model_need(t, es) / es;
		t->numel = need <= GEO_STORAGE && pick(&s, 4)
			       ? (int64_t)need + (int64_t)pick(&s, 2)
			       : (int64_t)pick(&s, 64);
		c->storage_bytes[f] = (size_t)t->numel * es;
		c->storage[f] = malloc(c->storage_bytes[f] + 1);
		if (!c->storage[f])
			abort();
		for (size_t i = 0; i < c->storage_bytes[f]; i++)
			c->storage[f][i] = (uint8_t)(i * 131 + f * 17 + 1);
	}
	c->batch = pick(&s, 5)	 ? 1 + pick(&s, 8)
		   : pick(&s, 2) ? (uint64_t)huge[pick(&s, NHUGE)]
				 : UINT32_MAX;
	samples = c->t[0].size[0]; /* what the dataset has when accepted */
	for (size_t i = 0; samples > 0 && i < GEO_ROWS && i < c->batch; i++)
		c->idx[c->nidx++] = pick(&s, (uint64_t)samples);
}

void geo_free(struct geo_case *c)
{
	for (size_t f = 0; f < c->nfields; f++)
		free(c->storage[f]);
}

/* What the model says of a case: accepted, and each field's row bytes. */
struct model {
	bool accept;
	const char *why;
	u128 row[GEO_FIELDS];
	size_t nkept, field[GEO_FIELDS]; /* the case's tensor of field k */
};

static bool numel_ok(const struct ta_tensor *t)
{
	u128 p = 1;
	bool wrapped = false;

	for (int d = 0; d < t->ndim; d++) {
		if (!wrapped)
			p *= (u128)t->size[d];
		wrapped |= p >> 64 != 0;
	}
	return !wrapped && p <= LIM;
}

/* The score of dim 0 'n': tensors of more than 1024 elements, then all
 * (fs/README.md: the sample count). */
static u128 score(const struct geo_case *c, int64_t n)
{
	u128 large = 0, all = 0;

	for (size_t f = 0; f < c->nfields; f++) {
		u128 p = 1;

		if (c->t[f].size[0] != n)
			continue;
		for (int d = 0; d < c->t[f].ndim; d++)
			p *= (u128)c->t[f].size[d]; /* numel_ok: no wrap */
		large += p > 1024;
		all++;
	}
	return large << 32 | all;
}

static void judge(const struct geo_case *c, struct model *m)
{
	u128 sample = 0, best = 0;
	int64_t rows = 0;
	size_t tied = 0;

	m->accept = false;
	for (size_t f = 0; f < c->nfields; f++) {
		const struct ta_tensor *t = &c->t[f];
		size_t es = bfs_dtype_info(t->dtype)->size;

		if (model_need(t, es) > (u128)t->numel * es) {
			m->why = "view outside its storage (or negative)";
			return;
		}
		if (!numel_ok(t)) {
			m->why = "numel";
			return;
		}
	}
	for (size_t f = 0; f < c->nfields; f++) {
		u128 sc = score(c, c->t[f].size[0]);
		bool seen = false;

		for (size_t g = 0; g < f; g++)
			seen |= c->t[g].size[0] == c->t[f].size[0];
		if (seen || sc < best)
			continue;
		tied = sc > best ? 1 : tied + 1;
		best = sc;
		rows = c->t[f].size[0];
	}
	if (tied > 1) {
		m->why = "no sample count shared by the most fields";
		return;
	}
	m->nkept = 0;
	for (size_t f = 0; f < c->nfields; f++) /* the others: metadata */
		if (c->t[f].size[0] == rows)
			m->field[m->nkept++] = f;
	for (size_t k = 0; k < m->nkept; k++) {
		size_t f = m->field[k];
		const struct ta_tensor *t = &c->t[f];
		size_t es = bfs_dtype_info(t->dtype)->size;
		u128 elems = 1;

		for (int d = 1; d < t->ndim; d++)
			if (t->size[d] == 0)
				elems = 0;
		for (int d = 1; elems && d < t->ndim; d++)
			if (elems <= LIM) /* else: refused below */
				elems *= (u128)t->size[d];
		m->row[f] = elems * es;
		if (elems > LIM || m->row[f] > LIM) {
			m->why = "bytes per sample of one field";
			return;
		}
		sample += m->row[f];
		if (sample > LIM) {
			m->why = "bytes per sample of all fields";
			return;
		}
	}
	for (size_t k = 0; k < m->nkept; k++) {
		const struct ta_tensor *t = &c->t[m->field[k]];
		u128 run = (u128)bfs_dtype_info(t->dtype)->size * c->batch;

		if (!bfs_dtype_info(t->dtype)->st_name) {
			m->why = "dtype without a safetensors code";
			return;
		}
		/* the header's [batch, *shape]: safetensors readers refuse a
		 * running product that overflows, even before a zero */
		for (int d = 1; d < t->ndim && run <= LIM; d++)
			run *= (u128)t->size[d];
		if (run > LIM) {
			m->why = "header shape's running product";
			return;
		}
	}
	if ((u128)c->batch * sample + HEADER_BYTES > LIM) {
		m->why = "batch file size";
		return;
	}
	m->accept = true;
	m->why = "ok";
}

static void die(const struct geo_case *c, const char *what, const char *msg)
{
	fprintf(stderr, "geometry: %s (%s)\n  batch %llu\n", what, msg,
		(unsigned long long)c->batch);
	for (size_t f = 0; f < c->nfields; f++) {
		const struct ta_tensor *t = &c->t[f];

		fprintf(stderr, "  %s %s numel %lld offset %lld size", t->name,
			bfs_dtype_info(t->dtype)->torch_name,
			(long long)t->numel, (long long)t->offset);
		for (int d = 0; d < t->ndim; d++)
			fprintf(stderr, " %lld", (long long)t->size[d]);
		fprintf(stderr, " stride");
		for (int d = 0; d < t->ndim; d++)
			fprintf(stderr, " %lld", (long long)t->stride[d]);
		fprintf(stderr, "\n");
	}
	abort();
}

/* A buffer of n bytes whose first byte follows an inaccessible page and
 * whose last byte precedes one. */
static uint8_t *guarded(size_t n, void **map, size_t *map_len)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	size_t body = (n + pg - 1) / pg * pg;
	uint8_t *m;

	*map_len = body + 2 * pg;
	m = mmap(NULL, *map_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED || mprotect(m + pg, body, PROT_READ | PROT_WRITE))
		abort();
	*map = m;
	return m + pg + (body - n);
}

/* Element 'e' (C order over the per-sample dims) of sample 'i' of t. */
static const uint8_t *model_elem(const struct geo_case *c, size_t f, uint64_t i,
				 u128 e)
{
	const struct ta_tensor *t = &c->t[f];
	u128 at = (u128)t->offset + (u128)i * (u128)t->stride[0];

	for (int d = t->ndim - 1; d >= 1; d--) {
		at += (e % (u128)t->size[d]) * (u128)t->stride[d];
		e /= (u128)t->size[d];
	}
	return c->storage[f] + (size_t)at * bfs_dtype_info(t->dtype)->size;
}

/* Gather the case's indices as a batch file and check every byte. */
static void check_batch(const struct geo_case *c, const struct model *m,
			const struct bfs_dataset *ds,
			const struct bfs_layout *l)
{
	uint64_t size = bfs_layout_size(l, c->nidx);
	uint64_t data = bfs_layout_data_offset(l, c->nidx);
	struct bfs_st_header *h = NULL;
	void *map;
	size_t map_len;
	uint8_t *buf, *p;
	int rc;

	if (size > GATHER_MAX)
		return;
	buf = guarded((size_t)size, &map, &map_len);
	rc = bfs_layout_fill(l, ds, (struct bfs_batch_id){0}, c->idx, c->nidx,
			     size, buf);
	if (rc)
		die(c, "gather failed", strerror(-rc));
	if (bfs_st_parse(buf, (size_t)size, size, 0, &h, NULL))
		die(c, "the batch file is not valid safetensors", "");
	bfs_st_free(h);
	p = buf + data;
	for (size_t i = 0; i < l->nfields; i++) {
		size_t f = m->field[l->fields[i].ds_index];
		size_t es = bfs_dtype_info(c->t[f].dtype)->size;

		if (i && bfs_dtype_info(l->fields[i - 1].f->dtype)->size < es)
			die(c, "fields not ordered by element size", "");
		for (size_t r = 0; r < c->nidx; r++)
			for (u128 e = 0; e * es < m->row[f]; e++, p += es)
				if (memcmp(p, model_elem(c, f, c->idx[r], e),
					   es))
					die(c, "a gathered byte differs",
					    l->fields[i].f->name);
	}
	if ((uint64_t)(p - buf) != size)
		die(c, "the data does not end the file", "");
	munmap(map, map_len);
}

int geo_check(const struct geo_case *c, const char *path)
{
	struct ta_storage st[GEO_FIELDS];
	struct bfs_dataset *ds = NULL;
	struct bfs_layout l;
	struct bfs_error err = {{0}};
	struct model m;
	uint8_t *b;
	size_t n;
	int rc;

	for (size_t f = 0; f < c->nfields; f++)
		st[f] = (struct ta_storage){c->t[f].key, c->storage[f],
					    c->storage_bytes[f]};
	n = ta_build(&b, c->t, c->nfields, st, c->nfields, "3\n", NULL, NULL);
	if (ta_write(path, b, n))
		abort();
	free(b);
	judge(c, &m);
	memset(&l, 0, sizeof(l));
	rc = bfs_dataset_open(&ds, &path, 1, &err);
	if (!rc)
		rc = bfs_layout_init(&l, ds, c->batch, &err);
	if ((rc == 0) != m.accept)
		die(c, m.accept ? "refused, the model accepts" : m.why,
		    err.msg);
	if (rc == 0 && bfs_dataset_nfields(ds) != m.nkept)
		die(c, "fields differ from the model", "");
	for (size_t k = 0; rc == 0 && k < m.nkept; k++)
		if (bfs_dataset_field(ds, k)->row_bytes != m.row[m.field[k]])
			die(c, "row bytes differ from the model", "");
	for (size_t r = 0; rc == 0 && r < c->nidx; r++)
		if (c->idx[r] >= bfs_dataset_samples(ds))
			m.accept = false; /* drawn for a's rows: not gathered */
	if (rc == 0 && m.accept)
		check_batch(c, &m, ds, &l);
	bfs_layout_fini(&l);
	bfs_dataset_close(ds);
	return rc == 0;
}
