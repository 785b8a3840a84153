/* TEMPORARY scaffolding while subcommands are being written in parallel:
 * weak definitions that a real implementation overrides. Deleted before
 * the foundation lands; nothing may depend on it. */
#include <stdio.h>

#include "tools/cmd.h"

#define SCAFFOLD(fn)                                                          \
	__attribute__((weak)) int fn(int argc, char **argv)                   \
	{                                                                     \
		fprintf(stderr, "batchfs %s: not built yet\n", argv[0]);      \
		return 1;                                                     \
	}
SCAFFOLD(bfs_cmd_mount)
SCAFFOLD(bfs_cmd_umount)
SCAFFOLD(bfs_cmd_pack)
SCAFFOLD(bfs_cmd_inspect)
SCAFFOLD(bfs_cmd_bench)
