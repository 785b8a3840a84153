/* fs/pickle: the restricted VM reads what torch.save writes and refuses
 * every malicious or malformed pickle with a message naming the reason.
 *
 * The first pickle is byte for byte what torch 1.13 writes for
 * {'x': arange(6, uint8).reshape(2, 3), 'y': tensor([1, 2])}; the others are
 * assembled with the small writer below following the same patterns
 * (fs/README.md: the pickle). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "fs/pickle.h"

/* The bytes of a string literal, without the terminating NUL. */
#define LIT(s) (const uint8_t *)(s), sizeof(s) - 1

/* torch 1.13: torch.save({'x': torch.arange(6, dtype=torch.uint8)
 * .reshape(2, 3), 'y': torch.tensor([1, 2])}), record archive/data.pkl. */
static const uint8_t torch_dict[] =
    "\x80\x02}q\x00(X\x01\x00\x00\x00xq\x01"
    "ctorch._utils\n_rebuild_t"
    "ensor_v2\nq\x02((X\x07\x00\x00\x00storageq\x03"
    "ctorch\nByteStora"
    "ge\nq\x04X\x01\x00\x00\x00"
    "0q\x05X\x03\x00\x00\x00"
    "cpuq\x06K"
    "\x06tq\x07QK\x00K\x02K\x03\x86q\x08K\x03K\x01\x86q\x09\x89"
    "ccoll"
    "ections\nOrderedDict\nq\n)Rq\x0btq\x0cRq\x0dX\x01\x00\x00\x00yq"
    "\x0eh\x02((h\x03"
    "ctorch\nLongStorage\nq\x0fX\x01\x00\x00\x00"
    "1"
    "q\x10h\x06K\x02tq\x11QK\x00K\x02\x85q\x12K\x01\x85q\x13\x89h\n)Rq"
    "\x14tq\x15Rq\x16u.";

/* ---- a tiny pickle writer ---- */

struct pk {
	uint8_t *b;
	size_t len, cap;
};

static void pk_raw(struct pk *p, const void *s, size_t n)
{
	if (p->len + n > p->cap) {
		p->cap = (p->len + n) * 2 + 64;
		p->b = realloc(p->b, p->cap);
		assert_non_null(p->b);
	}
	memcpy(p->b + p->len, s, n);
	p->len += n;
}

static void pk_op(struct pk *p, uint8_t op)
{
	pk_raw(p, &op, 1);
}

static void pk_u32(struct pk *p, uint32_t v)
{
	uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16),
			(uint8_t)(v >> 24)};
	pk_raw(p, b, 4);
}

static void pk_str(struct pk *p, const char *s)
{
	pk_op(p, 'X');
	pk_u32(p, (uint32_t)strlen(s));
	pk_raw(p, s, strlen(s));
}

/* BININT1 / BININT2 / BININT / LONG1 as pickle chooses by value. */
static void pk_int(struct pk *p, int64_t v)
{
	if (v >= 0 && v < 256) {
		pk_op(p, 'K');
		pk_op(p, (uint8_t)v);
	} else if (v >= 0 && v < 65536) {
		pk_op(p, 'M');
		pk_op(p, (uint8_t)v);
		pk_op(p, (uint8_t)(v >> 8));
	} else if (v >= INT32_MIN && v <= INT32_MAX) {
		pk_op(p, 'J');
		pk_u32(p, (uint32_t)v);
	} else {
		pk_op(p, 0x8a);
		pk_op(p, 8);
		for (int i = 0; i < 8; i++)
			pk_op(p, (uint8_t)((uint64_t)v >> (8 * i)));
	}
}

static void pk_global(struct pk *p, const char *mod, const char *name)
{
	pk_op(p, 'c');
	pk_raw(p, mod, strlen(mod));
	pk_op(p, '\n');
	pk_raw(p, name, strlen(name));
	pk_op(p, '\n');
}

static void pk_odict(struct pk *p)
{
	pk_global(p, "collections", "OrderedDict");
	pk_op(p, ')');
	pk_op(p, 'R');
}

static void pk_int_tuple(struct pk *p, int n, const int64_t *v)
{
	pk_op(p, '(');
	for (int i = 0; i < n; i++)
		pk_int(p, v[i]);
	pk_op(p, 't');
}

struct tspec {
	const char *storage, *key;
	int64_t numel, offset;
	int ndim;
	int64_t size[4], stride[4];
};

/* _rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())
 * with the REDUCE; 'extra' = a 7th (metadata) argument already written
 * by the caller when non-NULL. */
/* MARK 'storage' GLOBAL(torch <storage>) key location: the persistent id
 * up to its element count (the caller writes it, then TUPLE BINPERSID). */
static void pk_pid_head(struct pk *p, const char *storage, const char *key,
			const char *location)
{
	pk_op(p, '(');
	pk_str(p, "storage");
	pk_global(p, "torch", storage);
	pk_str(p, key);
	pk_str(p, location);
}

/* offset, size, stride, False, OrderedDict(): the arguments after the
 * storage. */
static void pk_geometry(struct pk *p, int64_t offset, int ndim,
			const int64_t *size, const int64_t *stride)
{
	pk_int(p, offset);
	pk_int_tuple(p, ndim, size);
	pk_int_tuple(p, ndim, stride);
	pk_op(p, 0x89);
	pk_odict(p);
}

static void pk_tensor_args(struct pk *p, const struct tspec *t)
{
	pk_op(p, '(');
	pk_pid_head(p, t->storage, t->key, "cpu");
	pk_int(p, t->numel);
	pk_raw(p, LIT("tQ"));
	pk_geometry(p, t->offset, t->ndim, t->size, t->stride);
}

static void pk_tensor(struct pk *p, const struct tspec *t)
{
	pk_global(p, "torch._utils", "_rebuild_tensor_v2");
	pk_tensor_args(p, t);
	pk_op(p, 't');
	pk_op(p, 'R');
}

static const struct tspec f32_2x3 = {"FloatStorage", "0",   6, 0, 2,
				     {2, 3},	     {3, 1}};
static const struct tspec i64_4 = {"LongStorage", "1", 4, 0, 1, {4}, {1}};

/* ---- running ---- */

static struct bfs_pickle_result res;
static struct bfs_error err;

static int load(const void *b, size_t n)
{
	bfs_pickle_result_free(&res);
	memset(&err, 0, sizeof(err));
	return bfs_pickle_load(b, n, "t.pkl", 0, &res, &err);
}

