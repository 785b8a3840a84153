/* batchfs: one command, subcommands mount, umount, pack, inspect, bench.
 * This file only dispatches; each subcommand parses its own options. */
#include <stdio.h>
#include <string.h>

#include "tools/cmd.h"
#include "tools/version.h"

static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
} cmds[] = {
    {"mount", bfs_cmd_mount, "mount an archive as a directory of batches"},
    {"umount", bfs_cmd_umount, "unmount a batchfs mount"},
    {"pack", bfs_cmd_pack, "write a torch.save archive from .npy files"},
    {"inspect", bfs_cmd_inspect, "describe an archive or a batch file"},
    {"bench", bfs_cmd_bench, "run the side-by-side benchmark"},
};

static void usage(FILE *f)
{
	fprintf(f, "usage: batchfs COMMAND [OPTIONS] ...\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		fprintf(f, "  %-8s %s\n", cmds[i].name, cmds[i].summary);
	fprintf(f, "\n'batchfs COMMAND --help' describes a command; "
		   "'batchfs --version'\nprints the version; 'man batchfs' "
		   "has it all.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
	    !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
		printf("batchfs %s\n", BFS_VERSION);
		return 0;
	}
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (!strcmp(argv[1], cmds[i].name))
			return cmds[i].run(argc - 1, argv + 1);
	fprintf(stderr, "batchfs: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
