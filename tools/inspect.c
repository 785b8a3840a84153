/* batchfs inspect: describe torch.save archives (one dataset, possibly
 * sharded) and safetensors batch files.
 *
 * Archives are read through fs/dataset exactly as `batchfs mount` reads
 * them, so what inspect prints is what a mount would serve. --verify reads
 * every record through libzip (zip_fread to the end checks the CRC), which
 * is independent of our own ZIP parser; its record list is also compared
 * with ours. A batch file is recognised by its first bytes (u64 LE header
 * length, then '{') and its header is validated as the safetensors spec
 * requires (research/torch-format.md §4.1) by the small schema-only JSON
 * reader below: strings with escapes and UTF-8 checks, unsigned integers
 * with overflow checks, no floats, no nesting beyond the schema.
 *
 * Output goes to stdout; every failure prints "batchfs inspect: FILE:
 * [offset N:] reason" on stderr and makes the exit status 1. */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "fs/dataset.h"
#include "fs/layout.h"
#include "fs/zip.h"
#include "tools/cmd.h"

#define ST_MAX_HEADER 100000000ull /* safetensors' MAX_HEADER_SIZE */

struct opts {
	int verbose, verify, json;
};

/* Print 's' as a JSON string literal. */
static void json_str(FILE *f, const char *s)
{
	size_t n = 0;
	char *buf;

	bfs_layout_json_str(NULL, 0, &n, s);
	buf = malloc(n + 1);
	if (!buf)
		return;
	n = 0;
	bfs_layout_json_str(buf, SIZE_MAX, &n, s);
	fwrite(buf, 1, n, f);
	free(buf);
}

static void print_shape(FILE *f, uint64_t n0, const struct bfs_field *fl)
{
	fprintf(f, "[%" PRIu64, n0);
	for (int d = 0; d < fl->ndim; d++)
		fprintf(f, ", %" PRId64, fl->shape[d]);
	fprintf(f, "]");
}

/* ---- archives ------------------------------------------------------------ */

static const char *container_name(enum bfs_container c)
{
	switch (c) {
	case BFS_CONTAINER_DICT:
		return "dict";
	case BFS_CONTAINER_LIST:
		return "list";
	case BFS_CONTAINER_TUPLE:
		return "tuple";
	case BFS_CONTAINER_TENSOR:
		return "tensor";
	}
	return "?";
}

static void archive_json(const struct bfs_dataset *ds)
{
	uint64_t n = bfs_dataset_samples(ds);

	printf("{\"samples\": %" PRIu64 ", \"fields\": [", n);
	for (size_t i = 0; i < bfs_dataset_nfields(ds); i++) {
		const struct bfs_field *fl = bfs_dataset_field(ds, i);
		printf("%s{\"name\": ", i ? ", " : "");
		json_str(stdout, fl->name);
		printf(", \"dtype\": \"%s\", \"shape\": ",
		       bfs_dtype_info(fl->dtype)->torch_name);
		print_shape(stdout, n, fl);
		printf("}");
	}
	printf("]}\n");
}