static void expect_ok(struct pk *p)
{
	int rc = load(p->b, p->len);
	if (rc)
		fail_msg("refused: %s", err.msg);
}

/* Refused with -EINVAL (or 'want_rc') and a message containing 'what'. */
static void expect_refused_rc(const void *b, size_t n, int want_rc,
			      const char *what)
{
	int rc = load(b, n);

	if (rc != want_rc || !strstr(err.msg, what))
		fail_msg("expected rc %d '%s', got rc %d '%s'", want_rc, what,
			 rc, err.msg);
	assert_int_equal(res.n_tensors, 0);
	assert_null(res.tensors);
	assert_true(strncmp(err.msg, "t.pkl: offset ", 14) == 0);
}

static void expect_refused(struct pk *p, const char *what)
{
	expect_refused_rc(p->b, p->len, -EINVAL, what);
}

static int teardown(void **state)
{
	bfs_pickle_result_free(&res);
	return 0;
}

static void check_tensor(const struct bfs_pickle_tensor *t, const char *name,
			 enum bfs_dtype dt, const char *key, uint64_t offset,
			 int ndim, const int64_t *size, const int64_t *stride)
{
	assert_string_equal(t->name, name);
	assert_int_equal(t->dtype, dt);
	assert_string_equal(t->storage_key, key);
	assert_int_equal(t->offset, offset);
	assert_int_equal(t->ndim, ndim);
	for (int i = 0; i < ndim; i++) {
		assert_int_equal(t->size[i], size[i]);
		assert_int_equal(t->stride[i], stride[i]);
	}
}

/* ---- what torch writes ---- */

static void torch_1_13_dict_of_two_tensors_is_read(void **state)
{
	assert_int_equal(load(torch_dict, sizeof(torch_dict) - 1), 0);
	assert_int_equal(res.container, BFS_CONTAINER_DICT);
	assert_int_equal(res.n_tensors, 2);
	check_tensor(&res.tensors[0], "x", BFS_DT_UINT8, "0", 0, 2,
		     (int64_t[]){2, 3}, (int64_t[]){3, 1});
	assert_int_equal(res.tensors[0].storage_dtype, BFS_DT_UINT8);
	assert_int_equal(res.tensors[0].storage_numel, 6);
	check_tensor(&res.tensors[1], "y", BFS_DT_INT64, "1", 0, 1,
		     (int64_t[]){2}, (int64_t[]){1});
	assert_int_equal(res.tensors[1].storage_numel, 2);
	assert_int_equal(res.tensors[1].requires_grad, 0);
	assert_int_equal(res.tensors[1].is_parameter, 0);
}

static void every_truncation_of_a_torch_pickle_is_refused(void **state)
{
	for (size_t n = 0; n < sizeof(torch_dict) - 1; n++)
		expect_refused_rc(torch_dict, n, -EINVAL, "truncated pickle");
}

static void ordereddict_keeps_insertion_order(void **state)
{
	struct pk p = {0};
	const char *names[] = {"zeta", "alpha", "mid"};

	pk_raw(&p, LIT("\x80\x02"));
	pk_odict(&p);
	pk_op(&p, '(');
	for (int i = 0; i < 3; i++) {
		pk_str(&p, names[i]);
		pk_tensor(&p, &f32_2x3);
	}
	pk_op(&p, 'u');
	pk_op(&p, '.');
	expect_ok(&p);
	assert_int_equal(res.container, BFS_CONTAINER_DICT);
	assert_int_equal(res.n_tensors, 3);
	for (int i = 0; i < 3; i++)
		assert_string_equal(res.tensors[i].name, names[i]);
	free(p.b);
}

static void list_and_tuple_fields_are_named_by_position(void **state)
{
	struct pk p = {0};

	pk_raw(&p, LIT("\x80\x02]q\x00("));
	pk_tensor(&p, &f32_2x3);
	pk_tensor(&p, &i64_4);
	pk_raw(&p, LIT("e."));
	expect_ok(&p);
	assert_int_equal(res.container, BFS_CONTAINER_LIST);
	check_tensor(&res.tensors[1], "1", BFS_DT_INT64, "1", 0, 1,
		     (int64_t[]){4}, (int64_t[]){1});
	assert_string_equal(res.tensors[0].name, "0");

	p.len = 0;
	pk_raw(&p, LIT("\x80\x02"));
	pk_tensor(&p, &f32_2x3);
	pk_tensor(&p, &i64_4);
	pk_raw(&p, LIT("\x86q\x00."));
	expect_ok(&p);
	assert_int_equal(res.container, BFS_CONTAINER_TUPLE);
	assert_int_equal(res.n_tensors, 2);
	assert_string_equal(res.tensors[1].name, "1");

	p.len = 0;
	pk_raw(&p, LIT("\x80\x02"));
	pk_tensor(&p, &i64_4);
	pk_op(&p, '.');
	expect_ok(&p);
	assert_int_equal(res.container, BFS_CONTAINER_TENSOR);
	assert_string_equal(res.tensors[0].name, "0");
	free(p.b);
}

/* {'base': f32[4,6], 'mid': base[1:3,2:5], 't': base.t()} over key "0",
 * the memo reusing the storage id as torch does. */
static void views_share_one_storage_through_the_memo(void **state)
{
	struct pk p = {0};

	pk_raw(&p, LIT("\x80\x02}("));
	pk_str(&p, "base");
	pk_global(&p, "torch._utils", "_rebuild_tensor_v2");
	pk_raw(&p, LIT("q\x01("));
	pk_pid_head(&p, "FloatStorage", "0", "cpu");
	pk_int(&p, 24);
	pk_raw(&p, LIT("tq\x02Q")); /* memo 2 = the persistent id */
	pk_geometry(&p, 0, 2, (int64_t[]){4, 6}, (int64_t[]){6, 1});
	pk_raw(&p, LIT("tR"));
	pk_str(&p, "mid");
	pk_raw(&p, LIT("h\x01(h\x02Q"));
	pk_geometry(&p, 8, 2, (int64_t[]){2, 3}, (int64_t[]){6, 1});
	pk_raw(&p, LIT("tR"));
	pk_str(&p, "t");
	pk_raw(&p, LIT("h\x01(h\x02Q"));
	pk_geometry(&p, 0, 2, (int64_t[]){6, 4}, (int64_t[]){1, 6});
	pk_raw(&p, LIT("tRu."));
	expect_ok(&p);
	assert_int_equal(res.n_tensors, 3);
	for (int i = 0; i < 3; i++) {
		assert_string_equal(res.tensors[i].storage_key, "0");
		assert_int_equal(res.tensors[i].storage_numel, 24);
	}
	check_tensor(&res.tensors[1], "mid", BFS_DT_FLOAT32, "0", 8, 2,
		     (int64_t[]){2, 3}, (int64_t[]){6, 1});
	check_tensor(&res.tensors[2], "t", BFS_DT_FLOAT32, "0", 0, 2,
		     (int64_t[]){6, 4}, (int64_t[]){1, 6});
	free(p.b);
}

