/* faultfs: a FUSE filesystem for tests that serves one real file and
 * injects faults into reads of it, on command. Not shipped.
 *
 *   faultfs BACKING MOUNTPOINT
 *
 * serves MOUNTPOINT/archive.pt (the bytes of BACKING, read with pread;
 * size and times from fstat), MOUNTPOINT/ctl (write commands to it) and
 * MOUNTPOINT/stats (counters). Prints "ready" on stdout once mounted and
 * serves in the foreground until unmounted or sent SIGTERM/SIGINT.
 *
 * Commands, one per write to ctl (a failed one answers the write with
 * EINVAL):
 *   eio OFF LEN          READs of archive.pt that overlap [OFF, OFF+LEN)
 *                        fail with EIO
 *   short OFF LEN        ... return only the bytes before OFF (a short
 *                        read: FUSE's EOF)
 *   stall OFF LEN SECS   ... are answered normally after SECS seconds
 *   clear                no more faults
 *   truncate SIZE        truncate (or grow, with zeros) BACKING to SIZE
 *   drop                 drop the kernel's cached pages of archive.pt
 * Each command also drops the kernel's cached pages (and attributes) of
 * archive.pt, so the next access of a faulty range reaches faultfs even
 * where a reader has the file mapped. Rules apply in the order given; the
 * first one a READ overlaps decides. archive.pt's attributes are never
 * cached by the kernel (timeout 0): a size change is seen at once. The
 * kernel reads no more than asked (max_readahead 0): a fault of a mapping
 * reads its page alone, so a rule hits exactly the pages it covers.
 *
 * stats: "reads N", "eio N", "short N", "stalls N" (READs answered so,
 * since mount). */
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define INO_ARCHIVE 2
#define INO_CTL	    3
#define INO_STATS   4
#define MAX_RULES   64
#define MAX_READ    (1u << 20)

enum kind { R_EIO, R_SHORT, R_STALL };

struct rule {
	enum kind kind;
	uint64_t off, len;
	unsigned secs;
};

static struct {
	int fd; /* BACKING */
	struct fuse_session *se;
	pthread_mutex_t lock;
	struct rule rules[MAX_RULES]; /* lock */
	unsigned nrules;	      /* lock */
	_Atomic uint64_t reads, eio, shorts, stalls;
} ff = {.fd = -1, .lock = PTHREAD_MUTEX_INITIALIZER};

static const struct {
	fuse_ino_t ino;
	const char *name;
	mode_t mode;
} files[] = {
    {INO_ARCHIVE, "archive.pt", S_IFREG | 0444},
    {INO_CTL, "ctl", S_IFREG | 0200},
    {INO_STATS, "stats", S_IFREG | 0444},
};
#define NFILES (sizeof(files) / sizeof(files[0]))

static int stat_of(fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_nlink = 1;
	if (ino == FUSE_ROOT_ID) {
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
		return 0;
	}
	for (size_t i = 0; i < NFILES; i++) {
		if (files[i].ino != ino)
			continue;
		st->st_mode = files[i].mode;
		if (ino == INO_ARCHIVE) {
			struct stat b;

			if (fstat(ff.fd, &b) < 0)
				return errno;
			st->st_size = b.st_size;
			st->st_mtim = b.st_mtim;
			st->st_ctim = b.st_ctim;
		}
		if (ino == INO_STATS)
			st->st_size = 4096;
		return 0;
	}
	return ENOENT;
}

static void ff_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;

	memset(&e, 0, sizeof(e));
	for (size_t i = 0; parent == FUSE_ROOT_ID && i < NFILES; i++) {
		if (strcmp(files[i].name, name))
			continue;
		e.ino = files[i].ino;
		stat_of(e.ino, &e.attr);
		e.entry_timeout = 3600;
		fuse_reply_entry(req, &e);
		return;
	}
	fuse_reply_err(req, ENOENT);
}

static void ff_getattr(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	struct stat st;
	int err = stat_of(ino, &st);

	if (err)
		fuse_reply_err(req, err);
	else
		fuse_reply_attr(req, &st, 0);
}

static void ff_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	char buf[1024];
	size_t pos = 0;

	for (size_t i = (size_t)off; i < NFILES; i++) {
		struct stat st;
		size_t n;

		stat_of(files[i].ino, &st);
		n = fuse_add_direntry(req, buf + pos, sizeof(buf) - pos,
				      files[i].name, &st, (off_t)i + 1);
		if (pos + n > size || pos + n > sizeof(buf))
			break;
		pos += n;
	}
	fuse_reply_buf(req, buf, pos);
}

static void ff_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino == INO_ARCHIVE && (fi->flags & O_ACCMODE) != O_RDONLY) {
		fuse_reply_err(req, EACCES);
		return;
	}
	if (ino == INO_STATS || ino == INO_CTL)
		fi->direct_io = 1;
	else
		fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

/* The first rule [off, off+len) overlaps, copied into *r. [lock] */
static bool match(uint64_t off, uint64_t len, struct rule *r)
{
	for (unsigned i = 0; i < ff.nrules; i++) {
		struct rule *x = &ff.rules[i];

		if (off < x->off + x->len && x->off < off + len) {
			*r = *x;
			return true;
		}
	}
	return false;
}

