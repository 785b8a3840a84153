/* fs/pickle: a restricted, iterative pickle VM for torch.save's data.pkl
 * (fs/README.md: the pickle), modelled on torch's weights_only loader.
 * This file is the VM: values, the stack, the memo, containers and the
 * opcode loop. What torch.save's objects mean (the allowlisted globals,
 * storages, tensors, the result) is fs/pickle_torch.c; the two share the
 * private fs/pickle_vm.h.
 *
 * Design. Values are 16-byte tagged cells (struct val): None, bools, ints
 * and floats live inline; strings, tuples, lists, dicts, storages and
 * tensors are heap objects chained on one list owned by the VM and freed
 * together at the end (an arena in effect), so the memo, the stack and
 * containers hold references, never copies: BINGET of a big list costs 16
 * bytes however often it is repeated. Nothing recurses: objects are only
 * inspected one level deep (REDUCE arguments, the top-level container).
 *
 * Security invariants: GLOBAL/STACK_GLOBAL resolve through the allowlist
 * of fs/pickle_torch.c or become inert cells (V_OPAQUE) that nothing ever
 * calls; REDUCE, NEWOBJ, BUILD and PERSID are interpreted there; bytes and
 * sets are inert cells too, their contents skipped, and items appended to
 * an inert cell are dropped; every read is bounds checked against the
 * pickle;
 * integers are int64 with checked arithmetic; limits: pickle <= 64 MiB,
 * MARK depth <= 256, stack <= 2^20 cells, memo index < 2^20, heap bytes <=
 * MEM_LIMIT(len) and the caller's limit (BFS_PICKLE_MEM_DEFAULT).
 *
 * Every refusal is "LABEL: offset N: reason" where N is the offset of the
 * opcode being executed. Reentrant: all state lives in a struct vm on the
 * caller's stack for one bfs_pickle_load call; no globals are written. */
#include "fs/pickle.h"
#include "fs/pickle_vm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STACK (1u << 20)
#define MAX_MEMO  (1u << 20)
/* Heap budget: torch pickles need ~30 bytes of heap per pickle byte (a
 * ~76-byte tensor entry makes ~2.3 KiB of objects and result); crafted
 * ones hit -E2BIG instead of exhausting memory. */
#define MEM_LIMIT(len) ((size_t)128 * (len) + ((size_t)16 << 20))

int bfs_pickle_nomem(struct vm *vm)
{
	vm->alloc_rc = -ENOMEM;
	return bfs_error_set(vm->err, -ENOMEM, vm->label, vm->op,
			     "out of memory");
}

/* Heap accounting: every allocation the pickle can cause goes through
 * bfs_pickle_charge(), so a crafted pickle hits -E2BIG instead of exhausting
 * memory. */
int bfs_pickle_charge(struct vm *vm, size_t bytes)
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

void *bfs_pickle_new_obj(struct vm *vm, int kind, size_t size)
{
	struct obj *o;

	if (bfs_pickle_charge(vm, size))
		return NULL;
	o = calloc(1, size);
	if (!o) {
		bfs_pickle_nomem(vm);
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
	if (bfs_pickle_charge(vm, (ncap - *cap) * sizeof(struct val)))
		return -E2BIG;
	nv = realloc(*v, ncap * sizeof(struct val));
	if (!nv)
		return bfs_pickle_nomem(vm);
	memset(nv + *cap, 0, (ncap - *cap) * sizeof(struct val));
	*v = nv;
	*cap = ncap;
	return 0;
}

int bfs_pickle_push(struct vm *vm, struct val v)
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

/* Pop one value; the stack must hold one above the innermost MARK. */
int bfs_pickle_pop(struct vm *vm, struct val *out)
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

/* ---- reading the pickle's bytes ---- */

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

	o = bfs_pickle_new_obj(vm, V_STR, sizeof(*o) + n + 1);
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
	return bfs_pickle_resolve_global(vm, s, (size_t)(nl1 - s), nl1 + 1,
					 (size_t)(nl2 - nl1 - 1));
}

static int op_stack_global(struct vm *vm)
{
	struct val mod = {0}, name = {0};
	struct str_obj *m, *n;
	int rc = bfs_pickle_pop(vm, &name);

	if (!rc)
		rc = bfs_pickle_pop(vm, &mod);
	if (rc)
		return rc;
	m = as_str(mod);
	n = as_str(name);
	if (!m || !n || m->len > MAX_GLOBAL_LINE || n->len > MAX_GLOBAL_LINE)
		return FAIL(vm, "STACK_GLOBAL needs two short strings");
	return bfs_pickle_resolve_global(vm, m->s, m->len, n->s, n->len);
}

