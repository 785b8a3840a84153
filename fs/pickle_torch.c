/* fs/pickle_torch: what the objects of torch.save's data.pkl mean, for the
 * VM of fs/pickle.c (fs/README.md: the pickle): the allowlisted globals,
 * persistent ids (storages), tensor rebuilds, REDUCE and BUILD, and the
 * result (the top-level container's tensors).
 *
 * Security invariants: GLOBAL/STACK_GLOBAL resolve through fixed_globals[]
 * and the dtype table (torch.<T>Storage, torch.<dtype>) or are refused by
 * name; REDUCE only interprets the allowlisted callables, type- and
 * arity-checked; BUILD is a no-op on a dict (a state_dict's '_metadata')
 * and refused with real state on a tensor. Tensors are validated at
 * construction: ndim <= BFS_MAX_DIMS, sizes/strides/offset >= 0, the
 * extent lies inside the storage (bytes, checked u64 math), hooks and
 * metadata empty.
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
	G_NP_OTHER,  /* numpy.ndarray, numpy.dtype (arguments of the two) */
	G_BYTES,     /* _codecs.encode (bytes, in pickle protocol 2) */
};

/* What an opaque object stands for (V_OPAQUE). */
enum opaque_what { O_NP_ARRAY, O_NP_SCALAR, O_OTHER };

struct opaque_obj {
	struct obj h;
	enum opaque_what what;
};

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
	size_t at;	/* pickle offset of its rebuild, for messages */
	bool bad_numel; /* its numel overflows: torch refuses it */
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
    {"numpy", "dtype", G_NP_OTHER},
    {"_codecs", "encode", G_BYTES},
};

/* Resolve "module name" or refuse it by name (escaped for the message). */
int bfs_pickle_resolve_global(struct vm *vm, const char *mod, size_t mlen,
			      const char *name, size_t nlen)
{
	struct val v = {.kind = V_GLOBAL};
	char shown[2 * MAX_GLOBAL_LINE + 2];
	size_t k = 0;

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
	for (size_t i = 0; i < mlen + nlen + 1 && k < sizeof(shown) - 1; i++) {
		char c = i < mlen    ? mod[i]
			 : i == mlen ? ' '
				     : name[i - mlen - 1];
		shown[k++] = (c >= 0x20 && c < 0x7f) ? c : '?';
	}
	shown[k] = 0;
	return FAIL(vm,
		    "refused global '%s' (batchfs only allows the "
		    "tensor-rebuild globals of torch.save)",
		    shown);
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

/* REDUCE: only the allowlisted callables, each type-checked. */
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
	if (fn.kind != V_GLOBAL || !a)
		return FAIL(vm, "REDUCE of %s with %s as arguments: refused",
			    kind_name(fn), kind_name(args));
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
	case G_NP_ARRAY:
	case G_NP_SCALAR:
	case G_NP_OTHER:
	case G_BYTES: {
		struct opaque_obj *o =
		    bfs_pickle_new_obj(vm, V_OPAQUE, sizeof(*o));

		if (!o)
			return vm->alloc_rc;
		o->what = fn.u.g.id == G_NP_ARRAY    ? O_NP_ARRAY
			  : fn.u.g.id == G_NP_SCALAR ? O_NP_SCALAR
						     : O_OTHER;
		return push_obj(vm, o);
	}
	}
	return FAIL(vm, "REDUCE: global is not callable here");
}

/* BUILD: on a tensor only with empty state; on a dict (an OrderedDict
 * state_dict carries '_metadata' as instance state) with a dict or None
 * state, which is ignored, as torch's weights_only loader does. */
int bfs_pickle_op_build(struct vm *vm)
{
	struct val state = {0}, *inst;
	int rc = bfs_pickle_pop(vm, &state);

	if (rc)
		return rc;
	if (vm->sp <= mark_base(vm))
		return FAIL(vm, "stack underflow (BUILD)");
	inst = &vm->stack[vm->sp - 1];
	if (inst->kind == V_DICT &&
	    (state.kind == V_NONE || state.kind == V_DICT))
		return 0;
	if (inst->kind == V_TENSOR && state_empty(state))
		return 0;
	if (inst->kind == V_OPAQUE) /* a numpy object's state: not read */
		return 0;
	return FAIL(vm, "BUILD of %s with %s as state: refused",
		    kind_name(*inst), kind_name(state));
}

/* ---- the result ---- */

/* Append tensor 'tv' (checked by field_ok) named 'name' to the result. */
static int add_tensor(struct vm *vm, struct bfs_pickle_result *r, struct val tv,
		      const char *name)
{
	struct bfs_pickle_tensor *t = &r->tensors[r->n_tensors++];
	const struct tensor_obj *o = (const struct tensor_obj *)tv.u.o;

	*t = o->t;
	t->name = strdup(name);
	t->storage_key = strdup(o->st->key->s);
	return t->name && t->storage_key ? 0 : bfs_pickle_nomem(vm);
}

