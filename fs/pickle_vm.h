/* fs/pickle_vm.h: private to fs/pickle.c (the VM) and fs/pickle_torch.c
 * (torch.save's objects); nothing else includes it.
 *
 * The VM's value cells and heap objects, its state, and the few calls each
 * side makes into the other. Every function taking a struct vm reports a
 * failure through FAIL() (or the allocation helpers), so the caller only
 * propagates the -errno it returns. */
#ifndef BFS_PICKLE_VM_H
#define BFS_PICKLE_VM_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/pickle.h"

#define MAX_MARKS	256
#define MAX_GLOBAL_LINE 256

enum kind {
	V_UNSET = 0, /* empty memo slot */
	V_NONE,
	V_BOOL,
	V_INT,
	V_FLOAT,
	V_GLOBAL,
	V_STR,
	V_TUPLE,
	V_LIST,
	V_DICT,
	V_STORAGE,
	V_TENSOR,
	V_OPAQUE, /* inert: a numpy object, bytes, a set, a global outside
		   * the allowlist or what it made; built by nothing, never
		   * read (struct opaque_obj) */
};

struct obj;

struct val {
	int kind;
	union {
		int64_t i;
		double f;
		struct {
			int id, dtype;
		} g;
		struct obj *o;
	} u;
};

struct obj {
	struct obj *next; /* VM allocation chain */
	int kind;
};

struct str_obj {
	struct obj h;
	size_t len;
	char s[]; /* NUL-terminated; may contain NULs (len counts) */
};

/* tuple, list, dict (pairs: v[2k] key, v[2k+1] value; n counts cells). */
struct seq_obj {
	struct obj h;
	size_t n, cap;
	struct val *v;
};

/* What an inert cell (V_OPAQUE) stands for. */
enum opaque_what {
	O_NP_ARRAY,  /* numpy.core.multiarray._reconstruct(...) */
	O_NP_SCALAR, /* numpy.core.multiarray.scalar(...) */
	O_NP_DTYPE,  /* numpy.dtype(...) */
	O_NP_OTHER,  /* numpy.ndarray(...) */
	O_BYTES,     /* _codecs.encode(...), BINBYTES */
	O_SET,	     /* EMPTY_SET + ADDITEMS */
	O_FROZENSET, /* FROZENSET */
	O_GLOBAL,    /* a global outside the allowlist, by name */
	O_OBJECT,    /* what REDUCE / NEWOBJ of an inert cell made */
	O_POISON,    /* a tensor or storage an allowlisted rebuild made
		      * from a global outside the allowlist: refused where
		      * the result meets it */
};

struct opaque_obj {
	struct obj h;
	enum opaque_what what;
	/* O_GLOBAL: itself; O_OBJECT, O_POISON: the global outside the
	 * allowlist it came from (NULL: none, a numpy object's call) */
	const struct opaque_obj *global;
	/* O_GLOBAL: its module and name as pickled (in the pickle, or in a
	 * string of the VM: both live as long as the load), not NUL-
	 * terminated, and the offset of its GLOBAL opcode */
	const char *mod, *name;
	size_t mlen, nlen, at;
	const char *made; /* O_POISON: "a tensor", "a storage", ... */
	/* What a numpy scalar's value is read from, never trusted beyond
	 * it: O_NP_DTYPE its descr ("f8") and byte order (BUILD state: '<',
	 * '>', '|'), O_BYTES its latin-1 text (_codecs.encode), O_NP_SCALAR
	 * the two (NULL when they are not such cells). */
	const struct str_obj *str;
	char order;
	const struct opaque_obj *dtype, *data;
};

/* A storage (persistent id) and a tensor (an allowlisted rebuild). */
struct storage_obj {
	struct obj h;
	enum bfs_dtype dtype;
	int untyped;
	uint64_t numel;
	struct str_obj *key;
};

struct tensor_obj {
	struct obj h;
	struct bfs_pickle_tensor t; /* name, storage_key unset */
	struct storage_obj *st;
	size_t at;     /* pickle offset of its rebuild, for messages */
	int bad_numel; /* its numel overflows: torch refuses it */
};

struct vm {
	const uint8_t *p;
	size_t len, pos, op; /* op = offset of the current opcode */
	const char *label;
	struct bfs_error *err;
	struct val *stack;
	size_t sp, stack_cap;
	size_t marks[MAX_MARKS];
	int nmarks;
	struct val *memo;
	size_t memo_cap, memo_len;
	struct obj *objs;
	size_t mem, mem_limit;
	int alloc_rc; /* why the last allocation failed: -ENOMEM or -E2BIG */
	/* The first tensor built whose numel overflows (fs/pickle_torch.c
	 * refuses it once the result names it), or NULL. */
	const void *bad_numel;
};

#define FAIL(vm, ...)                                                          \
	bfs_error_set((vm)->err, -EINVAL, (vm)->label, (vm)->op, __VA_ARGS__)

/* ---- the VM (fs/pickle.c) ---- */

/* Record "out of memory" in the VM's error and vm->alloc_rc; returns
 * -ENOMEM. */
int bfs_pickle_nomem(struct vm *vm);

/* Charge 'bytes' to the VM's heap budget: 0, or -E2BIG (error recorded). */
int bfs_pickle_charge(struct vm *vm, size_t bytes);

/* A zeroed heap object of 'size' bytes and 'kind', owned by the VM (freed
 * when the load ends); NULL with vm->alloc_rc set when it cannot be had. */
