/* fs/npy: NumPy .npy headers (format versions 1-3; fs/README.md: sources).
 *
 * The header is a Python dict literal such as
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
 * We do not evaluate Python: a small scanner accepts exactly the three keys
 * numpy writes (any order, single or double quotes, optional trailing
 * comma, spaces) and nothing else. Every byte is untrusted: lengths are
 * checked against the buffer, integers against overflow.
 *
 * Checklist when fs/dtype.h gains a dtype with a numpy descr: nothing here
 * (descr lookup goes through bfs_dtype_from_numpy), but add it to the pack
 * round-trip test (tests/interop/test_pack_roundtrip.py). */
#include "fs/npy.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/size.h"

static const uint8_t magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

struct scan {
	const char *p, *end;
	const char *label;
	uint64_t base; /* file offset of p's start, for messages */
	const char *start;
	struct bfs_error *err;
};

#define BAD(s, ...)                                                            \
	bfs_error_set((s)->err, -EINVAL, (s)->label,                           \
		      (s)->base + (uint64_t)((s)->p - (s)->start),             \
		      __VA_ARGS__)

static void skip_ws(struct scan *s)
{
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\t'))
		s->p++;
}

static int expect(struct scan *s, char c)
{
	skip_ws(s);
	if (s->p >= s->end || *s->p != c)
		return BAD(s, "npy header: expected '%c'", c);
	s->p++;
	return 0;
}

/* A quoted string (no escapes: numpy's keys and descrs have none). */
static int quoted(struct scan *s, char *out, size_t cap)
{
	char q;
	size_t n = 0;

	skip_ws(s);
	if (s->p >= s->end || (*s->p != '\'' && *s->p != '"'))
		return BAD(s, "npy header: expected a quoted string");
	q = *s->p++;
	while (s->p < s->end && *s->p != q) {
		if (*s->p == '\\' || n + 1 >= cap)
			return BAD(s, "npy header: unsupported string");
		out[n++] = *s->p++;
	}
	if (s->p >= s->end)
		return BAD(s, "npy header: unterminated string");
	s->p++;
	out[n] = 0;
	return 0;
}

static int parse_descr(struct scan *s, struct bfs_npy *o)
{
	char d[32], le[32];
	const struct bfs_dtype_info *di;

	skip_ws(s);
	if (s->p < s->end && (*s->p == '[' || *s->p == '{'))
		return BAD(s, "npy: structured dtypes are not supported");
	if (quoted(s, d, sizeof(d)))
		return -EINVAL;
	if (d[0] == '|' &&
	    (d[1] == 'O' || d[1] == 'V' || d[1] == 'S' || d[1] == 'U'))
		return BAD(s,
			   "npy: dtype '%s' (object/void/string) is not a "
			   "tensor dtype",
			   d);
	/* Normalise the byte-order character to numpy's canonical one. */
	snprintf(le, sizeof(le), "%s", d);
	o->big_endian = d[0] == '>';
	if (d[0] == '>' || d[0] == '=' || d[0] == '<')
		le[0] = '<';
	o->dtype = bfs_dtype_from_numpy(le);
	if (o->dtype == BFS_DT_INVALID && (le[0] == '<' || le[0] == '|')) {
		le[0] = le[0] == '<' ? '|' : '<'; /* '<u1' / '|i2' spellings */
		o->dtype = bfs_dtype_from_numpy(le);
	}
	di = bfs_dtype_info(o->dtype);
	if (!di)
		return BAD(s, "npy: unsupported dtype '%s'", d);
	if (di->size == 1)
		o->big_endian = 0;
	return 0;
}

static int parse_fortran(struct scan *s, struct bfs_npy *o)
{
	skip_ws(s);
	if ((size_t)(s->end - s->p) >= 5 && !memcmp(s->p, "False", 5)) {
		s->p += 5;
		return 0;
	}
	if ((size_t)(s->end - s->p) >= 4 && !memcmp(s->p, "True", 4)) {
		s->p += 4;
		o->fortran = 1;
		return 0;
	}
	return BAD(s, "npy header: fortran_order must be True or False");
}

static int parse_shape(struct scan *s, struct bfs_npy *o)
{
	if (expect(s, '('))
		return -EINVAL;
	o->ndim = 0;
	for (;;) {
		skip_ws(s);
		if (s->p < s->end && *s->p == ')') {
			s->p++;
			return 0;
		}
		if (o->ndim >= BFS_MAX_DIMS)
			return BAD(s, "npy: more than %d dims", BFS_MAX_DIMS);
		int64_t v = 0;
		const char *d0 = s->p;
		while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
			if (__builtin_mul_overflow(v, 10, &v) ||
			    __builtin_add_overflow(v, *s->p - '0', &v))
				return BAD(s, "npy: dimension overflows");
			s->p++;
		}
		if (s->p == d0)
			return BAD(s, "npy header: expected a dimension");
		if (s->p < s->end && *s->p == 'L') /* Python 2 longs */
			s->p++;
		o->shape[o->ndim++] = v;
		skip_ws(s);
		if (s->p < s->end && *s->p == ',')
			s->p++;
		else if (s->p >= s->end || *s->p != ')')
			return BAD(s, "npy header: expected ',' or ')'");
	}
}

