/* mount/session: a mount's lifecycle (mount.h), in libfuse's example order:
 *
 *   fuse args -> session_new -> signal handlers -> mount -> custom io
 *   (mount/passthrough.c) -> daemonize (fork; the parent waits for ONE
 *   status message on a pipe) -> answer the kernel's INIT here, before
 *   the loop -> decide the serving mode -> p->start builds what is served
 *   (the pool's threads start after the fork: threads do not survive it)
 *   -> p->ready -> report ready -> multithreaded loop -> p->stop (remote
 *   fetches in flight cancelled: a stalled server must not hold the exit
 *   for --timeout) -> drain (fs/serve's kernel thread stopped, the
 *   kernel's requests answered here until its store is out, at most
 *   DRAIN_S) -> destroy what is served (its workers push into the
 *   session) -> unmount -> remove handlers -> destroy.
 *
 * The mode: passthrough needs the kernel to offer it in INIT and the
 * daemon to be allowed to register backing files, which is only known
 * after INIT; so INIT is received and answered before the loop starts and
 * the mount is reported ready. With --serve auto the mount falls back to
 * push and says why once (log, stats, dataset.json); a forced passthrough
 * that cannot work fails the mount with that reason, nothing mounted.
 *
 * The status message: "1" = ready (the parent exits 0), "E<reason>" = the
 * child failed and unmounted (the parent prints the reason, exits 1); EOF
 * = the child died (exit 1).
 *
 * SIGTERM/SIGINT/SIGHUP end the loop (fuse_set_signal_handlers) and the
 * daemon unmounts cleanly. auto_unmount (a fusermount3 helper that
 * unmounts when our /dev/fuse descriptor dies) covers kill -9; libfuse
 * 3.14 cannot combine it with allow_other, so asking for allow_other drops
 * it with a warning. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fs/log.h"
#include "mount/internal.h"

#define MOD "mount"

/* ---- what fs/serve asks of the kernel ---------------------------------- */

/* The inode of batch id's file. */
static uint64_t batch_ino(const struct bfs_mount *m, struct bfs_batch_id id)
{
	return bfs_tree_ino(
	    m->tree, &(struct bfs_node){.kind = BFS_NODE_BATCH, .id = id});
}

static int kernel_store(void *arg, struct bfs_batch_id id, uint64_t off,
			const void *buf, uint64_t len)
{
	struct bfs_mount *m = arg;
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT((size_t)len);

	bv.buf[0].mem = (void *)buf;
	return fuse_lowlevel_notify_store(m->se, batch_ino(m, id), (off_t)off,
					  &bv, 0);
}

static int kernel_inval(void *arg, struct bfs_batch_id id)
{
	struct bfs_mount *m = arg;

	return fuse_lowlevel_notify_inval_inode(m->se, batch_ino(m, id), 0, 0);
}

/* ---- the steps ------------------------------------------------------------
 */

/* "fsname=NAME" with NAME's commas and backslashes escaped as FUSE's
 * option parser wants them ("\\,", "\\\\"), malloc'd; NULL out of
 * memory. */
static char *fsname_opt(const char *name)
{
	size_t n = strlen(name);
	char *o = malloc(sizeof("fsname=") + 2 * n), *w;

	if (!o)
		return NULL;
	w = o + sprintf(o, "fsname=");
	for (; *name; name++) {
		if (*name == ',' || *name == '\\')
			*w++ = '\\';
		*w++ = *name;
	}
	*w = '\0';
	return o;
}

/* fuse args: read-only, default_permissions, the source as the fsname
 * mount tables show, auto_unmount unless the user asked allow_other
 * (libfuse 3.14 refuses both together). */
static int fuse_args_for(const struct bfs_mount_params *p,
			 struct fuse_args *args)
{
	bool allow_other = strstr(p->fuse_opts, "allow_other") != NULL;
	char *fsname = fsname_opt(p->fsname ? p->fsname : "batchfs"), *o = NULL;
	int rc = -ENOMEM;

