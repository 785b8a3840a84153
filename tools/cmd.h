/* The batchfs subcommands. Each takes argv with argv[0] = the subcommand
 * name and returns the process exit status: 0 success, 1 failure at run
 * time, 2 bad usage (a one-line error, the synopsis and a pointer to
 * --help were printed: bfs_cli_bad_usage). */
#ifndef BFS_CMD_H
#define BFS_CMD_H

int bfs_cmd_mount(int argc, char **argv);
int bfs_cmd_umount(int argc, char **argv);
int bfs_cmd_pack(int argc, char **argv);
int bfs_cmd_inspect(int argc, char **argv);
int bfs_cmd_bench(int argc, char **argv);
int bfs_cmd_status(int argc, char **argv);

/* batchfs mount --help (tools/cmd_mount_help.c). */
extern const char bfs_cmd_mount_help[];

#endif
