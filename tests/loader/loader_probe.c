/* Test helper for the driver-detection tests: writes two small batch
 * files, opens a loader in the mode named by argv[1] (auto|cpu|cuda) and
 * prints one line: "mode=cpu|cuda rc=N" (rc of open, then the result of
 * reading both batches, "read=ok" or "read=<rc>"). Log lines go to stderr.
 * Usage: loader_probe MODE DIR */
#include "loader/batchfs_loader.h"
#include "tests/loader/st_write.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
	unsigned char data[3000];
	struct st_tensor t = {.name = "x",
			      .dtype = "U8",
			      .ndim = 2,
			      .shape = {1000, 3},
			      .data = data,
			      .nbytes = sizeof(data)};
	struct bfs_loader_opts o = {0};
	struct bfs_loader_batch b;
	struct bfs_loader *L;
	char path[4200];
	int rc;

	if (argc != 3)
		return 2;
	st_fill(data, sizeof(data), 7);
	for (int k = 0; k < 2; k++) {
		snprintf(path, sizeof(path), "%s/batch_%d", argv[2], k);
		if (st_write(path, &t, 1, 0, (unsigned)k, 0) < 0)
			return 2;
	}
	o.dir = argv[2];
	o.mode = strcmp(argv[1], "cuda") == 0  ? BFS_LOADER_CUDA
		 : strcmp(argv[1], "cpu") == 0 ? BFS_LOADER_CPU
					       : BFS_LOADER_AUTO;
	rc = bfs_loader_open(&L, &o);
	if (rc < 0) {
		printf("mode=none rc=%d\n", rc);
		return 0;
	}
	printf("mode=%s rc=0",
	       bfs_loader_mode(L) == BFS_LOADER_CUDA ? "cuda" : "cpu");
	for (int k = 0; k < 2; k++) {
		rc = bfs_loader_next(L, &b, NULL);
		if (rc == 0 && b.host &&
		    memcmp(b.tensors[0].host, data, sizeof(data)) != 0)
			rc = -1000;
		if (rc == 0)
			rc = bfs_loader_release(L, &b, NULL);
		if (rc)
			break;
	}
	if (rc == 0)
		rc = bfs_loader_next(L, &b, NULL) == BFS_LOADER_EOF ? 0 : -1001;
	printf(rc ? " read=%d\n" : " read=ok\n", rc);
	bfs_loader_close(L);
	return 0;
}
