/* Safetensors header parser for the loader.
 *
 * Input is untrusted: the bytes of a batch file just read into a ring slot.
 * Layout: u64 LE N, N bytes of UTF-8 JSON (an object, optionally padded
 * with spaces), then the data. The JSON object maps "__metadata__" to an
 * object of strings and every other key (a tensor name) to
 *   {"dtype": "F32", "shape": [d0, ...], "data_offsets": [begin, end]}
 * with offsets relative to the data start. Everything is validated before
 * use: string escapes, integer overflow, offsets within the file, byte
 * length = product(shape) × element size for known dtypes, no overlapping
 * tensors, no duplicate names. A failure names the byte offset in the file.
 *
 * The parse is a single pass of a small recursive-descent reader that only
 * accepts this schema (no floats, no nesting beyond it). Tensors are
 * returned sorted by data offset, i.e. in file layout order. */
#include "loader/internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_HEADER (100u << 20) /* safetensors' own limit */

/* Safetensors dtype codes and sizes. When a code is added to the format
 * (or to fs/dtype.c's st_name column), add it here and to the dtype list
 * of tests/loader/test_loader_host.c and loader/python/batchfs_loader.py. */
static const struct {
	const char *code;
	uint32_t size;
} dtypes[] = {
    {"BOOL", 1},    {"U8", 1},	{"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1},
    {"F8_E8M0", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},	    {"BF16", 2},
    {"I32", 4},	    {"U32", 4}, {"F32", 4}, {"C32", 4},	    {"I64", 8},
    {"U64", 8},	    {"F64", 8}, {"C64", 8}, {"C128", 16},
};

uint32_t bfs_loader_dtype_size(const char *code)
{
	for (size_t i = 0; i < sizeof(dtypes) / sizeof(dtypes[0]); i++)
		if (strcmp(dtypes[i].code, code) == 0)
			return dtypes[i].size;
	return 0;
}

struct parser {
	const char *s; /* JSON text */
	size_t n, i;   /* length, cursor */
	char *msg;
	size_t msglen;
	/* outputs */
	struct bfs_loader_tensor *t;
	size_t nt, capt;
	uint64_t *dims;
	size_t nd, capd;
	size_t *dim_at, *name_at; /* per tensor: index into dims / strs */
	char *strs;
	size_t ns;
};

static int fail(struct parser *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int fail(struct parser *p, const char *fmt, ...)
{
	int k = snprintf(p->msg, p->msglen, "header offset %zu: ", 8 + p->i);
	va_list ap;

	va_start(ap, fmt);
	if (k > 0 && (size_t)k < p->msglen)
		vsnprintf(p->msg + k, p->msglen - (size_t)k, fmt, ap);
	va_end(ap);
	return -EBADMSG;
}

static void skip_ws(struct parser *p)
{
	while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' ||
			       p->s[p->i] == '\n' || p->s[p->i] == '\r'))
		p->i++;
}

/* Skip blanks, then consume 'c' or fail. */
static int expect(struct parser *p, char c)
{
	skip_ws(p);
	if (p->i >= p->n)
		return fail(p, "expected '%c', found end of header", c);
	if (p->s[p->i] != c)
		return fail(p, "expected '%c', found '%c'", c, p->s[p->i]);
	p->i++;
	return 0;
}

