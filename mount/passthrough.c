/* mount/passthrough: FUSE passthrough with libfuse 3.14, which has no API
 * for it (mount/README.md: passthrough).
 *
 * The session's /dev/fuse traffic goes through our own read and writev
 * (fuse_session_custom_io, installed after fuse_session_mount on the
 * session's own descriptor). Everything passes through unchanged except:
 *   read    the INIT request: does the kernel offer FUSE_PASSTHROUGH? It
 *           does when 'flags' has FUSE_INIT_EXT (bit 30) and 'flags2' (the
 *           32-bit word after 'flags' in fuse_init_in, i.e. bits 32..63)
 *           has bit 5 (FUSE_PASSTHROUGH = 1 << 37). Its 'unique' is kept
 *           to recognise the reply.
 *   writev  the INIT reply, when we want passthrough and it was offered:
 *           FUSE_INIT_EXT set in 'flags', bit 5 in 'flags2' (offset 32 of
 *           fuse_init_out) and max_stack_depth = 1 (the word after
 *           flags2, 'unused[0]' in libfuse 3.14's header): our files stack
 *           on one backing file system (shmem) and nothing stacks on us.
 *           The writeback cache stays off (passthrough refuses it).
 *   writev  an OPEN reply sent by bfs_pt_reply_open on this thread: the
 *           open handler set the batch's backing id in a thread-local
 *           right before fuse_reply_open, which writes the reply from the
 *           same thread; FOPEN_PASSTHROUGH (1 << 7) is added to
 *           'open_flags' and the id goes in the word after it
 *           ('padding' in the old header). Only FOPEN_DIRECT_IO,
 *           FOPEN_NOFLUSH and FOPEN_PARALLEL_DIRECT_WRITES may accompany
 *           it, so such opens never set keep_cache.
 * Backing files are registered with the FUSE_DEV_IOC_BACKING_OPEN ioctl on
 * the session descriptor (it needs CAP_SYS_ADMIN and a connection whose
 * INIT enabled passthrough) and dropped with FUSE_DEV_IOC_BACKING_CLOSE,
 * which fs/serve does at the last release of the batch: closing an id
 * right after the open reply races with the opener, which looks it up
 * after the reply is written (its open then fails with EIO).
 *
 * Layouts read here are fixed by the FUSE protocol (7.40+ for these
 * fields); offsets are written out rather than taken from a header,
 * because the installed headers predate them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fs/log.h"
#include "mount/internal.h"

#define IN_HEADER    40u	/* struct fuse_in_header */
#define OUT_HEADER   16u	/* struct fuse_out_header */
#define OP_INIT	     26u	/* FUSE_INIT */
#define INIT_EXT     (1u << 30) /* FUSE_INIT_EXT, in 'flags' */
#define PT_FLAGS2    (1u << 5)	/* FUSE_PASSTHROUGH (1 << 37), 'flags2' */
#define INIT_IN_F    12u	/* fuse_init_in: flags */
#define INIT_IN_F2   16u	/* fuse_init_in: flags2 */
#define INIT_OUT_F   12u	/* fuse_init_out: flags */
#define INIT_OUT_F2  32u	/* fuse_init_out: flags2 */
#define INIT_OUT_MSD 36u	/* fuse_init_out: max_stack_depth */
#define OPEN_OUT     16u	/* struct fuse_open_out */
#define FOPEN_PT     (1u << 7)	/* FOPEN_PASSTHROUGH */

struct backing_map { /* struct fuse_backing_map */
	int32_t fd;
	uint32_t flags;
	uint64_t padding;
};
#define IOC_BACKING_OPEN  _IOW(229, 1, struct backing_map)
#define IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)

/* The backing id the OPEN reply being written on this thread carries. */
static __thread int reply_backing_id;

static uint32_t get32(const void *p, size_t off)
{
	uint32_t v;

	memcpy(&v, (const char *)p + off, sizeof(v));
	return v;
}

static void put32(void *p, size_t off, uint32_t v)
{
	memcpy((char *)p + off, &v, sizeof(v));
}

static ssize_t pt_read(int fd, void *buf, size_t len, void *userdata)
{
	struct bfs_mount *m = userdata;
	ssize_t n = read(fd, buf, len);

	if (n >= (ssize_t)(IN_HEADER + INIT_IN_F2 + 4) &&
	    get32(buf, 4) == OP_INIT) {
		uint64_t unique;
		const char *in = (const char *)buf + IN_HEADER;

		memcpy(&unique, (const char *)buf + 8, sizeof(unique));
		atomic_store(&m->pt.init_unique, unique);
		atomic_store(&m->pt.offered,
			     (get32(in, INIT_IN_F) & INIT_EXT) &&
				 (get32(in, INIT_IN_F2) & PT_FLAGS2));
	}
	return n;
}