static void archive_text(const struct bfs_dataset *ds, int verbose)
{
	uint64_t n = bfs_dataset_samples(ds);
	size_t ns = bfs_dataset_nshards(ds);

	printf("dataset: %zu archive%s, %" PRIu64 " samples, %zu fields\n", ns,
	       ns == 1 ? "" : "s", n, bfs_dataset_nfields(ds));
	for (size_t s = 0; s < ns; s++) {
		struct bfs_shard_info si;
		bfs_dataset_shard(ds, s, &si);
		printf("archive %s: prefix '%s', version %d, byteorder %s, "
		       "%s of %zu tensors, samples %" PRIu64 "..%" PRIu64
		       " (%" PRIu64 "), %zu records, %" PRIu64 " bytes\n",
		       si.path, si.zip->prefix, si.version,
		       si.big_endian ? "big (swapped on read)" : "little",
		       container_name(si.container), si.pickle->n_tensors,
		       si.first_sample,
		       si.samples ? si.first_sample + si.samples - 1
				  : si.first_sample,
		       si.samples, si.zip->n_entries, si.zip->map_size);
		if (!verbose)
			continue;
		printf("  %-32s %14s %14s %10s\n", "record", "data offset",
		       "size", "crc32");
		for (size_t r = 0; r < si.zip->n_entries; r++) {
			const struct bfs_zip_entry *e = &si.zip->entries[r];
			printf("  %-32s %14" PRIu64 " %14" PRIu64
			       "   %08" PRIx32 "\n",
			       e->name, e->data_off, e->size, e->crc32);
		}
		for (size_t t = 0; t < si.pickle->n_tensors; t++) {
			const struct bfs_pickle_tensor *pt =
			    &si.pickle->tensors[t];
			printf("  tensor %s: storage data/%s (%s, %" PRIu64
			       " el), offset %" PRIu64 ", stride (",
			       pt->name, pt->storage_key,
			       bfs_dtype_info(pt->storage_dtype)->torch_name,
			       pt->storage_numel, pt->offset);
			for (int d = 0; d < pt->ndim; d++)
				printf("%s%" PRId64, d ? ", " : "",
				       pt->stride[d]);
			printf(")%s%s\n", pt->is_parameter ? ", Parameter" : "",
			       pt->requires_grad ? ", requires_grad" : "");
		}
	}
	printf("%-24s %-10s %-24s %12s %16s\n", "field", "dtype", "shape",
	       "row bytes", "bytes");
	for (size_t i = 0; i < bfs_dataset_nfields(ds); i++) {
		const struct bfs_field *fl = bfs_dataset_field(ds, i);
		char shape[256];
		FILE *m = fmemopen(shape, sizeof(shape), "w");
		if (m) {
			print_shape(m, n, fl);
			fclose(m);
		} else {
			shape[0] = 0;
		}
		printf("%-24s %-10s %-24s %12" PRIu64 " %16" PRIu64 "\n",
		       fl->name, bfs_dtype_info(fl->dtype)->torch_name, shape,
		       fl->row_bytes, fl->row_bytes * n);
	}
}

/* Read every record of 'path' through libzip; compare its listing with
 * ours. Returns the number of failures (messages on stderr). */
static int verify_archive(const struct bfs_shard_info *si)
{
	int zerr = 0, bad = 0;
	zip_t *za = zip_open(si->path, ZIP_RDONLY, &zerr);
	char *buf = malloc(1 << 20);
	zip_int64_t n;

	if (!za || !buf) {
		zip_error_t e;
		zip_error_init_with_code(&e, zerr);
		fprintf(stderr, "batchfs inspect: %s: libzip cannot open: %s\n",
			si->path,
			za ? "out of memory" : zip_error_strerror(&e));
		zip_error_fini(&e);
		free(buf);
		if (za)
			zip_discard(za);
		return 1;
	}
	n = zip_get_num_entries(za, 0);
	if (n != (zip_int64_t)si->zip->n_entries) {
		fprintf(stderr,
			"batchfs inspect: %s: libzip sees %" PRId64
			" records, batchfs %zu\n",
			si->path, (int64_t)n, si->zip->n_entries);
		bad++;
	}
	for (zip_int64_t i = 0; i < n; i++) {
		const struct bfs_zip_entry *e = NULL;
		zip_stat_t st;
		if (zip_stat_index(za, (zip_uint64_t)i, 0, &st)) {
			bad++;
			continue;
		}
		for (size_t k = 0; k < si->zip->n_entries; k++)
			if (!strcmp(si->zip->entries[k].name, st.name))
				e = &si->zip->entries[k];
		if (!e || e->size != st.size || e->crc32 != st.crc) {
			fprintf(stderr,
				"batchfs inspect: %s: record '%s': "
				"libzip and batchfs disagree\n",
				si->path, st.name);
			bad++;
			continue;
		}
		if (st.crc == 0 && st.size > 0) {
			printf("%s: %s: crc not computed (0), not checked\n",
			       si->path, st.name);
			continue;
		}
		zip_file_t *zf = zip_fopen_index(za, (zip_uint64_t)i, 0);
		zip_int64_t got = 0, r = 0;
		while (zf && (r = zip_fread(zf, buf, 1 << 20)) > 0)
			got += r;
		if (!zf || r < 0 || (zip_uint64_t)got != st.size) {
			fprintf(stderr,
				"batchfs inspect: %s: offset %" PRIu64
				": record '%s': %s\n",
				si->path, e->data_off, st.name,
				zf ? zip_error_strerror(zip_file_get_error(zf))
				   : zip_error_strerror(zip_get_error(za)));
			bad++;
		}
		if (zf)
			zip_fclose(zf);
	}
	zip_discard(za);
	free(buf);
	if (!bad)
		printf("%s: %" PRId64 " records, every CRC-32 verified by "
		       "libzip\n",
		       si->path, (int64_t)n);
	return bad;
}

