/* tools/probe: run a function in a child process and take what it writes,
 * with a deadline, for work that may wait forever: reading a file of a
 * FUSE mount whose daemon is stopped or deadlocked (`batchfs status`). */
#ifndef BFS_TOOLS_PROBE_H
#define BFS_TOOLS_PROBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

/* The work of a probe, run in the child: writes its answer on f and
 * returns a status (0 or not: passed on as 0 or 1). */
typedef int (*bfs_probe_fn)(const void *arg, FILE *f);

/* One probe. After bfs_probe_wait: 'done' when it answered in time, then
 * 'status' and 'text' (its 'len' bytes, NUL-terminated) hold the answer;
 * else 'pid' is 0 when it could not be started ('err' says why) and not 0
 * when it did not answer. */
struct bfs_probe {
	pid_t pid;
	int err;
	bool done;
	int status;
	const char *text;
	size_t len;
	/* private */
	int fd;	    /* the read end of its pipe; -1 once closed */
	char *buf;  /* what it wrote: its status byte, then its text */
	size_t got; /* bytes in buf */
	size_t cap;
};

/* Start fn(arg, f) in a child of its own. The child first lets go of all
 * this process holds (stdin, stdout and stderr on /dev/null, every other
 * descriptor closed but its pipe, a session of its own, SIGKILL when this
 * process ends), so one stuck for good holds up nobody. 0, or -errno (in
 * pr->err too). Flushes stdout and stderr. */
int bfs_probe_start(struct bfs_probe *pr, bfs_probe_fn fn, const void *arg);

/* Take the answers of the n probes (started or not) until each has
 * answered or 'timeout' seconds have passed (0: what they have written
 * by now), then send SIGKILL to those that have not and leave them to
 * whoever reaps orphans: one in D state cannot be waited for. 0, or
 * -ENOMEM (nothing taken, all killed). */
int bfs_probe_wait(struct bfs_probe *pr, size_t n, double timeout);

/* Free what bfs_probe_wait took from pr (NULL, or never started: fine). */
void bfs_probe_free(struct bfs_probe *pr);

#endif
