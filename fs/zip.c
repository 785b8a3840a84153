/* fs/zip: a strict ZIP/ZIP64 central-directory parser for torch.save
 * archives and numpy.savez .npz files (fs/README.md: torch.save
 * archives, sources).
 *
 * Design. The archive is mapped read-only once; everything here reads the
 * mapping through rd16/rd32/rd64 after a bounds check written with
 * overflow-safe arithmetic (in_range()). Opened with an io
 * (bfs_zip_open_io: a remote archive, whose bytes are there only where
 * they were fetched), every range is asked for before it is read (need):
 * the first bytes and the end records, then the central directory, then
 * every local header at once. The central directory is the only
 * source of truth for names, sizes, CRCs and local-header offsets; the local
 * header only gives the data offset (lfh + 30 + its name length + its extra
 * length, exactly torch's getRecordOffset) and must repeat the name. Local
 * CRC/sizes, data descriptors and torch's non-standard ZIP64 local field
 * (which holds the LFH offset) are ignored.
 *
 * A TorchScript archive (torch.jit.save: code/ and constants.pkl records,
 * the code deflated) is refused as such, before its compression is. An
 * .npz (BFS_ZIP_NPZ) has no prefix; numpy's zipfile writes ZIP64 local
 * and central extras (force_zip64) and the ZIP64 end records only when
 * an offset or count needs them: both forms are read. A deflated member
 * (numpy.savez_compressed) is refused with advice to use numpy.savez.
 *
 * Invariants after a successful open: every record is stored (method 0),
 * unencrypted, csize == usize, [lfh, data + size) lies before the central
 * directory and overlaps no other record, names are unique, safe (no "..",
 * no leading '/', no '\\', no NUL) and, for torch, all start with
 * "<prefix>/".
 *
 * A private struct wraps struct bfs_zip to hold a name index for
 * bfs_zip_find (binary search, O(log n)). No locks: a bfs_zip is immutable
 * after open and may be shared by threads. */
#include "fs/zip.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SIG_LFH	   0x04034b50u
#define SIG_CDH	   0x02014b50u
#define SIG_EOCD   0x06054b50u
#define SIG_EOCD64 0x06064b50u
#define SIG_LOC64  0x07064b50u

#define LFH_LEN	    30u
#define CDH_LEN	    46u
#define EOCD_LEN    22u
#define EOCD64_LEN  56u
#define LOC64_LEN   20u
#define MAX_COMMENT 65535u
#define MAX_ENTRIES (1u << 20)

struct zip_priv {
	struct bfs_zip pub;
	size_t *by_name; /* entry indexes sorted by name */
};

/* Parsing context: the mapping and where errors go. */
struct ctx {
	struct bfs_zip *z;
	const uint8_t *p;
	uint64_t size;
	const char *label;
	enum bfs_zip_kind kind;
	struct bfs_error *err;
	const struct bfs_zip_io *io; /* NULL: every byte is there */
};

static uint16_t rd16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static uint64_t rd64(const uint8_t *p)
{
	return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

/* True when [off, off+len) lies inside [0, limit). Overflow-safe. */
static int in_range(uint64_t off, uint64_t len, uint64_t limit)
{
	return off <= limit && len <= limit - off;
}

#define FAIL(c, off, ...)                                                      \
	bfs_error_set((c)->err, -EINVAL, (c)->label, off, __VA_ARGS__)

/* Bytes r[0..n) made readable before they are read (the io's ensure,
 * each range cut at the archive's end). 0 or -errno. */
static int need(struct ctx *c, struct bfs_zip_range *r, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (r[i].off > c->size)
			r[i].off = c->size;
		if (r[i].len > c->size - r[i].off)
			r[i].len = c->size - r[i].off;
	}
	return c->io ? c->io->ensure(c->io->arg, r, n, c->err) : 0;
}

static int need1(struct ctx *c, uint64_t off, uint64_t len)
{
	struct bfs_zip_range r = {off, len};

	return need(c, &r, 1);
}

