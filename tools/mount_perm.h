/* tools/mount_perm: who may read a mount, decided at `batchfs mount`
 * (fs/README.md: permissions; the rule itself is fs/perm's).
 *
 * The owner and group of every node:
 *   --owner USER[:GROUP]   that user and group (GROUP: USER's primary
 *                          group); refused when USER may not read every
 *                          source; implies -o allow_other
 *   a non-root mounter     itself (its effective uid and gid); it may
 *                          read what it opened
 *   root                   the first source file's owner and group
 * and the read bits are those fs/perm allows for that owner and group,
 * the owner's groups being those it is in (its passwd entry's and the
 * group file's, not the mount's group): never wider than the sources'
 * (the most restrictive of them). A remote source (s3://, https://) has
 * no mode bits: it is read with the mounter's credentials, so its nodes
 * are for the mount's owner only (0400), and for its group too (0440)
 * when --owner USER:GROUP names one; -o allow_other widens no bit. With
 * -o allow_other a note says who else may read, and a warning names a
 * source whose file system may check more than its mode bits (NFS, SMB,
 * FUSE, ...): there allow_other shows its data by its mode bits alone.
 * Messages quote file names escaped (bfs_log_escape).
 *
 * Tests: BATCHFS_DEBUG_STOP=perm stops the process (SIGSTOP) once the
 * sources are open, before their permissions are taken. */
#ifndef BFS_TOOLS_MOUNT_PERM_H
#define BFS_TOOLS_MOUNT_PERM_H

#include <stdbool.h>

#include "fs/dataset.h"
#include "fs/perm.h"

/* --owner, parsed. */
struct bfs_mount_owner {
	bool set;
	bool group; /* USER:GROUP: GROUP named */
	unsigned uid, gid;
	char name[64]; /* USER as given, for messages */
};

/* Parse --owner USER[:GROUP] (names or numbers). 0, or -1 with a reason
 * in why. */
int bfs_mount_owner_parse(const char *arg, struct bfs_mount_owner *o, char *why,
			  size_t len);

/* The owner, group and read bits of a mount of ds (see above), into out.
 * 0, or 1 after printing why the mount cannot be made (a source that
 * cannot be examined, an --owner who may not read it). */
int bfs_mount_perm_decide(const struct bfs_dataset *ds,
			  const struct bfs_mount_owner *owner, bool allow_other,
			  struct bfs_perm *out);

#endif