/* A tensor whose numel overflows, named by its field (NULL: built but
 * not a field): torch refuses it when it loads the pickle. */
static int numel_refused(struct vm *vm, const struct tensor_obj *o,
			 const char *field)
{
	char shape[160];

	vm->op = o->at;
	return FAIL(
	    vm,
	    "%s%s%s size %s: numel: integer multiplication overflow "
	    "(more than 2^63-1 elements; torch refuses it too)",
	    field ? "field '" : "tensor of", field ? field : "",
	    field ? "':" : "",
	    bfs_size_shape_str(shape, sizeof(shape), o->t.size, o->t.ndim));
}

/* ---- the fields: tensors, in dicts nested or not ---- */

/* What a value holds, looked for through its containers. */
enum { HOLDS_TENSOR = 1, HOLDS_ARRAY = 2 };

/* Cells one walk over the fields may look at: a pickle can share one list
 * many times over (memo), which a walk sees each time. */
#define MAX_VISITS (1u << 20)

/* Longest dotted field name. */
#define MAX_NAME 4096

/* Room for the names of skipped values in the result. */
#define SKIPPED_TEXT 400

static bool is_array(struct val v)
{
	return v.kind == V_OPAQUE &&
	       ((const struct opaque_obj *)v.u.o)->what == O_NP_ARRAY;
}

static bool is_seq(struct val v)
{
	return v.kind == V_LIST || v.kind == V_TUPLE || v.kind == V_DICT;
}

/* Whether v or what its containers hold (depth first, no recursion) is a
 * tensor or a numpy array: HOLDS_ flags, or -EINVAL when it nests deeper
 * than BFS_PICKLE_MAX_NEST or the walk's cells (*visits) pass
 * MAX_VISITS. */
static int holds(struct vm *vm, struct val v, const char *name, size_t *visits)
{
	struct {
		const struct seq_obj *s;
		size_t i;
	} st[BFS_PICKLE_MAX_NEST];
	int depth = 0, flags = 0;

	for (;;) {
		if (v.kind == V_TENSOR)
			flags |= HOLDS_TENSOR;
		else if (is_array(v))
			flags |= HOLDS_ARRAY;
		else if (is_seq(v)) {
			if (depth == BFS_PICKLE_MAX_NEST)
				return FAIL(vm,
					    "'%s': containers nested deeper "
					    "than %d levels",
					    name, BFS_PICKLE_MAX_NEST);
			st[depth].s = (const struct seq_obj *)v.u.o;
			st[depth++].i = 0;
		}
		while (depth && st[depth - 1].i == st[depth - 1].s->n)
			depth--;
		if (!depth)
			return flags;
		v = st[depth - 1].s->v[st[depth - 1].i++];
		if (++*visits > MAX_VISITS)
			return FAIL(vm,
				    "'%s': the values beside the tensors take "
				    "more than %u cells: refused",
				    name, MAX_VISITS);
	}
}

/* One walk over the top-level object's fields: the first counts them and
 * names what is skipped (r NULL), the second adds them to r. */
struct walk {
	struct vm *vm;
	struct bfs_pickle_result *r;
	size_t n;	  /* tensors met */
	size_t n_skipped; /* values skipped */
	size_t shown;	  /* of them, named in 'skipped' */
	size_t visits;	  /* cells looked at (holds) */
	char skipped[SKIPPED_TEXT];
	size_t skipped_len;
	char name[MAX_NAME];
};

/* A value that is not served: named in w->skipped while there is room. */
static void skip(struct walk *w, struct val v, const char *name)
{
	const char *what = kind_name(v);
	size_t room = sizeof(w->skipped) - w->skipped_len;
	int k;

	if (v.kind == V_OPAQUE)
		what = ((const struct opaque_obj *)v.u.o)->what == O_NP_SCALAR
			   ? "a numpy scalar"
			   : "an object";
	w->n_skipped++;
	k = snprintf(w->skipped + w->skipped_len, room, "%s'%s' (%s)",
		     w->skipped_len ? ", " : "", name, what);
	if (k > 0 && (size_t)k < room - 24) { /* room for ", and N more" */
		w->skipped_len += (size_t)k;
		w->shown++;
	} else
		w->skipped[w->skipped_len] = 0;
}

/* Field 'name' holding v: a tensor is counted or added; a numpy array,
 * or a container holding tensors or arrays, is refused with advice; the
 * rest is skipped. */
