/* fs/tree: names, inode numbers, attributes and text files of a mount.
 *
 * Everything is computed, nothing is stored per file: an inode number is
 * kind << 60 | epoch << 36 | batch, a directory entry number is the batch
 * number + 2, a batch file's size comes from fs/layout. README and
 * dataset.json are rendered once at creation (they never change); stats is
 * rendered on each request with fixed-width values, so its size never
 * changes either; index files are rendered from fs/order on demand.
 *
 * Thread-safety: after bfs_tree_create everything here is read-only; the
 * pool and the order engine are thread-safe. */
#include "fs/tree.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KIND_SHIFT  60
#define EPOCH_SHIFT 36

struct bfs_tree {
	const struct bfs_dataset *ds;
	struct bfs_order *order;
	const struct bfs_layout *layout;
	struct bfs_serve *serve;
	uint64_t len, epochs;
	char *readme, *json;
	struct bfs_perm perm;
	struct timespec when;
	/* LOOKUPs that found a batch file (stats: batch_lookups); apart,
	 * since lookups take a const tree */
	atomic_uint_fast64_t *batch_lookups;
};

uint64_t bfs_tree_ino(const struct bfs_node *n)
{
	if (n->kind == BFS_NODE_ROOT)
		return 1;
	return (uint64_t)n->kind << KIND_SHIFT | n->epoch << EPOCH_SHIFT |
	       n->batch;
}

int bfs_tree_decode(const struct bfs_tree *t, uint64_t ino,
		    struct bfs_node *out)
{
	memset(out, 0, sizeof(*out));
	if (ino == 1)
		return 0;
	out->kind = (enum bfs_node_kind)(ino >> KIND_SHIFT);
	out->epoch = (ino >> EPOCH_SHIFT) & (BFS_TREE_MAX_EPOCHS - 1);
	out->batch = ino & (BFS_TREE_MAX_BATCHES - 1);
	switch (out->kind) {
	case BFS_NODE_README:
	case BFS_NODE_DATASET:
	case BFS_NODE_STATS:
	case BFS_NODE_EPOCHS:
	case BFS_NODE_INDEXES:
		return out->epoch || out->batch ? -ENOENT : 0;
	case BFS_NODE_EPOCH:
	case BFS_NODE_INDEX:
		return out->epoch < t->epochs && !out->batch ? 0 : -ENOENT;
	case BFS_NODE_BATCH:
	case BFS_NODE_INDEXFILE:
		return out->epoch < t->epochs && out->batch < t->len ? 0
								     : -ENOENT;
	default:
		return -ENOENT;
	}
}

int bfs_tree_batch_size(const struct bfs_tree *t, uint64_t e, uint64_t k,
			uint64_t *size)
{
	return bfs_layout_file_size(t->layout, t->order, e, k, size);
}

/* ---- text files ---- */

/* The last error, four fixed-width lines (time, epoch, batch, message;
 * "-" for none) so the stats file keeps its size. */
static void render_last_error(const struct bfs_pool_error *le, char *buf,
			      size_t len, size_t *pos)
{
	char when[32] = "-", e[24] = "-", k[24] = "-";
	time_t sec = (time_t)(le->time_ns / 1000000000u);
	struct tm tm;

	if (le->time_ns && gmtime_r(&sec, &tm)) {
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
		snprintf(e, sizeof(e), "%" PRIu64, le->epoch);
		snprintf(k, sizeof(k), "%" PRIu64, le->batch);
	}
	bfs_layout_append(buf, len, pos, "%-22s %20s\n", "last_error_time",
			  when);
	bfs_layout_append(buf, len, pos, "%-22s %20s\n", "last_error_epoch", e);
	bfs_layout_append(buf, len, pos, "%-22s %20s\n", "last_error_batch", k);
	bfs_layout_append(buf, len, pos, "%-22s %-*.*s\n", "last_error",
			  BFS_POOL_ERROR_MAX, BFS_POOL_ERROR_MAX,
			  le->time_ns ? le->msg : "-");
}

/* One stats line per counter: "name value", fixed width, so the file's
 * size is the same at every getattr; the last error comes last. */
