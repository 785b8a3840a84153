/* fs/pickle_json: the metadata of a pickle as JSON (fs/README.md:
 * metadata), for fs/pickle_result.c: plain values as Python's json.dumps
 * writes them, floats as repr, numpy scalars and 0-dim tensors as their
 * value, what JSON has no word for as {"__type__": T}.
 *
 * Invariants: the output is one JSON value or nothing (the caller gets
 * -ENOSPC when it does not fit in its buffer, and writes the value as
 * omitted); strings are escaped ('"', '\\', control bytes; the VM only
 * makes valid UTF-8); names of globals are sanitized
 * (bfs_pickle_global_name) before they are written; no recursion (an
 * explicit stack of at most BFS_PICKLE_MAX_NEST + 1 containers). A numpy
 * scalar's value is read from its dtype's descr and its bytes' latin-1
 * text, nothing else. No state. */
#include "fs/pickle_vm.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* JSON text into a bounded buffer: 'full' once something did not fit. */
struct jout {
	char *b;
	size_t len, cap;
	bool full;
};

static void jraw(struct jout *o, const char *s, size_t n)
{
	if (o->full || n > o->cap - o->len) {
		o->full = true;
		return;
	}
	memcpy(o->b + o->len, s, n);
	o->len += n;
}

static void jputs(struct jout *o, const char *s)
{
	jraw(o, s, strlen(s));
}

/* s[0..n) as a JSON string: '"', '\\' and control bytes escaped (the
 * pickle's strings are valid UTF-8, which JSON carries as it is). */
static void jstr(struct jout *o, const char *s, size_t n)
{
	size_t run = 0;

	jraw(o, "\"", 1);
	for (size_t i = 0; i < n && !o->full; i++) {
		unsigned char c = (unsigned char)s[i];
		char esc[8];

		if (c != '"' && c != '\\' && c >= 0x20 && c != 0x7f)
			continue;
		jraw(o, s + run, i - run);
		run = i + 1;
		if (c == '"' || c == '\\')
			snprintf(esc, sizeof(esc), "\\%c", c);
		else
			snprintf(esc, sizeof(esc), "\\u%04x", c);
		jputs(o, esc);
	}
	jraw(o, s + run, n - run);
	jraw(o, "\"", 1);
}

void bfs_pickle_json_float(double f, char *buf, size_t len)
{
	char b[48];

	if (!isfinite(f)) {
		snprintf(buf, len,
			 "{\"__type__\": \"float\", \"__value__\": "
			 "\"%s\"}",
			 isnan(f) ? "nan"
			 : f > 0  ? "inf"
				  : "-inf");
		return;
	}
	for (int p = 1; p <= 17; p++) {
		snprintf(b, sizeof(b), "%.*g", p, f);
		if (strtod(b, NULL) == f)
			break;
	}
	snprintf(buf, len, "%s%s", b, strpbrk(b, ".e") ? "" : ".0");
}

/* IEEE half and bfloat16 bits as a double. */
static double half(uint16_t h)
{
	int e = (h >> 10) & 0x1f;
	double m = h & 0x3ff, v;

	if (e == 31)
		v = m ? NAN : INFINITY;
	else
		v = e ? ldexp(m + 1024, e - 25) : ldexp(m, -24);
	return h & 0x8000 ? -v : v;
}

static double bfloat16(uint16_t h)
{
	uint32_t b = (uint32_t)h << 16;
	float f;

	memcpy(&f, &b, sizeof(f));
	return f;
}

int bfs_pickle_json_scalar(enum bfs_dtype dt, const uint8_t *b, char *buf,
			   size_t len)
{
	const struct bfs_dtype_info *di = bfs_dtype_info(dt);
	uint64_t u = 0;
	int64_t i;
	float f;
	double d;

	if (!di || di->size > 8)
		return -1;
	for (size_t k = di->size; k-- > 0;)
		u = u << 8 | b[k];
	i = di->size < 8 && u >> (8 * di->size - 1)
		? (int64_t)(u | ~0ull << 8 * di->size)
		: (int64_t)u;
	switch (dt) {
	case BFS_DT_BOOL:
		snprintf(buf, len, "%s", u ? "true" : "false");
		return 0;
	case BFS_DT_UINT8:
	case BFS_DT_UINT16:
	case BFS_DT_UINT32:
	case BFS_DT_UINT64:
		snprintf(buf, len, "%llu", (unsigned long long)u);
		return 0;
	case BFS_DT_INT8:
	case BFS_DT_INT16:
	case BFS_DT_INT32:
	case BFS_DT_INT64:
		snprintf(buf, len, "%lld", (long long)i);
		return 0;
	case BFS_DT_FLOAT16:
	case BFS_DT_BFLOAT16:
		bfs_pickle_json_float(dt == BFS_DT_FLOAT16
					  ? half((uint16_t)u)
					  : bfloat16((uint16_t)u),
				      buf, len);
		return 0;
	case BFS_DT_FLOAT32:
		memcpy(&f, &u, sizeof(f));
		bfs_pickle_json_float(f, buf, len);
		return 0;
	case BFS_DT_FLOAT64:
		memcpy(&d, &u, sizeof(d));
		bfs_pickle_json_float(d, buf, len);
		return 0;
	default:
		return -1;
	}
}