static void parameter_is_unwrapped_and_marked(void **state)
{
	struct pk p = {0};

	pk_raw(&p, LIT("\x80\x02}("));
	pk_str(&p, "w");
	pk_global(&p, "torch._utils", "_rebuild_parameter");
	pk_tensor(&p, &f32_2x3);
	pk_op(&p, 0x88);
	pk_odict(&p);
	pk_raw(&p, LIT("\x87Ru."));
	expect_ok(&p);
	assert_int_equal(res.n_tensors, 1);
	assert_int_equal(res.tensors[0].is_parameter, 1);
	assert_int_equal(res.tensors[0].requires_grad, 1);
	check_tensor(&res.tensors[0], "w", BFS_DT_FLOAT32, "0", 0, 2,
		     (int64_t[]){2, 3}, (int64_t[]){3, 1});

	/* torch 2.x: _rebuild_parameter_with_state(data, rg, hooks, {}) */
	p.len = 0;
	pk_raw(&p, LIT("\x80\x02"));
	pk_global(&p, "torch._utils", "_rebuild_parameter_with_state");
	pk_op(&p, '(');
	pk_tensor(&p, &f32_2x3);
	pk_op(&p, 0x89);
	pk_odict(&p);
	pk_raw(&p, LIT("}tR."));
	expect_ok(&p);
	assert_int_equal(res.container, BFS_CONTAINER_TENSOR);
	assert_int_equal(res.tensors[0].is_parameter, 1);
	assert_int_equal(res.tensors[0].requires_grad, 0);

	/* ... whose state must be empty */
	p.len -= 4;
	pk_raw(&p, LIT("}X\x01\x00\x00\x00"
		       "aK\x01stR."));
	expect_refused(&p, "_rebuild_parameter: bad requires_grad, hooks or "
			   "state");
	free(p.b);
}

/* A whole pickle: uint8 tensor over storage "1" of 'numel' elements (raw
 * int opcode), offset 0, size tuple 'size' (raw, TUPLE1 included),
 * stride (1,). */
static void pk_byte_tensor(struct pk *p, const void *numel, size_t numel_len,
			   const void *size, size_t size_len)
{
	pk_raw(p, LIT("\x80\x02"));
	pk_global(p, "torch._utils", "_rebuild_tensor_v2");
	pk_op(p, '(');
	pk_pid_head(p, "ByteStorage", "1", "cpu");
	pk_raw(p, numel, numel_len);
	pk_raw(p, LIT("tQK\x00"));
	pk_raw(p, size, size_len);
	pk_raw(p, LIT("K\x01\x85\x89"));
	pk_odict(p);
	pk_raw(p, LIT("tR."));
}

/* uint8[2^32 + 64] as big.pt: numel and size are LONG1 5-byte ints. */
static void long1_sizes_beyond_2_31_are_exact(void **state)
{
	struct pk p = {0};
	int64_t big = ((int64_t)1 << 32) + 64;

	pk_byte_tensor(&p, LIT("\x8a\x05\x40\x00\x00\x00\x01"),
		       LIT("\x8a\x05\x40\x00\x00\x00\x01\x85"));
	expect_ok(&p);
	assert_int_equal(res.tensors[0].storage_numel, big);
	assert_int_equal(res.tensors[0].size[0], big);

	/* LONG1 is sign-extended: \xff = -1 is a negative size. */
	p.len = 0;
	pk_byte_tensor(&p, LIT("K\x04"), LIT("\x8a\x01\xff\x85"));
	expect_refused(&p, "tensor size is not a tuple of <= 64 ints >= 0");
	free(p.b);
}

/* torch 2.x: uint16 via _rebuild_tensor_v3 over an UntypedStorage, with
 * protocol-4 framing (FRAME, SHORT_BINUNICODE, MEMOIZE, STACK_GLOBAL). */
static void v3_untyped_storage_and_protocol_4_opcodes(void **state)
{
	struct pk p = {0};
	uint8_t *size_pos;

	pk_raw(&p, LIT("\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00"));
	pk_raw(&p, LIT("\x8c\x0ctorch._utils\x94\x8c\x12_rebuild_tensor_v3\x94"
		       "\x93\x94"));
	pk_raw(&p, LIT("((\x8c\x07storage\x94"));
	pk_global(&p, "torch", "UntypedStorage");
	pk_raw(&p, LIT("\x8c\x01"
		       "0\x8c\x03"
		       "cpuK\x0ctQK\x01K\x05\x85K\x01\x85\x89"));
	pk_odict(&p);
	pk_global(&p, "torch", "uint16");
	pk_raw(&p, LIT("tR."));
	expect_ok(&p);
	assert_int_equal(res.tensors[0].dtype, BFS_DT_UINT16);
	assert_int_equal(res.tensors[0].storage_dtype, BFS_DT_UINT8);
	assert_int_equal(res.tensors[0].storage_numel, 12);
	assert_int_equal(res.tensors[0].offset, 1);
	/* offset 1 + 5 elements of 2 bytes = 12 bytes: fits exactly. One
	 * more element does not. */
	size_pos = memmem(p.b, p.len, "K\x05\x85", 3);
	assert_non_null(size_pos);
	size_pos[1] = 6; /* size (5,) -> (6,) */
	expect_refused(&p, "exceeds storage '0'");
	free(p.b);
}

/* ---- what must be refused ---- */

/* A global outside the allowlist where the fields would be (the top-level
 * object) is refused by name, at the offset of its GLOBAL opcode. */