static void render_stats(const struct bfs_tree *t, char *buf, size_t len,
			 size_t *pos)
{
	struct bfs_stats s;
	uint64_t lookups = atomic_load(t->batch_lookups);
	const struct {
		const char *name;
		const uint64_t *v;
	} rows[] = {
	    {"batches_opened", &s.batches_opened},
	    {"batch_lookups", &lookups},
	    {"batch_reads", &s.batch_reads},
	    {"batches_served", &s.batches_served},
	    {"bytes_served", &s.bytes_served},
	    {"batches_materialized", &s.pool.batches_materialized},
	    {"prefetch_hits", &s.pool.prefetch_hits},
	    {"prefetch_misses", &s.pool.prefetch_misses},
	    {"prefetch_skipped", &s.pool.prefetch_skipped},
	    {"evictions", &s.pool.evictions},
	    {"cache_bytes", &s.pool.cache_bytes},
	    {"cache_batches", &s.pool.cache_batches},
	    {"cache_budget_bytes", &s.pool.cache_budget_bytes},
	    {"shmem_bytes", &s.pool.shmem_bytes},
	    {"worker_busy_ns", &s.pool.worker_busy_ns},
	    {"read_wait_ns", &s.pool.read_wait_ns},
	    {"read_timeouts", &s.pool.timeouts},
	    {"gather_errors", &s.pool.errors},
	    {"workers", &s.pool.workers},
	    {"prefetch_depth", &s.pool.prefetch_depth},
	    {"buffers_mapped", &s.pool.buffers_mapped},
	    {"batches_advised", &s.pool.batches_advised},
	    {"readahead_bytes", &s.pool.readahead_bytes},
	    {"rows_resident", &s.pool.rows_resident},
	    {"rows_advised", &s.pool.rows_advised},
	    {"batches_pushed", &s.batches_pushed},
	    {"page_cache_drops", &s.page_cache_drops},
	    {"page_cache_refills", &s.page_cache_refills},
	    {"batches_zero_copy", &s.batches_zero_copy},
	    {"backing_files", &s.backing_files},
	    {"backing_opened", &s.backing_opened},
	};

	memset(&s, 0, sizeof(s));
	if (t->serve)
		bfs_serve_stats(t->serve, &s);
	bfs_layout_append(buf, len, pos, "%-22s %20ld\n", "pid",
			  (long)getpid());
	bfs_layout_append(buf, len, pos, "%-22s %20s\n", "serve_mode",
			  t->serve ? bfs_serve_mode_name(s.mode) : "-");
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		bfs_layout_append(buf, len, pos, "%-22s %20" PRIu64 "\n",
				  rows[i].name, *rows[i].v);
	render_last_error(&s.pool.last_error, buf, len, pos);
}

static int render_index(const struct bfs_tree *t, uint64_t e, uint64_t k,
			char *buf, size_t len, size_t *pos)
{
	uint64_t rows = bfs_order_batch_rows(t->order, k);
	uint64_t *idx = malloc((rows ? rows : 1) * sizeof(*idx));
	int rc;

	if (!idx)
		return -ENOMEM;
	rc = bfs_order_batch(t->order, e, k, idx);
	for (uint64_t i = 0; rc == 0 && i < rows; i++)
		bfs_layout_append(buf, len, pos, "%" PRIu64 "\n", idx[i]);
	free(idx);
	return rc;
}

/* Render a text node into buf (snprintf semantics through *pos). */
static int render(const struct bfs_tree *t, const struct bfs_node *n, char *buf,
		  size_t len, size_t *pos)
{
	switch (n->kind) {
	case BFS_NODE_README:
		bfs_layout_append(buf, len, pos, "%s", t->readme);
		return 0;
	case BFS_NODE_DATASET:
		bfs_layout_append(buf, len, pos, "%s", t->json);
		return 0;
	case BFS_NODE_STATS:
		render_stats(t, buf, len, pos);
		return 0;
	case BFS_NODE_INDEXFILE:
		return render_index(t, n->epoch, n->batch, buf, len, pos);
	default:
		return -EISDIR;
	}
}