	if (allow_other)
		fprintf(stderr, "batchfs mount: warning: -o allow_other: "
				"auto_unmount disabled (libfuse 3.14 cannot "
				"combine them); use batchfs umount\n");
	if (fsname &&
	    asprintf(&o, "ro,default_permissions,%s,subtype=batchfs%s%s%s",
		     fsname, allow_other ? "" : ",auto_unmount",
		     p->fuse_opts[0] ? "," : "", p->fuse_opts) < 0)
		o = NULL;
	if (o && !fuse_opt_add_arg(args, "batchfs") &&
	    !fuse_opt_add_arg(args, "-o") && !fuse_opt_add_arg(args, o))
		rc = 0;
	free(fsname);
	free(o);
	return rc;
}

/* Fork; the parent waits for the status message and exits with 0 or 1.
 * Returns the write end of the pipe in the child. */
static int daemonize(void)
{
	char msg[1024];
	int fds[2];
	ssize_t n;
	pid_t pid;

	if (pipe(fds) < 0)
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid > 0) {
		close(fds[1]);
		n = read(fds[0], msg, sizeof(msg) - 1);
		if (n == 1 && msg[0] == '1')
			_exit(0);
		if (n > 1 && msg[0] == 'E') {
			msg[n] = 0;
			fprintf(stderr, "batchfs mount: %s\n", msg + 1);
		}
		_exit(1); /* EOF: the child failed and said so, or died */
	}
	close(fds[0]);
	setsid();
	return fds[1];
}

/* Report a failure to mount or start: to the waiting parent, or to
 * stderr; and to the log when it is a file (p->log_failure). */
static void report(const struct bfs_mount_params *p, int status_fd,
		   const char *msg)
{
	char buf[1100];
	int n = snprintf(buf, sizeof(buf), "E%s", msg);

	if (p->log_failure)
		bfs_log(BFS_LOG_ERR, MOD, "mount failed: %s", msg);
	if (status_fd < 0 || n <= 0 ||
	    write(status_fd, buf, (size_t)n) != (ssize_t)n)
		fprintf(stderr, "batchfs mount: %s\n", msg);
}

/* "crw-rw-rw- root:root" for 'st'. */
static void describe_node(const struct stat *st, char *buf, size_t len)
{
	static const char bits[] = "rwxrwxrwx";
	struct passwd *pw = getpwuid(st->st_uid);
	struct group *gr = getgrgid(st->st_gid);
	char mode[11], user[32], group[32];

	mode[0] = S_ISCHR(st->st_mode) ? 'c' : S_ISREG(st->st_mode) ? '-' : '?';
	for (int i = 0; i < 9; i++)
		mode[i + 1] = st->st_mode & (0400u >> i) ? bits[i] : '-';
	mode[10] = 0;
	snprintf(user, sizeof(user), "%u", (unsigned)st->st_uid);
	snprintf(group, sizeof(group), "%u", (unsigned)st->st_gid);
	snprintf(buf, len, "%s %.31s:%.31s", mode, pw ? pw->pw_name : user,
		 gr ? gr->gr_name : group);
}

int bfs_mount_check_device(char *msg, size_t len)
{
	static const char dev[] = "/dev/fuse",
			  container[] =
			      "in a container, start it with "
			      "--device /dev/fuse --cap-add SYS_ADMIN";
	struct passwd *pw;
	char node[96];
	struct stat st;
	int fd = open(dev, O_RDWR | O_CLOEXEC), e = errno;

	if (fd >= 0) {
		close(fd);
		return 0;
	}
	if (e == ENOENT)
		snprintf(msg, len,
			 "%s does not exist: load the kernel's FUSE module "
			 "(modprobe fuse); %s",
			 dev, container);
	else if (e == EACCES && getuid() != 0 && stat(dev, &st) == 0) {
		describe_node(&st, node, sizeof(node));
		pw = getpwuid(getuid()); /* after describe_node's getpwuid */
		snprintf(msg, len,
			 "cannot open %s: %s: user %s may not use FUSE here "
			 "(%s is %s). Mounting needs %s readable and writable "
			 "by the user who mounts: ask an administrator for "
			 "`chmod 0666 %s` (the mode the fuse3 package gives "
			 "it), or mount as root",
			 dev, strerror(e), pw ? pw->pw_name : "?", dev, node,
			 dev, dev);
	} else if (e == EACCES || e == EPERM)
		snprintf(msg, len, "cannot open %s: %s: %s", dev, strerror(e),
			 container);
	else
		snprintf(msg, len, "cannot open %s: %s", dev, strerror(e));
	return -e;
}

