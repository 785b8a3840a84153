/* zipcheck FILE...: open each archive with fs/zip, run fs/pickle over its
 * data.pkl and print the tensors ("name dtype key offset [sizes] [strides]").
 * On the first refusal prints the error message to stderr and exits 1.
 * Used by tests/interop/test_corrupt_archives.py until (and beside)
 * `batchfs inspect`. */
#include <errno.h>
#include <stdio.h>

#include "fs/pickle.h"
#include "fs/zip.h"

static void print_dims(const int64_t *d, int n)
{
	printf(" [");
	for (int i = 0; i < n; i++)
		printf("%s%lld", i ? "," : "", (long long)d[i]);
	printf("]");
}

/* Run the pickle VM over record 'e', labelled "PATH:RECORD" as
 * fs/dataset does. */
static int load_pickle(const struct bfs_zip *z, const struct bfs_zip_entry *e,
		       const char *path, struct bfs_pickle_result *r,
		       struct bfs_error *err)
{
	char label[4096];

	snprintf(label, sizeof(label), "%s:%s", path, e->name);
	return bfs_pickle_load(bfs_zip_data(z, e), e->size, label, 0, r, err);
}

static int check(const char *path)
{
	struct bfs_error err = {""};
	struct bfs_zip *z = NULL;
	struct bfs_pickle_result r = {0};
	const struct bfs_zip_entry *e;
	int rc = bfs_zip_open(&z, path, &err);

	if (rc == 0) {
		e = bfs_zip_find(z, "data.pkl");
		if (!e)
			rc = bfs_error_set(&err, -EINVAL, path, BFS_NO_OFFSET,
					   "no data.pkl record");
		else
			rc = load_pickle(z, e, path, &r, &err);
	}
	if (rc) {
		fprintf(stderr, "zipcheck: %s\n", err.msg);
		bfs_zip_close(z);
		return 1;
	}
	for (size_t i = 0; i < r.n_tensors; i++) {
		const struct bfs_pickle_tensor *t = &r.tensors[i];
		printf("%s %s %s %llu", t->name,
		       bfs_dtype_info(t->dtype)->torch_name, t->storage_key,
		       (unsigned long long)t->offset);
		print_dims(t->size, t->ndim);
		print_dims(t->stride, t->ndim);
		printf("\n");
	}
	bfs_pickle_result_free(&r);
	bfs_zip_close(z);
	return 0;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (check(argv[i]))
			return 1;
	return argc > 1 ? 0 : 2;
}