static int inspect_archives(char **paths, size_t n, const struct opts *o)
{
	struct bfs_dataset *ds = NULL;
	struct bfs_error err = {{0}};
	int bad = 0;

	if (bfs_dataset_open(&ds, (const char *const *)paths, n, &err)) {
		fprintf(stderr, "batchfs inspect: %s\n",
			err.msg[0] ? err.msg : "cannot open");
		return 1;
	}
	if (o->json)
		archive_json(ds);
	else
		archive_text(ds, o->verbose);
	for (size_t s = 0; o->verify && s < bfs_dataset_nshards(ds); s++) {
		struct bfs_shard_info si;
		bfs_dataset_shard(ds, s, &si);
		bad += verify_archive(&si);
	}
	bfs_dataset_close(ds);
	return bad ? 1 : 0;
}

/* ---- safetensors ----------------------------------------------------- */

struct st_tensor {
	char *name;
	char dtype[24];
	int ndim;
	uint64_t shape[BFS_MAX_DIMS];
	uint64_t begin, end;
	size_t hoff; /* where its entry starts in the header, for messages */
};

struct st {
	const char *path;
	const char *p, *start, *end; /* JSON text; offsets are +8 in file */
	struct st_tensor *t;
	size_t n;
	char **meta; /* key, value, key, value ... */
	size_t nmeta;
	char err[512];
};

static int st_fail(struct st *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int st_fail(struct st *s, const char *fmt, ...)
{
	va_list ap;
	int k;

	if (s->err[0])
		return -1;
	k = snprintf(s->err, sizeof(s->err), "%s: offset %zu: ", s->path,
		     (size_t)(s->p - s->start) + 8);
	va_start(ap, fmt);
	vsnprintf(s->err + k, sizeof(s->err) - (size_t)k, fmt, ap);
	va_end(ap);
	return -1;
}

static void st_ws(struct st *s)
{
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' ||
				 *s->p == '\n' || *s->p == '\r'))
		s->p++;
}

static int st_char(struct st *s, char c)
{
	st_ws(s);
	if (s->p >= s->end || *s->p != c)
		return st_fail(s, "expected '%c'", c);
	s->p++;
	return 0;
}

static int put_utf8(char *o, size_t *k, uint32_t c)
{
	if (c < 0x80) {
		o[(*k)++] = (char)c;
	} else if (c < 0x800) {
		o[(*k)++] = (char)(0xC0 | c >> 6);
		o[(*k)++] = (char)(0x80 | (c & 0x3F));
	} else if (c < 0x10000) {
		o[(*k)++] = (char)(0xE0 | c >> 12);
		o[(*k)++] = (char)(0x80 | ((c >> 6) & 0x3F));
		o[(*k)++] = (char)(0x80 | (c & 0x3F));
	} else {
		o[(*k)++] = (char)(0xF0 | c >> 18);
		o[(*k)++] = (char)(0x80 | ((c >> 12) & 0x3F));
		o[(*k)++] = (char)(0x80 | ((c >> 6) & 0x3F));
		o[(*k)++] = (char)(0x80 | (c & 0x3F));
	}
	return 0;
}