static int leaf(struct walk *w, struct val v, const char *name)
{
	struct vm *vm = w->vm;
	int h;

	if (v.kind == V_TENSOR) {
		const struct tensor_obj *o = (const struct tensor_obj *)v.u.o;

		if (o->bad_numel)
			return numel_refused(vm, o, name);
		if (++w->n > BFS_MAX_FIELDS)
			return FAIL(vm,
				    "more than the %u fields batchfs serves "
				    "(tensors in dicts, the last '%s')",
				    BFS_MAX_FIELDS, name);
		return w->r ? add_tensor(vm, w->r, v, name) : 0;
	}
	if (is_array(v))
		return FAIL(vm,
			    "field '%s' is a numpy array: save it with "
			    "torch.from_numpy(...) (batchfs reads tensors; it "
			    "never unpickles numpy objects)",
			    name);
	h = is_seq(v) ? holds(vm, v, name, &w->visits) : 0;
	if (h < 0)
		return h;
	if (h)
		return FAIL(vm,
			    "field '%s' is %s holding %s: save one tensor per "
			    "field (torch.stack the samples; a variable-length "
			    "field as NAME.values and NAME.offsets)",
			    name, kind_name(v),
			    h & HOLDS_TENSOR ? "tensors" : "numpy arrays");
	if (!w->r)
		skip(w, v, name);
	return 0;
}

/* Dict key cell k: a str without NUL, or refused naming where it is. */
static int dict_key(struct vm *vm, struct val k, size_t i, const char *in,
		    struct str_obj **out)
{
	*out = as_str(k);
	if (!*out)
		return FAIL(vm, "%s%s%sdict key %zu is %s, not a string",
			    *in ? "'" : "top-level ", in, *in ? "': " : "", i,
			    kind_name(k));
	if ((*out)->len != strlen((*out)->s))
		return FAIL(vm, "%s%s%sdict key %zu contains a NUL byte",
			    *in ? "'" : "top-level ", in, *in ? "': " : "", i);
	return 0;
}

/* The fields of dict d, and of the dicts holding tensors within it
 * ("outer.inner"), in pickle order, with an explicit stack. */
static int walk_dict(struct walk *w, const struct seq_obj *d)
{
	struct {
		const struct seq_obj *d;
		size_t i, name_len;
	} st[BFS_PICKLE_MAX_NEST];
	int depth = 1, rc = 0;

	st[0].d = d;
	st[0].i = 0;
	st[0].name_len = 0;
	while (depth && !rc) {
		size_t i = st[depth - 1].i++, at = st[depth - 1].name_len;
		const struct seq_obj *c = st[depth - 1].d;
		struct str_obj *key;
		struct val v;

		if (i == c->n / 2) {
			depth--;
			continue;
		}
		if (++w->visits > MAX_VISITS)
			return FAIL(w->vm,
				    "dicts of tensors of more than %u entries "
				    "in all: refused",
				    MAX_VISITS);
		w->name[at] = 0;
		rc = dict_key(w->vm, c->v[2 * i], i, w->name, &key);
		if (rc)
			break;
		if (at + !!at + key->len >= sizeof(w->name))
			return FAIL(w->vm, "a field name longer than %d bytes",
				    MAX_NAME - 1);
		snprintf(w->name + at, sizeof(w->name) - at, "%s%s",
			 at ? "." : "", key->s);
		v = c->v[2 * i + 1];
		if (v.kind == V_DICT &&
		    (rc = holds(w->vm, v, w->name, &w->visits)) > 0) {
			if (depth == BFS_PICKLE_MAX_NEST)
				return FAIL(w->vm,
					    "'%s': dicts of tensors nested "
					    "deeper than %d levels",
					    w->name, BFS_PICKLE_MAX_NEST);
			st[depth].d = (const struct seq_obj *)v.u.o;
			st[depth].i = 0;
			st[depth++].name_len = strlen(w->name);
			rc = 0;
			continue;
		}
		if (rc == 0)
			rc = leaf(w, v, w->name);
	}
	return rc;
}

/* Every field of the top-level object 'top'. */
static int walk(struct walk *w, struct val top)
{
	const struct seq_obj *c = (const struct seq_obj *)top.u.o;
	int rc = 0;

	if (top.kind == V_TENSOR)
		return leaf(w, top, "0");
	if (top.kind == V_DICT)
		return walk_dict(w, c);
	for (size_t i = 0; i < c->n && !rc; i++) {
		snprintf(w->name, sizeof(w->name), "%zu", i);
		rc = leaf(w, c->v[i], w->name);
	}
	return rc;
}

