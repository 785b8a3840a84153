/* Batch-file headers for the loader: a thin adapter over fs/safetensors.
 *
 * The parser itself is fs/safetensors.c, compiled into this library with
 * its flags (hidden visibility, see loader/module.mk). This file turns its
 * result into the loader's public tensor records (struct
 * bfs_loader_tensor: offsets from the start of the file, sorted in file
 * layout order) and its error into the loader's message
 * "header offset N: reason (tensor "NAME")". Unknown dtype codes are
 * accepted (elem_size 0): the loader only moves bytes. */
#include "loader/internal.h"

#include "fs/safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int by_offset(const void *a, const void *b)
{
	const struct bfs_loader_tensor *x = a, *y = b;

	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	return (x->nbytes > y->nbytes) - (x->nbytes < y->nbytes);
}

static void format_error(const struct bfs_st_error *e, int rc, char *msg,
			 size_t msglen)
{
	if (rc == -ENOMEM)
		snprintf(msg, msglen, "out of memory parsing the header");
	else if (e->tensor[0])
		snprintf(msg, msglen, "header offset %llu: %s (tensor \"%s\")",
			 (unsigned long long)e->offset, e->reason, e->tensor);
	else
		snprintf(msg, msglen, "header offset %llu: %s",
			 (unsigned long long)e->offset, e->reason);
}

int bfs_loader_meta_parse(const unsigned char *file, uint64_t size,
			  struct bfs_loader_meta **out, char *msg,
			  size_t msglen)
{
	struct bfs_st_error e = {0};
	struct bfs_st_header *h = NULL;
	struct bfs_loader_meta *m = NULL;
	int rc;

	*out = NULL;
	msg[0] = 0;
	rc = bfs_st_parse(file, (size_t)size, size, BFS_ST_ANY_DTYPE, &h, &e);
	if (rc < 0)
		goto err;
	rc = -ENOMEM;
	m = calloc(1, sizeof(*m));
	if (!m)
		goto err_free_header;
	m->tensors = calloc(h->ntensors ? h->ntensors : 1, sizeof(*m->tensors));
	if (!m->tensors)
		goto err_free_meta;
	for (size_t k = 0; k < h->ntensors; k++) {
		const struct bfs_st_tensor *s = &h->tensors[k];
		struct bfs_loader_tensor *t = &m->tensors[k];
		t->name = s->name;
		memcpy(t->dtype, s->dtype, sizeof(t->dtype));
		t->elem_size = s->elem_size;
		t->ndim = s->ndim;
		t->shape = s->shape;
		t->nbytes = s->end - s->begin;
		t->offset = h->data_start + s->begin;
	}
	qsort(m->tensors, h->ntensors, sizeof(*m->tensors), by_offset);
	m->ntensors = (uint32_t)h->ntensors;
	m->data_start = h->data_start;
	m->file_size = h->file_size;
	m->st = h;
	*out = m;
	return 0;
err_free_meta:
	free(m);
err_free_header:
	bfs_st_free(h);
err:
	format_error(&e, rc, msg, msglen);
	return rc;
}

void bfs_loader_meta_free(struct bfs_loader_meta *m)
{
	if (!m)
		return;
	free(m->tensors);
	bfs_st_free(m->st);
	free(m);
}