static int hex4(struct st *s, uint32_t *v)
{
	*v = 0;
	for (int i = 0; i < 4; i++, s->p++) {
		char c = s->p < s->end ? *s->p : 0;
		int d = c >= '0' && c <= '9'   ? c - '0'
			: c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10
					       : -1;
		if (d < 0)
			return st_fail(s, "bad \\u escape");
		*v = *v << 4 | (uint32_t)d;
	}
	return 0;
}

/* Length of a valid UTF-8 sequence at p (< end), 0 if invalid. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end)
{
	size_t n = *p < 0x80	     ? 1
		   : (*p >> 5) == 6  ? 2
		   : (*p >> 4) == 14 ? 3
		   : (*p >> 3) == 30 ? 4
				     : 0;
	uint32_t c;

	if (!n || (size_t)(end - p) < n)
		return 0;
	c = n == 1 ? *p : *p & (0x7F >> n);
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xC0) != 0x80)
			return 0;
		c = c << 6 | (p[i] & 0x3F);
	}
	if ((n == 2 && c < 0x80) || (n == 3 && c < 0x800) ||
	    (n == 4 && (c < 0x10000 || c > 0x10FFFF)) ||
	    (c >= 0xD800 && c <= 0xDFFF))
		return 0;
	return n;
}

/* A JSON string, unescaped, as a new NUL-free C string. */
static int st_string(struct st *s, char **out)
{
	size_t k = 0;
	char *o;

	*out = NULL;
	if (st_char(s, '"'))
		return -1;
	o = malloc((size_t)(s->end - s->p) + 1);
	if (!o)
		return st_fail(s, "out of memory");
	while (s->p < s->end && *s->p != '"') {
		unsigned char c = (unsigned char)*s->p;
		if (c < 0x20) {
			free(o);
			return st_fail(s, "control character in string");
		}
		if (c != '\\') {
			size_t n = utf8_len((const unsigned char *)s->p,
					    (const unsigned char *)s->end);
			if (!n) {
				free(o);
				return st_fail(s, "invalid UTF-8");
			}
			memcpy(o + k, s->p, n);
			k += n;
			s->p += n;
			continue;
		}
		s->p++;
		char e = s->p < s->end ? *s->p++ : 0;
		const char *map = strchr("\"\"\\\\//b\bf\fn\nr\rt\t", e);
		uint32_t u, lo;
		if (e && map && (map - "\"\"\\\\//b\bf\fn\nr\rt\t") % 2 == 0) {
			o[k++] = map[1];
		} else if (e == 'u' && !hex4(s, &u)) {
			if (u >= 0xD800 && u < 0xDC00) {
				if (s->end - s->p < 6 || s->p[0] != '\\' ||
				    s->p[1] != 'u' ||
				    (s->p += 2, hex4(s, &lo)) || lo < 0xDC00 ||
				    lo > 0xDFFF) {
					free(o);
					return st_fail(s, "bad surrogate pair");
				}
				u = 0x10000 + ((u - 0xD800) << 10) +
				    (lo - 0xDC00);
			} else if ((u >= 0xDC00 && u <= 0xDFFF) || u == 0) {
				free(o);
				return st_fail(s, "bad \\u escape");
			}
			put_utf8(o, &k, u);
		} else {
			free(o);
			return st_fail(s, "bad escape in string");
		}
	}
	if (s->p >= s->end) {
		free(o);
		return st_fail(s, "unterminated string");
	}
	s->p++;
	o[k] = 0;
	*out = o;
	return 0;
}

static int st_uint(struct st *s, uint64_t *v)
{
	const char *d0;

	st_ws(s);
	d0 = s->p;
	*v = 0;
	while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
		if (__builtin_mul_overflow(*v, 10, v) ||
		    __builtin_add_overflow(*v, (uint64_t)(*s->p - '0'), v))
			return st_fail(s, "integer overflows");
		s->p++;
	}
	if (s->p == d0 || (s->p - d0 > 1 && *d0 == '0'))
		return st_fail(s, "expected an unsigned integer");
	if (s->p < s->end && (*s->p == '.' || *s->p == 'e' || *s->p == 'E'))
		return st_fail(s, "expected an integer, not a number");
	return 0;
}

