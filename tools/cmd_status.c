/* tools/cmd_status: `batchfs status [--timeout SECONDS] [MOUNTPOINT...]`,
 * the batchfs mounts of this machine (of this mount namespace:
 * /proc/self/mountinfo) and, for each, what its daemon says in its own
 * files: the sources, the serve mode and the log from dataset.json, the
 * pid from stats.
 *
 * This process never looks into a mount: whoever reads a file of a mount
 * whose daemon is stopped (SIGSTOP) or deadlocked waits for the daemon,
 * in D state for good once the daemon has read the request. So each
 * mount's files are read by a probe (tools/probe.c: a child of its own
 * that holds nothing of ours, so one stuck in D state holds up nobody),
 * all mounts at once, and the answers are waited for at most --timeout
 * seconds (default 5). Threads would not do (a process ends only when its
 * last thread has); fusectl's per-connection "waiting" count would not
 * either: a stopped daemon that nobody asked anything has none, and a busy
 * healthy one has some. Which mount a MOUNTPOINT names comes from
 * mountinfo without a look into any mount (bfs_mountinfo_resolve).
 *
 * A mount that does not answer in time is listed as "not responding",
 * with what can be done: its daemon's pid and state when a process
 * `batchfs mount ... MOUNTPOINT` is found (by one more probe: reading a
 * process's cmdline can wait on its memory map's lock), its FUSE
 * connection to abort, and `batchfs umount --lazy`. A mount whose daemon
 * is gone answers ENOTCONN: listed as "not connected" with the command
 * that removes it. Either makes the exit status 1; the other mounts are
 * listed all the same.
 *
 * Any FUSE filesystem can call itself fuse.batchfs, and a source's file
 * name can hold any byte: every string printed from a mount (the mount
 * point's name included) goes through put_text, which shows control
 * characters (C0, DEL, C1 as U+0080..U+009F) and bytes that are not UTF-8
 * as escapes (\x1b, \u009b) instead of handing them to the terminal.
 *
 * dataset.json is the daemon's own rendering (fs/text.c): an object whose
 * keys are on top level, strings escaped as fs/layout.c's
 * bfs_layout_json_str writes them (\" \\ and \u00XX). The small reader
 * below reads top-level keys and strings, and nothing it cannot parse is
 * printed. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tools/cli.h"
#include "tools/cmd.h"
#include "tools/mountinfo.h"
#include "tools/probe.h"

#define MAX_TEXT	(64u << 20) /* dataset.json of 4096 long sources */
#define SHOWN_SOURCES	4	    /* then "... and N more" */
#define DEFAULT_TIMEOUT 5.0	    /* seconds */
#define MAX_TIMEOUT	3600.0
#define FUSECTL		"/sys/fs/fuse/connections"

static void usage(FILE *f)
{
	fputs("usage: batchfs status [--timeout SECONDS] [MOUNTPOINT...]\n"
	      "List the batchfs mounts of this machine (all of them, or the\n"
	      "MOUNTPOINTs given): for each, its sources, serve mode, log\n"
	      "file and daemon pid, as its dataset.json and stats say. A\n"
	      "mount whose daemon is gone is listed as not connected; one\n"
	      "that does not answer in time (its daemon stopped or stuck)\n"
	      "as not responding, with its daemon's pid and how to end it.\n"
	      "Control characters in what a mount says are shown escaped\n"
	      "(\\x1b, \\u009b).\n\n"
	      "  -t, --timeout SECONDS  how long to wait for the mounts'\n"
	      "                         answers, all asked at once\n"
	      "                         (default 5)\n"
	      "  -h, --help             this text\n\n"
	      "Exit status: 0 every mount listed answers, 1 one does not or a\n"
	      "MOUNTPOINT is not a batchfs mount, 2 bad usage.\n",
	      f);
}

/* ---- printing what a mount says ---- */