/* The value of numpy scalar cell o as JSON into buf (48 bytes): from its
 * dtype's descr and byte order and its bytes' latin-1 text (each code
 * point one byte). 0, or -1 when it cannot be read so (a dtype JSON has no
 * number for, bytes of another length). */
static int np_scalar(const struct opaque_obj *o, char *buf, size_t len)
{
	const struct opaque_obj *dt = o->dtype, *d = o->data;
	enum bfs_dtype t = BFS_DT_INVALID;
	uint8_t b[8];
	size_t n = 0;
	char descr[8];

	if (!dt || !d || !dt->str || !d->str || dt->str->len > 4)
		return -1;
	snprintf(descr, sizeof(descr), "<%s", dt->str->s);
	t = bfs_dtype_from_numpy(descr);
	descr[0] = '|';
	if (!t)
		t = bfs_dtype_from_numpy(descr);
	for (size_t i = 0; t && i < d->str->len && n <= sizeof(b); n++) {
		unsigned char c = (unsigned char)d->str->s[i];

		if (c < 0x80) /* U+0000 .. U+00FF: 1 or 2 UTF-8 bytes */
			b[n % sizeof(b)] = c, i++;
		else if ((c & 0xFE) == 0xC2 && i + 1 < d->str->len)
			b[n % sizeof(b)] =
			    (uint8_t)((c & 3) << 6 | (d->str->s[i + 1] & 0x3F)),
			      i += 2;
		else
			return -1;
	}
	if (!t || n != bfs_dtype_info(t)->size)
		return -1;
	for (size_t i = 0; dt->order == '>' && i < n / 2; i++) {
		uint8_t c = b[i];

		b[i] = b[n - 1 - i];
		b[n - 1 - i] = c;
	}
	return bfs_pickle_json_scalar(t, b, buf, len);
}

/* A float as bfs_pickle_json_float writes it; quoted as a dict key (nan
 * and infinities as "nan", "inf", "-inf"). */
static void jfloat(struct jout *o, double f, bool key)
{
	char b[64];

	if (key && !isfinite(f))
		snprintf(b, sizeof(b), "%s",
			 isnan(f) ? "nan"
			 : f > 0  ? "inf"
				  : "-inf");
	else
		bfs_pickle_json_float(f, b, sizeof(b));
	if (key)
		jstr(o, b, strlen(b));
	else
		jputs(o, b);
}

const char *bfs_pickle_type_name(struct val v, char *buf, size_t len)
{
	static const char *const opaque[] = {
	    [O_NP_ARRAY] = "numpy.ndarray",
	    [O_NP_SCALAR] = "numpy.generic",
	    [O_NP_DTYPE] = "numpy.dtype",
	    [O_NP_OTHER] = "numpy.ndarray",
	    [O_BYTES] = "bytes",
	    [O_SET] = "set",
	    [O_FROZENSET] = "frozenset",
	    [O_GLOBAL] = "global",
	    [O_OBJECT] = "object",
	    [O_POISON] = "torch.Tensor",
	};
	static const char *const kinds[] = {
	    [V_STR] = "str",
	    [V_TUPLE] = "tuple",
	    [V_LIST] = "list",
	    [V_DICT] = "dict",
	    [V_STORAGE] = "torch.storage",
	    [V_TENSOR] = "torch.Tensor",
	    [V_GLOBAL] = "global",
	};
	const struct opaque_obj *o = (const struct opaque_obj *)v.u.o;

	if (v.kind == V_OPAQUE && o->what == O_OBJECT && o->global)
		return bfs_pickle_global_name(o->global, '.', buf, len);
	if (v.kind == V_OPAQUE)
		return opaque[o->what];
	return v.kind < (int)(sizeof(kinds) / sizeof(*kinds)) && kinds[v.kind]
		   ? kinds[v.kind]
		   : "object";
}

