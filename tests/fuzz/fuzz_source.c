/* libFuzzer target: the sources (fs/source: torch archives, .npz members
 * through fs/zip's npz mode and fs/npy, .npy files, safetensors files,
 * recognised by their first bytes) and ragged fields, over arbitrary bytes
 * taken as one file.
 *
 * 1. bfs_source_open_mem: a refusal must give a reason; every accepted
 *    tensor's storage must lie inside its file.
 * 2. The same bytes in a memfd, opened by path as a dataset (ragged
 *    offsets checked at open), laid out for a batch of 1 and of 3 samples
 *    (ragged fields padded to a multiple or packed, as the input's last
 *    byte says): the first and last samples are measured and gathered
 *    into a buffer with inaccessible guard pages on both sides, whose
 *    size must be what bfs_layout_size_dims said, and which must parse
 *    back as safetensors of exactly that size. A crash, a leak, UB or a
 *    disagreement is a bug. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fs/layout.h"
#include "fs/log.h"
#include "fs/safetensors.h"
#include "fs/source.h"

#define FILL_MAX (16u << 20) /* batches gathered up to this size */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void quiet(enum bfs_log_level level, const char *line)
{
}

static void check_source(const uint8_t *data, size_t size)
{
	struct bfs_error err = {{0}};
	struct bfs_source *s = NULL;

	if (bfs_source_open_mem(&s, data, size, "fuzz", 64u << 20, &err)) {
		if (!err.msg[0])
			abort(); /* a refusal without a reason */
		return;
	}
	for (size_t i = 0; i < s->ntensors; i++) {
		const struct bfs_source_tensor *t = &s->tensors[i];
		const struct bfs_source_file *f = &s->files[t->file];

		if (t->data < f->map || t->data > f->map + f->size ||
		    t->data_bytes > (uint64_t)(f->map + f->size - t->data))
			abort(); /* storage outside the file */
	}
	bfs_source_close(s);
}

/* Gather samples idx[0..n) into a guarded buffer and parse it back. */
static void check_batch(const struct bfs_layout *l,
			const struct bfs_dataset *ds, const uint64_t *idx,
			uint64_t n)
{
	struct bfs_layout_dims d;
	struct bfs_st_header *h = NULL;
	size_t pg = 4096, len;
	uint64_t size;
	uint8_t *map;

	if (bfs_layout_measure(l, idx, n, &d))
		return;
	size = bfs_layout_size_dims(l, &d);
	if (size > l->max_file_size)
		abort(); /* larger than proven */
	if (size > FILL_MAX)
		return;
	len = (size + pg - 1) / pg * pg;
	map = mmap(NULL, len + 2 * pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
		   -1, 0);
	if (map == MAP_FAILED ||
	    mprotect(map + pg, len, PROT_READ | PROT_WRITE))
		abort();
	/* the file ends exactly at the trailing guard page */
	if (bfs_layout_fill(l, ds,
			    (struct bfs_batch_id){.epoch = 1, .batch = 2}, idx,
			    n, size, map + pg + (len - size)) == 0) {
		if (bfs_st_parse(map + pg + (len - size), (size_t)size, size, 0,
				 &h, NULL))
			abort(); /* we wrote a file readers refuse */
		bfs_st_free(h);
	}
	munmap(map, len + 2 * pg);
}

static void check_dataset(const char *path, uint8_t mode)
{
	struct bfs_error err = {{0}};
	struct bfs_dataset *ds = NULL;
	struct bfs_ragged_opt opt[BFS_LAYOUT_MAX_RAGGED];
	size_t nopt = 0;

	if (bfs_dataset_open(&ds, &path, 1, &err)) {
		if (!err.msg[0])
			abort();
		return;
	}
	for (size_t i = 0; i < bfs_dataset_nfields(ds); i++) {
		const struct bfs_field *f = bfs_dataset_field(ds, i);

		if (!f->ragged || nopt == BFS_LAYOUT_MAX_RAGGED)
			continue;
		opt[nopt] = (struct bfs_ragged_opt){
		    .name = f->name,
		    .mode = mode & 1 ? BFS_RAGGED_PACK : BFS_RAGGED_PAD,
		    .multiple = 1 + (mode >> 1 & 7)};
		nopt++;
	}
	for (uint64_t b = 1; b <= 3; b += 2) {
		uint64_t n = bfs_dataset_samples(ds), idx[3];
		struct bfs_layout l;

		if (bfs_layout_init_ragged(&l, ds, b, opt, nopt, &err))
			continue;
		for (uint64_t i = 0; i < b; i++) /* the first, the last */
			idx[i] = n ? (i % 2 ? n - 1 : i / 2 % n) : 0;
		if (n)
			check_batch(&l, ds, idx, b);
		bfs_layout_fini(&l);
	}
	bfs_dataset_close(ds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char path[64];
	static int fd = -1;

	if (fd < 0) {
		fd = memfd_create("source", MFD_CLOEXEC);
		if (fd < 0)
			abort();
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		bfs_log_setup(BFS_LOG_ERR, quiet);
	}
	check_source(data, size);
	if (ftruncate(fd, 0) ||
	    (size && pwrite(fd, data, size, 0) != (ssize_t)size))
		abort();
	check_dataset(path, size ? data[size - 1] : 0);
	return 0;
}