/* Receive and answer the kernel's INIT (the first request after mount). */
static int answer_init(struct fuse_session *se)
{
	struct fuse_buf fbuf = {.mem = NULL};
	int rc = fuse_session_receive_buf(se, &fbuf);

	if (rc > 0)
		fuse_session_process_buf(se, &fbuf);
	free(fbuf.mem);
	return rc > 0 ? 0 : (rc < 0 ? rc : -EIO);
}

/* The mode to serve in, and why ('why' filled); -ENOTSUP with the reason
 * in 'why' when a forced passthrough cannot work. */
static int decide(struct bfs_mount *m, enum bfs_serve_mode want,
		  enum bfs_serve_mode *mode, char *why, size_t len)
{
	char reason[400];

	if (want != BFS_SERVE_AUTO && want != BFS_SERVE_PASSTHROUGH) {
		*mode = want;
		snprintf(why, len, "--serve %s", bfs_serve_mode_name(want));
		return 0;
	}
	if (bfs_pt_check(m, reason, sizeof(reason)) == 0) {
		*mode = BFS_SERVE_PASSTHROUGH;
		snprintf(why, len, "%s%s",
			 want == BFS_SERVE_AUTO ? "" : "--serve passthrough: ",
			 reason);
		return 0;
	}
	if (want == BFS_SERVE_PASSTHROUGH) {
		snprintf(why, len, "--serve passthrough cannot work here: %s",
			 reason);
		return -ENOTSUP;
	}
	*mode = BFS_SERVE_PUSH;
	snprintf(why, len, "passthrough is not possible: %s", reason);
	return 0;
}

/* INIT, mode, start, ready: everything between the mount and the loop.
 * On failure the reason is reported and the mount is undone by the
 * caller. */
static int prepare(const struct bfs_mount_params *p, struct bfs_mount *m,
		   int status_fd)
{
	const struct bfs_serve_kernel kernel = {
	    .arg = m,
	    .store = kernel_store,
	    .inval = kernel_inval,
	    .backing_open = bfs_pt_backing_open,
	    .backing_close = bfs_pt_backing_close,
	};
	struct bfs_mount_served served = {0};
	enum bfs_serve_mode mode = BFS_SERVE_PUSH;
	char why[600], msg[1000];
	int rc = answer_init(m->se);

	if (rc < 0) {
		snprintf(msg, sizeof(msg), "the kernel's INIT failed: %s",
			 strerror(-rc));
		report(p, status_fd, msg);
		return rc;
	}
	rc = decide(m, p->serve, &mode, why, sizeof(why));
	if (rc < 0) {
		report(p, status_fd, why);
		return rc;
	}
	msg[0] = 0;
	rc = p->start(p->arg, mode, why, &kernel, &served, msg, sizeof(msg));
	if (rc < 0) {
		report(p, status_fd, msg[0] ? msg : strerror(-rc));
		return rc;
	}
	m->serve = served.serve;
	m->tree = served.tree;
	if (p->ready)
		p->ready(p->arg);
	bfs_log(BFS_LOG_INFO, MOD, "serving %s in %s mode (%s)", p->mountpoint,
		bfs_serve_mode_name(mode), why);
	if (status_fd >= 0 && write(status_fd, "1", 1) != 1)
		return -EIO;
	return 0;
}

/* The loop, then the served objects go (serve first: its workers push
 * into the session). */
static int serve_loop(const struct bfs_mount_params *p, struct bfs_mount *m)
{
	struct fuse_loop_config *cfg = fuse_loop_cfg_create();
	int rc;

	if (!cfg)
		return 1;
	fuse_loop_cfg_set_max_threads(cfg, p->fuse_threads);
	fuse_loop_cfg_set_clone_fd(cfg, 0);
	rc = fuse_session_loop_mt(m->se, cfg) < 0 ? 1 : 0;
	fuse_loop_cfg_destroy(cfg);
	return rc;
}