static int by_name(const void *a, const void *b, void *arg)
{
	const struct bfs_pickle_tensor *t = arg;
	return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

static int by_key(const void *a, const void *b, void *arg)
{
	const struct bfs_pickle_tensor *t = arg;
	return strcmp(t[*(const size_t *)a].storage_key,
		      t[*(const size_t *)b].storage_key);
}

/* Names unique; tensors over one storage key agree on its type and size.
 * O(n log n) via sorted indexes. */
static int check_fields(struct vm *vm, const struct bfs_pickle_result *r)
{
	const struct bfs_pickle_tensor *t = r->tensors;
	size_t n = r->n_tensors, *ix = malloc((n ? n : 1) * sizeof(*ix));
	int rc = 0;

	if (!ix)
		return bfs_pickle_nomem(vm);
	for (size_t i = 0; i < n; i++)
		ix[i] = i;
	qsort_r(ix, n, sizeof(*ix), by_name, (void *)t);
	for (size_t i = 1; i < n && !rc; i++)
		if (!strcmp(t[ix[i - 1]].name, t[ix[i]].name))
			rc = FAIL(vm, "duplicate key '%s'", t[ix[i]].name);
	qsort_r(ix, n, sizeof(*ix), by_key, (void *)t);
	for (size_t i = 1; i < n && !rc; i++) {
		const struct bfs_pickle_tensor *a = &t[ix[i - 1]],
					       *b = &t[ix[i]];
		if (!strcmp(a->storage_key, b->storage_key) &&
		    (a->storage_dtype != b->storage_dtype ||
		     a->storage_numel != b->storage_numel))
			rc = FAIL(vm,
				  "storage '%s' declared with two different "
				  "types or sizes",
				  a->storage_key);
	}
	free(ix);
	return rc;
}

static const enum bfs_container containers[] = {
    [V_DICT] = BFS_CONTAINER_DICT,
    [V_LIST] = BFS_CONTAINER_LIST,
    [V_TUPLE] = BFS_CONTAINER_TUPLE,
    [V_TENSOR] = BFS_CONTAINER_TENSOR,
};

static const char *const container_names[] = {
    [BFS_CONTAINER_DICT] = "dict",
    [BFS_CONTAINER_LIST] = "list",
    [BFS_CONTAINER_TUPLE] = "tuple",
    [BFS_CONTAINER_TENSOR] = "tensor",
};

/* The object left at STOP into *r: its fields found and checked first
 * (a counting walk), then the result (about 1 KiB per tensor) is charged
 * to the budget and built by a second walk. */
int bfs_pickle_build_result(struct vm *vm, struct val top,
			    struct bfs_pickle_result *r)
{
	struct walk *w;
	int rc;

	if (top.kind != V_DICT && top.kind != V_LIST && top.kind != V_TUPLE &&
	    top.kind != V_TENSOR)
		return FAIL(vm,
			    "top-level object is %s, not a dict, list, "
			    "tuple or tensor",
			    kind_name(top));
	r->container = containers[top.kind];
	if (top.kind != V_TENSOR) {
		const struct seq_obj *c = (const struct seq_obj *)top.u.o;
		size_t n = top.kind == V_DICT ? c->n / 2 : c->n;

		if (n > BFS_MAX_FIELDS)
			return FAIL(vm,
				    "the top-level %s holds %zu items: more "
				    "than the %u fields batchfs serves",
				    container_names[r->container], n,
				    BFS_MAX_FIELDS);
	}
	w = calloc(1, sizeof(*w));
	if (!w)
		return bfs_pickle_nomem(vm);
	w->vm = vm;
	rc = walk(w, top);
	if (!rc && w->n == 0)
		rc = FAIL(vm,
			  "the top-level %s holds no tensors: nothing to "
			  "serve%s%s",
			  container_names[r->container],
			  w->n_skipped ? " (only " : "",
			  w->n_skipped ? "values that are not tensors)" : "");
	if (!rc && w->n > BFS_MAX_FIELDS)
		rc = FAIL(vm,
			  "the top-level %s holds %zu tensors: more than "
			  "the %u fields batchfs serves",
			  container_names[r->container], w->n, BFS_MAX_FIELDS);
	if (!rc && vm->bad_numel) /* a tensor built but not kept */
		rc = numel_refused(vm, vm->bad_numel, NULL);
	if (!rc)
		rc = bfs_pickle_charge(vm, w->n * sizeof(*r->tensors));
	if (!rc && !(r->tensors = calloc(w->n, sizeof(*r->tensors))))
		rc = bfs_pickle_nomem(vm);
	if (!rc && w->n_skipped) {
		if (w->shown < w->n_skipped)
			snprintf(w->skipped + w->skipped_len,
				 sizeof(w->skipped) - w->skipped_len,
				 ", and %zu more", w->n_skipped - w->shown);
		r->n_skipped = w->n_skipped;
		r->skipped = strdup(w->skipped);
		if (!r->skipped)
			rc = bfs_pickle_nomem(vm);
	}
	if (!rc) {
		w->r = r;
		w->n = w->visits = 0;
		rc = walk(w, top);
	}
	free(w);
	return rc ? rc : check_fields(vm, r);
}
