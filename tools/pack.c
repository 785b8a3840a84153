/* batchfs pack: write a torch.save archive from .npy files (or a synthetic
 * demo dataset), byte-compatible with what torch.save itself writes.
 *
 * Layout (research/torch-format.md §1.2-1.4, §2.2), as PyTorch's miniz does:
 * records "<stem>/data.pkl", "<stem>/data/<i>" (one per NAME=FILE, in
 * argument order), "<stem>/byteorder" = "little", "<stem>/version" = "3\n";
 * stored (method 0); every record's data 64-byte aligned through the 'FB'
 * extra field; local headers with flags 0x0808 and zero crc/sizes, the real
 * values in a data descriptor after the data (16 B, or 24 B with 64-bit
 * sizes when the size or the header offset needs ZIP64) - that is what lets
 * us stream inputs larger than RAM in one pass and still write real CRC32s;
 * a ZIP64 extra in the local header exactly where torch puts one; central
 * directory with APPNOTE ZIP64 extras; ZIP64 end record + locator always,
 * then the classic end record.
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
 * OrderedDict()) in argument order.
 *
 * The output is written to "OUT.partial" and renamed over OUT on success;
 * on failure it is removed. Memory: one 1 MiB copy buffer. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs/dtype.h"
#include "fs/npy.h"
#include "tools/cli.h"
#include "tools/cmd.h"

#define CHUNK	  (1u << 20)
#define ALIGN	  64
#define U32_MAX	  0xFFFFFFFFu
#define DEMO_SIDE 32

/* One tensor to write: from a .npy file or generated (demo). */
struct input {
	const char *name;
	const char *path; /* NULL for generated data */
	int fd;
	struct bfs_npy npy; /* dtype, shape, data offset/bytes */
	int demo_kind;	    /* 1 images, 2 labels */
};

/* A written record, for the central directory. */
struct rec {
	char *name;
	uint64_t lho, size;
	uint32_t crc;
	uint16_t flags;
};

