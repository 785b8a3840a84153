/* mount/ops: the FUSE low-level operations. Each handler decodes its
 * request, makes one call into fs/tree (names, attributes, listings,
 * open) or fs/serve (read, release), and sends exactly one reply at its end;
 * how batch bytes reach a reader is fs/serve's business (mount/README.md).
 *
 * Names never change during a mount, nor do attributes but those of a
 * file whose content changes (stats: bfs_tree_changes), which are never
 * cached: entries and other attributes get a day of validity, unknown
 * names are cached as negative entries. Every call that writes answers
 * EROFS. An open or a READ may wait (a batch gathered, rows fetched from
 * a remote server): the kernel's INTERRUPT of one wakes it (below). An
 * open's reply goes through mount/passthrough.c (bfs_pt_reply_open),
 * which hands the kernel a backing file where the way has one. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "mount/internal.h"

#define LONG_TIMEOUT 86400.0

static struct bfs_mount *mnt_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static struct bfs_file *file_of(const struct fuse_file_info *fi)
{
	return (struct bfs_file *)(uintptr_t)fi->fh;
}

static double attr_timeout(const struct stat *st)
{
	/* stats' size changes with its last error: never cached */
	return bfs_tree_changes(st->st_ino) ? 0.0 : LONG_TIMEOUT;
}

/* st as programs see it: st_ino is the node's id as fs/tree answers;
 * programs see bfs_tree_shown_ino's number (below 2^32 when it can be).
 * After attr_timeout, which reads the node id. */
static void show(const struct bfs_mount *m, struct stat *st)
{
	st->st_ino = bfs_tree_shown_ino(m->tree, st->st_ino);
}

static void bfs_init(void *userdata, struct fuse_conn_info *conn)
{
	/* More than the kernel's 12 async requests in flight (readahead,
	 * async direct I/O): mount/README.md. */
	conn->max_background = 64;
	conn->congestion_threshold = 48;
	if (conn->capable & FUSE_CAP_READDIRPLUS)
		conn->want |= FUSE_CAP_READDIRPLUS;
	conn->want &= ~(unsigned)FUSE_CAP_READDIRPLUS_AUTO;
	/* passthrough (mount/passthrough.c) cannot work with it */
	conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
}

static void bfs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	int rc;

	memset(&e, 0, sizeof(e));
	rc = bfs_tree_lookup(mnt_of(req)->tree, parent, name, &e.attr);
	if (rc == 0) {
		e.ino = e.attr.st_ino;
		e.attr_timeout = attr_timeout(&e.attr);
		e.entry_timeout = LONG_TIMEOUT;
		show(mnt_of(req), &e.attr);
	} else if (rc == -ENOENT) {
		e.ino = 0; /* negative entry, cached as long */
		e.entry_timeout = LONG_TIMEOUT;
		rc = 0;
	}
	if (rc == 0)
		fuse_reply_entry(req, &e);
	else
		fuse_reply_err(req, -rc);
}

static void bfs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	fuse_reply_none(req); /* inode numbers are arithmetic: nothing held */
}

static void bfs_forget_multi(fuse_req_t req, size_t count,
			     struct fuse_forget_data *forgets)
{
	fuse_reply_none(req);
}

static void bfs_getattr(fuse_req_t req, fuse_ino_t ino,
			struct fuse_file_info *fi)
{
	struct stat st;
	int rc = bfs_tree_getattr(mnt_of(req)->tree, ino, &st);
	double timeout = rc == 0 ? attr_timeout(&st) : 0;

	if (rc == 0) {
		show(mnt_of(req), &st);
		fuse_reply_attr(req, &st, timeout);
	} else {
		fuse_reply_err(req, -rc);
	}
}

static void bfs_erofs(fuse_req_t req)
{
	fuse_reply_err(req, EROFS);
}

static void bfs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
			int to_set, struct fuse_file_info *fi)
{
	bfs_erofs(req);
}

static void bfs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode, dev_t rdev)
{
	bfs_erofs(req);
}

static void bfs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode)
{
	bfs_erofs(req);
}

static void bfs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	bfs_erofs(req);
}

static void bfs_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		       fuse_ino_t newparent, const char *newname,
		       unsigned int flags)
{
	bfs_erofs(req);
}

static void bfs_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
			const char *name)
{
	bfs_erofs(req);
}

static void bfs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
		     const char *newname)
{
	bfs_erofs(req);
}

static void bfs_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		       mode_t mode, struct fuse_file_info *fi)
{
	bfs_erofs(req);
}

static void bfs_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
		      size_t size, off_t off, struct fuse_file_info *fi)
{
	bfs_erofs(req);
}

static void bfs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			 const char *value, size_t size, int flags)
{
	bfs_erofs(req);
}

static void bfs_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	bfs_erofs(req);
}

/* ---- interrupts ----------------------------------------------------------
 * An open or a READ may wait for its batch (a worker gathering it, rows
 * fetched from a remote server) up to --timeout. The kernel sends
 * INTERRUPT for a request the daemon has when its task gets a signal
 * (and, for a fatal one, waits for the answer all the same): the
 * request's flag is set and the waits woken, and the handler answers
 * EINTR at once (fs/pool.h: interrupts); the gather goes on for later
 * readers. libfuse 3.14 calls the callback holding the request's own
 * lock, which fuse_req_interrupt_func(req, NULL, NULL) takes too: after
 * interruptible_end no callback runs, so the flag may live on the
 * handler's stack. */
struct interruptible {
	struct bfs_cancel cancel;
	struct bfs_mount *m;
};

static void on_interrupt(fuse_req_t req, void *arg)
{
	struct interruptible *w = arg;

	atomic_store(&w->cancel.set, true);
	bfs_serve_interrupt(w->m->serve);
}

