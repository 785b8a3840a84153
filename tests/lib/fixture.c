/* tests/lib/fixture: see fixture.h. The fields' storages are built in
 * memory (filled ones malloc'd) and freed once the source is written; the
 * directory is removed depth first without following links (nftw). */
#include "tests/lib/fixture.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/lib/npy_header.h"

char *tf_path(const struct tf_fixture *fx, const char *name, char *buf,
	      size_t cap)
{
	int n = snprintf(buf, cap, "%s/%s", fx->dir, name);

	return n >= 0 && (size_t)n < cap ? buf : NULL;
}

static size_t numel(const struct tf_field *f)
{
	size_t n = 1;

	for (int d = 0; d < f->ndim; d++)
		n *= (size_t)f->shape[d];
	return n;
}

static size_t bytes(const struct tf_field *f)
{
	return numel(f) * bfs_dtype_info(f->dtype)->size;
}

/* The elements of f: its data, or *owned, calloc'd and filled (NULL on
 * -ENOMEM). */
static const void *elems(const struct tf_field *f, void **owned)
{
	*owned = NULL;
	if (f->data)
		return f->data;
	*owned = calloc(1, bytes(f) + 1);
	if (*owned && f->fill)
		f->fill(*owned, numel(f));
	return *owned;
}

int tf_write_archive(const char *path, const struct tf_field *fields, size_t n)
{
	struct ta_tensor *ts = calloc(n + 1, sizeof(*ts));
	struct ta_storage *st = calloc(n + 1, sizeof(*st));
	void **owned = calloc(n + 1, sizeof(*owned));
	char(*keys)[24] = calloc(n + 1, sizeof(*keys));
	int rc = ts && st && owned && keys ? 0 : -ENOMEM;
	uint8_t *b;
	size_t len;

	for (size_t i = 0; rc == 0 && i < n; i++) {
		const struct tf_field *f = &fields[i];
		int64_t stride = 1;

		snprintf(keys[i], sizeof(keys[i]), "%zu", i);
		ts[i] = (struct ta_tensor){.name = f->name,
					   .dtype = f->dtype,
					   .key = keys[i],
					   .numel = (int64_t)numel(f),
					   .ndim = f->ndim};
		for (int d = f->ndim - 1; d >= 0; d--) {
			ts[i].size[d] = f->shape[d];
			ts[i].stride[d] = stride;
			stride *= f->shape[d];
		}
		st[i] =
		    (struct ta_storage){keys[i], elems(f, &owned[i]), bytes(f)};
		if (!st[i].data && st[i].size)
			rc = -ENOMEM;
	}
	if (rc == 0) {
		len = ta_build(&b, ts, n, st, n, "3\n", NULL, NULL);
		rc = ta_write(path, b, len);
		free(b);
	}
	for (size_t i = 0; owned && i < n; i++)
		free(owned[i]);
	free(keys);
	free(owned);
	free(st);
	free(ts);
	return rc;
}

static int write_npy(const char *dir, const struct tf_field *fields, size_t n)
{
	char path[sizeof(((struct tf_fixture *)0)->path) + 300];
	int rc = mkdir(dir, 0755) ? -errno : 0;

	for (size_t i = 0; rc == 0 && i < n; i++) {
		const struct tf_field *f = &fields[i];
		void *owned;
		const void *data = elems(f, &owned);

		snprintf(path, sizeof(path), "%s/%s.npy", dir, f->name);
		rc = !data && bytes(f)
			 ? -ENOMEM
			 : ta_npy_write(path, f->dtype, f->ndim, f->shape, data,
					bytes(f), f->align ? f->align : 64);
		free(owned);
	}
	return rc;
}

static int write_demo(const char *path, int64_t rows)
{
	const char *bin = getenv("BATCHFS");
	char cmd[1024];

	if (!bin)
		return -ENOENT;
	snprintf(cmd, sizeof(cmd), "'%s' pack --demo %lld -o '%s' >/dev/null",
		 bin, (long long)rows, path);
	return system(cmd) == 0 ? 0 : -EIO;
}

static int write_source(struct tf_fixture *fx, const struct tf_spec *spec)
{
	switch (spec->format) {
	case TF_ARCHIVE:
		return tf_write_archive(fx->path, spec->fields, spec->nfields);
	case TF_NPY:
		return write_npy(fx->path, spec->fields, spec->nfields);
	case TF_DEMO:
		return write_demo(fx->path, spec->demo_rows);
	}
	return -EINVAL;
}

/* The dataset, layout and order of the source at fx->path. */
static int open_all(struct tf_fixture *fx, const struct tf_spec *spec)
{
	const char *paths[1] = {fx->path};
	struct bfs_order_opts o = spec->order;
	int rc = bfs_dataset_open(&fx->ds, paths, 1, &fx->err);

	if (rc || !o.batch_size)
		return rc;
	rc = bfs_layout_init(&fx->layout, fx->ds, o.batch_size, &fx->err);
	if (rc)
		return rc;
	if (!o.n)
		o.n = bfs_dataset_samples(fx->ds);
	return bfs_order_create(&fx->order, &o, &fx->err);
}

int tf_setup(struct tf_fixture *fx, const struct tf_spec *spec)
{
	const char *tmp = getenv("BFS_TEST_TMP"), *name;
	int rc, n;

	memset(fx, 0, sizeof(*fx));
	n = snprintf(fx->dir, sizeof(fx->dir), "%s/fixture.XXXXXX",
		     tmp ? tmp : "/tmp");
	if (n < 0 || (size_t)n >= sizeof(fx->dir)) {
		snprintf(fx->err.msg, sizeof(fx->err.msg),
			 "$BFS_TEST_TMP is too long for %zu bytes",
			 sizeof(fx->dir));
		fx->dir[0] = '\0';
		return -ENAMETOOLONG;
	}
	if (!mkdtemp(fx->dir)) {
		rc = -errno;
		snprintf(fx->err.msg, sizeof(fx->err.msg), "mkdtemp %.300s: %s",
			 fx->dir, strerror(-rc));
		fx->dir[0] = '\0';
		return rc;
	}
	if (!spec || (!spec->nfields && spec->format != TF_DEMO))
		return 0;
	name = spec->name ? spec->name : "data";
	if (!tf_path(fx, name, fx->path, sizeof(fx->path))) {
		snprintf(fx->err.msg, sizeof(fx->err.msg),
			 "%s/%.100s: too long for %zu bytes", fx->dir, name,
			 sizeof(fx->path));
		return -ENAMETOOLONG;
	}
	rc = write_source(fx, spec);
	if (rc) {
		snprintf(fx->err.msg, sizeof(fx->err.msg), "writing %.300s: %s",
			 fx->path, strerror(-rc));
		return rc;
	}
	return spec->write_only ? 0 : open_all(fx, spec);
}

static int remove_one(const char *path, const struct stat *st, int type,
		      struct FTW *ftw)
{
	return remove(path) ? -errno : 0;
}

int tf_teardown(struct tf_fixture *fx)
{
	int rc = 0;

	bfs_order_destroy(fx->order);
	bfs_layout_fini(&fx->layout);
	bfs_dataset_close(fx->ds);
	if (fx->dir[0] && !fx->keep)
		rc = nftw(fx->dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
	memset(fx, 0, sizeof(*fx));
	return rc < 0 ? rc : 0;
}
