/* Real-GPU check of the loader (run by tests/gpu/test_gpu_loader.sh): the
 * bytes that reach device memory equal the files. Writes batch files, reads
 * them in CUDA mode (3 slots, so slots are reused), copies every batch back
 * with cuMemcpyDtoH on the legacy stream (which next() made wait on the
 * copy) and compares. Exits 77 with "skip: ..." without a driver or GPU.
 * Usage: gpu_loader_check DIR */
#include "loader/batchfs_loader.h"
#include "tests/loader/st_write.h"

#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define NB 12

int main(int argc, char **argv)
{
	void *dl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	CUresult (*init)(unsigned), (*count)(int *), (*get)(CUdevice *, int);
	CUresult (*retain)(CUcontext *, CUdevice), (*setcur)(CUcontext);
	CUresult (*dtoh)(void *, CUdeviceptr, size_t);
	CUresult (*release)(CUdevice);
	struct bfs_loader_batch b;
	struct bfs_loader *L;
	unsigned char *want[NB], *got;
	size_t size[NB];
	CUcontext ctx;
	CUdevice dev;
	char path[4200];
	int n = 0, bad = 0, rc;

	if (argc != 2)
		return 2;
	if (!dl || !(init = (CUresult(*)(unsigned))dlsym(dl, "cuInit")) ||
	    init(0) != CUDA_SUCCESS) {
		printf("skip: no CUDA driver/GPU\n");
		return 77;
	}
	count = (CUresult(*)(int *))dlsym(dl, "cuDeviceGetCount");
	get = (CUresult(*)(CUdevice *, int))dlsym(dl, "cuDeviceGet");
	retain = (CUresult(*)(CUcontext *, CUdevice))dlsym(
	    dl, "cuDevicePrimaryCtxRetain");
	release =
	    (CUresult(*)(CUdevice))dlsym(dl, "cuDevicePrimaryCtxRelease_v2");
	setcur = (CUresult(*)(CUcontext))dlsym(dl, "cuCtxSetCurrent");
	dtoh = (CUresult(*)(void *, CUdeviceptr, size_t))dlsym(
	    dl, "cuMemcpyDtoH_v2");
	if (count(&n) != CUDA_SUCCESS || n < 1) {
		printf("skip: no CUDA driver/GPU\n");
		return 77;
	}
	if (get(&dev, 0) || retain(&ctx, dev) || setcur(ctx)) {
		printf("FAIL: cannot use device 0\n");
		return 1;
	}
	for (int k = 0; k < NB; k++) {
		uint64_t rows = 1000 + 4099 * (uint64_t)k;
		size_t n1 = rows * 16, n2 = rows * 4;
		unsigned char *d = malloc(n1 + n2);
		struct st_tensor t[2] = {{"x", "F32", 2, {rows, 4}, d, n1},
					 {"y", "I32", 1, {rows}, d + n1, n2}};
		struct stat sb;
		st_fill(d, n1 + n2, (uint64_t)k);
		snprintf(path, sizeof(path), "%s/batch_%d", argv[1], k);
		if (st_write(path, t, 2, 0, (unsigned)k, 0) < 0 ||
		    stat(path, &sb) < 0)
			return 2;
		size[k] = (size_t)sb.st_size;
		want[k] = malloc(size[k]);
		FILE *f = fopen(path, "rb");
		if (!f || fread(want[k], 1, size[k], f) != size[k])
			return 2;
		fclose(f);
		free(d);
	}
	rc = bfs_loader_open(
	    &L, &(struct bfs_loader_opts){
		    .dir = argv[1], .mode = BFS_LOADER_CUDA, .chunk = 1 << 20});
	if (rc < 0) {
		printf("FAIL: open in CUDA mode: %s\n",
		       bfs_loader_strerror(rc));
		return 1;
	}
	for (int k = 0; (rc = bfs_loader_next(L, &b, NULL)) == 0; k++) {
		got = malloc(b.nbytes);
		if (b.index != (uint64_t)k || b.nbytes != size[k] ||
		    dtoh(got, b.dev, b.nbytes) != CUDA_SUCCESS ||
		    memcmp(got, want[k], size[k]) != 0) {
			printf("FAIL: batch %d differs on the device\n", k);
			bad++;
		}
		free(got);
		bfs_loader_release(L, &b, NULL);
	}
	if (rc != BFS_LOADER_EOF) {
		printf("FAIL: next: %s\n", bfs_loader_errmsg(L));
		bad++;
	}
	bfs_loader_close(L);
	release(dev);
	printf(bad ? "FAIL\n" : "ok: %d batches verified on the device\n", NB);
	return bad ? 1 : 0;
}