static void dangerous_globals_as_the_top_level_object_are_refused(void **state)
{
	expect_refused_rc(LIT("\x80\x02"
			      "cos\nsystem\n."),
			  -EINVAL, "refused global 'os system'");
	expect_refused_rc(LIT("\x80\x02"
			      "cposix\nsystem\n."),
			  -EINVAL, "refused global 'posix system'");
	expect_refused_rc(LIT("\x80\x02\x8c\x08"
			      "builtins\x8c\x04"
			      "eval\x93."),
			  -EINVAL, "refused global 'builtins eval'");
	expect_refused_rc(LIT("\x80\x02"
			      "ctorch\nload\n)R."),
			  -EINVAL, "refused global 'torch load'");
	/* the offset is the GLOBAL's, not the REDUCE's */
	expect_refused_rc(LIT("\x80\x02"
			      "cos\nsystem\nX\x02\x00\x00\x00id\x85R."),
			  -EINVAL,
			  "t.pkl: offset 2: refused global 'os system' in the "
			  "top-level object (an object made by it; batchfs, "
			  "like torch.load(weights_only=True), allows only");
}

static void python_pickle_of_os_system_is_refused(void **state)
{
	/* pickle.dumps(X, 2) with X.__reduce__ = (os.system, ('id',)) */
	static const char evil[] = "\x80\x02"
				   "cposix\nsystem\nq\x00X\x02\x00"
				   "\x00\x00idq\x01\x85q\x02Rq\x03.";
	expect_refused_rc(LIT(evil), -EINVAL,
			  "offset 2: refused global 'posix system'");
}

/* ---- metadata: what is beside the tensors ---- */

/* The JSON of metadata 'key' in the last result (fails when absent). */
static const char *meta_json(const char *key)
{
	for (size_t i = 0; i < res.n_meta; i++)
		if (!strcmp(res.meta[i].key, key))
			return res.meta[i].json;
	fail_msg("no metadata '%s' (%zu entries)", key, res.n_meta);
	return NULL;
}

static const char *meta_what(const char *key)
{
	for (size_t i = 0; i < res.n_meta; i++)
		if (!strcmp(res.meta[i].key, key))
			return res.meta[i].what;
	fail_msg("no metadata '%s'", key);
	return NULL;
}

/* {"x": f32[2, 3], ...: the caller's entries, then SETITEMS, STOP}. */
static void pk_dict_with_x(struct pk *p)
{
	p->len = 0;
	pk_raw(p, LIT("\x80\x02}("));
	pk_str(p, "x");
	pk_tensor(p, &f32_2x3);
}

/* argparse.Namespace(lr=0.1), os.system('touch ...'), os.system itself,
 * a list subclass, a defaultdict: beside a tensor, inert metadata whose
 * globals are named; nothing is called (NEWOBJ, REDUCE, BUILD, APPENDS
 * and SETITEMS on them make or keep inert cells). */
static void
globals_outside_the_allowlist_beside_the_tensors_are_inert(void **state)
{
	struct pk p = {0};

	pk_dict_with_x(&p);
	pk_str(&p, "args");
	pk_global(&p, "argparse", "Namespace");
	pk_raw(&p, LIT(")\x81}"));
	pk_str(&p, "lr");
	pk_raw(&p, LIT("G\x3f\xb9\x99\x99\x99\x99\x99\x9a"
		       "sb"));
	pk_str(&p, "cmd");
	pk_global(&p, "posix", "system");
	pk_str(&p, "touch /tmp/batchfs-pwned");
	pk_raw(&p, LIT("\x85R"));
	pk_str(&p, "fn");
	pk_op(&p, ']');
	pk_global(&p, "os", "system");
	pk_op(&p, 'a');
	pk_str(&p, "obj");
	pk_global(&p, "__main__", "MyList");
	pk_raw(&p, LIT(")\x81(K\x01K\x02"
		       "e}b"));
	pk_str(&p, "dd");
	pk_global(&p, "collections", "defaultdict");
	pk_global(&p, "builtins", "list");
	pk_raw(&p, LIT("\x85R("));
	pk_str(&p, "a");
	pk_raw(&p, LIT("K\x01u"));
	pk_raw(&p, LIT("u."));
	expect_ok(&p);
	assert_int_equal(res.n_tensors, 1);
	assert_string_equal(res.tensors[0].name, "x");
	assert_int_equal(res.n_meta, 5);
	assert_string_equal(meta_json("args"),
			    "{\"__type__\": \"argparse.Namespace\"}");
	assert_string_equal(meta_json("cmd"),
			    "{\"__type__\": \"posix.system\"}");
	assert_string_equal(meta_json("fn"), "[{\"__type__\": \"global\", "
					     "\"name\": \"os.system\"}]");
	assert_string_equal(meta_json("obj"),
			    "{\"__type__\": \"__main__.MyList\"}");
	assert_string_equal(meta_json("dd"),
			    "{\"__type__\": \"collections.defaultdict\"}");
	assert_string_equal(meta_what("cmd"),
			    "an object of global 'posix system'");
	assert_string_equal(meta_what("fn"), "a list");
	assert_non_null(res.foreign);
	assert_string_equal(res.foreign,
			    "'argparse Namespace', 'posix system', "
			    "'os system', '__main__ MyList', "
			    "'collections defaultdict'");
	free(p.b);
}

/* A tensor whose rebuild takes something a global outside the allowlist
 * made (its size, its state, its storage) is refused wherever it is,
 * naming its key path and the global, at the global's offset. */
static void a_global_in_a_tensor_rebuild_is_refused_naming_its_key(void **state)
{
	struct pk p = {0};
	size_t at;

	/* {"x": _rebuild_tensor_v2(storage, 0, (os.system('id'),), ...)} */
	p.len = 0;
	pk_raw(&p, LIT("\x80\x02}("));
	pk_str(&p, "x");
	pk_global(&p, "torch._utils", "_rebuild_tensor_v2");
	pk_op(&p, '(');
	pk_pid_head(&p, "FloatStorage", "0", "cpu");
	pk_raw(&p, LIT("K\x06tQK\x00"));
	at = p.len;
	pk_global(&p, "os", "system");
	pk_str(&p, "id");
	pk_raw(&p, LIT("\x85R\x85K\x01\x85\x89"));
	pk_odict(&p);
	pk_raw(&p, LIT("tRu."));
	{
		char want[128];

		snprintf(want, sizeof(want),
			 "t.pkl: offset %zu: refused global 'os system' in "
			 "field 'x' (a tensor rebuilt with it; ",
			 at);
		expect_refused(&p, want);
	}

	/* ... nested in a dict beside tensors: its dotted name */
	pk_dict_with_x(&p);
	pk_str(&p, "meta");
	pk_raw(&p, LIT("}("));
	pk_str(&p, "t");
	pk_tensor(&p, &i64_4);
	pk_global(&p, "os", "system");
	pk_raw(&p, LIT("bu")); /* BUILD of the tensor with state os.system */
	pk_raw(&p, LIT("u."));
	expect_refused(&p, "refused global 'os system' in field 'meta.t' (a "
			   "tensor rebuilt with it");

	/* ... in a list: the list's name */
	pk_dict_with_x(&p);
	pk_str(&p, "l");
	pk_op(&p, ']');
	pk_global(&p, "torch._utils", "_rebuild_tensor_v2");
	pk_op(&p, '(');
	pk_op(&p, '(');
	pk_str(&p, "storage");
	pk_global(&p, "evil", "Storage");
	pk_str(&p, "1");
	pk_str(&p, "cpu");
	pk_raw(&p, LIT("K\x04tQK\x00K\x04\x85K\x01\x85\x89"));
	pk_odict(&p);
	pk_raw(&p, LIT("tRau."));
	expect_refused(&p, "refused global 'evil Storage' in 'l' (a tensor "
			   "rebuilt with it");
	free(p.b);
}

