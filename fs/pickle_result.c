/* fs/pickle_result: what the object left at STOP of a torch.save pickle
 * serves (fs/README.md: the pickle): its tensors, found through dicts
 * nested or not, are the fields; every other value beside them is
 * metadata, rendered as JSON under its key path (fs/README.md: metadata).
 *
 * Two walks over the top-level object, with explicit stacks (no
 * recursion): the first counts the fields, renders the metadata
 * (fs/pickle_json.c) and refuses what cannot be served; the second, once
 * the result is charged to the budget, fills it.
 *
 * Security invariants: nothing here calls anything; a poisoned cell (an
 * allowlisted rebuild given a global outside the allowlist) is refused
 * wherever the walks meet it, naming its key path and the global, and so
 * is an inert cell where the fields would be (the top-level object); an
 * inert cell anywhere else is metadata, named by its global. Bounds: a
 * walk looks at most MAX_VISITS cells, containers nest at most
 * BFS_PICKLE_MAX_NEST deep, the metadata's text takes at most
 * BFS_PICKLE_META_MAX bytes (a value that does not fit is named, its value
 * omitted). */
#include "fs/pickle_vm.h"
#include "fs/size.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static bool is_poison(struct val v)
{
	return v.kind == V_OPAQUE &&
	       ((const struct opaque_obj *)v.u.o)->what == O_POISON;
}

/* Inert cell 'o' of a global outside the allowlist where something is
 * served: 'where' ("field 'x'", "'meta'", "the top-level object") is
 * refused, at the offset of the global's opcode. */
static int foreign_refused(struct vm *vm, const struct opaque_obj *o,
			   const char *where, const char *name)
{
	char g[2 * MAX_GLOBAL_LINE + 2];

	bfs_pickle_global_name(o->global, ' ', g, sizeof(g));
	vm->op = o->global->at;
	return FAIL(vm,
		    "refused global '%s' in %s%s%s (%s%s; batchfs, like "
		    "torch.load(weights_only=True), allows only the "
		    "tensor-rebuild globals of torch.save)",
		    g, where, name, strchr(where, '\'') ? "'" : "",
		    o->what == O_POISON	  ? o->made
		    : o->what == O_OBJECT ? "an object made by it"
					  : "the global itself",
		    o->what == O_POISON ? " rebuilt with it" : "");
}

/* ---- the fields: tensors, in dicts nested or not ---- */

/* What a value holds, looked for through its containers. */
enum { HOLDS_TENSOR = 1, HOLDS_POISON = 2 };

/* Cells one walk over the fields may look at: a pickle can share one list
 * many times over (memo), which a walk sees each time. */
#define MAX_VISITS (1u << 20)

/* Longest dotted field name. */
#define MAX_NAME 4096

/* Room for the names of the globals the metadata holds. */
#define FOREIGN_TEXT 300

/* One walk over the top-level object's fields: the first counts them and
 * renders the metadata (r NULL), the second adds them to r. */
struct walk {
	struct vm *vm;
	struct bfs_pickle_result *r;
	size_t n;	       /* tensors met */
	size_t n_meta;	       /* metadata entries kept in 'text' */
	size_t n_meta_dropped; /* ... and past BFS_PICKLE_META_MAX */
	size_t visits;	       /* cells looked at (holds) */
	char foreign[FOREIGN_TEXT];
	char name[MAX_NAME];
	/* key path, JSON and what it is, each NUL-terminated, per entry */
	size_t text_len;
	char text[BFS_PICKLE_META_MAX];
};

/* Name the global outside the allowlist that v is or came from (once) in
 * w->foreign, while there is room. */
static void note_foreign(struct walk *w, struct val v)
{
	const struct opaque_obj *g = bfs_pickle_foreign(v);
	char name[2 * MAX_GLOBAL_LINE + 4] = "'";
	size_t at = strlen(w->foreign);

	if (!g || w->r)
		return;
	bfs_pickle_global_name(g, ' ', name + 1, sizeof(name) - 2);
	strcat(name, "'");
	if (strstr(w->foreign, name))
		return;
	if (at + strlen(name) + 8 < sizeof(w->foreign))
		snprintf(w->foreign + at, sizeof(w->foreign) - at, "%s%s",
			 at ? ", " : "", name);
	else if (at && !strstr(w->foreign, ", ..."))
		snprintf(w->foreign + at, sizeof(w->foreign) - at, ", ...");
}

/* Whether v or what its containers hold (depth first, no recursion) is a
 * tensor or a poisoned cell (the first into *poison): HOLDS_ flags, or
 * -EINVAL when it nests deeper than BFS_PICKLE_MAX_NEST or the walk's
 * cells pass MAX_VISITS. The globals met are noted (note_foreign). */
