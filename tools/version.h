/* The version of batchfs, in this one place: `batchfs --version`; the
 * Makefile reads it for the man page's footer, the loader library's file
 * name and pkg-config file, and the Python package's __version__ (written
 * into its _installed.py; read from here in a source tree). */
#ifndef BFS_VERSION_H
#define BFS_VERSION_H

#define BFS_VERSION "0.1.0"

#endif