int bfs_tree_render(const struct bfs_tree *t, uint64_t ino, char **text,
		    size_t *len)
{
	struct bfs_node n;
	size_t need = 0, got = 0;
	char *buf;
	int rc = bfs_tree_decode(t, ino, &n);

	*text = NULL;
	*len = 0;
	if (rc == 0)
		rc = render(t, &n, NULL, 0, &need);
	if (rc < 0)
		return rc;
	buf = malloc(need + 1);
	if (!buf)
		return -ENOMEM;
	rc = render(t, &n, buf, need + 1, &got);
	if (rc < 0 || got != need) { /* stats are fixed width: never */
		free(buf);
		return rc < 0 ? rc : -EAGAIN;
	}
	*text = buf;
	*len = need;
	return 0;
}

/* ---- attributes ---- */

static bool is_dir(enum bfs_node_kind k)
{
	return k == BFS_NODE_ROOT || k == BFS_NODE_EPOCHS ||
	       k == BFS_NODE_INDEXES || k == BFS_NODE_EPOCH ||
	       k == BFS_NODE_INDEX;
}

static void fill_stat(const struct bfs_tree *t, const struct bfs_node *n,
		      uint64_t size, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = bfs_tree_ino(n);
	st->st_uid = t->perm.uid;
	st->st_gid = t->perm.gid;
	st->st_blksize = BFS_TREE_BLKSIZE;
	st->st_atim = st->st_mtim = st->st_ctim = t->when;
	if (is_dir(n->kind)) {
		st->st_mode = S_IFDIR | t->perm.read | t->perm.read >> 2;
		st->st_nlink =
		    n->kind == BFS_NODE_ROOT ? 4
		    : n->kind == BFS_NODE_EPOCHS || n->kind == BFS_NODE_INDEXES
			? 2 + (nlink_t)t->epochs
			: 2;
		st->st_size = 4096;
	} else {
		st->st_mode = S_IFREG | t->perm.read;
		st->st_nlink = 1;
		st->st_size = (off_t)size;
	}
	st->st_blocks = (st->st_size + 511) / 512;
}

static int node_stat(const struct bfs_tree *t, const struct bfs_node *n,
		     struct stat *st)
{
	uint64_t bytes = 0;
	size_t size = 0;
	int rc = 0;

	switch (n->kind) {
	case BFS_NODE_BATCH:
		rc = bfs_tree_batch_size(t, n->epoch, n->batch, &bytes);
		size = (size_t)bytes;
		break;
	case BFS_NODE_README:
	case BFS_NODE_DATASET:
	case BFS_NODE_STATS:
	case BFS_NODE_INDEXFILE:
		rc = render(t, n, NULL, 0, &size);
		break;
	default:
		break;
	}
	if (rc == 0)
		fill_stat(t, n, size, st);
	return rc;
}

int bfs_tree_getattr(const struct bfs_tree *t, uint64_t ino, struct stat *st)
{
	struct bfs_node n;
	int rc = bfs_tree_decode(t, ino, &n);

	return rc < 0 ? rc : node_stat(t, &n, st);
}

/* ---- names ---- */

/* Strict decimal (no sign, no leading zero, no overflow); -1 if not. */
static int parse_num(const char *s, uint64_t *out)
{
	uint64_t v = 0;

	if (!*s || (s[0] == '0' && s[1]))
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || v > (UINT64_MAX - 9) / 10)
			return -1;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	*out = v;
	return 0;
}

static const struct {
	const char *name;
	enum bfs_node_kind kind;
} root_names[] = {
    {"README", BFS_NODE_README}, {"dataset.json", BFS_NODE_DATASET},
    {"epoch", BFS_NODE_EPOCHS},	 {"index", BFS_NODE_INDEXES},
    {"stats", BFS_NODE_STATS},
};
#define NROOT (sizeof(root_names) / sizeof(root_names[0]))

