/* tools/probe: a function run in a child, its answer taken with a deadline.
 *
 * Whoever reads a file of a FUSE mount whose daemon is stopped (SIGSTOP)
 * or deadlocked waits for the daemon: killable while the daemon has not
 * read the request, in D state for good once it has (until it answers or
 * the connection is aborted). So such reads are done by a child, which
 * writes its answer into a memory stream and, once it has all of it, on a
 * pipe (a status byte, then the text); the parent polls all the pipes at
 * once until the deadline. A child still waiting then is sent SIGKILL and
 * never waited for. It holds nothing of the parent's: stdin, stdout and
 * stderr are /dev/null, every other descriptor is closed but its pipe,
 * and it is in a session of its own; so neither a caller that reads the
 * parent's output to its end nor the terminal waits for it, and init
 * reaps it whenever it ends. PR_SET_PDEATHSIG ends the children that can
 * be ended when the parent goes first (^C).
 *
 * Threads would not do: a process ends only when its last thread has, and
 * one in D state would keep stdout open and the exit status from the
 * caller. */
#include "tools/probe.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_ANSWER (1u << 20) /* what one probe may write */

static void write_all(int fd, const char *p, size_t n)
{
	ssize_t k;

	while (n && ((k = write(fd, p, n)) > 0 || errno == EINTR)) {
		if (k > 0) {
			p += k;
			n -= (size_t)k;
		}
	}
}

/* The child's side: fn's answer on fd 'w', then exit. Before anything
 * else it lets go of all the parent holds. */
static void __attribute__((noreturn))
child(bfs_probe_fn fn, const void *arg, int w, pid_t parent)
{
	int fd = fcntl(w, F_DUPFD, 3), null = open("/dev/null", O_RDWR);
	char *text = NULL, status;
	size_t len = 0;
	FILE *f;

	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
		_exit(127); /* the parent is gone already */
	setsid();
	for (int i = 0; i < 3; i++) {
		if (null < 0)
			close(i);
		else if (null != i)
			dup2(null, i);
	}
	if (fd < 0 || (fd != 3 && dup2(fd, 3) < 0))
		_exit(127);
	closefrom(4);
	f = open_memstream(&text, &len);
	if (!f)
		_exit(127);
	status = fn(arg, f) ? '1' : '0';
	if (fclose(f))
		_exit(127);
	write_all(3, &status, 1);
	write_all(3, text, len);
	_exit(0);
}

int bfs_probe_start(struct bfs_probe *pr, bfs_probe_fn fn, const void *arg)
{
	pid_t parent = getpid();
	int fds[2];

	memset(pr, 0, sizeof(*pr));
	pr->fd = -1;
	if (pipe2(fds, O_CLOEXEC) < 0) {
		pr->err = errno;
		return -pr->err;
	}
	fflush(stdout); /* or the child's copy of the buffer ... */
	fflush(stderr); /* ... would be ours to print twice */
	pr->pid = fork();
	if (pr->pid == 0)
		child(fn, arg, fds[1], parent);
	close(fds[1]);
	if (pr->pid < 0) {
		pr->err = errno;
		pr->pid = 0;
		close(fds[0]);
		return -pr->err;
	}
	pr->fd = fds[0];
	return 0;
}

static void stop_reading(struct bfs_probe *pr)
{
	close(pr->fd);
	pr->fd = -1;
}

/* Take what probe pr has written so far (poll said there is some). */
static void take(struct bfs_probe *pr)
{
	char *grown;
	ssize_t n;

	if (pr->got + 1 >= pr->cap) {
		grown = pr->cap < MAX_ANSWER
			    ? realloc(pr->buf, pr->cap ? 2 * pr->cap : 4096)
			    : NULL;
		if (!grown) { /* too much to be an answer */
			stop_reading(pr);
			return;
		}
		pr->buf = grown;
		pr->cap = pr->cap ? 2 * pr->cap : 4096;
	}
	n = read(pr->fd, pr->buf + pr->got, pr->cap - pr->got - 1);
	if (n > 0) {
		pr->got += (size_t)n;
		pr->buf[pr->got] = '\0';
		return;
	}
	if (n < 0 && errno == EINTR)
		return;
	stop_reading(pr);
	if (n == 0 && pr->got && (pr->buf[0] == '0' || pr->buf[0] == '1')) {
		pr->done = true;
		pr->status = pr->buf[0] - '0';
		pr->text = pr->buf + 1;
		pr->len = pr->got - 1;
	}
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int bfs_probe_wait(struct bfs_probe *pr, size_t n, double timeout)
{
	struct pollfd *pfd = calloc(n ? n : 1, sizeof(*pfd));
	int64_t deadline = now_ms() + (int64_t)(timeout * 1000), left;
	bool ok = pfd != NULL, waiting = ok;
	int ready;

	while (waiting) { /* at least one look, also when timeout is 0 */
		left = deadline - now_ms();
		waiting = false;
		for (size_t i = 0; i < n; i++) {
			pfd[i].fd = pr[i].fd; /* poll skips -1 */
			pfd[i].events = POLLIN;
			waiting |= pr[i].fd >= 0;
		}
		ready = waiting ? poll(pfd, n, left > 0 ? (int)left : 0) : 0;
		if (ready < 0 && errno == EINTR)
			continue;
		waiting = ready > 0;
		for (size_t i = 0; waiting && i < n; i++)
			if (pr[i].fd >= 0 && pfd[i].revents)
				take(&pr[i]);
	}
	for (size_t i = 0; i < n; i++) {
		if (pr[i].fd >= 0)
			stop_reading(&pr[i]);
		if (pr[i].pid && !pr[i].done)
			kill(pr[i].pid, SIGKILL);
		if (pr[i].pid)
			waitpid(pr[i].pid, NULL, WNOHANG);
	}
	free(pfd);
	return ok ? 0 : -ENOMEM;
}

void bfs_probe_free(struct bfs_probe *pr)
{
	if (!pr)
		return;
	free(pr->buf);
	pr->buf = NULL;
	pr->text = NULL;
}
