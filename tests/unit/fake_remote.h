/* A fake transport for fs/remote/object (tests/unit/fake_remote.c): the
 * programs linked with it (tests/module.mk: FAKE_REMOTE) have
 * bfs_remote_open, bfs_remote_submit and bfs_remote_destroy replaced
 * (ld --wrap):
 * - open makes an object of fake_remote.size and .etag without a request;
 * - submit records each request (sent), and queues it (pending) unless
 *   .refuse says to refuse it;
 * - destroy fails what is still queued for that client with ECANCELED,
 *   as fs/remote does, then destroys the client.
 * The test answers the queued requests itself (fake_remote_take, then
 * fake_remote_complete), from its own thread or a server thread of its
 * (fake_remote_next). Everything below is guarded by fake_remote.lock;
 * cond is broadcast whenever a request is queued or taken. */
#ifndef BFS_TESTS_FAKE_REMOTE_H
#define BFS_TESTS_FAKE_REMOTE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/remote/remote_impl.h"

#define FAKE_REMOTE_MAX 256

struct fake_sent {
	uint64_t off, len;
};

struct fake_remote {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	/* Objects opened next: their size and ETag. */
	uint64_t size;
	const char *etag;
	/* Non-zero: submit refuses with it (nothing queued). */
	int refuse;
	/* Requests submitted (refused ones too), in order: the first
	 * FAKE_REMOTE_MAX of them; how many. */
	struct fake_sent sent[FAKE_REMOTE_MAX];
	size_t nsent;
	/* Queued, not answered yet, in order; the most at once. */
	struct bfs_remote_req *pending[FAKE_REMOTE_MAX];
	size_t npending, max_pending;
	uint64_t pending_bytes, max_pending_bytes;
	/* The object's bytes [off, off + len) into buf, for an answer. */
	void (*fill)(uint8_t *buf, uint64_t off, uint64_t len);
	/* fake_remote_next returns NULL once set and nothing is queued. */
	bool stop;
};

extern struct fake_remote fake_remote;

/* Everything recorded forgotten (nothing may be queued); size, etag and
 * fill kept. [not locked] */
void fake_remote_reset(void);

/* Pending request i, taken off the queue. [fake_remote.lock] */
struct bfs_remote_req *fake_remote_take(size_t i);

/* The first request queued, taken off the queue, waiting for one; NULL
 * once .stop is set and none is. [not locked] */
struct bfs_remote_req *fake_remote_next(void);

/* Request q (taken off the queue) answered: its bytes (fill), or
 * 'result' (a negative errno) with a message naming the bytes. q may be
 * gone after. [not locked] */
void fake_remote_complete(struct bfs_remote_req *q, int result);

#endif
