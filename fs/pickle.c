/* fs/pickle: a restricted, iterative pickle VM for torch.save's data.pkl
 * (research/torch-format.md §2), modelled on torch's weights_only loader.
 *
 * Design. Values are 16-byte tagged cells (struct val): None, bools, ints
 * and floats live inline; strings, tuples, lists, dicts, storages and
 * tensors are heap objects chained on one list owned by the VM and freed
 * together at the end (an arena in effect), so the memo, the stack and
 * containers hold references, never copies: BINGET of a big list costs 16
 * bytes however often it is repeated. Nothing recurses: objects are only
 * inspected one level deep (REDUCE arguments, the top-level container).
 *
 * Security invariants: GLOBAL/STACK_GLOBAL resolve through fixed_globals[]
 * and the dtype table (torch.<T>Storage, torch.<dtype>) or are refused by
 * name; REDUCE only interprets the allowlisted callables, type- and
 * arity-checked; BUILD is a no-op on a dict (a state_dict's '_metadata')
 * and refused with real state on a tensor; every read is bounds
 * checked against the pickle; integers are int64 with checked arithmetic;
 * limits: pickle <= 64 MiB, MARK depth <= 256, stack <= 2^20 cells,
 * memo index < 2^20, heap bytes <= MEM_LIMIT(len). Tensors are validated
 * at construction: ndim <= 64, sizes/strides/offset >= 0, the extent lies
 * inside the storage (bytes, checked u64 math), hooks and metadata empty.
 *
 * Every refusal is "LABEL: offset N: reason" where N is the offset of the
 * opcode being executed. Reentrant: all state lives in a struct vm on the
 * caller's stack for one bfs_pickle_load call; no globals are written. */
#include "fs/pickle.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PICKLE	(64u << 20)
#define MAX_MARKS	256
#define MAX_STACK	(1u << 20)
#define MAX_MEMO	(1u << 20)
#define MAX_GLOBAL_LINE 256
/* Heap budget: torch pickles need ~30 bytes of heap per pickle byte (a
 * ~76-byte tensor entry makes ~2.3 KiB of objects and result); crafted
 * ones hit -E2BIG instead of exhausting memory. */
#define MEM_LIMIT(len) ((size_t)128 * (len) + ((size_t)16 << 20))

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
};

static const char *const kind_names[] = {
    "unset", "None",  "bool", "int",  "float",	 "global",
    "str",   "tuple", "list", "dict", "storage", "tensor",
};

/* The allowlist. Checklist when adding one: its REDUCE in do_reduce(). */
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
};

#define FAIL(vm, ...)                                                          \
	bfs_error_set((vm)->err, -EINVAL, (vm)->label, (vm)->op, __VA_ARGS__)

static int nomem(struct vm *vm)
{
	vm->alloc_rc = -ENOMEM;
	return bfs_error_set(vm->err, -ENOMEM, vm->label, vm->op,
			     "out of memory");
}

/* Heap accounting: every allocation the pickle can cause goes through
 * charge(), so a crafted pickle hits -E2BIG instead of exhausting memory. */
static int charge(struct vm *vm, size_t bytes)
{
	if (bytes > vm->mem_limit - vm->mem)
		return vm->alloc_rc =
			   bfs_error_set(vm->err, -E2BIG, vm->label, vm->op,
					 "pickle needs more than %zu bytes of "
					 "memory",
					 vm->mem_limit);
	vm->mem += bytes;
	return 0;
}

static void *new_obj(struct vm *vm, int kind, size_t size)
{
	struct obj *o;

	if (charge(vm, size))
		return NULL;
	o = calloc(1, size);
	if (!o) {
		nomem(vm);
		return NULL;
	}
	o->kind = kind;
	o->next = vm->objs;
	vm->objs = o;
	return o;
}

static void free_obj(struct obj *o)
{
	if (o->kind == V_TUPLE || o->kind == V_LIST || o->kind == V_DICT)
		free(((struct seq_obj *)o)->v);
	free(o);
}

