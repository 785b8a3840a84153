/* Helpers of the tests that run the loader (and play its CUDA user)
 * against the fake driver: batch files to read, the files' bytes, the
 * driver state a clean close leaves, streams of the primary context and a
 * stream capture running in a thread of its own. Programs using these link
 * build/tests/fake/libcuda.so.1 directly. cmocka assertions inside. */
#ifndef BFS_TEST_CUDA_UTIL_H
#define BFS_TEST_CUDA_UTIL_H

#include "loader/batchfs_loader.h"

#include <cuda.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

/* Log callback that keeps the lines (from any thread) instead of printing
 * them; ct_log_wait waits, at most timeout_s, until a line containing
 * 'needle' has come since the last ct_log_reset: 0, or -1 on timeout. */
void ct_quiet(void *arg, enum bfs_loader_log_level lv, const char *line);
void ct_log_reset(void);
int ct_log_wait(const char *needle, unsigned timeout_s);
/* Whether a line containing 'needle' came since the last reset. */
int ct_logged(const char *needle);

/* nb batches of varied sizes (batch 1 with a header > 4 KiB) in a new
 * directory of the work dir, written into dir[len]. Returns dir. */
const char *ct_make_batches(char *dir, size_t len, unsigned nb);
/* The bytes of dir/batch_k (malloc'ed) and their count. */
unsigned char *ct_slurp(const char *dir, uint64_t k, size_t *n);
/* A loader of dir in mode CUDA ('slots' and 'flags' as in the options, 0
 * = default), logging into ct_quiet; the open must succeed. */
struct bfs_loader *ct_open(const char *dir, unsigned slots, unsigned flags);
/* next() every batch of dir on 'stream' (each checked there, in stream
 * order, after check_delay_us, against its file), release each on
 * 'stream', then expect BFS_LOADER_EOF. */
void ct_read_all(struct bfs_loader *L, const char *dir, unsigned nb,
		 CUstream stream, unsigned check_delay_us);
/* No misuse counted, every check passed, and no driver object alive. */
void ct_expect_clean_driver(void);

/* The device's primary context (retained once for the program). */
CUcontext ct_primary(void);
/* A stream of the primary context made with 'flags'; *id = the fake's id
 * for it (as in struct fake_rec), when id is not NULL. */
CUstream ct_stream(unsigned flags, unsigned *id);
void ct_stream_destroy(CUstream s);

/* A thread that begins a capture in 'mode' on a stream of its own and
 * holds it until ct_capture_end, which returns what cuStreamEndCapture
 * said (or what cuStreamBeginCapture said if that failed). */
struct ct_capture;
struct ct_capture *ct_capture_start(int mode);
CUresult ct_capture_end(struct ct_capture *c);

/* Run the group in $BFS_TEST_TMP (or a temp dir). Returns the exit code. */
int ct_run(const struct CMUnitTest *tests, size_t n);

#endif
