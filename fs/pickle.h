/* fs/pickle: a restricted pickle VM for torch.save's data.pkl, modelled on
 * torch.load(weights_only=True) (fs/README.md: the pickle).
 *
 * It never executes anything: GLOBALs are looked up in a static allowlist,
 * REDUCE is only interpreted for the allowlisted callables. A global
 * outside the allowlist, and what REDUCE, NEWOBJ or BUILD make of it, is
 * an inert cell that is never called; where a field would be, or inside a
 * tensor's rebuild, it is refused by name. The result is the flat list of
 * tensors of the top-level container; nested dicts of tensors give dotted
 * names ({"train": {"x": t}} is field "train.x"), and the values that are
 * not tensors (metadata) are skipped, each rendered as JSON under its key
 * path. Numpy arrays and scalars are recognised by their globals, never
 * built. */
#ifndef BFS_PICKLE_H
#define BFS_PICKLE_H

#include <stddef.h>
#include <stdint.h>

#include "fs/dtype.h"
#include "fs/error.h"

/* Fields (top-level tensors) of one dataset: a pickle with more is refused
 * before any per-field memory is spent. */
#define BFS_MAX_FIELDS 4096u
/* Dicts of tensors nest at most this deep ({"a": {"b": t}}: 2). */
#define BFS_PICKLE_MAX_NEST 16

enum bfs_container {
	BFS_CONTAINER_DICT,   /* dict or OrderedDict: names are the keys */
	BFS_CONTAINER_LIST,   /* list: names "0", "1", ... */
	BFS_CONTAINER_TUPLE,  /* tuple: names "0", "1", ... */
	BFS_CONTAINER_TENSOR, /* a bare tensor: one field named "0" */
};

struct bfs_pickle_tensor {
	char *name;		      /* field name (key, or list position) */
	enum bfs_dtype dtype;	      /* tensor element type */
	char *storage_key;	      /* "0": record "<prefix>/data/0" */
	enum bfs_dtype storage_dtype; /* storage's type (UINT8 for Untyped) */
	uint64_t
	    storage_numel; /* in storage_dtype elements (bytes if Untyped) */
	uint64_t offset;   /* storage_offset, in tensor elements */
	int ndim;	   /* 0..BFS_MAX_DIMS */
	int64_t size[BFS_MAX_DIMS];
	int64_t stride[BFS_MAX_DIMS]; /* in elements */
	int requires_grad;	      /* informational */
	int is_parameter;	      /* built by _rebuild_parameter */
};

/* Bytes of JSON (keys and values) the metadata of one pickle may take;
 * a value that does not fit is named, its value omitted. */
#define BFS_PICKLE_META_MAX ((size_t)64 << 10)

/* A value beside the tensors that is not served (metadata). */
struct bfs_pickle_meta {
	const char *key;  /* key path: "classes", "train.info", "2" */
	const char *json; /* the value as JSON (fs/README.md: metadata) */
	const char *what; /* for messages: "a list", "a numpy array" */
};

struct bfs_pickle_result {
	enum bfs_container container;
	struct bfs_pickle_tensor *tensors; /* in pickle (archive) order */
	size_t n_tensors;
	/* The values beside the tensors, not served (str, int, float, None,
	 * containers of those, numpy objects, inert objects of globals
	 * outside the allowlist), in pickle order: n_meta kept (strings in
	 * meta_text), n_meta_dropped more past BFS_PICKLE_META_MAX. */
	struct bfs_pickle_meta *meta;
	size_t n_meta, n_meta_dropped;
	char *meta_text;
	/* The globals outside the allowlist the metadata holds, kept inert
	 * ("'argparse Namespace', 'posix system'", the first few), or
	 * NULL: torch.load(weights_only=True) refuses such an archive. */
	char *foreign;
};

/* The largest data.pkl a load takes (refused above, with its size). */
#define BFS_PICKLE_MAX (64u << 20)

/* Heap a load may spend when the caller sets no limit (mem_limit 0). */
#define BFS_PICKLE_MEM_DEFAULT ((size_t)256 << 20)

/* Run the restricted VM over data.pkl bytes [buf, buf+len).
 * Validates every opcode, bound, global and tensor geometry (extent within
 * the storage, numel as torch computes it, checked math). The top-level
 * object must be a dict, OrderedDict, list or tuple holding 1 to
 * BFS_MAX_FIELDS tensors (or one tensor), in dicts nested at most
 * BFS_PICKLE_MAX_NEST deep; other values beside them are metadata (a list
 * or tuple holding a tensor is refused, and so is a global outside the
 * allowlist where a field would be or in a tensor's rebuild). Heap (VM
 * objects and the result's table) is bounded by min(mem_limit or
 * BFS_PICKLE_MEM_DEFAULT, 16 MiB + 128 x len). Returns 0 and fills *out, or
 * -EINVAL/-ENOMEM/-E2BIG with 'err' naming 'label', the byte offset in the
 * pickle and the reason (e.g. the refused global "os system"). Memory: O(len);
 * no recursion. Free with bfs_pickle_result_free(). */
int bfs_pickle_load(const uint8_t *buf, size_t len, const char *label,
		    size_t mem_limit, struct bfs_pickle_result *out,
		    struct bfs_error *err);

/* Float f as the metadata's JSON writes it into buf (at most len - 1
 * bytes; 48 are enough): as Python's repr, the shortest text that reads
 * back the same ("0.1", "1.0", "1e+16"); nan and infinities, which JSON
 * has no word for, as {"__type__": "float", "__value__": "nan"}. */
void bfs_pickle_json_float(double f, char *buf, size_t len);

/* The element of dtype 'dt' in bytes b (little-endian) as the metadata's
 * JSON writes it into buf (48 bytes are enough): a number, true or false.
 * 0, or -1 for a dtype JSON has no number for (complex, float8). */
int bfs_pickle_json_scalar(enum bfs_dtype dt, const uint8_t *b, char *buf,
			   size_t len);

/* Free what bfs_pickle_load allocated; accepts a zeroed struct. */
void bfs_pickle_result_free(struct bfs_pickle_result *r);

#endif
