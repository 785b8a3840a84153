/* fs/pickle_torch: what the objects of torch.save's data.pkl mean, for the
 * VM of fs/pickle.c (fs/README.md: the pickle): the allowlisted globals,
 * persistent ids (storages), tensor rebuilds, REDUCE, NEWOBJ and BUILD,
 * and the inert cells of everything else. The result (fields and
 * metadata) is fs/pickle_result.c.
 *
 * Security invariants: GLOBAL/STACK_GLOBAL resolve through fixed_globals[]
 * and the dtype table (torch.<T>Storage, torch.<dtype>); any other global
 * is an inert cell (O_GLOBAL) that keeps its name and is never resolved,
 * and REDUCE, NEWOBJ and BUILD of an inert cell make inert cells: nothing
 * is ever called. REDUCE only interprets the allowlisted callables, type-
 * and arity-checked; one whose arguments hold an inert cell of a global
 * outside the allowlist makes a poisoned cell (O_POISON) instead, refused
 * by fs/pickle_result.c wherever it is. BUILD is a no-op on a dict (a
 * state_dict's '_metadata') and on an inert cell, and refused with real
 * state on a tensor. Tensors are validated at construction: ndim <=
 * BFS_MAX_DIMS, sizes/strides/offset >= 0, the extent lies inside the
 * storage (bytes, checked u64 math), hooks and metadata empty.
 * No state of its own: everything lives in the caller's struct vm. */
#include "fs/pickle_vm.h"
#include "fs/size.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The allowlist. Checklist when adding one: its REDUCE in
 * bfs_pickle_op_reduce(). */
enum gid {
	G_REBUILD_V2 = 1,
	G_REBUILD_V3,
	G_REBUILD_PARAM,
	G_REBUILD_PARAM_STATE,
	G_FROM_TYPE_V2,
	G_ODICT,
	G_SIZE,
	G_TENSOR_CLASS,
	G_PARAM_CLASS,
	G_STORAGE, /* dtype = storage element type; UntypedStorage: UINT8 */
	G_UNTYPED_STORAGE,
	G_DTYPE, /* torch.<dtype> */
	/* Inert: their REDUCE makes an opaque object, runs nothing. */
	G_NP_ARRAY,  /* numpy.core.multiarray._reconstruct */
	G_NP_SCALAR, /* numpy.core.multiarray.scalar */
	G_NP_DTYPE,  /* numpy.dtype (a scalar's dtype) */
	G_NP_OTHER,  /* numpy.ndarray (an array's argument) */
	G_BYTES,     /* _codecs.encode (bytes, in pickle protocol 2) */
};

/* ---- globals ---- */

struct global {
	const char *module, *name;
	int id;
};

static const struct global fixed_globals[] = {
    {"torch._utils", "_rebuild_tensor_v2", G_REBUILD_V2},
    {"torch._utils", "_rebuild_tensor_v3", G_REBUILD_V3},
    {"torch._utils", "_rebuild_parameter", G_REBUILD_PARAM},
    {"torch._utils", "_rebuild_parameter_with_state", G_REBUILD_PARAM_STATE},
    {"torch._tensor", "_rebuild_from_type_v2", G_FROM_TYPE_V2},
    {"collections", "OrderedDict", G_ODICT},
    {"torch", "Size", G_SIZE},
    {"torch", "Tensor", G_TENSOR_CLASS},
    {"torch.nn.parameter", "Parameter", G_PARAM_CLASS},
    {"torch", "UntypedStorage", G_UNTYPED_STORAGE},
    /* numpy objects pickled beside tensors (numpy 1 and 2 module names):
     * recognised, never built */
    {"numpy.core.multiarray", "_reconstruct", G_NP_ARRAY},
    {"numpy._core.multiarray", "_reconstruct", G_NP_ARRAY},
    {"numpy.core.multiarray", "scalar", G_NP_SCALAR},
    {"numpy._core.multiarray", "scalar", G_NP_SCALAR},
    {"numpy", "ndarray", G_NP_OTHER},
    {"numpy", "dtype", G_NP_DTYPE},
    {"_codecs", "encode", G_BYTES},
};

int bfs_pickle_push_opaque(struct vm *vm, enum opaque_what what,
			   const struct opaque_obj *global)
{
	struct opaque_obj *o = bfs_pickle_new_obj(vm, V_OPAQUE, sizeof(*o));

	if (!o)
		return vm->alloc_rc;
	o->what = what;
	o->global = global;
	return push_obj(vm, o);
}

