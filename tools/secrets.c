/* tools/secrets: a URL's secrets out of /proc/PID/cmdline and the AWS
 * secret keys out of /proc/PID/environ (tools/secrets.h).
 *
 * /proc/PID/cmdline is readable by every user of the machine, and shows
 * the bytes of the argument block the kernel wrote at exec, as they are
 * now: overwriting them in place (same length, NULs kept, so the kernel
 * reads it as the arguments still) hides what was there. The arguments
 * themselves live on in heap copies. /proc/PID/environ (the owner's and
 * root's only) shows the environment block so too; setenv moves a
 * variable to the heap, the block keeps the old text until overwritten.
 * Between exec and main's first line the secrets are there to be read:
 * a process cannot do better with what exec gave it. */
#include "tools/secrets.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

/* Mask [from, to) of s with '*'; whether anything was. */
static bool mask(char *from, const char *to)
{
	bool any = from < to;

	for (; from < to; from++)
		*from = '*';
	return any;
}

/* The secrets of the URL in s masked: the userinfo before the last '@'
 * of the authority, and the query from its '?' to the fragment or the
 * end of s. An authority with a ':' but no '@' followed by an '@' (before
 * another "://") is a password with an unencoded '/', '?' or '#' (which
 * fs/remote refuses): all to the last '@' is masked. 'apply' false: only
 * whether there is any. */
static bool url_secrets(char *s, bool apply)
{
	bool any = false;
	char *p = s;

	while ((p = strstr(p, "://"))) {
		char *auth = p + 3, *end = auth + strcspn(auth, "/?#"),
		     *at = NULL, *next;

		for (char *c = auth; c < end; c++)
			if (*c == '@')
				at = c;
		if (!at && memchr(auth, ':', (size_t)(end - auth))) {
			next = strstr(end, "://");
			for (char *c = end; *c && (!next || c < next); c++)
				if (*c == '@')
					at = c;
			if (at)
				end = at + 1 + strcspn(at + 1, "/?#");
		}
		if (at)
			any |= apply ? mask(auth, at) : true;
		if (*end == '/')
			end += strcspn(end, "?#");
		if (*end == '?') {
			char *q = end + 1, *qend = q + strcspn(q, "#");

			any |= apply ? mask(q, qend) : q < qend;
			end = qend;
		}
		p = end;
	}
	return any;
}

/* url_secrets of s, or of each item of s when it is a list (-o's
 * KEY=VALUE,... which tools/cmd_mount.c splits at every ','; the item is
 * cut there for a moment). */
static bool secrets(char *s, bool apply, bool list)
{
	bool any = false;

	if (!list)
		return url_secrets(s, apply);
	for (char *item = s;;) {
		char *comma = strchr(item, ',');

		if (comma)
			*comma = 0;
		any |= url_secrets(item, apply);
		if (!comma)
			return any;
		*comma = ',';
		item = comma + 1;
	}
}

static void hide_env(const char *name)
{
	size_t n = strlen(name);

	for (char **e = environ; e && *e; e++) {
		char *was = *e, *copy;

		if (strncmp(was, name, n) || was[n] != '=' || !was[n + 1])
			continue;
		copy = strdup(was + n + 1);
		if (!copy || setenv(name, copy, 1)) {
			free(copy);
			return; /* shown as it was: better than lost */
		}
		mask(was + n + 1, was + strlen(was));
		free(copy);
		return;
	}
}

void bfs_hide_secrets(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		bool list = !strncmp(argv[i], "-o", 2) ||
			    (i > 1 && !strcmp(argv[i - 1], "-o"));
		char *copy;

		if (!secrets(argv[i], false, list) || !(copy = strdup(argv[i])))
			continue;
		secrets(argv[i], true, list);
		argv[i] = copy; /* kept for the process's life */
	}
	hide_env("AWS_SECRET_ACCESS_KEY");
	hide_env("AWS_SESSION_TOKEN");
	hide_env("AWS_SECURITY_TOKEN");
}
