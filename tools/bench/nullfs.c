/* nullfs: the benchmark's FUSE baseline. A low-level libfuse3 server that
 * serves one read-only file, "data", of a given size from memory, so the
 * only cost measured is FUSE itself (request round trips and the one copy
 * into the reader's buffer), never storage or computation.
 *
 * Design:
 * - The file's bytes are a 64 MiB pattern buffer repeated. The buffer is
 *   allocated 64 MiB + 1 MiB with its first MiB mirrored at the end, so
 *   any read of up to 1 MiB at any offset is one contiguous slice and is
 *   answered with a single fuse_reply_buf (no copy in the daemon).
 * - direct_io by default (READ size = the reader's read size, split by the
 *   kernel at 1 MiB); --page-cache serves it through the page cache with
 *   keep_cache instead, for comparisons.
 * - Multithreaded loop (default 4 threads), max_background raised to 64,
 *   as mount/README.md explains (FUSE settings).
 * - Besides "data", any name "data.K" (K a decimal number, not listed)
 *   looks up a file of its own (inode 3 + K) with the same bytes, so the
 *   harness can time open+close of a file never opened before (LOOKUP +
 *   OPEN + RELEASE), as a reader of batch files pays it.
 * - Readiness: once the mount exists, one line "ready\n" is written to
 *   stdout (or one byte to --ready-fd N) so the harness never sleep-polls.
 *   A reader arriving before INIT is answered simply waits for it.
 * - SIGTERM/SIGINT/SIGHUP end the loop; the mount is removed on exit.
 *
 * This program is a benchmark tool (built by `make bench`, not by `make`);
 * it is not part of batchfs and keeps no state besides the buffer. */
#include <errno.h>
#include <fuse_lowlevel.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PATTERN_BYTES (64u << 20)
#define MAX_READ      (1u << 20)
#define FILE_INO      2
#define FILE_NAME     "data"

struct nullfs {
	uint64_t size;	    /* st_size of "data"; read-only after start */
	const uint8_t *buf; /* PATTERN_BYTES + MAX_READ, read-only */
	int page_cache;	    /* 0: direct_io, 1: keep_cache */
};

static struct nullfs *nfs(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static void fill_stat(const struct nullfs *n, fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_blksize = MAX_READ;
	if (ino == FUSE_ROOT_ID) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
	} else {
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_size = (off_t)n->size;
		st->st_blocks = (blkcnt_t)((n->size + 511) / 512);
	}
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	conn->max_background = 64;
	conn->congestion_threshold = 48;
}

/* The inode of name in the root: FILE_INO for "data", FILE_INO + 1 + K
 * for "data.K"; 0 for anything else. */
static fuse_ino_t name_ino(const char *name)
{
	const char *p = name + strlen(FILE_NAME);
	char *end;
	unsigned long long k;

	if (strncmp(name, FILE_NAME, strlen(FILE_NAME)))
		return 0;
	if (!*p)
		return FILE_INO;
	if (*p != '.' || p[1] < '0' || p[1] > '9')
		return 0;
	errno = 0;
	k = strtoull(p + 1, &end, 10);
	if (*end || errno || k > (1ull << 40))
		return 0;
	return (fuse_ino_t)(FILE_INO + 1 + k);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	fuse_ino_t ino = parent == FUSE_ROOT_ID ? name_ino(name) : 0;

	if (!ino) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	memset(&e, 0, sizeof(e));
	e.ino = ino;
	e.attr_timeout = 3600;
	e.entry_timeout = 3600;
	fill_stat(nfs(req), ino, &e.attr);
	fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	struct stat st;

	if (ino != FUSE_ROOT_ID && ino < FILE_INO) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	fill_stat(nfs(req), ino, &st);
	fuse_reply_attr(req, &st, 3600);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino < FILE_INO) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		fuse_reply_err(req, EROFS);
		return;
	}
	fi->direct_io = !nfs(req)->page_cache;
	fi->keep_cache = nfs(req)->page_cache;
	fi->noflush = 1; /* read-only: as batchfs, no FLUSH at close */
	fuse_reply_open(req, fi);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	const struct nullfs *n = nfs(req);
	uint64_t end;

	if (off < 0 || (uint64_t)off >= n->size) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	end = n->size - (uint64_t)off;
	if (size > end)
		size = (size_t)end;
	if (size > MAX_READ)
		size = MAX_READ;
	fuse_reply_buf(
	    req, (const char *)n->buf + (uint64_t)off % PATTERN_BYTES, size);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	static const struct {
		const char *name;
		fuse_ino_t ino;
	} ents[] = {
	    {".", FUSE_ROOT_ID}, {"..", FUSE_ROOT_ID}, {FILE_NAME, FILE_INO}};
	char buf[512];
	size_t used = 0;

	if (ino != FUSE_ROOT_ID) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	for (off_t i = off; i < 3; i++) {
		struct stat st;
		size_t len;

		fill_stat(nfs(req), ents[i].ino, &st);
		len = fuse_add_direntry(req, buf + used, sizeof(buf) - used,
					ents[i].name, &st, i + 1);
		if (len > sizeof(buf) - used || used + len > size)
			break;
		used += len;
	}
	fuse_reply_buf(req, buf, used);
}

