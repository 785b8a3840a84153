/* fs/serve_ways: the table of the ways of serving batch files, one per
 * mode (serve.h), and the modes' names (serve_impl.h). The core asks it
 * once, at create, which way serves a mount's batch files; the ways'
 * files are named here and nowhere else. */
#include "fs/serve_impl.h"

#include <errno.h>
#include <string.h>

static const struct bfs_serve_ops *const ways[] = {
    [BFS_SERVE_PASSTHROUGH] = &bfs_serve_passthrough_ops,
    [BFS_SERVE_PUSH] = &bfs_serve_push_ops,
    [BFS_SERVE_CACHE] = &bfs_serve_cache_ops,
    [BFS_SERVE_DIRECT] = &bfs_serve_direct_ops,
};

#define NMODES (sizeof(ways) / sizeof(ways[0]))

const struct bfs_serve_ops *bfs_serve_ops_of(enum bfs_serve_mode m)
{
	return (unsigned)m < NMODES ? ways[m] : NULL;
}

const char *bfs_serve_mode_name(enum bfs_serve_mode m)
{
	if (m == BFS_SERVE_AUTO)
		return "auto";
	return (unsigned)m < NMODES && ways[m] ? ways[m]->name : "?";
}

int bfs_serve_mode_parse(const char *str, enum bfs_serve_mode *out)
{
	for (unsigned m = 0; m < NMODES; m++)
		if (!strcmp(str, bfs_serve_mode_name((enum bfs_serve_mode)m))) {
			*out = (enum bfs_serve_mode)m;
			return 0;
		}
	return -EINVAL;
}