/* Step 1: magic. Reject non-zip and legacy torch formats by name. */
static int check_magic(struct ctx *c)
{
	static const uint8_t legacy[] = {0x80, 0x02, 0x8a, 0x0a};

	if (c->size >= 4 && memcmp(c->p, legacy, 4) == 0)
		return FAIL(c, 0,
			    "not a ZIP archive: legacy torch.save format "
			    "(torch < 1.6 or _use_new_zipfile_serialization"
			    "=False); re-save with torch >= 1.6");
	if (c->size >= 8 && memcmp(c->p, "PYTORCH1", 8) == 0)
		return FAIL(c, 0,
			    "not a ZIP archive: torch 'PYTORCH1' preview "
			    "format is not supported");
	if (c->size >= 4 && rd32(c->p) == SIG_EOCD)
		return FAIL(c, 0,
			    "an empty ZIP archive (no records), not a "
			    "torch.save archive");
	if (c->size < 4 || rd32(c->p) != SIG_LFH)
		return FAIL(c, 0,
			    "not a ZIP archive (torch.save >= 1.6 format "
			    "expected)");
	if (c->size < LFH_LEN + EOCD_LEN)
		return FAIL(c, c->size,
			    "truncated: %llu bytes is too small for "
			    "a ZIP archive",
			    (unsigned long long)c->size);
	return 0;
}

/* Step 2a: find the classic end record; torch writes it at size - 22. */
static int find_eocd(struct ctx *c, uint64_t *eocd)
{
	uint64_t last = c->size - EOCD_LEN;
	uint64_t first = last > MAX_COMMENT ? last - MAX_COMMENT : 0;
	int rc;

	/* no comment (torch, numpy): the end records are the last bytes */
	if (rd32(c->p + last) == SIG_EOCD && rd16(c->p + last + 20) == 0) {
		*eocd = last;
		return 0;
	}
	/* the comment's window, and a ZIP64 locator right before it */
	rc = need1(c, first > LOC64_LEN ? first - LOC64_LEN : 0,
		   last - (first > LOC64_LEN ? first - LOC64_LEN : 0));
	if (rc)
		return rc;
	for (uint64_t o = last + 1; o-- > first;) {
		if (rd32(c->p + o) == SIG_EOCD &&
		    o + EOCD_LEN + rd16(c->p + o + 20) == c->size) {
			*eocd = o;
			return 0;
		}
	}
	return FAIL(c, c->size,
		    "truncated or not a ZIP archive: no end of "
		    "central directory record in the last %llu bytes",
		    (unsigned long long)(c->size - first));
}

/* Central-directory geometry from the end records. */
struct cd_geom {
	uint64_t n, off, size, end; /* end = where the CD must stop */
};

/* Step 2b: the ZIP64 locator and end record, when present. */
static int read_eocd64(struct ctx *c, uint64_t eocd, struct cd_geom *g)
{
	uint64_t loc = eocd - LOC64_LEN, e64;
	const uint8_t *l = c->p + loc, *r;
	int rc;

	if (rd32(l + 4) != 0 || rd32(l + 16) > 1)
		return FAIL(c, loc,
			    "ZIP64 locator: multi-disk archives are not "
			    "supported");
	e64 = rd64(l + 8);
	if (!in_range(e64, EOCD64_LEN, loc))
		return FAIL(c, loc,
			    "ZIP64 locator points outside the file "
			    "(offset %llu): truncated or corrupt",
			    (unsigned long long)e64);
	rc = need1(c, e64, EOCD64_LEN);
	if (rc)
		return rc;
	r = c->p + e64;
	if (rd32(r) != SIG_EOCD64)
		return FAIL(c, e64,
			    "bad ZIP64 end of central directory "
			    "signature 0x%08x",
			    rd32(r));
	if (rd64(r + 4) < EOCD64_LEN - 12 || rd32(r + 16) || rd32(r + 20))
		return FAIL(c, e64,
			    "bad ZIP64 end of central directory record "
			    "(size or disk numbers)");
	if (rd64(r + 24) != rd64(r + 32))
		return FAIL(c, e64, "ZIP64 end record: entry counts disagree");
	g->n = rd64(r + 32);
	g->size = rd64(r + 40);
	g->off = rd64(r + 48);
	g->end = e64;
	return 0;
}

