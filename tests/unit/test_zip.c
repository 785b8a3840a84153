/* fs/zip: the central-directory parser lists torch-style archives exactly
 * and refuses every corruption with a message naming offset and reason.
 *
 * Archives are built in memory by a tiny writer that lays records out the
 * way torch's miniz does (fs/README.md: torch.save archives): flags 0x0808,
 * zero CRC/sizes in the local header, 'FB' padding to 64, ZIP64 end
 * records always. Options add the ZIP64 extras a >4 GiB archive carries. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fs/zip.h"

enum {
	ZW_CD_ZIP64 = 1,  /* CD sizes and offset via the ZIP64 extra */
	ZW_LFH_ZIP64 = 2, /* torch's non-standard LFH ZIP64 field (offset) */
	ZW_CRC0 = 4,	  /* write CRC 0 (torch >= 2.6, compute_crc32=False) */
	ZW_CLASSIC = 8,	  /* no ZIP64 end records */
	ZW_NO_PAD = 16,	  /* no 'FB' alignment field */
};

#define ZW_MAX 16

struct zw {
	uint8_t buf[65536];
	size_t len;
	int opts;
	int n;
	struct {
		const char *name;
		size_t lfh, size;
		uint32_t crc;
	} e[ZW_MAX];
	size_t cd_off, cd_len, cdh[ZW_MAX]; /* CD entry offsets */
	size_t eocd64, eocd;
};

static uint32_t crc32_of(const uint8_t *p, size_t n)
{
	uint32_t c = 0xFFFFFFFFu;

	for (size_t i = 0; i < n; i++) {
		c ^= p[i];
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0xEDB88320u & -(c & 1));
	}
	return ~c;
}

static void put(struct zw *w, const void *p, size_t n)
{
	assert_true(w->len + n <= sizeof(w->buf));
	memcpy(w->buf + w->len, p, n);
	w->len += n;
}