/* Resolve "module name", or push it as an inert cell that keeps its name
 * (a global outside the allowlist: never resolved, never called). */
int bfs_pickle_resolve_global(struct vm *vm, const char *mod, size_t mlen,
			      const char *name, size_t nlen)
{
	struct val v = {.kind = V_GLOBAL};
	struct opaque_obj *o;

	for (size_t i = 0; i < sizeof(fixed_globals) / sizeof(*fixed_globals);
	     i++) {
		const struct global *g = &fixed_globals[i];
		if (strlen(g->module) == mlen &&
		    !memcmp(g->module, mod, mlen) && strlen(g->name) == nlen &&
		    !memcmp(g->name, name, nlen)) {
			v.u.g.id = g->id;
			v.u.g.dtype =
			    g->id == G_UNTYPED_STORAGE ? BFS_DT_UINT8 : 0;
			return bfs_pickle_push(vm, v);
		}
	}
	if (mlen == 5 && !memcmp(mod, "torch", 5) && nlen < 64 &&
	    !memchr(name, 0, nlen)) {
		char nm[64];
		memcpy(nm, name, nlen);
		nm[nlen] = 0;
		v.u.g.dtype = bfs_dtype_from_storage(nm);
		v.u.g.id = G_STORAGE;
		if (!v.u.g.dtype) {
			v.u.g.dtype = bfs_dtype_from_torch(nm);
			v.u.g.id = G_DTYPE;
		}
		if (v.u.g.dtype)
			return bfs_pickle_push(vm, v);
	}
	o = bfs_pickle_new_obj(vm, V_OPAQUE, sizeof(*o));
	if (!o)
		return vm->alloc_rc;
	o->what = O_GLOBAL;
	o->global = o;
	o->mod = mod;
	o->mlen = mlen;
	o->name = name;
	o->nlen = nlen;
	o->at = vm->op;
	return push_obj(vm, o);
}

char *bfs_pickle_global_name(const struct opaque_obj *g, char sep, char *buf,
			     size_t len)
{
	size_t k = 0;

	for (size_t i = 0; i < g->mlen + g->nlen + 1 && k + 1 < len; i++) {
		char c = i < g->mlen	? g->mod[i]
			 : i == g->mlen ? sep
					: g->name[i - g->mlen - 1];
		buf[k++] =
		    c >= 0x20 && c < 0x7f && c != '"' && c != '\\' ? c : '?';
	}
	if (len)
		buf[k] = 0;
	return buf;
}

char *bfs_pickle_allowed_name(struct val v, char *buf, size_t len)
{
	const struct bfs_dtype_info *di = bfs_dtype_info(v.u.g.dtype);

	snprintf(buf, len, "?");
	if (v.u.g.id == G_DTYPE && di)
		snprintf(buf, len, "torch.%s", di->torch_name);
	else if (v.u.g.id == G_STORAGE && di && di->storage)
		snprintf(buf, len, "torch.%s", di->storage);
	else
		for (size_t i = 0;
		     i < sizeof(fixed_globals) / sizeof(*fixed_globals); i++)
			if (fixed_globals[i].id == v.u.g.id) {
				snprintf(buf, len, "%s.%s",
					 fixed_globals[i].module,
					 fixed_globals[i].name);
				break;
			}
	return buf;
}

const struct opaque_obj *bfs_pickle_foreign(struct val v)
{
	const struct opaque_obj *o;

	if (v.kind != V_OPAQUE)
		return NULL;
	o = (const struct opaque_obj *)v.u.o;
	return o->what == O_GLOBAL || o->what == O_OBJECT || o->what == O_POISON
		   ? o->global
		   : NULL;
}

/* Cells an argument is looked through for a global outside the allowlist
 * (the dims of a size tuple: more are refused by the rebuild anyway). */
#define TAINT_CELLS BFS_MAX_DIMS

/* The global outside the allowlist that a value of the arguments 'a' of
 * an allowlisted rebuild relies on: one of them, or a cell of a container
 * one of them is (a storage id, a size tuple); NULL when none. */
static const struct opaque_obj *tainted(const struct seq_obj *a)
{
	const struct opaque_obj *g = NULL;

	for (size_t i = 0; a && i < a->n && i < TAINT_CELLS && !g; i++) {
		const struct seq_obj *c = NULL;

		g = bfs_pickle_foreign(a->v[i]);
		if (is_container(a->v[i]))
			c = (const struct seq_obj *)a->v[i].u.o;
		for (size_t j = 0; c && j < c->n && j < TAINT_CELLS && !g; j++)
			g = bfs_pickle_foreign(c->v[j]);
	}
	return g;
}