/* Plain values as Python's json.dumps writes them (tuples as lists, keys
 * str, int, float, bool or None as strings, floats as repr), strings
 * escaped, under their key path; a value JSON cannot hold named by its
 * type. */
static void metadata_is_json_under_its_key_path(void **state)
{
	struct pk p = {0};

	pk_dict_with_x(&p);
	pk_str(&p, "classes");
	pk_op(&p, ']');
	pk_op(&p, '(');
	pk_str(&p, "a");
	pk_str(&p, "b");
	pk_op(&p, 'e');
	pk_str(&p, "n");
	pk_int(&p, -50);
	pk_str(&p, "f");
	pk_raw(&p, LIT("G\x3f\xb9\x99\x99\x99\x99\x99\x9a"));
	pk_str(&p, "one");
	pk_raw(&p, LIT("G\x3f\xf0\x00\x00\x00\x00\x00\x00"));
	pk_str(&p, "nan");
	pk_raw(&p, LIT("G\x7f\xf8\x00\x00\x00\x00\x00\x00"));
	pk_str(&p, "none");
	pk_op(&p, 'N');
	pk_str(&p, "t");
	pk_raw(&p, LIT("K\x01\x88\x86"));
	pk_str(&p, "esc");
	pk_str(&p, "q\"\\\n\x01\xc3\xa9");
	pk_str(&p, "d");
	pk_raw(&p, LIT("}(K\x01"));
	pk_str(&p, "a");
	pk_raw(&p, LIT("NK\x02\x88]u"));
	pk_str(&p, "bad");
	pk_raw(&p, LIT("}K\x01\x85K\x02s"));
	pk_str(&p, "dt");
	pk_global(&p, "torch", "float32");
	pk_str(&p, "train");
	pk_raw(&p, LIT("}("));
	pk_str(&p, "y");
	pk_tensor(&p, &f32_2x3);
	pk_str(&p, "info");
	pk_str(&p, "v1");
	pk_raw(&p, LIT("uu."));
	expect_ok(&p);
	assert_int_equal(res.n_tensors, 2);
	assert_string_equal(res.tensors[1].name, "train.y");
	assert_string_equal(meta_json("classes"), "[\"a\", \"b\"]");
	assert_string_equal(meta_json("n"), "-50");
	assert_string_equal(meta_json("f"), "0.1");
	assert_string_equal(meta_json("one"), "1.0");
	assert_string_equal(
	    meta_json("nan"),
	    "{\"__type__\": \"float\", \"__value__\": \"nan\"}");
	assert_string_equal(meta_json("none"), "null");
	assert_string_equal(meta_json("t"), "[1, true]");
	assert_string_equal(meta_json("esc"),
			    "\"q\\\"\\\\\\u000a\\u0001\xc3\xa9\"");
	assert_string_equal(meta_json("d"),
			    "{\"1\": \"a\", \"null\": 2, \"true\": []}");
	assert_string_equal(meta_json("bad"),
			    "{\"__type__\": \"dict\", \"__omitted__\": \"not "
			    "JSON: a key that is not a str, int, float, bool "
			    "or None\"}");
	assert_string_equal(meta_json("dt"), "{\"__type__\": \"global\", "
					     "\"name\": \"torch.float32\"}");
	assert_string_equal(meta_json("train.info"), "\"v1\"");
	assert_string_equal(meta_what("classes"), "a list");
	assert_null(res.foreign);
	free(p.b);
}

/* np.float64(0.25) as pickle protocol 2 writes it (a dict's value). */
#define NP_F64_QUARTER                                                         \
	"cnumpy.core.multiarray\nscalar\nq\x00"                                \
	"cnumpy\ndtype\nq\x01X\x02\x00\x00\x00"                                \
	"f8q\x02\x89\x88\x87q\x03Rq\x04(K\x03X\x01\x00\x00\x00<q\x05NNNJ\xff"  \
	"\xff\xff\xffJ\xff\xff\xff\xffK\x00tq\x06"                             \
	"bc_codecs\nencode\nq\x07X\x09\x00\x00\x00\x00\x00\x00\x00\x00\x00"    \
	"\xc3\x90?q\x08X\x06\x00\x00\x00latin1q\x09\x86q\nRq\x0b\x86q\x0cR"

/* A numpy array is metadata (never built, named with advice), a numpy
 * scalar keeps its value (read from its dtype and bytes, either byte
 * order). */
static void
numpy_objects_are_metadata_and_scalars_keep_their_value(void **state)
{
	struct pk p = {0};

	pk_dict_with_x(&p);
	pk_str(&p, "fn");
	pk_raw(&p, LIT("cnumpy.core.multiarray\n_reconstruct\n"
		       "cnumpy\nndarray\n\x85R}b"));
	pk_str(&p, "mean");
	pk_raw(&p, LIT(NP_F64_QUARTER));
	pk_str(&p, "be"); /* '>f8' 2.5 */
	pk_raw(&p, LIT("cnumpy.core.multiarray\nscalar\ncnumpy\ndtype\n"
		       "X\x02\x00\x00\x00"
		       "f8\x89\x88\x87R(K\x03X\x01\x00\x00\x00>NNNJ\xff\xff\xff"
		       "\xffJ\xff\xff\xff\xffK\x00tbc_codecs\nencode\n"
		       "X\x08\x00\x00\x00@\x04\x00\x00\x00\x00\x00\x00X\x06\x00"
		       "\x00\x00latin1\x86R\x86R"));
	pk_raw(&p, LIT("u."));
	expect_ok(&p);
	assert_int_equal(res.n_tensors, 1);
	assert_string_equal(meta_json("fn"),
			    "{\"__type__\": \"numpy.ndarray\"}");
	assert_string_equal(meta_what("fn"), "a numpy array: save it with "
					     "torch.from_numpy(...) to serve "
					     "it");
	assert_string_equal(meta_json("mean"), "0.25");
	assert_string_equal(meta_what("mean"), "a numpy scalar");
	assert_string_equal(meta_json("be"), "2.5");
	assert_null(res.foreign);
	free(p.b);
}