static ssize_t pt_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	struct bfs_mount *m = userdata;
	struct iovec out[2];
	char body[64];
	uint64_t unique;

	if (count != 2 || iov[0].iov_len != OUT_HEADER ||
	    get32(iov[0].iov_base, 4) != 0) /* not a successful reply */
		return writev(fd, iov, count);
	memcpy(&unique, (const char *)iov[0].iov_base + 8, sizeof(unique));
	if (reply_backing_id > 0 && iov[1].iov_len == OPEN_OUT) {
		memcpy(body, iov[1].iov_base, OPEN_OUT);
		put32(body, 8, get32(body, 8) | FOPEN_PT);
		put32(body, 12, (uint32_t)reply_backing_id);
	} else if (unique == atomic_load(&m->pt.init_unique) && m->pt.want &&
		   !m->pt.ignore_offer && atomic_load(&m->pt.offered) &&
		   iov[1].iov_len >= INIT_OUT_MSD + 4 &&
		   iov[1].iov_len <= sizeof(body)) {
		memcpy(body, iov[1].iov_base, iov[1].iov_len);
		put32(body, INIT_OUT_F, get32(body, INIT_OUT_F) | INIT_EXT);
		put32(body, INIT_OUT_F2, get32(body, INIT_OUT_F2) | PT_FLAGS2);
		put32(body, INIT_OUT_MSD, 1);
		atomic_store(&m->pt.enabled, true);
	} else {
		return writev(fd, iov, count);
	}
	out[0] = iov[0];
	out[1].iov_base = body;
	out[1].iov_len = iov[1].iov_len;
	return writev(fd, out, 2);
}

int bfs_pt_install(struct bfs_mount *m)
{
	static const struct fuse_custom_io io = {.read = pt_read,
						 .writev = pt_writev};

	m->pt.fd = fuse_session_fd(m->se);
	m->pt.ignore_offer = getenv("BATCHFS_DEBUG_NO_PASSTHROUGH") != NULL;
	return fuse_session_custom_io(m->se, &io, m->pt.fd);
}

int bfs_pt_backing_open(void *arg, int fd)
{
	struct bfs_mount *m = arg;
	struct backing_map map = {.fd = fd};
	int id = ioctl(m->pt.fd, IOC_BACKING_OPEN, &map);

	if (id < 0)
		return -errno;
	return id > 0 ? id : -EIO;
}

void bfs_pt_backing_close(void *arg, int id)
{
	struct bfs_mount *m = arg;
	uint32_t v = (uint32_t)id;

	if (ioctl(m->pt.fd, IOC_BACKING_CLOSE, &v) < 0)
		bfs_log(BFS_LOG_WARN, "mount", "backing id %d: close: %s", id,
			strerror(errno));
}

int bfs_pt_check(struct bfs_mount *m, char *why, size_t len)
{
	int fd, id;

	if (m->pt.ignore_offer) {
		snprintf(why, len,
			 "the kernel's passthrough offer is ignored "
			 "(BATCHFS_DEBUG_NO_PASSTHROUGH)");
		return -ENOTSUP;
	}
	if (!atomic_load(&m->pt.offered)) {
		snprintf(why, len,
			 "the kernel does not offer FUSE passthrough (it "
			 "needs Linux >= 6.9 with CONFIG_FUSE_PASSTHROUGH)");
		return -ENOTSUP;
	}
	if (!atomic_load(&m->pt.enabled)) {
		snprintf(why, len, "passthrough was not enabled at INIT");
		return -ENOTSUP;
	}
	fd = memfd_create("batchfs-probe", MFD_CLOEXEC);
	id = fd < 0 ? -errno : bfs_pt_backing_open(m, fd);
	if (id > 0)
		bfs_pt_backing_close(m, id);
	if (fd >= 0)
		close(fd);
	if (id < 0) {
		snprintf(why, len,
			 "the kernel offers FUSE passthrough, but registering "
			 "a backing file failed: %s%s",
			 strerror(-id),
			 id == -EPERM ? " (the daemon needs CAP_SYS_ADMIN)"
				      : "");
		return id;
	}
	snprintf(why, len,
		 "the kernel offers FUSE passthrough and the "
		 "daemon may register backing files");
	return 0;
}

int bfs_pt_reply_open(fuse_req_t req, const struct fuse_file_info *fi,
		      int backing_id)
{
	int rc;

	reply_backing_id = backing_id;
	rc = fuse_reply_open(req, fi);
	reply_backing_id = 0;
	return rc;
}
