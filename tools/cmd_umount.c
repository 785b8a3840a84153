/* tools/cmd_umount: `batchfs umount [--lazy] MOUNTPOINT` = fusermount3 -u
 * (-z) of a batchfs mount. First /proc/self/mountinfo says whether
 * MOUNTPOINT is a batchfs mount at all ("is not mounted" otherwise,
 * nothing run); only when fusermount3 finds a real mount busy are the
 * processes that hold it looked up (open files, mapped files or working
 * directory under it: /proc/PID/fd, /proc/PID/maps, /proc/PID/cwd; an
 * open under it that waits for the daemon: /proc/PID/wchan, syscall and
 * mem), those waiting for the daemon's answer marked so, and the message
 * says what to do: interrupt them (the daemon answers an interrupted
 * request with EINTR at once), or detach with --lazy.
 * fusermount3's own message is printed once, after the last try; to a
 * user who may not unmount it (neither root nor the one who mounted it,
 * user_id in mountinfo) it says who may. --lazy
 * detaches the mount at once, busy or not: what is open or mapped stays
 * readable, and the daemon exits when the last of it is gone. */
#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/cli.h"
#include "tools/cmd.h"
#include "tools/mountinfo.h"

static void usage(FILE *f)
{
	fputs("usage: batchfs umount [--lazy] MOUNTPOINT\n"
	      "Unmount a batchfs mount (fusermount3 -u). When it is busy, the\n"
	      "processes that hold it are listed and nothing is unmounted;\n"
	      "those waiting for a batch are marked: interrupt them (their\n"
	      "call ends with EINTR), or use --lazy.\n\n"
	      "  -z, --lazy   detach it now, even when busy: open and mapped\n"
	      "               files stay readable; the daemon exits when the\n"
	      "               last of them is closed (fetches in flight\n"
	      "               are cancelled then)\n"
	      "  -h, --help   this text\n\n"
	      "Exit status: 0 unmounted, 1 not a batchfs mount or busy, 2 bad\n"
	      "usage.\n",
	      f);
}

static bool under(const char *path, const char *mnt)
{
	size_t n = strlen(mnt);

	return !strncmp(path, mnt, n) && (path[n] == '\0' || path[n] == '/');
}

/* The command name of process 'pid' into comm ("?" when unknown). */
static const char *comm_of(const char *pid, char *comm, size_t len)
{
	char path[300];
	FILE *f;

	snprintf(comm, len, "?");
	snprintf(path, sizeof(path), "/proc/%s/comm", pid);
	f = fopen(path, "re");
	if (f) {
		if (fgets(comm, (int)len, f))
			comm[strcspn(comm, "\n")] = '\0';
		fclose(f);
	}
	return comm;
}

/* Whether process 'pid' sleeps waiting for the answer to a FUSE request
 * (its wchan, which the kernel shows to the process's owner and root):
 * an open or a read of a batch the daemon is still gathering. */
static bool waits_on_fuse(const char *pid)
{
	char path[300], wchan[128] = "";
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%s/wchan", pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	if (!fgets(wchan, sizeof(wchan), f))
		wchan[0] = '\0';
	fclose(f);
	return strstr(wchan, "request_wait_answer") != NULL;
}

/* Print "PID (comm): PATH" for a link under mnt; true if it was. A
 * process waiting on the daemon counts in *waiting, once. */
static bool report_link(const char *pid, const char *link, const char *mnt,
			int *waiting)
{
	char target[PATH_MAX], comm[64];
	ssize_t n = readlink(link, target, sizeof(target) - 1);
	bool waits;

	if (n <= 0)
		return false;
	target[n] = '\0';
	if (!under(target, mnt))
		return false;
	waits = waits_on_fuse(pid);
	fprintf(stderr, "  pid %s (%s) holds %s%s\n", pid,
		comm_of(pid, comm, sizeof(comm)), target,
		waits ? ", waiting for the daemon's answer" : "");
	*waiting += waits;
	return true;
}

/* Print "pid PID (comm) maps N files under MNT" when process 'pid' maps
 * files under mnt (numpy.memmap, mmap); true if it does. */
static bool report_maps(const char *pid, const char *mnt)
{
	char path[300], line[PATH_MAX + 256], comm[64];
	unsigned long n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%s/maps", pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f)) {
		char *file = strchr(line, '/');

		if (file) {
			file[strcspn(file, "\n")] = '\0';
			n += under(file, mnt);
		}
	}
	fclose(f);
	if (!n)
		return false;
	fprintf(stderr, "  pid %s (%s) maps %lu file region(s) under %s\n", pid,
		comm_of(pid, comm, sizeof(comm)), n, mnt);
	return true;
}

/* The path process 'pid' is opening, if it sleeps in open or openat
 * (/proc/PID/syscall: its arguments; /proc/PID/mem: the path; both need
 * the right to trace it, which its owner and root have), made absolute
 * with its working directory or its dirfd. 0, or -1 (not opening, or
 * not ours to see). */