/* The child 'name' of directory p, or -ENOENT / -ENOTDIR. */
static int child(const struct bfs_tree *t, const struct bfs_node *p,
		 const char *name, struct bfs_node *c)
{
	uint64_t v;

	memset(c, 0, sizeof(*c));
	switch (p->kind) {
	case BFS_NODE_ROOT:
		for (size_t i = 0; i < NROOT; i++)
			if (!strcmp(name, root_names[i].name)) {
				c->kind = root_names[i].kind;
				return 0;
			}
		return -ENOENT;
	case BFS_NODE_EPOCHS:
	case BFS_NODE_INDEXES:
		if (parse_num(name, &v) < 0 || v >= t->epochs)
			return -ENOENT;
		c->kind = p->kind == BFS_NODE_EPOCHS ? BFS_NODE_EPOCH
						     : BFS_NODE_INDEX;
		c->epoch = v;
		return 0;
	case BFS_NODE_EPOCH:
	case BFS_NODE_INDEX:
		if (strncmp(name, "batch_", 6) || parse_num(name + 6, &v) < 0 ||
		    v >= t->len)
			return -ENOENT;
		c->kind = p->kind == BFS_NODE_EPOCH ? BFS_NODE_BATCH
						    : BFS_NODE_INDEXFILE;
		c->epoch = p->epoch;
		c->batch = v;
		return 0;
	default:
		return -ENOTDIR;
	}
}

int bfs_tree_lookup(const struct bfs_tree *t, uint64_t parent, const char *name,
		    struct stat *st)
{
	struct bfs_node p, c;
	int rc = bfs_tree_decode(t, parent, &p);

	if (rc == 0)
		rc = child(t, &p, name, &c);
	if (rc == 0)
		rc = node_stat(t, &c, st);
	if (rc == 0 && c.kind == BFS_NODE_BATCH)
		atomic_fetch_add_explicit(t->batch_lookups, 1,
					  memory_order_relaxed);
	return rc;
}

static void parent_of(const struct bfs_node *n, struct bfs_node *p)
{
	memset(p, 0, sizeof(*p));
	if (n->kind == BFS_NODE_EPOCH)
		p->kind = BFS_NODE_EPOCHS;
	else if (n->kind == BFS_NODE_INDEX)
		p->kind = BFS_NODE_INDEXES;
}

int bfs_tree_dirent(const struct bfs_tree *t, uint64_t ino, uint64_t off,
		    char *name, size_t name_len, struct stat *st)
{
	struct bfs_node d, c;
	uint64_t i;
	int rc = bfs_tree_decode(t, ino, &d);

	if (rc < 0)
		return rc;
	if (!is_dir(d.kind))
		return -ENOTDIR;
	if (off < 2) {
		if (off == 0)
			c = d;
		else
			parent_of(&d, &c);
		snprintf(name, name_len, "%s", off == 0 ? "." : "..");
		return node_stat(t, &c, st) < 0 ? -EIO : 1;
	}
	i = off - 2;
	memset(&c, 0, sizeof(c));
	switch (d.kind) {
	case BFS_NODE_ROOT:
		if (i >= NROOT)
			return 0;
		c.kind = root_names[i].kind;
		snprintf(name, name_len, "%s", root_names[i].name);
		break;
	case BFS_NODE_EPOCHS:
	case BFS_NODE_INDEXES:
		if (i >= t->epochs)
			return 0;
		c.kind =
		    d.kind == BFS_NODE_EPOCHS ? BFS_NODE_EPOCH : BFS_NODE_INDEX;
		c.epoch = i;
		snprintf(name, name_len, "%" PRIu64, i);
		break;
	default: /* EPOCH, INDEX */
		if (i >= t->len)
			return 0;
		c.kind = d.kind == BFS_NODE_EPOCH ? BFS_NODE_BATCH
						  : BFS_NODE_INDEXFILE;
		c.epoch = d.epoch;
		c.batch = i;
		snprintf(name, name_len, "batch_%" PRIu64, i);
		break;
	}
	rc = node_stat(t, &c, st);
	return rc < 0 ? rc : 1;
}

/* ---- creation: README and dataset.json ---- */

