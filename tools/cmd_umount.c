/* tools/cmd_umount: `batchfs umount MOUNTPOINT` = fusermount3 -u of a
 * batchfs mount. First /proc/self/mountinfo says whether MOUNTPOINT is a
 * batchfs mount at all ("is not mounted" otherwise, nothing run); only
 * when fusermount3 finds a real mount busy are the processes that hold
 * it looked up (open files or working directory under it, found by
 * scanning /proc/PID/fd and /proc/PID/cwd). fusermount3's own message is
 * printed once, after the last try. */
#include <dirent.h>
#include <stdbool.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/cli.h"
#include "tools/cmd.h"
#include "tools/mountinfo.h"

static void usage(FILE *f)
{
	fputs("usage: batchfs umount MOUNTPOINT\n", f);
}

static bool under(const char *path, const char *mnt)
{
	size_t n = strlen(mnt);

	return !strncmp(path, mnt, n) && (path[n] == '\0' || path[n] == '/');
}

/* Print "PID (comm): PATH" for a link under mnt; true if it was. */
static bool report_link(const char *pid, const char *link, const char *mnt)
{
	char target[PATH_MAX], commp[64], comm[64] = "?";
	ssize_t n = readlink(link, target, sizeof(target) - 1);
	FILE *f;

	if (n <= 0)
		return false;
	target[n] = '\0';
	if (!under(target, mnt))
		return false;
	snprintf(commp, sizeof(commp), "/proc/%s/comm", pid);
	f = fopen(commp, "r");
	if (f) {
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = '\0';
		fclose(f);
	}
	fprintf(stderr, "  pid %s (%s) holds %s\n", pid, comm, target);
	return true;
}

/* Scan /proc for processes using mnt. Returns how many were found. */
static int report_holders(const char *mnt)
{
	DIR *proc = opendir("/proc");
	struct dirent *d;
	int found = 0;

	if (!proc)
		return 0;
	while ((d = readdir(proc))) {
		char path[PATH_MAX];
		DIR *fds;
		struct dirent *fd;

		if (d->d_name[0] < '1' || d->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/cwd", d->d_name);
		found += report_link(d->d_name, path, mnt);
		snprintf(path, sizeof(path), "/proc/%s/fd", d->d_name);
		fds = opendir(path);
		if (!fds)
			continue;
		while ((fd = readdir(fds))) {
			char link[PATH_MAX + 300];

			if (fd->d_name[0] == '.')
				continue;
			snprintf(link, sizeof(link), "%s/%s", path, fd->d_name);
			found += report_link(d->d_name, link, mnt);
		}
		closedir(fds);
	}
	closedir(proc);
	return found;
}

/* Run fusermount3 -u mnt; its exit status, or -1. Its stderr goes into
 * msg (the last line kept). */
static int fusermount_u(const char *mnt, char *msg, size_t len)
{
	int fds[2], st;
	size_t n = 0;
	ssize_t r;
	pid_t pid;

	if (pipe(fds) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		dup2(fds[1], STDERR_FILENO);
		close(fds[0]);
		close(fds[1]);
		execlp("fusermount3", "fusermount3", "-u", mnt, (char *)NULL);
		fprintf(stderr, "cannot run fusermount3: %s\n",
			strerror(errno));
		_exit(127);
	}
	close(fds[1]);
	while (pid > 0 && (r = read(fds[0], msg + n, len - 1 - n)) > 0)
		n += (size_t)r;
	msg[n] = '\0';
	while (n && msg[n - 1] == '\n')
		msg[--n] = '\0';
	close(fds[0]);
	if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

/* Whether 'mnt' (resolved) is a batchfs mount: 1 yes, 0 no (printed),
 * -1 mountinfo unreadable (printed). */
static int is_batchfs_mount(const char *arg, const char *mnt)
{
	struct bfs_mountinfo *m = malloc(sizeof(*m));
	int rc = m ? bfs_mountinfo_find(mnt, m) : -ENOMEM;

	if (rc < 0)
		fprintf(stderr, "batchfs umount: /proc/self/mountinfo: %s\n",
			strerror(-rc));
	else if (rc == 0)
		fprintf(stderr, "batchfs umount: %s is not mounted\n", arg);
	else if (rc == 1 && !bfs_mountinfo_is_batchfs(m)) {
		fprintf(stderr,
			"batchfs umount: %s is not a batchfs mount (%s from "
			"%s is mounted there)\n",
			arg, m->fstype, m->source);
		rc = 0;
	}
	free(m);
	return rc < 0 ? -1 : rc;
}

/* Contract: see tools/cmd.h. 0 unmounted, 1 failed (not a batchfs
 * mount, or busy: holders listed), 2 bad usage. */
int bfs_cmd_umount(int argc, char **argv)
{
	char mnt[PATH_MAX], msg[1024] = "";
	struct bfs_mountinfo now;
	int rc;

	if (argc == 2 &&
	    (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		usage(stdout);
		return 0;
	}
	if (argc != 2 || argv[1][0] == '-')
		return bfs_cli_bad_usage("umount", usage,
					 "expected one MOUNTPOINT", NULL);
	rc = bfs_mountinfo_resolve(argv[1], mnt, sizeof(mnt));
	if (rc < 0) {
		fprintf(stderr, "batchfs umount: %s: %s\n", argv[1],
			rc == -ENOENT ? "does not exist" : strerror(-rc));
		return 1;
	}
	if (is_batchfs_mount(argv[1], mnt) != 1)
		return 1;
	if (chdir("/") < 0) { /* run from inside, we would hold it */
		perror("batchfs umount: chdir /");
		return 1;
	}
	/* A file closed an instant ago can still hold the mount while the
	 * kernel finishes releasing it: retry a few times (~0.5 s) as long as
	 * no process holds anything under the mount. */
	for (int i = 0; i < 10; i++) {
		if (fusermount_u(mnt, msg, sizeof(msg)) == 0 ||
		    bfs_mountinfo_find(mnt, &now) == 0) /* gone meanwhile */
			return 0;
		if (report_holders(mnt) > 0) {
			fprintf(stderr,
				"batchfs umount: %s is busy (processes above); "
				"close them, or detach now with "
				"fusermount3 -uz %s\n",
				mnt, mnt);
			return 1;
		}
		usleep(50000);
	}
	fprintf(stderr, "batchfs umount: %s: %s\n", argv[1],
		msg[0] ? msg : "fusermount3 failed");
	return 1;
}