static void read_archive(fuse_req_t req, size_t size, off_t off)
{
	static char zero;
	struct rule r;
	bool hit;
	char *buf;
	ssize_t n;

	atomic_fetch_add(&ff.reads, 1);
	pthread_mutex_lock(&ff.lock);
	hit = match((uint64_t)off, size, &r);
	pthread_mutex_unlock(&ff.lock);
	if (hit && r.kind == R_EIO) {
		atomic_fetch_add(&ff.eio, 1);
		fuse_reply_err(req, EIO);
		return;
	}
	if (hit && r.kind == R_STALL) {
		atomic_fetch_add(&ff.stalls, 1);
		sleep(r.secs);
	}
	if (hit && r.kind == R_SHORT) {
		atomic_fetch_add(&ff.shorts, 1);
		size =
		    r.off > (uint64_t)off ? (size_t)(r.off - (uint64_t)off) : 0;
	}
	buf = size ? malloc(size) : &zero;
	n = buf ? pread(ff.fd, buf, size, off) : -1;
	if (n < 0)
		fuse_reply_err(req, buf ? errno : ENOMEM);
	else
		fuse_reply_buf(req, buf, (size_t)n);
	if (size)
		free(buf);
}

static void ff_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	char text[256];
	int n;

	if (ino == INO_ARCHIVE) {
		read_archive(req, size, off);
		return;
	}
	n = snprintf(text, sizeof(text),
		     "reads %" PRIu64 "\neio %" PRIu64 "\nshort %" PRIu64
		     "\nstalls %" PRIu64 "\n",
		     atomic_load(&ff.reads), atomic_load(&ff.eio),
		     atomic_load(&ff.shorts), atomic_load(&ff.stalls));
	if (off >= n)
		fuse_reply_buf(req, NULL, 0);
	else
		fuse_reply_buf(req, text + off,
			       (size_t)(n - off) < size ? (size_t)(n - off)
							: size);
}

/* Apply one command line. 0 or an errno. */
static int command(const char *line)
{
	struct rule r = {0};
	uint64_t size;
	int rc = 0;

	if (sscanf(line, "eio %" SCNu64 " %" SCNu64, &r.off, &r.len) == 2) {
		r.kind = R_EIO;
	} else if (sscanf(line, "short %" SCNu64 " %" SCNu64, &r.off, &r.len) ==
		   2) {
		r.kind = R_SHORT;
	} else if (sscanf(line, "stall %" SCNu64 " %" SCNu64 " %u", &r.off,
			  &r.len, &r.secs) == 3) {
		r.kind = R_STALL;
	} else if (!strncmp(line, "clear", 5)) {
		pthread_mutex_lock(&ff.lock);
		ff.nrules = 0;
		pthread_mutex_unlock(&ff.lock);
		return 0;
	} else if (sscanf(line, "truncate %" SCNu64, &size) == 1) {
		return ftruncate(ff.fd, (off_t)size) < 0 ? errno : 0;
	} else if (!strncmp(line, "drop", 4)) {
		return 0;
	} else {
		return EINVAL;
	}
	pthread_mutex_lock(&ff.lock);
	if (ff.nrules < MAX_RULES)
		ff.rules[ff.nrules++] = r;
	else
		rc = ENOSPC;
	pthread_mutex_unlock(&ff.lock);
	return rc;
}

static void ff_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
		     size_t size, off_t off, struct fuse_file_info *fi)
{
	char line[256];
	int err;

	if (ino != INO_CTL || size >= sizeof(line)) {
		fuse_reply_err(req, ino != INO_CTL ? EACCES : EINVAL);
		return;
	}
	memcpy(line, buf, size);
	line[size] = 0;
	err = command(line);
	if (err) {
		fuse_reply_err(req, err);
		return;
	}
	/* Before the reply, so the command is in force when the writer's
	 * write() returns: the kernel drops archive.pt's pages (unmapping
	 * them from readers) and attributes; a READ in flight (also a
	 * stalled one, which this then waits for) is answered by another
	 * thread meanwhile. */
	fuse_lowlevel_notify_inval_inode(ff.se, INO_ARCHIVE, 0, 0);
	fuse_reply_write(req, size);
}

static void ff_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
		       int to_set, struct fuse_file_info *fi)
{
	struct stat st;
	int err;

	/* Only the O_TRUNC of opening ctl for writing. */
	if (ino != INO_CTL) {
		fuse_reply_err(req, EACCES);
		return;
	}
	err = stat_of(ino, &st);
	if (err)
		fuse_reply_err(req, err);
	else
		fuse_reply_attr(req, &st, 0);
}

static void ff_init(void *userdata, struct fuse_conn_info *conn)
{
	conn->max_readahead = 0;
}

static const struct fuse_lowlevel_ops ops = {
    .init = ff_init,
    .lookup = ff_lookup,
    .getattr = ff_getattr,
    .setattr = ff_setattr,
    .readdir = ff_readdir,
    .open = ff_open,
    .read = ff_read,
    .write = ff_write,
};

int main(int argc, char **argv)
{
	char *fargv[] = {argv[0], "-o", "fsname=faultfs,default_permissions",
			 NULL};
	struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
	struct fuse_loop_config *cfg;
	int rc = 1;

	if (argc != 3) {
		fprintf(stderr, "usage: faultfs BACKING MOUNTPOINT\n");
		return 2;
	}
	ff.fd = open(argv[1], O_RDWR | O_CLOEXEC);
	if (ff.fd < 0) {
		perror(argv[1]);
		return 1;
	}
	ff.se = fuse_session_new(&args, &ops, sizeof(ops), NULL);
	fuse_opt_free_args(&args);
	if (!ff.se || fuse_set_signal_handlers(ff.se) ||
	    fuse_session_mount(ff.se, argv[2]))
		return 1;
	printf("ready\n");
	fflush(stdout);
	cfg = fuse_loop_cfg_create();
	fuse_loop_cfg_set_max_threads(cfg, 64);
	rc = fuse_session_loop_mt(ff.se, cfg) < 0;
	fuse_loop_cfg_destroy(cfg);
	fuse_session_unmount(ff.se);
	fuse_remove_signal_handlers(ff.se);
	fuse_session_destroy(ff.se);
	return rc;
}
