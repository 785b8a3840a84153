/* batchfs: one command, subcommands mount, umount, pack, inspect, bench,
 * status, version. This file only dispatches; each subcommand parses its
 * own options. --version works anywhere before "--": `batchfs --version`,
 * `batchfs version` and `batchfs COMMAND ... --version` all print it, so
 * no subcommand needs to know the option.
 *
 * `batchfs SOURCE MOUNTPOINT -o OPTIONS`, a first argument that is no
 * command but a path (it has a '/' or exists), is `batchfs mount`:
 * mount.fuse3 runs the program a type fuse.TYPE names that way, for
 * `mount -t fuse.batchfs` and /etc/fstab (tools/cmd_mount.c).
 *
 * First of all, the secrets of URLs in the arguments and the AWS secret
 * keys of the environment leave what /proc shows of the process (and of
 * a mount's daemon, its fork): tools/secrets.h. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tools/cli.h"
#include "tools/cmd.h"
#include "tools/secrets.h"
#include "tools/version.h"

static int cmd_version(int argc, char **argv);

static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
} cmds[] = {
    {"mount", bfs_cmd_mount, "mount an archive as a directory of batches"},
    {"umount", bfs_cmd_umount, "unmount a batchfs mount"},
    {"status", bfs_cmd_status, "list the batchfs mounts of this machine"},
    {"pack", bfs_cmd_pack, "write a torch.save archive from .npy files"},
    {"inspect", bfs_cmd_inspect, "describe an archive or a batch file"},
    {"bench", bfs_cmd_bench, "run the side-by-side benchmark"},
    {"version", cmd_version, "print the version (also --version)"},
};

#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))

static void usage(FILE *f)
{
	fprintf(f, "usage: batchfs COMMAND [OPTIONS] ...\n\ncommands:\n");
	for (size_t i = 0; i < NCMDS; i++)
		fprintf(f, "  %-8s %s\n", cmds[i].name, cmds[i].summary);
	fprintf(f, "\n'batchfs SOURCE MOUNTPOINT -o OPTIONS' is 'batchfs "
		   "mount' as mount -t fuse.batchfs\nand /etc/fstab call "
		   "it.\n");
	fprintf(f, "\n'batchfs COMMAND --help' describes a command; "
		   "'batchfs --version'\nprints the version; 'man batchfs' "
		   "has it all.\n");
}

static void version_usage(FILE *f)
{
	fputs("usage: batchfs version\n"
	      "Print the version, as 'batchfs --version' and\n"
	      "'batchfs COMMAND --version' do.\n\n"
	      "  -h, --help   this text\n",
	      f);
}

static int cmd_version(int argc, char **argv)
{
	if (argc == 2 &&
	    (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		version_usage(stdout);
		return 0;
	}
	if (argc > 1)
		return bfs_cli_bad_usage("version", version_usage,
					 "takes no arguments", argv[1]);
	printf("batchfs %s\n", BFS_VERSION);
	return 0;
}

/* Whether "--version" is among argv[1..argc) before a "--". */
static bool asks_version(int argc, char **argv)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "--version"))
			return true;
	return false;
}

int main(int argc, char **argv)
{
	bfs_hide_secrets(argc, argv); /* before anything reads them */
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
	    !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "-V") || asks_version(argc, argv))
		return cmd_version(1, argv);
	for (size_t i = 0; i < NCMDS; i++)
		if (!strcmp(argv[1], cmds[i].name))
			return cmds[i].run(argc - 1, argv + 1);
	if (argc > 2 && argv[1][0] != '-' &&
	    (strchr(argv[1], '/') || access(argv[1], F_OK) == 0))
		return bfs_cmd_mount(argc, argv); /* mount.fuse3's form */
	fprintf(stderr, "batchfs: unknown command '%s'\ncommands:", argv[1]);
	for (size_t i = 0; i < NCMDS; i++)
		fprintf(stderr, " %s", cmds[i].name);
	fprintf(stderr, "\nTry 'batchfs --help' for more information.\n");
	return 2;
}