/* Bytes, sets and frozensets (protocols 3 and 4) and NEWOBJ_EX: inert,
 * their contents skipped, bounds checked. */
static void bytes_sets_and_newobj_ex_are_inert(void **state)
{
	struct pk p = {0};

	pk_dict_with_x(&p);
	pk_str(&p, "b");
	pk_raw(&p, LIT("C\x02xy"));
	pk_str(&p, "bb");
	pk_raw(&p, LIT("B\x03\x00\x00\x00xyz"));
	pk_str(&p, "s");
	pk_raw(&p, LIT("\x8f(K\x01K\x02\x90"));
	pk_str(&p, "fs");
	pk_raw(&p, LIT("(K\x01\x91"));
	pk_str(&p, "ns");
	pk_global(&p, "argparse", "Namespace");
	pk_raw(&p, LIT(")}\x92"));
	pk_raw(&p, LIT("u."));
	expect_ok(&p);
	assert_string_equal(meta_json("b"), "{\"__type__\": \"bytes\"}");
	assert_string_equal(meta_json("bb"), "{\"__type__\": \"bytes\"}");
	assert_string_equal(meta_json("s"), "{\"__type__\": \"set\"}");
	assert_string_equal(meta_json("fs"), "{\"__type__\": \"frozenset\"}");
	assert_string_equal(meta_json("ns"),
			    "{\"__type__\": \"argparse.Namespace\"}");
	expect_refused_rc(LIT("\x80\x03"
			      "B\xff\xff\xff\x00xy."),
			  -EINVAL, "truncated pickle: bytes of 16777215 bytes");
	expect_refused_rc(LIT("\x80\x02K\x01(K\x02\x90."), -EINVAL,
			  "ADDITEMS applied to an int");
	free(p.b);
}

/* The metadata's JSON takes at most 64 KiB: a value that does not fit is
 * named by its type, an entry past the budget only counted. */
static void metadata_takes_at_most_64_kib(void **state)
{
	struct pk p = {0};
	char *big = malloc(100001);
	size_t len = 0;

	memset(big, 'A', 100000);
	big[100000] = 0;
	pk_dict_with_x(&p);
	pk_str(&p, "big");
	pk_str(&p, big);
	pk_str(&p, "small");
	pk_int(&p, 1);
	big[1000] = 0;
	for (int i = 0; i < 3000; i++) { /* one 1000-byte str, memoized */
		char key[16];

		snprintf(key, sizeof(key), "k%04d", i);
		pk_str(&p, key);
		if (i == 0) {
			pk_str(&p, big);
			pk_raw(&p, LIT("q\x01"));
		} else
			pk_raw(&p, LIT("h\x01"));
	}
	pk_raw(&p, LIT("u."));
	expect_ok(&p);
	assert_string_equal(meta_json("big"),
			    "{\"__type__\": \"str\", \"__omitted__\": \"too "
			    "large for dataset.json\"}");
	assert_string_equal(meta_json("small"), "1");
	assert_int_equal(strlen(meta_json("k0000")), 1002);
	assert_string_equal(meta_json("k0069"), meta_json("big"));
	assert_true(res.n_meta_dropped > 1000);
	assert_int_equal(res.n_meta + res.n_meta_dropped, 3002);
	for (size_t i = 0; i < res.n_meta; i++)
		len += strlen(res.meta[i].key) + strlen(res.meta[i].json) +
		       strlen(res.meta[i].what) + 3;
	assert_true(len <= BFS_PICKLE_META_MAX);
	free(big);
	free(p.b);
}

static void newobj_only_makes_inert_objects(void **state)
{
	struct pk p = {0};

	pk_raw(&p, LIT("\x80\x02"));
	pk_odict(&p);
	p.len -= 2; /* no ')R' */
	pk_raw(&p, LIT(")\x81."));
	expect_refused(&p, "NEWOBJ of a global with a tuple as arguments: "
			   "refused");
	expect_refused_rc(LIT("\x80\x02K\x01)\x81."), -EINVAL,
			  "NEWOBJ of an int");
	free(p.b);
}

static void nesting_and_stack_limits_hold(void **state)
{
	size_t n = 100000;
	uint8_t *b = malloc(n + 3);

	memcpy(b, "\x80\x02", 2);
	memset(b + 2, '(', n);
	b[n + 2] = '.';
	expect_refused_rc(b, n + 3, -EINVAL, "MARK nesting deeper than 256");
	free(b);

	n = (1u << 20) + 1;
	b = malloc(n + 3);
	memcpy(b, "\x80\x02", 2);
	memset(b + 2, 'N', n);
	b[n + 2] = '.';
	expect_refused_rc(b, n + 3, -E2BIG, "stack overflow");
	free(b);
}

static void integer_opcodes_are_bounded(void **state)
{
	uint8_t b[210] = {0x80, 2, 0x8a, 200};

	b[204] = '.';
	expect_refused_rc(b, 205, -EINVAL, "LONG1 of 200 bytes");
	expect_refused_rc(LIT("\x80\x02\x8b\x04\x00\x00\x00\x01\x02\x03\x04."),
			  -EINVAL, "LONG4 opcode refused");
}

static void memo_abuse_is_refused(void **state)
{
	expect_refused_rc(LIT("\x80\x02h\x05."), -EINVAL,
			  "memo GET of unset index 5");
	expect_refused_rc(LIT("\x80\x02Nr\x00\x00\x10\x00."), -EINVAL,
			  "memo index 1048576 out of range");
	expect_refused_rc(LIT("\x80\x02j\xff\xff\xff\xff."), -EINVAL,
			  "memo GET of unset index 4294967295");
}