/* '[' uint (',' uint)* ']' or '[]' into v[max]; count in *n. */
static int st_uints(struct st *s, uint64_t *v, int max, int *n)
{
	*n = 0;
	if (st_char(s, '['))
		return -1;
	st_ws(s);
	if (s->p < s->end && *s->p == ']') {
		s->p++;
		return 0;
	}
	for (;;) {
		if (*n >= max)
			return st_fail(s, "too many values");
		if (st_uint(s, &v[(*n)++]))
			return -1;
		st_ws(s);
		if (s->p < s->end && *s->p == ',') {
			s->p++;
			continue;
		}
		return st_char(s, ']');
	}
}

/* Generic "{ key: <value> , ... }" with a per-member callback. */
static int st_object(struct st *s, int (*member)(struct st *, char *, void *),
		     void *arg)
{
	if (st_char(s, '{'))
		return -1;
	st_ws(s);
	if (s->p < s->end && *s->p == '}') {
		s->p++;
		return 0;
	}
	for (;;) {
		char *key;
		if (st_string(s, &key))
			return -1;
		if (st_char(s, ':')) {
			free(key);
			return -1;
		}
		if (member(s, key, arg)) /* member owns key from here */
			return -1;
		st_ws(s);
		if (s->p < s->end && *s->p == ',') {
			s->p++;
			continue;
		}
		return st_char(s, '}');
	}
}

static int meta_member(struct st *s, char *key, void *arg)
{
	char *val, **m;

	for (size_t i = 0; i < s->nmeta; i++)
		if (!strcmp(s->meta[2 * i], key)) {
			st_fail(s, "duplicate __metadata__ key '%s'", key);
			goto err_key;
		}
	st_ws(s);
	if (s->p >= s->end || *s->p != '"') {
		st_fail(s, "__metadata__ values must be strings");
		goto err_key;
	}
	if (st_string(s, &val))
		goto err_key;
	m = realloc(s->meta, (s->nmeta + 1) * 2 * sizeof(*m));
	if (!m) {
		free(val);
		st_fail(s, "out of memory");
		goto err_key;
	}
	s->meta = m;
	m[2 * s->nmeta] = key;
	m[2 * s->nmeta++ + 1] = val;
	return 0;
err_key:
	free(key);
	return -1;
}

static int tensor_member(struct st *s, char *key, void *arg)
{
	struct st_tensor *t = arg;
	uint64_t off[3];
	int n, rc = -1;
	char *v;

	if (!strcmp(key, "dtype") && !t->dtype[0]) {
		if (st_string(s, &v))
			goto out;
		snprintf(t->dtype, sizeof(t->dtype), "%s", v);
		rc = v[0] ? 0 : st_fail(s, "empty dtype");
		free(v);
	} else if (!strcmp(key, "shape") && t->ndim < 0) {
		rc = st_uints(s, t->shape, BFS_MAX_DIMS, &t->ndim);
	} else if (!strcmp(key, "data_offsets") && !t->end) {
		rc = st_uints(s, off, 3, &n);
		if (!rc && n != 2)
			rc = st_fail(s, "data_offsets must be [begin, end]");
		t->begin = off[0];
		t->end = off[1] + 1; /* +1: "seen" marker, undone later */
	} else {
		rc = st_fail(s, "unknown or duplicate tensor key '%s'", key);
	}
out:
	free(key);
	return rc;
}