/* Step 2: both end records, then the directory's own bounds. */
static int read_end(struct ctx *c, struct cd_geom *g)
{
	uint64_t eocd = 0;
	const uint8_t *e;
	int rc = find_eocd(c, &eocd);

	if (rc)
		return rc;
	e = c->p + eocd;
	if (rd16(e + 4) != 0 || rd16(e + 6) != 0)
		return FAIL(c, eocd, "multi-disk archives are not supported");
	if (rd16(e + 8) != rd16(e + 10))
		return FAIL(c, eocd,
			    "end of central directory record: %u records on "
			    "this disk but %u in total: corrupt",
			    rd16(e + 8), rd16(e + 10));
	g->n = rd16(e + 10);
	g->size = rd32(e + 12);
	g->off = rd32(e + 16);
	g->end = eocd;
	if (eocd >= LOC64_LEN && rd32(e - LOC64_LEN) == SIG_LOC64) {
		rc = read_eocd64(c, eocd, g);
		if (rc)
			return rc;
	}
	if (g->n > MAX_ENTRIES)
		return FAIL(c, eocd,
			    "central directory claims %llu records "
			    "(limit %u)",
			    (unsigned long long)g->n, MAX_ENTRIES);
	if (!in_range(g->off, g->size, g->end))
		return FAIL(c, eocd,
			    "central directory [%llu, +%llu) runs past "
			    "its end record at %llu: truncated or corrupt",
			    (unsigned long long)g->off,
			    (unsigned long long)g->size,
			    (unsigned long long)g->end);
	if (g->n * CDH_LEN > g->size)
		return FAIL(c, eocd,
			    "central directory of %llu bytes cannot "
			    "hold %llu records: entry count too large",
			    (unsigned long long)g->size,
			    (unsigned long long)g->n);
	if (g->n == 0)
		return FAIL(c, eocd, "empty archive: no records");
	/* a record's name, extra field and comment take 65535 bytes each at
	 * most: nothing larger is fetched or read */
	if (g->size > g->n * (CDH_LEN + 3 * 0xFFFFull))
		return FAIL(
		    c, eocd,
		    "central directory of %llu bytes exceeds the "
		    "limit of %llu bytes for %llu records",
		    (unsigned long long)g->size,
		    (unsigned long long)(g->n * (CDH_LEN + 3 * 0xFFFFull)),
		    (unsigned long long)g->n);
	return 0;
}

/* Reason a record name is unsafe, or NULL. */
static const char *bad_name(const uint8_t *s, size_t n)
{
	if (n == 0)
		return "empty name";
	if (memchr(s, 0, n))
		return "NUL byte in name";
	if (memchr(s, '\\', n))
		return "backslash in name";
	if (s[0] == '/')
		return "absolute name (leading '/')";
	for (size_t i = 0; i < n;) {
		size_t j = i;
		while (j < n && s[j] != '/')
			j++;
		if (j - i == 2 && s[i] == '.' && s[i + 1] == '.')
			return "'..' component in name";
		i = j + 1;
	}
	return NULL;
}

/* Resolve the APPNOTE 4.5.3 ZIP64 extra of a CD entry: each 64-bit field
 * is present only when its 32-bit field is 0xFFFFFFFF, in the order usize,
 * csize, lho. 'x' is the extra block of 'xlen' bytes at file offset 'xoff'. */
static int cd_zip64(struct ctx *c, uint64_t hoff, const uint8_t *x, size_t xlen,
		    uint64_t *usize, uint64_t *csize, uint64_t *lho)
{
	uint64_t *want[3] = {usize, csize, lho};
	size_t need = 0;

	for (int i = 0; i < 3; i++)
		need += *want[i] == 0xFFFFFFFFu ? 8 : 0;
	if (need == 0)
		return 0;
	for (size_t i = 0; i + 4 <= xlen;) {
		size_t id = rd16(x + i), len = rd16(x + i + 2), k = i + 4;
		if (len > xlen - k)
			break;
		if (id == 1) {
			if (len < need)
				return FAIL(c, hoff,
					    "ZIP64 extra field of %zu "
					    "bytes, %zu needed",
					    len, need);
			for (int f = 0; f < 3; f++) {
				if (*want[f] != 0xFFFFFFFFu)
					continue;
				*want[f] = rd64(x + k);
				k += 8;
			}
			return 0;
		}
		i = k + len;
	}
	return FAIL(c, hoff,
		    "32-bit size or offset is 0xFFFFFFFF but the "
		    "ZIP64 extra field is missing");
}

/* Step 3: one central-directory entry at 'hoff' (bounds known: 46 bytes). */
static int read_cd_entry(struct ctx *c, uint64_t hoff, uint64_t cd_end,
			 struct bfs_zip_entry *e, uint64_t *next)
{
	const uint8_t *h = c->p + hoff;
	uint32_t flags = rd16(h + 8), method = rd16(h + 10);
	uint64_t csize = rd32(h + 20), usize = rd32(h + 24), lho = rd32(h + 42);
	size_t nlen = rd16(h + 28), xlen = rd16(h + 30), klen = rd16(h + 32);
	const char *why;
	int rc;

