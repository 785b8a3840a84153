/* tools/cli: small helpers shared by the subcommands' command lines. */
#ifndef BFS_TOOLS_CLI_H
#define BFS_TOOLS_CLI_H

#include <stdio.h>

/* Report bad usage of `batchfs CMD`: print "batchfs CMD: MSG[: ARG]" and
 * then the command's usage text (usage(stderr)) on stderr. Returns 2, the
 * exit status of bad usage, so callers write
 *   return bfs_cli_bad_usage("pack", usage, "missing -o OUT.pt", NULL); */
int bfs_cli_bad_usage(const char *cmd, void (*usage)(FILE *), const char *msg,
		      const char *arg);

#endif
