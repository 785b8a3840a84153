/* libFuzzer target: tensor geometry (tests/lib/geometry). The input's
 * 64-bit words draw one case (fields, sizes, strides, offsets, dtypes,
 * batch size, indices; zeros once the input is used up); the case's
 * archive is written into a memfd and opened through /proc/self/fd by
 * fs/dataset and fs/layout, and every answer is checked against the
 * independent model: acceptance, row bytes, and each byte of a gathered
 * batch, written between guard pages. A disagreement aborts (a crash for
 * the fuzzer). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fs/log.h"
#include "tests/lib/geometry.h"

struct input {
	const uint8_t *p;
	size_t n, pos;
};

static uint64_t next(void *arg)
{
	struct input *in = arg;
	uint64_t v = 0;

	for (int i = 0; i < 8 && in->pos < in->n; i++)
		v |= (uint64_t)in->p[in->pos++] << (8 * i);
	return v;
}

static void quiet(enum bfs_log_level level, const char *line)
{
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char path[64];
	struct input in = {data, size, 0};
	struct geo_case c;

	if (!path[0]) {
		int fd = memfd_create("geometry", MFD_CLOEXEC);

		if (fd < 0)
			abort();
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		bfs_log_setup(BFS_LOG_ERR, quiet);
	}
	geo_draw(&c, next, &in);
	geo_check(&c, path);
	geo_free(&c);
	return 0;
}
