/* fs/perm: who may read a mount, from who may read its sources
 * (fs/README.md: permissions).
 *
 * A reader may read a source file when it may read the file and search
 * every directory above it. The nodes of a mount carry one owner, one
 * group and read bits; bfs_perm_bits gives, for an owner and a group, the
 * read bits that let nobody in who could not read every source: a bit is
 * set only when *every* user that bit lets in can read every source,
 * whatever other groups that user is in. The kernel enforces the result
 * (the mount always has default_permissions). */
#ifndef BFS_PERM_H
#define BFS_PERM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "fs/dataset.h"
#include "fs/error.h"

/* Something a reader of the sources must be allowed: read a file
 * ('dir' false) or search a directory ('dir' true). */
struct bfs_perm_obj {
	uint32_t uid, gid, mode; /* owner, group, permission bits */
	bool acl;		 /* has a POSIX access ACL beyond its mode */
	bool dir;
	char *path; /* for messages */
};

/* The owner, group and read bits (a subset of 0444) of a mount. */
struct bfs_perm {
	uint32_t uid, gid;
	uint32_t read;
};

/* The read bits (subset of 0444) for a mount owned by uid:gid over the
 * objects o[0..n): S_IRUSR when uid may read every one (uid's groups are
 * groups[0..ngroups) when known; ngroups 0: not known, so none is
 * assumed either way; they are the groups uid is in, which need not
 * hold gid), S_IRGRP when every member of gid may, S_IROTH when
 * everyone else may. An object with an ACL lets in only its owner by
 * these rules (a named entry may shut out anyone else). Pure. */
uint32_t bfs_perm_bits(const struct bfs_perm_obj *o, size_t n, uint32_t uid,
		       uint32_t gid, const gid_t *groups, size_t ngroups);

/* The objects of dataset ds: each local source file opened (a remote
 * source's cache file is none: its readers are the mount's to decide) (its mode
 * as opened, and whether it has an ACL) and every directory it is reached
 * through, as walked from "/" without following symlinks along the path the
 * kernel holds for its descriptor (else the real path of its name), each
 * taken by fstat of the directory opened; the walk must end at the file
 * opened (its dev and ino). *out and *n (free them with
 * bfs_perm_objects_free); 0, or -errno with 'err' naming the path that
 * could not be examined: -ESTALE when the file opened is no longer where
 * its path leads (removed or replaced since). Cost: one openat and fstat
 * per directory of each file. */
int bfs_perm_objects(const struct bfs_dataset *ds, struct bfs_perm_obj **out,
		     size_t *n, struct bfs_error *err);
void bfs_perm_objects_free(struct bfs_perm_obj *o, size_t n);

/* The first object uid (groups as above) may not read or search; NULL when
 * it may reach every one. For messages. */
const struct bfs_perm_obj *bfs_perm_denied(const struct bfs_perm_obj *o,
					   size_t n, uint32_t uid,
					   const gid_t *groups, size_t ngroups);

#endif
