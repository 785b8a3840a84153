/* fs/layout: the bytes of a batch file (fs/README.md: the batch file).
 *
 * A batch file is a safetensors file: u64 LE header length N, N bytes of
 * JSON padded with spaces so the data starts at a multiple of 4096 (4096
 * unless the JSON is bigger), then each tensor's C-order little-endian
 * bytes with no holes. Tensors are ordered by descending element size,
 * ties by name, so each stays naturally aligned. The JSON names the
 * batch's epoch and batch (its id's: the rank's epoch, never its lane or
 * position), so a batch file's bytes are those of (samples, epoch,
 * batch) and rank/R/... of a multi-rank mount is byte for byte the file
 * of a --rank R mount. The data starts where it would with epoch and
 * batch numbers of 20 digits (the widest): the numbers never move the
 * data, so sizes take no id, and every batch of a layout without ragged
 * fields has one size but the last (fewer rows): a stream's offsets are
 * arithmetic (fs/stream.h).
 *
 * A fixed field is one tensor [rows, *shape]. A ragged field (fs/ragged.h)
 * is two: padded, NAME [rows, L, *row] and NAME.lengths [rows]; packed,
 * NAME [T, *row] and NAME.offsets [rows + 1]. L and T are the batch's
 * extents (struct bfs_layout_dims), measured from its samples' offsets in
 * O(rows); everything else is arithmetic: nothing is gathered to know a
 * file's size, and every size a batch can have is proven to fit at init. */
#ifndef BFS_LAYOUT_H
#define BFS_LAYOUT_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/dataset.h"
#include "fs/error.h"
#include "fs/order.h"
#include "fs/ragged.h"

#define BFS_LAYOUT_ALIGN 4096u

/* Most ragged fields a dataset may have. */
#define BFS_LAYOUT_MAX_RAGGED 64

/* What a tensor of the batch file holds. */
enum bfs_layout_role {
	BFS_LAYOUT_ROWS,    /* a fixed field: [rows, *shape] */
	BFS_LAYOUT_PADDED,  /* a ragged field, --pad: [rows, L, *shape] */
	BFS_LAYOUT_PACKED,  /* a ragged field, --pack: [T, *shape] */
	BFS_LAYOUT_LENGTHS, /* int64 [rows]: its samples' lengths (pad) */
	BFS_LAYOUT_OFFSETS, /* int64 [rows + 1]: where they start (pack) */
};

struct bfs_layout_field {
	const struct bfs_field *f; /* borrowed from the dataset */
	size_t ds_index;	   /* index for bfs_dataset_gather */
	const char *st_dtype;	   /* safetensors dtype code */
	const char *name;	   /* in the batch file */
	enum bfs_dtype dtype;	   /* of this tensor */
	enum bfs_layout_role role;
	size_t slot; /* ragged roles: index in ragged[] and dims.ext[] */
};

/* How one ragged field is served. */
struct bfs_layout_ragged {
	const struct bfs_field *f;
	size_t ds_index;
	enum bfs_ragged_mode mode;
	uint64_t multiple;		 /* pad: L is a multiple of it */
	uint8_t pad[BFS_RAGGED_PAD_MAX]; /* pad: the element */
	char value[48];			 /* pad: VALUE as given ("0") */
	uint64_t ext_max;		 /* the largest L (pad) or T (pack) */
};

/* A batch's geometry: its rows and, per ragged field (slot), its padded
 * length L (pad) or its total rows T (pack). */
struct bfs_layout_dims {
	uint64_t rows;
	uint64_t ext[BFS_LAYOUT_MAX_RAGGED];
};

/* The most bytes of JSON header a batch file may have: a dataset whose
 * header would be longer (too many or too long field names, shapes) is
 * refused when the layout is made. */
#define BFS_LAYOUT_MAX_HEADER (1u << 20)

struct bfs_layout {
	size_t nfields;			 /* tensors in the batch file */
	struct bfs_layout_field *fields; /* file order */
	uint64_t row_bytes;		 /* per sample, of the fixed fields */
	uint64_t rows_max;		 /* the most rows a batch may have */
	uint64_t max_file_size;		 /* the largest batch file */
	const char *source;		 /* named in refusals (borrowed) */
	/* Names batches in messages ("rank R epoch E batch K" on a
	 * multi-rank order); NULL: "epoch E batch K". Borrowed:
	 * bfs_layout_bind_order. Headers never depend on it. */
	const struct bfs_order *order;
	const struct bfs_dataset *ds; /* ragged extents; may be NULL */
	size_t nragged;
	struct bfs_layout_ragged *ragged; /* [nragged] */
	char *names_;			  /* private: "NAME.lengths" ... */
};

