/* fs/perm: who may read a mount (perm.h; fs/README.md: permissions).
 *
 * Unix decides a read in one step: the owner's bits if the reader owns
 * the object, else the group's if the reader is in its group, else the
 * others'. A mount's node is owned by uid:gid; for each class of readers
 * it lets in, the rules below ask that every reader of that class passes
 * that one step on every object, for any set of groups the reader may be
 * in: such a reader may own an object (then its owner bits decide), and
 * may or may not be in its group (then both its group and other bits must
 * allow), unless the class fixes it (members of gid are in an object's
 * group gid; readers outside gid are not). A POSIX ACL may deny a named
 * user or group anything, and its mode's group bits are only the mask, so
 * an object with one lets in nobody but its owner here.
 *
 * The objects are taken from what was opened: a file's mode by fstat of
 * its descriptor, the directories above it by a walk from "/" that opens
 * each one (O_PATH, O_NOFOLLOW) and ends at that very file, so a symlink
 * or directory swapped between the open and this walk cannot stand in
 * for the ones the file was reached through. Files in memory and remote
 * files are skipped: who may read a remote one is the mount's to say
 * (tools/mount_perm.c), not its cache file's.
 *
 * No state: everything is computed from the objects at mount time. */
#include "fs/perm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "fs/source.h"

/* Directories of a file's walk whose identity is kept, to add a directory
 * several source files are reached through once (a deeper one is added
 * for each file). */
#define MAX_DEPTH 256

/* The bit an object asks of a class (shift 6 owner, 3 group, 0 other):
 * read for a file, search for a directory. */
static bool allows(const struct bfs_perm_obj *o, int shift)
{
	return (o->mode >> shift) & (o->dir ? 1u : 4u);
}

static bool in_groups(uint32_t gid, const gid_t *groups, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((uint32_t)groups[i] == gid)
			return true;
	return false;
}

/* Whether user uid passes o (its groups known: ngroups > 0). */
static bool user_may(const struct bfs_perm_obj *o, uint32_t uid,
		     const gid_t *groups, size_t ngroups)
{
	if (o->uid == uid)
		return allows(o, 6);
	if (o->acl)
		return false;
	if (!ngroups) /* in its group or not: both must allow */
		return allows(o, 3) && allows(o, 0);
	return allows(o, in_groups(o->gid, groups, ngroups) ? 3 : 0);
}

/* Whether every reader other than uid, in group gid ('member') or not,
 * passes o. */
static bool class_may(const struct bfs_perm_obj *o, uint32_t uid, uint32_t gid,
		      bool member)
{
	if (o->uid != uid && !allows(o, 6)) /* a reader that owns o */
		return false;
	if (o->acl)
		return false;
	if (o->gid == gid) /* in o's group exactly when in gid */
		return allows(o, member ? 3 : 0);
	return allows(o, 3) && allows(o, 0);
}

uint32_t bfs_perm_bits(const struct bfs_perm_obj *o, size_t n, uint32_t uid,
		       uint32_t gid, const gid_t *groups, size_t ngroups)
{
	bool u = true, g = true, a = true;

	for (size_t i = 0; i < n; i++) {
		u = u && user_may(&o[i], uid, groups, ngroups);
		g = g && class_may(&o[i], uid, gid, true);
		a = a && class_may(&o[i], uid, gid, false);
	}
	return (u ? S_IRUSR : 0) | (g ? S_IRGRP : 0) | (a ? S_IROTH : 0);
}

const struct bfs_perm_obj *bfs_perm_denied(const struct bfs_perm_obj *o,
					   size_t n, uint32_t uid,
					   const gid_t *groups, size_t ngroups)
{
	for (size_t i = 0; i < n; i++)
		if (!user_may(&o[i], uid, groups, ngroups))
			return &o[i];
	return NULL;
}

void bfs_perm_objects_free(struct bfs_perm_obj *o, size_t n)
{
	for (size_t i = 0; o && i < n; i++)
		free(o[i].path);
	free(o);
}