static void interruptible_begin(fuse_req_t req, struct interruptible *w)
{
	atomic_init(&w->cancel.set, false);
	w->m = mnt_of(req);
	bfs_cancel_enter(&w->cancel);
	fuse_req_interrupt_func(req, on_interrupt, w);
}

static void interruptible_end(fuse_req_t req)
{
	fuse_req_interrupt_func(req, NULL, NULL);
	bfs_cancel_leave();
}

static void bfs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct bfs_mount *m = mnt_of(req);
	struct bfs_serve_how how;
	struct bfs_file *f = NULL;
	struct interruptible w;
	int rc = -EROFS;

	/* the open's flags choose how a batch file is served (O_DIRECT:
	 * direct I/O in every mode, fs/serve.h) */
	if ((fi->flags & O_ACCMODE) == O_RDONLY && !(fi->flags & O_TRUNC)) {
		interruptible_begin(req, &w);
		rc = bfs_tree_open(m->tree, ino, fi->flags, &f, &how);
		interruptible_end(req);
	}
	if (rc < 0) {
		fuse_reply_err(req, -rc);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)f;
	fi->direct_io = how.direct_io;
	fi->keep_cache = how.keep_cache;
	fi->noflush = how.noflush;
	/* Not delivered (interrupted): no RELEASE will come for it. */
	if (bfs_pt_reply_open(req, fi, how.backing_id) != 0)
		bfs_serve_release(m->serve, f);
}

static void bfs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	struct bfs_mount *m = mnt_of(req);
	struct bfs_serve_reply r;
	struct interruptible w;
	int rc;

	interruptible_begin(req, &w);
	rc = bfs_serve_read(m->serve, file_of(fi), (uint64_t)off, size, &r);
	interruptible_end(req);

	if (rc < 0)
		fuse_reply_err(req, -rc);
	else if (r.iovcnt) /* a fault in the kernel's copy: EIO to the reader */
		fuse_reply_iov(req, r.iov, r.iovcnt);
	else
		fuse_reply_buf(req, NULL, 0);
	bfs_serve_done(m->serve, &r);
}

static void bfs_release(fuse_req_t req, fuse_ino_t ino,
			struct fuse_file_info *fi)
{
	bfs_serve_release(mnt_of(req)->serve, file_of(fi));
	fuse_reply_err(req, 0);
}

static void bfs_opendir(fuse_req_t req, fuse_ino_t ino,
			struct fuse_file_info *fi)
{
	struct stat st;
	int rc = bfs_tree_getattr(mnt_of(req)->tree, ino, &st);

	if (rc == 0 && !S_ISDIR(st.st_mode))
		rc = -ENOTDIR;
	if (rc == 0) {
		fi->cache_readdir = 1; /* listings never change */
		fi->keep_cache = 1;
		fuse_reply_open(req, fi);
	} else {
		fuse_reply_err(req, -rc);
	}
}

/* Fill up to 'size' bytes of entries from entry number 'off'. */
static void readdir_common(fuse_req_t req, fuse_ino_t ino, size_t size,
			   off_t off, bool plus)
{
	struct bfs_mount *m = mnt_of(req);
	char *buf = malloc(size ? size : 1);
	size_t pos = 0;
	int rc = buf ? 0 : -ENOMEM;

	for (uint64_t i = (uint64_t)off; rc >= 0; i++) {
		char name[64];
		struct fuse_entry_param e;
		size_t need;

		memset(&e, 0, sizeof(e));
		rc = bfs_tree_dirent(m->tree, ino, i, name, sizeof(name),
				     &e.attr);
		if (rc <= 0)
			break;
		e.ino = e.attr.st_ino;
		e.attr_timeout = attr_timeout(&e.attr);
		e.entry_timeout = LONG_TIMEOUT;
		show(m, &e.attr);
		if (plus) {
			need = fuse_add_direntry_plus(
			    req, buf + pos, size - pos, name, &e, (off_t)i + 1);
		} else {
			need = fuse_add_direntry(req, buf + pos, size - pos,
						 name, &e.attr, (off_t)i + 1);
		}
		if (need > size - pos)
			break;
		pos += need;
	}
	if (rc < 0 && pos == 0)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_buf(req, buf, pos);
	free(buf);
}

static void bfs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			struct fuse_file_info *fi)
{
	readdir_common(req, ino, size, off, false);
}

static void bfs_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
			    off_t off, struct fuse_file_info *fi)
{
	readdir_common(req, ino, size, off, true);
}

static void bfs_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv;

	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = BFS_TREE_BLKSIZE;
	sv.f_frsize = 4096;
	sv.f_namemax = 255;
	sv.f_flag = ST_RDONLY;
	fuse_reply_statfs(req, &sv);
}

const struct fuse_lowlevel_ops bfs_mount_ops = {
    .init = bfs_init,
    .lookup = bfs_lookup,
    .forget = bfs_forget,
    .forget_multi = bfs_forget_multi,
    .getattr = bfs_getattr,
    .setattr = bfs_setattr,
    .mknod = bfs_mknod,
    .mkdir = bfs_mkdir,
    .unlink = bfs_unlink,
    .rmdir = bfs_unlink,
    .rename = bfs_rename,
    .symlink = bfs_symlink,
    .link = bfs_link,
    .create = bfs_create,
    .write = bfs_write,
    .setxattr = bfs_setxattr,
    .removexattr = bfs_removexattr,
    .open = bfs_open,
    .read = bfs_read,
    .release = bfs_release,
    .opendir = bfs_opendir,
    .readdir = bfs_readdir,
    .readdirplus = bfs_readdirplus,
    .statfs = bfs_statfs,
};
