/* Logging for the whole tree: one function, a module prefix, a level.
 *
 * Nothing in fs/ or loader/ prints to stdout; everything goes through
 * bfs_log(), which writes one line to stderr (or to the sink the daemon
 * installs, e.g. its log file once it has gone to the background).
 *
 * A line is one line whatever it quotes: the message is escaped
 * (bfs_log_escape), so a file name, a dict key or an error text that
 * holds a newline or a terminal escape cannot forge a line of its own or
 * drive the terminal that shows the log. */
#ifndef BFS_LOG_H
#define BFS_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

enum bfs_log_level {
	BFS_LOG_ERR = 0,
	BFS_LOG_WARN = 1,
	BFS_LOG_INFO = 2,
	BFS_LOG_DEBUG = 3,
};

/* A sink receives one formatted line without its trailing newline. */
typedef void (*bfs_log_sink_fn)(enum bfs_log_level level, const char *line);

/* Log one line "batchfs[module]: message", the message escaped
 * (bfs_log_escape) and cut to about 1 KiB. Thread-safe; never fails.
 * 'module' is a short literal such as "zip" or "pool". */
void bfs_log(enum bfs_log_level level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* 'src' with its control characters escaped, into 'dst' (len bytes,
 * always terminated when len > 0; cut at a character or an escape that
 * does not fit, never inside one): newline, CR and tab as \n, \r, \t; the
 * other C0 bytes and DEL as \xHH; C1 controls (U+0080 .. U+009F, two
 * bytes in UTF-8) and bytes that are not UTF-8 as \xHH for each byte.
 * Printable ASCII (backslash too) and the rest of UTF-8 are kept as they
 * are. Returns dst. */
char *bfs_log_escape(char *dst, size_t len, const char *src);

/* A reason too long for its buffer buf[size] (snprintf cut it at size - 1
 * bytes) ended visibly: "..." after the last whole UTF-8 character that
 * leaves room for it, never half a character. No-op when size < 4. */
void bfs_log_ellipsize(char *buf, size_t size);

/* The message of the last BFS_LOG_ERR line this thread logged since its
 * last bfs_log_err_reset() (without the "batchfs[module]: " prefix), or
 * "" when none: lets a caller up the stack quote the reason a callee
 * logged (the pool names it in a failed batch's last_error). */
const char *bfs_log_err_last(void);
void bfs_log_err_reset(void);

/* Set the most verbose level printed (default BFS_LOG_INFO) and the sink
 * (NULL = stderr). Call before starting threads. */
void bfs_log_setup(enum bfs_log_level max_level, bfs_log_sink_fn sink);

/* Whether a line of 'level' is printed: to skip composing what only a
 * debug line says (a batch's name costs a call into fs/order). */
bool bfs_log_wants(enum bfs_log_level level);

#endif
