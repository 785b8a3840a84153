/* tools/mountinfo: find the mount on a path in /proc/self/mountinfo.
 *
 * A line is (proc(5)):
 *   36 35 98:0 /root /mnt/point rw,noatime master:1 - ext3 /dev/sda1 rw
 *   id parent dev root point options [optional fields...] - type source sb
 * The point, type and source are octal-escaped (\040 for a space, \011,
 * \012, \134). A later line for the same point is a mount stacked on top
 * of an earlier one, so the last match wins.
 *
 * bfs_mountinfo_resolve walks a path as realpath(3) does, component by
 * component, but asks mountinfo first: a mount point is never stat'ed or
 * readlink'ed, and nothing below a batchfs mount point is looked at, so a
 * mount whose daemon is stopped or deadlocked cannot leave `batchfs
 * status` or `batchfs umount` waiting before they even know which mount
 * they were given. mountinfo is read again for each component: paths are
 * short, and the commands run once. */
#include "tools/mountinfo.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Whether the mount that holds 'path' (resolved; "" is "/"), the nearest
 * mount point at or above it, is a batchfs mount: 1 or 0, or -errno. */
static int held_by_batchfs(const char *path, struct bfs_mountinfo *m)
{
	char p[PATH_MAX];
	int rc;

	snprintf(p, sizeof(p), "%s", path);
	for (;;) {
		rc = bfs_mountinfo_find(*p ? p : "/", m);
		if (rc != 0)
			return rc < 0 ? rc : bfs_mountinfo_is_batchfs(m);
		if (!*p)
			return 0;
		*strrchr(p, '/') = '\0';
	}
}

/* One step of bfs_mountinfo_resolve: component 'name' of the path, after
 * 'cur' (resolved, "" for "/"; extended in place). 0 when cur now names
 * it, 1 when it is a symlink whose target is in 'target' (cur unchanged),
 * or -errno. *blind says whether cur is inside a batchfs mount. */
static int step(char *cur, const char *name, bool *blind, char *target,
		struct bfs_mountinfo *m)
{
	size_t n = strlen(cur);
	ssize_t k;
	int rc;

	if (!strcmp(name, "."))
		return 0;
	if (!strcmp(name, "..")) {
		if (n)
			*strrchr(cur, '/') = '\0';
		rc = held_by_batchfs(cur, m);
		*blind = rc == 1;
		return rc < 0 ? rc : 0;
	}
	if (n + 1 + strlen(name) >= PATH_MAX)
		return -ENAMETOOLONG;
	snprintf(cur + n, PATH_MAX - n, "/%s", name);
	rc = bfs_mountinfo_find(cur, m);
	if (rc != 0) { /* a mount point: a directory, never looked at */
		*blind = rc == 1 && bfs_mountinfo_is_batchfs(m);
		return rc < 0 ? rc : 0;
	}
	if (*blind) /* inside a batchfs mount: no symlinks there */
		return 0;
	k = readlink(cur, target, PATH_MAX - 1);
	if (k < 0 && errno == EINVAL) /* there, and not a symlink */
		return 0;
	if (k < 0)
		return -errno;
	target[k] = '\0';
	cur[n] = '\0';
	return 1;
}

int bfs_mountinfo_resolve(const char *arg, char *out, size_t len)
{
	char cur[PATH_MAX] = "", todo[PATH_MAX], target[PATH_MAX];
	char name[PATH_MAX];
	struct bfs_mountinfo *m = malloc(sizeof(*m));
	const char *p = todo;
	int links = 0, rc = m ? 0 : -ENOMEM;
	bool blind = false;

	if (rc == 0 && snprintf(todo, sizeof(todo), "%s", arg) >= PATH_MAX)
		rc = -ENAMETOOLONG;
	if (rc == 0 && arg[0] != '/' && !getcwd(cur, sizeof(cur)))
		rc = -errno;
	if (rc == 0 && !strcmp(cur, "/"))
		cur[0] = '\0';
	if (rc == 0 && (rc = held_by_batchfs(cur, m)) >= 0) {
		blind = rc == 1;
		rc = 0;
	}
	while (rc == 0 && *p) {
		size_t n = strcspn(p, "/");

		snprintf(name, sizeof(name), "%.*s", (int)n, p);
		p += n + (p[n] == '/');
		if (!n)
			continue;
		rc = step(cur, name, &blind, target, m);
		if (rc != 1)
			continue;
		/* a symlink: its target, then what is left of the path */
		if (++links > 40) {
			rc = -ELOOP;
		} else if (strlen(target) + 1 + strlen(p) >= sizeof(todo)) {
			rc = -ENAMETOOLONG;
		} else { /* todo = target "/" p (p points into todo) */
			size_t tl = strlen(target);

			memmove(todo + tl + 1, p, strlen(p) + 1);
			memcpy(todo, target, tl);
			todo[tl] = '/';
			p = todo;
			if (target[0] == '/')
				cur[0] = '\0';
			rc = target[0] == '/' ? held_by_batchfs("", m) : 0;
			blind = rc == 1;
			rc = rc < 0 ? rc : 0;
		}
	}
	if (rc == 0)
		snprintf(out, len, "%s", *cur ? cur : "/");
	free(m);
	return rc;
}

