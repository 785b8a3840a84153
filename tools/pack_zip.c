/* tools/pack_zip: the torch.save ZIP writer of `batchfs pack`, byte-
 * compatible with what torch.save itself writes (fs/README.md: torch.save
 * archives).
 *
 * Layout, as PyTorch's miniz writes it: records "<stem>/data.pkl",
 * "<stem>/data/<i>" (one per tensor, in order), "<stem>/byteorder" =
 * "little", "<stem>/version" = "3\n"; stored (method 0); every record's
 * data 64-byte aligned through the 'FB' extra field; local headers with
 * flags 0x0808 and zero crc/sizes, the real values in a data descriptor
 * after the data (16 B, or 24 B with 64-bit sizes when the size or the
 * header offset needs ZIP64) - that is what lets us stream inputs larger
 * than RAM in one pass and still write real CRC32s; a ZIP64 extra in the
 * local header exactly where torch puts one; central directory with
 * APPNOTE ZIP64 extras; ZIP64 end record + locator always, then the
 * classic end record.
 *
 * Why not libzip: libzip decides each entry's local header position and
 * extra fields itself at zip_close() (and adds its own), so it cannot
 * produce torch's 64-byte data alignment; and it would buffer or re-read
 * the data to compute sizes/CRCs. The format is small; we write it directly
 * with checked arithmetic. libzip is used to read our output back in the
 * tests (inspect --verify).
 *
 * data.pkl is protocol 2, the subset torch.load(weights_only=True) accepts:
 * a dict of _rebuild_tensor_v2(storage pid, 0, size, stride, False,
 * OrderedDict()) in order.
 *
 * The output is written to "OUT.partial" and renamed over OUT on success;
 * on failure it is removed. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/pack.h"

#define CHUNK	(1u << 20)
#define ALIGN	64
#define U32_MAX 0xFFFFFFFFu

/* A written record, for the central directory. */
struct rec {
	char *name;
	uint64_t lho, size;
	uint32_t crc;
	uint16_t flags;
};

struct pack_out {
	FILE *f;
	char *path, *tmp, *stem;
	uint64_t pos;
	struct rec *recs;
	size_t n;
	struct rec *cur; /* the record being written */
	uint64_t cur_at; /* where its data started */
	int failed;	 /* errno of the first failure */
};

/* ---- CRC-32 (IEEE, reflected), slicing-by-8 ------------------------------ */

static uint32_t crc_tab[8][256];

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
		crc_tab[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			crc_tab[t][i] = crc_tab[0][crc_tab[t - 1][i] & 0xFF] ^
					(crc_tab[t - 1][i] >> 8);
}

