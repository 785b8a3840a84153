/* fs/trust: whether a directory or a file is this user's alone, so what
 * it holds can be relied on (fs/README.md: remote objects: the cache).
 * The daemon's log directory (tools/mount_log.c) and the cache directory
 * and its entries (fs/remote/cache.c) are checked so, on their descriptors
 * (fstat of what was opened without following a symlink), never by path:
 * a swap after the check cannot lead elsewhere. */
#ifndef BFS_TRUST_H
#define BFS_TRUST_H

#include <stdbool.h>
#include <sys/stat.h>
#include <sys/types.h>

/* Whether directory st is uid's (or root's, where root_ok) and nobody
 * else may add, remove or replace its entries: not group or world
 * writable, unless sticky (then only an entry's owner, and the
 * directory's, may remove or rename it). */
bool bfs_trust_dir(const struct stat *st, uid_t uid, bool root_ok);

/* Whether st is a regular file of uid's that nobody else may write (not
 * group or world writable) with one link (not a hard link someone
 * planted to a file of ours elsewhere). */
bool bfs_trust_file(const struct stat *st, uid_t uid);

#endif
