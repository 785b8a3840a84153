/* tools/cli: command-line helpers shared by the subcommands (one wording
 * of usage errors, one exit status for them).
 *
 * A usage error is short so that it stays on screen: the error, the
 * command's synopsis (the "usage:" lines that open its --help text) and
 * where to read the rest. */
#include "tools/cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Print the synopsis of a usage text on f: its first line when it starts
 * with "usage:", and the lines after it that start with spaces and then
 * "batchfs " (a second form of the command). */
static void print_synopsis(FILE *f, const char *text)
{
	const char *line = text;

	if (strncmp(line, "usage:", 6))
		return;
	do {
		size_t len = strcspn(line, "\n");

		fprintf(f, "%.*s\n", (int)len, line);
		line += len + (line[len] == '\n');
	} while (*line == ' ' &&
		 !strncmp(line + strspn(line, " "), "batchfs ", 8));
}

int bfs_cli_bad_usage(const char *cmd, void (*usage)(FILE *), const char *msg,
		      const char *arg)
{
	char *text = NULL;
	size_t len = 0;
	FILE *mem;

	fprintf(stderr, "batchfs %s: %s%s%s\n", cmd, msg, arg ? ": " : "",
		arg ? arg : "");
	mem = open_memstream(&text, &len);
	if (mem) {
		usage(mem);
		if (fclose(mem) == 0 && text)
			print_synopsis(stderr, text);
	}
	free(text);
	fprintf(stderr, "Try 'batchfs %s --help' for more information.\n", cmd);
	return 2;
}

int bfs_cli_parse_gb(const char *s, uint64_t *bytes)
{
	char *end;
	double gb;

	errno = 0;
	gb = strtod(s, &end);
	if (errno || end == s || *end || !(gb >= 1e-6 && gb <= 1e6))
		return -1;
	*bytes = (uint64_t)llround(gb * 1e9); /* 0.3: 300000000, not 1 less */
	return 0;
}
