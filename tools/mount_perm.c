/* tools/mount_perm: who may read a mount (mount_perm.h).
 *
 * The mount's owner is --owner's user, else the mounter (root: the first
 * source file's owner); its read bits are those fs/perm finds every
 * source allows. A remote source has no mode bits (it is read with the
 * mounter's credentials), so a mount with one is its owner's only, and
 * its group's too when --owner names one. */
#include "tools/mount_perm.h"

#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "fs/log.h"
#include "fs/source.h"

#define MAX_GROUPS 1024

/* Tests (BATCHFS_DEBUG_STOP=perm): stop this process (SIGSTOP) where 'at'
 * is the point named, for a test to change the files under it and then
 * SIGCONT it. */
static void debug_stop(const char *at)
{
	const char *want = getenv("BATCHFS_DEBUG_STOP");

	if (want && !strcmp(want, at))
		raise(SIGSTOP);
}

/* A decimal id (below 2^32 - 1); false when s is not one. */
static bool numeric_id(const char *s, unsigned *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (!*s || *end || errno || v >= UINT32_MAX)
		return false;
	*out = (unsigned)v;
	return true;
}

/* A user id, and its primary group, from a name or a number; false when
 * neither. */
static bool user_id(const char *s, unsigned *uid, unsigned *gid)
{
	struct passwd *pw = getpwnam(s);

	if (pw) {
		*uid = pw->pw_uid;
		*gid = pw->pw_gid;
		return true;
	}
	if (!numeric_id(s, uid))
		return false;
	pw = getpwuid(*uid);
	*gid = pw ? pw->pw_gid : *uid;
	return true;
}

static bool group_id(const char *s, unsigned *gid)
{
	struct group *gr = getgrnam(s);

	if (gr)
		*gid = gr->gr_gid;
	return gr || numeric_id(s, gid);
}

int bfs_mount_owner_parse(const char *arg, struct bfs_mount_owner *o, char *why,
			  size_t len)
{
	char user[64];
	const char *colon = strchr(arg, ':');
	size_t n = colon ? (size_t)(colon - arg) : strlen(arg);

	if (n == 0 || n >= sizeof(user)) {
		snprintf(why, len, "--owner: not USER or USER:GROUP");
		return -1;
	}
	memcpy(user, arg, n);
	user[n] = '\0';
	if (!user_id(user, &o->uid, &o->gid)) {
		snprintf(why, len, "--owner: no such user '%s'", user);
		return -1;
	}
	if (colon && !group_id(colon + 1, &o->gid)) {
		snprintf(why, len, "--owner: no such group '%s'", colon + 1);
		return -1;
	}
	snprintf(o->name, sizeof(o->name), "%s", user);
	o->set = true;
	o->group = colon != NULL;
	return 0;
}

/* The groups user uid is in, into g: its primary group (its passwd
 * entry's, never the mount's: getgrouplist puts the group it is given in
 * the list) and the groups that name it; 0 when unknown (no passwd entry,
 * or more than MAX_GROUPS), then fs/perm assumes nothing either way. */
static size_t groups_of(unsigned uid, gid_t *g)
{
	struct passwd *pw = getpwuid(uid);
	int n = MAX_GROUPS;

	if (!pw || getgrouplist(pw->pw_name, pw->pw_gid, g, &n) < 0)
		return 0;
	return (size_t)n;
}

/* This process's groups (it is the mounter). */
static size_t own_groups(gid_t *g)
{
	int n = getgroups(MAX_GROUPS - 1, g);

	if (n < 0)
		n = 0;
	g[n++] = getegid();
	return (size_t)n;
}

static const char *user_name(unsigned uid, char *buf, size_t len)
{
	struct passwd *pw = getpwuid(uid);

	if (pw)
		snprintf(buf, len, "%s", pw->pw_name);
	else
		snprintf(buf, len, "%u", uid);
	return buf;
}

static const char *group_name(unsigned gid, char *buf, size_t len)
{
	struct group *gr = getgrgid(gid);

	if (gr)
		snprintf(buf, len, "%s", gr->gr_name);
	else
		snprintf(buf, len, "%u", gid);
	return buf;
}

/* Who may read files of mode bits p->read, in words. */
static void readers(const struct bfs_perm *p, char *buf, size_t len)
{
	char u[64], g[64];

	user_name(p->uid, u, sizeof(u));
	group_name(p->gid, g, sizeof(g));
	if (p->read & S_IROTH)
		snprintf(buf, len, "everyone");
	else if ((p->read & S_IRUSR) && (p->read & S_IRGRP))
		snprintf(buf, len, "%s and members of group %s", u, g);
	else if (p->read & S_IRUSR)
		snprintf(buf, len, "%s only", u);
	else if (p->read & S_IRGRP)
		snprintf(buf, len, "members of group %s", g);
	else
		snprintf(buf, len, "nobody but root");
}