/* Make room for 'more' cells in an array of 'cap' cells, up to 'max'. */
static int grow(struct vm *vm, struct val **v, size_t *cap, size_t need,
		size_t max)
{
	size_t ncap;
	struct val *nv;

	if (need <= *cap)
		return 0;
	if (need > max)
		return -E2BIG;
	ncap = *cap ? *cap : 8;
	while (ncap < need)
		ncap *= 2;
	if (ncap > max)
		ncap = max;
	if (charge(vm, (ncap - *cap) * sizeof(struct val)))
		return -E2BIG;
	nv = realloc(*v, ncap * sizeof(struct val));
	if (!nv)
		return nomem(vm);
	memset(nv + *cap, 0, (ncap - *cap) * sizeof(struct val));
	*v = nv;
	*cap = ncap;
	return 0;
}

static int push(struct vm *vm, struct val v)
{
	int rc = grow(vm, &vm->stack, &vm->stack_cap, vm->sp + 1, MAX_STACK);

	if (rc == -E2BIG && !vm->err->msg[0])
		return bfs_error_set(vm->err, -E2BIG, vm->label, vm->op,
				     "stack overflow (more than %u values)",
				     MAX_STACK);
	if (rc)
		return rc;
	vm->stack[vm->sp++] = v;
	return 0;
}

static int push_obj(struct vm *vm, void *o)
{
	struct val v = {.kind = ((struct obj *)o)->kind, .u.o = o};
	return push(vm, v);
}

/* Push a freshly made object; NULL means its allocation failed. */
static int push_new(struct vm *vm, void *o)
{
	return o ? push_obj(vm, o) : vm->alloc_rc;
}

/* Values above the innermost MARK. */
static size_t mark_base(struct vm *vm)
{
	return vm->nmarks ? vm->marks[vm->nmarks - 1] : 0;
}

/* Pop one value; the stack must hold one above the innermost MARK. */
static int pop(struct vm *vm, struct val *out)
{
	if (vm->sp <= mark_base(vm))
		return FAIL(vm, "stack underflow (opcode 0x%02x)",
			    vm->p[vm->op]);
	*out = vm->stack[--vm->sp];
	return 0;
}

static int pop_mark(struct vm *vm, size_t *base)
{
	if (!vm->nmarks)
		return FAIL(vm, "opcode 0x%02x needs a MARK", vm->p[vm->op]);
	*base = vm->marks[--vm->nmarks];
	return 0;
}

static const char *kind_name(struct val v)
{
	return kind_names[v.kind];
}

static struct str_obj *as_str(struct val v)
{
	return v.kind == V_STR ? (struct str_obj *)v.u.o : NULL;
}

static struct seq_obj *as_seq(struct val v, int kind)
{
	return v.kind == kind ? (struct seq_obj *)v.u.o : NULL;
}

/* ---- reading the byte stream ---- */

static int need(struct vm *vm, size_t n)
{
	if (n > vm->len - vm->pos)
		return FAIL(vm,
			    "truncated pickle: opcode 0x%02x needs %zu "
			    "bytes, %zu left",
			    vm->p[vm->op], n, vm->len - vm->pos);
	return 0;
}

static uint64_t le(const uint8_t *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* Read an n-byte little-endian unsigned argument. */
static int arg(struct vm *vm, int n, uint64_t *v)
{
	int rc = need(vm, (size_t)n);

	if (rc)
		return rc;
	*v = le(vm->p + vm->pos, n);
	vm->pos += (size_t)n;
	return 0;
}

/* Strict UTF-8: no overlongs, no surrogates, <= U+10FFFF. */
static int utf8_ok(const uint8_t *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		uint8_t c = s[i];
		size_t k;
		uint32_t cp, min;

		if (c < 0x80) {
			i++;
			continue;
		}
		if ((c & 0xE0) == 0xC0)
			k = 1, cp = c & 0x1F, min = 0x80;
		else if ((c & 0xF0) == 0xE0)
			k = 2, cp = c & 0x0F, min = 0x800;
		else if ((c & 0xF8) == 0xF0)
			k = 3, cp = c & 0x07, min = 0x10000;
		else
			return 0;
		if (k > n - i - 1)
			return 0;
		for (size_t j = 1; j <= k; j++) {
			if ((s[i + j] & 0xC0) != 0x80)
				return 0;
			cp = cp << 6 | (s[i + j] & 0x3F);
		}
		if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
			return 0;
		i += k + 1;
	}
	return 1;
}

static struct str_obj *new_str(struct vm *vm, const uint8_t *s, size_t n)
{
	struct str_obj *o;

