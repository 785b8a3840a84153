/* fs/tree: names, inode numbers, attributes and text files of a mount.
 *
 * Everything is computed, nothing is stored per file: an inode number is
 * kind << 60 | serial << 36 | batch (tree.h: the node's batch id, its
 * epoch numbered by fs/order), a directory entry number is the batch
 * number + 2, a batch file's size comes from fs/layout. Programs are
 * shown another number, below 2^32 where the mount's nodes fit
 * (bfs_tree_shown_ino: 32-bit programs can stat them). README and
 * dataset.json are rendered once at creation by fs/text (they never
 * change); stats is rendered by fs/serve, the counters' owner, on each
 * request with fixed-width counters, so its size changes only with its
 * last error (rendered again if that happens between sizing and filling);
 * index files are rendered from fs/order at open, index/N/offsets by
 * fs/serve a READ at a time (an epoch can have millions of lines). Opens
 * go to fs/serve, which knows batch ids and texts, not inodes.
 *
 * Thread-safety: after bfs_tree_create everything here is read-only but
 * the lookup counter (atomic); serve and the order engine are
 * thread-safe. */
#include "fs/tree.h"
#include "fs/stream.h"

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
	struct bfs_serve *serve;     /* opens, and the stats file */
	struct bfs_streams *streams; /* serve's: where batches start */
	uint64_t len, epochs;	     /* batches per epoch; epochs per rank
				      * (fs/order's) */
	uint64_t lanes;		     /* ranks served (fs/order's lanes) */
	bool multi;		     /* /rank/R/... instead of /epoch, /index */
	char *readme, *json;
	struct bfs_perm perm;
	struct timespec when;
	/* LOOKUPs that found a batch file (stats: batch_lookups); apart,
	 * since lookups take a const tree */
	atomic_uint_fast64_t *batch_lookups;
};

uint64_t bfs_tree_ino(const struct bfs_tree *t, const struct bfs_node *n)
{
	uint64_t serial = 0; /* the middle field: see tree.h */

	switch (n->kind) {
	case BFS_NODE_ROOT:
		return 1;
	case BFS_NODE_RANK: /* a lane's directories: the lane */
	case BFS_NODE_EPOCHS:
	case BFS_NODE_INDEXES:
	case BFS_NODE_STREAMS:
		serial = n->id.lane;
		break;
	case BFS_NODE_EPOCH: /* an epoch's nodes: its serial */
	case BFS_NODE_INDEX:
	case BFS_NODE_BATCH:
	case BFS_NODE_INDEXFILE:
	case BFS_NODE_STREAM:
	case BFS_NODE_OFFSETS:
		serial = bfs_order_epoch_serial(t->order, n->id);
		break;
	default:
		break;
	}
	return (uint64_t)n->kind << KIND_SHIFT | serial << EPOCH_SHIFT |
	       n->id.batch;
}

int bfs_tree_decode(const struct bfs_tree *t, uint64_t ino,
		    struct bfs_node *out)
{
	uint64_t serial = (ino >> EPOCH_SHIFT) & (BFS_TREE_MAX_EPOCHS - 1);
	uint64_t batch = ino & (BFS_TREE_MAX_BATCHES - 1);