	if (rd32(h) != SIG_CDH)
		return FAIL(c, hoff,
			    "bad central directory entry signature "
			    "0x%08x",
			    rd32(h));
	if (!in_range(hoff + CDH_LEN, (uint64_t)nlen + xlen + klen, cd_end))
		return FAIL(c, hoff,
			    "central directory entry runs past the "
			    "directory's end");
	why = bad_name(h + CDH_LEN, nlen);
	if (why)
		return FAIL(c, hoff, "unsafe record name '%.*s': %s", (int)nlen,
			    (const char *)(h + CDH_LEN), why);
	e->name = strndup((const char *)(h + CDH_LEN), nlen);
	if (!e->name)
		return bfs_error_set(c->err, -ENOMEM, c->label, hoff,
				     "out of memory");
	if (flags & 0x41)
		return FAIL(c, hoff, "record '%s' is encrypted (flags 0x%04x)",
			    e->name, flags);
	e->method = (uint16_t)method; /* refused by check_stored */
	if (rd16(h + 34) != 0 && rd16(h + 34) != 0xFFFF)
		return FAIL(c, hoff, "record '%s' is on another disk", e->name);
	rc = cd_zip64(c, hoff, h + CDH_LEN + nlen, xlen, &usize, &csize, &lho);
	if (rc)
		return rc;
	if (method == 0 && csize != usize) /* else: check_stored */
		return FAIL(c, hoff,
			    "record '%s': compressed size %llu != size "
			    "%llu",
			    e->name, (unsigned long long)csize,
			    (unsigned long long)usize);
	e->lfh_off = lho;
	e->size = usize;
	e->crc32 = rd32(h + 16);
	*next = hoff + CDH_LEN + nlen + xlen + klen;
	return 0;
}

/* A TorchScript record (torch.jit.save writes compiled code and
 * constants beside the tensors), by its name under the prefix. */
static bool torchscript_record(const char *rel)
{
	return !strncmp(rel, "code/", 5) || !strcmp(rel, "constants.pkl");
}

/* Step 4b: a TorchScript archive is named as such before any record of it
 * is refused (its code records are compressed), then every record must be
 * stored. */
static int check_stored(struct ctx *c)
{
	const struct bfs_zip *z = c->z;
	size_t plen = strlen(z->prefix);

	for (size_t i = 0; i < z->n_entries && c->kind == BFS_ZIP_TORCH; i++)
		if (torchscript_record(z->entries[i].name + plen + 1))
			return FAIL(c, z->entries[i].lfh_off,
				    "a TorchScript archive (record '%s' is "
				    "compiled code from torch.jit.save), not "
				    "a torch.save archive of tensors",
				    z->entries[i].name);
	for (size_t i = 0; i < z->n_entries; i++)
		if (z->entries[i].method != 0 && c->kind == BFS_ZIP_NPZ)
			return FAIL(c, z->entries[i].lfh_off,
				    "member '%s' is compressed (method %u, as "
				    "numpy.savez_compressed writes): batchfs "
				    "maps arrays in place, so write the file "
				    "with numpy.savez instead",
				    z->entries[i].name, z->entries[i].method);
		else if (z->entries[i].method != 0)
			return FAIL(c, z->entries[i].lfh_off,
				    "record '%s' is compressed (method %u); "
				    "only stored records are supported",
				    z->entries[i].name, z->entries[i].method);
	return 0;
}

