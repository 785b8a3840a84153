/* tests/lib/archive: see archive.h. Integers are pickled as BININT when
 * they fit 32 bits and as 8-byte LONG1 otherwise (what Python does), so
 * sizes, strides and offsets up to 2^63 - 1 round-trip. */
#include "tests/lib/archive.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct buf {
	uint8_t *p;
	size_t n, cap;
};

static void put(struct buf *b, const void *src, size_t n)
{
	if (b->n + n > b->cap) {
		b->cap = (b->n + n) * 2 + 64;
		b->p = realloc(b->p, b->cap);
		if (!b->p)
			abort();
	}
	memcpy(b->p + b->n, src, n);
	b->n += n;
}

static void put_u8(struct buf *b, uint8_t v)
{
	put(b, &v, 1);
}

/* 'bytes' little-endian bytes of v (zeros past its 8). */
static void put_le(struct buf *b, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		put_u8(b, i < 8 ? (uint8_t)(v >> (8 * i)) : 0);
}

static void put_str(struct buf *b, const char *s)
{
	put(b, s, strlen(s));
}

static void pk_unicode(struct buf *b, const char *s)
{
	put_u8(b, 'X');
	put_le(b, strlen(s), 4);
	put_str(b, s);
}

static void pk_int(struct buf *b, int64_t v)
{
	if (v >= INT32_MIN && v <= INT32_MAX) {
		put_u8(b, 'J');
		put_le(b, (uint64_t)v, 4);
		return;
	}
	put_u8(b, 0x8a); /* LONG1, 8 bytes two's complement */
	put_u8(b, 8);
	put_le(b, (uint64_t)v, 8);
}

static void pk_tensor(struct buf *b, const struct ta_tensor *t)
{
	put_str(b, "ctorch._utils\n_rebuild_tensor_v2\n(");
	put_str(b, "(");
	pk_unicode(b, "storage");
	put_str(b, "ctorch\n");
	put_str(b, bfs_dtype_info(t->dtype)->storage);
	put_str(b, "\n");
	pk_unicode(b, t->key);
	pk_unicode(b, "cpu");
	pk_int(b, t->numel);
	put_str(b, "tQ");
	pk_int(b, t->offset);
	put_str(b, "(");
	for (int d = 0; d < t->ndim; d++)
		pk_int(b, t->size[d]);
	put_str(b, "t(");
	for (int d = 0; d < t->ndim; d++)
		pk_int(b, t->stride[d]);
	put_str(b, "t\x89"
		   "ccollections\nOrderedDict\n)RtR");
}

static void pk_dict(struct buf *b, const struct ta_tensor *ts, size_t n)
{
	put_str(b, "\x80\x02}(");
	for (size_t i = 0; i < n; i++) {
		pk_unicode(b, ts[i].name);
		pk_tensor(b, &ts[i]);
	}
	put_str(b, "u.");
}

struct rec {
	char *name;
	const void *data;
	size_t size;
};

static void zip(struct buf *b, const struct rec *r, size_t n)
{
	struct buf cd = {0};
	uint64_t cd_off;

	for (size_t i = 0; i < n; i++) {
		uint64_t lho = b->n;
		size_t nl = strlen(r[i].name);

		put_le(b, 0x04034b50, 4);
		put_le(b, 0, 10); /* version, flags, method, time, date */
		put_le(b, 0, 4);  /* crc: not computed */
		put_le(b, r[i].size, 4);
		put_le(b, r[i].size, 4);
		put_le(b, nl, 2);
		put_le(b, 0, 2);
		put_str(b, r[i].name);
		put(b, r[i].data, r[i].size);
		put_le(&cd, 0x02014b50, 4);
		put_le(&cd, 0, 12);
		put_le(&cd, 0, 4);
		put_le(&cd, r[i].size, 4);
		put_le(&cd, r[i].size, 4);
		put_le(&cd, nl, 2);
		put_le(&cd, 0, 8);
		put_le(&cd, 0, 4);
		put_le(&cd, lho, 4);
		put_str(&cd, r[i].name);
	}
	cd_off = b->n;
	put(b, cd.p, cd.n);
	put_le(b, 0x06054b50, 4);
	put_le(b, 0, 4);
	put_le(b, n, 2);
	put_le(b, n, 2);
	put_le(b, cd.n, 4);
	put_le(b, cd_off, 4);
	put_le(b, 0, 2);
	free(cd.p);
}

static void add(struct rec *r, size_t *n, const char *name, const void *data,
		size_t size)
{
	if (asprintf(&r[*n].name, "arc/%s", name) < 0)
		abort();
	r[*n].data = data;
	r[(*n)++].size = size;
}

size_t ta_build(uint8_t **out, const struct ta_tensor *ts, size_t nt,
		const struct ta_storage *st, size_t ns, const char *version,
		const char *byteorder, const char *extra)
{
	struct rec *r = calloc(ns + 4, sizeof(*r));
	struct buf pk = {0}, b = {0};
	size_t n = 0;

	if (!r)
		abort();
	pk_dict(&pk, ts, nt);
	add(r, &n, "data.pkl", pk.p, pk.n);
	for (size_t i = 0; i < ns; i++) {
		char name[300];

		snprintf(name, sizeof(name), "data/%s", st[i].key);
		add(r, &n, name, st[i].data, st[i].size);
	}
	if (version)
		add(r, &n, "version", version, strlen(version));
	if (byteorder)
		add(r, &n, "byteorder", byteorder, strlen(byteorder));
	if (extra)
		add(r, &n, extra, "x", 1);
	zip(&b, r, n);
	for (size_t i = 0; i < n; i++)
		free(r[i].name);
	free(r);
	free(pk.p);
	*out = b.p;
	return b.n;
}

int ta_write(const char *path, const uint8_t *b, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	int rc = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, b, n) != (ssize_t)n)
		rc = -EIO;
	if (close(fd) < 0 && !rc)
		rc = -errno;
	return rc;
}

static void *flipper(void *arg)
{
	struct ta_flip *fl = arg;

	while (!__atomic_load_n(&fl->stop, __ATOMIC_RELAXED))
		if (truncate(fl->path, 4096) || truncate(fl->path, fl->size))
			break;
	return NULL;
}

void ta_flip_start(struct ta_flip *fl, const char *path)
{
	struct stat st;

	if (stat(path, &st))
		abort();
	fl->path = path;
	fl->size = st.st_size;
	__atomic_store_n(&fl->stop, 0, __ATOMIC_RELAXED);
	if (pthread_create(&fl->thread, NULL, flipper, fl))
		abort();
}

void ta_flip_stop(struct ta_flip *fl)
{
	__atomic_store_n(&fl->stop, 1, __ATOMIC_RELAXED);
	pthread_join(fl->thread, NULL);
	if (truncate(fl->path, fl->size))
		abort();
}
