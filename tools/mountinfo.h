/* tools/mountinfo: what is mounted where, read from /proc/self/mountinfo,
 * for `batchfs mount` (refuse a mountpoint that is already a mount),
 * `batchfs umount` (refuse a directory that is not one) and `batchfs
 * status` (list the batchfs mounts). */
#ifndef BFS_TOOLS_MOUNTINFO_H
#define BFS_TOOLS_MOUNTINFO_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

/* One mount, as mountinfo describes it (escapes such as \040 decoded). */
struct bfs_mountinfo {
	char point[PATH_MAX];  /* the mount point */
	char fstype[64];       /* "fuse.batchfs", "ext4", "tmpfs", ... */
	char source[PATH_MAX]; /* "batchfs", "/dev/sda1", ... */
	unsigned major, minor; /* its st_dev; a FUSE mount's connection
				* in /sys/fs/fuse/connections is
				* major << 20 | minor */
	long user_id;	       /* a FUSE mount's user_id= (who mounted
				* it: fusermount3 lets only that user and
				* root unmount it), or -1 */
};

/* 'arg' as an absolute path without symlinks or "..", for comparing with
 * mount points: what realpath(arg) would say, found without ever looking
 * into a mount point (a daemon that does not answer would leave a stat of
 * its mount point waiting): each component that mountinfo names as a
 * mount point is taken as the directory it is, and the rest of a path
 * inside a batchfs mount (which has no symlinks) as written; only the
 * other components are looked at (readlink). A dead mount (ENOTCONN)
 * resolves as well as a live one. Returns 0, or -errno (-ENOENT: arg does
 * not exist, -ELOOP, -ENAMETOOLONG). */
int bfs_mountinfo_resolve(const char *arg, char *out, size_t len);

/* The mount whose mount point is 'path' (resolved as above): 1 with *out
 * filled (the topmost of several stacked there), 0 when path is not a
 * mount point, -errno when mountinfo cannot be read. */
int bfs_mountinfo_find(const char *path, struct bfs_mountinfo *out);

/* Every batchfs mount that can be reached through its mount point (one
 * with another mount stacked on top is left out), in mount order: a
 * malloc'd array in *out (the caller frees it; NULL when none) and its
 * length in *n. 0, or -errno when mountinfo cannot be read. */
int bfs_mountinfo_list_batchfs(struct bfs_mountinfo **out, size_t *n);

/* Whether m is a batchfs mount (type fuse.batchfs). */
bool bfs_mountinfo_is_batchfs(const struct bfs_mountinfo *m);

/* For `batchfs mount`: whether 'arg' can be mounted on: an existing
 * directory that is not a mount point already. 0 with its resolved path
 * in 'real', or 1 after printing why not ("does not exist", "is not a
 * directory", "is already a mount point: ... is mounted there"). */
int bfs_mountinfo_check_target(const char *arg, char *real, size_t len);

#endif