/* Step 5: the local header of 'e' (before the CD at 'cd_off'). */
static int read_lfh(struct ctx *c, struct bfs_zip_entry *e, uint64_t cd_off)
{
	const uint8_t *h;
	size_t nlen, xlen, len = strlen(e->name);
	uint64_t lho = e->lfh_off;

	if (!in_range(lho, LFH_LEN, cd_off))
		return FAIL(c, lho,
			    "record '%s': local header outside the data "
			    "area (before the central directory at %llu)",
			    e->name, (unsigned long long)cd_off);
	h = c->p + lho;
	if (rd32(h) != SIG_LFH)
		return FAIL(c, lho,
			    "record '%s': bad local header signature "
			    "0x%08x",
			    e->name, rd32(h));
	if (rd16(h + 6) & 0x41)
		return FAIL(c, lho, "record '%s' is encrypted (local flags)",
			    e->name);
	if (rd16(h + 8) != 0)
		return FAIL(c, lho,
			    "record '%s' is compressed (local method %u)",
			    e->name, rd16(h + 8));
	nlen = rd16(h + 26);
	xlen = rd16(h + 28);
	if (!in_range(lho + LFH_LEN, (uint64_t)nlen + xlen, cd_off))
		return FAIL(c, lho,
			    "record '%s': local header runs into the "
			    "central directory",
			    e->name);
	if (nlen != len || memcmp(h + LFH_LEN, e->name, len) != 0)
		return FAIL(c, lho,
			    "record '%s': local header name '%.*s' "
			    "differs from the central directory",
			    e->name, (int)(nlen > 200 ? 200 : nlen),
			    (const char *)(h + LFH_LEN));
	e->data_off = lho + LFH_LEN + nlen + xlen;
	if (!in_range(e->data_off, e->size, cd_off))
		return FAIL(c, e->data_off,
			    "record '%s': data [%llu, +%llu) "
			    "overlaps the central directory at "
			    "%llu: truncated or corrupt",
			    e->name, (unsigned long long)e->data_off,
			    (unsigned long long)e->size,
			    (unsigned long long)cd_off);
	return 0;
}

/* Every local header (with the name it repeats) made readable at once. */
static int need_lfhs(struct ctx *c)
{
	const struct bfs_zip *z = c->z;
	struct bfs_zip_range *r;
	int rc;

	if (!c->io)
		return 0;
	r = malloc(z->n_entries * sizeof(*r));
	if (!r)
		return bfs_error_set(c->err, -ENOMEM, c->label, BFS_NO_OFFSET,
				     "out of memory");
	for (size_t i = 0; i < z->n_entries; i++)
		r[i] = (struct bfs_zip_range){z->entries[i].lfh_off,
					      LFH_LEN +
						  strlen(z->entries[i].name)};
	rc = need(c, r, z->n_entries);
	free(r);
	return rc;
}

/* qsort_r comparators: entry indexes by local header offset, by name. */
static int by_lfh(const void *a, const void *b, void *arg)
{
	const struct bfs_zip_entry *e = arg;
	const struct bfs_zip_entry *x = e + *(const size_t *)a;
	const struct bfs_zip_entry *y = e + *(const size_t *)b;
	return x->lfh_off < y->lfh_off ? -1 : x->lfh_off > y->lfh_off;
}

static int by_name(const void *a, const void *b, void *arg)
{
	const struct bfs_zip_entry *e = arg;
	return strcmp(e[*(const size_t *)a].name, e[*(const size_t *)b].name);
}

/* Entry indexes sorted under 'cmp'; NULL when out of memory. */
static size_t *sorted_index(const struct bfs_zip *z,
			    int (*cmp)(const void *, const void *, void *))
{
	size_t *ix = malloc(z->n_entries * sizeof(*ix));

	if (!ix)
		return NULL;
	for (size_t i = 0; i < z->n_entries; i++)
		ix[i] = i;
	qsort_r(ix, z->n_entries, sizeof(*ix), cmp, z->entries);
	return ix;
}

/* Names unique (via the name index) and no two records overlapping. */
static int check_layout(struct ctx *c, struct zip_priv *zp)
{
	const struct bfs_zip_entry *e = zp->pub.entries;
	size_t n = zp->pub.n_entries, *ix;
	int rc = 0;

	zp->by_name = sorted_index(&zp->pub, by_name);
	if (!zp->by_name)
		return bfs_error_set(c->err, -ENOMEM, c->label, BFS_NO_OFFSET,
				     "out of memory");
	for (size_t i = 1; i < n; i++) {
		const struct bfs_zip_entry *a = &e[zp->by_name[i - 1]];
		if (strcmp(a->name, e[zp->by_name[i]].name) == 0)
			return FAIL(c, e[zp->by_name[i]].lfh_off,
				    "duplicate record name '%s'", a->name);
	}
	ix = sorted_index(&zp->pub, by_lfh);
	if (!ix)
		return bfs_error_set(c->err, -ENOMEM, c->label, BFS_NO_OFFSET,
				     "out of memory");
	for (size_t i = 1; i < n && !rc; i++) {
		const struct bfs_zip_entry *a = &e[ix[i - 1]], *b = &e[ix[i]];
		if (a->data_off + a->size > b->lfh_off)
			rc =
			    FAIL(c, b->lfh_off, "records '%s' and '%s' overlap",
				 a->name, b->name);
	}
	free(ix);
	return rc;
}

