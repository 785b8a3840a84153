/* gather: test helper. `gather IDXFILE ARCHIVE...` opens the archives as one
 * dataset (fs/dataset) and writes to stdout, for each field in order, the
 * rows of the sample indices listed in IDXFILE (whitespace separated),
 * exactly as bfs_dataset_gather returns them. Exit 0, or 1 with the error
 * on stderr (open refused, gather failed). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/dataset.h"
#include "fs/readahead.h"

int main(int argc, char **argv)
{
	struct bfs_dataset *ds = NULL;
	struct bfs_readahead *ra = NULL;
	struct bfs_error err = {{0}};
	uint64_t *idx = NULL, v;
	size_t n = 0, cap = 0;
	FILE *f;
	int rc = 1;

	if (argc < 3) {
		fprintf(stderr, "usage: gather IDXFILE ARCHIVE...\n");
		return 2;
	}
	f = fopen(argv[1], "r");
	if (!f) {
		perror(argv[1]);
		return 1;
	}
	while (fscanf(f, "%" SCNu64, &v) == 1) {
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			idx = realloc(idx, cap * sizeof(*idx));
			if (!idx)
				return 1;
		}
		idx[n++] = v;
	}
	fclose(f);
	if (bfs_dataset_open(&ds, (const char *const *)argv + 2,
			     (size_t)argc - 2, &err)) {
		fprintf(stderr, "gather: %s\n", err.msg);
		goto out;
	}
	if (bfs_readahead_create(&ra, ds, &(struct bfs_readahead_opts){0}))
		goto out;
	for (size_t fi = 0; fi < bfs_dataset_nfields(ds); fi++) {
		const struct bfs_field *fl = bfs_dataset_field(ds, fi);
		size_t bytes = n * fl->row_bytes;
		void *buf = malloc(bytes ? bytes : 1);
		int g = buf ? bfs_dataset_gather(ds, fi, idx, n, buf) : -1;
		if (g) {
			fprintf(stderr, "gather: field %s: %s\n", fl->name,
				strerror(-g));
			free(buf);
			goto out;
		}
		bfs_readahead_rows(ra, idx, n); /* on any archive: no crash */
		fwrite(buf, 1, bytes, stdout);
		free(buf);
	}
	rc = fflush(stdout) ? 1 : 0;
out:
	bfs_readahead_destroy(ra);
	bfs_dataset_close(ds);
	free(idx);
	return rc;
}
