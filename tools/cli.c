/* tools/cli: command-line helpers shared by the subcommands (one wording
 * of usage errors, one exit status for them). */
#include "tools/cli.h"

int bfs_cli_bad_usage(const char *cmd, void (*usage)(FILE *), const char *msg,
		      const char *arg)
{
	fprintf(stderr, "batchfs %s: %s%s%s\n", cmd, msg, arg ? ": " : "",
		arg ? arg : "");
	usage(stderr);
	return 2;
}
