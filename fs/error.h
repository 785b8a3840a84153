/* A rich error for input validation: which file, which byte offset, why.
 *
 * Functions that validate untrusted bytes take a 'struct bfs_error *' (may
 * be NULL) and fill it when they fail, besides returning -errno. The message
 * reads "FILE: offset N: reason" so users can find the bad byte. */
#ifndef BFS_ERROR_H
#define BFS_ERROR_H

#include <stddef.h>
#include <stdint.h>

#define BFS_ERROR_MAX 512

struct bfs_error {
	char msg[BFS_ERROR_MAX]; /* "" when no error was recorded */
};

/* Offset value meaning "no particular offset": the message omits it. */
#define BFS_NO_OFFSET UINT64_MAX

/* Record "FILE: offset OFF: reason" in 'e' (no-op when e is NULL) and
 * return 'neg_errno' so callers can write
 *   return bfs_error_set(err, -EINVAL, path, off, "bad signature");
 * The first error recorded wins: later calls do not overwrite it. */
int bfs_error_set(struct bfs_error *e, int neg_errno, const char *file,
		  uint64_t offset, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Bytes [s, s+n) from a file, quoted for a message into out (always
 * NUL-terminated): printable ASCII as is, other bytes as \xHH, cut with
 * "..." when out is too small. Returns out. */
const char *bfs_error_quote(char *out, size_t cap, const void *s, size_t n);

#endif
