/* fs/reader_impl.h: private to the reader room (reader.c, the engine;
 * fetch_local.c, the fetch backends made of it; fetch_local_resident.c,
 * what of their files is resident): each way of reading on its own, for
 * backends that pick theirs once, at creation. Same contracts as
 * bfs_reader_submit and bfs_reader_read_all (reader.h), on a reader of
 * that kind. */
#ifndef BFS_READER_IMPL_H
#define BFS_READER_IMPL_H

#include "fs/fetch.h"
#include "fs/reader.h"

void bfs_reader_uring_submit(struct bfs_reader *r, int fd, uint64_t off,
			     uint64_t len);
int bfs_reader_uring_read_all(struct bfs_reader *r, const struct bfs_read *rd,
			      size_t n);
void bfs_reader_threads_submit(struct bfs_reader *r, int fd, uint64_t off,
			       uint64_t len);
int bfs_reader_threads_read_all(struct bfs_reader *r, const struct bfs_read *rd,
				size_t n);

/* What of a dataset's local files is resident (fetch_local_resident.c):
 * a word per 2 MiB chunk of each mapped file, one mincore() a chunk a
 * second at most. Remote files (their source names an object) and files
 * in memory have none. */
struct bfs_resident;

/* The words of ds's files (borrowed; must outlive them). 0 or -ENOMEM. */
int bfs_resident_create(struct bfs_resident **out,
			const struct bfs_dataset *ds);
void bfs_resident_destroy(struct bfs_resident *r); /* accepts NULL */

/* The backend's advise (fetch.h): the rows of idx[0..n) of the fields
 * 'fields' marks ([nfields]) that are not known resident advised
 * (madvise WILLNEED, coalesced), counted in *out. Any thread. */
void bfs_resident_advise(struct bfs_resident *r, const uint64_t *idx, size_t n,
			 const bool *fields, struct bfs_fetch_tally *out);

/* The backend's pick (fetch.h): of the page ranges rg[0..n) (4096-
 * aligned), those to read ahead moved to the front, their count
 * returned: a mapped local file's not known resident (the others are
 * counted in *resident); none of a ragged field, of a file in memory or
 * of a remote one. Any thread. */
size_t bfs_resident_pick(struct bfs_resident *r, struct bfs_fetch_range *rg,
			 size_t n, bool ragged, uint64_t *resident);

#endif