/* A ragged field's serving in dataset.json: how, and its other tensor. */
static void json_ragged(const struct bfs_layout_field *lf,
			const struct bfs_layout_ragged *r, char *b, size_t n,
			size_t *pos)
{
	if (lf->role == BFS_LAYOUT_LENGTHS || lf->role == BFS_LAYOUT_OFFSETS) {
		bfs_layout_append(b, n, pos, ", \"%s_of\": ",
				  lf->role == BFS_LAYOUT_LENGTHS ? "lengths"
								 : "offsets");
		bfs_layout_json_str(b, n, pos, r->f->name);
		return;
	}
	bfs_layout_append(
	    b, n, pos, ", \"ragged\": \"%s\", \"max_length\": %" PRIu64,
	    r->mode == BFS_RAGGED_PAD ? "pad" : "pack", r->f->max_len);
	if (r->mode == BFS_RAGGED_PAD) {
		bfs_layout_append(b, n, pos, ", \"pad_value\": ");
		bfs_layout_json_str(b, n, pos, r->value);
		bfs_layout_append(b, n, pos, ", \"multiple\": %" PRIu64,
				  r->multiple);
	}
}

/* The tensors of a batch file, per sample; a ragged field's shape starts
 * with null (its length varies). */
static void json_fields(const struct bfs_tree *t, char *b, size_t n,
			size_t *pos)
{
	bfs_layout_append(b, n, pos, "  \"fields\": [");
	for (size_t i = 0; i < t->layout->nfields; i++) {
		const struct bfs_layout_field *lf = &t->layout->fields[i];
		bool rows = lf->role != BFS_LAYOUT_LENGTHS &&
			    lf->role != BFS_LAYOUT_OFFSETS;

		bfs_layout_append(b, n, pos,
				  "%s\n    {\"name\": ", i ? "," : "");
		bfs_layout_json_str(b, n, pos, lf->name);
		bfs_layout_append(
		    b, n, pos,
		    ", \"dtype\": \"%s\", \"safetensors_dtype\":"
		    " \"%s\", \"shape\": [%s",
		    bfs_dtype_info(lf->dtype)->torch_name, lf->st_dtype,
		    lf->role == BFS_LAYOUT_ROWS || !rows ? "" : "null");
		for (int d = 0; rows && d < lf->f->ndim; d++)
			bfs_layout_append(
			    b, n, pos, "%s%lld",
			    d || lf->role != BFS_LAYOUT_ROWS ? ", " : "",
			    (long long)lf->f->shape[d]);
		bfs_layout_append(b, n, pos, "], \"row_bytes\": %" PRIu64,
				  rows ? lf->f->row_bytes : 8);
		if (lf->role != BFS_LAYOUT_ROWS)
			json_ragged(lf, &t->layout->ragged[lf->slot], b, n,
				    pos);
		bfs_layout_append(b, n, pos, "}");
	}
	bfs_layout_append(b, n, pos, "\n  ],\n");
}

/* Data offset of batch 0 of epoch 0 (0 rows when there is no batch; 0
 * when a ragged batch 0 cannot be measured). */
static uint64_t header_size(const struct bfs_tree *t)
{
	struct bfs_layout_dims d;

	if (t->len && bfs_layout_batch_dims(t->layout, t->order, 0, 0, &d))
		return 0;
	if (!t->len)
		memset(&d, 0, sizeof(d));
	return bfs_layout_data_offset_dims(t->layout, 0, 0, &d);
}

