/* tools/cmd_status: `batchfs status [MOUNTPOINT...]`, the batchfs mounts
 * of this machine (of this mount namespace: /proc/self/mountinfo) and,
 * for each, what its daemon says in its own files: the sources, the serve
 * mode and the log from dataset.json, the pid from stats.
 *
 * A mount whose daemon is gone answers ENOTCONN: it is listed as "not
 * connected" with the command that removes it, and the exit status is 1.
 * Each mount's files are read through the mount, so a daemon that is
 * stopped (SIGSTOP) but alive makes the command wait, as `ls` would.
 *
 * dataset.json is the daemon's own rendering (fs/text.c): an object whose
 * keys are on top level, strings escaped as fs/layout.c's
 * bfs_layout_json_str writes them (\" \\ and \u00XX). The small reader
 * below reads top-level keys and strings, and nothing it cannot parse is
 * printed. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/cli.h"
#include "tools/cmd.h"
#include "tools/mountinfo.h"

#define MAX_TEXT      (64u << 20) /* dataset.json of 4096 long sources */
#define SHOWN_SOURCES 4		  /* then "... and N more" */

static void usage(FILE *f)
{
	fputs("usage: batchfs status [MOUNTPOINT...]\n"
	      "List the batchfs mounts of this machine (all of them, or the\n"
	      "MOUNTPOINTs given): for each, its sources, serve mode, log\n"
	      "file and daemon pid, as its dataset.json and stats say. A\n"
	      "mount whose daemon is gone is listed as not connected.\n\n"
	      "  -h, --help   this text\n\n"
	      "Exit status: 0 every mount listed answers, 1 one does not or a\n"
	      "MOUNTPOINT is not a batchfs mount, 2 bad usage.\n",
	      f);
}

/* The whole of file 'path' into *out (malloc'd, NUL-terminated; the
 * caller frees it). 0 or -errno (-ENOTCONN: the daemon is gone, -EFBIG:
 * more than MAX_TEXT bytes). */
static int read_text(const char *path, char **out)
{
	size_t len = 0, cap = 4096;
	char *buf = malloc(cap), *grown;
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc = 0;
	ssize_t n;

	if (fd < 0 || !buf) {
		rc = fd < 0 ? -errno : -ENOMEM;
		goto err_free;
	}
	while ((n = read(fd, buf + len, cap - len - 1)) > 0) {
		len += (size_t)n;
		if (len + 1 < cap)
			continue;
		grown = cap < MAX_TEXT ? realloc(buf, 2 * cap) : NULL;
		if (!grown) {
			rc = cap < MAX_TEXT ? -ENOMEM : -EFBIG;
			goto err_free;
		}
		buf = grown;
		cap *= 2;
	}
	if (n < 0) {
		rc = -errno;
		goto err_free;
	}
	buf[len] = '\0';
	*out = buf;
	buf = NULL;
err_free:
	free(buf);
	if (fd >= 0)
		close(fd);
	return rc;
}

static const char *skip_space(const char *p)
{
	return p + strspn(p, " \t\r\n");
}

/* The JSON string that starts at p (at its '"'), decoded into out (cut to
 * len - 1 bytes; \u escapes above 0x7f become '?'). Returns the byte
 * after its closing quote, or NULL when p is not a whole string. */
static const char *json_string(const char *p, char *out, size_t len)
{
	static const char esc[] = "\"\"\\\\//b\bf\fn\nr\rt\t";
	size_t n = 0;

	if (*p++ != '"')
		return NULL;
	for (; *p && *p != '"'; p++) {
		char c = *p;

		if (c == '\\' && p[1] == 'u') {
			unsigned v;

			if (sscanf(p + 2, "%4x", &v) != 1 ||
			    strspn(p + 2, "0123456789abcdefABCDEF") < 4)
				return NULL;
			c = v < 0x80 ? (char)v : '?';
			p += 5;
		} else if (c == '\\') {
			const char *e = p[1] ? strchr(esc, p[1]) : NULL;

			if (!e || (e - esc) % 2)
				return NULL;
			c = e[1];
			p++;
		}
		if (n + 1 < len)
			out[n++] = c;
	}
	if (len)
		out[n] = '\0';
	return *p == '"' ? p + 1 : NULL;
}

/* The value of top-level key 'key' of the JSON object 'json': a pointer to
 * its first byte, or NULL when there is none. */
static const char *json_value(const char *json, const char *key)
{
	char name[64];
	int depth = 0;

	for (const char *p = json; *p; p++) {
		if (*p == '{' || *p == '[') {
			depth++;
		} else if (*p == '}' || *p == ']') {
			depth--;
		} else if (*p == '"') {
			const char *end = json_string(p, name, sizeof(name));

			if (!end)
				return NULL;
			end = skip_space(end);
			if (depth == 1 && *end == ':' && !strcmp(name, key))
				return skip_space(end + 1);
			p = end - 1;
		}
	}
	return NULL;
}