static int top_member(struct st *s, char *key, void *arg)
{
	struct st_tensor *t;

	if (!strcmp(key, "__metadata__")) {
		free(key);
		if (*(int *)arg)
			return st_fail(s, "duplicate __metadata__");
		*(int *)arg = 1;
		return st_object(s, meta_member, NULL);
	}
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->t[i].name, key)) {
			st_fail(s, "duplicate tensor name '%s'", key);
			free(key);
			return -1;
		}
	t = realloc(s->t, (s->n + 1) * sizeof(*t));
	if (!t) {
		free(key);
		return st_fail(s, "out of memory");
	}
	s->t = t;
	t = &s->t[s->n++];
	memset(t, 0, sizeof(*t));
	t->name = key;
	t->ndim = -1;
	t->hoff = (size_t)(s->p - s->start);
	if (st_object(s, tensor_member, t))
		return -1;
	if (!t->dtype[0] || t->ndim < 0 || !t->end)
		return st_fail(s,
			       "tensor '%s' needs dtype, shape and "
			       "data_offsets",
			       key);
	t->end--;
	return 0;
}

static int cmp_begin(const void *a, const void *b)
{
	const struct st_tensor *x = a, *y = b;

	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return x->end < y->end ? -1 : x->end > y->end;
}

/* Offsets, sizes, tiling and file size, after parsing. */
static int st_check(struct st *s, uint64_t hlen, uint64_t fsize)
{
	uint64_t pos = 0;
	struct st_tensor *sorted = malloc((s->n ? s->n : 1) * sizeof(*sorted));

	if (!sorted)
		return st_fail(s, "out of memory");
	for (size_t i = 0; i < s->n; i++) {
		struct st_tensor *t = &s->t[i];
		enum bfs_dtype dt = bfs_dtype_from_st(t->dtype);
		s->p = s->start + t->hoff;
		uint64_t bytes = dt ? bfs_dtype_info(dt)->size : 0;
		for (int d = 0; d < t->ndim; d++)
			if (__builtin_mul_overflow(bytes, t->shape[d], &bytes))
				bytes = UINT64_MAX;
		if (!dt) {
			free(sorted);
			return st_fail(s, "tensor '%s': unknown dtype '%s'",
				       t->name, t->dtype);
		}
		if (t->end < t->begin || t->end - t->begin != bytes) {
			free(sorted);
			return st_fail(s,
				       "tensor '%s': data_offsets [%" PRIu64
				       ", %" PRIu64 "] do not hold %s%s "
				       "bytes of its shape",
				       t->name, t->begin, t->end,
				       bytes == UINT64_MAX ? "the " : "",
				       bytes == UINT64_MAX ? "overflowing"
							   : "");
		}
		sorted[i] = *t;
	}
	qsort(sorted, s->n, sizeof(*sorted), cmp_begin);
	for (size_t i = 0; i < s->n; i++) {
		if (sorted[i].begin != pos) {
			s->p = s->start + sorted[i].hoff;
			st_fail(s,
				"tensor '%s' starts at %" PRIu64 ", expected "
				"%" PRIu64 " (%s)",
				sorted[i].name, sorted[i].begin, pos,
				sorted[i].begin > pos ? "hole" : "overlap");
			free(sorted);
			return -1;
		}
		pos = sorted[i].end;
	}
	free(sorted);
	s->p = s->start + hlen; /* the data starts here */
	if (8 + hlen + pos != fsize)
		return st_fail(s,
			       "file holds %" PRIu64 " bytes, header "
			       "describes %" PRIu64,
			       fsize, 8 + hlen + pos);
	return 0;
}