/* The length of the UTF-8 sequence at p (n bytes available) when it is a
 * valid one of 2 to 4 bytes, else 0. */
static size_t utf8_len(const unsigned char *p, size_t n)
{
	unsigned char lo = 0x80, hi = 0xbf;
	size_t len;

	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		len = 2;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		len = 3;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		len = 4;
	else
		return 0;
	if (p[0] == 0xe0)
		lo = 0xa0; /* no overlong forms */
	else if (p[0] == 0xed)
		hi = 0x9f; /* no surrogates */
	else if (p[0] == 0xf0)
		lo = 0x90;
	else if (p[0] == 0xf4)
		hi = 0x8f; /* nothing above U+10FFFF */
	if (n < len || p[1] < lo || p[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if (p[i] < 0x80 || p[i] > 0xbf)
			return 0;
	return len;
}

/* Write the n bytes at s to f, nothing in them acted on by a terminal: C0
 * controls, DEL and bytes that are not UTF-8 as \xHH, a backslash as \\,
 * C1 controls (U+0080..U+009F) as \uHHHH, the rest of UTF-8 as is. */
static void put_text(FILE *f, const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s, *end = p + n;

	while (p < end) {
		size_t len = *p < 0x80 ? 1 : utf8_len(p, (size_t)(end - p));

		if (*p == '\\')
			fputs("\\\\", f);
		else if (*p < 0x20 || *p == 0x7f || !len)
			fprintf(f, "\\x%02x", *p);
		else if (*p == 0xc2 && p[1] < 0xa0)
			fprintf(f, "\\u%04x", p[1]);
		else
			fwrite(p, 1, len, f);
		p += len ? len : 1;
	}
}

static void put_str(FILE *f, const char *s)
{
	put_text(f, s, strlen(s));
}

/* ---- dataset.json and stats, read by a probe ---- */

/* The whole of file 'path' into *out (malloc'd, NUL-terminated; the
 * caller frees it), its length in *n when n is not NULL. 0 or -errno
 * (-ENOTCONN: the daemon is gone, -EFBIG: more than MAX_TEXT bytes). */
static int read_text(const char *path, char **out, size_t *n_out)
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
	if (n_out)
		*n_out = len;
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

/* Append code point 'cp' to out (capacity len, *n bytes used, one kept
 * for a NUL) as UTF-8; what does not fit is dropped. */
static void put_utf8(unsigned cp, char *out, size_t len, size_t *n)
{
	char u[4];
	size_t k = 0;

	if (cp < 0x80) {
		u[k++] = (char)cp;
	} else if (cp < 0x800) {
		u[k++] = (char)(0xc0 | cp >> 6);
		u[k++] = (char)(0x80 | (cp & 0x3f));
	} else if (cp < 0x10000) {
		u[k++] = (char)(0xe0 | cp >> 12);
		u[k++] = (char)(0x80 | (cp >> 6 & 0x3f));
		u[k++] = (char)(0x80 | (cp & 0x3f));
	} else {
		u[k++] = (char)(0xf0 | cp >> 18);
		u[k++] = (char)(0x80 | (cp >> 12 & 0x3f));
		u[k++] = (char)(0x80 | (cp >> 6 & 0x3f));
		u[k++] = (char)(0x80 | (cp & 0x3f));
	}
	if (*n + k < len) {
		memcpy(out + *n, u, k);
		*n += k;
	}
}

/* The 4 hex digits of a \u escape at p (after the "\u"), or -1. */
static long hex4(const char *p)
{
	char digits[5];

	if (strspn(p, "0123456789abcdefABCDEF") < 4)
		return -1;
	memcpy(digits, p, 4);
	digits[4] = '\0';
	return strtol(digits, NULL, 16);
}

/* The JSON string that starts at p (at its '"'), decoded into out (at
 * most len - 1 bytes, then a NUL; the rest is dropped) and its decoded
 * length in *n (it may hold NULs: \u0000). \u escapes become UTF-8, a
 * surrogate without its pair U+FFFD. Bytes are copied as they are, raw
 * control characters too: put_text shows them. Returns the byte after
 * the closing quote, or NULL when p is not a whole string. */
static const char *json_string(const char *p, char *out, size_t len, size_t *n)
{
	static const char esc[] = "\"\"\\\\//b\bf\fn\nr\rt\t";

	*n = 0;
	if (*p++ != '"')
		return NULL;
	for (; *p && *p != '"'; p++) {
		long cp = *p, lo;

		if (*p == '\\' && p[1] == 'u') {
			if ((cp = hex4(p + 2)) < 0)
				return NULL;
			p += 5;
			lo = cp >= 0xd800 && cp < 0xdc00 && p[1] == '\\' &&
				     p[2] == 'u'
				 ? hex4(p + 3)
				 : -1;
			if (lo >= 0xdc00 && lo < 0xe000) {
				cp = 0x10000 + ((cp - 0xd800) << 10) +
				     (lo - 0xdc00);
				p += 6;
			} else if (cp >= 0xd800 && cp < 0xe000) {
				cp = 0xfffd;
			}
			put_utf8((unsigned)cp, out, len, n);
			continue;
		}
		if (*p == '\\') {
			const char *e = p[1] ? strchr(esc, p[1]) : NULL;

			if (!e || (e - esc) % 2)
				return NULL;
			cp = e[1];
			p++;
		}
		if (*n + 1 < len)
			out[(*n)++] = (char)cp;
	}
	if (len)
		out[*n] = '\0';
	return *p == '"' ? p + 1 : NULL;
}

/* The value of top-level key 'key' of the JSON object 'json': a pointer to
 * its first byte, or NULL when there is none. */
static const char *json_value(const char *json, const char *key)
{
	char name[64];
	size_t n;
	int depth = 0;

	for (const char *p = json; *p; p++) {
		if (*p == '{' || *p == '[') {
			depth++;
		} else if (*p == '}' || *p == ']') {
			depth--;
		} else if (*p == '"') {
			const char *end =
			    json_string(p, name, sizeof(name), &n);

			if (!end)
				return NULL;
			end = skip_space(end);
			if (depth == 1 && *end == ':' && n == strlen(name) &&
			    !strcmp(name, key))
				return skip_space(end + 1);
			p = end - 1;
		}
	}
	return NULL;
}

/* Print "  LABEL  VALUE" for top-level string 'key' of json ("?" when it
 * is missing or not a string). */
static void print_string(FILE *f, const char *json, const char *key,
			 const char *label)
{
	const char *v = json_value(json, key);
	char s[PATH_MAX];
	size_t n;

	fprintf(f, "  %-11s ", label);
	if (v && json_string(v, s, sizeof(s), &n))
		put_text(f, s, n);
	else
		fputs("?", f);
	fputs("\n", f);
}

/* Print the first SHOWN_SOURCES of dataset.json's "sources", a line each,
 * then how many more there are. */
static void print_sources(FILE *f, const char *json, const char *point)
{
	const char *p = json_value(json, "sources");
	char s[PATH_MAX];
	size_t n = 0, len;

	if (!p || *p != '[') {
		fprintf(f, "  %-11s ?\n", "source");
		return;
	}
	for (p = skip_space(p + 1); *p == '"'; n++) {
		p = json_string(p, s, sizeof(s), &len);
		if (!p)
			break;
		if (n < SHOWN_SOURCES) {
			fprintf(f, "  %-11s ", n ? "" : "source");
			put_text(f, s, len);
			fputs("\n", f);
		}
		p = skip_space(p);
		p = skip_space(p + (*p == ','));
	}
	if (n > SHOWN_SOURCES) {
		fprintf(f, "  %-11s ... and %zu more (", "", n - SHOWN_SOURCES);
		put_str(f, point);
		fputs("/dataset.json)\n", f);
	}
}

/* The daemon's pid from the mount's stats ("pid N" line), or 0. */
static long daemon_pid(const char *point)
{
	char path[PATH_MAX + 16], *text = NULL;
	long pid = 0;

	snprintf(path, sizeof(path), "%s/stats", point);
	if (read_text(path, &text, NULL) == 0 && !strncmp(text, "pid ", 4))
		pid = strtol(text + 4, NULL, 10);
	free(text);
	return pid;
}

/* A probe's work for mount 'arg' (a struct bfs_mountinfo): its lines on f,
 * without the mount point's. 0 when it answers, 1 when it does not. */
static int describe(const void *arg, FILE *f)
{
	const struct bfs_mountinfo *m = arg;
	char path[PATH_MAX + 16], *json = NULL;
	int rc;
	long pid;

	snprintf(path, sizeof(path), "%s/dataset.json", m->point);
	rc = read_text(path, &json, NULL);
	if (rc == -ENOTCONN) {
		fputs("  not connected: its daemon is gone; 'batchfs umount ",
		      f);
		put_str(f, m->point);
		fputs("' removes the mount\n", f);
		return 1;
	}
	if (rc < 0) {
		fprintf(f, "  cannot read dataset.json: %s\n", strerror(-rc));
		return 1;
	}
	print_sources(f, json, m->point);
	print_string(f, json, "serve_mode", "serve mode");
	print_string(f, json, "log", "log");
	pid = daemon_pid(m->point);
	if (pid > 0)
		fprintf(f, "  %-11s %ld\n", "pid", pid);
	free(json);
	return 0;
}

/* ---- the daemons of mounts that do not answer, found in /proc ---- */

struct daemons_arg {
	const struct bfs_mountinfo *const *mounts;
	size_t n;
};

/* Whether process 'pid' is named batchfs (its comm, which unlike its
 * cmdline never waits on its memory map). */
static bool named_batchfs(const char *pid)
{
	char path[300], comm[32] = "";
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%s/comm", pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	if (!fgets(comm, sizeof(comm), f))
		comm[0] = '\0';
	fclose(f);
	return !strcmp(comm, "batchfs\n");
}

/* Whether argument 'a' of process 'pid' (relative to its working
 * directory) names mount point 'point'. */
static bool names_point(const char *pid, const char *a, const char *point)
{
	char path[300], cwd[PATH_MAX], full[2 * PATH_MAX], real[PATH_MAX];
	const char *base = strrchr(point, '/');
	size_t n = strlen(a), bn;
	ssize_t k;

	while (n > 1 && a[n - 1] == '/')
		n--;
	base = base ? base + 1 : point;
	bn = strlen(base);
	/* cheap first: the same last component */
	if (n < bn || strncmp(a + n - bn, base, bn) ||
	    (n > bn && a[n - bn - 1] != '/'))
		return false;
	cwd[0] = '\0';
	if (a[0] != '/') {
		snprintf(path, sizeof(path), "/proc/%s/cwd", pid);
		k = readlink(path, cwd, sizeof(cwd) - 1);
		if (k < 0)
			return false;
		cwd[k] = '\0';
	}
	snprintf(full, sizeof(full), "%s/%.*s", cwd, (int)n, a);
	return bfs_mountinfo_resolve(full, real, sizeof(real)) == 0 &&
	       !strcmp(real, point);
}

/* The state letter of process 'pid' (ps's STAT: R, S, D, T, ...), or
 * '?'. */
static char state_of(const char *pid)
{
	char path[300], line[512], *paren;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%s/stat", pid);
	f = fopen(path, "re");
	if (!f)
		return '?';
	paren = fgets(line, sizeof(line), f) ? strrchr(line, ')') : NULL;
	fclose(f);
	return paren && paren[1] == ' ' && paren[2] ? paren[2] : '?';
}

/* Note the mounts of 'd' that process 'pid' serves, as "INDEX PID STATE"
 * lines on f, when its command line is `batchfs mount ... MOUNTPOINT`, or
 * mount.fuse3's `batchfs /SOURCE MOUNTPOINT -o ...` (any argument may be
 * the mount point: they are in the order typed). */
static void note_daemon(const struct daemons_arg *d, const char *pid, FILE *f)
{
	char path[300], *cmd = NULL, *end, *a;
	size_t len;

	snprintf(path, sizeof(path), "/proc/%s/cmdline", pid);
	if (read_text(path, &cmd, &len) < 0)
		return;
	end = cmd + len; /* argv[0] NUL argv[1] NUL ... */
	a = cmd + strlen(cmd) + 1;
	if (a < end &&
	    (!strcmp(a, "mount") || (a[0] != '-' && strchr(a, '/')))) {
		for (a += strlen(a) + 1; a < end; a += strlen(a) + 1)
			for (size_t i = 0; i < d->n; i++)
				if (names_point(pid, a, d->mounts[i]->point))
					fprintf(f, "%zu %s %c\n", i, pid,
						state_of(pid));
	}
	free(cmd);
}

/* A probe's work: the daemons of the mounts of 'arg' (a struct
 * daemons_arg), as note_daemon writes them. 0. */
static int find_daemons(const void *arg, FILE *f)
{
	DIR *proc = opendir("/proc");
	struct dirent *e;

	while (proc && (e = readdir(proc))) {
		if (isdigit((unsigned char)e->d_name[0]) &&
		    named_batchfs(e->d_name))
			note_daemon(arg, e->d_name, f);
	}
	if (proc)
		closedir(proc);
	return 0;
}

/* ---- the report ---- */

/* Print what is known of mount m, which did not answer within 'timeout'
 * seconds: its daemons as the finder's answer 'daemons' ("INDEX PID
 * STATE" lines; NULL when it has none) names them for index i, and how
 * to end it: abort its FUSE connection (/sys/fs/fuse/connections/N, N
 * its st_dev), then detach it. */
static void not_responding(const struct bfs_mountinfo *m, size_t i,
			   const char *daemons, double timeout)
{
	unsigned long conn = (unsigned long)m->major << 20 | m->minor;
	char dir[128];
	struct stat st;
	const char *line;
	size_t idx;
	long pid;
	char state;

	printf("  not responding: no answer from its daemon within %g s\n",
	       timeout);
	for (line = daemons; line && *line; line = strchr(line, '\n') + 1) {
		if (sscanf(line, "%zu %ld %c", &idx, &pid, &state) != 3 ||
		    !strchr(line, '\n'))
			break;
		if (idx != i)
			continue;
		printf("  %-11s %ld", "pid", pid);
		if (state == 'T')
			printf(", stopped: 'kill -s CONT %ld' resumes it\n",
			       pid);
		else if (state == 't')
			printf(", stopped by its tracer (a debugger)\n");
		else if (state == 'D')
			printf(", waiting in the kernel (state D)\n");
		else
			printf(" (state %c)\n", state);
	}
	snprintf(dir, sizeof(dir), FUSECTL "/%lu", conn);
	printf("  %-11s ", "abort");
	if (stat(FUSECTL, &st) == 0 && stat(dir, &st) < 0)
		fputs("mount -t fusectl none " FUSECTL "; ", stdout);
	printf("echo 1 > %s/abort (every request waiting on it fails)\n", dir);
	printf("  %-11s batchfs umount --lazy ", "unmount");
	put_str(stdout, m->point);
	fputs("\n", stdout);
}

/* Probe the n mounts at once and print each: its mount point, then its
 * answer or, when it has none within 'timeout' seconds, not_responding.
 * 0 every mount answered, 1 not. */
static int report(const struct bfs_mountinfo *const *mounts, size_t n,
		  double timeout)
{
	struct bfs_probe *pr = calloc(n + 1, sizeof(*pr));
	struct daemons_arg d = {mounts, n};
	bool taken;
	int rc = 0;

	if (!pr) {
		fprintf(stderr, "batchfs status: %s\n", strerror(ENOMEM));
		return 1;
	}
	for (size_t i = 0; i < n; i++)
		bfs_probe_start(&pr[i], describe, mounts[i]);
	bfs_probe_start(&pr[n], find_daemons, &d);
	/* the daemons are only wanted for a mount that did not answer, and
	 * the finder had as long as the mounts */
	taken = bfs_probe_wait(pr, n, timeout) == 0 &&
		bfs_probe_wait(&pr[n], 1, 0) == 0;
	if (!taken) {
		fprintf(stderr, "batchfs status: %s\n", strerror(ENOMEM));
		rc = 1;
	}
	for (size_t i = 0; taken && i < n; i++) {
		put_str(stdout, mounts[i]->point);
		fputs("\n", stdout);
		if (pr[i].done) {
			fwrite(pr[i].text, 1, pr[i].len, stdout);
			rc |= pr[i].status;
		} else if (!pr[i].pid) {
			printf("  cannot ask it: %s\n", strerror(pr[i].err));
			rc = 1;
		} else {
			not_responding(mounts[i], i,
				       pr[n].done ? pr[n].text : NULL, timeout);
			rc = 1;
		}
	}
	for (size_t i = 0; i <= n; i++)
		bfs_probe_free(&pr[i]);
	free(pr);
	return rc;
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

/* SECONDS of --timeout: 0, or -EINVAL when it is not a number of seconds
 * in (0, MAX_TIMEOUT]. */
static int parse_timeout(const char *s, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v) || v <= 0 ||
	    v > MAX_TIMEOUT)
		return -EINVAL;
	*out = v;
	return 0;
}

/* Contract: see tools/cmd.h. 0 every mount listed answers, 1 one does not
 * (or a MOUNTPOINT is not a batchfs mount), 2 bad usage. */
int bfs_cmd_status(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"timeout", required_argument, NULL, 't'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	const struct bfs_mountinfo **shown = NULL;
	struct bfs_mountinfo *list;
	double timeout = DEFAULT_TIMEOUT;
	size_t n, nshown = 0;
	int c, rc = 0;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+t:h", opts, NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return 0;
		}
		if (c == 't' && parse_timeout(optarg, &timeout) == 0)
			continue;
		if (c == 't')
			return bfs_cli_bad_usage(
			    "status", usage,
			    "--timeout: expected seconds, more than 0 and at "
			    "most 3600",
			    optarg);
		if (optopt == 't')
			return bfs_cli_bad_usage(
			    "status", usage, "--timeout needs SECONDS", NULL);
		return bfs_cli_bad_usage("status", usage, "unknown option",
					 argv[optind - 1]);
	}
	c = bfs_mountinfo_list_batchfs(&list, &n);
	if (c < 0) {
		fprintf(stderr, "batchfs status: /proc/self/mountinfo: %s\n",
			strerror(-c));
		return 1;
	}
	shown = calloc(optind < argc ? (size_t)(argc - optind) : n + 1,
		       sizeof(*shown));
	if (!shown) {
		fprintf(stderr, "batchfs status: %s\n", strerror(ENOMEM));
		free(list);
		return 1;
	}
	for (size_t i = 0; optind == argc && i < n; i++)
		shown[nshown++] = &list[i];
	for (int i = optind; i < argc; i++) {
		const struct bfs_mountinfo *m = find_arg(argv[i], list, n);

		if (m)
			shown[nshown++] = m;
		else
			rc = 1;
	}
	if (optind == argc && n == 0)
		printf("no batchfs mounts\n");
	if (nshown)
		rc |= report(shown, nshown, timeout);
	free(shown);
	free(list);
	return rc;
}