/* What an allowlisted rebuild given a global outside the allowlist makes:
 * a poisoned cell, refused wherever the result meets it. */
static int poison(struct vm *vm, const struct opaque_obj *g, const char *made)
{
	int rc = bfs_pickle_push_opaque(vm, O_POISON, g);

	if (!rc)
		((struct opaque_obj *)vm->stack[vm->sp - 1].u.o)->made = made;
	return rc;
}

/* ---- persistent ids: ('storage', <T>Storage, key, location, numel) ---- */

int bfs_pickle_op_persid(struct vm *vm)
{
	struct val pid = {0};
	struct seq_obj *t;
	struct str_obj *tag, *key, *loc;
	struct storage_obj *st;
	int rc = bfs_pickle_pop(vm, &pid);

	if (rc)
		return rc;
	t = as_seq(pid, V_TUPLE);
	if (t && tainted(t))
		return poison(vm, tainted(t), "a storage");
	if (!t || t->n != 5)
		return FAIL(vm, "persistent id is not a 5-tuple");
	tag = as_str(t->v[0]);
	key = as_str(t->v[2]);
	loc = as_str(t->v[3]);
	if (!tag || strcmp(tag->s, "storage") != 0 || tag->len != 7)
		return FAIL(vm, "persistent id is not a 'storage' id");
	if (t->v[1].kind != V_GLOBAL || (t->v[1].u.g.id != G_STORAGE &&
					 t->v[1].u.g.id != G_UNTYPED_STORAGE))
		return FAIL(vm,
			    "persistent id: storage type is %s, not a "
			    "torch storage class",
			    kind_name(t->v[1]));
	if (!key || key->len == 0 || key->len != strlen(key->s) ||
	    strchr(key->s, '/'))
		return FAIL(vm, "persistent id: bad storage key");
	if (!loc)
		return FAIL(vm, "storage '%s': location is not a string",
			    key->s);
	if (strcmp(loc->s, "meta") == 0)
		return FAIL(vm,
			    "storage '%s' is on the 'meta' device (no "
			    "data): refused",
			    key->s);
	if (t->v[4].kind != V_INT || t->v[4].u.i < 0)
		return FAIL(vm, "storage '%s': bad element count", key->s);
	st = bfs_pickle_new_obj(vm, V_STORAGE, sizeof(*st));
	if (!st)
		return vm->alloc_rc;
	st->dtype = (enum bfs_dtype)t->v[1].u.g.dtype;
	st->untyped = t->v[1].u.g.id == G_UNTYPED_STORAGE;
	st->numel = (uint64_t)t->v[4].u.i;
	st->key = key;
	return push_obj(vm, st);
}

/* ---- tensors ---- */

/* An empty dict, an empty OrderedDict or None (hooks, state, metadata). */
static int is_empty(struct val v)
{
	struct seq_obj *d = as_seq(v, V_DICT);
	return v.kind == V_NONE || (d && d->n == 0);
}

/* Tuple of ints into dims[]; returns ndim or -1. */
static int int_tuple(struct val v, int64_t *dims)
{
	struct seq_obj *t = as_seq(v, V_TUPLE);

	if (!t || t->n > BFS_MAX_DIMS)
		return -1;
	for (size_t i = 0; i < t->n; i++) {
		if (t->v[i].kind != V_INT || t->v[i].u.i < 0)
			return -1;
		dims[i] = t->v[i].u.i;
	}
	return (int)t->n;
}

/* _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks
 * [, metadata]) and v3(..., hooks, dtype [, metadata]). */
