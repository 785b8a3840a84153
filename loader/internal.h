/* Internal interfaces of the loader library (not installed).
 *
 * Every symbol here has hidden visibility (the library is built with
 * -fvisibility=hidden) and a bfs_loader_ prefix so the static archive does
 * not collide with the program it is linked into. */
#ifndef BFS_LOADER_INTERNAL_H
#define BFS_LOADER_INTERNAL_H

#include "loader/batchfs_loader.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* ---- logging (log.c) ---- */
struct bfs_loader_logger {
	bfs_loader_log_fn fn; /* NULL = stderr */
	void *arg;
	int max_level;
};

/* Format one line "batchfs[loader]: ..." and hand it to the logger. */
void bfs_loader_log(const struct bfs_loader_logger *lg,
		    enum bfs_loader_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- safetensors header (st_header.c, over fs/safetensors.c) ---- */

struct bfs_st_header;

/* The parsed header of one batch file, owned by whoever holds the pointer,
 * freed with bfs_loader_meta_free(). */
struct bfs_loader_meta {
	uint32_t ntensors;
	uint64_t data_start; /* 8 + header length */
	uint64_t file_size;
	struct bfs_loader_tensor *tensors; /* sorted by offset */
	struct bfs_st_header *st;	   /* owns the names and shapes */
};

/* Parse and validate the safetensors header at the start of 'file' (the
 * whole file, 'size' bytes) with fs/safetensors (every check of the spec;
 * unknown dtype codes get elem_size 0). Pointers (host/dev) are left
 * zero. Returns 0 and *out, -EBADMSG with a reason in 'msg' ("header
 * offset N: ..."), or -ENOMEM. */
int bfs_loader_meta_parse(const unsigned char *file, uint64_t size,
			  struct bfs_loader_meta **out, char *msg,
			  size_t msglen);
void bfs_loader_meta_free(struct bfs_loader_meta *m);

/* ---- CUDA driver backend (gpu_cuda.c) ----
 * All functions but open return 0 or -EIO (with the driver's error name in
 * the calling thread's message, see bfs_loader_gpu_err()). Events and
 * streams are opaque pointers. Calls made from a thread other than the
 * copy thread are bracketed by push/pop of the primary context. */
struct bfs_loader_gpu;

/* dlopen the driver, init, pick 'device', retain its primary context and
 * create the copy stream. Returns 0, -ENOSYS (no driver library / built
 * without cuda.h), -ENODEV (stub, no device, bad ordinal, old driver) or
 * -EIO; 'why' says which. */
int bfs_loader_gpu_open(struct bfs_loader_gpu **out, int device, char *why,
			size_t whylen);
void bfs_loader_gpu_close(struct bfs_loader_gpu *g);
/* The calling thread's last driver failure ("cuX failed: NAME (n)"); a
 * per-thread buffer, valid until that thread's next backend call. */
const char *bfs_loader_gpu_err(const struct bfs_loader_gpu *g);

/* Copy thread: make the context current and this thread's stream-capture
 * mode relaxed (its calls must not break other threads' captures). */
int bfs_loader_gpu_bind(struct bfs_loader_gpu *g);
/* The calling thread's capture mode to relaxed until unrelax (or close),
 * which restores it; open leaves the caller relaxed. No-op when already
 * relaxed. Not nested across threads: open/close/reopen only. */
int bfs_loader_gpu_relax(struct bfs_loader_gpu *g);
void bfs_loader_gpu_unrelax(struct bfs_loader_gpu *g);
int bfs_loader_gpu_push(struct bfs_loader_gpu *g);
int bfs_loader_gpu_pop(struct bfs_loader_gpu *g);
int bfs_loader_gpu_register(struct bfs_loader_gpu *g, void *p, size_t n);
int bfs_loader_gpu_unregister(struct bfs_loader_gpu *g, void *p);
int bfs_loader_gpu_alloc(struct bfs_loader_gpu *g, size_t n, uint64_t *dptr);
int bfs_loader_gpu_free(struct bfs_loader_gpu *g, uint64_t dptr);
int bfs_loader_gpu_event_create(struct bfs_loader_gpu *g, void **ev);
int bfs_loader_gpu_event_destroy(struct bfs_loader_gpu *g, void *ev);
/* On the copy stream: wait for 'wait_ev' (if not NULL), copy, record
 * 'ready_ev'. */
int bfs_loader_gpu_copy(struct bfs_loader_gpu *g, uint64_t dst, const void *src,
			size_t n, void *wait_ev, void *ready_ev);
/* Events are created with CU_EVENT_BLOCKING_SYNC: event_sync sleeps. */
int bfs_loader_gpu_event_sync(struct bfs_loader_gpu *g, void *ev);
int bfs_loader_gpu_stream_wait(struct bfs_loader_gpu *g, void *stream,
			       void *ev);
int bfs_loader_gpu_record(struct bfs_loader_gpu *g, void *ev, void *stream);
/* Wait (blocking, not spinning) for everything enqueued on the copy
 * stream. */
int bfs_loader_gpu_drain(struct bfs_loader_gpu *g);

#endif