	memset(out, 0, sizeof(*out));
	if (ino == 1)
		return 0;
	out->kind = (enum bfs_node_kind)(ino >> KIND_SHIFT);
	switch (out->kind) {
	case BFS_NODE_README:
	case BFS_NODE_DATASET:
	case BFS_NODE_STATS:
		return serial || batch ? -ENOENT : 0;
	case BFS_NODE_RANKS:
		return !t->multi || serial || batch ? -ENOENT : 0;
	case BFS_NODE_RANK:
	case BFS_NODE_EPOCHS:
	case BFS_NODE_INDEXES: /* the lane's, on a multi-rank mount */
	case BFS_NODE_STREAMS:
		out->id.lane = (size_t)serial;
		return (out->kind == BFS_NODE_RANK && !t->multi) ||
			       serial >= t->lanes || batch
			   ? -ENOENT
			   : 0;
	case BFS_NODE_EPOCH:
	case BFS_NODE_INDEX:
	case BFS_NODE_STREAM:
	case BFS_NODE_OFFSETS:
		return batch || bfs_order_epoch_of_serial(t->order, serial,
							  &out->id) < 0
			   ? -ENOENT
			   : 0;
	case BFS_NODE_BATCH:
	case BFS_NODE_INDEXFILE:
		if (bfs_order_epoch_of_serial(t->order, serial, &out->id) < 0 ||
		    batch >= bfs_order_epoch_len(t->order, out->id.epoch))
			return -ENOENT;
		out->id.batch = batch;
		return 0;
	default:
		return -ENOENT;
	}
}

uint64_t bfs_tree_shown_ino(const struct bfs_tree *t, uint64_t ino)
{
	uint64_t el = bfs_order_epoch_serials(t->order);
	uint64_t kind = ino >> KIND_SHIFT;
	uint64_t serial = (ino >> EPOCH_SHIFT) & (BFS_TREE_MAX_EPOCHS - 1);
	struct bfs_node n;

	if (el > UINT32_MAX / 16 || t->len > (UINT32_MAX - 16 * el) / 2 / el)
		return ino; /* too many to number below 2^32 */
	if (kind == BFS_NODE_BATCH || kind == BFS_NODE_INDEXFILE)
		return bfs_tree_decode(t, ino, &n) < 0
			   ? ino
			   : 1 + 16 * el + 2 * bfs_order_pos(t->order, n.id) +
				 (kind == BFS_NODE_INDEXFILE);
	return 1 + kind + 16 * serial; /* the root: 1 */
}

/* ---- text files ---- */

static int render_index(const struct bfs_tree *t, struct bfs_batch_id id,
			char *buf, size_t len, size_t *pos)
{
	uint64_t rows = bfs_order_rows(t->order, id);
	uint64_t *idx = malloc((rows ? rows : 1) * sizeof(*idx));
	int rc;

	if (!idx)
		return -ENOMEM;
	rc = bfs_order_batch(t->order, id, idx);
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
		bfs_serve_render_stats(t->serve, atomic_load(t->batch_lookups),
				       buf, len, pos);
		return 0;
	case BFS_NODE_INDEXFILE:
		return render_index(t, n->id, buf, len, pos);
	default:
		return -EISDIR;
	}
}

int bfs_tree_render(const struct bfs_tree *t, uint64_t ino, char **text,
		    size_t *len)
{
	struct bfs_node n;
	size_t need = 0, got = 0;
	char *buf = NULL;
	int rc = bfs_tree_decode(t, ino, &n);

	*text = NULL;
	*len = 0;
	/* stats' last error may change between sizing and filling: again */
	for (int tries = 0; rc == 0; tries++) {
		need = got = 0;
		rc = render(t, &n, NULL, 0, &need);
		if (rc == 0 && !(buf = malloc(need + 1)))
			rc = -ENOMEM;
		if (rc == 0)
			rc = render(t, &n, buf, need + 1, &got);
		if (rc == 0 && got == need)
			break;
		free(buf);
		buf = NULL;
		if (rc == 0 && tries == 8)
			rc = -EAGAIN;
	}
	if (rc < 0)
		return rc;
	*text = buf;
	*len = need;
	return 0;
}

bool bfs_tree_changes(uint64_t ino)
{
	return ino >> KIND_SHIFT == BFS_NODE_STATS;
}

int bfs_tree_open(const struct bfs_tree *t, uint64_t ino, int oflags,
		  struct bfs_file **f, struct bfs_serve_how *how)
{
	struct bfs_node n;
	char *text;
	size_t len;
	int rc = bfs_tree_decode(t, ino, &n);