	o = new_obj(vm, V_STR, sizeof(*o) + n + 1);
	if (!o)
		return NULL;
	memcpy(o->s, s, n);
	o->s[n] = 0;
	o->len = n;
	return o;
}

/* BINUNICODE / SHORT_BINUNICODE with an n-byte length. */
static int op_unicode(struct vm *vm, int lenbytes)
{
	uint64_t n;
	struct str_obj *s;
	int rc = arg(vm, lenbytes, &n);

	if (rc)
		return rc;
	if (n > vm->len - vm->pos)
		return FAIL(vm,
			    "truncated pickle: string of %llu bytes, %zu "
			    "left",
			    (unsigned long long)n, vm->len - vm->pos);
	if (!utf8_ok(vm->p + vm->pos, (size_t)n))
		return FAIL(vm, "string is not valid UTF-8");
	s = new_str(vm, vm->p + vm->pos, (size_t)n);
	if (!s)
		return vm->alloc_rc;
	vm->pos += (size_t)n;
	return push_obj(vm, s);
}

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
};

/* Resolve "module name" or refuse it by name (escaped for the message). */
static int resolve_global(struct vm *vm, const char *mod, size_t mlen,
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
			return push(vm, v);
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
			return push(vm, v);
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

/* GLOBAL: "module\nname\n", each line <= 256 bytes. */
static int op_global(struct vm *vm)
{
	const char *s = (const char *)vm->p + vm->pos, *nl1, *nl2;
	size_t left = vm->len - vm->pos, m = left;

	if (m > MAX_GLOBAL_LINE + 1)
		m = MAX_GLOBAL_LINE + 1;
	nl1 = memchr(s, '\n', m);
	if (!nl1)
		return FAIL(vm,
			    "truncated pickle, or GLOBAL module name longer "
			    "than %d bytes",
			    MAX_GLOBAL_LINE);
	left -= (size_t)(nl1 + 1 - s);
	m = left > MAX_GLOBAL_LINE + 1 ? MAX_GLOBAL_LINE + 1 : left;
	nl2 = memchr(nl1 + 1, '\n', m);
	if (!nl2)
		return FAIL(vm,
			    "truncated pickle, or GLOBAL name longer than %d "
			    "bytes",
			    MAX_GLOBAL_LINE);
	vm->pos += (size_t)(nl2 + 1 - s);
	return resolve_global(vm, s, (size_t)(nl1 - s), nl1 + 1,
			      (size_t)(nl2 - nl1 - 1));
}

static int op_stack_global(struct vm *vm)
{
	struct val mod = {0}, name = {0};
	struct str_obj *m, *n;
	int rc = pop(vm, &name);

	if (!rc)
		rc = pop(vm, &mod);
	if (rc)
		return rc;
	m = as_str(mod);
	n = as_str(name);
	if (!m || !n || m->len > MAX_GLOBAL_LINE || n->len > MAX_GLOBAL_LINE)
		return FAIL(vm, "STACK_GLOBAL needs two short strings");
	return resolve_global(vm, m->s, m->len, n->s, n->len);
}

/* ---- containers ---- */

static struct seq_obj *new_seq(struct vm *vm, int kind, size_t n)
{
	struct seq_obj *o = new_obj(vm, kind, sizeof(*o));

	if (o && n && grow(vm, &o->v, &o->cap, n, SIZE_MAX / 32))
		return NULL;
	return o;
}

/* TUPLE/TUPLEn/EMPTY_TUPLE: the top 'n' values become a tuple. */
static int make_tuple(struct vm *vm, size_t n)
{
	struct seq_obj *t;

	if (vm->sp - mark_base(vm) < n)
		return FAIL(vm, "stack underflow (TUPLE%zu)", n);
	t = new_seq(vm, V_TUPLE, n);
	if (!t)
		return vm->alloc_rc;
	if (n)
		memcpy(t->v, vm->stack + vm->sp - n, n * sizeof(struct val));
	t->n = n;
	vm->sp -= n;
	return push_obj(vm, t);
}

static int op_tuple_mark(struct vm *vm)
{
	size_t base = 0;
	int rc = pop_mark(vm, &base);

	return rc ? rc : make_tuple(vm, vm->sp - base);
}

/* APPEND(S)/SETITEM(S): move stack[base..sp) into the container below. */
static int fill(struct vm *vm, size_t base, int kind)
{
	size_t n = vm->sp - base;
	struct seq_obj *c;
	int rc;

	if (base == 0 || base <= mark_base(vm))
		return FAIL(vm, "stack underflow: no container to fill");
	c = as_seq(vm->stack[base - 1], kind);
	if (!c)
		return FAIL(vm, "%s applied to a %s",
			    kind == V_LIST ? "APPEND" : "SETITEM",
			    kind_name(vm->stack[base - 1]));
	if (kind == V_DICT && n % 2)
		return FAIL(vm, "SETITEMS with an odd number of values");
	rc = grow(vm, &c->v, &c->cap, c->n + n, SIZE_MAX / 32);
	if (rc)
		return rc == -E2BIG ? FAIL(vm, "container too large") : rc;
	if (n)
		memcpy(c->v + c->n, vm->stack + base, n * sizeof(struct val));
	c->n += n;
	vm->sp = base;
	return 0;
}

static int op_fill_mark(struct vm *vm, int kind)
{
	size_t base = 0;
	int rc = pop_mark(vm, &base);

	return rc ? rc : fill(vm, base, kind);
}

static int op_fill_one(struct vm *vm, int kind)
{
	size_t k = kind == V_DICT ? 2 : 1;

	if (vm->sp - mark_base(vm) < k + 1)
		return FAIL(vm, "stack underflow (opcode 0x%02x)",
			    vm->p[vm->op]);
	return fill(vm, vm->sp - k, kind);
}

/* ---- memo ---- */

static int op_put(struct vm *vm, uint64_t idx)
{
	int rc;

	if (vm->sp <= mark_base(vm))
		return FAIL(vm, "memo PUT with an empty stack");
	if (idx >= MAX_MEMO)
		return FAIL(vm, "memo index %llu out of range (limit %u)",
			    (unsigned long long)idx, MAX_MEMO);
	rc = grow(vm, &vm->memo, &vm->memo_cap, (size_t)idx + 1, MAX_MEMO);
	if (rc)
		return rc;
	if (vm->memo[idx].kind == V_UNSET)
		vm->memo_len++;
	vm->memo[idx] = vm->stack[vm->sp - 1];
	return 0;
}

static int op_get(struct vm *vm, uint64_t idx)
{
	if (idx >= vm->memo_cap || vm->memo[idx].kind == V_UNSET)
		return FAIL(vm, "memo GET of unset index %llu",
			    (unsigned long long)idx);
	return push(vm, vm->memo[idx]);
}

/* ---- persistent ids: ('storage', <T>Storage, key, location, numel) ---- */

static int op_persid(struct vm *vm)
{
	struct val pid = {0};
	struct seq_obj *t;
	struct str_obj *tag, *key, *loc;
	struct storage_obj *st;
	int rc = pop(vm, &pid);

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
			    "persistent id: storage type is a %s, not a "
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
	st = new_obj(vm, V_STORAGE, sizeof(*st));
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

/* Extent of the tensor in bytes from the storage start; 0 = overflow. */
static int extent_ok(const struct bfs_pickle_tensor *t, size_t elsize,
		     uint64_t storage_bytes)
{
	uint64_t last = t->offset, x;

	for (int i = 0; i < t->ndim; i++) {
		if (t->size[i] == 0)
			return t->offset <= storage_bytes / elsize;
		if (__builtin_mul_overflow((uint64_t)(t->size[i] - 1),
					   (uint64_t)t->stride[i], &x) ||
		    __builtin_add_overflow(last, x, &last))
			return 0;
	}
	/* elements [offset, last] must lie inside the storage */
	return !__builtin_add_overflow(last, 1, &x) &&
	       !__builtin_mul_overflow(x, (uint64_t)elsize, &x) &&
	       x <= storage_bytes;
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
	const struct bfs_dtype_info *di, *si;

	if (!a || (a->n != fixed && a->n != fixed + 1))
		return FAIL(vm, "_rebuild_tensor_v%d: wrong argument count",
			    v3 ? 3 : 2);
	if (a->v[0].kind != V_STORAGE)
		return FAIL(vm, "tensor storage is a %s", kind_name(a->v[0]));
	st = (struct storage_obj *)a->v[0].u.o;
	o = new_obj(vm, V_TENSOR, sizeof(*o));
	if (!o)
		return vm->alloc_rc;
	o->st = st;
	o->t.storage_dtype = st->dtype;
	o->t.storage_numel = st->numel;
	o->t.dtype = st->dtype;
	if (v3) {
		if (a->v[6].kind != V_GLOBAL || a->v[6].u.g.id != G_DTYPE)
			return FAIL(vm, "_rebuild_tensor_v3: dtype is a %s",
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
	if (!di || !si || st->numel > UINT64_MAX / si->size ||
	    !extent_ok(&o->t, di->size, st->numel * si->size))
		return FAIL(vm,
			    "tensor extent (offset %lld, %d dims) exceeds "
			    "storage '%s' of %llu elements",
			    (long long)off, o->t.ndim, st->key->s,
			    (unsigned long long)st->numel);
	return push_obj(vm, o);
}

static struct tensor_obj *copy_tensor(struct vm *vm, struct val v)
{
	struct tensor_obj *o;

	if (v.kind != V_TENSOR)
		return NULL;
	o = new_obj(vm, V_TENSOR, sizeof(*o));
	if (o) {
		o->t = ((struct tensor_obj *)v.u.o)->t;
		o->st = ((struct tensor_obj *)v.u.o)->st;
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
				       : FAIL(vm, "_rebuild_parameter of a %s",
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
static int op_reduce(struct vm *vm)
{
	struct val fn = {0}, args = {0};
	struct seq_obj *a;
	int rc = pop(vm, &args);

	if (!rc)
		rc = pop(vm, &fn);
	if (rc)
		return rc;
	a = as_seq(args, V_TUPLE);
	if (fn.kind != V_GLOBAL || !a)
		return FAIL(vm, "REDUCE of a %s with %s arguments: refused",
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
		return push_new(vm, new_seq(vm, V_DICT, 0));
	case G_SIZE:
		if (a->n != 1 ||
		    int_tuple(a->v[0], (int64_t[BFS_MAX_DIMS]){0}) < 0)
			return FAIL(vm, "torch.Size() of a non-size");
		return push(vm, a->v[0]);
	}
	return FAIL(vm, "REDUCE: global is not callable here");
}

/* BUILD: on a tensor only with empty state; on a dict (an OrderedDict
 * state_dict carries '_metadata' as instance state) with a dict or None
 * state, which is ignored, as torch's weights_only loader does. */
static int op_build(struct vm *vm)
{
	struct val state = {0}, *inst;
	int rc = pop(vm, &state);

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
	return FAIL(vm, "BUILD of a %s with a %s state: refused",
		    kind_name(*inst), kind_name(state));
}

/* ---- the VM loop ---- */

/* LONG1: n <= 8 bytes little-endian two's complement, sign-extended. */
static int op_long1(struct vm *vm)
{
	uint64_t n, v;
	struct val x = {.kind = V_INT};
	int rc = arg(vm, 1, &n);

	if (rc)
		return rc;
	if (n > 8)
		return FAIL(vm, "LONG1 of %llu bytes: integer too large",
			    (unsigned long long)n);
	rc = arg(vm, (int)n, &v);
	if (rc)
		return rc;
	if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1)
		v |= ~(uint64_t)0 << (8 * n);
	x.u.i = (int64_t)v;
	return push(vm, x);
}

static int op_int(struct vm *vm, int n, int is_signed)
{
	uint64_t v;
	struct val x = {.kind = V_INT};
	int rc = arg(vm, n, &v);

	if (rc)
		return rc;
	x.u.i = is_signed ? (int64_t)(int32_t)(uint32_t)v : (int64_t)v;
	return push(vm, x);
}

static int op_float(struct vm *vm)
{
	uint64_t be = 0;
	struct val x = {.kind = V_FLOAT};
	int rc = need(vm, 8);

	if (rc)
		return rc;
	for (int i = 0; i < 8; i++)
		be = be << 8 | vm->p[vm->pos + (size_t)i];
	vm->pos += 8;
	memcpy(&x.u.f, &be, 8);
	return push(vm, x);
}

static int op_mark(struct vm *vm)
{
	if (vm->nmarks >= MAX_MARKS)
		return FAIL(vm, "MARK nesting deeper than %d", MAX_MARKS);
	vm->marks[vm->nmarks++] = vm->sp;
	return 0;
}

static int op_frame(struct vm *vm)
{
	uint64_t n;
	int rc = arg(vm, 8, &n);

	if (!rc && n > vm->len - vm->pos)
		return FAIL(vm, "truncated pickle: FRAME of %llu bytes",
			    (unsigned long long)n);
	return rc;
}

static int op_memo_arg(struct vm *vm, int n, int is_put)
{
	uint64_t idx;
	int rc = arg(vm, n, &idx);

	if (rc)
		return rc;
	return is_put ? op_put(vm, idx) : op_get(vm, idx);
}

static int op_simple(struct vm *vm, int kind, int64_t i)
{
	struct val x = {.kind = kind, .u.i = i};
	return push(vm, x);
}

/* Execute one opcode at vm->pos. Returns 1 at STOP, 0 to go on, or -errno. */
static int step(struct vm *vm)
{
	uint8_t op = vm->p[vm->pos];
	uint64_t v;

	vm->op = vm->pos++;
	switch (op) {
	case 0x80: /* PROTO */
		if (arg(vm, 1, &v))
			return -EINVAL;
		if (v < 2 || v > 5)
			return FAIL(vm, "unsupported pickle protocol %llu",
				    (unsigned long long)v);
		return 0;
	case 0x95:
		return op_frame(vm);
	case '.':
		return 1;
	case 'c':
		return op_global(vm);
	case 0x93:
		return op_stack_global(vm);
	case 'R':
		return op_reduce(vm);
	case 'b':
		return op_build(vm);
	case 'Q':
		return op_persid(vm);
	case '(':
		return op_mark(vm);
	case 't':
		return op_tuple_mark(vm);
	case ')':
		return make_tuple(vm, 0);
	case 0x85:
		return make_tuple(vm, 1);
	case 0x86:
		return make_tuple(vm, 2);
	case 0x87:
		return make_tuple(vm, 3);
	case ']':
		return push_new(vm, new_seq(vm, V_LIST, 0));
	case '}':
		return push_new(vm, new_seq(vm, V_DICT, 0));
	case 'a':
		return op_fill_one(vm, V_LIST);
	case 'e':
		return op_fill_mark(vm, V_LIST);
	case 's':
		return op_fill_one(vm, V_DICT);
	case 'u':
		return op_fill_mark(vm, V_DICT);
	case 'N':
		return op_simple(vm, V_NONE, 0);
	case 0x88:
		return op_simple(vm, V_BOOL, 1);
	case 0x89:
		return op_simple(vm, V_BOOL, 0);
	case 'J':
		return op_int(vm, 4, 1);
	case 'K':
		return op_int(vm, 1, 0);
	case 'M':
		return op_int(vm, 2, 0);
	case 0x8a:
		return op_long1(vm);
	case 0x8b:
		return FAIL(vm, "LONG4 opcode refused (integer too large)");
	case 'G':
		return op_float(vm);
	case 'X':
		return op_unicode(vm, 4);
	case 0x8c:
		return op_unicode(vm, 1);
	case 'h':
		return op_memo_arg(vm, 1, 0);
	case 'j':
		return op_memo_arg(vm, 4, 0);
	case 'q':
		return op_memo_arg(vm, 1, 1);
	case 'r':
		return op_memo_arg(vm, 4, 1);
	case 0x94:
		return op_put(vm, vm->memo_len);
	}
	if (op >= 0x20 && op < 0x7f)
		return FAIL(vm, "unsupported pickle opcode 0x%02x ('%c')", op,
			    op);
	return FAIL(vm, "unsupported pickle opcode 0x%02x", op);
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
	return t->name && t->storage_key ? 0 : nomem(vm);
}

/* Field i of the top-level container: a tensor under a str key. */
static int field_ok(struct vm *vm, const struct seq_obj *c, size_t i)
{
	struct val v = c->v[c->h.kind == V_DICT ? 2 * i + 1 : i];
	struct str_obj *k;

	if (c->h.kind == V_DICT) {
		k = as_str(c->v[2 * i]);
		if (!k || k->len != strlen(k->s))
			return FAIL(vm,
				    "top-level dict key %zu is a %s, not a "
				    "string without NUL",
				    i, kind_name(c->v[2 * i]));
		if (v.kind != V_TENSOR)
			return FAIL(vm,
				    "top-level field '%s' is a %s, not a "
				    "tensor",
				    k->s, kind_name(v));
	} else if (v.kind != V_TENSOR) {
		return FAIL(vm, "top-level item %zu is a %s, not a tensor", i,
			    kind_name(v));
	}
	return 0;
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
		return nomem(vm);
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

/* The object left at STOP into *r: types checked first, then the result
 * (about 1 KiB per tensor) is charged to the budget and built. */
static int build_result(struct vm *vm, struct val top,
			struct bfs_pickle_result *r)
{
	struct seq_obj *c = NULL;
	size_t n = 1;
	int rc = 0;

	if (top.kind != V_DICT && top.kind != V_LIST && top.kind != V_TUPLE &&
	    top.kind != V_TENSOR)
		return FAIL(vm,
			    "top-level object is a %s, not a dict, list, "
			    "tuple or tensor",
			    kind_name(top));
	r->container = containers[top.kind];
	if (top.kind != V_TENSOR) {
		c = (struct seq_obj *)top.u.o;
		n = top.kind == V_DICT ? c->n / 2 : c->n;
	}
	for (size_t i = 0; c && i < n && !rc; i++)
		rc = field_ok(vm, c, i);
	if (!rc)
		rc = charge(vm, n * sizeof(*r->tensors));
	if (rc)
		return rc;
	r->tensors = calloc(n ? n : 1, sizeof(*r->tensors));
	if (!r->tensors)
		return nomem(vm);
	for (size_t i = 0; i < n && !rc; i++) {
		char num[24];
		snprintf(num, sizeof(num), "%zu", i);
		if (!c)
			rc = add_tensor(vm, r, top, "0");
		else if (top.kind == V_DICT)
			rc = add_tensor(vm, r, c->v[2 * i + 1],
					as_str(c->v[2 * i])->s);
		else
			rc = add_tensor(vm, r, c->v[i], num);
	}
	return rc ? rc : check_fields(vm, r);
}

static void vm_free(struct vm *vm)
{
	while (vm->objs) {
		struct obj *o = vm->objs;
		vm->objs = o->next;
		free_obj(o);
	}
	free(vm->stack);
	free(vm->memo);
}

/* Run to STOP: exactly one object, no open MARK, nothing after STOP. */
static int run(struct vm *vm, struct bfs_pickle_result *out)
{
	int rc = 0;

	while (rc == 0) {
		if (vm->pos >= vm->len) {
			vm->op = vm->len;
			return FAIL(vm, "truncated pickle: no STOP opcode");
		}
		rc = step(vm);
	}
	if (rc < 0)
		return rc;
	if (vm->pos != vm->len)
		return FAIL(vm, "%zu bytes after STOP", vm->len - vm->pos);
	if (vm->nmarks || vm->sp != 1)
		return FAIL(vm,
			    "STOP with %zu values and %d open MARKs on the "
			    "stack (exactly one object expected)",
			    vm->sp, vm->nmarks);
	return build_result(vm, vm->stack[0], out);
}

int bfs_pickle_load(const uint8_t *buf, size_t len, const char *label,
		    struct bfs_pickle_result *out, struct bfs_error *err)
{
	struct bfs_error local = {""};
	struct vm vm = {.p = buf,
			.len = len,
			.label = label,
			.err = err ? err : &local,
			.alloc_rc = -ENOMEM};
	int rc;

	memset(out, 0, sizeof(*out));
	if (len > MAX_PICKLE)
		return bfs_error_set(
		    vm.err, -E2BIG, label, BFS_NO_OFFSET,
		    "data.pkl of %zu bytes exceeds the %u-byte "
		    "limit",
		    len, MAX_PICKLE);
	vm.mem_limit = MEM_LIMIT(len);
	rc = run(&vm, out);
	vm_free(&vm);
	if (rc)
		bfs_pickle_result_free(out);
	return rc;
}

void bfs_pickle_result_free(struct bfs_pickle_result *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->n_tensors; i++) {
		free(r->tensors[i].name);
		free(r->tensors[i].storage_key);
	}
	free(r->tensors);
	memset(r, 0, sizeof(*r));
}
