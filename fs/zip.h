/* fs/zip: our own ZIP/ZIP64 central-directory parser for torch.save
 * archives and numpy.savez .npz files, over a read-only mapping
 * (fs/README.md: torch.save archives).
 *
 * libzip cannot give record offsets and rejects CRC-0 records, so the mmap
 * path is ours; libzip is only used by tools (pack, inspect --verify) and by
 * the differential test. */
#ifndef BFS_ZIP_H
#define BFS_ZIP_H

#include <stddef.h>
#include <stdint.h>

#include "fs/error.h"

struct bfs_zip_entry {
	char *name; /* full record name, NUL-terminated, e.g. "x/data/0" */
	uint64_t lfh_off;  /* local file header offset */
	uint64_t data_off; /* = lfh_off + 30 + name len + extra len */
	uint64_t size;	   /* stored (= uncompressed) size */
	uint32_t crc32;	   /* from the central directory; 0 = not computed */
	uint16_t method;   /* compression: 0 (stored) after a successful open */
};

/* What an archive must be: torch.save's layout (records under one
 * "<prefix>/", TorchScript refused by name) or numpy.savez's (members at
 * the top level, no prefix; a compressed member is refused with advice to
 * use numpy.savez, as savez_compressed writes deflated members). */
enum bfs_zip_kind {
	BFS_ZIP_TORCH,
	BFS_ZIP_NPZ,
};

struct bfs_zip {
	char *path;	    /* label used in error messages */
	int fd;		    /* -1 for archives opened from memory */
	const uint8_t *map; /* the whole archive, read-only */
	uint64_t map_size;  /* bytes mapped = archive size at open */
	char *prefix;	    /* torch's record prefix ("archive"); "" for npz */
	struct bfs_zip_entry *entries; /* in central-directory order */
	size_t n_entries;
	uint64_t cd_off; /* where the central directory starts */
};

/* Open and validate the archive at 'path': map it read-only, parse the
 * central directory, check every record (stored, not encrypted, no overlap,
 * local header agrees, names safe and unique, all under one prefix).
 * Returns 0 and sets *out, or -errno with 'err' naming file, offset, reason.
 * Cost: O(records); the data is not touched. Free with bfs_zip_close(). */
int bfs_zip_open(struct bfs_zip **out, const char *path, struct bfs_error *err);

/* Same as bfs_zip_open over caller memory [buf, buf+size), which must stay
 * valid until bfs_zip_close. 'label' names it in errors. Used by fuzzers. */
int bfs_zip_open_mem(struct bfs_zip **out, const uint8_t *buf, uint64_t size,
		     const char *label, struct bfs_error *err);

/* bfs_zip_open / bfs_zip_open_mem for an archive of 'kind' (the two above
 * are BFS_ZIP_TORCH). */
int bfs_zip_open_kind(struct bfs_zip **out, const char *path,
		      enum bfs_zip_kind kind, struct bfs_error *err);
int bfs_zip_open_mem_kind(struct bfs_zip **out, const uint8_t *buf,
			  uint64_t size, const char *label,
			  enum bfs_zip_kind kind, struct bfs_error *err);

/* Where the archive's bytes are not all there until asked for (a remote
 * object's cache: fs/remote/object), the parser asks for what it is about to
 * read: ensure(arg, r, n) makes bytes r[0..n) (within the archive)
 * readable, or fails with -errno and a message in err. It asks for the
 * first bytes and the end records from the tail, then the central
 * directory, then every local header at once (a few requests whatever
 * the number of records); it never reads a byte it did not ask for, and
 * never a record's data. */
struct bfs_zip_range {
	uint64_t off, len;
};

struct bfs_zip_io {
	int (*ensure)(void *arg, const struct bfs_zip_range *r, size_t n,
		      struct bfs_error *err);
	void *arg;
};

/* bfs_zip_open_mem_kind over memory whose bytes are made readable by
 * io->ensure as the parser needs them. */
int bfs_zip_open_io(struct bfs_zip **out, const uint8_t *buf, uint64_t size,
		    const char *label, enum bfs_zip_kind kind,
		    const struct bfs_zip_io *io, struct bfs_error *err);

/* The record named "<prefix>/<rel>" (e.g. rel = "data.pkl"; for npz, the
 * member named 'rel'), or NULL. */
const struct bfs_zip_entry *bfs_zip_find(const struct bfs_zip *z,
					 const char *rel);

/* Pointer to a record's bytes inside the mapping. */
static inline const uint8_t *bfs_zip_data(const struct bfs_zip *z,
					  const struct bfs_zip_entry *e)
{
	return z->map + e->data_off;
}

/* Unmap and free; accepts NULL and half-built objects. */
void bfs_zip_close(struct bfs_zip *z);

#endif