static int opening(const char *pid, char *out, size_t len)
{
	char path[300], line[512], name[PATH_MAX], dir[PATH_MAX];
	unsigned long long a[6] = {0};
	long nr = -1;
	FILE *f;
	int fd;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%s/syscall", pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	if (!fgets(line, sizeof(line), f) ||
	    sscanf(line, "%ld %llx %llx %llx", &nr, &a[0], &a[1], &a[2]) < 3)
		nr = -1;
	fclose(f);
#ifdef SYS_open
	if (nr == SYS_open) {
		a[1] = a[0];
		a[0] = (unsigned long long)(unsigned)AT_FDCWD;
		nr = SYS_openat;
	}
#endif
	if (nr != SYS_openat)
		return -1;
	snprintf(path, sizeof(path), "/proc/%s/mem", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = pread(fd, name, sizeof(name) - 1, (off_t)a[1]);
	close(fd);
	if (n <= 0)
		return -1;
	name[n] = '\0';
	if (name[0] == '/') {
		snprintf(out, len, "%s", name);
		return 0;
	}
	if ((int)a[0] == AT_FDCWD)
		snprintf(path, sizeof(path), "/proc/%s/cwd", pid);
	else
		snprintf(path, sizeof(path), "/proc/%s/fd/%d", pid, (int)a[0]);
	n = readlink(path, dir, sizeof(dir) - 1);
	if (n <= 0)
		return -1;
	dir[n] = '\0';
	/* a path too long to hold is not one under the mount we can show */
	return snprintf(out, len, "%s/%s", dir, name) < (int)len ? 0 : -1;
}

/* Print "pid PID (comm) is opening PATH" when process 'pid' waits for
 * the daemon's answer to an open under mnt (no descriptor yet: the
 * descriptors' scan cannot see it); true if it does. */
static bool report_opening(const char *pid, const char *mnt, int *waiting)
{
	char target[2 * PATH_MAX], comm[64];

	if (!waits_on_fuse(pid) || opening(pid, target, sizeof(target)) < 0 ||
	    !under(target, mnt))
		return false;
	fprintf(stderr,
		"  pid %s (%s) is opening %s, waiting for the daemon's "
		"answer\n",
		pid, comm_of(pid, comm, sizeof(comm)), target);
	(*waiting)++;
	return true;
}

/* Scan /proc for processes using mnt. Returns how many were found;
 * *waiting: how many of their files are waiting for the daemon. */
static int report_holders(const char *mnt, int *waiting)
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
		found += report_link(d->d_name, path, mnt, waiting);
		found += report_maps(d->d_name, mnt);
		found += report_opening(d->d_name, mnt, waiting);
		snprintf(path, sizeof(path), "/proc/%s/fd", d->d_name);
		fds = opendir(path);
		if (!fds)
			continue;
		while ((fd = readdir(fds))) {
			char link[PATH_MAX + 300];

			if (fd->d_name[0] == '.')
				continue;
			snprintf(link, sizeof(link), "%s/%s", path, fd->d_name);
			found += report_link(d->d_name, link, mnt, waiting);
		}
		closedir(fds);
	}
	closedir(proc);
	return found;
}

/* Run fusermount3 -u [-z] mnt; its exit status, or -1. Its stderr goes
 * into msg. */
static int fusermount_u(const char *mnt, bool lazy, char *msg, size_t len)
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
		execlp("fusermount3", "fusermount3", lazy ? "-uz" : "-u", mnt,
		       (char *)NULL);
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

/* Whether 'mnt' (resolved) is a batchfs mount: 1 yes (*user_id: who
 * mounted it, or -1), 0 no (printed), -1 mountinfo unreadable (printed). */
static int is_batchfs_mount(const char *arg, const char *mnt, long *user_id)
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
	*user_id = rc == 1 ? m->user_id : -1;
	free(m);
	return rc < 0 ? -1 : rc;
}

/* "name (uid N)" of user 'uid' into buf. */
static const char *user_name(long uid, char *buf, size_t len)
{
	struct passwd *pw = getpwuid((uid_t)uid);

	if (pw)
		snprintf(buf, len, "%s (uid %ld)", pw->pw_name, uid);
	else
		snprintf(buf, len, "uid %ld", uid);
	return buf;
}

/* fusermount3 lets only root and the user who mounted (user_id) unmount:
 * for anyone else, one try (mountinfo could be wrong), then say who may
 * instead of fusermount3's "entry ... not found in /etc/mtab". Returns
 * the exit status, or -1 when this user may unmount (go on). */
