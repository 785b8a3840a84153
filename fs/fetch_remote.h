/* fs/fetch_remote: fs/fetch's backend for a dataset with remote sources
 * (fs/README.md: remote sources), a table of operations of fetch.h.
 *
 * Per file, it sends each call where the file's bytes come from: a
 * remote file (its struct bfs_source_file names its object) to
 * fs/remote/object, a local one to the local backend it wraps (fs/reader's),
 * so shards of both kinds mix in one dataset.
 *
 *   hold     a gather's rows in remote files: every range pinned at once
 *            (what is absent is fetched, all of it in flight together),
 *            then waited for, bounded by the gather's deadline; a failure
 *            lets go of everything, is logged with its reason, and fails
 *            the batch with -EIO;
 *   pick     of the read-ahead's pages of a batch, a remote file's all
 *            (ragged fields' too), cut at its end; a local file's as the
 *            local backend picks them (those not known resident);
 *   ahead    the read-ahead's ranges: a remote one is told when it is next
 *            needed and fetched if absent (fs/remote/cache evicts by
 *            next use); a local one goes to the local backend;
 *   advise   the local backend's (a remote file's rows are never
 *            advised);
 *   now      where the readers are, on the read-ahead's clock.
 *
 * Rows of remote files are never read with O_DIRECT by the gathers
 * (bfs_dataset_row refuses them, so fs/fetch picks none of their fields),
 * and never served from the mapping by zero copy. */
#ifndef BFS_FETCH_REMOTE_H
#define BFS_FETCH_REMOTE_H

#include "fs/dataset.h"
#include "fs/fetch.h"
#include "fs/remote/object.h"

/* The backend over ds's files (borrowed; ds's remote files' objects live
 * in 'objects', borrowed too), wrapping 'local' (owned from now on, also
 * when this fails; NULL: local files are neither read ahead nor
 * advised). 0 or -ENOMEM. */
int bfs_fetch_remote_backend(struct bfs_fetch_backend **out,
			     const struct bfs_dataset *ds,
			     struct bfs_objects *objects,
			     struct bfs_fetch_backend *local);

/* Whether ds has a remote file. */
bool bfs_fetch_remote_any(const struct bfs_dataset *ds);

#endif