/* After the loop: fs/serve's kernel thread may be inside a store that
 * waits on a READ; no loop thread is left to answer it. Stop it from
 * starting more, and answer requests here until it is out (a dead
 * connection fails it at once). Bounded: DRAIN_S, then the destroy that
 * follows may wait, and the log says why. */
#define DRAIN_S 60
static void drain(struct bfs_mount *m)
{
	struct fuse_buf buf = {0};
	struct pollfd pfd = {.fd = fuse_session_fd(m->se), .events = POLLIN};
	struct timespec t0, now, pause = {0, 10 * 1000 * 1000};
	bool dead = false;

	if (!m->serve)
		return;
	bfs_serve_stop_kernel(m->serve);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	now = t0;
	while (bfs_serve_kernel_busy(m->serve) &&
	       now.tv_sec - t0.tv_sec < DRAIN_S) {
		/* a dead connection fails the kernel thread's call: wait */
		if (!dead && poll(&pfd, 1, 100) == 1 &&
		    (pfd.revents & POLLIN)) {
			int n = fuse_session_receive_buf(m->se, &buf);

			if (n > 0)
				fuse_session_process_buf(m->se, &buf);
			dead = n == -ENODEV;
		} else {
			dead = dead || pfd.revents & (POLLERR | POLLHUP);
			nanosleep(&pause, NULL);
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
	}
	if (bfs_serve_kernel_busy(m->serve))
		bfs_log(BFS_LOG_WARN, MOD,
			"a store into the page cache is still waiting after "
			"%d s: the daemon may not exit until its READ is "
			"answered",
			DRAIN_S);
	free(buf.mem);
}

int bfs_mount_run(const struct bfs_mount_params *p)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct bfs_mount m;
	char msg[PATH_MAX + 64];
	int status_fd = -1, rc = 1;

	memset(&m, 0, sizeof(m));
	m.pt.want =
	    p->serve == BFS_SERVE_AUTO || p->serve == BFS_SERVE_PASSTHROUGH;
	if (fuse_args_for(p, &args) < 0)
		goto out_args;
	m.se =
	    fuse_session_new(&args, &bfs_mount_ops, sizeof(bfs_mount_ops), &m);
	if (!m.se) {
		snprintf(msg, sizeof(msg), "bad FUSE options '%s'",
			 p->fuse_opts);
		report(p, -1, msg);
		rc = 2;
		goto out_args;
	}
	if (fuse_set_signal_handlers(m.se) != 0)
		goto out_destroy;
	if (fuse_session_mount(m.se, p->mountpoint) != 0) {
		snprintf(msg, sizeof(msg), "cannot mount on %s", p->mountpoint);
		report(p, -1, msg);
		goto out_handlers;
	}
	if (bfs_pt_install(&m) < 0) {
		report(p, -1, "cannot hook the FUSE device");
		goto out_unmount;
	}
	if (!p->foreground) {
		status_fd = daemonize();
		if (status_fd < 0) {
			snprintf(msg, sizeof(msg),
				 "cannot start the daemon: %s",
				 strerror(-status_fd));
			report(p, -1, msg);
			goto out_unmount;
		}
	}
	if (prepare(p, &m, status_fd) == 0) {
		rc = serve_loop(p, &m);
		bfs_log(BFS_LOG_INFO, MOD, "unmounting %s", p->mountpoint);
		if (p->stop)
			p->stop(p->arg);
		drain(&m);
	}
	bfs_serve_destroy(m.serve);
	bfs_tree_destroy(m.tree);
out_unmount:
	fuse_session_unmount(m.se);
out_handlers:
	fuse_remove_signal_handlers(m.se);
out_destroy:
	fuse_session_destroy(m.se);
out_args:
	fuse_opt_free_args(&args);
	if (status_fd >= 0)
		close(status_fd);
	return rc;
}
