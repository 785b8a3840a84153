/* tools/bench_rows: `batchfs bench --rows`, the device's random-read limit
 * for a dataset's rows: what a reader that knows which rows it needs, and
 * reads each with pread, gets from the disk (the baseline of the
 * benchmark's "does not fit in memory" part). */
#ifndef BFS_TOOLS_BENCH_ROWS_H
#define BFS_TOOLS_BENCH_ROWS_H

#include <stdbool.h>
#include <stdint.h>

/* Read the rows (every fixed field) of the dataset of paths[0..n) in a
 * random order (seeded), one pread per row and field, from 'threads'
 * threads, the files advised POSIX_FADV_RANDOM; or, with a 'depth' (not
 * 0), from one thread keeping that many reads in flight on an io_uring;
 * 'limit' samples at most (0: all). Prints one line "rows samples=..
 * bytes=.. seconds=.. samples/s=.. threads=.. depth=..". 'direct': read
 * the pages holding each row with O_DIRECT instead (no page cache).
 * Returns 0, or 1 with the reason printed. */
int bfs_bench_rows(char **paths, int n, unsigned threads, unsigned depth,
		   uint64_t seed, uint64_t limit, bool direct);

#endif