	*f = NULL;
	if (rc < 0)
		return rc;
	if (n.kind == BFS_NODE_BATCH)
		return bfs_serve_open_batch(t->serve, n.id, oflags, f, how);
	if (n.kind == BFS_NODE_STREAM)
		return bfs_serve_open_stream(t->serve, n.id, f, how);
	if (n.kind == BFS_NODE_OFFSETS)
		return bfs_serve_open_offsets(t->serve, n.id, f, how);
	rc = bfs_tree_render(t, ino, &text, &len);
	if (rc < 0)
		return rc;
	return bfs_serve_open_text(t->serve, text, len, bfs_tree_changes(ino),
				   f, how);
}

/* ---- attributes ---- */

static bool is_dir(enum bfs_node_kind k)
{
	return k == BFS_NODE_ROOT || k == BFS_NODE_EPOCHS ||
	       k == BFS_NODE_INDEXES || k == BFS_NODE_EPOCH ||
	       k == BFS_NODE_INDEX || k == BFS_NODE_RANKS ||
	       k == BFS_NODE_RANK || k == BFS_NODE_STREAMS;
}

/* Subdirectories of directory n: what its link count adds to 2. */
static uint64_t subdirs(const struct bfs_tree *t, const struct bfs_node *n)
{
	switch (n->kind) {
	case BFS_NODE_ROOT:
		return t->multi ? 1 : 3; /* rank, or epoch, index and stream */
	case BFS_NODE_RANKS:
		return t->lanes;
	case BFS_NODE_RANK:
		return 3;
	case BFS_NODE_EPOCHS:
	case BFS_NODE_INDEXES:
		return t->epochs;
	default:
		return 0;
	}
}

