/* bfs_log: one line per call, written with a single write() so lines from
 * concurrent threads never interleave. The level and sink are set once at
 * start-up (bfs_log_setup) before any thread exists and are read-only after,
 * so they need no lock. The last error line is kept per thread (no lock,
 * nothing shared): it is what the thread that logged it reports up.
 *
 * The message is formatted first, then escaped into the line: what the
 * format quotes (file names, dict keys, errors naming them) comes from
 * outside, and the log is read line by line, often on a terminal. */
#include "fs/log.h"

#include <stdbool.h>
#include <stdint.h>
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

bool bfs_log_wants(enum bfs_log_level level)
{
	return level <= log_max;
}

/* The length of the UTF-8 character at s (at most 'left' bytes there),
 * or 0 when s does not start a well-formed one (a stray continuation
 * byte, an overlong form, a surrogate, past U+10FFFF, cut short) or
 * starts a C1 control (U+0080 .. U+009F): both are escaped byte by byte. */
static size_t utf8_kept(const unsigned char *s, size_t left)
{
	size_t n = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : 2;
	uint32_t cp = s[0] & (0x7f >> n);

	if (s[0] < 0xc2 || s[0] > 0xf4 || n > left)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if (cp < 0xa0 || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
	    (cp >= 0xd800 && cp < 0xe000) || cp > 0x10ffff)
		return 0;
	return n;
}

char *bfs_log_escape(char *dst, size_t len, const char *src)
{
	const unsigned char *s = (const unsigned char *)src;
	size_t left = strlen(src), o = 0;

	if (!len)
		return dst;
	while (left) {
		char esc[5];
		const char *piece = (const char *)s;
		size_t n = 1, k = 1; /* bytes taken from s, put in dst */

		if (*s == '\n' || *s == '\r' || *s == '\t') {
			esc[0] = '\\';
			esc[1] = *s == '\n' ? 'n' : *s == '\r' ? 'r' : 't';
			piece = esc;
			k = 2;
		} else if (*s >= 0x80 && (n = utf8_kept(s, left)) > 0) {
			k = n;
		} else if (*s < 0x20 || *s >= 0x7f) {
			n = 1;
			k = (size_t)snprintf(esc, sizeof(esc), "\\x%02x", *s);
			piece = esc;
		}
		if (o + k >= len)
			break;
		memcpy(dst + o, piece, k);
		o += k;
		s += n;
		left -= n;
	}
	dst[o] = '\0';
	return dst;
}

void bfs_log_ellipsize(char *buf, size_t size)
{
	size_t n;

	if (size < 4)
		return;
	n = size - 4; /* the first byte dropped, unless it continues one */
	while (n > 0 && ((unsigned char)buf[n] & 0xc0) == 0x80)
		n--;
	memcpy(buf + n, "...", 4);
}

void bfs_log(enum bfs_log_level level, const char *module, const char *fmt, ...)
{
	char msg[1024], line[1024];
	va_list ap;
	int n;

	if (level > log_max)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	n = snprintf(line, sizeof(line), "batchfs[%s]: ", module);
	/* room for the '\n' of a line to stderr */
	bfs_log_escape(line + n, sizeof(line) - 1 - (size_t)n, msg);
	if (level == BFS_LOG_ERR)
		snprintf(err_last, sizeof(err_last), "%s", line + n);
	if (log_sink) {
		log_sink(level, line);
		return;
	}
	n = (int)strlen(line);
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, (size_t)n) < 0) {
		/* Nowhere left to report a failed log write. */
	}
}
