/* bfs_log: one line per call, written with a single write() so lines from
 * concurrent threads never interleave. The level and sink are set once at
 * start-up (bfs_log_setup) before any thread exists and are read-only after,
 * so they need no lock. The last error line is kept per thread (no lock,
 * nothing shared): it is what the thread that logged it reports up. */
#include "fs/log.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static enum bfs_log_level log_max = BFS_LOG_INFO;
static bfs_log_sink_fn log_sink;
static __thread char err_last[512];

const char *bfs_log_err_last(void)
{
	return err_last;
}

void bfs_log_err_reset(void)
{
	err_last[0] = '\0';
}

void bfs_log_setup(enum bfs_log_level max_level, bfs_log_sink_fn sink)
{
	log_max = max_level;
	log_sink = sink;
}

void bfs_log(enum bfs_log_level level, const char *module, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n;

	if (level > log_max)
		return;
	n = snprintf(line, sizeof(line), "batchfs[%s]: ", module);
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	if (level == BFS_LOG_ERR)
		snprintf(err_last, sizeof(err_last), "%s", line + n);
	if (log_sink) {
		log_sink(level, line);
		return;
	}
	n = (int)strnlen(line, sizeof(line) - 2);
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, (size_t)n) < 0) {
		/* Nowhere left to report a failed log write. */
	}
}