/* Step 4: every name is "<prefix>/<something>", prefix from entry 0
 * (an npz has none: prefix ""). */
static int check_prefix(struct ctx *c)
{
	struct bfs_zip *z = c->z;
	const char *slash = strchr(z->entries[0].name, '/');
	size_t plen;

	if (c->kind == BFS_ZIP_NPZ) {
		z->prefix = strdup("");
		return z->prefix
			   ? 0
			   : bfs_error_set(c->err, -ENOMEM, c->label,
					   BFS_NO_OFFSET, "out of memory");
	}
	if (!slash)
		return FAIL(c, z->entries[0].lfh_off,
			    "record '%s' is not under "
			    "a directory prefix",
			    z->entries[0].name);
	plen = (size_t)(slash - z->entries[0].name);
	z->prefix = strndup(z->entries[0].name, plen);
	if (!z->prefix)
		return bfs_error_set(c->err, -ENOMEM, c->label, BFS_NO_OFFSET,
				     "out of memory");
	for (size_t i = 0; i < z->n_entries; i++) {
		const char *nm = z->entries[i].name;
		if (strncmp(nm, z->prefix, plen) != 0 || nm[plen] != '/' ||
		    nm[plen + 1] == 0)
			return FAIL(
			    c, z->entries[i].lfh_off,
			    "record '%s' is not under the common prefix "
			    "'%s/'",
			    nm, z->prefix);
	}
	return 0;
}

/* Steps 1-5 over c->p; fills c->z. */
static int parse(struct ctx *c, struct zip_priv *zp)
{
	struct bfs_zip *z = &zp->pub;
	struct cd_geom g = {0, 0, 0, 0};
	/* the first bytes; the end records (ZIP64's too) from the tail */
	struct bfs_zip_range head[2] = {
	    {0, LFH_LEN},
	    {c->size > EOCD_LEN + LOC64_LEN + EOCD64_LEN
		 ? c->size - EOCD_LEN - LOC64_LEN - EOCD64_LEN
		 : 0,
	     EOCD_LEN + LOC64_LEN + EOCD64_LEN}};
	uint64_t pos;
	int rc = need(c, head, 2);

	if (!rc)
		rc = check_magic(c);
	if (!rc)
		rc = read_end(c, &g);
	if (!rc)
		rc = need1(c, g.off, g.size);
	if (rc)
		return rc;
	z->cd_off = g.off;
	z->entries = calloc(g.n, sizeof(*z->entries));
	if (!z->entries)
		return bfs_error_set(c->err, -ENOMEM, c->label, BFS_NO_OFFSET,
				     "out of memory");
	pos = g.off;
	for (uint64_t i = 0; i < g.n && !rc; i++) {
		z->n_entries = i + 1;
		if (!in_range(pos, CDH_LEN, g.off + g.size))
			return FAIL(c, pos,
				    "central directory holds fewer than "
				    "the %llu records its end record "
				    "claims",
				    (unsigned long long)g.n);
		rc =
		    read_cd_entry(c, pos, g.off + g.size, &z->entries[i], &pos);
	}
	if (!rc)
		rc = check_prefix(c);
	if (!rc)
		rc = check_stored(c);
	if (!rc)
		rc = need_lfhs(c);
	for (size_t i = 0; i < z->n_entries && !rc; i++)
		rc = read_lfh(c, &z->entries[i], g.off);
	if (!rc)
		rc = check_layout(c, zp);
	return rc;
}

static int open_common(struct bfs_zip **out, struct zip_priv *zp,
		       enum bfs_zip_kind kind, const struct bfs_zip_io *io,
		       struct bfs_error *err)
{
	struct ctx c = {
	    &zp->pub, zp->pub.map, zp->pub.map_size, zp->pub.path, kind,
	    err,      io};
	int rc = parse(&c, zp);

	if (rc) {
		bfs_zip_close(&zp->pub);
		return rc;
	}
	*out = &zp->pub;
	return 0;
}

static struct zip_priv *zip_new(const char *label)
{
	struct zip_priv *zp = calloc(1, sizeof(*zp));

	if (!zp)
		return NULL;
	zp->pub.fd = -1;
	zp->pub.path = strdup(label ? label : "(memory)");
	if (!zp->pub.path) {
		free(zp);
		return NULL;
	}
	return zp;
}