struct out {
	FILE *f;
	const char *path;
	uint64_t pos;
	struct rec *recs;
	size_t n;
	int failed;
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

static void out_bytes(struct out *o, const void *p, size_t n)
{
	if (n && fwrite(p, 1, n, o->f) != n)
		o->failed = errno ? errno : EIO;
	o->pos += n;
}

/* 'bytes' <= 8 little-endian bytes of 'v' (use out_zeros for more). */
static void out_le(struct out *o, uint64_t v, int bytes)
{
	uint8_t b[8];

	for (int i = 0; i < bytes; i++)
		b[i] = (uint8_t)(v >> (8 * i));
	out_bytes(o, b, (size_t)bytes);
}

static void out_zeros(struct out *o, size_t n)
{
	static const uint8_t z[32];

	out_bytes(o, z, n);
}

/* Local header for record 'name' of 'size' bytes at the current position;
 * returns the record (crc filled in later). */
static struct rec *begin_record(struct out *o, const char *name, uint64_t size)
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

static void end_record(struct out *o, struct rec *r)
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

static void small_record(struct out *o, const char *name, const void *data,
			 size_t n)
{
	struct rec *r = begin_record(o, name, n);

	if (!r)
		return;
	r->crc = crc_update(0, data, n);
	out_bytes(o, data, n);
	end_record(o, r);
}

static void central_directory(struct out *o)
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

static int pk_tensor(struct pk *b, const struct input *in, size_t key)
{
	const struct bfs_dtype_info *di = bfs_dtype_info(in->npy.dtype);
	int64_t numel = 1, stride[BFS_MAX_DIMS];
	char k[24];
	int rc = 0;

	for (int d = in->npy.ndim - 1; d >= 0; d--) {
		stride[d] = numel;
		numel *= in->npy.shape[d];
	}
	snprintf(k, sizeof(k), "%zu", key);
	rc |= pk_str(b, "ctorch._utils\n_rebuild_tensor_v2\n((");
	rc |= pk_unicode(b, "storage");
	rc |=
	    pk_str(b, "ctorch\n") || pk_str(b, di->storage) || pk_str(b, "\n");
	rc |= pk_unicode(b, k) || pk_unicode(b, "cpu") || pk_int(b, numel);
	rc |= pk_str(b, "tQ") || pk_int(b, 0) || pk_str(b, "(");
	for (int d = 0; d < in->npy.ndim; d++)
		rc |= pk_int(b, in->npy.shape[d]);
	rc |= pk_str(b, "t(");
	for (int d = 0; d < in->npy.ndim; d++)
		rc |= pk_int(b, stride[d]);
	rc |= pk_str(b, "t\x89"
			"ccollections\nOrderedDict\n)RtR");
	return rc ? -ENOMEM : 0;
}

static int build_pickle(struct pk *b, const struct input *in, size_t n)
{
	int rc = pk_str(b, "\x80\x02}(");

	for (size_t i = 0; !rc && i < n; i++)
		rc = pk_unicode(b, in[i].name) || pk_tensor(b, &in[i], i);
	return rc || pk_str(b, "u.") ? -ENOMEM : 0;
}

/* ---- data records -------------------------------------------------------- */

/* Deterministic demo content for bytes [off, off+n) of the images or
 * labels tensor: pixel = a hash of its flat index, label = (i*7) % 10. */
static void demo_fill(const struct input *in, uint64_t off, uint8_t *p,
		      size_t n)
{
	if (in->demo_kind == 1) {
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

static int copy_data(struct out *o, struct input *in, size_t key,
		     const char *stem, uint8_t *buf)
{
	const struct bfs_dtype_info *di = bfs_dtype_info(in->npy.dtype);
	uint64_t left = in->npy.data_bytes, off = 0;
	char name[4200];
	struct rec *r;

	snprintf(name, sizeof(name), "%s/data/%zu", stem, key);
	r = begin_record(o, name, left);
	if (!r)
		return -ENOMEM;
	while (left && !o->failed) {
		/* CHUNK is a multiple of every swap unit. */
		size_t n = left < CHUNK ? (size_t)left : CHUNK;
		if (in->path) {
			ssize_t got = pread(in->fd, buf, n,
					    (off_t)(in->npy.data_off + off));
			if (got <= 0) {
				fprintf(stderr,
					"batchfs pack: %s: read failed "
					"at offset %" PRIu64 ": %s\n",
					in->path, in->npy.data_off + off,
					got ? strerror(errno) : "file shrank");
				return -EIO;
			}
			n = (size_t)got;
			if (in->npy.big_endian)
				bfs_npy_byteswap(buf, n, di->swap_unit);
		} else {
			demo_fill(in, off, buf, n);
		}
		r->crc = crc_update(r->crc, buf, n);
		out_bytes(o, buf, n);
		off += n;
		left -= n;
	}
	end_record(o, r);
	return 0;
}

/* ---- command line ------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: batchfs pack -o OUT.pt NAME=FILE.npy [NAME=FILE.npy ...]\n"
	    "       batchfs pack --demo N -o OUT.pt\n"
	    "\n"
	    "Write a torch.save archive (torch's exact ZIP64 layout: stored\n"
	    "records, 64-byte aligned data, real CRC-32s) holding a dict of\n"
	    "tensors, one per NAME=FILE.npy, in argument order, so that\n"
	    "torch.load(OUT, weights_only=True) returns {NAME: tensor, ...}.\n"
	    "Inputs are streamed in 1 MiB chunks (they may exceed RAM).\n"
	    "Supported npy dtypes: bool, uint8, int8, int16, int32, int64,\n"
	    "float16, float32, float64, complex64, complex128 (big-endian\n"
	    "files are byte-swapped). Refused: Fortran order, object,\n"
	    "string, structured dtypes, and unsigned types torch lacks.\n"
	    "\n"
	    "  -o, --output OUT.pt  the archive to write (replaced "
	    "atomically)\n"
	    "      --demo N         a synthetic dataset instead of .npy "
	    "files:\n"
	    "                       images uint8 [N,3,32,32], labels int64 "
	    "[N]\n"
	    "                       (deterministic content)\n"
	    "  -h, --help           this help\n");
}

/* Open NAME=FILE; 0 or 1 (message printed). */
static int open_input(struct input *in, char *arg)
{
	char *eq = strchr(arg, '=');
	struct bfs_error err = {{0}};
	const struct bfs_dtype_info *di;

	*eq = 0;
	in->name = arg;
	in->path = eq + 1;
	in->fd = open(in->path, O_RDONLY | O_CLOEXEC);
	if (in->fd < 0) {
		fprintf(stderr, "batchfs pack: %s: %s\n", in->path,
			strerror(errno));
		return 1;
	}
	if (bfs_npy_read_header(in->fd, in->path, &in->npy, &err)) {
		fprintf(stderr, "batchfs pack: %s\n", err.msg);
		return 1;
	}
	if (in->npy.fortran && in->npy.ndim > 1) {
		fprintf(stderr,
			"batchfs pack: %s: Fortran-order arrays are not "
			"supported (save with np.ascontiguousarray)\n",
			in->path);
		return 1;
	}
	di = bfs_dtype_info(in->npy.dtype);
	if (!di->storage) {
		fprintf(stderr,
			"batchfs pack: %s: dtype %s has no torch storage type "
			"(torch.save cannot hold it); convert it first\n",
			in->path, di->torch_name);
		return 1;
	}
	return 0;
}

static void demo_inputs(struct input *in, int64_t n)
{
	in[0] = (struct input){.name = "images", .fd = -1, .demo_kind = 1};
	in[0].npy.dtype = BFS_DT_UINT8;
	in[0].npy.ndim = 4;
	in[0].npy.shape[0] = n;
	in[0].npy.shape[1] = 3;
	in[0].npy.shape[2] = in[0].npy.shape[3] = DEMO_SIDE;
	in[0].npy.data_bytes = (uint64_t)n * 3 * DEMO_SIDE * DEMO_SIDE;
	in[1] = (struct input){.name = "labels", .fd = -1, .demo_kind = 2};
	in[1].npy.dtype = BFS_DT_INT64;
	in[1].npy.ndim = 1;
	in[1].npy.shape[0] = n;
	in[1].npy.data_bytes = (uint64_t)n * 8;
}

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

static int write_archive(const char *path, struct input *in, size_t n)
{
	struct out o = {0};
	struct pk pk = {0};
	char tmp[4200], name[4200];
	char *stem = stem_of(path);
	uint8_t *buf = malloc(CHUNK);
	int rc = 1;

	crc_init();
	snprintf(tmp, sizeof(tmp), "%s.partial", path);
	if (!stem || !buf || build_pickle(&pk, in, n)) {
		fprintf(stderr, "batchfs pack: out of memory\n");
		goto out_free;
	}
	o.path = path;
	o.f = fopen(tmp, "wb");
	if (!o.f) {
		fprintf(stderr, "batchfs pack: %s: %s\n", tmp, strerror(errno));
		goto out_free;
	}
	setvbuf(o.f, NULL, _IOFBF, CHUNK);
	snprintf(name, sizeof(name), "%s/data.pkl", stem);
	small_record(&o, name, pk.p, pk.n);
	for (size_t i = 0; i < n && !o.failed; i++)
		if (copy_data(&o, &in[i], i, stem, buf))
			goto out_close;
	snprintf(name, sizeof(name), "%s/byteorder", stem);
	small_record(&o, name, "little", 6);
	snprintf(name, sizeof(name), "%s/version", stem);
	small_record(&o, name, "3\n", 2);
	central_directory(&o);
out_close:
	if (fclose(o.f) && !o.failed)
		o.failed = errno;
	if (o.failed)
		fprintf(stderr, "batchfs pack: %s: %s\n", tmp,
			strerror(o.failed));
	else if (o.n && rename(tmp, path))
		fprintf(stderr, "batchfs pack: rename to %s: %s\n", path,
			strerror(errno));
	else if (o.n == n + 3)
		rc = 0;
	if (rc)
		unlink(tmp);
	else
		printf("wrote %s: %zu tensors, %" PRIu64 " bytes\n", path, n,
		       o.pos);
	for (size_t i = 0; i < o.n; i++)
		free(o.recs[i].name);
	free(o.recs);
out_free:
	free(pk.p);
	free(buf);
	free(stem);
	return rc;
}

int bfs_cmd_pack(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"output", required_argument, NULL, 'o'},
	    {"demo", required_argument, NULL, 'd'},
	    {"help", no_argument, NULL, 'h'},
	    {0},
	};
	const char *outp = NULL;
	int64_t demo = -1;
	struct input *in = NULL;
	size_t n = 0;
	int c, rc = 1;
	char *end;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+o:h", opts, NULL)) != -1) {
		switch (c) {
		case 'o':
			outp = optarg;
			break;
		case 'd':
			errno = 0;
			demo = strtoll(optarg, &end, 10);
			if (errno || *end || end == optarg || demo < 0)
				return bfs_cli_bad_usage(
				    "pack", usage,
				    "--demo wants a sample count", optarg);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			return bfs_cli_bad_usage("pack", usage,
						 "unknown or incomplete option",
						 argv[optind - 1]);
		}
	}
	if (!outp)
		return bfs_cli_bad_usage("pack", usage, "missing -o OUT.pt",
					 NULL);
	if ((demo >= 0) == (optind < argc))
		return bfs_cli_bad_usage(
		    "pack", usage,
		    demo >= 0 ? "--demo takes no NAME=FILE"
			      : "nothing to pack (NAME=FILE.npy)",
		    NULL);
	n = demo >= 0 ? 2 : (size_t)(argc - optind);
	in = calloc(n, sizeof(*in));
	if (!in)
		return 1;
	for (size_t i = 0; i < n; i++)
		in[i].fd = -1;
	if (demo >= 0) {
		demo_inputs(in, demo);
	} else {
		for (size_t i = 0; i < n; i++) {
			char *a = argv[optind + (int)i], *eq = strchr(a, '=');
			if (!eq || eq == a || !eq[1]) {
				rc = bfs_cli_bad_usage(
				    "pack", usage, "expected NAME=FILE.npy", a);
				goto out_close;
			}
			for (size_t j = 0; j < i; j++)
				if (strlen(in[j].name) == (size_t)(eq - a) &&
				    !strncmp(in[j].name, a, (size_t)(eq - a))) {
					rc = bfs_cli_bad_usage(
					    "pack", usage,
					    "duplicate field name", a);
					goto out_close;
				}
			if (open_input(&in[i], a))
				goto out_close;
		}
	}
	rc = write_archive(outp, in, n);
out_close:
	for (size_t i = 0; i < n; i++)
		if (in[i].fd >= 0)
			close(in[i].fd);
	free(in);
	return rc;
}
