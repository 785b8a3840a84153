/* Shared pieces of bench_loader (loader/bench/): configuration, clock, and
 * one loader run to EOF with optional per-batch work. Not installed. */
#ifndef BFS_BENCH_LOADER_H
#define BFS_BENCH_LOADER_H

#include "loader/batchfs_loader.h"

#include <stddef.h>

struct bench_cfg {
	const char *dir;	  /* batch_0 ... batch_{nb-1} */
	int nb;			  /* number of files */
	size_t file_bytes;	  /* size of each file */
	double bytes;		  /* nb * file_bytes */
	int reps;		  /* repetitions; the median is reported */
	unsigned skip;		  /* warm-up batches left out of a window */
	struct bfs_loader_opts o; /* R, C, N as given (mode set per run) */
	int device;		  /* CUDA ordinal */
	unsigned peak_mb, peak_copies; /* P: copy size and count */
	unsigned spin_us;	       /* 0 = 1.2 x file_bytes / E */
	unsigned verify_every;	       /* copy back every n-th batch */
};

/* Per-batch work of a run: 'step' after each next() (before release),
 * 'sync' waits for the consumer stream (CUDA runs). Either may be NULL.
 * Both return 0 or a negative error, which ends the run. */
struct bench_hooks {
	int (*step)(void *arg, const struct bfs_loader_batch *b, void *stream);
	int (*sync)(void *arg, void *stream);
	void *arg;
};

/* Times of one run, seconds. The window starts after the first 'skip'
 * batches were delivered and released (and, with a sync hook, their work
 * on the stream finished) and ends at EOF (after a final sync); it holds
 * window_bytes. The window leaves out the pipeline fill. */
struct bench_run {
	double open_close, next_eof, window, window_bytes;
	double copy_cpu, open_eof; /* copy thread's CPU; open to EOF */
	double next_p50, next_p99; /* next()'s wall time in the window */
};

double bench_now(void);
/* Median of v[0..n) (sorts v). */
double bench_median(double *v, int n);

/* Open a loader with 'o', next/step/release to EOF on 'stream', close.
 * Returns 0, or -1 after printing why to stderr. */
int bench_run_loader(const struct bfs_loader_opts *o, void *stream,
		     unsigned skip, const struct bench_hooks *h,
		     struct bench_run *r);

/* The spin kernel's PTX text ("" when built without cuda.h). */
extern const char bench_spin_ptx[];

/* The GPU part (bench_gpu.c): prints its lines, or one "GPU part: skipped"
 * line when there is no driver or device. 'rf' is the read-only rate of
 * the same files (loader in CPU mode, GB/s) measured by the caller.
 * Returns 0, or 1 when a measurement failed (printed). */
int bench_gpu_part(const struct bench_cfg *c, double rf);

#endif