static const struct fuse_lowlevel_ops ops = {
    .init = op_init,
    .lookup = op_lookup,
    .getattr = op_getattr,
    .open = op_open,
    .read = op_read,
    .readdir = op_readdir,
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: nullfs [--size BYTES] [--threads N] [--page-cache]\n"
		"              [--ready-fd FD] MOUNTPOINT\n"
		"Serves MOUNTPOINT/" FILE_NAME " (default 1 GiB) from a 64 MiB "
		"in-memory pattern.\nPrints \"ready\" (or writes one byte to "
		"FD) once mounted; SIGTERM unmounts.\n");
}

static uint8_t *make_buffer(void)
{
	size_t len = (size_t)PATTERN_BYTES + MAX_READ;
	uint8_t *b = mmap(NULL, len, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

	if (b == MAP_FAILED)
		return NULL;
	for (size_t i = 0; i < PATTERN_BYTES; i++)
		b[i] = (uint8_t)((i * 2654435761u) >> 13);
	memcpy(b + PATTERN_BYTES, b, MAX_READ);
	return b;
}

static int report_ready(int ready_fd)
{
	if (ready_fd < 0) {
		if (printf("ready\n") < 0 || fflush(stdout))
			return -EIO;
		return 0;
	}
	if (write(ready_fd, "r", 1) != 1)
		return -errno;
	close(ready_fd);
	return 0;
}

/* parse → buffer → session_new → signal handlers → mount → ready → loop →
 * unmount → remove handlers → destroy. */
static int serve(struct nullfs *n, const char *mnt, unsigned threads,
		 int ready_fd)
{
	char *fargv[] = {"nullfs", "-o", "fsname=nullfs,subtype=nullfs", NULL};
	struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
	struct fuse_loop_config *cfg = NULL;
	struct fuse_session *se;
	int rc = 1;

	se = fuse_session_new(&args, &ops, sizeof(ops), n);
	if (!se)
		return 1;
	if (fuse_set_signal_handlers(se))
		goto out_destroy;
	if (fuse_session_mount(se, mnt))
		goto out_signals;
	if (report_ready(ready_fd))
		goto out_unmount;
	if (threads <= 1) {
		rc = fuse_session_loop(se) ? 1 : 0;
	} else {
		cfg = fuse_loop_cfg_create();
		if (!cfg)
			goto out_unmount;
		fuse_loop_cfg_set_max_threads(cfg, threads);
		rc = fuse_session_loop_mt(se, cfg) ? 1 : 0;
		fuse_loop_cfg_destroy(cfg);
	}
out_unmount:
	fuse_session_unmount(se);
out_signals:
	fuse_remove_signal_handlers(se);
out_destroy:
	fuse_session_destroy(se);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"size", required_argument, NULL, 's'},
	    {"threads", required_argument, NULL, 't'},
	    {"page-cache", no_argument, NULL, 'p'},
	    {"ready-fd", required_argument, NULL, 'r'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct nullfs n = {.size = 1ull << 30};
	unsigned threads = 4;
	int ready_fd = -1, c;
	char *end;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			errno = 0;
			n.size = strtoull(optarg, &end, 10);
			if (errno || *end || end == optarg)
				goto bad_usage;
			break;
		case 't':
			threads = (unsigned)strtoul(optarg, &end, 10);
			if (*end || threads < 1 || threads > 64)
				goto bad_usage;
			break;
		case 'p':
			n.page_cache = 1;
			break;
		case 'r':
			ready_fd = (int)strtol(optarg, &end, 10);
			if (*end || ready_fd < 0)
				goto bad_usage;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			goto bad_usage;
		}
	}
	if (optind + 1 != argc)
		goto bad_usage;
	n.buf = make_buffer();
	if (!n.buf) {
		perror("nullfs: mmap");
		return 1;
	}
	return serve(&n, argv[optind], threads, ready_fd);
bad_usage:
	usage(stderr);
	return 2;
}
