/* fs/memory: the memory policy (fs/README.md: cold data) — how much of the
 * page cache this process may fill, and what a dataset does about it,
 * decided once at creation:
 *
 *   fits       the data fits in half the memory available: a thread reads
 *              it in at creation, in order and in 32 MiB windows
 *              (MADV_POPULATE_READ), so the kernel reads each file at the
 *              device's sequential rate and maps every page (the read-in);
 *   cold       it does not: every mapping is marked for random access
 *              (MADV_RANDOM: a page fault reads its page, not the device's
 *              read-ahead window around it), and the rooms above read the
 *              rows of the batches ahead themselves (fs/readahead) or
 *              have the gathers read big rows with O_DIRECT (fs/fetch).
 *
 * "Available" is the smaller of /proc/meminfo's MemAvailable and what the
 * process's memory cgroups (v1 or v2, the cgroup and each ancestor) leave
 * under their limits: in a container the page cache counts against the
 * container's limit, and an archive read in past it would only evict
 * itself. Remote files (a remote object's cache file, fs/remote/object) are
 * neither counted, read in nor advised: only fetched bytes are there.
 * The probe reads its files from paths that tests may replace
 * (struct bfs_memory_files).
 *
 * Thread-safe: the read-in's state and counter are atomics; the rest is
 * immutable after creation. */
#ifndef BFS_MEMORY_H
#define BFS_MEMORY_H

#include <stdbool.h>
#include <stdint.h>

#include "fs/dataset.h"

/* The files the probe reads; NULL members: the real ones. */
struct bfs_memory_files {
	const char *meminfo;   /* /proc/meminfo */
	const char *cgroup;    /* /proc/self/cgroup */
	const char *mountinfo; /* /proc/self/mountinfo: the cgroup mounts */
};

/* The memory available to this process in bytes: MemAvailable, or less
 * when a memory cgroup leaves less (limit - usage, the tightest of the
 * cgroup and its ancestors; v1 and v2); 0 when unknown. 'files' NULL:
 * the real files. Reads a few small files: once per mount. */
uint64_t bfs_memory_available(const struct bfs_memory_files *files);

struct bfs_memory_opts {
	/* Apply the policy (read in, or mark for random access). false:
	 * measure only, decide nothing (BATCHFS_DEBUG_NO_WARM, tests). */
	bool policy;
	/* Apply it as if the data did not fit (BATCHFS_DEBUG_COLD). */
	bool assume_cold;
	const struct bfs_memory_files *files; /* NULL: the real ones */
};

struct bfs_memory;

/* Measure the memory available and apply the policy to 'ds' (borrowed;
 * must outlive the object), logging what it decided: start the read-in
 * thread when the data fits, else mark every mapping for random access.
 * 0 or -ENOMEM. */
int bfs_memory_create(struct bfs_memory **out, const struct bfs_dataset *ds,
		      const struct bfs_memory_opts *o);

/* Stop the read-in (it checks between 32 MiB windows), free. Accepts
 * NULL. */
void bfs_memory_destroy(struct bfs_memory *m);

/* The memory available, measured at creation (bfs_memory_available). */
uint64_t bfs_memory_avail(const struct bfs_memory *m);

/* The queries below accept NULL: no memory policy (false, 0). */

/* Whether the data does not fit (or is taken not to): mapped for random
 * access, big rows read by the gathers (fs/fetch). false without a
 * policy. */
bool bfs_memory_cold(const struct bfs_memory *m);

/* Whether a read-in was started (the data fits). */
bool bfs_memory_reading_in(const struct bfs_memory *m);

/* Whether the read-in has ended, every file read in (not stopped): every
 * row is resident now. Cheap. */
bool bfs_memory_read_in(const struct bfs_memory *m);

/* Bytes the read-in has read so far (stats: readahead_bytes). */
uint64_t bfs_memory_read_in_bytes(const struct bfs_memory *m);

#endif