static void st_print(const struct st *s, uint64_t hlen, int json)
{
	if (json) {
		printf("{\"file\": ");
		json_str(stdout, s->path);
		printf(", \"header_bytes\": %" PRIu64 ", \"metadata\": {",
		       hlen);
		for (size_t i = 0; i < s->nmeta; i++) {
			printf("%s", i ? ", " : "");
			json_str(stdout, s->meta[2 * i]);
			printf(": ");
			json_str(stdout, s->meta[2 * i + 1]);
		}
		printf("}, \"fields\": [");
	} else {
		printf("%s: safetensors, header %" PRIu64 " bytes, data at "
		       "offset %" PRIu64 ", %zu tensors\n",
		       s->path, hlen, 8 + hlen, s->n);
		for (size_t i = 0; i < s->nmeta; i++)
			printf("  __metadata__ %s = %s\n", s->meta[2 * i],
			       s->meta[2 * i + 1]);
	}
	for (size_t i = 0; i < s->n; i++) {
		const struct st_tensor *t = &s->t[i];
		const char *tn =
		    bfs_dtype_info(bfs_dtype_from_st(t->dtype))->torch_name;
		if (json) {
			printf("%s{\"name\": ", i ? ", " : "");
			json_str(stdout, t->name);
			printf(", \"dtype\": \"%s\", \"shape\": [", tn);
		} else {
			printf("  %-24s %-5s %-10s [", t->name, t->dtype, tn);
		}
		for (int d = 0; d < t->ndim; d++)
			printf("%s%" PRIu64, d ? ", " : "", t->shape[d]);
		if (json)
			printf("], \"data_offsets\": [%" PRIu64 ", %" PRIu64
			       "]}",
			       t->begin, t->end);
		else
			printf("]  data [%" PRIu64 ", %" PRIu64
			       ")  file offset %" PRIu64 "\n",
			       t->begin, t->end, 8 + hlen + t->begin);
	}
	if (json)
		printf("]}\n");
}

static int inspect_batch(const char *path, int fd, uint64_t fsize,
			 const struct opts *o)
{
	struct st s = {.path = path};
	uint8_t lenb[8];
	uint64_t hlen = 0;
	char *hdr = NULL;
	int have_meta = 0, rc = 1;

	if (pread(fd, lenb, 8, 0) != 8)
		goto out;
	for (int i = 7; i >= 0; i--)
		hlen = hlen << 8 | lenb[i];
	if (hlen > ST_MAX_HEADER || hlen > fsize - 8) {
		fprintf(stderr,
			"batchfs inspect: %s: offset 0: header length "
			"%" PRIu64 " exceeds the file or the 100 MB "
			"limit\n",
			path, hlen);
		goto out;
	}
	hdr = malloc(hlen ? hlen : 1);
	if (!hdr || pread(fd, hdr, hlen, 8) != (ssize_t)hlen) {
		fprintf(stderr, "batchfs inspect: %s: cannot read header\n",
			path);
		goto out;
	}
	s.p = s.start = hdr;
	s.end = hdr + hlen;
	/* The spec allows trailing 0x20 padding only. */
	while (s.end > s.p && s.end[-1] == ' ')
		s.end--;
	if (st_object(&s, top_member, &have_meta) == 0) {
		if (s.p != s.end)
			st_fail(&s, "trailing bytes after the header object");
		else
			st_check(&s, hlen, fsize);
	}
	if (s.err[0]) {
		fprintf(stderr, "batchfs inspect: %s\n", s.err);
		goto out;
	}
	st_print(&s, hlen, o->json);
	rc = 0;
out:
	for (size_t i = 0; i < s.n; i++)
		free(s.t[i].name);
	for (size_t i = 0; i < 2 * s.nmeta; i++)
		free(s.meta[i]);
	free(s.t);
	free(s.meta);
	free(hdr);
	return rc;
}

/* ---- command line -------------------------------------------------------- */

enum kind { KIND_BAD, KIND_ARCHIVE, KIND_BATCH };

static enum kind classify(const char *path, int *fd, uint64_t *size)
{
	struct stat st;
	uint8_t b[9];

