/* crash_probe: dies the ways the daemon can, with mount/postmortem's
 * handlers installed, for tests/mount/test_mount_postmortem.py.
 *
 *   crash_probe MODE LOG DIR
 *
 * installs the handlers with LOG (a file, appended; "-" = stderr) and:
 *   segv    writes through the address 0x10 (probe_segv)
 *   abort   calls abort() (probe_abort)
 *   bus     opens a dataset over an archive it writes into DIR and makes
 *           its pages fault (the archive shrinks to one page while fstat
 *           of the dataset's descriptor still reports the full size): a
 *           gather faults inside fs/dataset's guard and returns -EIO
 *           (printed: "guarded gather: -5"), then probe_bus touches a
 *           lost row outside the guard: the guard's handler must chain
 *           to ours, which logs and lets the process die of SIGBUS;
 *   heap    reads a byte of a freed block (probe_heap): in an ASan
 *           build, ASan's report then our line (its death callback);
 *           elsewhere it prints the byte and exits 3.
 * Exits 2 on a usage or set-up error; otherwise it should not exit. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/dataset.h"
#include "fs/zip.h"
#include "mount/postmortem.h"
#include "tests/lib/archive.h"

enum { N = 8, ROW = 8192 };

/* Global and not inlined, so the backtrace names them. */
#define PROBE __attribute__((noinline))
PROBE void probe_segv(void);
PROBE void probe_abort(void);
PROBE void probe_bus(const volatile uint8_t *row);
PROBE int probe_heap(void);

volatile uintptr_t probe_address = 0x10;
const uint8_t *volatile probe_freed;

void probe_segv(void)
{
	*(volatile int *)probe_address = 1;
}

void probe_abort(void)
{
	abort();
}

void probe_bus(const volatile uint8_t *row)
{
	printf("unguarded read: %d\n", row[0]);
}

int probe_heap(void)
{
	uint8_t *p = calloc(1, 64);

	probe_freed = p; /* the compiler cannot see the use after free */
	free(p);
	printf("freed: %d\n", probe_freed[8]);
	return 3;
}

static int setup_error(const char *what)
{
	fprintf(stderr, "crash_probe: %s: %s\n", what, strerror(errno));
	return 2;
}

/* The 'bus' mode (see the top comment). */
static int bus(const char *dir)
{
	static uint8_t rows[N * ROW];
	struct ta_tensor ts[] = {
	    {"x", BFS_DT_UINT8, "0", N * ROW, 0, 2, {N, ROW}, {ROW, 1}},
	};
	struct ta_storage st[] = {{"0", rows, sizeof(rows)}};
	char path[512], other[520];
	const char *pp = path;
	struct bfs_dataset *ds;
	struct bfs_shard_info si;
	uint64_t idx[] = {N - 1};
	const void *row;
	uint8_t *ar, dst[ROW];
	size_t n = ta_build(&ar, ts, 1, st, 1, "3\n", NULL, NULL);
	int fd;

	snprintf(path, sizeof(path), "%s/probe.pt", dir);
	snprintf(other, sizeof(other), "%s/probe.size", dir);
	if (ta_write(path, ar, n) < 0 || bfs_dataset_open(&ds, &pp, 1, NULL))
		return setup_error("archive");
	free(ar);
	if (bfs_dataset_gather(ds, 0, idx, 1, dst) != 0)
		return setup_error("first gather");
	bfs_dataset_shard(ds, 0, &si);
	fd = open(other, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || ftruncate(fd, (off_t)n) < 0 || dup2(fd, si.zip->fd) < 0 ||
	    truncate(path, 4096) < 0)
		return setup_error("shrink");
	printf("guarded gather: %d\n", bfs_dataset_gather(ds, 0, idx, 1, dst));
	fflush(stdout);
	if (bfs_dataset_row(ds, 0, N - 1, &row) < 0)
		return setup_error("row");
	probe_bus(row);
	return 1;
}

int main(int argc, char **argv)
{
	int fd;

	if (argc != 4)
		return 2;
	fd = strcmp(argv[2], "-")
		 ? open(argv[2], O_WRONLY | O_CREAT | O_APPEND, 0644)
		 : STDERR_FILENO;
	if (fd < 0 || bfs_postmortem_install(fd) < 0)
		return setup_error(argv[2]);
	if (!strcmp(argv[1], "segv"))
		probe_segv();
	else if (!strcmp(argv[1], "abort"))
		probe_abort();
	else if (!strcmp(argv[1], "bus"))
		return bus(argv[3]);
	else if (!strcmp(argv[1], "heap"))
		return probe_heap();
	return 2;
}