/* Print "  LABEL  VALUE" for top-level string 'key' of json ("?" when it
 * is missing or not a string). */
static void print_string(const char *json, const char *key, const char *label)
{
	const char *v = json_value(json, key);
	char s[PATH_MAX];

	if (!v || !json_string(v, s, sizeof(s)))
		snprintf(s, sizeof(s), "?");
	printf("  %-11s %s\n", label, s);
}

/* Print the first SHOWN_SOURCES of dataset.json's "sources", a line each,
 * then how many more there are. */
static void print_sources(const char *json, const char *point)
{
	const char *p = json_value(json, "sources");
	char s[PATH_MAX];
	size_t n = 0;

	if (!p || *p != '[') {
		printf("  %-11s ?\n", "source");
		return;
	}
	for (p = skip_space(p + 1); *p == '"'; n++) {
		p = json_string(p, s, sizeof(s));
		if (!p)
			break;
		if (n < SHOWN_SOURCES)
			printf("  %-11s %s\n", n ? "" : "source", s);
		p = skip_space(p);
		p = skip_space(p + (*p == ','));
	}
	if (n > SHOWN_SOURCES)
		printf("  %-11s ... and %zu more (%s/dataset.json)\n", "",
		       n - SHOWN_SOURCES, point);
}

/* The daemon's pid from the mount's stats ("pid N" line), or 0. */
static long daemon_pid(const char *point)
{
	char path[PATH_MAX + 16], *text = NULL;
	long pid = 0;

	snprintf(path, sizeof(path), "%s/stats", point);
	if (read_text(path, &text) == 0 && !strncmp(text, "pid ", 4))
		pid = strtol(text + 4, NULL, 10);
	free(text);
	return pid;
}

/* Describe one mount on stdout. 0 when it answers, 1 when it does not. */
static int show(const struct bfs_mountinfo *m)
{
	char path[PATH_MAX + 16], *json = NULL;
	int rc;
	long pid;

	printf("%s\n", m->point);
	snprintf(path, sizeof(path), "%s/dataset.json", m->point);
	rc = read_text(path, &json);
	if (rc == -ENOTCONN) {
		printf("  not connected: its daemon is gone; 'batchfs umount "
		       "%s' removes the mount\n",
		       m->point);
		return 1;
	}
	if (rc < 0) {
		printf("  cannot read dataset.json: %s\n", strerror(-rc));
		return 1;
	}
	print_sources(json, m->point);
	print_string(json, "serve_mode", "serve mode");
	print_string(json, "log", "log");
	pid = daemon_pid(m->point);
	if (pid > 0)
		printf("  %-11s %ld\n", "pid", pid);
	free(json);
	return 0;
}

/* The mount of 'list' whose point is 'arg' resolved, or NULL after saying
 * why not. */
static const struct bfs_mountinfo *
find_arg(const char *arg, const struct bfs_mountinfo *list, size_t n)
{
	char real[PATH_MAX];
	int rc = bfs_mountinfo_resolve(arg, real, sizeof(real));

	if (rc < 0) {
		fprintf(stderr, "batchfs status: %s: %s\n", arg,
			rc == -ENOENT ? "does not exist" : strerror(-rc));
		return NULL;
	}
	for (size_t i = 0; i < n; i++)
		if (!strcmp(list[i].point, real))
			return &list[i];
	fprintf(stderr, "batchfs status: %s is not a batchfs mount\n", arg);
	return NULL;
}

/* Contract: see tools/cmd.h. 0 every mount listed answers, 1 one does not
 * (or a MOUNTPOINT is not a batchfs mount), 2 bad usage. */
int bfs_cmd_status(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct bfs_mountinfo *list;
	size_t n;
	int c, rc = 0;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return 0;
		}
		return bfs_cli_bad_usage("status", usage, "unknown option",
					 argv[optind - 1]);
	}
	c = bfs_mountinfo_list_batchfs(&list, &n);
	if (c < 0) {
		fprintf(stderr, "batchfs status: /proc/self/mountinfo: %s\n",
			strerror(-c));
		return 1;
	}
	if (optind == argc && n == 0)
		printf("no batchfs mounts\n");
	for (size_t i = 0; optind == argc && i < n; i++)
		rc |= show(&list[i]);
	for (int i = optind; i < argc; i++) {
		const struct bfs_mountinfo *m = find_arg(argv[i], list, n);

		rc |= m ? show(m) : 1;
	}
	free(list);
	return rc;
}
