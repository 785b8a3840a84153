/* tools/cmd_umount: `batchfs umount MOUNTPOINT` = fusermount3 -u, and when
 * the mount is busy, which processes hold it (open files or working
 * directory under it, found by scanning /proc/PID/fd and /proc/PID/cwd). */
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

/* Run fusermount3 -u [-q] mnt; its exit status, or -1. */
static int fusermount_u(const char *mnt)
{
	pid_t pid = fork();
	int st;

	if (pid < 0)
		return -1;
	if (pid == 0) {
		execlp("fusermount3", "fusermount3", "-u", mnt, (char *)NULL);
		_exit(127);
	}
	if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

/* Contract: see tools/cmd.h. 0 unmounted, 1 failed (busy: holders
 * listed), 2 bad usage. */
int bfs_cmd_umount(int argc, char **argv)
{
	char real[PATH_MAX];
	const char *mnt;

	if (argc == 2 &&
	    (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		usage(stdout);
		return 0;
	}
	if (argc != 2 || argv[1][0] == '-')
		return bfs_cli_bad_usage("umount", usage,
					 "expected one MOUNTPOINT", NULL);
	mnt = realpath(argv[1], real) ? real : argv[1];
	/* A file closed an instant ago can still hold the mount while the
	 * kernel finishes releasing it: retry a few times (~0.5 s) as long as
	 * no process holds anything under the mount. */
	for (int i = 0; i < 10; i++) {
		if (fusermount_u(mnt) == 0)
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
	/* Busy with nothing open under it: a request is in flight (an open
	 * or a read waiting for its batch), which holds the mount until it
	 * is answered. */
	fprintf(
	    stderr,
	    "batchfs umount: %s is busy: no process has a file or directory "
	    "open under it, so a request is in flight (an open or read "
	    "waiting for a batch); try again when it is answered, or detach "
	    "now with fusermount3 -uz %s\n",
	    mnt, mnt);
	return 1;
}
