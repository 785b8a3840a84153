/* The version of batchfs: `batchfs --version`, the man page's footer and
 * the Python package's __version__ (the Makefile reads it from here). */
#ifndef BFS_VERSION_H
#define BFS_VERSION_H

#define BFS_VERSION "0.1.0"

#endif
