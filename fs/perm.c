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
 * No state: everything is computed from the objects at mount time. */
#include "fs/perm.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include "fs/source.h"

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

/* Whether directory 'dir' lies on the real path 'file' above it. */
static bool above(const char *dir, const char *file)
{
	size_t n = strlen(dir);

	if (!strcmp(dir, "/"))
		return file[0] == '/';
	return !strncmp(file, dir, n) && file[n] == '/';
}

/* The directories above real path 'real' (cut down in place), nearest
 * first, until one that lies above 'seen' too (the previous file's: it
 * and those above it were added with that file). */
static int add_dirs(struct bfs_perm_obj **o, size_t *n, char *real,
		    const char *seen, struct bfs_error *err)
{
	char *slash;
	int rc = 0;

	while (rc == 0 && (slash = strrchr(real, '/'))) {
		struct stat st;

		if (slash == real && !real[1])
			break;		     /* "/" was the last */
		slash[slash == real] = '\0'; /* the parent; "/" stays "/" */
		if (seen && above(real, seen))
			break;
		if (stat(real, &st) < 0)
			return bfs_error_set(err, -errno, real, BFS_NO_OFFSET,
					     "cannot examine: %s",
					     strerror(errno));
		rc = add(
		    o, n, real, &st,
		    has_acl(getxattr(real, "system.posix_acl_access", NULL, 0)),
		    true);
	}
	return rc;
}

/* File fl's object and those of the directories above it. */
static int add_file(struct bfs_perm_obj **o, size_t *n,
		    const struct bfs_source_file *fl, char *prev,
		    struct bfs_error *err)
{
	char real[PATH_MAX], file[PATH_MAX];
	struct stat st = {0};
	int rc;

	if (!realpath(fl->path, real))
		return bfs_error_set(err, -errno, fl->path, BFS_NO_OFFSET,
				     "cannot examine: %s", strerror(errno));
	st.st_uid = fl->uid;
	st.st_gid = fl->gid;
	st.st_mode = fl->mode;
	rc = add(o, n, fl->path, &st,
		 has_acl(fgetxattr(fl->fd, "system.posix_acl_access", NULL, 0)),
		 false);
	memcpy(file, real, sizeof(real));
	if (rc == 0)
		rc = add_dirs(o, n, real, prev[0] ? prev : NULL, err);
	memcpy(prev, file, sizeof(file));
	return rc;
}

int bfs_perm_objects(const struct bfs_dataset *ds, struct bfs_perm_obj **out,
		     size_t *n, struct bfs_error *err)
{
	char prev[PATH_MAX] = "";
	int rc = 0;

	*out = NULL;
	*n = 0;
	for (size_t i = 0; rc == 0 && i < bfs_dataset_nshards(ds); i++) {
		struct bfs_shard_info sh;

		bfs_dataset_shard(ds, i, &sh);
		for (size_t j = 0; rc == 0 && j < sh.source->nfiles; j++)
			if (sh.source->files[j].fd >= 0)
				rc = add_file(out, n, &sh.source->files[j],
					      prev, err);
	}
	if (rc < 0) {
		bfs_perm_objects_free(*out, *n);
		*out = NULL;
		*n = 0;
	}
	return rc;
}