/* A list of 10^4 items fetched 10^6 times: references, not copies (a
 * copying memo would need 160 GB). */
static void repeated_memo_gets_share_one_object(void **state)
{
	struct pk p = {0};
	struct rusage before, after;
	size_t gets = 1000000;

	pk_raw(&p, LIT("\x80\x02]q\x00(]q\x01("));
	for (int i = 0; i < 10000; i++)
		pk_raw(&p, LIT("N"));
	pk_raw(&p, LIT("e"));
	for (size_t i = 1; i < gets; i++)
		pk_raw(&p, LIT("h\x01"));
	pk_raw(&p, LIT("e."));
	getrusage(RUSAGE_SELF, &before);
	/* it parses, to a list of more items than there may be fields */
	expect_refused(&p, "the top-level list holds 1000000 items: more "
			   "than the 4096 fields");
	getrusage(RUSAGE_SELF, &after);
	assert_true(after.ru_maxrss - before.ru_maxrss < 512 * 1024);
	free(p.b);
}

static void malformed_streams_are_refused(void **state)
{
	expect_refused_rc(LIT("\x80\x02N"), -EINVAL,
			  "truncated pickle: no STOP opcode");
	expect_refused_rc(LIT("\x80\x02N.N"), -EINVAL,
			  "offset 3: 1 bytes after STOP");
	expect_refused_rc(LIT("\x80\x02NN."), -EINVAL, "STOP with 2 values");
	expect_refused_rc(LIT("\x80\x02(N."), -EINVAL, "1 open MARKs");
	expect_refused_rc(LIT("\x80\x02i"), -EINVAL,
			  "unsupported pickle opcode 0x69 ('i')");
	expect_refused_rc(LIT("\x80\x02\xff"), -EINVAL,
			  "offset 2: unsupported pickle opcode 0xff");
	expect_refused_rc(LIT("\x80\x02X\xff\xff\xff\x7f."), -EINVAL,
			  "truncated pickle: string of 2147483647 bytes");
	expect_refused_rc(LIT("\x80\x02X\x02\x00\x00\x00\xc3\x28."), -EINVAL,
			  "not valid UTF-8");
	expect_refused_rc(LIT("\x80\x02t."), -EINVAL, "needs a MARK");
	expect_refused_rc(LIT("\x80\x02R."), -EINVAL, "stack underflow");
	expect_refused_rc(LIT("\x80\x02K\x01."), -EINVAL,
			  "top-level object is an int");
	expect_refused_rc(LIT("\x80\x02}X\x01\x00\x00\x00"
			      "aK\x01s."),
			  -EINVAL,
			  "holds no tensors: nothing to serve (only values "
			  "that are not tensors)");
	/* a dict holding itself: looked through to the nesting limit */
	expect_refused_rc(LIT("\x80\x02}q\x00X\x01\x00\x00\x00"
			      "ah\x00s."),
			  -EINVAL, "'a': containers nested deeper than 16");
	expect_refused_rc(LIT("\x80\x01N."), -EINVAL,
			  "unsupported pickle "
			  "protocol 1");
}

static void tensor_geometry_is_checked(void **state)
{
	struct pk p = {0};
	struct tspec t = f32_2x3;

	t.offset = 1; /* 1 + (2-1)*3 + (3-1)*1 + 1 = 7 > 6 */
	pk_raw(&p, LIT("\x80\x02"));
	pk_tensor(&p, &t);
	pk_op(&p, '.');
	expect_refused(&p, "tensor extent (offset 1, 2 dims) exceeds storage "
			   "'0' of 6 elements");

	t = f32_2x3;
	t.stride[0] = INT64_MAX; /* (2-1) * INT64_MAX + 2 overflows nothing, */
	p.len = 2;		 /* but is far beyond 6 elements */
	pk_tensor(&p, &t);
	pk_op(&p, '.');
	expect_refused(&p, "exceeds storage");

	t = f32_2x3;
	t.size[0] = INT64_MAX; /* (INT64_MAX-1) * 3 overflows u64 math */
	p.len = 2;
	pk_tensor(&p, &t);
	pk_op(&p, '.');
	expect_refused(&p, "exceeds storage");

	t = f32_2x3;
	t.size[0] = 0; /* empty tensors need no storage */
	t.numel = 0;
	p.len = 2;
	pk_tensor(&p, &t);
	pk_op(&p, '.');
	expect_ok(&p);

	t = f32_2x3;
	t.ndim = 2;
	p.len = 2;
	pk_global(&p, "torch._utils", "_rebuild_tensor_v2");
	pk_tensor_args(&p, &t);
	pk_raw(&p, LIT("}X\x04\x00\x00\x00"
		       "conj\x88stR."));
	expect_refused(&p, "tensor metadata (conj/neg bit) is not supported");

	t.storage = "QInt8Storage";
	p.len = 2;
	pk_tensor(&p, &t);
	pk_op(&p, '.');
	expect_refused(&p, "refused global 'torch QInt8Storage'");
	free(p.b);
}

static void meta_storage_and_bad_ids_are_refused(void **state)
{
	struct pk p = {0};

	pk_raw(&p, LIT("\x80\x02("));
	pk_pid_head(&p, "FloatStorage", "0", "meta");
	pk_raw(&p, LIT("K\x06tQ."));
	expect_refused(&p, "storage '0' is on the 'meta' device");

	p.len = 0;
	pk_raw(&p, LIT("\x80\x02("));
	pk_str(&p, "storage");
	pk_global(&p, "collections", "OrderedDict");
	pk_str(&p, "0");
	pk_str(&p, "cpu");
	pk_raw(&p, LIT("K\x06tQ."));
	expect_refused(&p, "storage type is a global, not a torch storage");

	expect_refused_rc(LIT("\x80\x02X\x01\x00\x00\x00xQ."), -EINVAL,
			  "persistent id is not a 5-tuple");
	free(p.b);
}

static void duplicate_keys_and_conflicting_storages_are_refused(void **state)
{
	struct pk p = {0};
	struct tspec t = f32_2x3;

	pk_raw(&p, LIT("\x80\x02}("));
	pk_str(&p, "a");
	pk_tensor(&p, &f32_2x3);
	pk_str(&p, "a");
	pk_tensor(&p, &f32_2x3);
	pk_raw(&p, LIT("u."));
	expect_refused(&p, "duplicate key 'a'");

	t.numel = 12;
	p.len = 4;
	pk_str(&p, "a");
	pk_tensor(&p, &f32_2x3);
	pk_str(&p, "b");
	pk_tensor(&p, &t);
	pk_raw(&p, LIT("u."));
	expect_refused(&p, "storage '0' declared with two different types");
	free(p.b);
}

