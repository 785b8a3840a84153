/* fs/layout_fd: a batch file written into a file descriptor (a fresh
 * memfd: passthrough serves each batch from one), the two ways measured
 * for it (fs/README.md: writing a memfd):
 *   gather  the batch is gathered into a reused buffer (bfs_layout_fill)
 *           and written with one pwrite;
 *   slices  it is written with pwritev straight from the archive mapping,
 *           one slice per row (adjacent slices merge, IOV_MAX per call),
 *           when every row is stored as served (in no remote file but
 *           a sealed one: bfs_dataset_row) and no field is ragged: no
 *           copy in this process.
 * mmap of a fresh memfd + memcpy is no option: every page is a shmem
 * fault. The default takes slices when rows average >= 4 KiB. */
#include "fs/layout_fd.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fs/log.h"

/* Slices on their way into a file with pwritev. */
struct writer {
	int fd;
	uint64_t off; /* file offset of iov[0] */
	struct iovec iov[IOV_MAX];
	int cnt;
	uint64_t pending; /* bytes in iov */
};

/* Write every pending slice (retrying short writes). A fault of the
 * kernel's copy from a shrunk archive mapping is EFAULT: -EIO. */
static int flush(struct writer *w)
{
	struct iovec *v = w->iov;
	int cnt = w->cnt;

	while (w->pending) {
		ssize_t n = pwritev(w->fd, v, cnt, (off_t)w->off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 && errno != EFAULT ? -errno : -EIO;
		w->off += (uint64_t)n;
		w->pending -= (uint64_t)n;
		while (cnt && (size_t)n >= v->iov_len) { /* a short write */
			n -= (ssize_t)v->iov_len;
			v++;
			cnt--;
		}
		if (cnt) {
			v->iov_base = (char *)v->iov_base + n;
			v->iov_len -= (size_t)n;
		}
	}
	w->cnt = 0;
	return 0;
}

/* Append [p, p+len), merged with the last slice when adjacent; when the
 * array is full, write it out first. */
static int add(struct writer *w, const void *p, size_t len)
{
	struct iovec *last = w->cnt ? &w->iov[w->cnt - 1] : NULL;
	int rc = 0;

	if (last && (const char *)last->iov_base + last->iov_len == p) {
		last->iov_len += len;
		w->pending += len;
		return 0;
	}
	if (w->cnt == IOV_MAX)
		rc = flush(w);
	w->iov[w->cnt].iov_base = (void *)p;
	w->iov[w->cnt++].iov_len = len;
	w->pending += len;
	return rc;
}

/* The rows of a batch, slice by slice, into a writer. */
struct slices {
	const struct bfs_layout *l;
	const struct bfs_dataset *ds;
	const uint64_t *idx;
	uint64_t rows;
	bfs_layout_rows have;
	struct writer *w;
};

static int write_slices(void *arg)
{
	const struct slices *j = arg;
	int rc = 0;

	for (size_t i = 0; i < j->l->nfields && !rc; i++) {
		const struct bfs_layout_field *lf = &j->l->fields[i];

		for (uint64_t r = 0; r < j->rows && !rc && lf->f->row_bytes;
		     r++) {
			const void *p;

			if (j->have && j->have[lf->ds_index])
				p = j->have[lf->ds_index][r];
			else
				rc = bfs_dataset_row(j->ds, lf->ds_index,
						     j->idx[r], &p);
			if (!rc)
				rc = add(j->w, p, (size_t)lf->f->row_bytes);
		}
	}
	return rc ?: flush(j->w);
}

int bfs_layout_pwrite(const struct bfs_layout *l, const struct bfs_dataset *ds,
		      struct bfs_batch_id id, const uint64_t *idx,
		      uint64_t rows, bfs_layout_rows have, int fd)
{
	uint64_t data;
	struct writer *w;
	void *head;
	int rc = 0;

	if (l->nragged) /* rows not stored as served: gathered */
		return -ENOTSUP;
	data = bfs_layout_data_offset(l, rows);
	w = malloc(sizeof(*w));
	head = malloc((size_t)data);
	if (!w || !head) {
		rc = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < l->nfields && !rc; i++) { /* all in place? */
		const void *p;

		for (uint64_t r = 0;
		     r < rows && !rc && l->fields[i].f->row_bytes; r++)
			rc = bfs_dataset_row(ds, l->fields[i].ds_index, idx[r],
					     &p);
	}
	if (rc == -EAGAIN) /* a remote object's, not sealed yet */
		rc = -ENOTSUP;
	if (rc)
		goto out;
	w->fd = fd;
	w->off = 0;
	w->cnt = 0;
	w->pending = 0;
	bfs_layout_header(l, id, rows, head);
	rc = add(w, head, (size_t)data);
	if (!rc) {
		struct slices job = {l, ds, idx, rows, have, w};

		rc = bfs_dataset_copy_checked(ds, idx, (size_t)rows,
					      write_slices, &job);
	}
	if (rc == -EIO) {
		char name[96];

		bfs_layout_batch_name(l, id, name, sizeof(name));
		bfs_log(BFS_LOG_ERR, "layout",
			"%s: an archive faulted while the batch was written "
			"(truncated under us?)",
			name);
	}
out:
	free(head);
	free(w);
	return rc;
}

void bfs_layout_fd_init(struct bfs_layout_fd *w, const struct bfs_layout *l,
			const struct bfs_dataset *ds,
			enum bfs_layout_fd_how how)
{
	*w = (struct bfs_layout_fd){.l = l, .ds = ds};
	w->slices =
	    how == BFS_LAYOUT_FD_SLICES ||
	    (how == BFS_LAYOUT_FD_AUTO && bfs_layout_mean_slice(l) >= 4096);
}

void bfs_layout_fd_fini(struct bfs_layout_fd *w)
{
	if (w->scratch)
		munmap(w->scratch, w->scratch_len);
	w->scratch = NULL;
	w->scratch_len = 0;
}

/* Room for n bytes in w->scratch. */
static int scratch_fit(struct bfs_layout_fd *w, uint64_t n)
{
	if (n <= w->scratch_len)
		return 0;
	bfs_layout_fd_fini(w);
	w->scratch_len = (size_t)((n + 4095) & ~(uint64_t)4095);
	w->scratch = mmap(NULL, w->scratch_len, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (w->scratch != MAP_FAILED)
		return 0;
	w->scratch = NULL;
	w->scratch_len = 0;
	return -ENOMEM;
}

/* All of [buf, buf+n) into fd at offset 0. */
static int write_all(int fd, const uint8_t *buf, uint64_t n)
{
	for (uint64_t done = 0; done < n;) {
		ssize_t got =
		    pwrite(fd, buf + done, (size_t)(n - done), (off_t)done);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return got < 0 ? -errno : -EIO;
		done += (uint64_t)got;
	}
	return 0;
}

int bfs_layout_fd_write(struct bfs_layout_fd *w, struct bfs_batch_id id,
			const uint64_t *idx, uint64_t rows, uint64_t size,
			bfs_layout_rows have, int fd)
{
	int rc;

	if (w->slices) {
		rc = bfs_layout_pwrite(w->l, w->ds, id, idx, rows, have, fd);
		if (rc != -ENOTSUP)
			return rc;
	}
	rc = scratch_fit(w, size);
	if (!rc)
		rc = bfs_layout_fill_from(w->l, w->ds, id, idx, rows, size,
					  have, w->scratch);
	return rc ? rc : write_all(fd, w->scratch, size);
}