/* Lay out 'n' fixed fields (fields[i] is dataset field i) for batches of
 * at most 'rows_max' rows, and prove every size of such a batch file fits:
 * each tensor's and the whole data's bytes, a header of at most
 * BFS_LAYOUT_MAX_HEADER bytes (for any epoch and batch number), the file
 * size within 2^63 - 1. Refusals name 'source' (the archive) and the
 * field: -ENOTSUP for a dtype safetensors cannot express (complex32,
 * complex128) or a ragged field (it needs bfs_layout_init_ragged),
 * -EFBIG for sizes past those limits. Returns 0 or -errno. */
int bfs_layout_init_fields(struct bfs_layout *l,
			   const struct bfs_field *const *fields, size_t n,
			   uint64_t rows_max, const char *source,
			   struct bfs_error *err);

/* Every field of 'ds' (source: its first shard), ragged fields served as
 * opts[0..nopts) say (one option per field at most; a field without one
 * is padded with 0). The proof covers the longest sample of every ragged
 * field in every row (a sampler with replacement may draw it B times).
 * Also refused: an option naming no ragged field, two options for one
 * field, a pad value the dtype cannot hold, more than
 * BFS_LAYOUT_MAX_RAGGED ragged fields, two tensors of one name in the
 * batch file (a field "x.lengths" beside ragged "x" padded). */
int bfs_layout_init_ragged(struct bfs_layout *l, const struct bfs_dataset *ds,
			   uint64_t rows_max, const struct bfs_ragged_opt *opts,
			   size_t nopts, struct bfs_error *err);

/* bfs_layout_init_ragged with no options. */
int bfs_layout_init(struct bfs_layout *l, const struct bfs_dataset *ds,
		    uint64_t rows_max, struct bfs_error *err);

/* Messages of l name batches as order 'o' does (borrowed: it must outlive
 * l's use), with their rank on a multi-rank order. */
void bfs_layout_bind_order(struct bfs_layout *l, const struct bfs_order *o);

/* "epoch E batch K", or "rank R epoch E batch K" (bfs_order_batch_name of
 * the bound order): what messages call batch id. */
void bfs_layout_batch_name(const struct bfs_layout *l, struct bfs_batch_id id,
			   char *buf, size_t len);

/* The field with the most bytes per sample (named in refusals), or NULL
 * when there is none. */
const struct bfs_layout_field *bfs_layout_largest(const struct bfs_layout *l);

/* Free what init allocated; accepts a zeroed or half-built layout. */
void bfs_layout_fini(struct bfs_layout *l);

/* The extents of the batch of samples idx[0..rows) into *d (d->rows too):
 * O(rows) per ragged field, reading their offsets (bfs_dataset_spans).
 * Nothing to read without ragged fields. Returns 0, -ENOMEM, -EIO (the
 * archive faulted or changed under us) or -ERANGE (bad index). */
int bfs_layout_measure(const struct bfs_layout *l, const uint64_t *idx,
		       uint64_t rows, struct bfs_layout_dims *d);

/* The geometry of batch 'at' of order 'o' (its rows, and its indices
 * measured when there are ragged fields: one bfs_order_batch). 0 or
 * -errno. */
int bfs_layout_batch_dims(const struct bfs_layout *l, struct bfs_order *o,
			  const struct bfs_batch_loc *at,
			  struct bfs_layout_dims *d);

/* The exact size of batch 'at' of order 'o', before anything is
 * gathered: arithmetic, plus O(rows) offsets per ragged field. What the
 * pool and the namespace serve as the file's size. Without ragged fields
 * it depends on the batch's rows alone (bfs_layout_size) and asks the
 * order nothing. 0 or -errno as bfs_layout_batch_dims. */
int bfs_layout_file_size(const struct bfs_layout *l, struct bfs_order *o,
			 const struct bfs_batch_loc *at, uint64_t *size);

/* The JSON header of batch id (its epoch and batch: the rank's epoch)
 * of geometry d (d's extents at most those proven at init), unpadded,
 * into buf (NUL-terminated when len > 0). Returns the length snprintf
 * would, so bfs_layout_json_dims(l, id, d, NULL, 0) measures it. */
size_t bfs_layout_json_dims(const struct bfs_layout *l, struct bfs_batch_id id,
			    const struct bfs_layout_dims *d, char *buf,
			    size_t len);