static void reduce_and_build_are_restricted(void **state)
{
	struct pk p = {0};

	/* OrderedDict(x) with arguments */
	pk_raw(&p, LIT("\x80\x02"));
	pk_global(&p, "collections", "OrderedDict");
	pk_raw(&p, LIT("K\x01\x85R."));
	expect_refused(&p, "OrderedDict() with arguments");

	/* a tensor subclass with Python attributes (non-empty state) */
	p.len = 2;
	pk_global(&p, "torch._tensor", "_rebuild_from_type_v2");
	pk_op(&p, '(');
	pk_global(&p, "torch._utils", "_rebuild_tensor_v2");
	pk_global(&p, "torch", "Tensor");
	pk_tensor_args(&p, &f32_2x3);
	pk_op(&p, 't');
	pk_raw(&p, LIT("}X\x01\x00\x00\x00"
		       "aK\x01stR."));
	expect_refused(&p, "tensor subclass state");

	/* ... and with empty state it is a plain tensor */
	p.len -= sizeof("}X\x01\x00\x00\x00"
			"aK\x01stR.") -
		 1;
	pk_raw(&p, LIT("}tR."));
	expect_ok(&p);
	assert_int_equal(res.tensors[0].ndim, 2);

	/* BUILD with state on a tensor */
	p.len = 2;
	pk_tensor(&p, &f32_2x3);
	pk_raw(&p, LIT("K\x01\x85"
		       "b."));
	expect_refused(&p, "BUILD of a tensor with a tuple as state");

	/* calling a storage class */
	p.len = 2;
	pk_global(&p, "torch", "FloatStorage");
	pk_raw(&p, LIT(")R."));
	expect_refused(&p, "REDUCE: global is not callable here");
	free(p.b);
}

/* model.state_dict() is an OrderedDict whose '_metadata' attribute is
 * pickled as BUILD state: ignored, as torch's weights_only loader does. */
static void state_dict_metadata_build_is_ignored(void **state)
{
	struct pk p = {0};

	pk_raw(&p, LIT("\x80\x02"));
	pk_odict(&p);
	pk_op(&p, '(');
	pk_str(&p, "0.weight");
	pk_tensor(&p, &f32_2x3);
	pk_op(&p, 'u');
	pk_op(&p, '}');
	pk_str(&p, "_metadata");
	pk_odict(&p);
	pk_op(&p, '(');
	pk_str(&p, "");
	pk_op(&p, '}');
	pk_str(&p, "version");
	pk_raw(&p, LIT("K\x01sus"));
	pk_raw(&p, LIT("b."));
	expect_ok(&p);
	assert_int_equal(res.n_tensors, 1);
	assert_string_equal(res.tensors[0].name, "0.weight");

	p.len = 2; /* a list is no instance state */
	pk_odict(&p);
	pk_raw(&p, LIT("]b."));
	expect_refused(&p, "BUILD of a dict with a list as state");
	free(p.b);
}

static void oversized_pickles_are_refused(void **state)
{
	static uint8_t one;

	memset(&err, 0, sizeof(err));
	assert_int_equal(
	    bfs_pickle_load(&one, (64u << 20) + 1, "t.pkl", 0, &res, &err),
	    -E2BIG);
	assert_non_null(strstr(err.msg, "exceeds the limit of 67108864 bytes"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(torch_1_13_dict_of_two_tensors_is_read,
				      teardown),
	    cmocka_unit_test_teardown(
		every_truncation_of_a_torch_pickle_is_refused, teardown),
	    cmocka_unit_test_teardown(ordereddict_keeps_insertion_order,
				      teardown),
	    cmocka_unit_test_teardown(
		list_and_tuple_fields_are_named_by_position, teardown),
	    cmocka_unit_test_teardown(views_share_one_storage_through_the_memo,
				      teardown),
	    cmocka_unit_test_teardown(parameter_is_unwrapped_and_marked,
				      teardown),
	    cmocka_unit_test_teardown(long1_sizes_beyond_2_31_are_exact,
				      teardown),
	    cmocka_unit_test_teardown(v3_untyped_storage_and_protocol_4_opcodes,
				      teardown),
	    cmocka_unit_test_teardown(
		dangerous_globals_as_the_top_level_object_are_refused,
		teardown),
	    cmocka_unit_test_teardown(
		globals_outside_the_allowlist_beside_the_tensors_are_inert,
		teardown),
	    cmocka_unit_test_teardown(
		a_global_in_a_tensor_rebuild_is_refused_naming_its_key,
		teardown),
	    cmocka_unit_test_teardown(metadata_is_json_under_its_key_path,
				      teardown),
	    cmocka_unit_test_teardown(
		numpy_objects_are_metadata_and_scalars_keep_their_value,
		teardown),
	    cmocka_unit_test_teardown(bytes_sets_and_newobj_ex_are_inert,
				      teardown),
	    cmocka_unit_test_teardown(metadata_takes_at_most_64_kib, teardown),
	    cmocka_unit_test_teardown(newobj_only_makes_inert_objects,
				      teardown),
	    cmocka_unit_test_teardown(python_pickle_of_os_system_is_refused,
				      teardown),
	    cmocka_unit_test_teardown(nesting_and_stack_limits_hold, teardown),
	    cmocka_unit_test_teardown(integer_opcodes_are_bounded, teardown),
	    cmocka_unit_test_teardown(memo_abuse_is_refused, teardown),
	    cmocka_unit_test_teardown(repeated_memo_gets_share_one_object,
				      teardown),
	    cmocka_unit_test_teardown(malformed_streams_are_refused, teardown),
	    cmocka_unit_test_teardown(tensor_geometry_is_checked, teardown),
	    cmocka_unit_test_teardown(meta_storage_and_bad_ids_are_refused,
				      teardown),
	    cmocka_unit_test_teardown(
		duplicate_keys_and_conflicting_storages_are_refused, teardown),
	    cmocka_unit_test_teardown(reduce_and_build_are_restricted,
				      teardown),
	    cmocka_unit_test_teardown(state_dict_metadata_build_is_ignored,
				      teardown),
	    cmocka_unit_test_teardown(oversized_pickles_are_refused, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
