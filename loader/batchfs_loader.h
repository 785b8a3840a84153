/* batchfs_loader.h — the companion loader: batch files → pinned host ring →
 * GPU, in order, with the copy of each batch ordered before the caller's
 * CUDA stream. The one public header of libbatchfs_loader.{a,so}.
 *
 * A batch file is a safetensors file (u64 LE header length N, N bytes of
 * JSON, then the tensor bytes); batchfs serves them as epoch/E/batch_K.
 *
 *   struct bfs_loader *L;
 *   struct bfs_loader_opts o = {0};
 *   o.dir = "/mnt/data/epoch/0";
 *   if (bfs_loader_open(&L, &o) < 0) ...          // AUTO: CUDA if possible
 *   struct bfs_loader_batch b;
 *   while ((rc = bfs_loader_next(L, &b, stream)) == 0) {
 *           launch(b.tensors[0].dev, stream);     // ordered after the copy
 *           bfs_loader_release(L, &b, stream);    // never blocks the host
 *   }
 *   if (rc < 0) fprintf(stderr, "%s\n", bfs_loader_errmsg(L));
 *   bfs_loader_close(L);
 *
 * Threads: one loader is used by one consumer thread at a time, except
 * that bfs_loader_release() may be called from any thread, also while
 * another thread is in bfs_loader_next() (e.g. from a finalizer when the
 * last reference to a batch goes). Different loaders are independent.
 * Functions that take no loader are thread-safe.
 *
 * Errors: functions return 0 (or a documented positive value) on success
 * and -errno on failure. An error met in the background (open/read of a
 * file, short read, a bad header, a CUDA failure) is latched: the next
 * bfs_loader_next() that reaches the affected batch returns it, and so does
 * every later call; bfs_loader_errmsg() says what happened. Batches before
 * the failed one are still delivered.
 *
 * The library never prints to stdout; diagnostics go to stderr as one line
 * "batchfs[loader]: ..." or to the callback in the options.
 *
 * CUDA: the driver is loaded at run time (dlopen "libcuda.so.1"), nothing
 * links libcuda or libcudart. The primary context of the chosen device is
 * used, so device pointers are shared with the CUDA runtime (e.g. PyTorch).
 * Streams are passed as void * (a CUstream / cudaStream_t of the device's
 * primary context; NULL = the legacy default stream, which synchronizes
 * with every other blocking stream). next() orders the batch before the
 * stream's later work, release() orders the slot's reuse after the
 * stream's earlier work; work on other streams must be joined to it (the
 * stream rules: loader/README.md). */
#ifndef BATCHFS_LOADER_H
#define BATCHFS_LOADER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define BFS_LOADER_API __attribute__((visibility("default")))
#else
#define BFS_LOADER_API
#endif

/* The loader (opaque). */
struct bfs_loader;

/* bfs_loader_next() returns this (positive) once every batch was handed out. */
#define BFS_LOADER_EOF 1

enum bfs_loader_mode {
	BFS_LOADER_AUTO =
	    0,		    /* CUDA when a driver and a device work, else CPU */
	BFS_LOADER_CPU = 1, /* host memory only; dev == host pointer */
	BFS_LOADER_CUDA = 2, /* CUDA or fail (-ENODEV / -ENOSYS) */
};

/* Flags for bfs_loader_opts.flags. */
enum bfs_loader_flag {
	/* CUDA mode: keep each batch's host copy until its release, so
	 * tensor.host stays readable (costs pipelining: a host slot is
	 * refilled only after release instead of after its copy). */
	BFS_LOADER_KEEP_HOST = 1u << 0,
	/* Open batch files without O_DIRECT. By default each is opened
	 * with O_DIRECT, which a batchfs mount serves with direct I/O in
	 * every serve mode, its fastest path (loader/README.md); where the
	 * file system refuses it (EINVAL) the loader opens files plainly
	 * from then on. */
	BFS_LOADER_NO_DIRECT = 1u << 1,
};

enum bfs_loader_log_level {
	BFS_LOADER_LOG_ERR = 0,
	BFS_LOADER_LOG_WARN = 1,
	BFS_LOADER_LOG_INFO = 2,
	BFS_LOADER_LOG_DEBUG = 3,
};

/* Log callback: one line, no trailing newline, already prefixed with
 * "batchfs[loader]: ". Called from any loader thread, possibly
 * concurrently; 'line' is valid only during the call. */
