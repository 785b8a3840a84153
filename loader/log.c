/* Loader diagnostics: one line per message, "batchfs[loader]: ...", to
 * stderr or to the caller's callback. Never stdout. No global state: the
 * logger lives in the loader (or on the stack during open). */
#include "loader/internal.h"

#include <stdio.h>

/* Format and emit one line. Thread-safe (one fprintf or one callback). */
void bfs_loader_log(const struct bfs_loader_logger *lg,
		    enum bfs_loader_log_level level, const char *fmt, ...)
{
	char line[1024];
	int max = lg && lg->max_level ? lg->max_level : BFS_LOADER_LOG_INFO;
	int n;
	va_list ap;

	if ((int)level > max)
		return;
	n = snprintf(line, sizeof(line), "batchfs[loader]: ");
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	if (lg && lg->fn)
		lg->fn(lg->arg, level, line);
	else
		fprintf(stderr, "%s\n", line);
}