/* A value that holds no other: JSON, or {"__type__": T} for what JSON has
 * no word for (a global: {"__type__": "global", "name": "os.system"}). */
static void jscalar(struct jout *o, struct val v)
{
	char buf[2 * MAX_GLOBAL_LINE + 2];
	const struct opaque_obj *g = bfs_pickle_foreign(v);
	const struct str_obj *s = as_str(v);

	switch (v.kind) {
	case V_NONE:
		jputs(o, "null");
		return;
	case V_BOOL:
		jputs(o, v.u.i ? "true" : "false");
		return;
	case V_INT:
		snprintf(buf, sizeof(buf), "%lld", (long long)v.u.i);
		jputs(o, buf);
		return;
	case V_FLOAT:
		jfloat(o, v.u.f, false);
		return;
	case V_STR:
		jstr(o, s->s, s->len);
		return;
	case V_OPAQUE:
		if (((const struct opaque_obj *)v.u.o)->what == O_NP_SCALAR &&
		    !np_scalar((const struct opaque_obj *)v.u.o, buf,
			       sizeof(buf))) {
			jputs(o, buf);
			return;
		}
	}
	jputs(o, "{\"__type__\": ");
	jputs(o, "\"");
	jputs(o, bfs_pickle_type_name(v, buf, sizeof(buf)));
	jputs(o, "\"");
	if (v.kind == V_GLOBAL || (g && g == (const void *)v.u.o)) {
		jputs(o, ", \"name\": \"");
		jputs(o,
		      v.kind == V_GLOBAL
			  ? bfs_pickle_allowed_name(v, buf, sizeof(buf))
			  : bfs_pickle_global_name(g, '.', buf, sizeof(buf)));
		jputs(o, "\"");
	}
	jputs(o, "}");
}

/* A dict key as Python's json.dumps writes it (str, and int, float, bool
 * and None as strings); false for any other key. */
static bool jkey(struct jout *o, struct val k)
{
	char buf[32];
	const struct str_obj *s = as_str(k);

	switch (k.kind) {
	case V_STR:
		jstr(o, s->s, s->len);
		return true;
	case V_INT:
		snprintf(buf, sizeof(buf), "\"%lld\"", (long long)k.u.i);
		jputs(o, buf);
		return true;
	case V_FLOAT:
		jfloat(o, k.u.f, true);
		return true;
	case V_BOOL:
		jputs(o, k.u.i ? "\"true\"" : "\"false\"");
		return true;
	case V_NONE:
		jputs(o, "\"null\"");
		return true;
	}
	return false;
}

/* v as JSON into o: lists and tuples as arrays, dicts as objects, depth
 * first with an explicit stack. 0, -EINVAL when a dict key has no JSON
 * form, -ELOOP when v nests deeper than BFS_PICKLE_MAX_NEST (o->full: it
 * does not fit). */
static int jvalue(struct jout *o, struct val v)
{
	struct {
		const struct seq_obj *s;
		size_t i, n;
		bool dict;
	} st[BFS_PICKLE_MAX_NEST + 1];
	int depth = 0;

	for (;;) {
		if (!is_container(v))
			jscalar(o, v);
		else if (depth > BFS_PICKLE_MAX_NEST)
			return -ELOOP;
		else {
			st[depth].s = (const struct seq_obj *)v.u.o;
			st[depth].dict = v.kind == V_DICT;
			st[depth].n = st[depth].s->n / (st[depth].dict ? 2 : 1);
			st[depth++].i = 0;
			jputs(o, v.kind == V_DICT ? "{" : "[");
		}
		for (;;) {
			if (!depth || o->full)
				return 0;
			if (st[depth - 1].i < st[depth - 1].n)
				break;
			jputs(o, st[depth - 1].dict ? "}" : "]");
			depth--;
		}
		if (st[depth - 1].i)
			jputs(o, ", ");
		if (st[depth - 1].dict) {
			size_t i = st[depth - 1].i++;

			if (!jkey(o, st[depth - 1].s->v[2 * i]))
				return -EINVAL;
			jputs(o, ": ");
			v = st[depth - 1].s->v[2 * i + 1];
		} else
			v = st[depth - 1].s->v[st[depth - 1].i++];
	}
}

int bfs_pickle_json(struct val v, char *buf, size_t cap, size_t *len)
{
	struct jout o = {.b = buf, .cap = cap};
	int rc = jvalue(&o, v);

	*len = o.len;
	return rc ? rc : o.full ? -ENOSPC : 0;
}
