/* Internal interfaces of the loader library (not installed).
 *
 * Every symbol here has hidden visibility (the library is built with
 * -fvisibility=hidden) and a bfs_loader_ prefix so the static archive does
 * not collide with the program it is linked into. */
#ifndef BFS_LOADER_INTERNAL_H
#define BFS_LOADER_INTERNAL_H

#include "loader/batchfs_loader.h"

#include <pthread.h>
#include <stdatomic.h>
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

/* ---- the list of batch files (files.c) ---- */
struct bfs_loader_files {
	char **names;	 /* n paths, then NULL */
	uint64_t *sizes; /* st_size of each at listing time */
	uint64_t n;
	uint64_t max; /* the largest size (at least 1) */
};

/* The files of 'dir' (batch_0 ... batch_{n-1}, numeric order; a gap is an
 * error, other names are ignored) or of the NULL-terminated list 'files'
 * (exactly one is non-NULL), each stat()ed: it must be a regular file.
 * Returns 0, or -ENOENT (no such dir or file, no batch files, a gap),
 * -EINVAL (not a regular file), -ENOMEM, -errno of opendir/stat; the
 * reason is logged. *out is empty on failure. */
int bfs_loader_files_list(const struct bfs_loader_logger *lg, const char *dir,
			  const char *const *files,
			  struct bfs_loader_files *out);
void bfs_loader_files_free(struct bfs_loader_files *fl);

/* Thread-safe text of -errno ("unknown error" when there is none). */
const char *bfs_loader_errstr(int rc);

/* ---- the loader object (loader.c: pipeline; open.c: setup) ----
 *
 * See loader.c for the ring, the states and the threads. */
#define BFS_LOADER_NO_BATCH UINT64_MAX

enum bfs_loader_hstate {
	H_FREE,
	H_READING,
	H_READ,
	H_COPYING,
	H_HELD,
	H_FAILED
};
enum bfs_loader_dstate { D_FREE, D_QUEUED, D_HELD, D_RELEASING };

struct bfs_loader_slot {
	unsigned char *host; /* slot_bytes, page aligned */
	uint64_t dev;	     /* device half (host address in CPU mode) */
	void *ready;	     /* CUevent: copy into dev done */
	void *released;	     /* CUevent: consumer done with dev */
	/* host half (mu) */
	enum bfs_loader_hstate hs;
	uint64_t hbatch;
	unsigned hgen; /* L->gen when hbatch was started */
	int fd;
	uint64_t size;
	size_t nchunks; /* 0 while the file is being opened */
	size_t next_chunk, done_chunks;
	struct bfs_loader_meta *hmeta;
	/* device half (mu) */
	enum bfs_loader_dstate ds;
	uint64_t dbatch;
	struct bfs_loader_meta *dmeta;
	int released_recorded; /* 'released' holds a record to wait on */
};

struct bfs_loader {
	struct bfs_loader_logger log;
	unsigned nslots, nreaders, flags;
	size_t chunk;
	struct bfs_loader_files
	    fl; /* changed only by reopen, threads stopped */
	size_t slot_bytes, ring_bytes;
	unsigned char *ring;
	int registered;
	uint64_t dring;
	struct bfs_loader_gpu *gpu;
	struct bfs_loader_slot *slots;
	pthread_t *readers;
	unsigned nstarted;
	pthread_t copier;
	int copier_started;
	/* readers open batch files with O_DIRECT (until a file system
	 * refuses it: then 0 for good) */
	_Atomic int direct;
	/* open: why the CUDA backend failed (gpu_failed set) */
	int gpu_failed;
	char why[256];

	pthread_mutex_t mu;
	pthread_cond_t work_cv, copy_cv, ready_cv;
	int stop;		/* (mu) */
	int copier_up;		/* (mu) 1 running, < 0 its start failed */
	int copier_live;	/* (mu) the copy thread has not yet left */
	unsigned gen;		/* (mu) file lists so far (reopen) */
	uint64_t read_next;	/* (mu) next batch to open */
	uint64_t copy_next;	/* (mu) next batch to copy */
	uint64_t deliver_next;	/* (mu) next batch for next() */
	uint64_t err_batch;	/* (mu) lowest failed batch, NO_BATCH */
	int err_code;		/* (mu) */
	char err_msg[512];	/* (mu) */
	unsigned *inflight;	/* (mu) FIFO of slots with copies in flight */
	unsigned in_head, in_n; /* (mu) */
	struct bfs_loader_stats st; /* (mu) */
	char user_msg[512];	    /* consumer's copy of err_msg */
};

/* Thread bodies (arg: the loader), started by open.c. The copy thread sets
 * copier_up (and why, on failure) before it copies anything. */
void *bfs_loader_reader_main(void *arg);
void *bfs_loader_copier_main(void *arg);

#endif
