/* fs/reader_impl.h: private to the reader room (reader.c, the engine;
 * fetch_local.c, the fetch backends made of it): each way of reading
 * on its own, for backends that pick theirs once, at creation. Same
 * contracts as bfs_reader_submit and bfs_reader_read_all (reader.h), on a
 * reader of that kind. */
#ifndef BFS_READER_IMPL_H
#define BFS_READER_IMPL_H

#include "fs/reader.h"

void bfs_reader_uring_submit(struct bfs_reader *r, int fd, uint64_t off,
			     uint64_t len);
int bfs_reader_uring_read_all(struct bfs_reader *r, const struct bfs_read *rd,
			      size_t n);
void bfs_reader_threads_submit(struct bfs_reader *r, int fd, uint64_t off,
			       uint64_t len);
int bfs_reader_threads_read_all(struct bfs_reader *r, const struct bfs_read *rd,
				size_t n);

#endif