	*fd = open(path, O_RDONLY | O_CLOEXEC);
	if (*fd < 0 || fstat(*fd, &st)) {
		fprintf(stderr, "batchfs inspect: %s: %s\n", path,
			strerror(errno));
		return KIND_BAD;
	}
	*size = (uint64_t)st.st_size;
	if (st.st_size >= 9 && pread(*fd, b, 9, 0) == 9) {
		if (!memcmp(b, "PK\3\4", 4))
			return KIND_ARCHIVE;
		if (b[8] == '{')
			return KIND_BATCH;
	}
	fprintf(stderr,
		"batchfs inspect: %s: offset 0: neither a torch.save "
		"archive (PK\\3\\4) nor a safetensors batch file\n",
		path);
	return KIND_BAD;
}

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: batchfs inspect [-v] [--verify] [--json] FILE...\n"
	    "\n"
	    "Describe torch.save archives or safetensors batch files.\n"
	    "Several archives are one dataset (shards concatenated along\n"
	    "dim 0, as `batchfs mount` sees them): its fields (name, dtype,\n"
	    "shape, bytes), sample count, and each archive's version and\n"
	    "byte order. A batch file (8-byte header length, then JSON) is\n"
	    "validated as the safetensors spec requires and its header is\n"
	    "printed: fields, dtypes, shapes, data offsets, __metadata__.\n"
	    "\n"
	    "  -v, --verbose  also list every record (name, data offset,\n"
	    "                 size, crc32) and each tensor's storage view\n"
	    "      --verify   read every record through libzip and check its\n"
	    "                 CRC-32 (CRC 0 on a non-empty record means \"not\n"
	    "                 computed\": reported, not a failure)\n"
	    "      --json     print one JSON object: for archives\n"
	    "                 {\"samples\": N, \"fields\": [{\"name\", "
	    "\"dtype\",\n"
	    "                 \"shape\"}]} (torch dtype names, full shapes);\n"
	    "                 for one batch file its header with torch names\n"
	    "  -h, --help     this help\n"
	    "\n"
	    "Exit status: 0 ok, 1 bad or unreadable input (the reason, file\n"
	    "and byte offset on stderr), 2 bad usage.\n");
}

static int bad_usage(const char *msg, const char *arg)
{
	fprintf(stderr, "batchfs inspect: %s%s%s\n", msg, arg ? ": " : "",
		arg ? arg : "");
	usage(stderr);
	return 2;
}

int bfs_cmd_inspect(int argc, char **argv)
{
	static const struct option lopts[] = {
	    {"verbose", no_argument, NULL, 'v'},
	    {"verify", no_argument, NULL, 'V'},
	    {"json", no_argument, NULL, 'j'},
	    {"help", no_argument, NULL, 'h'},
	    {0},
	};
	struct opts o = {0};
	char **arch = NULL;
	enum kind *kinds = NULL;
	size_t narch = 0, nbatch = 0;
	int c, rc = 0;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+vh", lopts, NULL)) != -1) {
		switch (c) {
		case 'v':
			o.verbose = 1;
			break;
		case 'V':
			o.verify = 1;
			break;
		case 'j':
			o.json = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			return bad_usage("unknown option", argv[optind - 1]);
		}
	}
	if (optind >= argc)
		return bad_usage("no FILE given", NULL);
	arch = calloc((size_t)(argc - optind), sizeof(*arch));
	kinds = calloc((size_t)(argc - optind), sizeof(*kinds));
	if (!arch || !kinds) {
		free(arch);
		free(kinds);
		return 1;
	}
	for (int i = optind; i < argc; i++) {
		int fd;
		uint64_t size;
		enum kind k = classify(argv[i], &fd, &size);
		kinds[i - optind] = k;
		if (k == KIND_ARCHIVE)
			arch[narch++] = argv[i];
		else if (k == KIND_BATCH)
			nbatch++;
		if (fd >= 0)
			close(fd);
		if (k == KIND_BAD)
			rc = 1;
	}
	if (o.json && nbatch + (narch ? 1 : 0) > 1) {
		free(arch);
		free(kinds);
		return bad_usage("--json describes one dataset or one batch "
				 "file",
				 NULL);
	}
	if (narch && inspect_archives(arch, narch, &o))
		rc = 1;
	for (int i = optind; i < argc; i++) {
		int fd;
		uint64_t size;
		if (kinds[i - optind] != KIND_BATCH)
			continue;
		if (classify(argv[i], &fd, &size) != KIND_BATCH ||
		    inspect_batch(argv[i], fd, size, &o))
			rc = 1;
		if (fd >= 0)
			close(fd);
	}
	free(kinds);
	free(arch);
	return rc;
}