static int parse_dict(struct scan *s, struct bfs_npy *o)
{
	int seen = 0;
	char key[32];

	if (expect(s, '{'))
		return -EINVAL;
	for (;;) {
		skip_ws(s);
		if (s->p < s->end && *s->p == '}') {
			s->p++;
			break;
		}
		if (quoted(s, key, sizeof(key)) || expect(s, ':'))
			return -EINVAL;
		int rc, bit;
		if (!strcmp(key, "descr"))
			rc = parse_descr(s, o), bit = 1;
		else if (!strcmp(key, "fortran_order"))
			rc = parse_fortran(s, o), bit = 2;
		else if (!strcmp(key, "shape"))
			rc = parse_shape(s, o), bit = 4;
		else
			return BAD(s, "npy header: unknown key '%s'", key);
		if (rc)
			return rc;
		if (seen & bit)
			return BAD(s, "npy header: duplicate key '%s'", key);
		seen |= bit;
		skip_ws(s);
		if (s->p < s->end && *s->p == ',')
			s->p++;
	}
	if (seen != 7)
		return BAD(s, "npy header: needs 'descr', 'fortran_order' and "
			      "'shape'");
	return 0;
}

int bfs_npy_parse(const uint8_t *buf, size_t len, const char *label,
		  struct bfs_npy *out, struct bfs_error *err)
{
	uint64_t hlen, pre;
	struct scan s;
	uint64_t bytes;

	memset(out, 0, sizeof(*out));
	if (len < 10)
		return len >= 6 && memcmp(buf, magic, 6)
			   ? bfs_error_set(err, -EINVAL, label, 0,
					   "not a .npy file (bad magic)")
			   : -EAGAIN;
	if (memcmp(buf, magic, 6))
		return bfs_error_set(err, -EINVAL, label, 0,
				     "not a .npy file (bad magic)");
	if (buf[6] == 1) {
		hlen = buf[8] | (uint64_t)buf[9] << 8;
		pre = 10;
	} else if (buf[6] == 2 || buf[6] == 3) {
		if (len < 12)
			return -EAGAIN;
		hlen = buf[8] | (uint64_t)buf[9] << 8 |
		       (uint64_t)buf[10] << 16 | (uint64_t)buf[11] << 24;
		pre = 12;
	} else {
		return bfs_error_set(err, -EINVAL, label, 6,
				     "unsupported .npy version %u.%u", buf[6],
				     buf[7]);
	}
	if (hlen > BFS_NPY_MAX_HEADER)
		return bfs_error_set(err, -EINVAL, label, 8,
				     "npy header of %" PRIu64
				     " bytes exceeds the limit of %u bytes",
				     hlen, BFS_NPY_MAX_HEADER);
	out->data_off = pre + hlen;
	if (len < out->data_off)
		return -EAGAIN;
	s = (struct scan){(const char *)buf + pre,
			  (const char *)buf + pre + hlen,
			  label,
			  pre,
			  (const char *)buf + pre,
			  err};
	if (parse_dict(&s, out))
		return -EINVAL;
	while (s.p < s.end && (*s.p == ' ' || *s.p == '\n'))
		s.p++;
	if (s.p != s.end)
		return BAD(&s, "npy header: trailing bytes");
	if (bfs_size_prod(out->shape, out->ndim, &bytes) ||
	    bfs_size_mul(bytes, bfs_dtype_info(out->dtype)->size, &bytes))
		return bfs_error_set(err, -EINVAL, label, pre,
				     "npy: array of more than 2^63-1 bytes");
	out->data_bytes = bytes;
	return 0;
}

int bfs_npy_parse_exact(const uint8_t *p, uint64_t len, const char *label,
			struct bfs_npy *out, struct bfs_error *err)
{
	int rc = bfs_npy_parse(p, (size_t)len, label, out, err);

	if (rc == -EAGAIN)
		return bfs_error_set(err, -EINVAL, label, len,
				     "truncated .npy header");
	if (rc)
		return rc;
	if (len - out->data_off != out->data_bytes)
		return bfs_error_set(err, -EINVAL, label, out->data_off,
				     ".npy data holds %" PRIu64
				     " bytes, its shape needs %" PRIu64,
				     len - out->data_off, out->data_bytes);
	return 0;
}

int bfs_npy_read_header(int fd, const char *label, struct bfs_npy *out,
			struct bfs_error *err)
{
	size_t cap = 4096;
	uint8_t *buf = NULL;
	struct stat st;
	int rc;

	for (;;) {
		uint8_t *nb = realloc(buf, cap);
		if (!nb) {
			rc = -ENOMEM;
			goto out_free;
		}
		buf = nb;
		ssize_t got = pread(fd, buf, cap, 0);
		if (got < 0) {
			rc = bfs_error_set(err, -errno, label, 0, "read: %s",
					   strerror(errno));
			goto out_free;
		}
		rc = bfs_npy_parse(buf, (size_t)got, label, out, err);
		if (rc != -EAGAIN)
			break;
		if ((size_t)got < cap || out->data_off <= cap) {
			rc = bfs_error_set(err, -EINVAL, label, (uint64_t)got,
					   "truncated .npy header");
			goto out_free;
		}
		cap = out->data_off;
	}
	if (rc)
		goto out_free;
	if (fstat(fd, &st) ||
	    (uint64_t)st.st_size != out->data_off + out->data_bytes)
		rc = bfs_error_set(err, -EINVAL, label, BFS_NO_OFFSET,
				   "file holds %" PRId64 " bytes, header "
				   "says %" PRIu64 " + %" PRIu64,
				   (int64_t)st.st_size, out->data_off,
				   out->data_bytes);
out_free:
	free(buf);
	return rc;
}

void bfs_npy_byteswap(void *p, uint64_t bytes, size_t unit)
{
	uint8_t *b = p;

	if (unit < 2)
		return;
	for (uint64_t i = 0; i + unit <= bytes; i += unit)
		for (size_t a = 0, z = unit - 1; a < z; a++, z--) {
			uint8_t t = b[i + a];
			b[i + a] = b[i + z];
			b[i + z] = t;
		}
}
