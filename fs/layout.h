/* fs/layout: the bytes of a batch file (fs/README.md: the batch file).
 *
 * A batch file is a safetensors file: u64 LE header length N, N bytes of
 * JSON padded with spaces so the data starts at a multiple of 4096 (4096
 * unless the JSON is bigger), then each field's [rows, *shape] C-order
 * little-endian bytes with no holes. Fields are ordered by descending
 * element size, ties by name, so each stays naturally aligned.
 *
 * Every size here is arithmetic: nothing is gathered to know a file's size. */
#ifndef BFS_LAYOUT_H
#define BFS_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "fs/dataset.h"
#include "fs/error.h"

#define BFS_LAYOUT_ALIGN 4096u

struct bfs_layout_field {
	const struct bfs_field *f; /* borrowed from the dataset */
	size_t ds_index;	   /* index for bfs_dataset_gather */
	const char *st_dtype;	   /* safetensors dtype code */
};

/* The most bytes of JSON header a batch file may have: a dataset whose
 * header would be longer (too many or too long field names, shapes) is
 * refused when the layout is made. */
#define BFS_LAYOUT_MAX_HEADER (1u << 20)

struct bfs_layout {
	size_t nfields;
	struct bfs_layout_field *fields; /* file order */
	uint64_t row_bytes;		 /* sum of the fields' row_bytes */
	uint64_t rows_max;		 /* the most rows a batch may have */
	uint64_t max_file_size;		 /* a batch file of rows_max rows */
	const char *source;		 /* named in refusals (borrowed) */
};

/* Lay out 'n' fields (fields[i] is dataset field i) for batches of at most
 * 'rows_max' rows, and prove every size of such a batch file fits: each
 * field's and the whole data's bytes, a header of at most
 * BFS_LAYOUT_MAX_HEADER bytes (for any epoch and batch number), the file
 * size within 2^63 - 1. Refusals name 'source' (the archive) and the
 * field: -ENOTSUP for a dtype safetensors cannot express (complex32,
 * complex128), -EFBIG for sizes past those limits. Returns 0 or -errno. */
int bfs_layout_init_fields(struct bfs_layout *l,
			   const struct bfs_field *const *fields, size_t n,
			   uint64_t rows_max, const char *source,
			   struct bfs_error *err);

/* bfs_layout_init_fields over every field of 'ds' (source: its first
 * archive). */
int bfs_layout_init(struct bfs_layout *l, const struct bfs_dataset *ds,
		    uint64_t rows_max, struct bfs_error *err);

/* The field with the most bytes per sample (named in refusals), or NULL
 * when there is none. */
const struct bfs_layout_field *bfs_layout_largest(const struct bfs_layout *l);

/* Free what init allocated; accepts a zeroed or half-built layout. */
void bfs_layout_fini(struct bfs_layout *l);

/* The JSON header of batch k of epoch e holding 'rows' samples, unpadded,
 * into buf (NUL-terminated when len > 0). Returns the length snprintf
 * would, so bfs_layout_json(l, e, k, rows, NULL, 0) measures it. */
size_t bfs_layout_json(const struct bfs_layout *l, uint64_t e, uint64_t k,
		       uint64_t rows, char *buf, size_t len);

/* Byte offset of the data = 8 + padded JSON: a multiple of 4096. */
uint64_t bfs_layout_data_offset(const struct bfs_layout *l, uint64_t e,
				uint64_t k, uint64_t rows);

/* Exact size of the batch file (rows <= rows_max: no overflow). */
uint64_t bfs_layout_file_size(const struct bfs_layout *l, uint64_t e,
			      uint64_t k, uint64_t rows);

/* Write the batch file's first bfs_layout_data_offset() bytes (length,
 * JSON, space padding) into dst, and nothing past them. Returns that data
 * offset (the JSON is measured once). */
uint64_t bfs_layout_header(const struct bfs_layout *l, uint64_t e, uint64_t k,
			   uint64_t rows, void *dst);

/* Write the whole batch file (header, then each field's rows gathered
 * from 'ds' at indices idx[0..rows)) into dst, which must hold
 * bfs_layout_file_size() bytes. Returns 0 or the -errno of the gather
 * (-EIO archive faulted, -ERANGE bad index, -ENOMEM). */
int bfs_layout_fill(const struct bfs_layout *l, const struct bfs_dataset *ds,
		    uint64_t e, uint64_t k, const uint64_t *idx, uint64_t rows,
		    void *dst);

/* Mean bytes of a row of a non-empty field (row_bytes / fields that have
 * bytes), 0 when none has: how big the slices of a batch served straight
 * from the archive would be. */
uint64_t bfs_layout_mean_slice(const struct bfs_layout *l);

/* Write the whole batch file into 'fd' from offset 0 with pwritev, the
 * rows straight from the archive mappings (no copy in this process):
 * the header from a small buffer, then one slice per row (adjacent slices
 * merge). Only when every row is stored as served (bfs_dataset_row):
 * -ENOTSUP otherwise, before anything is written. Returns 0, -ENOTSUP,
 * -EIO (an archive shrank: caught by the size check, or the kernel's copy
 * faulted, with a log line), -ENOMEM or the -errno of pwritev. */
int bfs_layout_pwrite(const struct bfs_layout *l, const struct bfs_dataset *ds,
		      uint64_t e, uint64_t k, const uint64_t *idx,
		      uint64_t rows, int fd);

/* Append 's' as a JSON string literal (quotes included, escaped) to buf
 * at *pos, never writing past len; *pos advances by the full length even
 * when truncated (snprintf semantics). */
void bfs_layout_json_str(char *buf, size_t len, size_t *pos, const char *s);

/* snprintf-style append used by the renderers: *pos advances by the full
 * formatted length even when buf is too small. */
void bfs_layout_append(char *buf, size_t len, size_t *pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