static int not_the_mounter(const char *arg, const char *mnt, long user_id,
			   bool lazy)
{
	char msg[1024], me[96], them[96];

	if (getuid() == 0 || user_id < 0 || (uid_t)user_id == getuid())
		return -1;
	if (fusermount_u(mnt, lazy, msg, sizeof(msg)) == 0)
		return 0;
	user_name((long)getuid(), me, sizeof(me));
	user_name(user_id, them, sizeof(them));
	if (user_id == 0)
		fprintf(stderr,
			"batchfs umount: %s: root mounted it, so only root "
			"may unmount it (also when --owner made its files "
			"another user's); you are %s: ask root (sudo batchfs "
			"umount %s)\n",
			arg, me, mnt);
	else
		fprintf(stderr,
			"batchfs umount: %s: %s mounted it, so only that user "
			"and root may unmount it; you are %s\n",
			arg, them, me);
	return 1;
}

/* The mount is busy with the processes listed; 'waiting' of them wait for
 * the daemon (a batch being gathered: its rows fetched from a remote
 * server that may be slow or not answering, for up to --timeout). What
 * to do: a waiting reader ends at a signal (the daemon answers its
 * interrupted request with EINTR), then the mount can go. */
static void busy(const char *mnt, int waiting)
{
	if (waiting)
		fprintf(stderr,
			"batchfs umount: %s is busy: the processes above use "
			"it, and %d of them %s waiting for a batch "
			"(an open or read waiting on its worker, or on the "
			"remote server for a remote source, up to --timeout). "
			"Interrupt them (Ctrl-C, kill PID: the waiting call "
			"ends with EINTR) or close them, then unmount; or "
			"detach it now with batchfs umount --lazy %s (the "
			"daemon exits once they are gone)\n",
			mnt, waiting, waiting == 1 ? "is" : "are", mnt);
	else
		fprintf(stderr,
			"batchfs umount: %s is busy (processes above); close "
			"them, or detach it now with batchfs umount --lazy "
			"%s\n",
			mnt, mnt);
}

/* Contract: see tools/cmd.h. 0 unmounted, 1 failed (not a batchfs
 * mount, or busy: holders listed), 2 bad usage. */
int bfs_cmd_umount(int argc, char **argv)
{
	char mnt[PATH_MAX], msg[1024] = "";
	struct bfs_mountinfo now;
	const char *arg;
	bool lazy = false;
	int waiting;
	long user_id;
	int rc;

	if (argc == 2 &&
	    (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		usage(stdout);
		return 0;
	}
	if (argc == 3 &&
	    (!strcmp(argv[1], "-z") || !strcmp(argv[1], "--lazy"))) {
		lazy = true;
		argv++;
		argc--;
	}
	if (argc != 2 || argv[1][0] == '-')
		return bfs_cli_bad_usage(
		    "umount", usage, "expected [--lazy] MOUNTPOINT",
		    argc > 1 && argv[1][0] == '-' ? argv[1] : NULL);
	arg = argv[1];
	rc = bfs_mountinfo_resolve(arg, mnt, sizeof(mnt));
	if (rc < 0) {
		fprintf(stderr, "batchfs umount: %s: %s\n", arg,
			rc == -ENOENT ? "does not exist" : strerror(-rc));
		return 1;
	}
	if (is_batchfs_mount(arg, mnt, &user_id) != 1)
		return 1;
	if (chdir("/") < 0) { /* run from inside, we would hold it */
		perror("batchfs umount: chdir /");
		return 1;
	}
	rc = not_the_mounter(arg, mnt, user_id, lazy);
	if (rc >= 0)
		return rc;
	if (lazy) {
		rc = fusermount_u(mnt, true, msg, sizeof(msg));
		if (rc)
			fprintf(stderr, "batchfs umount: %s: %s\n", arg,
				msg[0] ? msg : "fusermount3 -uz failed");
		return rc ? 1 : 0;
	}
	/* A file closed an instant ago can still hold the mount while the
	 * kernel finishes releasing it: retry a few times (~0.5 s) as long as
	 * no process holds anything under the mount. */
	for (int i = 0; i < 10; i++) {
		if (fusermount_u(mnt, false, msg, sizeof(msg)) == 0 ||
		    bfs_mountinfo_find(mnt, &now) == 0) /* gone meanwhile */
			return 0;
		waiting = 0;
		if (report_holders(mnt, &waiting) > 0) {
			busy(mnt, waiting);
			return 1;
		}
		usleep(50000);
	}
	if (strstr(msg, "busy")) {
		/* Busy with nothing open under it: a request is in flight
		 * (an open or a read waiting for its batch), which holds the
		 * mount until it is answered. */
		fprintf(stderr,
			"batchfs umount: %s is busy: no process has a file or "
			"directory open under it, so a request is in flight "
			"(an open or read waiting for a batch, perhaps on a "
			"remote server); interrupt the process that waits "
			"(its call ends with EINTR) or try again when it is "
			"answered, or detach it now with batchfs umount "
			"--lazy %s\n",
			mnt, mnt);
		return 1;
	}
	fprintf(stderr, "batchfs umount: %s: %s\n", arg,
		msg[0] ? msg : "fusermount3 failed");
	return 1;
}