static int rebuild_tensor(struct vm *vm, struct seq_obj *a, int v3)
{
	size_t fixed = v3 ? 7 : 6;
	struct tensor_obj *o;
	struct storage_obj *st;
	struct val meta;
	int64_t off;
	uint64_t storage_bytes, need, numel;
	const struct bfs_dtype_info *di, *si;

	if (!a || (a->n != fixed && a->n != fixed + 1))
		return FAIL(vm, "_rebuild_tensor_v%d: wrong argument count",
			    v3 ? 3 : 2);
	if (a->v[0].kind != V_STORAGE)
		return FAIL(vm, "tensor storage is %s", kind_name(a->v[0]));
	st = (struct storage_obj *)a->v[0].u.o;
	o = bfs_pickle_new_obj(vm, V_TENSOR, sizeof(*o));
	if (!o)
		return vm->alloc_rc;
	o->st = st;
	o->t.storage_dtype = st->dtype;
	o->t.storage_numel = st->numel;
	o->t.dtype = st->dtype;
	if (v3) {
		if (a->v[6].kind != V_GLOBAL || a->v[6].u.g.id != G_DTYPE)
			return FAIL(vm, "_rebuild_tensor_v3: dtype is %s",
				    kind_name(a->v[6]));
		o->t.dtype = (enum bfs_dtype)a->v[6].u.g.dtype;
		if (!st->untyped && o->t.dtype != st->dtype)
			return FAIL(vm, "tensor dtype differs from its typed "
					"storage");
	} else if (st->untyped) {
		return FAIL(vm, "_rebuild_tensor_v2 over an UntypedStorage "
				"(dtype unknown)");
	}
	if (a->v[1].kind != V_INT || a->v[1].u.i < 0)
		return FAIL(vm, "tensor storage offset is not an int >= 0");
	off = a->v[1].u.i;
	o->t.offset = (uint64_t)off;
	o->t.ndim = int_tuple(a->v[2], o->t.size);
	if (o->t.ndim < 0)
		return FAIL(vm, "tensor size is not a tuple of <= %d ints >= 0",
			    BFS_MAX_DIMS);
	if (int_tuple(a->v[3], o->t.stride) != o->t.ndim)
		return FAIL(vm, "tensor stride is not a tuple of %d ints >= 0",
			    o->t.ndim);
	if (a->v[4].kind != V_BOOL)
		return FAIL(vm, "tensor requires_grad is not a bool");
	o->t.requires_grad = (int)a->v[4].u.i;
	if (!as_seq(a->v[5], V_DICT) || !is_empty(a->v[5]))
		return FAIL(vm, "tensor backward hooks must be an empty dict");
	meta = a->n > fixed ? a->v[fixed] : (struct val){.kind = V_NONE};
	if (!is_empty(meta))
		return FAIL(vm,
			    "tensor metadata (conj/neg bit) is not "
			    "supported: save t.resolve_conj().resolve_neg()");
	di = bfs_dtype_info(o->t.dtype);
	si = bfs_dtype_info(st->dtype);
	if (!di || !si || bfs_size_mul(st->numel, si->size, &storage_bytes) ||
	    bfs_size_extent(o->t.size, o->t.stride, o->t.ndim, o->t.offset,
			    di->size, &need) ||
	    need > storage_bytes)
		return FAIL(vm,
			    "tensor extent (offset %lld, %d dims) exceeds "
			    "storage '%s' of %llu elements",
			    (long long)off, o->t.ndim, st->key->s,
			    (unsigned long long)st->numel);
	/* torch refuses the tensor when it is built; the refusal waits for
	 * the result, where the field's name is known (field_ok). */
	o->at = vm->op;
	o->bad_numel = bfs_size_numel(o->t.size, o->t.ndim, &numel) < 0;
	if (o->bad_numel && !vm->bad_numel)
		vm->bad_numel = o;
	return push_obj(vm, o);
}

static struct tensor_obj *copy_tensor(struct vm *vm, struct val v)
{
	struct tensor_obj *o;

	if (v.kind != V_TENSOR)
		return NULL;
	o = bfs_pickle_new_obj(vm, V_TENSOR, sizeof(*o));
	if (o) {
		const struct tensor_obj *from = (struct tensor_obj *)v.u.o;

		o->t = from->t;
		o->st = from->st;
		o->at = from->at;
		o->bad_numel = from->bad_numel;
	}
	return o;
}

/* Tensor-subclass state: None, {} or a (dict-or-None, slots) pair. */
static int state_empty(struct val v)
{
	struct seq_obj *t = as_seq(v, V_TUPLE);

	if (t && t->n == 2)
		return is_empty(t->v[0]) && is_empty(t->v[1]);
	return is_empty(v);
}

/* _rebuild_parameter(data, rg, hooks), ..._with_state(..., state). */
static int rebuild_param(struct vm *vm, struct seq_obj *a, int with_state)
{
	size_t n = with_state ? 4 : 3;
	struct tensor_obj *o;

	if (!a || a->n != n)
		return FAIL(vm, "_rebuild_parameter: wrong argument count");
	if (a->v[1].kind != V_BOOL || !as_seq(a->v[2], V_DICT) ||
	    !is_empty(a->v[2]) || (with_state && !state_empty(a->v[3])))
		return FAIL(vm, "_rebuild_parameter: bad requires_grad, hooks "
				"or state");
	o = copy_tensor(vm, a->v[0]);
	if (!o)
		return vm->err->msg[0] ? vm->alloc_rc
				       : FAIL(vm, "_rebuild_parameter of %s",
					      kind_name(a->v[0]));
	o->t.is_parameter = 1;
	o->t.requires_grad = (int)a->v[1].u.i;
	return push_obj(vm, o);
}