/* Append an object for 'path' (copied); 0 or -ENOMEM. */
static int add(struct bfs_perm_obj **o, size_t *n, const char *path,
	       const struct stat *st, bool acl, bool dir)
{
	struct bfs_perm_obj *no = realloc(*o, (*n + 1) * sizeof(**o));

	if (!no)
		return -ENOMEM;
	*o = no;
	no[*n] = (struct bfs_perm_obj){.uid = st->st_uid,
				       .gid = st->st_gid,
				       .mode = st->st_mode & 07777,
				       .acl = acl,
				       .dir = dir,
				       .path = strdup(path)};
	if (!no[*n].path)
		return -ENOMEM;
	(*n)++;
	return 0;
}

/* Whether getxattr of the access ACL found one (ENODATA: none; a file
 * system without ACLs: none). */
static bool has_acl(ssize_t got)
{
	return got > 0 || (got < 0 && errno == ERANGE);
}

/* Whether the object behind descriptor fd (O_PATH too) has an ACL. */
static bool fd_has_acl(int fd)
{
	char proc[64];

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	return has_acl(getxattr(proc, "system.posix_acl_access", NULL, 0));
}

/* The directories a file was reached through, root first, by identity:
 * those of the previous file are not added again. */
struct chain {
	size_t n;
	struct {
		uint64_t dev, ino;
	} dir[MAX_DEPTH];
};

/* Directory fd (at 'path', cut to 'len' bytes), depth 'depth' of the
 * walk: recorded in 'now', added unless 'prev' had it at that depth. */
static int add_dir(struct bfs_perm_obj **o, size_t *n, int fd, const char *path,
		   size_t len, size_t depth, const struct chain *prev,
		   struct chain *now)
{
	struct stat st;
	char at[PATH_MAX];

	if (fstat(fd, &st) < 0)
		return -errno;
	if (depth < MAX_DEPTH) {
		now->dir[depth].dev = (uint64_t)st.st_dev;
		now->dir[depth].ino = (uint64_t)st.st_ino;
		now->n = depth + 1;
		if (depth < prev->n &&
		    prev->dir[depth].dev == (uint64_t)st.st_dev &&
		    prev->dir[depth].ino == (uint64_t)st.st_ino)
			return 0;
	}
	snprintf(at, sizeof(at), "%.*s", (int)(len ? len : 1), path);
	return add(o, n, at, &st, fd_has_acl(fd), true);
}

/* Walk absolute path 'path' from "/" one directory at a time, never
 * through a symlink (O_NOFOLLOW), adding each directory as it is when
 * opened; 0 when the walk ends at the file fl was opened as (dev, ino),
 * -ESTALE when it ends at another, -errno when it cannot be walked (a
 * symlink, a component gone). The directories added are thus the ones
 * the file opened is reached through, whatever its path named before. */
static int walk(struct bfs_perm_obj **o, size_t *n, const char *path,
		const struct bfs_source_file *fl, const struct chain *prev,
		struct chain *now)
{
	const char *c = path, *end;
	size_t depth = 0;
	struct stat st;
	int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC), next, rc;

	if (fd < 0 || path[0] != '/')
		rc = fd < 0 ? -errno : -EINVAL;
	else
		rc = add_dir(o, n, fd, path, 0, depth++, prev, now);
	while (rc == 0) {
		while (*c == '/')
			c++;
		end = c + strcspn(c, "/");
		if (!*end) /* c: the file's name */
			break;
		if ((end - c == 1 && c[0] == '.') ||
		    (end - c == 2 && !strncmp(c, "..", 2)) ||
		    end - c > NAME_MAX)
			rc = -EINVAL;
		else {
			char name[NAME_MAX + 1];

			memcpy(name, c, (size_t)(end - c));
			name[end - c] = '\0';
			next = openat(fd, name,
				      O_PATH | O_DIRECTORY | O_NOFOLLOW |
					  O_CLOEXEC);
			rc = next < 0 ? -errno : 0;
		}
		if (rc == 0) {
			close(fd);
			fd = next;
			rc = add_dir(o, n, fd, path, (size_t)(end - path),
				     depth++, prev, now);
		}
		c = end;
	}
	if (rc == 0 && fstatat(fd, c, &st, AT_SYMLINK_NOFOLLOW) < 0)
		rc = -errno;
	else if (rc == 0 && ((uint64_t)st.st_dev != fl->dev ||
			     (uint64_t)st.st_ino != fl->ino))
		rc = -ESTALE;
	if (fd >= 0)
		close(fd);
	return rc;
}