/* Next non-blank byte without consuming it (0 at the end). */
static char peek(struct parser *p)
{
	skip_ws(p);
	return p->i < p->n ? p->s[p->i] : 0;
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

/* One escape after the backslash; writes ≤ 4 bytes to o, sets *len. A \u
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
		return fail(p, "lone low surrogate");
	if (cp >= 0xd800 && cp < 0xdc00) {
		if (p->n - p->i < 6 || p->s[p->i] != '\\' ||
		    p->s[p->i + 1] != 'u')
			return fail(p, "lone high surrogate");
		p->i += 2;
		if (hex4(p, &lo) < 0)
			return -EBADMSG;
		if (lo < 0xdc00 || lo >= 0xe000)
			return fail(p, "bad low surrogate");
		cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
	}
	if (cp == 0)
		return fail(p, "NUL in string");
	*len = put_utf8(o, cp);
	return 0;
}

/* A JSON string, decoded into out[0..cap) and NUL-terminated (out may be
 * NULL: validate only). *len = decoded length. Decoded text is never
 * longer than its source, so cap = source length + 1 always suffices. */
static int string(struct parser *p, char *out, size_t cap, size_t *len)
{
	size_t k = 0, m = 0;
	char tmp[4];

	if (expect(p, '"') < 0)
		return -EBADMSG;
	for (;;) {
		if (p->i >= p->n)
			return fail(p, "unterminated string");
		char c = p->s[p->i++];
		if (c == '"')
			break;
		if ((unsigned char)c < 0x20)
			return fail(p, "control byte in string");
		if (c == '\\') {
			if (unescape(p, tmp, &m) < 0)
				return -EBADMSG;
		} else {
			tmp[0] = c;
			m = 1;
		}
		if (out && k + m >= cap)
			return fail(p, "string too long");
		if (out)
			memcpy(out + k, tmp, m);
		k += m;
	}
	if (out)
		out[k] = 0;
	if (len)
		*len = k;
	return 0;
}

static int u64(struct parser *p, uint64_t *v)
{
	skip_ws(p);
	*v = 0;
	if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
		return fail(p, "expected a non-negative integer");
	if (p->s[p->i] == '0' && p->i + 1 < p->n && p->s[p->i + 1] >= '0' &&
	    p->s[p->i + 1] <= '9')
		return fail(p, "leading zero");
	while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
		unsigned d = (unsigned)(p->s[p->i] - '0');
		if (*v > (UINT64_MAX - d) / 10)
			return fail(p, "integer overflows 64 bits");
		*v = *v * 10 + d;
		p->i++;
	}
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

/* [d0, d1, ...] appended to p->dims; *ndim = count. */
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

/* {"k": "v", ...}: validated and dropped. */
static int metadata(struct parser *p)
{
	if (expect(p, '{') < 0)
		return -EBADMSG;
	if (peek(p) == '}') {
		p->i++;
		return 0;
	}
	for (;;) {
		if (string(p, NULL, 0, NULL) < 0 || expect(p, ':') < 0 ||
		    string(p, NULL, 0, NULL) < 0)
			return -EBADMSG;
		if (peek(p) == '}') {
			p->i++;
			return 0;
		}
		if (expect(p, ',') < 0)
			return -EBADMSG;
	}
}

/* The value of one tensor entry, into t (name already set). */
static int entry(struct parser *p, struct bfs_loader_tensor *t,
		 uint64_t data_len)
{
	char key[16];
	int seen = 0, rc;
	uint64_t b = 0, e = 0;

	if (expect(p, '{') < 0)
		return -EBADMSG;
	do {
		size_t at = p->i;
		if (string(p, key, sizeof(key), NULL) < 0 || expect(p, ':') < 0)
			return -EBADMSG;
		if (strcmp(key, "dtype") == 0 && !(seen & 1)) {
			rc = string(p, t->dtype, sizeof(t->dtype), NULL);
			seen |= 1;
		} else if (strcmp(key, "shape") == 0 && !(seen & 2)) {
			rc = shape(p, &t->ndim);
			seen |= 2;
		} else if (strcmp(key, "data_offsets") == 0 && !(seen & 4)) {
			rc = offsets(p, &b, &e);
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
		return fail(p, "tensor lacks %s",
			    !(seen & 1)	  ? "dtype"
			    : !(seen & 2) ? "shape"
					  : "data_offsets");
	if (e > data_len)
		return fail(p, "data_offsets end %llu beyond the data (%llu)",
			    (unsigned long long)e,
			    (unsigned long long)data_len);
	t->offset = b;
	t->nbytes = e - b;
	t->elem_size = bfs_loader_dtype_size(t->dtype);
	if (t->elem_size) {
		uint64_t n = t->elem_size;
		for (uint32_t k = 0; k < t->ndim; k++) {
			uint64_t d = p->dims[p->dim_at[p->nt] + k];
			if (d && n > UINT64_MAX / d)
				return fail(p, "shape overflows 64 bits");
			n *= d;
		}
		if (n != t->nbytes)
			return fail(p,
				    "shape × %u bytes = %llu, data_offsets "
				    "span %llu",
				    t->elem_size, (unsigned long long)n,
				    (unsigned long long)t->nbytes);
	}
	return 0;
}

/* Room for one more tensor in p->t and its index arrays. */
static int reserve(struct parser *p)
{
	size_t c = p->capt ? 2 * p->capt : 8;
	void *q;

	if (p->nt < p->capt)
		return 0;
	if (!(q = realloc(p->t, c * sizeof(*p->t))))
		return -ENOMEM;
	p->t = q;
	if (!(q = realloc(p->dim_at, c * sizeof(size_t))))
		return -ENOMEM;
	p->dim_at = q;
	if (!(q = realloc(p->name_at, c * sizeof(size_t))))
		return -ENOMEM;
	p->name_at = q;
	p->capt = c;
	return 0;
}

/* One "key": value pair of the top-level object. */
static int member(struct parser *p, uint64_t data_len)
{
	char *name = p->strs + p->ns;
	size_t len, room;
	int rc;

	if (string(p, name, p->n + 1 - p->ns, &len) < 0 || expect(p, ':') < 0)
		return -EBADMSG;
	if (strcmp(name, "__metadata__") == 0)
		return metadata(p);
	if (reserve(p) < 0)
		return -ENOMEM;
	memset(&p->t[p->nt], 0, sizeof(p->t[0]));
	p->name_at[p->nt] = p->ns;
	p->dim_at[p->nt] = p->nd;
	rc = entry(p, &p->t[p->nt], data_len);
	if (rc == -EBADMSG) {
		room = p->msglen - strlen(p->msg);
		snprintf(p->msg + strlen(p->msg), room, " (tensor \"%.64s\")",
			 name);
	}
	if (rc < 0)
		return rc;
	p->ns += len + 1;
	p->nt++;
	return 0;
}

static int by_offset(const void *a, const void *b)
{
	const struct bfs_loader_tensor *x = a, *y = b;
	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Layout checks once all tensors are known: no overlap, unique names. */
static int check_layout(struct parser *p)
{
	const char **names;
	int rc = 0;

	qsort(p->t, p->nt, sizeof(*p->t), by_offset);
	for (size_t k = 1; k < p->nt && !rc; k++)
		if (p->t[k].offset < p->t[k - 1].offset + p->t[k - 1].nbytes)
			rc = fail(p, "tensors \"%.64s\" and \"%.64s\" overlap",
				  p->t[k - 1].name, p->t[k].name);
	if (rc || p->nt < 2)
		return rc;
	names = malloc(p->nt * sizeof(*names));
	if (!names)
		return -ENOMEM;
	for (size_t k = 0; k < p->nt; k++)
		names[k] = p->t[k].name;
	qsort(names, p->nt, sizeof(*names), by_name);
	for (size_t k = 1; k < p->nt && !rc; k++)
		if (strcmp(names[k], names[k - 1]) == 0)
			rc = fail(p, "duplicate tensor \"%.64s\"", names[k]);
	free(names);
	return rc;
}

static int top(struct parser *p, uint64_t data_len)
{
	int rc;

	if (expect(p, '{') < 0)
		return -EBADMSG;
	if (peek(p) != '}') {
		do {
			rc = member(p, data_len);
			if (rc < 0)
				return rc;
		} while (peek(p) == ',' && ++p->i);
	}
	if (expect(p, '}') < 0)
		return -EBADMSG;
	skip_ws(p);
	if (p->i != p->n)
		return fail(p, "trailing bytes after the header object");
	/* Pointers into the arrays only now that they stopped moving. */
	for (size_t k = 0; k < p->nt; k++) {
		p->t[k].name = p->strs + p->name_at[k];
		p->t[k].shape = p->t[k].ndim ? p->dims + p->dim_at[k] : NULL;
	}
	return check_layout(p);
}

int bfs_loader_meta_parse(const unsigned char *file, uint64_t size,
			  struct bfs_loader_meta **out, char *msg,
			  size_t msglen)
{
	struct parser p = {.msg = msg, .msglen = msglen};
	struct bfs_loader_meta *m = NULL;
	uint64_t hlen = 0;
	int rc;

	*out = NULL;
	msg[0] = 0;
	if (size < 8) {
		snprintf(msg, msglen, "file of %llu bytes has no header",
			 (unsigned long long)size);
		return -EBADMSG;
	}
	for (int k = 7; k >= 0; k--)
		hlen = hlen << 8 | file[k];
	if (hlen < 2 || hlen > MAX_HEADER || hlen > size - 8) {
		snprintf(msg, msglen,
			 "header offset 0: header length %llu invalid for a "
			 "file of %llu bytes",
			 (unsigned long long)hlen, (unsigned long long)size);
		return -EBADMSG;
	}
	p.s = (const char *)file + 8;
	p.n = (size_t)hlen;
	p.strs = malloc(p.n + 1);
	m = calloc(1, sizeof(*m));
	if (!p.strs || !m) {
		rc = -ENOMEM;
		goto out;
	}
	rc = top(&p, size - 8 - hlen);
	if (rc < 0)
		goto out;
	m->ntensors = (uint32_t)p.nt;
	m->data_start = 8 + hlen;
	m->file_size = size;
	m->tensors = p.t;
	m->dims = p.dims;
	m->strs = p.strs;
	for (size_t k = 0; k < p.nt; k++)
		m->tensors[k].offset += m->data_start;
	*out = m;
	m = NULL;
	p.t = NULL;
	p.dims = NULL;
	p.strs = NULL;
out:
	if (rc == -ENOMEM)
		snprintf(msg, msglen, "out of memory parsing the header");
	free(p.t);
	free(p.dims);
	free(p.strs);
	free(p.dim_at);
	free(p.name_at);
	free(m);
	return rc;
}

void bfs_loader_meta_free(struct bfs_loader_meta *m)
{
	if (!m)
		return;
	free(m->tensors);
	free(m->dims);
	free(m->strs);
	free(m);
}