/* dataset.json: everything a program needs to read the batches. */
static void render_json(const struct bfs_tree *t,
			const struct bfs_tree_info *in, const char *torch,
			char *b, size_t n, size_t *pos)
{
	bfs_layout_append(b, n, pos, "{\n  \"sources\": [");
	for (size_t i = 0; i < bfs_dataset_nshards(t->ds); i++) {
		struct bfs_shard_info sh;

		bfs_dataset_shard(t->ds, i, &sh);
		bfs_layout_append(b, n, pos, "%s", i ? ", " : "");
		bfs_layout_json_str(b, n, pos, sh.path);
	}
	bfs_layout_append(b, n, pos, "],\n");
	json_fields(t, b, n, pos);
	bfs_layout_append(
	    b, n, pos,
	    "  \"samples\": %" PRIu64 ",\n  \"batch_size\": %" PRIu64
	    ",\n  \"batches_per_epoch\": %" PRIu64 ",\n  \"last_batch_"
	    "size\": %" PRIu64 ",\n  \"epochs\": %" PRIu64
	    ",\n  \"drop_last\": %s,\n  \"sampler\": \"%s\",\n  "
	    "\"shuffle\": %s,\n  \"seed\": %" PRIu64
	    ",\n  \"seed_source\": \"%s\",\n  \"pytorch\": ",
	    bfs_dataset_samples(t->ds), in->batch_size, t->len,
	    t->len ? bfs_order_batch_rows(t->order, t->len - 1) : 0, t->epochs,
	    in->drop_last ? "true" : "false", in->sampler,
	    in->shuffle ? "true" : "false", in->seed, in->seed_source);
	bfs_layout_json_str(b, n, pos, torch);
	bfs_layout_append(
	    b, n, pos, ",\n  \"serve_mode\": \"%s\",\n  \"serve_mode_why\": ",
	    t->serve ? bfs_serve_mode_name(bfs_serve_mode(t->serve)) : "-");
	bfs_layout_json_str(b, n, pos, t->serve ? bfs_serve_why(t->serve) : "");
	bfs_layout_append(b, n, pos, ",\n  \"log\": ");
	bfs_layout_json_str(b, n, pos, in->log ? in->log : "");
	bfs_layout_append(
	    b, n, pos,
	    ",\n  \"format\": \"safetensors\",\n  \"batch_"
	    "format\": \"batchfs/1\",\n  \"header_size\": %" PRIu64
	    ",\n  \"batch_path\": \"epoch/{epoch}/batch_{batch}"
	    "\",\n  \"index_path\": \"index/{epoch}/batch_{batch}"
	    "\"\n}\n",
	    header_size(t));
}

/* The reader in README: json + numpy only. */
static const char readme_reader[] =
    "import json, numpy as np\n"
    "NP = {\"F64\": \"<f8\", \"F32\": \"<f4\", \"F16\": \"<f2\", "
    "\"BF16\": \"<u2\", \"I64\": \"<i8\", \"I32\": \"<i4\",\n"
    "      \"I16\": \"<i2\", \"I8\": \"i1\", \"U64\": \"<u8\", "
    "\"U32\": \"<u4\", \"U16\": \"<u2\", \"U8\": \"u1\",\n"
    "      \"BOOL\": \"?\", \"C64\": \"<c8\", \"F8_E4M3\": \"u1\", "
    "\"F8_E5M2\": \"u1\"}   # BF16/F8: raw bits\n"
    "def read_batch(path):\n"
    "    buf = open(path, \"rb\").read()        # one big read\n"
    "    n = int.from_bytes(buf[:8], \"little\")\n"
    "    head = json.loads(buf[8:8 + n]); head.pop(\"__metadata__\")\n"
    "    return {k: np.frombuffer(buf, NP[v[\"dtype\"]], "
    "offset=8 + n + v[\"data_offsets\"][0],\n"
    "                             count=int(np.prod(v[\"shape\"])))"
    ".reshape(v[\"shape\"])\n"
    "            for k, v in head.items()}\n";

/* README's words on ragged fields: which collate_fn they equal. */
static void render_ragged(const struct bfs_tree *t, char *b, size_t n,
			  size_t *pos)
{
	for (size_t i = 0; i < t->layout->nragged; i++) {
		const struct bfs_layout_ragged *r = &t->layout->ragged[i];
		const char *f = r->f->name;

		if (r->mode == BFS_RAGGED_PACK)
			bfs_layout_append(
			    b, n, pos,
			    "Ragged field %s is packed: %s is its samples' "
			    "rows back to back,\n%s.offsets (int64, B + 1) "
			    "where each starts.\n",
			    f, f, f);
		else
			bfs_layout_append(
			    b, n, pos,
			    "Ragged field %s is padded: %s = torch.nn.utils."
			    "rnn.pad_sequence(samples,\nbatch_first=True, "
			    "padding_value=%s) (length rounded up to a "
			    "multiple of %" PRIu64 "),\n%s.lengths (int64, "
			    "B) each sample's length.\n",
			    f, f, r->value, r->multiple, f);
	}
	if (t->layout->nragged)
		bfs_layout_append(b, n, pos, "\n");
}