static uint32_t crc_update(uint32_t crc, const uint8_t *p, size_t n)
{
	crc = ~crc;
	while (n >= 8) {
		uint32_t a =
		    crc ^ (p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
			   (uint32_t)p[3] << 24);
		crc = crc_tab[7][a & 0xFF] ^ crc_tab[6][(a >> 8) & 0xFF] ^
		      crc_tab[5][(a >> 16) & 0xFF] ^ crc_tab[4][a >> 24] ^
		      crc_tab[3][p[4]] ^ crc_tab[2][p[5]] ^ crc_tab[1][p[6]] ^
		      crc_tab[0][p[7]];
		p += 8;
		n -= 8;
	}
	while (n--)
		crc = crc_tab[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
	return ~crc;
}

/* ---- output primitives ----------------------------------------------------
 */

static void out_bytes(struct pack_out *o, const void *p, size_t n)
{
	if (n && fwrite(p, 1, n, o->f) != n)
		o->failed = errno ? errno : EIO;
	o->pos += n;
}

/* 'bytes' <= 8 little-endian bytes of 'v' (use out_zeros for more). */
static void out_le(struct pack_out *o, uint64_t v, int bytes)
{
	uint8_t b[8];

	for (int i = 0; i < bytes; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	out_bytes(o, b, (size_t)bytes);
}

static void out_zeros(struct pack_out *o, size_t n)
{
	static const uint8_t z[32];

	out_bytes(o, z, n);
}

/* Local header for record 'name' of 'size' bytes at the current position;
 * returns the record (crc filled in later). */
static struct rec *begin_record(struct pack_out *o, const char *name,
				uint64_t size)
{
	struct rec *r = realloc(o->recs, (o->n + 1) * sizeof(*r));
	size_t nl = strlen(name);
	int big_size = size >= U32_MAX, big_off = o->pos >= U32_MAX;
	uint64_t start;
	unsigned z64 = 0, pad;
	static const char zs[ALIGN] = {[0 ... ALIGN - 1] = 'Z'};

	if (!r) {
		o->failed = ENOMEM;
		return NULL;
	}
	o->recs = r;
	r = &o->recs[o->n++];
	memset(r, 0, sizeof(*r));
	r->name = strdup(name);
	if (!r->name)
		o->failed = ENOMEM;
	r->lho = o->pos;
	r->size = size;
	r->flags = size ? 0x0808 : 0x0800;
	if (big_size || big_off)
		z64 = 4 + (big_size ? 16 : 0) + (big_off ? 8 : 0);
	start = o->pos + 30 + nl + z64 + 4;
	pad = (unsigned)((ALIGN - start % ALIGN) % ALIGN);
	out_le(o, 0x04034b50, 4);
	out_le(o, 0, 2); /* version needed: 0, as torch */
	out_le(o, r->flags, 2);
	out_le(o, 0, 2 + 2 + 2); /* method, time, date */
	out_zeros(o, 4 + 4 + 4); /* crc, sizes: in the descriptor */
	out_le(o, nl, 2);
	out_le(o, z64 + 4 + pad, 2);
	out_bytes(o, name, nl);
	if (z64) {
		out_le(o, 0x0001, 2);
		out_le(o, z64 - 4, 2);
		if (big_size) {
			out_le(o, size, 8);
			out_le(o, size, 8);
		}
		if (big_off) /* torch's non-standard LFH offset field */
			out_le(o, r->lho, 8);
	}
	out_le(o, 0x4246, 2); /* 'FB' */
	out_le(o, pad, 2);
	out_bytes(o, zs, pad);
	return r;
}

static void end_record(struct pack_out *o, struct rec *r)
{
	if (!r || !r->size)
		return; /* 0-byte records have no descriptor (flags 0x0800) */
	out_le(o, 0x08074b50, 4);
	out_le(o, r->crc, 4);
	if (r->size >= U32_MAX || r->lho >= U32_MAX) {
		out_le(o, r->size, 8);
		out_le(o, r->size, 8);
	} else {
		out_le(o, r->size, 4);
		out_le(o, r->size, 4);
	}
}

static void small_record(struct pack_out *o, const char *name, const void *data,
			 size_t n)
{
	struct rec *r = begin_record(o, name, n);

	if (!r)
		return;
	r->crc = crc_update(0, data, n);
	out_bytes(o, data, n);
	end_record(o, r);
}

static void central_directory(struct pack_out *o)
{
	uint64_t cd = o->pos, eocd64;

	for (size_t i = 0; i < o->n; i++) {
		const struct rec *r = &o->recs[i];
		int bs = r->size >= U32_MAX, bo = r->lho >= U32_MAX;
		size_t nl = strlen(r->name);
		unsigned x = (bs || bo) ? 4 + (bs ? 16 : 0) + (bo ? 8 : 0) : 0;
		out_le(o, 0x02014b50, 4);
		out_le(o, 0, 2 + 2); /* made by, needed: 0, as torch */
		out_le(o, r->flags, 2);
		out_le(o, 0, 2 + 2 + 2);
		out_le(o, r->crc, 4);
		out_le(o, bs ? U32_MAX : r->size, 4);
		out_le(o, bs ? U32_MAX : r->size, 4);
		out_le(o, nl, 2);
		out_le(o, x, 2);
		out_zeros(o, 2 + 2 + 2 + 4); /* comment, disk, attrs */
		out_le(o, bo ? U32_MAX : r->lho, 4);
		out_bytes(o, r->name, nl);
		if (x) {
			out_le(o, 0x0001, 2);
			out_le(o, x - 4, 2);
			if (bs) {
				out_le(o, r->size, 8);
				out_le(o, r->size, 8);
			}
			if (bo)
				out_le(o, r->lho, 8);
		}
	}
	eocd64 = o->pos;
	out_le(o, 0x06064b50, 4);
	out_le(o, 44, 8);
	out_le(o, 0x031E, 2);
	out_le(o, 45, 2);
	out_le(o, 0, 4 + 4);
	out_le(o, o->n, 8);
	out_le(o, o->n, 8);
	out_le(o, eocd64 - cd, 8);
	out_le(o, cd, 8);
	out_le(o, 0x07064b50, 4);
	out_le(o, 0, 4);
	out_le(o, eocd64, 8);
	out_le(o, 1, 4);
	out_le(o, 0x06054b50, 4);
	out_le(o, 0, 2 + 2);
	out_le(o, o->n < 0xFFFF ? o->n : 0xFFFF, 2);
	out_le(o, o->n < 0xFFFF ? o->n : 0xFFFF, 2);
	out_le(o, eocd64 - cd < U32_MAX ? eocd64 - cd : U32_MAX, 4);
	out_le(o, cd < U32_MAX ? cd : U32_MAX, 4);
	out_le(o, 0, 2);
}

/* ---- data.pkl ---------------------------------------------------------- */

struct pk {
	uint8_t *p;
	size_t n, cap;
};

static int pk_put(struct pk *b, const void *s, size_t n)
{
	if (b->n + n > b->cap) {
		size_t c = (b->n + n) * 2 + 256;
		uint8_t *q = realloc(b->p, c);
		if (!q)
			return -ENOMEM;
		b->p = q;
		b->cap = c;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	return 0;
}

static int pk_str(struct pk *b, const char *s)
{
	return pk_put(b, s, strlen(s));
}

static int pk_unicode(struct pk *b, const char *s)
{
	uint32_t n = (uint32_t)strlen(s);
	uint8_t h[5] = {'X', (uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16),
			(uint8_t)(n >> 24)};

	return pk_put(b, h, 5) || pk_put(b, s, n);
}

/* BININT for 0..2^31-1, LONG1 (8 bytes, two's complement) otherwise. */
static int pk_int(struct pk *b, int64_t v)
{
	uint8_t h[10];

	if (v >= 0 && v <= INT32_MAX) {
		h[0] = 'J';
		for (int i = 0; i < 4; i++)
			h[1 + i] = (uint8_t)((uint64_t)v >> (8 * i));
		return pk_put(b, h, 5);
	}
	h[0] = 0x8a;
	h[1] = 8;
	for (int i = 0; i < 8; i++)
		h[2 + i] = (uint8_t)((uint64_t)v >> (8 * i));
	return pk_put(b, h, 10);
}

static int pk_tensor(struct pk *b, const struct pack_tensor *t, size_t key)
{
	const struct bfs_dtype_info *di = bfs_dtype_info(t->dtype);
	int64_t numel = 1, stride[BFS_MAX_DIMS];
	char k[24];
	int rc = 0;

	for (int d = t->ndim - 1; d >= 0; d--) {
		stride[d] = numel;
		numel *= t->shape[d];
	}
	snprintf(k, sizeof(k), "%zu", key);
	rc |= pk_str(b, "ctorch._utils\n_rebuild_tensor_v2\n((");
	rc |= pk_unicode(b, "storage");
	rc |=
	    pk_str(b, "ctorch\n") || pk_str(b, di->storage) || pk_str(b, "\n");
	rc |= pk_unicode(b, k) || pk_unicode(b, "cpu") || pk_int(b, numel);
	rc |= pk_str(b, "tQ") || pk_int(b, 0) || pk_str(b, "(");
	for (int d = 0; d < t->ndim; d++)
		rc |= pk_int(b, t->shape[d]);
	rc |= pk_str(b, "t(");
	for (int d = 0; d < t->ndim; d++)
		rc |= pk_int(b, stride[d]);
	rc |= pk_str(b, "t\x89"
			"ccollections\nOrderedDict\n)RtR");
	return rc ? -ENOMEM : 0;
}

static int build_pickle(struct pk *b, const struct pack_tensor *t, size_t n)
{
	int rc = pk_str(b, "\x80\x02}(");

	for (size_t i = 0; !rc && i < n; i++)
		rc = pk_unicode(b, t[i].name) || pk_tensor(b, &t[i], i);
	return rc || pk_str(b, "u.") ? -ENOMEM : 0;
}

/* ---- archives ------------------------------------------------------------ */

/* torch's record prefix: the file's basename without its extension. */
static char *stem_of(const char *path)
{
	const char *b = strrchr(path, '/');
	char *s = strdup(b ? b + 1 : path), *dot;

	if (s && (dot = strrchr(s, '.')) && dot != s)
		*dot = 0;
	if (s && !*s) {
		free(s);
		s = strdup("archive");
	}
	return s;
}

static void out_free(struct pack_out *o)
{
	for (size_t i = 0; i < o->n; i++)
		free(o->recs[i].name);
	free(o->recs);
	free(o->path);
	free(o->tmp);
	free(o->stem);
	free(o);
}

/* "<stem>/<rel>" into buf. */
static const char *rec_name(const struct pack_out *o, char *buf, size_t len,
			    const char *rel)
{
	snprintf(buf, len, "%s/%s", o->stem, rel);
	return buf;
}

struct pack_out *pack_out_open(const char *path, const struct pack_tensor *t,
			       size_t n)
{
	struct pack_out *o = calloc(1, sizeof(*o));
	struct pk pk = {0};
	char name[4200];

	crc_init();
	if (!o || !(o->path = strdup(path)) ||
	    asprintf(&o->tmp, "%s.partial", path) < 0 ||
	    !(o->stem = stem_of(path)) || build_pickle(&pk, t, n)) {
		fprintf(stderr, "batchfs pack: out of memory\n");
		goto err_free;
	}
	o->f = fopen(o->tmp, "wb");
	if (!o->f) {
		fprintf(stderr, "batchfs pack: %s: %s\n", o->tmp,
			strerror(errno));
		goto err_free;
	}
	setvbuf(o->f, NULL, _IOFBF, CHUNK);
	small_record(o, rec_name(o, name, sizeof(name), "data.pkl"), pk.p,
		     pk.n);
	free(pk.p);
	return o;
err_free:
	free(pk.p);
	if (o)
		out_free(o);
	return NULL;
}

void pack_out_begin(struct pack_out *o, size_t i, uint64_t size)
{
	char rel[40], name[4200];

	snprintf(rel, sizeof(rel), "data/%zu", i);
	o->cur = begin_record(o, rec_name(o, name, sizeof(name), rel), size);
	o->cur_at = o->pos;
}

void pack_out_write(struct pack_out *o, const void *p, size_t n)
{
	if (!o->cur)
		return;
	o->cur->crc = crc_update(o->cur->crc, p, n);
	out_bytes(o, p, n);
}

void pack_out_end(struct pack_out *o)
{
	/* An input that changed between sizing and copying: the record
	 * would not hold what its headers say. */
	if (o->cur && o->pos - o->cur_at != o->cur->size && !o->failed) {
		fprintf(stderr,
			"batchfs pack: record %s: %" PRIu64 " bytes written, "
			"%" PRIu64 " announced (an input changed under us?)\n",
			o->cur->name, o->pos - o->cur_at, o->cur->size);
		o->failed = EIO;
	}
	end_record(o, o->cur);
	o->cur = NULL;
}

int pack_out_close(struct pack_out *o, bool discard)
{
	char name[4200];
	int rc = 1;

	if (!discard && !o->failed) {
		small_record(o, rec_name(o, name, sizeof(name), "byteorder"),
			     "little", 6);
		small_record(o, rec_name(o, name, sizeof(name), "version"),
			     "3\n", 2);
		central_directory(o);
	}
	if (fclose(o->f) && !o->failed)
		o->failed = errno;
	if (o->failed)
		fprintf(stderr, "batchfs pack: %s: %s\n", o->tmp,
			strerror(o->failed));
	else if (!discard && rename(o->tmp, o->path))
		fprintf(stderr, "batchfs pack: rename to %s: %s\n", o->path,
			strerror(errno));
	else if (!discard)
		rc = 0;
	if (rc)
		unlink(o->tmp);
	out_free(o);
	return discard ? 0 : rc;
}