int bfs_zip_open_io(struct bfs_zip **out, const uint8_t *buf, uint64_t size,
		    const char *label, enum bfs_zip_kind kind,
		    const struct bfs_zip_io *io, struct bfs_error *err)
{
	struct zip_priv *zp = zip_new(label);

	*out = NULL;
	if (!zp)
		return bfs_error_set(err, -ENOMEM, label, BFS_NO_OFFSET,
				     "out of memory");
	zp->pub.map = buf;
	zp->pub.map_size = size;
	return open_common(out, zp, kind, io, err);
}

int bfs_zip_open_mem_kind(struct bfs_zip **out, const uint8_t *buf,
			  uint64_t size, const char *label,
			  enum bfs_zip_kind kind, struct bfs_error *err)
{
	return bfs_zip_open_io(out, buf, size, label, kind, NULL, err);
}

int bfs_zip_open_mem(struct bfs_zip **out, const uint8_t *buf, uint64_t size,
		     const char *label, struct bfs_error *err)
{
	return bfs_zip_open_mem_kind(out, buf, size, label, BFS_ZIP_TORCH, err);
}

int bfs_zip_open(struct bfs_zip **out, const char *path, struct bfs_error *err)
{
	return bfs_zip_open_kind(out, path, BFS_ZIP_TORCH, err);
}

int bfs_zip_open_kind(struct bfs_zip **out, const char *path,
		      enum bfs_zip_kind kind, struct bfs_error *err)
{
	struct zip_priv *zp = zip_new(path);
	struct stat st;
	void *m;
	int rc;

	*out = NULL;
	if (!zp)
		return bfs_error_set(err, -ENOMEM, path, BFS_NO_OFFSET,
				     "out of memory");
	zp->pub.fd = open(path, O_RDONLY | O_CLOEXEC);
	if (zp->pub.fd < 0 || fstat(zp->pub.fd, &st) < 0) {
		rc = -errno;
		bfs_error_set(err, rc, path, BFS_NO_OFFSET, "cannot open: %s",
			      strerror(-rc));
		goto err_close;
	}
	if (!S_ISREG(st.st_mode) || st.st_size == 0) {
		rc =
		    bfs_error_set(err, -EINVAL, path, BFS_NO_OFFSET,
				  S_ISREG(st.st_mode) ? "empty file, not a ZIP "
							"archive"
						      : "not a regular file");
		goto err_close;
	}
	m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, zp->pub.fd,
		 0);
	if (m == MAP_FAILED) {
		rc = -errno;
		bfs_error_set(err, rc, path, BFS_NO_OFFSET, "cannot map: %s",
			      strerror(-rc));
		goto err_close;
	}
	zp->pub.map = m;
	zp->pub.map_size = (uint64_t)st.st_size;
	return open_common(out, zp, kind, NULL, err);

err_close:
	bfs_zip_close(&zp->pub);
	return rc;
}

/* Compare "prefix/rel" with 'name' without building the string. */
static int key_cmp(const char *prefix, const char *rel, const char *name)
{
	size_t plen = strlen(prefix);
	int d = strncmp(prefix, name, plen);

	if (!plen) /* npz: no prefix */
		return strcmp(rel, name);
	if (d)
		return d;
	if (name[plen] != '/')
		return '/' - (unsigned char)name[plen];
	return strcmp(rel, name + plen + 1);
}

const struct bfs_zip_entry *bfs_zip_find(const struct bfs_zip *z,
					 const char *rel)
{
	const struct zip_priv *zp = (const struct zip_priv *)z;
	size_t lo = 0, hi = z->n_entries;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct bfs_zip_entry *e = &z->entries[zp->by_name[mid]];
		int d = key_cmp(z->prefix, rel, e->name);
		if (d == 0)
			return e;
		if (d < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

void bfs_zip_close(struct bfs_zip *z)
{
	struct zip_priv *zp = (struct zip_priv *)z;

	if (!z)
		return;
	for (size_t i = 0; i < z->n_entries; i++)
		free(z->entries[i].name);
	free(z->entries);
	free(zp->by_name);
	free(z->prefix);
	if (z->fd >= 0) {
		if (z->map)
			munmap((void *)z->map, (size_t)z->map_size);
		close(z->fd);
	}
	free(z->path);
	free(zp);
}