void *bfs_pickle_new_obj(struct vm *vm, int kind, size_t size);

/* An empty tuple, list or dict ('kind') with room for 'n' cells; NULL with
 * vm->alloc_rc set on failure. */
struct seq_obj *bfs_pickle_new_seq(struct vm *vm, int kind, size_t n);

/* Push 'v': 0, or -E2BIG (stack limit) / -ENOMEM. */
int bfs_pickle_push(struct vm *vm, struct val v);

/* Pop one value above the innermost MARK into *out: 0 or -EINVAL. */
int bfs_pickle_pop(struct vm *vm, struct val *out);

/* ---- torch.save's objects (fs/pickle_torch.c) ---- */

/* Push the allowlisted global "mod name" (lengths mlen, nlen; not
 * NUL-terminated), or refuse it by name: 0 or -errno. */
int bfs_pickle_resolve_global(struct vm *vm, const char *mod, size_t mlen,
			      const char *name, size_t nlen);

/* BINPERSID: pop a ('storage', type, key, location, numel) id and push the
 * storage it names. 0 or -errno. */
int bfs_pickle_op_persid(struct vm *vm);

/* REDUCE: pop (callable, args) and push the result of an allowlisted
 * callable (tensor rebuilds, OrderedDict(), torch.Size), or an inert cell
 * for a call of one (a global outside the allowlist). 0 or -errno. */
int bfs_pickle_op_reduce(struct vm *vm);

/* NEWOBJ (kwargs 0) / NEWOBJ_EX (kwargs 1): pop (cls, args[, kwargs]);
 * only an inert cell may be instantiated, into an inert cell. 0 or
 * -errno. */
int bfs_pickle_op_newobj(struct vm *vm, int kwargs);

/* BUILD: pop a state and check it against the object below (ignored on a
 * dict and on an inert cell, must be empty on a tensor). 0 or -errno. */
int bfs_pickle_op_build(struct vm *vm);

/* Push a new inert cell 'what' coming from 'global' (may be NULL).
 * 0 or -errno. */
int bfs_pickle_push_opaque(struct vm *vm, enum opaque_what what,
			   const struct opaque_obj *global);

/* ---- metadata as JSON (fs/pickle_json.c) ---- */

/* v as JSON into buf[0..cap) (not NUL-terminated), its length into *len:
 * 0, -EINVAL (a dict key that is not a str, int, float, bool or None),
 * -ELOOP (nested deeper than BFS_PICKLE_MAX_NEST) or -ENOSPC (more than
 * cap bytes). Cost: O(cells looked at), at most O(cap). */
int bfs_pickle_json(struct val v, char *buf, size_t cap, size_t *len);

/* The Python type of v as "__type__" says it ("argparse.Namespace",
 * "numpy.ndarray", "list"), into buf when it must be built. */
const char *bfs_pickle_type_name(struct val v, char *buf, size_t len);

/* ---- the result (fs/pickle_result.c) ---- */

/* The object 'top' left at STOP into *r (tensors of a dict, list, tuple, or
 * one tensor; the metadata beside them), checked and charged to the
 * budget. 0 or -errno; on failure *r may be half-built (the caller frees
 * it with bfs_pickle_result_free). */
int bfs_pickle_build_result(struct vm *vm, struct val top,
			    struct bfs_pickle_result *r);

/* The global outside the allowlist that v is, or came from (an inert
 * object made from it, a poisoned tensor); NULL for anything else. */
const struct opaque_obj *bfs_pickle_foreign(struct val v);

/* The name of allowlisted global v (V_GLOBAL) into buf, as Python writes
 * it ("torch.float32", "collections.OrderedDict"). Returns buf. */
char *bfs_pickle_allowed_name(struct val v, char *buf, size_t len);

/* The name of global cell 'g' into buf (at most len - 1 bytes): module and
 * name joined by 'sep' (' ' as pickled, '.' as Python writes it), bytes
 * that are not printable ASCII, '"' and '\\' as '?'. Returns buf. */
char *bfs_pickle_global_name(const struct opaque_obj *g, char sep, char *buf,
			     size_t len);

/* ---- small helpers ---- */

static inline int push_obj(struct vm *vm, void *o)
{
	struct val v = {.kind = ((struct obj *)o)->kind, .u.o = o};
	return bfs_pickle_push(vm, v);
}

/* Push a freshly made object; NULL means its allocation failed. */
static inline int push_new(struct vm *vm, void *o)
{
	return o ? push_obj(vm, o) : vm->alloc_rc;
}

/* Values above the innermost MARK. */
static inline size_t mark_base(struct vm *vm)
{
	return vm->nmarks ? vm->marks[vm->nmarks - 1] : 0;
}

/* The kind of v with its article, for messages: "an int", "None". */
static inline const char *kind_name(struct val v)
{
	static const char *const names[] = {
	    "an unset value", "None",	  "a bool",    "an int", "a float",
	    "a global",	      "a str",	  "a tuple",   "a list", "a dict",
	    "a storage",      "a tensor", "an object",
	};

	return names[v.kind];
}

static inline int is_container(struct val v)
{
	return v.kind == V_TUPLE || v.kind == V_LIST || v.kind == V_DICT;
}

static inline struct str_obj *as_str(struct val v)
{
	return v.kind == V_STR ? (struct str_obj *)v.u.o : NULL;
}

static inline struct seq_obj *as_seq(struct val v, int kind)
{
	return v.kind == kind ? (struct seq_obj *)v.u.o : NULL;
}

#endif