static int holds(struct walk *w, struct val v, const char *name,
		 const struct opaque_obj **poison)
{
	struct vm *vm = w->vm;
	struct {
		const struct seq_obj *s;
		size_t i;
	} st[BFS_PICKLE_MAX_NEST];
	int depth = 0, flags = 0;

	for (;;) {
		if (v.kind == V_TENSOR)
			flags |= HOLDS_TENSOR;
		else if (is_poison(v)) {
			if (!(flags & HOLDS_POISON))
				*poison = (const struct opaque_obj *)v.u.o;
			flags |= HOLDS_POISON;
		} else if (is_container(v)) {
			if (depth == BFS_PICKLE_MAX_NEST)
				return FAIL(vm,
					    "'%s': containers nested deeper "
					    "than %d levels",
					    name, BFS_PICKLE_MAX_NEST);
			st[depth].s = (const struct seq_obj *)v.u.o;
			st[depth++].i = 0;
		} else
			note_foreign(w, v);
		while (depth && st[depth - 1].i == st[depth - 1].s->n)
			depth--;
		if (!depth)
			return flags;
		v = st[depth - 1].s->v[st[depth - 1].i++];
		if (++w->visits > MAX_VISITS)
			return FAIL(vm,
				    "'%s': the values beside the tensors take "
				    "more than %u cells: refused",
				    name, MAX_VISITS);
	}
}

/* What v is, for messages: "a list", "a numpy array: ...", "an object of
 * global 'argparse Namespace'". */
static const char *describe(struct val v, char *buf, size_t len)
{
	const struct opaque_obj *o = (const struct opaque_obj *)v.u.o;
	char g[2 * MAX_GLOBAL_LINE + 2];

	if (v.kind != V_OPAQUE)
		return kind_name(v);
	switch (o->what) {
	case O_NP_ARRAY:
		return "a numpy array: save it with torch.from_numpy(...) to "
		       "serve it";
	case O_NP_SCALAR:
		return "a numpy scalar";
	case O_NP_DTYPE:
		return "a numpy dtype";
	case O_NP_OTHER:
		return "a numpy object";
	case O_BYTES:
		return "bytes";
	case O_SET:
		return "a set";
	case O_FROZENSET:
		return "a frozenset";
	case O_GLOBAL:
	case O_OBJECT:
	case O_POISON:
		break;
	}
	if (!o->global)
		return "an object";
	snprintf(buf, len, "%s global '%s'",
		 o->what == O_GLOBAL ? "the" : "an object of",
		 bfs_pickle_global_name(o->global, ' ', g, sizeof(g)));
	return buf;
}

/* Metadata 'name' holding v (the first walk): its key path, JSON and what
 * it is appended to w->text; a value whose JSON does not fit (or has none:
 * a dict key that is a tuple) as {"__type__": T, "__omitted__": why}; an
 * entry that does not fit at all is only counted. */
static void meta(struct walk *w, struct val v, const char *name)
{
	char buf[2 * MAX_GLOBAL_LINE + 32], type[2 * MAX_GLOBAL_LINE + 2];
	const char *what = describe(v, buf, sizeof(buf));
	size_t klen = strlen(name) + 1, wlen = strlen(what) + 1, len = 0, cap;
	char *json = w->text + w->text_len + klen;
	int rc;

	if (w->r)
		return;
	note_foreign(w, v);
	if (klen + wlen + 1 >= sizeof(w->text) - w->text_len) {
		w->n_meta_dropped++;
		return;
	}
	cap = sizeof(w->text) - w->text_len - klen - wlen - 1;
	rc = bfs_pickle_json(v, json, cap, &len);
	if (rc) {
		int k =
		    snprintf(json, cap,
			     "{\"__type__\": \"%s\", \"__omitted__\": \"%s\"}",
			     bfs_pickle_type_name(v, type, sizeof(type)),
			     rc == -EINVAL  ? "not JSON: a key that is not a "
					      "str, int, float, bool or None"
			     : rc == -ELOOP ? "nested too deep for dataset.json"
					    : "too large for dataset.json");

		if (k < 0 || (size_t)k >= cap) {
			w->n_meta_dropped++;
			return;
		}
		len = (size_t)k;
	}
	memcpy(w->text + w->text_len, name, klen);
	json[len++] = 0;
	memcpy(json + len, what, wlen);
	w->text_len += klen + len + wlen;
	w->n_meta++;
}

/* ---- the walks ---- */

