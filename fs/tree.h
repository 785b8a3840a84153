/* fs/tree: the namespace of a mount (README.md: the namespace) — names, inode
 * numbers, attributes, directory listings, index files, and opens, which
 * it hands to fs/serve (the room below) — with no FUSE in it.
 *
 *   /README  /dataset.json  /stats
 *   /epoch/N/batch_K        batch K of epoch N (safetensors, fs/layout)
 *   /index/N/batch_K        its sample indices as text, one per line
 *   /index/N/offsets        where each batch starts in stream/N (text)
 *   /stream/N               epoch N's batch files back to back
 *
 * A multi-rank mount (an order engine with several lanes, fs/order) has
 * /rank/R/epoch/N/batch_K, /rank/R/index/N/... and /rank/R/stream/N for
 * each rank R it serves instead of /epoch, /index and /stream.
 *
 * A node names what it is with a batch id (fs/order.h: batch identity):
 * a batch file all of it, an epoch's directory, stream and offsets its
 * lane and epoch, /rank/R and its three directories the lane. Inode
 * numbers encode (kind, id) arithmetically, so nothing grows with use:
 * ino = kind << 60 | serial << 36 | batch (root = 1), where serial is
 * the order's number of the id's epoch among every lane's epochs
 * (bfs_order_epoch_serial: lane x epochs + N), or the lane itself for
 * /rank/R and its directories. Hence at most 2^24 epochs of all ranks
 * together and 2^36 batches per epoch. Programs see other numbers
 * where a mount is small enough, below 2^32 (bfs_tree_shown_ino). */
#ifndef BFS_TREE_H
#define BFS_TREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "fs/dataset.h"
#include "fs/layout.h"
#include "fs/order.h"
#include "fs/perm.h"
#include "fs/serve.h"
#include "fs/text.h"

#define BFS_TREE_MAX_EPOCHS  (1ull << 24)
#define BFS_TREE_MAX_BATCHES (1ull << 36)
#define BFS_TREE_BLKSIZE     (1u << 20)

enum bfs_node_kind {
	BFS_NODE_ROOT = 0,
	BFS_NODE_README,
	BFS_NODE_DATASET, /* dataset.json */
	BFS_NODE_STATS,
	BFS_NODE_EPOCHS,    /* /epoch */
	BFS_NODE_INDEXES,   /* /index */
	BFS_NODE_EPOCH,	    /* /epoch/N */
	BFS_NODE_INDEX,	    /* /index/N */
	BFS_NODE_BATCH,	    /* /epoch/N/batch_K */
	BFS_NODE_INDEXFILE, /* /index/N/batch_K */
	BFS_NODE_RANKS,	    /* /rank (multi-rank mounts) */
	BFS_NODE_RANK,	    /* /rank/R */
	BFS_NODE_STREAMS,   /* /stream */
	BFS_NODE_STREAM,    /* /stream/N */
	BFS_NODE_OFFSETS,   /* /index/N/offsets */
};

/* id: the batch (BATCH, INDEXFILE), its lane and epoch (EPOCH, INDEX,
 * STREAM, OFFSETS), its lane (RANK; EPOCHS, INDEXES, STREAMS: lane 0 on a
 * one-rank mount); what a kind does not use is 0. */
struct bfs_node {
	enum bfs_node_kind kind;
	struct bfs_batch_id id;
};

/* What a tree is made with besides the dataset. */
struct bfs_tree_info {
	struct bfs_text_info text; /* README, dataset.json */
	/* Every node's owner and group, and its read bits (a subset of
	 * 0444, from fs/perm: no wider than the sources'); directories get
	 * the search bit beside each read bit. */
	struct bfs_perm perm;
};

struct bfs_tree;

/* Build the namespace over what 'serve' serves: the order's batches,
 * epochs 0 .. bfs_order_epochs - 1 of each rank; renders README and
 * dataset.json once (fs/text). Borrowed objects must outlive the tree.
 * Returns 0, -E2BIG when epochs (of all ranks) or batches exceed the
 * inode encoding, -ENOMEM. */
int bfs_tree_create(struct bfs_tree **out, const struct bfs_dataset *ds,
		    struct bfs_order *order, const struct bfs_layout *layout,
		    struct bfs_serve *serve, const struct bfs_tree_info *info);

/* Accepts NULL. */
void bfs_tree_destroy(struct bfs_tree *t);

/* Inode number of a node of t, and back. decode returns 0 or -ENOENT for
 * a number that names nothing in this tree (epoch or batch out of
 * range). */
uint64_t bfs_tree_ino(const struct bfs_tree *t, const struct bfs_node *n);
int bfs_tree_decode(const struct bfs_tree *t, uint64_t ino,
		    struct bfs_node *out);

/* The inode number programs see for node 'ino' (st_ino of stat, d_ino
 * of readdir; the kernel still names the node 'ino'): below 2^32 where
 * the tree's epochs (of all ranks, EL) and batches per epoch (len) allow,
 * 16 x EL + 2 x EL x len < 2^32, so that 32-bit programs built without
 * large-file support can stat (EOVERFLOW otherwise); else 'ino'. Dense:
 * 1 + kind + 16 x epoch for the directories and text files (the root: 1),
 * then two per batch, its file and its index file. */
uint64_t bfs_tree_shown_ino(const struct bfs_tree *t, uint64_t ino);

/* Attributes of ino: exact st_size (text files are rendered to size
 * them), st_blksize 1 MiB, the owner, group and read bits of
 * info->perm (never a write bit). 0 or -ENOENT. */
int bfs_tree_getattr(const struct bfs_tree *t, uint64_t ino, struct stat *st);

/* Name 'name' in directory 'parent': 0 and its attributes (st_ino set),
 * -ENOENT, or -ENOTDIR when parent is a file. */
int bfs_tree_lookup(const struct bfs_tree *t, uint64_t parent, const char *name,
		    struct stat *st);

/* Entry number 'off' of directory ino (0 ".", 1 "..", then the children;
 * a batch directory's entry 2 + K is batch_K). Returns 1 and fills name
 * and st (st_ino set), 0 past the end, -ENOTDIR or -ENOENT. */
int bfs_tree_dirent(const struct bfs_tree *t, uint64_t ino, uint64_t off,
		    char *name, size_t name_len, struct stat *st);

/* Contents of a text file (README, dataset.json, stats, index/N/batch_K)
 * in a malloc'd buffer the caller frees. 0, -EISDIR (not a text file),
 * -ENOENT, -ENOMEM. */
int bfs_tree_render(const struct bfs_tree *t, uint64_t ino, char **text,
		    size_t *len);

/* Open file ino read-only (the caller refused writes), for an open(2)
 * with 'oflags': a batch file through bfs_serve_open_batch (O_DIRECT
 * chooses its way), a text file rendered now and handed to
 * bfs_serve_open_text. 0 with *f and *how, or -ENOENT, -EISDIR, -EIO (the
 * batch cannot be had), -ENOMEM, -EINVAL (O_DIRECT refused). */
int bfs_tree_open(const struct bfs_tree *t, uint64_t ino, int oflags,
		  struct bfs_file **f, struct bfs_serve_how *how);

/* Whether file ino's content changes while mounted (stats): its
 * attributes are then cached briefly, and it is read afresh. */
bool bfs_tree_changes(uint64_t ino);

#endif