/* ---- containers ---- */

struct seq_obj *bfs_pickle_new_seq(struct vm *vm, int kind, size_t n)
{
	struct seq_obj *o = bfs_pickle_new_obj(vm, kind, sizeof(*o));

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
	t = bfs_pickle_new_seq(vm, V_TUPLE, n);
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
	if (vm->stack[base - 1].kind == V_OPAQUE) { /* an inert object */
		vm->sp = base;			    /* whose items go */
		return 0;
	}
	c = as_seq(vm->stack[base - 1], kind);
	if (!c)
		return FAIL(vm, "%s applied to %s",
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

/* ---- inert values: bytes and sets ---- */

/* BINBYTES / SHORT_BINBYTES / BINBYTES8 with an n-byte length: skipped,
 * an inert cell pushed. */
static int op_bytes(struct vm *vm, int lenbytes)
{
	uint64_t n;
	int rc = arg(vm, lenbytes, &n);

	if (rc)
		return rc;
	if (n > vm->len - vm->pos)
		return FAIL(vm,
			    "truncated pickle: bytes of %llu bytes, %zu left",
			    (unsigned long long)n, vm->len - vm->pos);
	vm->pos += (size_t)n;
	return bfs_pickle_push_opaque(vm, O_BYTES, NULL);
}

/* ADDITEMS (into the set below the MARK) and FROZENSET (of the values
 * above it): the items are dropped. */
static int op_set_mark(struct vm *vm, int frozen)
{
	size_t base = 0;
	int rc = pop_mark(vm, &base);

	if (rc)
		return rc;
	vm->sp = base;
	if (frozen)
		return bfs_pickle_push_opaque(vm, O_FROZENSET, NULL);
	if (base == 0 || base <= mark_base(vm) ||
	    vm->stack[base - 1].kind != V_OPAQUE)
		return FAIL(vm, "ADDITEMS applied to %s",
			    base && base > mark_base(vm)
				? kind_name(vm->stack[base - 1])
				: "nothing");
	return 0;
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
	return bfs_pickle_push(vm, vm->memo[idx]);
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
	return bfs_pickle_push(vm, x);
}

static int op_int(struct vm *vm, int n, int is_signed)
{
	uint64_t v;
	struct val x = {.kind = V_INT};
	int rc = arg(vm, n, &v);

	if (rc)
		return rc;
	x.u.i = is_signed ? (int64_t)(int32_t)(uint32_t)v : (int64_t)v;
	return bfs_pickle_push(vm, x);
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
	return bfs_pickle_push(vm, x);
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
	return bfs_pickle_push(vm, x);
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
		return bfs_pickle_op_reduce(vm);
	case 0x81:
		return bfs_pickle_op_newobj(vm, 0);
	case 0x92:
		return bfs_pickle_op_newobj(vm, 1);
	case 'b':
		return bfs_pickle_op_build(vm);
	case 'Q':
		return bfs_pickle_op_persid(vm);
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
		return push_new(vm, bfs_pickle_new_seq(vm, V_LIST, 0));
	case '}':
		return push_new(vm, bfs_pickle_new_seq(vm, V_DICT, 0));
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
	case 'B':
		return op_bytes(vm, 4);
	case 'C':
		return op_bytes(vm, 1);
	case 0x8e:
		return op_bytes(vm, 8);
	case 0x8f:
		return bfs_pickle_push_opaque(vm, O_SET, NULL);
	case 0x90:
		return op_set_mark(vm, 0);
	case 0x91:
		return op_set_mark(vm, 1);
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
	return bfs_pickle_build_result(vm, vm->stack[0], out);
}

int bfs_pickle_load(const uint8_t *buf, size_t len, const char *label,
		    size_t mem_limit, struct bfs_pickle_result *out,
		    struct bfs_error *err)
{
	struct bfs_error local = {""};
	struct vm vm = {.p = buf,
			.len = len,
			.label = label,
			.err = err ? err : &local,
			.alloc_rc = -ENOMEM};
	int rc;

	memset(out, 0, sizeof(*out));
	if (len > BFS_PICKLE_MAX)
		return bfs_error_set(
		    vm.err, -E2BIG, label, BFS_NO_OFFSET,
		    "data.pkl of %zu bytes exceeds the limit of %u "
		    "bytes",
		    len, BFS_PICKLE_MAX);
	if (!mem_limit)
		mem_limit = BFS_PICKLE_MEM_DEFAULT;
	vm.mem_limit = MEM_LIMIT(len) < mem_limit ? MEM_LIMIT(len) : mem_limit;
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
	free(r->meta);
	free(r->meta_text);
	free(r->foreign);
	memset(r, 0, sizeof(*r));
}