typedef void (*bfs_loader_log_fn)(void *arg, enum bfs_loader_log_level level,
				  const char *line);

/* Options. A zeroed struct means the defaults; exactly one of 'dir' and
 * 'files' must be set. The strings are copied by bfs_loader_open(). */
struct bfs_loader_opts {
	/* An epoch directory: files batch_0 ... batch_{k-1}, read in numeric
	 * order (other names are ignored; a gap is an error). */
	const char *dir;
	/* Or an explicit NULL-terminated list of batch files, in order. */
	const char *const *files;
	enum bfs_loader_mode mode; /* default AUTO */
	int device;		   /* CUDA device ordinal, default 0 */
	unsigned slots;		   /* ring slots, 2 to 256; default 3, or 8
				    * when every file fits in 2 MiB */
	unsigned readers;	   /* reader threads, default 4, at most 256 */
	size_t chunk;		   /* pread size, default 4 MiB, >= 4096 */
	unsigned flags;		   /* enum bfs_loader_flag */
	/* Diagnostics: NULL = one line to stderr. */
	bfs_loader_log_fn log;
	void *log_arg;
	/* Most verbose level logged; 0 = BFS_LOADER_LOG_INFO. */
	int log_level;
};

/* One tensor of a delivered batch. Everything it points to is owned by the
 * loader and stays valid until the batch is released. */
struct bfs_loader_tensor {
	const char *name;   /* NUL-terminated, UTF-8 */
	char dtype[12];	    /* safetensors code: "F32", "BF16", "BOOL", ... */
	uint32_t elem_size; /* bytes per element, 0 for an unknown code */
	uint32_t ndim;	    /* number of dimensions (0 = scalar) */
	const uint64_t *shape; /* ndim sizes */
	uint64_t nbytes;       /* byte length of the data */
	uint64_t offset;       /* from the start of the file */
	const void *host;      /* host copy; NULL in CUDA mode unless
				  BFS_LOADER_KEEP_HOST */
	uint64_t dev;	       /* CUdeviceptr; (uintptr_t)host in CPU mode */
};

/* A delivered batch. Filled by bfs_loader_next(); hand the same struct (or
 * a copy of it) back to bfs_loader_release(). */
struct bfs_loader_batch {
	uint64_t index;	 /* position in the file list (K) */
	uint64_t nbytes; /* size of the whole file */
	uint32_t ntensors;
	const struct bfs_loader_tensor *tensors;
	const void *host; /* the whole file; same rule as tensor.host */
	uint64_t dev;	  /* the whole file on the device */
	uint32_t slot;	  /* ring slot (internal; do not change) */
};

/* Counters since open. Plain numbers; read with bfs_loader_stats(). */
struct bfs_loader_stats {
	uint64_t batches;    /* delivered by next() */
	uint64_t bytes_read; /* read from files */
	uint64_t copies;     /* host-to-device copies enqueued */
	uint64_t wait_ns;    /* time next() spent waiting for a batch */
	uint64_t ring_bytes; /* host ring size (pinned in CUDA mode) */
	uint64_t pin_calls;  /* cuMemHostRegister calls (1 per ring) */
	/* CPU time used by the copy thread (CUDA mode; 0 in CPU mode). It
	 * waits for copies sleeping, so this stays small while the GPU is
	 * busy: a measure of the loader's own cost. */
	uint64_t copy_cpu_ns;
	/* Batch files opened with O_DIRECT (the rest were opened plainly:
	 * BFS_LOADER_NO_DIRECT, or the file system refused it). */
	uint64_t direct_files;
};

/* Open a loader: list the files (stat each: the largest sets the slot
 * size), map the host ring, start the reader threads and, in CUDA mode,
 * retain the device's primary context, pin the ring once, allocate the
 * device ring, the copy stream and the events, and start the copy thread.
 * Reading starts at once.
 * Mode AUTO falls back to CPU mode when any of the CUDA steps fails (no
 * driver or device, out of device or pinned memory, a failing driver
 * call), logging one line "CPU mode: CUDA unavailable: <why>" at INFO;
 * mode CUDA fails instead, logging "CUDA mode requested but unavailable:
 * <why>". <why> names the step, the driver call and its error.
 * Returns 0 and *out, or -errno: -EINVAL bad options, -ENOENT no such
 * directory or file (or no batch_0), -ENOSYS no CUDA driver (mode CUDA),
 * -ENODEV no usable device (mode CUDA), -ENOMEM out of host memory or
 * (mode CUDA) of device or pinned memory, -EIO another CUDA failure. On
 * failure *out is NULL and the reason was logged. Cost: O(files) stat
 * calls plus mapping (and in CUDA mode pinning, ~1 GB/s) the ring. */
