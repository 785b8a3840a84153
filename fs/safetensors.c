/* fs/safetensors: strict safetensors header parser (see safetensors.h).
 *
 * One pass of a small recursive-descent reader that accepts only the
 * schema: strings (escapes decoded, raw bytes checked as UTF-8, no control
 * bytes, no NUL), non-negative integers (overflow, leading zeros and
 * floats refused), the three tensor keys and a __metadata__ object of
 * strings. Then the layout checks that need every tensor: unique names,
 * offsets tiling [0, total), and the exact file size. Each failure names
 * the byte offset in the file (JSON cursor + 8, or the offending entry).
 *
 * Memory: every decoded string (names, metadata) goes into one buffer of
 * N + 1 bytes, allocated once: a JSON string literal never decodes longer
 * than its source, whose two quotes pay for the NUL. So string pointers
 * are stable while the tensor and dims arrays still grow.
 *
 * The loader library compiles this file too (hidden visibility): use
 * nothing but libc and the header-only fs/size.h here, no bfs_log, no
 * other fs/ module. */
#include "fs/safetensors.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/size.h"

/* Safetensors dtype codes and element sizes. When a code is added to the
 * format, add it here (and to fs/dtype.c's st_name column if torch has the
 * dtype; tests/unit/test_safetensors.c checks the two agree), to the dtype
 * list of tests/loader/test_loader_host.c and to
 * loader/python/batchfs_loader.py. C32 and C128 are not in the spec; the
 * loader has always accepted them. */
static const struct {
	const char *code;
	uint32_t size;
} dtypes[] = {
    {"BOOL", 1},    {"U8", 1},	{"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
    {"F8_E8M0", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},	    {"BF16", 2},
    {"I32", 4},	    {"U32", 4}, {"F32", 4}, {"C32", 4},	    {"I64", 8},
    {"U64", 8},	    {"F64", 8}, {"C64", 8}, {"C128", 16},
};

uint32_t bfs_st_dtype_size(const char *code)
{
	for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++)
		if (strcmp(dtypes[i].code, code) == 0)
			return dtypes[i].size;
	return 0;
}

struct parser {
	const char *s; /* JSON text (file + 8) */
	size_t n, i;   /* its length, the cursor */
	unsigned flags;
	uint64_t data_len; /* file_size - 8 - n */
	struct bfs_st_error *err;
	const char *tensor; /* entry being parsed, for messages */
	/* outputs */
	struct bfs_st_tensor *t;
	size_t nt, capt;
	size_t *dim_at; /* per tensor: index of its shape in dims */
	size_t cap_dim_at;
	uint64_t *dims;
	size_t nd, capd;
	struct bfs_st_meta *meta;
	size_t nm, capm;
	char *strs;
	size_t ns;
	int seen_meta;
};

static int fail_at(struct parser *p, uint64_t off, const char *tensor,
		   const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail_at(struct parser *p, uint64_t off, const char *tensor,
		   const char *fmt, ...)
{
	struct bfs_st_error *e = p->err;
	va_list ap;

	if (e->reason[0])
		return -EBADMSG;
	e->offset = off;
	snprintf(e->tensor, sizeof(e->tensor), "%.64s", tensor ? tensor : "");
	va_start(ap, fmt);
	vsnprintf(e->reason, sizeof(e->reason), fmt, ap);
	va_end(ap);
	return -EBADMSG;
}

/* Fail at the cursor. */
#define fail(p, ...)                                                           \
	fail_at((p), 8 + (uint64_t)(p)->i, (p)->tensor, __VA_ARGS__)

static void skip_ws(struct parser *p)
{
	while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' ||
			       p->s[p->i] == '\n' || p->s[p->i] == '\r'))
		p->i++;
}

/* Next non-blank byte without consuming it (0 at the end). */
static char peek(struct parser *p)
{
	skip_ws(p);
	return p->i < p->n ? p->s[p->i] : 0;
}

/* Skip blanks, then consume 'c' or fail. */
static int expect(struct parser *p, char c)
{
	char got = peek(p);

	if (p->i >= p->n)
		return fail(p, "expected '%c', found the end of the header", c);
	if (got != c)
		return fail(p, "expected '%c', found '%c'", c, got);
	p->i++;
	return 0;
}