/* The path the kernel holds for open descriptor fd (where the file is
 * now, symlinks resolved), into buf; false when it has none to give. */
static bool opened_path(int fd, char *buf, size_t len)
{
	char proc[64];
	ssize_t got;

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	got = readlink(proc, buf, len);
	if (got <= 0 || (size_t)got >= len || buf[0] != '/')
		return false;
	buf[got] = '\0';
	return true;
}

/* File fl's object and those of the directories it was opened through:
 * the walk of where the kernel says the open file is, else of the real
 * path of its name; either must lead to the file opened. */
static int add_file(struct bfs_perm_obj **o, size_t *n,
		    const struct bfs_source_file *fl, const struct chain *prev,
		    struct chain *now, struct bfs_error *err)
{
	char real[PATH_MAX];
	struct stat st = {0};
	size_t mark;
	int rc;

	st.st_uid = fl->uid;
	st.st_gid = fl->gid;
	st.st_mode = fl->mode;
	rc = add(o, n, fl->path, &st, fd_has_acl(fl->fd), false);
	if (rc < 0)
		return rc;
	mark = *n;
	rc = opened_path(fl->fd, real, sizeof(real))
		 ? walk(o, n, real, fl, prev, now)
		 : -ENOENT;
	if (rc < 0 && rc != -ENOMEM) { /* drop what that walk added */
		for (; *n > mark; (*n)--)
			free((*o)[*n - 1].path);
		rc = realpath(fl->path, real) ? walk(o, n, real, fl, prev, now)
					      : -errno;
	}
	if (rc == -ESTALE || rc == -ELOOP || rc == -ENOTDIR || rc == -ENOENT)
		return bfs_error_set(err, -ESTALE, fl->path, BFS_NO_OFFSET,
				     "cannot examine: the file opened is no "
				     "longer at this path (moved, removed or "
				     "replaced while it was opened): mount "
				     "again");
	if (rc < 0)
		return bfs_error_set(err, rc, fl->path, BFS_NO_OFFSET,
				     "cannot examine: %s", strerror(-rc));
	return 0;
}

int bfs_perm_objects(const struct bfs_dataset *ds, struct bfs_perm_obj **out,
		     size_t *n, struct bfs_error *err)
{
	struct chain *c = calloc(2, sizeof(*c)), *prev = c, *now = c + 1;
	int rc = c ? 0 : -ENOMEM;

	*out = NULL;
	*n = 0;
	for (size_t i = 0; rc == 0 && i < bfs_dataset_nshards(ds); i++) {
		struct bfs_shard_info sh;

		bfs_dataset_shard(ds, i, &sh);
		for (size_t j = 0; rc == 0 && j < sh.source->nfiles; j++) {
			struct chain *t = prev;

			/* in memory; or remote: who may read it is the
			 * mount's to say (tools/mount_perm.c), not its
			 * cache file's */
			if (!bfs_source_file_local(&sh.source->files[j]))
				continue;
			rc = add_file(out, n, &sh.source->files[j], prev, now,
				      err);
			prev = now; /* this file's directories */
			now = t;
		}
	}
	free(c);
	if (rc < 0) {
		bfs_perm_objects_free(*out, *n);
		*out = NULL;
		*n = 0;
	}
	return rc;
}