/* _rebuild_from_type_v2(func, type, args, state), restricted. */
static int rebuild_from_type(struct vm *vm, struct seq_obj *a)
{
	struct seq_obj *args;
	int fn;

	if (!a || a->n != 4)
		return FAIL(vm, "_rebuild_from_type_v2: wrong argument count");
	fn = a->v[0].kind == V_GLOBAL ? a->v[0].u.g.id : 0;
	if (fn != G_REBUILD_V2 && fn != G_REBUILD_V3)
		return FAIL(vm, "_rebuild_from_type_v2: function is not a "
				"tensor rebuild function");
	if (a->v[1].kind != V_GLOBAL || (a->v[1].u.g.id != G_TENSOR_CLASS &&
					 a->v[1].u.g.id != G_PARAM_CLASS))
		return FAIL(vm,
			    "_rebuild_from_type_v2: type is not torch.Tensor "
			    "or Parameter");
	if (!state_empty(a->v[3]))
		return FAIL(vm, "tensor subclass state (Python attributes) is "
				"not supported");
	args = as_seq(a->v[2], V_TUPLE);
	return rebuild_tensor(vm, args, fn == G_REBUILD_V3);
}

static const struct opaque_obj *as_opaque(struct val v, enum opaque_what what)
{
	const struct opaque_obj *o = (const struct opaque_obj *)v.u.o;

	return v.kind == V_OPAQUE && o->what == what ? o : NULL;
}

/* REDUCE of a numpy global or _codecs.encode: an inert cell that keeps
 * what a scalar's value is read from (a dtype's descr, the latin-1 text
 * of bytes, a scalar's two). */
static int numpy_reduce(struct vm *vm, int id, const struct seq_obj *a)
{
	static const enum opaque_what whats[] = {
	    [G_NP_ARRAY] = O_NP_ARRAY, [G_NP_SCALAR] = O_NP_SCALAR,
	    [G_NP_DTYPE] = O_NP_DTYPE, [G_NP_OTHER] = O_NP_OTHER,
	    [G_BYTES] = O_BYTES,
	};
	const struct str_obj *enc = a->n == 2 ? as_str(a->v[1]) : NULL;
	struct opaque_obj *o;
	int rc = bfs_pickle_push_opaque(vm, whats[id], NULL);

	if (rc)
		return rc;
	o = (struct opaque_obj *)vm->stack[vm->sp - 1].u.o;
	o->order = '|';
	if (id == G_NP_DTYPE && a->n >= 1)
		o->str = as_str(a->v[0]);
	if (id == G_BYTES && enc && !strcmp(enc->s, "latin1"))
		o->str = as_str(a->v[0]);
	if (id == G_NP_SCALAR && a->n == 2) {
		o->dtype = as_opaque(a->v[0], O_NP_DTYPE);
		o->data = as_opaque(a->v[1], O_BYTES);
	}
	return 0;
}

/* An inert cell called or instantiated: an inert object (O_OBJECT) that
 * keeps the global outside the allowlist it came from. */
static int inert_call(struct vm *vm, struct val fn)
{
	return bfs_pickle_push_opaque(vm, O_OBJECT, bfs_pickle_foreign(fn));
}

/* REDUCE: only the allowlisted callables, each type-checked; a call of an
 * inert cell is inert. */