static int hex4(struct parser *p, unsigned *v)
{
	*v = 0;
	if (p->n - p->i < 4)
		return fail(p, "truncated \\u escape");
	for (int k = 0; k < 4; k++) {
		char c = p->s[p->i++];
		unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
			     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
			     : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
						    : 16u;
		if (d == 16)
			return fail(p, "bad hex digit in \\u escape");
		*v = *v << 4 | d;
	}
	return 0;
}

static size_t put_utf8(char *o, unsigned cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | cp >> 6);
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | cp >> 12);
		o[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | cp >> 18);
	o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
	o[2] = (char)(0x80 | (cp >> 6 & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* Length of the valid UTF-8 sequence at p[0..avail), 0 if invalid
 * (overlong forms, surrogates and code points above U+10FFFF are). */
static size_t utf8_len(const unsigned char *p, size_t avail)
{
	size_t n = *p < 0x80	     ? 1
		   : (*p >> 5) == 6  ? 2
		   : (*p >> 4) == 14 ? 3
		   : (*p >> 3) == 30 ? 4
				     : 0;
	uint32_t c;

	if (!n || avail < n)
		return 0;
	c = n == 1 ? *p : *p & (0x7fu >> n);
	for (size_t k = 1; k < n; k++) {
		if ((p[k] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (p[k] & 0x3f);
	}
	if ((n == 2 && c < 0x80) || (n == 3 && c < 0x800) ||
	    (n == 4 && (c < 0x10000 || c > 0x10ffff)) ||
	    (c >= 0xd800 && c <= 0xdfff))
		return 0;
	return n;
}

/* One escape after the backslash into o (≤ 4 bytes), *len set. A \u
 * escape never decodes longer than its 6 source bytes. */
static int unescape(struct parser *p, char *o, size_t *len)
{
	static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
	unsigned cp = 0, lo = 0;
	const char *e;
	char c;

	if (p->i >= p->n)
		return fail(p, "truncated escape");
	c = p->s[p->i++];
	if (c != 'u') {
		e = c ? strchr(from, c) : NULL;
		if (!e)
			return fail(p, "bad escape '\\%c'", c);
		o[0] = to[e - from];
		*len = 1;
		return 0;
	}
	if (hex4(p, &cp) < 0)
		return -EBADMSG;
	if (cp >= 0xdc00 && cp < 0xe000)
		return fail(p, "lone low surrogate in \\u escape");
	if (cp >= 0xd800 && cp < 0xdc00) {
		if (p->n - p->i < 6 || p->s[p->i] != '\\' ||
		    p->s[p->i + 1] != 'u')
			return fail(p, "lone high surrogate in \\u escape");
		p->i += 2;
		if (hex4(p, &lo) < 0)
			return -EBADMSG;
		if (lo < 0xdc00 || lo >= 0xe000)
			return fail(p, "bad low surrogate in \\u escape");
		cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
	}
	if (cp == 0)
		return fail(p, "NUL (\\u0000) in string");
	*len = put_utf8(o, cp);
	return 0;
}

/* A JSON string, decoded into out[0..cap) and NUL-terminated; *len = the
 * decoded length. cap = source length + 1 always suffices. */
static int string(struct parser *p, char *out, size_t cap, size_t *len)
{
	size_t k = 0, m = 0;
	char tmp[4];

	if (expect(p, '"') < 0)
		return -EBADMSG;
	for (;;) {
		if (p->i >= p->n)
			return fail(p, "unterminated string");
		unsigned char c = (unsigned char)p->s[p->i];
		if (c == '"')
			break;
		if (c < 0x20)
			return fail(p, "control byte 0x%02x in string", c);
		if (c == '\\') {
			p->i++;
			if (unescape(p, tmp, &m) < 0)
				return -EBADMSG;
		} else {
			m = utf8_len((const unsigned char *)p->s + p->i,
				     p->n - p->i);
			if (!m)
				return fail(p, "invalid UTF-8 in string");
			memcpy(tmp, p->s + p->i, m);
			p->i += m;
		}
		if (k + m >= cap)
			return fail(p, "string longer than %zu bytes", cap - 1);
		memcpy(out + k, tmp, m);
		k += m;
	}
	p->i++;
	out[k] = 0;
	if (len)
		*len = k;
	return 0;
}

/* A string into the shared buffer; *at = its start. */
static int stored_string(struct parser *p, char **at)
{
	size_t len;

	*at = p->strs + p->ns;
	if (string(p, *at, p->n + 1 - p->ns, &len) < 0)
		return -EBADMSG;
	p->ns += len + 1;
	return 0;
}

static int u64(struct parser *p, uint64_t *v)
{
	char c = peek(p);

	*v = 0;
	if (c < '0' || c > '9')
		return fail(p, "expected a non-negative integer");
	if (c == '0' && p->i + 1 < p->n && p->s[p->i + 1] >= '0' &&
	    p->s[p->i + 1] <= '9')
		return fail(p, "integer with a leading zero");
	while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
		unsigned d = (unsigned)(p->s[p->i] - '0');
		if (*v > (UINT64_MAX - d) / 10)
			return fail(p, "integer overflows 64 bits");
		*v = *v * 10 + d;
		p->i++;
	}
	c = p->i < p->n ? p->s[p->i] : 0;
	if (c == '.' || c == 'e' || c == 'E')
		return fail(p, "expected an integer, not a number with '%c'",
			    c);
	return 0;
}

static int grow(void **a, size_t *cap, size_t need, size_t elem)
{
	size_t c = *cap ? *cap : 8;
	void *q;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	q = realloc(*a, c * elem);
	if (!q)
		return -ENOMEM;
	*a = q;
	*cap = c;
	return 0;
}

/* [d0, d1, ...] appended to p->dims; *ndim = the count. */
static int shape(struct parser *p, uint32_t *ndim)
{
	uint64_t v;

	*ndim = 0;
	if (expect(p, '[') < 0)
		return -EBADMSG;
	if (peek(p) == ']') {
		p->i++;
		return 0;
	}
	for (;;) {
		if (u64(p, &v) < 0)
			return -EBADMSG;
		if (grow((void **)&p->dims, &p->capd, p->nd + 1, sizeof(v)))
			return -ENOMEM;
		p->dims[p->nd++] = v;
		(*ndim)++;
		if (peek(p) == ']') {
			p->i++;
			return 0;
		}
		if (expect(p, ',') < 0)
			return -EBADMSG;
	}
}

static int offsets(struct parser *p, uint64_t *b, uint64_t *e)
{
	if (expect(p, '[') < 0 || u64(p, b) < 0 || expect(p, ',') < 0 ||
	    u64(p, e) < 0 || expect(p, ']') < 0)
		return -EBADMSG;
	if (*b > *e)
		return fail(p, "data_offsets begin %llu > end %llu",
			    (unsigned long long)*b, (unsigned long long)*e);
	return 0;
}

/* The "dtype" value into t: a code of the table (or any non-empty code
 * with BFS_ST_ANY_DTYPE). */
static int dtype(struct parser *p, struct bfs_st_tensor *t)
{
	size_t at = p->i;
	char code[64];

	if (string(p, code, sizeof(code), NULL) < 0)
		return -EBADMSG;
	t->elem_size = bfs_st_dtype_size(code);
	if (!t->elem_size && !(p->flags & BFS_ST_ANY_DTYPE)) {
		p->i = at;
		return fail(p, "unknown dtype \"%s\"", code);
	}
	if (!code[0] || strlen(code) >= sizeof(t->dtype)) {
		p->i = at;
		return fail(p, "dtype \"%s\" is not a safetensors code", code);
	}
	memcpy(t->dtype, code, strlen(code) + 1);
	return 0;
}

/* {"k": "v", ...} into p->meta. */
static int metadata(struct parser *p)
{
	struct bfs_st_meta *m;
	char *key, *value;
	size_t at;

	if (p->seen_meta++)
		return fail(p, "duplicate __metadata__");
	if (expect(p, '{') < 0)
		return -EBADMSG;
	if (peek(p) == '}') {
		p->i++;
		return 0;
	}
	for (;;) {
		at = p->i;
		if (stored_string(p, &key) < 0 || expect(p, ':') < 0)
			return -EBADMSG;
		if (peek(p) != '"')
			return fail(p, "__metadata__ values must be strings");
		if (stored_string(p, &value) < 0)
			return -EBADMSG;
		if (grow((void **)&p->meta, &p->capm, p->nm + 1,
			 sizeof(*p->meta)))
			return -ENOMEM;
		m = &p->meta[p->nm++];
		m->key = key;
		m->value = value;
		m->entry_off = 8 + (uint64_t)at;
		if (peek(p) == '}') {
			p->i++;
			return 0;
		}
		if (expect(p, ',') < 0)
			return -EBADMSG;
	}
}

int bfs_st_shape_bytes(const uint64_t *dims, uint32_t ndim, uint32_t elem_size,
		       uint64_t *out)
{
	*out = elem_size;
	for (uint32_t k = 0; k < ndim; k++)
		if (bfs_size_mul(*out, dims[k], out))
			return -EOVERFLOW;
	return 0;
}

/* Byte length check of one complete entry: shape × element size. */
static int entry_size(struct parser *p, const struct bfs_st_tensor *t,
		      const uint64_t *dims)
{
	uint64_t n = t->elem_size;

	if (t->end > p->data_len)
		return fail_at(p, t->entry_off, t->name,
			       "data_offsets end %llu beyond the data (%llu "
			       "bytes)",
			       (unsigned long long)t->end,
			       (unsigned long long)p->data_len);
	if (!t->elem_size) /* unknown code, BFS_ST_ANY_DTYPE */
		return 0;
	if (bfs_st_shape_bytes(dims, t->ndim, t->elem_size, &n))
		return fail_at(p, t->entry_off, t->name,
			       "shape x %u bytes is more than 2^63-1 bytes",
			       t->elem_size);
	if (n != t->end - t->begin)
		return fail_at(p, t->entry_off, t->name,
			       "shape × %u bytes = %llu, data_offsets [%llu, "
			       "%llu] span %llu",
			       t->elem_size, (unsigned long long)n,
			       (unsigned long long)t->begin,
			       (unsigned long long)t->end,
			       (unsigned long long)(t->end - t->begin));
	return 0;
}

/* The value of one tensor entry into t (name already set). */
static int entry(struct parser *p, struct bfs_st_tensor *t)
{
	char key[16];
	int seen = 0, rc;

	if (expect(p, '{') < 0)
		return -EBADMSG;
	do {
		size_t at = p->i;
		if (string(p, key, sizeof(key), NULL) < 0 || expect(p, ':') < 0)
			return -EBADMSG;
		if (strcmp(key, "dtype") == 0 && !(seen & 1)) {
			rc = dtype(p, t);
			seen |= 1;
		} else if (strcmp(key, "shape") == 0 && !(seen & 2)) {
			rc = shape(p, &t->ndim);
			seen |= 2;
		} else if (strcmp(key, "data_offsets") == 0 && !(seen & 4)) {
			rc = offsets(p, &t->begin, &t->end);
			seen |= 4;
		} else {
			p->i = at;
			return fail(p, "unknown or repeated key \"%s\"", key);
		}
		if (rc < 0)
			return rc;
	} while (peek(p) == ',' && ++p->i);
	if (expect(p, '}') < 0)
		return -EBADMSG;
	if (seen != 7)
		return fail_at(p, t->entry_off, t->name, "tensor lacks %s",
			       !(seen & 1)   ? "dtype"
			       : !(seen & 2) ? "shape"
					     : "data_offsets");
	/* p->dims is NULL while every shape so far was a scalar. */
	return entry_size(p, t, t->ndim ? p->dims + p->dim_at[p->nt] : NULL);
}

/* One "key": value pair of the top-level object. */
static int member(struct parser *p)
{
	struct bfs_st_tensor *t;
	size_t at;
	char *name;
	int rc;

	skip_ws(p);
	at = p->i;
	if (stored_string(p, &name) < 0 || expect(p, ':') < 0)
		return -EBADMSG;
	if (strcmp(name, "__metadata__") == 0)
		return metadata(p);
	if (grow((void **)&p->t, &p->capt, p->nt + 1, sizeof(*p->t)) ||
	    grow((void **)&p->dim_at, &p->cap_dim_at, p->nt + 1,
		 sizeof(size_t)))
		return -ENOMEM;
	t = &p->t[p->nt];
	memset(t, 0, sizeof(*t));
	t->name = name;
	t->entry_off = 8 + (uint64_t)at;
	p->dim_at[p->nt] = p->nd;
	p->tensor = name;
	rc = entry(p, t);
	p->tensor = NULL;
	if (rc < 0)
		return rc;
	p->nt++;
	return 0;
}

/* qsort comparators over arrays of pointers (no shared state: the loader
 * parses from several threads). Ties go by file position, so of two equal
 * names the later one sorts second. */
static int then_by(int c, uint64_t a, uint64_t b)
{
	return c ? c : (a > b) - (a < b);
}

static int tensor_by_name(const void *a, const void *b)
{
	const struct bfs_st_tensor *x = *(const struct bfs_st_tensor *const *)a;
	const struct bfs_st_tensor *y = *(const struct bfs_st_tensor *const *)b;

	return then_by(strcmp(x->name, y->name), x->entry_off, y->entry_off);
}

static int tensor_by_offset(const void *a, const void *b)
{
	const struct bfs_st_tensor *x = *(const struct bfs_st_tensor *const *)a;
	const struct bfs_st_tensor *y = *(const struct bfs_st_tensor *const *)b;

	return then_by(then_by(0, x->begin, y->begin), x->end, y->end);
}

static int meta_by_key(const void *a, const void *b)
{
	const struct bfs_st_meta *x = *(const struct bfs_st_meta *const *)a;
	const struct bfs_st_meta *y = *(const struct bfs_st_meta *const *)b;

	return then_by(strcmp(x->key, y->key), x->entry_off, y->entry_off);
}

/* Unique names and metadata keys; 'v' has room for max(nt, nm) pointers.
 * A duplicate is reported where its second occurrence starts. */
static int check_unique(struct parser *p, const void **v)
{
	for (size_t k = 0; k < p->nt; k++)
		v[k] = &p->t[k];
	qsort(v, p->nt, sizeof(*v), tensor_by_name);
	for (size_t k = 1; k < p->nt; k++) {
		const struct bfs_st_tensor *t = v[k];
		if (strcmp(t->name,
			   ((const struct bfs_st_tensor *)v[k - 1])->name) == 0)
			return fail_at(p, t->entry_off, t->name,
				       "duplicate tensor name");
	}
	for (size_t k = 0; k < p->nm; k++)
		v[k] = &p->meta[k];
	qsort(v, p->nm, sizeof(*v), meta_by_key);
	for (size_t k = 1; k < p->nm; k++) {
		const struct bfs_st_meta *m = v[k];
		if (strcmp(m->key,
			   ((const struct bfs_st_meta *)v[k - 1])->key) == 0)
			return fail_at(p, m->entry_off, NULL,
				       "duplicate __metadata__ key \"%.64s\"",
				       m->key);
	}
	return 0;
}

/* Sorted by offset, the tensors tile [0, total) with no hole and no
 * overlap, and the file is exactly 8 + N + total bytes. */
static int check_tiling(struct parser *p, const void **v)
{
	uint64_t pos = 0;

	for (size_t k = 0; k < p->nt; k++)
		v[k] = &p->t[k];
	qsort(v, p->nt, sizeof(*v), tensor_by_offset);
	for (size_t k = 0; k < p->nt; k++) {
		const struct bfs_st_tensor *t = v[k];
		if (t->begin != pos)
			return fail_at(p, t->entry_off, t->name,
				       "starts at %llu, expected %llu (%s)",
				       (unsigned long long)t->begin,
				       (unsigned long long)pos,
				       t->begin > pos ? "hole" : "overlap");
		pos = t->end;
	}
	if (pos != p->data_len)
		return fail_at(p, 8 + (uint64_t)p->n, NULL,
			       "file holds %llu bytes, header describes %llu",
			       (unsigned long long)(8 + p->n + p->data_len),
			       (unsigned long long)(8 + p->n + pos));
	return 0;
}

/* The whole header object, then the layout checks. */
static int top(struct parser *p)
{
	const void **v;
	int rc;

	if (expect(p, '{') < 0)
		return -EBADMSG;
	if (peek(p) != '}') {
		do {
			rc = member(p);
			if (rc < 0)
				return rc;
		} while (peek(p) == ',' && ++p->i);
	}
	if (expect(p, '}') < 0)
		return -EBADMSG;
	while (p->i < p->n && p->s[p->i] == ' ') /* the spec's padding */
		p->i++;
	if (p->i != p->n)
		return fail(p, "trailing bytes after the header object");
	/* Shape pointers only now that dims stopped moving. */
	for (size_t k = 0; k < p->nt; k++)
		p->t[k].shape = p->t[k].ndim ? p->dims + p->dim_at[k] : NULL;
	v = malloc((p->nt > p->nm ? p->nt : p->nm) * sizeof(*v) + 1);
	if (!v)
		return -ENOMEM;
	rc = check_unique(p, v);
	if (rc == 0)
		rc = check_tiling(p, v);
	free(v);
	return rc;
}

int bfs_st_header_len(const void *first8, uint64_t file_size, uint64_t *hlen,
		      struct bfs_st_error *err)
{
	struct bfs_st_error dummy;
	struct parser p = {.err = err ? err : &dummy};
	const unsigned char *b = first8;
	uint64_t n = 0;

	memset(p.err, 0, sizeof(*p.err));
	*hlen = 0;
	if (file_size < 8)
		return fail_at(&p, 0, NULL, "file of %llu bytes has no header",
			       (unsigned long long)file_size);
	for (int k = 7; k >= 0; k--)
		n = n << 8 | b[k];
	if (n > BFS_ST_MAX_HEADER)
		return fail_at(&p, 0, NULL,
			       "header length: a header of %llu bytes "
			       "exceeds the limit of %llu bytes",
			       (unsigned long long)n, BFS_ST_MAX_HEADER);
	if (n < 2 || n > file_size - 8)
		return fail_at(&p, 0, NULL,
			       "header length %llu invalid for a file of %llu "
			       "bytes (a header takes 2 to file size - 8)",
			       (unsigned long long)n,
			       (unsigned long long)file_size);
	*hlen = n;
	return 0;
}

int bfs_st_parse(const void *file, size_t len, uint64_t file_size,
		 unsigned flags, struct bfs_st_header **out,
		 struct bfs_st_error *err)
{
	struct bfs_st_error dummy;
	struct parser p = {.flags = flags, .err = err ? err : &dummy};
	struct bfs_st_header *h = NULL;
	uint64_t hlen;
	int rc;

	*out = NULL;
	rc = bfs_st_header_len(file, len < 8 ? len : file_size, &hlen, p.err);
	if (rc < 0)
		return rc;
	if (len < 8 + hlen)
		return fail_at(&p, 0, NULL,
			       "header of %llu bytes, only %zu bytes given",
			       (unsigned long long)hlen, len);
	p.s = (const char *)file + 8;
	p.n = (size_t)hlen;
	p.data_len = file_size - 8 - hlen;
	p.strs = malloc(p.n + 1);
	h = calloc(1, sizeof(*h));
	if (!p.strs || !h) {
		rc = -ENOMEM;
		goto out;
	}
	rc = top(&p);
	if (rc < 0)
		goto out;
	h->header_len = hlen;
	h->data_start = 8 + hlen;
	h->file_size = file_size;
	h->ntensors = p.nt;
	h->tensors = p.t;
	h->nmeta = p.nm;
	h->meta = p.meta;
	h->dims_ = p.dims;
	h->strs_ = p.strs;
	*out = h;
	h = NULL;
	p.t = NULL;
	p.meta = NULL;
	p.dims = NULL;
	p.strs = NULL;
out:
	if (rc == -ENOMEM)
		fail_at(&p, 0, NULL, "out of memory parsing the header");
	free(p.t);
	free(p.meta);
	free(p.dims);
	free(p.strs);
	free(p.dim_at);
	free(h);
	return rc;
}

void bfs_st_free(struct bfs_st_header *h)
{
	if (!h)
		return;
	free(h->tensors);
	free(h->meta);
	free(h->dims_);
	free(h->strs_);
	free(h);
}