/* Field 'name' holding v: a tensor is counted or added; a container
 * holding tensors is refused with advice, a poisoned cell (or a container
 * holding one) by the global it relies on; the rest is metadata. */
static int leaf(struct walk *w, struct val v, const char *name)
{
	struct vm *vm = w->vm;
	const struct opaque_obj *p = NULL;
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
	if (is_poison(v))
		return foreign_refused(vm, (const struct opaque_obj *)v.u.o,
				       "field '", name);
	h = is_container(v) ? holds(w, v, name, &p) : 0;
	if (h < 0)
		return h;
	if (h & HOLDS_POISON)
		return foreign_refused(vm, p, "'", name);
	if (h)
		return FAIL(vm,
			    "field '%s' is %s holding tensors: save one tensor "
			    "per field (torch.stack the samples; a "
			    "variable-length field as NAME.values and "
			    "NAME.offsets)",
			    name, kind_name(v));
	meta(w, v, name);
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

/* The fields of dict d, and of the dicts holding tensors (or poisoned
 * cells) within it ("outer.inner"), in pickle order, with an explicit
 * stack. */
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
		const struct opaque_obj *p = NULL;
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
		if (v.kind == V_DICT && (rc = holds(w, v, w->name, &p)) > 0) {
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

/* The metadata the first walk rendered, into r (charged to the budget). */
static int keep_meta(struct vm *vm, const struct walk *w,
		     struct bfs_pickle_result *r)
{
	const char *p;
	int rc =
	    bfs_pickle_charge(vm, w->text_len + w->n_meta * sizeof(*r->meta));

	r->n_meta_dropped = w->n_meta_dropped;
	if (!rc && w->foreign[0] && !(r->foreign = strdup(w->foreign)))
		rc = bfs_pickle_nomem(vm);
	if (rc || !w->n_meta)
		return rc;
	r->meta_text = malloc(w->text_len);
	r->meta = calloc(w->n_meta, sizeof(*r->meta));
	if (!r->meta_text || !r->meta)
		return bfs_pickle_nomem(vm);
	memcpy(r->meta_text, w->text, w->text_len);
	p = r->meta_text;
	for (size_t i = 0; i < w->n_meta; i++) {
		r->meta[i].key = p;
		p += strlen(p) + 1;
		r->meta[i].json = p;
		p += strlen(p) + 1;
		r->meta[i].what = p;
		p += strlen(p) + 1;
	}
	r->n_meta = w->n_meta;
	return 0;
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

/* The kind of object 'top' is, refused unless it holds fields. */
static int check_top(struct vm *vm, struct val top)
{
	const struct opaque_obj *g = bfs_pickle_foreign(top);

	if (g)
		return foreign_refused(vm, (const struct opaque_obj *)top.u.o,
				       "the top-level object", "");
	if (top.kind != V_DICT && top.kind != V_LIST && top.kind != V_TUPLE &&
	    top.kind != V_TENSOR)
		return FAIL(vm,
			    "top-level object is %s, not a dict, list, "
			    "tuple or tensor",
			    kind_name(top));
	if (top.kind != V_TENSOR) {
		const struct seq_obj *c = (const struct seq_obj *)top.u.o;
		size_t n = top.kind == V_DICT ? c->n / 2 : c->n;

		if (n > BFS_MAX_FIELDS)
			return FAIL(vm,
				    "the top-level %s holds %zu items: more "
				    "than the %u fields batchfs serves",
				    container_names[containers[top.kind]], n,
				    BFS_MAX_FIELDS);
	}
	return 0;
}

/* The object left at STOP into *r: its fields found and checked and its
 * metadata rendered first (a counting walk), then the result (about 1 KiB
 * per tensor) is charged to the budget and built by a second walk. */
int bfs_pickle_build_result(struct vm *vm, struct val top,
			    struct bfs_pickle_result *r)
{
	struct walk *w;
	int rc = check_top(vm, top);

	if (rc)
		return rc;
	r->container = containers[top.kind];
	w = calloc(1, sizeof(*w));
	if (!w)
		return bfs_pickle_nomem(vm);
	w->vm = vm;
	rc = walk(w, top);
	if (!rc && w->n == 0)
		rc = FAIL(vm,
			  "the top-level %s holds no tensors: nothing to "
			  "serve%s",
			  container_names[r->container],
			  w->n_meta + w->n_meta_dropped
			      ? " (only values that are not tensors)"
			      : "");
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
	if (!rc)
		rc = keep_meta(vm, w, r);
	if (!rc) {
		w->r = r;
		w->n = w->visits = 0;
		rc = walk(w, top);
	}
	free(w);
	return rc ? rc : check_fields(vm, r);
}