static void put16(struct zw *w, uint32_t v)
{
	uint8_t b[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
	put(w, b, 2);
}

static void put32(struct zw *w, uint32_t v)
{
	put16(w, v & 0xFFFF);
	put16(w, v >> 16);
}

static void put64(struct zw *w, uint64_t v)
{
	put32(w, (uint32_t)v);
	put32(w, (uint32_t)(v >> 32));
}

static void set16(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void set32(uint8_t *p, uint32_t v)
{
	set16(p, v & 0xFFFF);
	set16(p + 2, v >> 16);
}

static void zw_init(struct zw *w, int opts)
{
	memset(w, 0, sizeof(*w));
	w->opts = opts;
}

/* One stored record, local header + data + data descriptor, as torch. */
static void zw_add(struct zw *w, const char *name, const void *data,
		   size_t size)
{
	size_t nlen = strlen(name), x64 = w->opts & ZW_LFH_ZIP64 ? 12 : 0;
	size_t start = w->len + 30 + nlen + x64 + 4;
	size_t pad = w->opts & ZW_NO_PAD ? 0 : (64 - start % 64) % 64;
	int i = w->n++;

	assert_true(i < ZW_MAX);
	w->e[i].name = name;
	w->e[i].lfh = w->len;
	w->e[i].size = size;
	w->e[i].crc = w->opts & ZW_CRC0 ? 0 : crc32_of(data, size);
	put32(w, 0x04034b50);
	put16(w, 0);
	put16(w, size ? 0x0808 : 0x0800);
	put16(w, 0); /* method: stored */
	put32(w, 0); /* time, date */
	put32(w, 0); /* crc, csize, usize: all 0 as torch */
	put32(w, 0);
	put32(w, 0);
	put16(w, (uint32_t)nlen);
	put16(w, (uint32_t)(x64 + (w->opts & ZW_NO_PAD ? 0 : 4 + pad)));
	put(w, name, nlen);
	if (x64) { /* torch writes the LFH offset here */
		put16(w, 1);
		put16(w, 8);
		put64(w, w->e[i].lfh);
	}
	if (!(w->opts & ZW_NO_PAD)) {
		put16(w, 0x4246);
		put16(w, (uint32_t)pad);
		for (size_t k = 0; k < pad; k++)
			put(w, "Z", 1);
	}
	put(w, data, size);
	if (size) {
		put32(w, 0x08074b50);
		put32(w, w->e[i].crc);
		put32(w, (uint32_t)size);
		put32(w, (uint32_t)size);
	}
}

/* Central directory and end records. */
static void zw_finish(struct zw *w)
{
	int z64 = w->opts & ZW_CD_ZIP64;

	w->cd_off = w->len;
	for (int i = 0; i < w->n; i++) {
		size_t nlen = strlen(w->e[i].name);
		w->cdh[i] = w->len;
		put32(w, 0x02014b50);
		put16(w, 0);
		put16(w, 0);
		put16(w, w->e[i].size ? 0x0808 : 0x0800);
		put16(w, 0);
		put32(w, 0);
		put32(w, w->e[i].crc);
		put32(w, z64 ? 0xFFFFFFFFu : (uint32_t)w->e[i].size);
		put32(w, z64 ? 0xFFFFFFFFu : (uint32_t)w->e[i].size);
		put16(w, (uint32_t)nlen);
		put16(w, z64 ? 28 : 0);
		put32(w, 0); /* comment len, disk */
		put16(w, 0);
		put32(w, 0);
		put32(w, z64 ? 0xFFFFFFFFu : (uint32_t)w->e[i].lfh);
		put(w, w->e[i].name, nlen);
		if (z64) {
			put16(w, 1);
			put16(w, 24);
			put64(w, w->e[i].size);
			put64(w, w->e[i].size);
			put64(w, w->e[i].lfh);
		}
	}
	w->cd_len = w->len - w->cd_off;
	if (!(w->opts & ZW_CLASSIC)) {
		w->eocd64 = w->len;
		put32(w, 0x06064b50);
		put64(w, 44);
		put16(w, 0x031E);
		put16(w, 45);
		put32(w, 0);
		put32(w, 0);
		put64(w, (uint64_t)w->n);
		put64(w, (uint64_t)w->n);
		put64(w, w->cd_len);
		put64(w, w->cd_off);
		put32(w, 0x07064b50);
		put32(w, 0);
		put64(w, w->eocd64);
		put32(w, 1);
	}
	w->eocd = w->len;
	put32(w, 0x06054b50);
	put32(w, 0);
	put16(w, (uint32_t)w->n);
	put16(w, (uint32_t)w->n);
	put32(w, (uint32_t)w->cd_len);
	put32(w, (uint32_t)w->cd_off);
	put16(w, 0);
}

static const char pkl[] = "\x80\x02}q\x00.";
static const uint8_t tensor0[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};

/* A torch-shaped archive: data.pkl, data/0, an empty data/1, version. */
static void zw_torch(struct zw *w, int opts)
{
	zw_init(w, opts);
	zw_add(w, "archive/data.pkl", pkl, sizeof(pkl) - 1);
	zw_add(w, "archive/data/0", tensor0, sizeof(tensor0));
	zw_add(w, "archive/data/1", "", 0);
	zw_add(w, "archive/version", "3\n", 2);
	zw_finish(w);
}

/* Open w's bytes (first 'len' of them); returns rc, fills err. */
static int open_len(struct zw *w, size_t len, struct bfs_error *err)
{
	struct bfs_zip *z = NULL;
	int rc;

	memset(err, 0, sizeof(*err));
	rc = bfs_zip_open_mem(&z, w->buf, len, "t.pt", err);
	if (rc == 0) {
		assert_non_null(z);
		bfs_zip_close(z);
	} else {
		assert_null(z);
		assert_true(strncmp(err->msg, "t.pt: ", 6) == 0);
	}
	return rc;
}

/* Expect a refusal whose message contains 'what'. */
static void expect_refused(struct zw *w, size_t len, const char *what)
{
	struct bfs_error err;
	int rc = open_len(w, len, &err);

	if (rc == 0 || !strstr(err.msg, what))
		fail_msg("expected '%s', got rc %d '%s'", what, rc, err.msg);
	assert_int_equal(rc < 0, 1);
}

static void check_listing(struct zw *w, const struct bfs_zip *z)
{
	assert_string_equal(z->prefix, "archive");
	assert_int_equal(z->n_entries, (size_t)w->n);
	assert_int_equal(z->cd_off, w->cd_off);
	for (int i = 0; i < w->n; i++) {
		const struct bfs_zip_entry *e = &z->entries[i];
		assert_string_equal(e->name, w->e[i].name);
		assert_int_equal(e->lfh_off, w->e[i].lfh);
		assert_int_equal(e->size, w->e[i].size);
		assert_int_equal(e->crc32, w->e[i].crc);
		if (!(w->opts & ZW_NO_PAD))
			assert_int_equal(e->data_off % 64, 0);
	}
}

static void torch_layout_lists_records_offsets_and_crcs(void **state)
{
	struct zw w;
	struct bfs_zip *z;
	struct bfs_error err = {""};
	const struct bfs_zip_entry *e;

	zw_torch(&w, 0);
	assert_int_equal(bfs_zip_open_mem(&z, w.buf, w.len, "t.pt", &err), 0);
	check_listing(&w, z);
	e = bfs_zip_find(z, "data/0");
	assert_non_null(e);
	assert_memory_equal(bfs_zip_data(z, e), tensor0, sizeof(tensor0));
	assert_memory_equal(bfs_zip_data(z, bfs_zip_find(z, "version")), "3\n",
			    2);
	assert_int_equal(bfs_zip_find(z, "data/1")->size, 0);
	assert_null(bfs_zip_find(z, "data/2"));
	assert_null(bfs_zip_find(z, "data"));
	assert_null(bfs_zip_find(z, ""));
	bfs_zip_close(z);
}

static void zip64_extras_in_cd_and_torch_lfh_field_are_handled(void **state)
{
	struct zw w;
	struct bfs_zip *z;
	struct bfs_error err = {""};

	zw_torch(&w, ZW_CD_ZIP64 | ZW_LFH_ZIP64);
	assert_int_equal(bfs_zip_open_mem(&z, w.buf, w.len, "t.pt", &err), 0);
	check_listing(&w, z);
	/* Data offset = lfh + 30 + name + extra (which includes the field). */
	assert_int_equal(
	    z->entries[1].data_off,
	    w.e[1].lfh + 30 + strlen(w.e[1].name) +
		(w.buf[w.e[1].lfh + 28] | w.buf[w.e[1].lfh + 29] << 8));
	assert_memory_equal(bfs_zip_data(z, &z->entries[1]), tensor0,
			    sizeof(tensor0));
	bfs_zip_close(z);
}

static void
crc0_records_and_classic_unpadded_archives_are_accepted(void **state)
{
	struct zw w;
	struct bfs_zip *z;
	struct bfs_error err = {""};

	zw_torch(&w, ZW_CRC0);
	assert_int_equal(bfs_zip_open_mem(&z, w.buf, w.len, "t.pt", &err), 0);
	assert_int_equal(z->entries[1].crc32, 0);
	check_listing(&w, z);
	bfs_zip_close(z);

	zw_torch(&w, ZW_CLASSIC | ZW_NO_PAD);
	assert_int_equal(bfs_zip_open_mem(&z, w.buf, w.len, "t.pt", &err), 0);
	check_listing(&w, z);
	assert_int_equal(z->entries[0].data_off, 30 + 16);
	bfs_zip_close(z);
}

static void archive_file_is_mapped_and_listed(void **state)
{
	struct zw w;
	struct bfs_zip *z;
	struct bfs_error err = {""};
	char path[] = "/tmp/bfs-test-zip-XXXXXX";
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	zw_torch(&w, 0);
	assert_int_equal(write(fd, w.buf, w.len), (ssize_t)w.len);
	close(fd);
	assert_int_equal(bfs_zip_open(&z, path, &err), 0);
	assert_int_not_equal(z->fd, -1);
	check_listing(&w, z);
	bfs_zip_close(z);
	assert_int_equal(truncate(path, 0), 0);
	assert_int_equal(bfs_zip_open(&z, path, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "empty file"));
	unlink(path);
	memset(&err, 0, sizeof(err));
	assert_int_equal(bfs_zip_open(&z, path, &err), -ENOENT);
	assert_non_null(strstr(err.msg, path));
}

static void truncated_archives_are_refused_at_every_cut(void **state)
{
	struct zw w;
	size_t cuts[] = {0, 3, 10, 40, 100, 0, 0, 0, 0};

	zw_torch(&w, 0);
	cuts[5] = w.cd_off + 10;
	cuts[6] = w.eocd64 + 5;
	cuts[7] = w.eocd + 21;
	cuts[8] = w.len - 1;
	expect_refused(&w, 0, "not a ZIP archive");
	expect_refused(&w, 3, "not a ZIP archive");
	for (size_t i = 2; i < sizeof(cuts) / sizeof(cuts[0]); i++)
		expect_refused(&w, cuts[i], "truncated");
}

static void non_zip_and_legacy_torch_files_are_named(void **state)
{
	struct zw w;

	zw_init(&w, 0);
	put(&w, "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8", 12);
	expect_refused(&w, w.len, "legacy torch.save format");
	zw_init(&w, 0);
	put(&w, "hello, this is not an archive at all, really not", 48);
	expect_refused(&w, w.len, "not a ZIP archive (torch.save >= 1.6");
}

static void bad_signatures_are_refused(void **state)
{
	struct zw w;

	zw_torch(&w, 0);
	w.buf[w.cdh[1]] = 'X';
	expect_refused(&w, w.len, "bad central directory entry signature");
	zw_torch(&w, 0);
	w.buf[w.e[2].lfh + 1] = 'X';
	expect_refused(&w, w.len, "bad local header signature");
	zw_torch(&w, 0);
	w.buf[w.eocd64 + 3] = 0;
	expect_refused(&w, w.len, "bad ZIP64 end of central directory");
	zw_torch(&w, 0);
	w.buf[w.eocd] = 0;
	expect_refused(&w, w.len, "no end of central directory");
}

static void overlapping_records_are_refused(void **state)
{
	struct zw w;

	/* data/0 claims 60 bytes: its data runs over data/1's header. */
	zw_torch(&w, 0);
	set32(w.buf + w.cdh[1] + 20, 60);
	set32(w.buf + w.cdh[1] + 24, 60);
	expect_refused(&w, w.len,
		       "records 'archive/data/0' and "
		       "'archive/data/1' overlap");
	/* version's data runs into the central directory. */
	zw_torch(&w, 0);
	set32(w.buf + w.cdh[3] + 20, 300);
	set32(w.buf + w.cdh[3] + 24, 300);
	expect_refused(&w, w.len, "overlaps the central directory");
}

static void compressed_and_encrypted_records_are_refused(void **state)
{
	struct zw w;

	zw_torch(&w, 0);
	set16(w.buf + w.cdh[1] + 10, 8);
	expect_refused(&w, w.len,
		       "record 'archive/data/0' is compressed "
		       "(method 8)");
	zw_torch(&w, 0);
	set16(w.buf + w.e[1].lfh + 8, 8);
	expect_refused(&w, w.len, "compressed (local method 8)");
	zw_torch(&w, 0);
	set16(w.buf + w.cdh[2] + 8, 0x0801);
	expect_refused(&w, w.len, "record 'archive/data/1' is encrypted");
	zw_torch(&w, 0);
	set32(w.buf + w.cdh[1] + 20, 5);
	expect_refused(&w, w.len, "compressed size 5 != size 12");
}

static void duplicate_and_unsafe_names_are_refused(void **state)
{
	struct zw w;

	static const struct {
		const char *names[3];
		const char *why;
	} cases[] = {
	    {{"archive/data.pkl", "archive/data/0", "archive/data/0"},
	     "duplicate record name 'archive/data/0'"},
	    {{"archive/data.pkl", "archive/../x"}, "'..' component"},
	    {{"/archive/data.pkl"}, "leading '/'"},
	    {{"archive\\data.pkl"}, "backslash"},
	    {{"archive/data.pkl", "other/data/0"},
	     "not under the common prefix 'archive/'"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		zw_init(&w, 0);
		for (int k = 0; k < 3 && cases[i].names[k]; k++)
			zw_add(&w, cases[i].names[k], tensor0, 4);
		zw_finish(&w);
		expect_refused(&w, w.len, cases[i].why);
	}

	zw_torch(&w, 0);
	w.buf[w.cdh[1] + 46 + 8] = 0; /* "archive/\0ata/0" */
	expect_refused(&w, w.len, "NUL byte in name");

	zw_torch(&w, 0);
	w.buf[w.e[1].lfh + 30 + 13] = '9'; /* local "archive/data/9" */
	expect_refused(&w, w.len, "local header name 'archive/data/9' differs");
}

static void impossible_directory_geometry_is_refused(void **state)
{
	struct zw w;

	/* 1000 entries cannot fit in a 4-entry directory. */
	zw_torch(&w, 0);
	set32(w.buf + w.eocd64 + 24, 1000);
	set32(w.buf + w.eocd64 + 32, 1000);
	expect_refused(&w, w.len, "entry count too large");
	/* More than 2^20 records. */
	zw_torch(&w, 0);
	set32(w.buf + w.eocd64 + 24, 1u << 30);
	set32(w.buf + w.eocd64 + 32, 1u << 30);
	expect_refused(&w, w.len, "(limit 1048576)");
	/* Directory offset beyond its end record. */
	zw_torch(&w, 0);
	set32(w.buf + w.eocd64 + 48, 0xFFFFFF00u);
	expect_refused(&w, w.len, "runs past its end record");
	/* A local header offset inside the directory. */
	zw_torch(&w, 0);
	set32(w.buf + w.cdh[2] + 42, (uint32_t)w.cd_off + 4);
	expect_refused(&w, w.len, "local header outside the data area");
	/* ZIP64 marker without the extra field. */
	zw_torch(&w, 0);
	set32(w.buf + w.cdh[0] + 24, 0xFFFFFFFFu);
	expect_refused(&w, w.len, "ZIP64 extra field is missing");
}

/* numpy.savez's layout: top-level members, no prefix, with or without
 * ZIP64 extras; each found by its own name. */
static void npz_members_have_no_prefix_and_are_found_by_name(void **state)
{
	static const int layouts[] = {ZW_NO_PAD | ZW_CLASSIC,
				      ZW_NO_PAD | ZW_CD_ZIP64};
	struct bfs_error err = {{0}};
	struct bfs_zip *z = NULL;
	struct zw w;

	for (size_t i = 0; i < 2; i++) {
		zw_init(&w, layouts[i]);
		zw_add(&w, "x.npy", tensor0, sizeof(tensor0));
		zw_add(&w, "dir/y.npy", "ab", 2);
		zw_finish(&w);
		assert_int_equal(bfs_zip_open_mem_kind(&z, w.buf, w.len,
						       "t.npz", BFS_ZIP_NPZ,
						       &err),
				 0);
		assert_string_equal(z->prefix, "");
		assert_ptr_equal(bfs_zip_find(z, "x.npy"), &z->entries[0]);
		assert_ptr_equal(bfs_zip_find(z, "dir/y.npy"), &z->entries[1]);
		assert_null(bfs_zip_find(z, "y.npy"));
		assert_int_equal(z->entries[0].size, sizeof(tensor0));
		bfs_zip_close(z);
		/* the same bytes are no torch archive */
		expect_refused(&w, w.len, "not under a directory prefix");
	}
}

static void npz_deflated_member_is_refused_with_savez_advice(void **state)
{
	struct bfs_error err = {{0}};
	struct bfs_zip *z = NULL;
	struct zw w;

	zw_init(&w, ZW_NO_PAD | ZW_CLASSIC);
	zw_add(&w, "x.npy", tensor0, sizeof(tensor0));
	zw_finish(&w);
	set16(w.buf + w.cdh[0] + 10, 8);
	assert_int_equal(
	    bfs_zip_open_mem_kind(&z, w.buf, w.len, "c.npz", BFS_ZIP_NPZ, &err),
	    -EINVAL);
	assert_null(z);
	assert_non_null(strstr(err.msg, "c.npz: offset 0: member 'x.npy' "
					"is compressed"));
	assert_non_null(strstr(err.msg, "numpy.savez instead"));
}

/* ---- the io of archives whose bytes are fetched as asked for -------- */

/* What a parse asked for (fs/zip's io), its bytes copied from 'real' into
 * 'view' as asked: every other byte of view is a fill the parser would
 * misread. */
struct asked {
	const uint8_t *real;
	uint8_t *view;
	size_t len;
	struct bfs_zip_range r[64];
	size_t n, calls;
};

static int ask(void *arg, const struct bfs_zip_range *r, size_t n,
	       struct bfs_error *err)
{
	struct asked *a = arg;

	a->calls++;
	for (size_t i = 0; i < n; i++) {
		assert_true(r[i].off <= a->len &&
			    r[i].len <= a->len - r[i].off);
		memcpy(a->view + r[i].off, a->real + r[i].off, r[i].len);
		assert_true(a->n < 64);
		a->r[a->n++] = r[i];
	}
	return 0;
}

/* Parse w's bytes through the io over a view filled with 'fill'; the
 * listing must be the one a plain parse gives, no byte of a record's data
 * asked for (but with a comment: then the end record is looked for in
 * the last 64 KiB), and the asks few. */
static void parse_asking(struct zw *w, enum bfs_zip_kind kind, uint8_t fill,
			 bool comment)
{
	struct bfs_error err = {{0}};
	struct bfs_zip *z = NULL, *plain = NULL;
	struct asked a = {.real = w->buf, .len = w->len};
	const struct bfs_zip_io io = {ask, &a};

	a.view = malloc(w->len);
	assert_non_null(a.view);
	memset(a.view, fill, w->len);
	assert_int_equal(
	    bfs_zip_open_mem_kind(&plain, w->buf, w->len, "t", kind, &err), 0);
	if (bfs_zip_open_io(&z, a.view, w->len, "t", kind, &io, &err))
		fail_msg("fill 0x%02x: %s", fill, err.msg);
	assert_int_equal(z->n_entries, plain->n_entries);
	for (size_t i = 0; i < z->n_entries; i++) {
		const struct bfs_zip_entry *e = &plain->entries[i];

		assert_string_equal(z->entries[i].name, e->name);
		assert_int_equal(z->entries[i].data_off, e->data_off);
		assert_int_equal(z->entries[i].size, e->size);
		for (size_t k = 0; !comment && k < a.n; k++) /* no data */
			assert_true(a.r[k].off + a.r[k].len <= e->data_off ||
				    a.r[k].off >= e->data_off + e->size);
	}
	/* head + tail, ZIP64's end record, directory, headers; a comment's
	 * window */
	assert_true(a.calls <= (comment ? 5u : 4u));
	bfs_zip_close(z);
	bfs_zip_close(plain);
	free(a.view);
}

/* A torch archive with big records between small ones, so that its local
 * headers, its head and its tail lie on pages of their own. */
static void zw_spread(struct zw *w, int opts)
{
	static uint8_t big[20000];

	zw_init(w, opts);
	zw_add(w, "archive/data.pkl", pkl, sizeof(pkl) - 1);
	zw_add(w, "archive/data/0", big, sizeof(big));
	zw_add(w, "archive/version", "3\n", 2);
	zw_add(w, "archive/data/1", big, sizeof(big));
	zw_finish(w);
}

static void io_asks_for_every_byte_read_and_no_record_data(void **state)
{
	static const int layouts[] = {0, ZW_CD_ZIP64 | ZW_LFH_ZIP64,
				      ZW_CLASSIC | ZW_NO_PAD, ZW_CRC0};
	struct zw w;

	for (size_t i = 0; i < 4; i++)
		for (int fill = 0; fill < 256; fill += 255) {
			zw_spread(&w, layouts[i]);
			parse_asking(&w, BFS_ZIP_TORCH, (uint8_t)fill, false);
			zw_torch(&w, layouts[i]);
			parse_asking(&w, BFS_ZIP_TORCH, (uint8_t)fill, false);
		}
	/* an npz; and an archive with a comment after its end record */
	zw_init(&w, ZW_NO_PAD | ZW_CLASSIC);
	zw_add(&w, "x.npy", tensor0, sizeof(tensor0));
	zw_add(&w, "y.npy", tensor0, sizeof(tensor0));
	zw_finish(&w);
	parse_asking(&w, BFS_ZIP_NPZ, 0, false);
	parse_asking(&w, BFS_ZIP_NPZ, 0xFF, false);
	zw_spread(&w, 0);
	set16(w.buf + w.eocd + 20, 300);
	memset(w.buf + w.len, 'c', 300);
	w.len += 300;
	parse_asking(&w, BFS_ZIP_TORCH, 0, true);
	parse_asking(&w, BFS_ZIP_TORCH, 0xFF, true);
}

/* The source layer's guard (fs/source_file.c): a remote archive is
 * mapped PROT_NONE but for what was ensured. */
struct guarded {
	uint8_t *map;
	size_t calls, skip; /* the ask to forget (0: none) */
};

static int unguard(void *arg, const struct bfs_zip_range *r, size_t n,
		   struct bfs_error *err)
{
	struct guarded *g = arg;

	if (++g->calls == g->skip)
		return 0; /* "forgets" to fetch these */
	for (size_t i = 0; i < n; i++) {
		uint64_t a = r[i].off & ~(uint64_t)4095;
		uint64_t e = (r[i].off + r[i].len + 4095) & ~(uint64_t)4095;

		if (r[i].len)
			assert_int_equal(
			    mprotect(g->map + a, (size_t)(e - a), PROT_READ),
			    0);
	}
	return 0;
}

/* Parse w in a child over a guarded mapping, forgetting ask 'skip':
 * the child's wait status (exit 10 + the asks made when it parsed). */
static int parse_guarded(struct zw *w, size_t skip)
{
	pid_t pid = fork();
	int status = 0;

	assert_true(pid >= 0);
	if (pid == 0) {
		struct guarded g = {.skip = skip};
		const struct bfs_zip_io io = {unguard, &g};
		struct bfs_error err = {{0}};
		struct bfs_zip *z = NULL;

		signal(SIGSEGV, SIG_DFL); /* not cmocka's: die of it */
		g.map = mmap(NULL, sizeof(w->buf), PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (g.map == MAP_FAILED)
			_exit(3);
		memcpy(g.map, w->buf, w->len);
		mprotect(g.map, sizeof(w->buf), PROT_NONE);
		_exit(bfs_zip_open_io(&z, g.map, w->len, "t", BFS_ZIP_TORCH,
				      &io, &err)
			  ? 2
			  : 10 + (int)g.calls);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return status;
}

static void a_range_not_asked_for_faults_never_reads_as_zeros(void **state)
{
	struct zw w;
	int st;

	zw_spread(&w, 0);
	st = parse_guarded(&w, 0);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) > 10);
	/* the last ask is the local headers': forgotten, the first read of
	 * one on a page of its own faults (no listing, no zeros read) */
	st = parse_guarded(&w, (size_t)WEXITSTATUS(st) - 10);
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(torch_layout_lists_records_offsets_and_crcs),
	    cmocka_unit_test(
		zip64_extras_in_cd_and_torch_lfh_field_are_handled),
	    cmocka_unit_test(
		crc0_records_and_classic_unpadded_archives_are_accepted),
	    cmocka_unit_test(archive_file_is_mapped_and_listed),
	    cmocka_unit_test(truncated_archives_are_refused_at_every_cut),
	    cmocka_unit_test(non_zip_and_legacy_torch_files_are_named),
	    cmocka_unit_test(bad_signatures_are_refused),
	    cmocka_unit_test(overlapping_records_are_refused),
	    cmocka_unit_test(compressed_and_encrypted_records_are_refused),
	    cmocka_unit_test(duplicate_and_unsafe_names_are_refused),
	    cmocka_unit_test(impossible_directory_geometry_is_refused),
	    cmocka_unit_test(npz_members_have_no_prefix_and_are_found_by_name),
	    cmocka_unit_test(npz_deflated_member_is_refused_with_savez_advice),
	    cmocka_unit_test(io_asks_for_every_byte_read_and_no_record_data),
	    cmocka_unit_test(a_range_not_asked_for_faults_never_reads_as_zeros),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