/* What -o allow_other lets in, said once at mount, and the sources whose
 * permissions may be more than their mode bits. */
static void allow_other_notes(const struct bfs_perm_obj *o, size_t n,
			      const struct bfs_perm *p)
{
	char who[200], u[64], g[64], path[4 * PATH_MAX];
	struct statfs sf;

	readers(p, who, sizeof(who));
	fprintf(stderr,
		"batchfs mount: -o allow_other: files are %s:%s, mode %04o "
		"(no wider than the sources'): readable by %s\n",
		user_name(p->uid, u, sizeof(u)),
		group_name(p->gid, g, sizeof(g)), p->read, who);
	for (size_t i = 0; i < n; i++)
		if (!o[i].dir && statfs(o[i].path, &sf) == 0 &&
		    bfs_source_fs_remote((long)sf.f_type))
			fprintf(stderr,
				"batchfs mount: warning: %s is on a network or "
				"FUSE file system whose server may check more "
				"than its mode bits: with allow_other the "
				"mount shows its data to whoever its mode "
				"bits allow\n",
				bfs_log_escape(path, sizeof(path), o[i].path));
}

/* Why --owner USER is refused: d, the first object USER may not read or
 * search (groups[0..ng): USER's), named with its mode, owner and group,
 * and, when its group's bits would let USER in, that USER is not in it. */
static void owner_refused(const struct bfs_mount_owner *owner,
			  const struct bfs_perm_obj *d, const gid_t *groups,
			  size_t ng)
{
	static const struct bfs_perm_obj unknown = {.path = "a source"};
	char path[4 * PATH_MAX], u[64], g[64], why[200] = "";
	bool member = false;

	if (!d) /* bfs_perm_bits and bfs_perm_denied disagree: a bug */
		d = &unknown;
	for (size_t i = 0; i < ng; i++)
		member = member || (unsigned)groups[i] == d->gid;
	group_name(d->gid, g, sizeof(g));
	if (d->uid != owner->uid && !d->acl && !member &&
	    (d->mode & (d->dir ? S_IXGRP : S_IRGRP)))
		snprintf(why, sizeof(why), "; %s is not in group %s%s",
			 owner->name, g,
			 ng ? "" : " as far as is known (no passwd entry)");
	fprintf(stderr,
		"batchfs mount: --owner %s: %s may not %s %s (mode %04o, "
		"owner %s, group %s%s%s): the mount would show it data it "
		"cannot read\n",
		owner->name, owner->name,
		d->dir ? "search the directory" : "read",
		bfs_log_escape(path, sizeof(path), d->path), d->mode,
		user_name(d->uid, u, sizeof(u)), g,
		d->acl ? ", with an ACL" : "", why);
}

/* Whether ds has a remote source (read with the mounter's credentials:
 * no mode bits of its own). */
static bool remote(const struct bfs_dataset *ds)
{
	for (size_t i = 0; i < bfs_dataset_nfiles(ds); i++)
		if (bfs_source_file_remote(bfs_dataset_file(ds, i)))
			return true;
	return false;
}

int bfs_mount_perm_decide(const struct bfs_dataset *ds,
			  const struct bfs_mount_owner *owner, bool allow_other,
			  struct bfs_perm *out)
{
	struct bfs_error err = {{0}};
	struct bfs_perm_obj *o;
	gid_t groups[MAX_GROUPS];
	size_t n, ng = 0;
	bool root = geteuid() == 0;

	debug_stop("perm");
	if (bfs_perm_objects(ds, &o, &n, &err) < 0) {
		char msg[4 * BFS_ERROR_MAX];

		fprintf(stderr, "batchfs mount: %s\n",
			bfs_log_escape(msg, sizeof(msg), err.msg));
		return 1;
	}
	memset(out, 0, sizeof(*out));
	if (owner->set) {
		out->uid = owner->uid;
		out->gid = owner->gid;
		ng = groups_of(out->uid, groups);
	} else if (!root) {
		out->uid = geteuid();
		out->gid = getegid();
		ng = own_groups(groups);
	} else if (n) { /* o[0]: the first source file */
		out->uid = o[0].uid;
		out->gid = o[0].gid;
		ng = groups_of(out->uid, groups);
	}
	out->read = bfs_perm_bits(o, n, out->uid, out->gid, groups, ng);
	if (!owner->set && !root) /* it opened them: it may read them */
		out->read |= S_IRUSR;
	if (remote(ds)) /* the mount's owner's (and GROUP's, when named) */
		out->read &= S_IRUSR | (owner->group ? S_IRGRP : 0);
	if (owner->set && !(out->read & S_IRUSR)) {
		owner_refused(owner,
			      bfs_perm_denied(o, n, out->uid, groups, ng),
			      groups, ng);
		bfs_perm_objects_free(o, n);
		return 1;
	}
	if (allow_other)
		allow_other_notes(o, n, out);
	bfs_perm_objects_free(o, n);
	return 0;
}