static void fill_stat(const struct bfs_tree *t, const struct bfs_node *n,
		      uint64_t size, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = bfs_tree_ino(t, n);
	st->st_uid = t->perm.uid;
	st->st_gid = t->perm.gid;
	st->st_blksize = BFS_TREE_BLKSIZE;
	st->st_atim = st->st_mtim = st->st_ctim = t->when;
	if (is_dir(n->kind)) {
		st->st_mode = S_IFDIR | t->perm.read | t->perm.read >> 2;
		st->st_nlink = 2 + (nlink_t)subdirs(t, n);
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
	struct bfs_batch_id end = n->id;
	struct bfs_batch_loc at;
	uint64_t bytes = 0;
	size_t size = 0;
	int rc = 0;

	switch (n->kind) {
	case BFS_NODE_BATCH:
		rc = bfs_order_locate(t->order, n->id, &at);
		if (rc == 0)
			rc = bfs_layout_file_size(t->layout, t->order, &at,
						  &bytes);
		size = (size_t)bytes;
		break;
	case BFS_NODE_STREAM:
		/* where the stream ends: its size */
		end.batch = bfs_order_epoch_len(t->order, end.epoch);
		rc = bfs_stream_offset(t->streams, end, &bytes);
		size = (size_t)bytes;
		break;
	case BFS_NODE_OFFSETS: /* fixed width: rendered per READ */
		size =
		    (size_t)(bfs_order_epoch_len(t->order, n->id.epoch) + 1) *
		    BFS_SERVE_OFFSET_LINE;
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

/* The root's entries, in listing order: those of a one-rank mount (ONE),
 * of a multi-rank mount (MULTI) or of both. */
enum { ONE = 1, MULTI = 2 };
static const struct {
	const char *name;
	enum bfs_node_kind kind;
	int in;
} root_names[] = {
    {"README", BFS_NODE_README, ONE | MULTI},
    {"dataset.json", BFS_NODE_DATASET, ONE | MULTI},
    {"epoch", BFS_NODE_EPOCHS, ONE},
    {"index", BFS_NODE_INDEXES, ONE},
    {"rank", BFS_NODE_RANKS, MULTI},
    {"stats", BFS_NODE_STATS, ONE | MULTI},
    {"stream", BFS_NODE_STREAMS, ONE},
};
#define NROOT (sizeof(root_names) / sizeof(root_names[0]))

/* Entry i of this mount's root, or NULL past the end. */
static const char *root_entry(const struct bfs_tree *t, uint64_t i,
			      enum bfs_node_kind *kind)
{
	for (size_t j = 0; j < NROOT; j++)
		if (root_names[j].in & (t->multi ? MULTI : ONE) && i-- == 0) {
			*kind = root_names[j].kind;
			return root_names[j].name;
		}
	return NULL;
}

/* A rank's directory: its epochs, indexes and streams. */
static const struct {
	const char *name;
	enum bfs_node_kind kind;
} rank_dirs[] = {
    {"epoch", BFS_NODE_EPOCHS},
    {"index", BFS_NODE_INDEXES},
    {"stream", BFS_NODE_STREAMS},
};
#define NRANK_DIRS (sizeof(rank_dirs) / sizeof(rank_dirs[0]))

/* The child 'name' of directory p, or -ENOENT / -ENOTDIR. */
static int child(const struct bfs_tree *t, const struct bfs_node *p,
		 const char *name, struct bfs_node *c)
{
	const char *n;
	uint64_t v;

	memset(c, 0, sizeof(*c));
	switch (p->kind) {
	case BFS_NODE_ROOT:
		for (uint64_t i = 0; (n = root_entry(t, i, &c->kind)); i++)
			if (!strcmp(name, n))
				return 0;
		return -ENOENT;
	case BFS_NODE_RANKS:
		if (parse_num(name, &v) < 0 ||
		    bfs_order_lane_of_rank(t->order, v, &c->id.lane) < 0)
			return -ENOENT;
		c->kind = BFS_NODE_RANK;
		return 0;
	case BFS_NODE_RANK:
		for (size_t i = 0; i < NRANK_DIRS; i++)
			if (!strcmp(name, rank_dirs[i].name)) {
				c->kind = rank_dirs[i].kind;
				c->id.lane = p->id.lane;
				return 0;
			}
		return -ENOENT;
	case BFS_NODE_EPOCHS:
	case BFS_NODE_INDEXES:
	case BFS_NODE_STREAMS:
		if (parse_num(name, &v) < 0 || v >= t->epochs)
			return -ENOENT;
		c->kind = p->kind == BFS_NODE_EPOCHS	? BFS_NODE_EPOCH
			  : p->kind == BFS_NODE_INDEXES ? BFS_NODE_INDEX
							: BFS_NODE_STREAM;
		c->id.lane = p->id.lane;
		c->id.epoch = v;
		return 0;
	case BFS_NODE_INDEX:
		if (!strcmp(name, "offsets")) {
			c->kind = BFS_NODE_OFFSETS;
			c->id = p->id;
			return 0;
		}
		/* fall through */
	case BFS_NODE_EPOCH:
		if (strncmp(name, "batch_", 6) || parse_num(name + 6, &v) < 0 ||
		    v >= bfs_order_epoch_len(t->order, p->id.epoch))
			return -ENOENT;
		c->kind = p->kind == BFS_NODE_EPOCH ? BFS_NODE_BATCH
						    : BFS_NODE_INDEXFILE;
		c->id = p->id;
		c->id.batch = v;
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

static void parent_of(const struct bfs_tree *t, const struct bfs_node *n,
		      struct bfs_node *p)
{
	memset(p, 0, sizeof(*p));
	switch (n->kind) {
	case BFS_NODE_EPOCH:
	case BFS_NODE_INDEX:
	case BFS_NODE_STREAM:
		p->kind = n->kind == BFS_NODE_EPOCH   ? BFS_NODE_EPOCHS
			  : n->kind == BFS_NODE_INDEX ? BFS_NODE_INDEXES
						      : BFS_NODE_STREAMS;
		p->id.lane = n->id.lane;
		break;
	case BFS_NODE_EPOCHS:
	case BFS_NODE_INDEXES:
	case BFS_NODE_STREAMS:
		if (t->multi) {
			p->kind = BFS_NODE_RANK;
			p->id.lane = n->id.lane;
		}
		break;
	case BFS_NODE_RANK:
		p->kind = BFS_NODE_RANKS;
		break;
	default:
		break;
	}
}

int bfs_tree_dirent(const struct bfs_tree *t, uint64_t ino, uint64_t off,
		    char *name, size_t name_len, struct stat *st)
{
	struct bfs_node d, c;
	const char *n;
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
			parent_of(t, &d, &c);
		snprintf(name, name_len, "%s", off == 0 ? "." : "..");
		return node_stat(t, &c, st) < 0 ? -EIO : 1;
	}
	i = off - 2;
	memset(&c, 0, sizeof(c));
	switch (d.kind) {
	case BFS_NODE_ROOT:
		if (!(n = root_entry(t, i, &c.kind)))
			return 0;
		snprintf(name, name_len, "%s", n);
		break;
	case BFS_NODE_RANKS:
		if (i >= t->lanes)
			return 0;
		c.kind = BFS_NODE_RANK;
		c.id.lane = (size_t)i;
		snprintf(name, name_len, "%u",
			 bfs_order_rank_of_lane(t->order, (size_t)i));
		break;
	case BFS_NODE_RANK:
		if (i >= NRANK_DIRS)
			return 0;
		c.kind = rank_dirs[i].kind;
		c.id.lane = d.id.lane;
		snprintf(name, name_len, "%s", rank_dirs[i].name);
		break;
	case BFS_NODE_EPOCHS:
	case BFS_NODE_INDEXES:
	case BFS_NODE_STREAMS:
		if (i >= t->epochs)
			return 0;
		c.kind = d.kind == BFS_NODE_EPOCHS    ? BFS_NODE_EPOCH
			 : d.kind == BFS_NODE_INDEXES ? BFS_NODE_INDEX
						      : BFS_NODE_STREAM;
		c.id.lane = d.id.lane;
		c.id.epoch = i;
		snprintf(name, name_len, "%" PRIu64, i);
		break;
	default: /* EPOCH, INDEX */
		if (d.kind == BFS_NODE_INDEX &&
		    i == bfs_order_epoch_len(t->order, d.id.epoch)) {
			c.kind = BFS_NODE_OFFSETS;
			c.id = d.id;
			snprintf(name, name_len, "offsets");
			break;
		}
		if (i >= bfs_order_epoch_len(t->order, d.id.epoch))
			return 0;
		c.kind = d.kind == BFS_NODE_EPOCH ? BFS_NODE_BATCH
						  : BFS_NODE_INDEXFILE;
		c.id = d.id;
		c.id.batch = i;
		snprintf(name, name_len, "batch_%" PRIu64, i);
		break;
	}
	rc = node_stat(t, &c, st);
	return rc < 0 ? rc : 1;
}

/* ---- creation ---- */

int bfs_tree_create(struct bfs_tree **out, const struct bfs_dataset *ds,
		    struct bfs_order *order, const struct bfs_layout *layout,
		    struct bfs_serve *serve, const struct bfs_tree_info *info)
{
	struct bfs_tree *t;
	int rc;

	*out = NULL;
	if (bfs_order_epochs(order) >
		BFS_TREE_MAX_EPOCHS / bfs_order_lanes(order) ||
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
	t->streams = bfs_serve_streams(serve);
	t->len = bfs_order_len(order);
	t->epochs = bfs_order_epochs(order);
	t->lanes = bfs_order_lanes(order);
	t->multi = bfs_order_ranked(order);
	t->perm = info->perm;
	t->perm.read &= 0444;
	clock_gettime(CLOCK_REALTIME, &t->when);
	rc = bfs_text_render(ds, order, layout, &info->text, &t->readme,
			     &t->json);
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