/* Decode mountinfo's octal escapes of field 'in' into out. */
static void unescape(const char *in, char *out, size_t len)
{
	size_t n = 0;

	while (*in && n + 1 < len) {
		if (in[0] == '\\' && in[1] >= '0' && in[1] <= '3' &&
		    in[2] >= '0' && in[2] <= '7' && in[3] >= '0' &&
		    in[3] <= '7') {
			out[n++] = (char)((in[1] - '0') << 6 |
					  (in[2] - '0') << 3 | (in[3] - '0'));
			in += 4;
		} else {
			out[n++] = *in++;
		}
	}
	out[n] = '\0';
}

/* Fill m from one mountinfo line (modified in place). 0, or -1 when the
 * line does not have the expected fields. */
static int parse_line(char *line, struct bfs_mountinfo *m)
{
	char *save = NULL, *f[5], *tok;
	int i = 0;

	line[strcspn(line, "\n")] = '\0';
	for (tok = strtok_r(line, " ", &save); tok && i < 5;
	     tok = strtok_r(NULL, " ", &save))
		f[i++] = tok;
	if (i < 5)
		return -1;
	if (sscanf(f[2], "%u:%u", &m->major, &m->minor) != 2)
		return -1;
	unescape(f[4], m->point, sizeof(m->point));
	while (tok && strcmp(tok, "-")) /* optional fields, then "-" */
		tok = strtok_r(NULL, " ", &save);
	if (!tok || !(tok = strtok_r(NULL, " ", &save)))
		return -1;
	unescape(tok, m->fstype, sizeof(m->fstype));
	tok = strtok_r(NULL, " ", &save);
	unescape(tok ? tok : "?", m->source, sizeof(m->source));
	m->user_id = -1;
	tok = tok ? strtok_r(NULL, " ", &save) : NULL; /* super options */
	for (char *o = tok ? strstr(tok, "user_id=") : NULL; o;
	     o = strstr(o + 1, "user_id="))
		if (o == tok || o[-1] == ',')
			m->user_id = strtol(o + 8, NULL, 10);
	return 0;
}

int bfs_mountinfo_find(const char *path, struct bfs_mountinfo *out)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	struct bfs_mountinfo *m;
	char *line = NULL;
	size_t cap = 0;
	int found = 0;

	if (!f)
		return -errno;
	m = malloc(sizeof(*m));
	if (!m) {
		fclose(f);
		return -ENOMEM;
	}
	while (getline(&line, &cap, f) > 0) {
		if (parse_line(line, m) == 0 && !strcmp(m->point, path)) {
			*out = *m;
			found = 1;
		}
	}
	free(line);
	free(m);
	fclose(f);
	return found;
}

int bfs_mountinfo_list_batchfs(struct bfs_mountinfo **out, size_t *n)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	struct bfs_mountinfo *all = NULL, *grown, *m = NULL;
	size_t len = 0, cap = 0, linecap = 0;
	char *line = NULL;
	int rc = 0;

	*out = NULL;
	*n = 0;
	if (!f)
		return -errno;
	m = malloc(sizeof(*m));
	if (!m) {
		rc = -ENOMEM;
		goto err_close;
	}
	while (getline(&line, &linecap, f) > 0) {
		if (parse_line(line, m))
			continue;
		/* A mount on the point of a batchfs one kept so far hides it
		 * (the list holds one mount per point at most). */
		for (size_t i = 0; i < len; i++) {
			if (!strcmp(all[i].point, m->point)) {
				len--;
				memmove(&all[i], &all[i + 1],
					(len - i) * sizeof(*all));
				break;
			}
		}
		if (!bfs_mountinfo_is_batchfs(m))
			continue;
		if (len == cap) {
			cap = cap ? 2 * cap : 4;
			grown = realloc(all, cap * sizeof(*all));
			if (!grown) {
				rc = -ENOMEM;
				goto err_close;
			}
			all = grown;
		}
		all[len++] = *m;
	}
	*out = len ? all : NULL;
	*n = len;
	if (len)
		all = NULL;
err_close:
	free(all);
	free(m);
	free(line);
	fclose(f);
	return rc;
}

bool bfs_mountinfo_is_batchfs(const struct bfs_mountinfo *m)
{
	return !strcmp(m->fstype, "fuse.batchfs");
}

int bfs_mountinfo_check_target(const char *arg, char *real, size_t len)
{
	struct bfs_mountinfo *m = malloc(sizeof(*m));
	struct stat st;
	int rc = m ? bfs_mountinfo_resolve(arg, real, len) : -ENOMEM;

	if (rc == 0)
		rc = bfs_mountinfo_find(real, m);
	if (rc == 0 && stat(real, &st) == 0 && S_ISDIR(st.st_mode)) {
		free(m);
		return 0;
	}
	if (rc == -ENOENT)
		fprintf(stderr,
			"batchfs mount: %s does not exist (create the "
			"directory first: mkdir -p %s)\n",
			arg, arg);
	else if (rc < 0)
		fprintf(stderr, "batchfs mount: %s: %s\n", arg, strerror(-rc));
	else if (rc == 1 && bfs_mountinfo_is_batchfs(m))
		fprintf(stderr,
			"batchfs mount: %s is already a mount point: a "
			"batchfs mount is there; unmount it first with: "
			"batchfs umount %s\n",
			arg, arg);
	else if (rc == 1)
		fprintf(stderr,
			"batchfs mount: %s is already a mount point: %s (%s) "
			"is mounted there; mount on a directory that is not "
			"a mount point\n",
			arg, m->fstype, m->source);
	else
		fprintf(stderr, "batchfs mount: %s is not a directory\n", arg);
	free(m);
	return 1;
}