static void render_readme(const struct bfs_tree *t,
			  const struct bfs_tree_info *in, const char *torch,
			  char *b, size_t n, size_t *pos)
{
	bfs_layout_append(
	    b, n, pos,
	    "batchfs: a dataset as a directory of training batches\n\n"
	    "Mounted on %s from %zu archive(s), %" PRIu64
	    " samples, %zu field(s).\nOptions: %s\n\n"
	    "  epoch/N/batch_K   batch K of epoch N: a safetensors file "
	    "(8-byte LE header\n                    length, JSON header, "
	    "data at byte %" PRIu64 ")\n"
	    "  index/N/batch_K   its sample indices, one per line\n"
	    "  dataset.json      fields, sizes, sampler, seed\n"
	    "  stats             live counters (name value)\n\n"
	    "%" PRIu64 " batches per epoch; epochs 0..%" PRIu64
	    " can be opened (ls epoch lists them all).\n"
	    "The batches are exactly those of this PyTorch loader "
	    "(default_collate of dict samples):\n\n  %s\n\n",
	    in->mountpoint ? in->mountpoint : "?", bfs_dataset_nshards(t->ds),
	    bfs_dataset_samples(t->ds), bfs_dataset_nfields(t->ds),
	    in->options ? in->options : "", header_size(t), t->len,
	    t->epochs ? t->epochs - 1 : 0, torch);
	render_ragged(t, b, n, pos);
	bfs_layout_append(b, n, pos,
			  "Read a batch with numpy only:\n\n"
			  "%sbatch = read_batch(\"%s/epoch/0/batch_0\")\n\n"
			  "Read with >= 1 MiB reads (cat, cp, np.fromfile, "
			  "readinto): small reads cost a round trip each.\n"
			  "The daemon logs to: %s\n"
			  "Unmount with: batchfs umount %s\n",
			  readme_reader, in->mountpoint ? in->mountpoint : ".",
			  in->log ? in->log : "?",
			  in->mountpoint ? in->mountpoint : "MOUNTPOINT");
}

typedef void render_fn(const struct bfs_tree *t, const struct bfs_tree_info *in,
		       const char *torch, char *b, size_t n, size_t *pos);

/* Render into a fresh malloc'd string (two passes: measure, write).
 * Returns 0 or -ENOMEM. */
static int render_alloc(const struct bfs_tree *t,
			const struct bfs_tree_info *in, const char *torch,
			render_fn *fn, char **out)
{
	size_t need = 0, got = 0;

	fn(t, in, torch, NULL, 0, &need);
	*out = malloc(need + 1);
	if (!*out)
		return -ENOMEM;
	fn(t, in, torch, *out, need + 1, &got);
	return 0;
}

static int render_static(struct bfs_tree *t, const struct bfs_tree_info *in)
{
	char torch[1024];
	int rc;

	bfs_order_describe(t->order, torch, sizeof(torch));
	rc = render_alloc(t, in, torch, render_json, &t->json);
	if (rc == 0)
		rc = render_alloc(t, in, torch, render_readme, &t->readme);
	return rc;
}

int bfs_tree_create(struct bfs_tree **out, const struct bfs_dataset *ds,
		    struct bfs_order *order, const struct bfs_layout *layout,
		    struct bfs_serve *serve, const struct bfs_tree_info *info)
{
	struct bfs_tree *t;
	int rc;

	*out = NULL;
	if (info->epochs > BFS_TREE_MAX_EPOCHS ||
	    bfs_order_len(order) >= BFS_TREE_MAX_BATCHES)
		return -E2BIG;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->batch_lookups = calloc(1, sizeof(*t->batch_lookups));
	if (!t->batch_lookups) {
		free(t);
		return -ENOMEM;
	}
	t->ds = ds;
	t->order = order;
	t->layout = layout;
	t->serve = serve;
	t->len = bfs_order_len(order);
	t->epochs = info->epochs;
	t->perm = info->perm;
	t->perm.read &= 0444;
	clock_gettime(CLOCK_REALTIME, &t->when);
	rc = render_static(t, info);
	if (rc < 0) {
		bfs_tree_destroy(t);
		return rc;
	}
	*out = t;
	return 0;
}

void bfs_tree_destroy(struct bfs_tree *t)
{
	if (!t)
		return;
	free(t->readme);
	free(t->json);
	free(t->batch_lookups);
	free(t);
}