BFS_LOADER_API int bfs_loader_open(struct bfs_loader **out,
				   const struct bfs_loader_opts *opts);

/* Deliver the next batch in order into *b. Waits until it is read (and, in
 * CUDA mode, its copy is enqueued; the wait for the copy is put on 'stream'
 * with cuStreamWaitEvent, so the host does not wait for the GPU).
 * Returns 0, BFS_LOADER_EOF after the last batch, or -errno: the latched
 * error of this or an earlier batch (-EIO short read, i.e. the file is
 * shorter than its size at open, or a CUDA failure; -EBADMSG bad header;
 * or the errno of open/read), -EBUSY when every ring slot is held by the caller
 * (release one first). The batch's memory stays valid until
 * bfs_loader_release(). */
BFS_LOADER_API int bfs_loader_next(struct bfs_loader *L,
				   struct bfs_loader_batch *b, void *stream);

/* Give a batch back. In CUDA mode the slot's "released" event is recorded
 * on 'stream' (work the caller queued there on the batch finishes before
 * the slot is overwritten; work on other streams must be made to wait
 * first, see loader/README.md); the host never blocks. Releases may come
 * in any order and from any thread. Returns 0, -EINVAL if 'b' is not a
 * batch held by the caller (also: released already, or being released by
 * another thread), or -EIO when the event record failed (also latched). */
BFS_LOADER_API int bfs_loader_release(struct bfs_loader *L,
				      const struct bfs_loader_batch *b,
				      void *stream);

/* Start over on another list of batch files, keeping the ring: the next
 * epoch's directory (dir) or a NULL-terminated file list (files); exactly
 * one of them. No new pinning, no device allocation: a training loop that
 * reopens one loader every epoch pins and allocates once, instead of
 * asking for the device memory again when other users (e.g. PyTorch's
 * caching allocator) may hold it by then. Every batch must have been
 * released; batches read ahead and not handed out are dropped; a latched
 * error is cleared; the ring keeps the slot size and count open gave it.
 * Returns 0, or -EINVAL, -EBUSY (a batch is still held), -EFBIG (a file is
 * larger than the ring's slots: open a new loader), the errors of listing
 * the files (as bfs_loader_open: -ENOENT, ...); in these cases the loader
 * goes on with its old files. Any other error (-EAGAIN, or the CUDA error
 * of a copy thread that cannot bind its context): the threads could not
 * restart; the error is latched. The reason is logged. Not concurrent with
 * other calls on L. Cost: one stat per file, stopping and starting the
 * threads (copies in flight are not waited for). */
BFS_LOADER_API int bfs_loader_reopen(struct bfs_loader *L, const char *dir,
				     const char *const *files);

/* Stop the threads, wait for the copy stream and for the released events
 * already recorded, free the ring, the device memory, the events and the
 * stream, release the primary context. Batches still held become invalid
 * (the caller must no longer use them on any stream). NULL is a no-op.
 * Not concurrent with other calls on L. */
BFS_LOADER_API void bfs_loader_close(struct bfs_loader *L);

/* What AUTO resolved to: BFS_LOADER_CPU or BFS_LOADER_CUDA. */
BFS_LOADER_API enum bfs_loader_mode bfs_loader_mode(const struct bfs_loader *L);

/* Number of batches (files) the loader will deliver. */
BFS_LOADER_API uint64_t bfs_loader_count(const struct bfs_loader *L);

/* The message of the latched error ("batch_3: short read at ..."), or ""
 * when there is none. Owned by L; valid until the next call on L. */
BFS_LOADER_API const char *bfs_loader_errmsg(const struct bfs_loader *L);

/* A static description of a return value of this API (-errno,
 * BFS_LOADER_EOF, 0). Thread-safe; never NULL. */
BFS_LOADER_API const char *bfs_loader_strerror(int err);

/* Copy the counters into *st. Thread-safe with respect to the loader's own
 * threads. Returns 0 or -EINVAL. */
BFS_LOADER_API int bfs_loader_stats(const struct bfs_loader *L,
				    struct bfs_loader_stats *st);

#ifdef __cplusplus
}
#endif
#endif
