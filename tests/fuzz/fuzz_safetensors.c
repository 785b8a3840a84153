/* libFuzzer target: the safetensors header parser shared by `batchfs
 * inspect` and the loader library, over arbitrary bytes taken as a whole
 * file, with both flag values. Every refusal must give a reason; every
 * accepted header must satisfy what readers rely on: tensors tile the data
 * with no hole or overlap and the data ends exactly at the file's end. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "fs/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int by_begin(const void *a, const void *b)
{
	const struct bfs_st_tensor *x = a, *y = b;

	/* safetensors orders by the (begin, end) pair: an empty tensor and a
	 * non-empty one may share a begin. */
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return x->end < y->end ? -1 : x->end > y->end;
}

static void check_accepted(const struct bfs_st_header *h, size_t size)
{
	uint64_t at = 0;
	struct bfs_st_tensor *t;

	if (h->data_start != 8 + h->header_len || h->file_size != size)
		__builtin_trap();
	t = malloc((h->ntensors ? h->ntensors : 1) * sizeof(*t));
	if (!t)
		return;
	for (size_t i = 0; i < h->ntensors; i++)
		t[i] = h->tensors[i];
	qsort(t, h->ntensors, sizeof(*t), by_begin);
	for (size_t i = 0; i < h->ntensors; i++) {
		if (t[i].begin != at || t[i].end < t[i].begin || !t[i].name)
			__builtin_trap();
		at = t[i].end;
	}
	if (h->data_start + at != size)
		__builtin_trap();
	free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const unsigned flags[] = {0, BFS_ST_ANY_DTYPE};

	for (size_t f = 0; f < 2; f++) {
		struct bfs_st_error err = {0};
		struct bfs_st_header *h = NULL;

		if (bfs_st_parse(data, size, size, flags[f], &h, &err) != 0) {
			if (!err.reason[0]) /* every refusal says why */
				__builtin_trap();
			continue;
		}
		check_accepted(h, size);
		bfs_st_free(h);
	}
	return 0;
}
