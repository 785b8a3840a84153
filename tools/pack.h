/* tools/pack: what `batchfs pack`'s command side (pack.c: inputs, shards,
 * progress) shares with its archive writer (pack_zip.c). */
#ifndef BFS_TOOLS_PACK_H
#define BFS_TOOLS_PACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/dtype.h"

/* One tensor of an archive: record data/<i> for the i-th of them. */
struct pack_tensor {
	const char *name;
	enum bfs_dtype dtype; /* one with a torch storage type */
	int ndim;
	int64_t shape[BFS_MAX_DIMS];
};

struct pack_out;

/* When 'path' is an .npz that numpy.savez(path, *arrays) wrote from a
 * list of samples of different lengths (members arr_0.npy ..
 * arr_<N-1>.npy, N >= 2, whose first dimensions differ), which neither
 * `batchfs mount` nor --from-npz can take as fields: print on stderr,
 * as "batchfs CMD: ...", how `batchfs pack NAME=@FILE.npz` makes it a
 * ragged field, and return true. Else print nothing, return false. */
bool bfs_pack_list_hint(const char *cmd, const char *path);

/* Start the archive 'path', written to "path.partial": its records are
 * under the prefix torch would use (the file name without extension),
 * data.pkl describes t[0..n) (a dict in that order). Returns NULL with
 * the reason printed. */
struct pack_out *pack_out_open(const char *path, const struct pack_tensor *t,
			       size_t n);

/* Record data/<i> of exactly 'size' bytes: begin, write pieces, end
 * (another count of bytes fails the archive at pack_out_close). */
void pack_out_begin(struct pack_out *o, size_t i, uint64_t size);
void pack_out_write(struct pack_out *o, const void *p, size_t n);
void pack_out_end(struct pack_out *o);

/* Finish the archive (byteorder, version, central directory) and rename
 * it over 'path'; with 'discard', or after a write error, remove it
 * instead. Returns 0, or 1 with the reason printed. Frees o. */
int pack_out_close(struct pack_out *o, bool discard);

#endif
