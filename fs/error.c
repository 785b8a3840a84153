/* bfs_error_set: formats validation errors uniformly; bfs_error_quote
 * shows untrusted bytes in them safely. */
#include "fs/error.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

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

const char *bfs_error_quote(char *out, size_t cap, const void *s, size_t n)
{
	const unsigned char *p = s;
	size_t pos = 0;

	if (!cap)
		return out;
	for (size_t i = 0; i < n; i++) {
		char item[5];
		int k = p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\'
			    ? snprintf(item, sizeof(item), "%c", p[i])
			    : snprintf(item, sizeof(item), "\\x%02x", p[i]);

		/* Each step leaves room for "..." and the NUL. */
		if (pos + (size_t)k + 4 > cap) {
			if (pos + 4 <= cap) {
				memcpy(out + pos, "...", 3);
				pos += 3;
			}
			break;
		}
		memcpy(out + pos, item, (size_t)k);
		pos += (size_t)k;
	}
	out[pos] = 0;
	return out;
}