int bfs_pickle_op_reduce(struct vm *vm)
{
	struct val fn = {0}, args = {0};
	struct seq_obj *a;
	int rc = bfs_pickle_pop(vm, &args);

	if (!rc)
		rc = bfs_pickle_pop(vm, &fn);
	if (rc)
		return rc;
	a = as_seq(args, V_TUPLE);
	if (fn.kind == V_OPAQUE && a)
		return inert_call(vm, fn);
	if (fn.kind != V_GLOBAL || !a)
		return FAIL(vm, "REDUCE of %s with %s as arguments: refused",
			    kind_name(fn), kind_name(args));
	switch (fn.u.g.id) {
	case G_NP_ARRAY:
	case G_NP_SCALAR:
	case G_NP_DTYPE:
	case G_NP_OTHER:
	case G_BYTES:
		return numpy_reduce(vm, fn.u.g.id, a);
	case G_REBUILD_V2:
	case G_REBUILD_V3:
	case G_REBUILD_PARAM:
	case G_REBUILD_PARAM_STATE:
	case G_FROM_TYPE_V2:
	case G_ODICT:
	case G_SIZE:
		break;
	default:
		return FAIL(vm, "REDUCE: global is not callable here");
	}
	if (tainted(a))
		return poison(vm, tainted(a),
			      fn.u.g.id == G_SIZE    ? "a torch.Size"
			      : fn.u.g.id == G_ODICT ? "an OrderedDict"
						     : "a tensor");
	switch (fn.u.g.id) {
	case G_REBUILD_V2:
	case G_REBUILD_V3:
		return rebuild_tensor(vm, a, fn.u.g.id == G_REBUILD_V3);
	case G_REBUILD_PARAM:
	case G_REBUILD_PARAM_STATE:
		return rebuild_param(vm, a, fn.u.g.id == G_REBUILD_PARAM_STATE);
	case G_FROM_TYPE_V2:
		return rebuild_from_type(vm, a);
	case G_ODICT:
		if (a->n != 0)
			return FAIL(vm, "OrderedDict() with arguments");
		return push_new(vm, bfs_pickle_new_seq(vm, V_DICT, 0));
	case G_SIZE:
		if (a->n != 1 ||
		    int_tuple(a->v[0], (int64_t[BFS_MAX_DIMS]){0}) < 0)
			return FAIL(vm, "torch.Size() of a non-size");
		return bfs_pickle_push(vm, a->v[0]);
	}
	return FAIL(vm, "REDUCE: global is not callable here");
}

/* NEWOBJ / NEWOBJ_EX: cls.__new__(cls, *args[, **kwargs]), only of an
 * inert cell (a class outside the allowlist: argparse.Namespace, a class
 * of the user's), into an inert object. */
int bfs_pickle_op_newobj(struct vm *vm, int kwargs)
{
	struct val cls = {0}, args = {0}, kw = {.kind = V_DICT};
	int rc = kwargs ? bfs_pickle_pop(vm, &kw) : 0;

	if (!rc)
		rc = bfs_pickle_pop(vm, &args);
	if (!rc)
		rc = bfs_pickle_pop(vm, &cls);
	if (rc)
		return rc;
	if (cls.kind != V_OPAQUE || args.kind != V_TUPLE || kw.kind != V_DICT)
		return FAIL(vm, "NEWOBJ%s of %s with %s as arguments: refused",
			    kwargs ? "_EX" : "", kind_name(cls),
			    kind_name(args));
	return inert_call(vm, cls);
}

/* BUILD: on a tensor only with empty state; on a dict (an OrderedDict
 * state_dict carries '_metadata' as instance state) with a dict, None or
 * inert state, which is ignored, as torch's weights_only loader does; on
 * an inert cell with any state, never read. A tensor given state from a
 * global outside the allowlist is poisoned. */
int bfs_pickle_op_build(struct vm *vm)
{
	struct val state = {0}, *inst;
	const struct opaque_obj *g;
	int rc = bfs_pickle_pop(vm, &state);

	if (rc)
		return rc;
	if (vm->sp <= mark_base(vm))
		return FAIL(vm, "stack underflow (BUILD)");
	inst = &vm->stack[vm->sp - 1];
	if (inst->kind == V_DICT &&
	    (state.kind == V_NONE || state.kind == V_DICT ||
	     state.kind == V_OPAQUE))
		return 0;
	if (inst->kind == V_TENSOR && state_empty(state))
		return 0;
	if (inst->kind == V_OPAQUE) { /* an inert object's state: not read, */
		struct opaque_obj *o = (struct opaque_obj *)inst->u.o;
		const struct seq_obj *t = as_seq(state, V_TUPLE);
		const struct str_obj *order =
		    t && t->n >= 2 ? as_str(t->v[1]) : NULL;

		if (o->what == O_NP_DTYPE && order && order->len == 1)
			o->order = order->s[0]; /* but a dtype's byte order */
		return 0;
	}
	g = bfs_pickle_foreign(state);
	if (!g && is_container(state))
		g = tainted((const struct seq_obj *)state.u.o);
	if (inst->kind == V_TENSOR && g) {
		vm->sp--;
		return poison(vm, g, "a tensor");
	}
	return FAIL(vm, "BUILD of %s with %s as state: refused",
		    kind_name(*inst), kind_name(state));
}
