/* fs/safetensors: the one strict reader of safetensors headers.
 *
 * A batch file (fs/README.md: the batch file) is
 *   u64 LE N | N bytes of UTF-8 JSON, trailing-padded with 0x20 | data
 * and the JSON maps an optional "__metadata__" to an object of strings and
 * every other key (a tensor name) to
 *   {"dtype": "F32", "shape": [d0, ...], "data_offsets": [begin, end]}
 * with offsets relative to the data start. fs/layout writes this format;
 * `batchfs inspect` and the loader library (which compiles this file into
 * itself, so it must not use anything else of fs/) read it through here.
 *
 * The bytes are untrusted; this module prints nothing and allocates only
 * what it returns. */
#ifndef BFS_SAFETENSORS_H
#define BFS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

/* safetensors' MAX_HEADER_SIZE: a longer header is refused. */
#define BFS_ST_MAX_HEADER 100000000ull

/* Room for a dtype code: the longest ("F8_E4M3FNUZ") plus the NUL. */
#define BFS_ST_DTYPE_MAX 12

/* Flags of bfs_st_parse(). */
enum {
	/* Accept dtype codes this module does not know (elem_size 0, byte
	 * length not checked against the shape) instead of refusing them:
	 * a reader that only moves bytes works with newer codes. */
	BFS_ST_ANY_DTYPE = 1u << 0,
};

struct bfs_st_tensor {
	const char *name;	      /* UTF-8, NUL-terminated, unique */
	char dtype[BFS_ST_DTYPE_MAX]; /* safetensors code: "F32", "BOOL" */
	uint32_t elem_size;	      /* bytes per element; 0 = unknown code */
	uint32_t ndim;		      /* 0 = scalar */
	const uint64_t *shape;	      /* ndim sizes; NULL when ndim is 0 */
	uint64_t begin, end;	      /* data_offsets: relative to data_start */
	uint64_t entry_off; /* file offset of its name, for messages */
};

struct bfs_st_meta {
	const char *key, *value; /* UTF-8, NUL-terminated; keys unique */
	uint64_t entry_off;	 /* file offset of the key */
};

/* A parsed header. One owner; free with bfs_st_free(). */
struct bfs_st_header {
	uint64_t header_len; /* N */
	uint64_t data_start; /* 8 + N */
	uint64_t file_size;  /* = data_start + the data the tensors tile */
	size_t ntensors;
	struct bfs_st_tensor *tensors; /* in header order */
	size_t nmeta;
	struct bfs_st_meta *meta; /* in header order */
	uint64_t *dims_;	  /* private: storage of the shapes */
	char *strs_;		  /* private: storage of the strings */
};

/* Why a header was refused. The caller words the message, e.g.
 * "FILE: offset OFF: tensor 'NAME': REASON". */
struct bfs_st_error {
	uint64_t offset; /* file offset of the offending byte or entry */
	char tensor[72]; /* the tensor concerned (cut at 64 bytes), or "" */
	char reason[256];
};

/* Bytes per element of safetensors dtype 'code'; 0 when unknown. */
uint32_t bfs_st_dtype_size(const char *code);

/* Bytes of a tensor of shape dims[0..ndim) and 'elem_size'-byte elements,
 * as this reader checks them: the running product elem_size x dims[0] x
 * ... must stay within 2^63 - 1 at every step (as in safetensors, which
 * refuses a shape whose product overflows even when a later size is 0).
 * 0 or -EOVERFLOW. A writer uses it to emit only headers readers accept. */
int bfs_st_shape_bytes(const uint64_t *dims, uint32_t ndim, uint32_t elem_size,
		       uint64_t *out);

/* Validate the header length N in the first 8 bytes of a file of
 * 'file_size' bytes (N in [2, BFS_ST_MAX_HEADER] and 8 + N <= file_size).
 * Returns 0 with *hlen = N, or -EBADMSG with 'err' (may be NULL) filled.
 * Cost: O(1); lets a caller read only the 8 + N header bytes. */
int bfs_st_header_len(const void *first8, uint64_t file_size, uint64_t *hlen,
		      struct bfs_st_error *err);

/* Parse and validate the header of a safetensors file of 'file_size'
 * bytes whose first 'len' bytes (at least 8 + N; the whole file will do)
 * are at 'file'. Everything the spec requires is checked: UTF-8 and
 * escapes of every string, non-negative integers without floats or
 * overflow, the schema (no unknown, missing or repeated keys), unique
 * tensor names and __metadata__ keys, string __metadata__ values, known
 * dtypes (unless flags has BFS_ST_ANY_DTYPE), byte length = product of the
 * shape × element size, offsets that tile [0, total) with no hole and no
 * overlap, file_size = 8 + N + total, nothing but 0x20 after the object.
 * Returns 0 and *out (owned by the caller), -EBADMSG with 'err' (may be
 * NULL) filled, or -ENOMEM. Cost: O(N + T log T) for T tensors. */
int bfs_st_parse(const void *file, size_t len, uint64_t file_size,
		 unsigned flags, struct bfs_st_header **out,
		 struct bfs_st_error *err);

/* Free a parsed header; accepts NULL. */
void bfs_st_free(struct bfs_st_header *h);

#endif