/* Byte offset of the data = 8 + padded JSON: a multiple of 4096, the
 * first one past 8 + the JSON of geometry d with 20-digit epoch and batch
 * numbers: the same for every batch of that geometry. */
uint64_t bfs_layout_data_offset_dims(const struct bfs_layout *l,
				     const struct bfs_layout_dims *d);

/* Exact size of the batch file of geometry d (no overflow: proven), the
 * same for every batch of that geometry. */
uint64_t bfs_layout_size_dims(const struct bfs_layout *l,
			      const struct bfs_layout_dims *d);

/* Write the batch file's first bfs_layout_data_offset_dims() bytes
 * (length, JSON naming batch id, space padding) into dst, and nothing
 * past them. Returns that data offset (the JSON is measured once). */
uint64_t bfs_layout_header_dims(const struct bfs_layout *l,
				struct bfs_batch_id id,
				const struct bfs_layout_dims *d, void *dst);

/* Layouts without ragged fields: 'rows' is the whole geometry, and
 * bfs_layout_size(l, rows) is the size of every batch of 'rows' rows. */
static inline size_t bfs_layout_json(const struct bfs_layout *l,
				     struct bfs_batch_id id, uint64_t rows,
				     char *buf, size_t len)
{
	struct bfs_layout_dims d = {.rows = rows};

	assert(!l->nragged); /* a caller's bug: ragged needs its dims */

	return bfs_layout_json_dims(l, id, &d, buf, len);
}

static inline uint64_t bfs_layout_data_offset(const struct bfs_layout *l,
					      uint64_t rows)
{
	struct bfs_layout_dims d = {.rows = rows};

	assert(!l->nragged); /* a caller's bug: ragged needs its dims */

	return bfs_layout_data_offset_dims(l, &d);
}

static inline uint64_t bfs_layout_size(const struct bfs_layout *l,
				       uint64_t rows)
{
	struct bfs_layout_dims d = {.rows = rows};

	assert(!l->nragged); /* a caller's bug: ragged needs its dims */

	return bfs_layout_size_dims(l, &d);
}

static inline uint64_t bfs_layout_header(const struct bfs_layout *l,
					 struct bfs_batch_id id, uint64_t rows,
					 void *dst)
{
	struct bfs_layout_dims d = {.rows = rows};

	assert(!l->nragged); /* a caller's bug: ragged needs its dims */

	return bfs_layout_header_dims(l, id, &d, dst);
}

/* Write the whole batch file of batch id, of samples idx[0..rows)
 * (header, then each tensor gathered from 'ds'), into dst, which holds 'size'
 * bytes: the size bfs_layout_file_size gave this batch. Returns 0 or -errno:
 * the gather's (-EIO archive faulted, -ERANGE bad index), -ENOMEM, or -EIO when
 * the batch measures another size now (its ragged offsets changed under us:
 * nothing is written past 'size'). */
int bfs_layout_fill(const struct bfs_layout *l, const struct bfs_dataset *ds,
		    struct bfs_batch_id id, const uint64_t *idx, uint64_t rows,
		    uint64_t size, void *dst);

/* Rows a caller already has, per dataset field: rows[f] is NULL (gather
 * field f from the dataset) or the address of each of its 'rows' rows,
 * stored as served (row_bytes bytes, C order, little-endian), e.g. read
 * into memory of the caller's with O_DIRECT (fs/fetch). */
typedef const void *const *const *bfs_layout_rows;

/* bfs_layout_fill with rows of some fields from 'have' (NULL: none). */
int bfs_layout_fill_from(const struct bfs_layout *l,
			 const struct bfs_dataset *ds, struct bfs_batch_id id,
			 const uint64_t *idx, uint64_t rows, uint64_t size,
			 bfs_layout_rows have, void *dst);

/* Mean bytes of a row of a non-empty field (row_bytes / fields that have
 * bytes), 0 when none has or a field is ragged: how big the slices of a
 * batch served straight from the archive would be. */
uint64_t bfs_layout_mean_slice(const struct bfs_layout *l);

/* Append 's' as a JSON string literal (quotes included, escaped) to buf
 * at *pos, never writing past len; *pos advances by the full length even
 * when truncated (snprintf semantics). */
void bfs_layout_json_str(char *buf, size_t len, size_t *pos, const char *s);

/* snprintf-style append used by the renderers: *pos advances by the full
 * formatted length even when buf is too small. */
void bfs_layout_append(char *buf, size_t len, size_t *pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
