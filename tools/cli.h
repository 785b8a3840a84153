/* tools/cli: small helpers shared by the subcommands' command lines. */
#ifndef BFS_TOOLS_CLI_H
#define BFS_TOOLS_CLI_H

#include <stdint.h>
#include <stdio.h>

/* Report bad usage of `batchfs CMD` on stderr in three lines or so:
 * "batchfs CMD: MSG[: ARG]", the synopsis that opens the command's usage
 * text (the "usage:" line and the lines of its other forms; usage() is
 * called on a memory stream for it), and "Try 'batchfs CMD --help' for
 * more information." Returns 2, the exit status of bad usage, so callers
 * write
 *   return bfs_cli_bad_usage("pack", usage, "missing -o OUT.pt", NULL); */
int bfs_cli_bad_usage(const char *cmd, void (*usage)(FILE *), const char *msg,
		      const char *arg);

/* 's' as a number of GB (10^9 bytes; a fraction too: "0.5") in
 * [0.000001, 1000000], into *bytes. 0, or -1 when it is none. */
int bfs_cli_parse_gb(const char *s, uint64_t *bytes);

#endif
