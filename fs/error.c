/* bfs_error_set: formats validation errors uniformly. */
#include "fs/error.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

int bfs_error_set(struct bfs_error *e, int neg_errno, const char *file,
		  uint64_t offset, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!e || e->msg[0])
		return neg_errno;
	if (offset == BFS_NO_OFFSET)
		n = snprintf(e->msg, sizeof(e->msg),
			     "%s: ", file ? file : "(input)");
	else
		n = snprintf(e->msg, sizeof(e->msg), "%s: offset %" PRIu64 ": ",
			     file ? file : "(input)", offset);
	if (n < 0 || (size_t)n >= sizeof(e->msg))
		return neg_errno;
	va_start(ap, fmt);
	vsnprintf(e->msg + n, sizeof(e->msg) - (size_t)n, fmt, ap);
	va_end(ap);
	return neg_errno;
}
