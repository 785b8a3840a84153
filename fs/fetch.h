/* fs/fetch: reads of row ranges of a dataset's files (fs/README.md: cold
 * data), for the two rooms that read rows before a gather copies them:
 *
 *   ahead    the read-ahead thread (fs/readahead) hands each batch after
 *            the readers here (bfs_fetch_ahead_rows: its samples, with
 *            when it is next needed); the pages its rows touch are found
 *            here, the backend picks those to read (a local file's not
 *            known resident), and they are read in: the bytes are thrown
 *            away, what counts is that they are resident when a gather
 *            copies the rows from the mapping; batches further ahead
 *            are only planned (bfs_fetch_plan_rows);
 *   advice   the rows of a batch about to be gathered (bfs_fetch_advise):
 *            the backend asks the kernel for those not known resident;
 *   rows     data that does not fit in memory (fs/memory): the rows of
 *            big fields (>= 32 KiB a row, stored as served) are read by
 *            each gathering thread itself into memory of its own, all the
 *            rows of a batch in flight at once (bfs_fetch_rows): no page
 *            cache to fill, map and reclaim.
 *
 * Behind both is a backend, a small table of operations
 * (struct bfs_fetch_ops) over ranges of the dataset's files, made by the
 * composition root and handed in: fs/reader's io_uring and reader
 * threads are two (reader.h: bfs_reader_backend, local files read with
 * O_DIRECT for the gathers; what of them is resident, for advice and the
 * read-ahead, is theirs too). Another source of bytes is one more
 * backend (fs/fetch_remote: remote objects behind their cache files,
 * dispatching local files to a local backend); this room and the rooms
 * above it do not change: where the read-ahead should differ for such
 * files, it asks here (bfs_fetch_reads_after_read_in,
 * bfs_fetch_window_cap, bfs_fetch_plans).
 *
 *   hold     a remote file's bytes are in its mapping only where they
 *            were fetched (a hole reads as zeros): before a gather reads
 *            rows, bfs_fetch_hold has the backend make every range they
 *            touch present and keep it so until bfs_fetch_release.
 *
 * Thread-safe: bfs_fetch_ahead, bfs_fetch_advise and bfs_fetch_rows from
 * any thread (a struct bfs_fetch_rows is its thread's own); counters are
 * atomics; the rest is immutable after creation but for
 * bfs_fetch_serve_mapped, a one-way switch made before any read. */
#ifndef BFS_FETCH_H
#define BFS_FETCH_H

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/dataset.h"
#include "fs/layout.h"
#include "fs/remote/object_stats.h"

/* ---- backends ------------------------------------------------------------ */

/* One read: bytes [off, off + len) of file 'file' (bfs_dataset_file's
 * numbering) into buf; read_all reads it through the page cache when
 * 'buffered' (any offset and length), else past it (O_DIRECT: whole
 * pages into page-aligned memory). */
struct bfs_fetch_range {
	size_t file;
	uint64_t off, len;
	void *buf;
	bool buffered;
};

/* What advice and the read-ahead found of the rows they were handed. */
struct bfs_fetch_tally {
	uint64_t resident; /* rows known resident: neither advised nor read */
	uint64_t advised;  /* rows the kernel was asked to read (advice) */
};

struct bfs_fetch_backend_stats {
	uint64_t in_flight; /* reads ahead queued or running now */
	uint64_t reads;	    /* reads ahead completed */
	uint64_t bytes;	    /* read ahead */
};

/* A backend: where the bytes of a dataset's files come from. Its maker
 * fills this in (embedded first in a struct of its own) and hands it to
 * bfs_fetch_create, which owns it from then on. */
#define BFS_FETCH_WHY (PATH_MAX + 512) /* a cache directory's path and more */
struct bfs_fetch_backend {
	const struct bfs_fetch_ops *ops;
	/* read_all reads rows past the page cache (data that does not fit:
	 * O_DIRECT) and through it (buffered), so the gathers may read the
	 * rows of fields that are not small. */
	bool rows;
	/* ahead may be used (false: none, or it would be unsafe). */
	bool ahead;
	char why[BFS_FETCH_WHY]; /* what reads, and why */
	const char *no_ahead;	 /* why not ahead, if it says; static */
};

/* When you add a backend: fill in struct bfs_fetch_backend (rows, ahead,
 * why), and name it: stats and dataset.json call the name the reader. */
struct bfs_fetch_ops {
	const char *name; /* "io_uring", "threads", "none" */
	/* Read every one of r[0..n) into its buffer, many in flight, and
	 * wait for all: when it returns nothing more lands in the buffers.
	 * 0, or -errno (-EIO: one failed or came back short). Any number
	 * of threads at once. */
	int (*read_all)(struct bfs_fetch_backend *be,
			const struct bfs_fetch_range *r, size_t n);
	/* Start bringing [off, off + len) of 'file' in (the page cache, a
	 * remote object's cache), not waiting for it; may wait for room. A
	 * hint: never fails. 'when': when it is next needed (the
	 * read-ahead's clock, bfs_fetch_now). Any thread. */
	void (*ahead)(struct bfs_fetch_backend *be, size_t file, uint64_t off,
		      uint64_t len, uint64_t when);
	/* Several ranges of a batch at once (r sorted by file and offset),
	 * as ahead: neighbours may make one request. May be NULL (then
	 * ahead, range by range). */
	void (*ahead_ranges)(struct bfs_fetch_backend *be,
			     const struct bfs_fetch_range *r, size_t n,
			     uint64_t when);
	/* Of r[0..n), the pages each row of one field of a batch touches
	 * (4096-aligned; ragged: a ragged field's rows, by their spans), the
	 * ranges to read ahead, moved to the front: how many; the rows left
	 * out as known resident are counted in *resident. fs/reader's keeps
	 * a local file's rows not known resident and nothing of a ragged
	 * field; fs/fetch_remote's a remote file's all, cut at its end. May
	 * be NULL (every range is read). Any thread. */
	size_t (*pick)(struct bfs_fetch_backend *be, struct bfs_fetch_range *r,
		       size_t n, bool ragged, uint64_t *resident);
	/* The ranges of a batch further ahead, needed at 'when' (r as in
	 * ahead_ranges): remember the use, fetch nothing (a remote
	 * object's cache plans it: bfs_cache_plan). May be NULL (nothing
	 * to plan). */
	void (*plan_ranges)(struct bfs_fetch_backend *be,
			    const struct bfs_fetch_range *r, size_t n,
			    uint64_t when);
	/* Where a file's bytes are not always in its mapping (a remote
	 * object's cache file): make r[0..n) (sorted by file and offset;
	 * buf unused) present and keep them so until release, waiting at
	 * most until deadline_ns (CLOCK_MONOTONIC). 0, or -errno with a
	 * log line's reason (bfs_log_err_last): then nothing is held. NULL:
	 * every byte of every file is always there. */
	int (*hold)(struct bfs_fetch_backend *be,
		    const struct bfs_fetch_range *r, size_t n,
		    uint64_t deadline_ns);
	void (*release)(struct bfs_fetch_backend *be,
			const struct bfs_fetch_range *r, size_t n);
	/* Advice: ask the kernel to read the rows of samples idx[0..n) of
	 * the fields 'fields' marks ([nfields]: fixed ones) that are not
	 * known resident, counted in *out (fs/reader's: madvise WILLNEED of
	 * a local file's mapping; a remote file's rows are never advised).
	 * Best effort. May be NULL (nothing advised). Any thread. */
	void (*advise)(struct bfs_fetch_backend *be, const uint64_t *idx,
		       size_t n, const bool *fields,
		       struct bfs_fetch_tally *out);
	/* Which files need holds now (may be NULL: none); a file may stop
	 * needing them, never start again. */
	bool (*held)(struct bfs_fetch_backend *be, size_t file);
	/* The readers are at 'when' (may be NULL). */
	void (*now)(struct bfs_fetch_backend *be, uint64_t when);
	/* Counters of remote objects (may be NULL: none). */
	void (*remote_stats)(struct bfs_fetch_backend *be,
			     struct bfs_objects_stats *out);
	void (*stats)(struct bfs_fetch_backend *be,
		      struct bfs_fetch_backend_stats *out);
	/* Wait for the reads in flight, free. */
	void (*destroy)(struct bfs_fetch_backend *be);
};

/* ---- the fetch ----------------------------------------------------------- */

struct bfs_fetch;

/* The fetch of 'ds' (borrowed; must outlive it) over backend 'be' (owned
 * from now on, also when this fails; NULL: none, nothing is read): picks
 * the fields whose rows gathers read themselves when be->rows. 0 or
 * -ENOMEM. */
int bfs_fetch_create(struct bfs_fetch **out, const struct bfs_dataset *ds,
		     struct bfs_fetch_backend *be);

/* Destroy the backend (it waits for its reads), free. Accepts NULL. */
void bfs_fetch_destroy(struct bfs_fetch *f);

/* Whether ranges can be read ahead (bfs_fetch_ahead): the backend's
 * 'ahead'. Accepts NULL (false). */
bool bfs_fetch_reads_ahead(const struct bfs_fetch *f);

/* Start reading bytes [off, off + len) of file 'file' into the page
 * cache (a remote one: its cache), next needed at 'when'; may wait while
 * the backend has as many in flight as it takes. Only when
 * bfs_fetch_reads_ahead. */
void bfs_fetch_ahead(struct bfs_fetch *f, size_t file, uint64_t off,
		     uint64_t len, uint64_t when);

/* The read-ahead of the batch of samples idx[0..n), next needed at
 * 'when': the pages its rows touch (every field but those the gathers
 * read; ragged ones by their spans where some file is held), those the
 * backend picks (pick) sorted by file and offset, merged where they
 * touch, and read ahead, all at once where the backend takes a batch's
 * ranges together (ahead_ranges), else range by range until *stop is
 * set (NULL: never; a set *stop hands nothing at once). Returns how
 * many ranges were handed to the backend; rows left out as known
 * resident are counted in *out. Only when bfs_fetch_reads_ahead. */
size_t bfs_fetch_ahead_rows(struct bfs_fetch *f, const uint64_t *idx, size_t n,
			    uint64_t when, const atomic_bool *stop,
			    struct bfs_fetch_tally *out);

/* The batch of samples idx[0..n), beyond what is read ahead, needed at
 * 'when': its ranges found as bfs_fetch_ahead_rows finds them, told to
 * the backend (plan_ranges), nothing read. Whether the backend
 * remembers such uses: bfs_fetch_plans. Accepts NULL. */
void bfs_fetch_plan_rows(struct bfs_fetch *f, const uint64_t *idx, size_t n,
			 uint64_t when, struct bfs_fetch_tally *out);
bool bfs_fetch_plans(const struct bfs_fetch *f);

/* Whether the read-ahead should go on reading once the read-in of data
 * that fits (fs/memory) has ended: where some file is held, as
 * fs/memory never reads those in; no longer once a hold found that none
 * needs holding any more (every object sealed: all there, kept). Accepts
 * NULL (false). */
bool bfs_fetch_reads_after_read_in(const struct bfs_fetch *f);

/* The most batches worth reading ahead of a lane's readers, where an
 * epoch is 'epoch' batches: an epoch where some file is held (its
 * batches fetch every row there is to fetch), else UINT64_MAX. */
uint64_t bfs_fetch_window_cap(const struct bfs_fetch *f, uint64_t epoch);

/* Ask the kernel to read the rows of samples idx[0..n) (every fixed
 * field but those the gathers read; ragged ones need their offsets) that
 * are not known resident: the backend's advise; what it found counted in
 * *out. Best effort. Accepts NULL (nothing). */
void bfs_fetch_advise(struct bfs_fetch *f, const uint64_t *idx, size_t n,
		      struct bfs_fetch_tally *out);

/* Whether file 'file' needs holding now (a remote object's cache file:
 * its rows are read only between bfs_fetch_hold and bfs_fetch_release,
 * until the object is sealed: all of it in the cache, kept there; a file
 * that stops needing holds never needs them again). Accepts NULL
 * (false). */
bool bfs_fetch_held(const struct bfs_fetch *f, size_t file);

/* The readers are at 'when' on the read-ahead's clock (bfs_fetch_ahead's
 * next uses before it are stale). Accepts NULL. */
void bfs_fetch_now(struct bfs_fetch *f, uint64_t when);

/* A gathering thread's holds: NULL when no file needs holding (then
 * bfs_fetch_hold is never needed). */
struct bfs_fetch_hold;
struct bfs_fetch_hold *bfs_fetch_hold_open(struct bfs_fetch *f);
void bfs_fetch_hold_close(struct bfs_fetch_hold *h); /* accepts NULL */

/* Before a gather of samples idx[0..n) reads the mappings: every byte
 * their rows touch in the files that need holding (every field, ragged
 * ones by their spans) present and kept so until bfs_fetch_release
 * (h: the thread's, NULL: nothing to hold, 0). Waits at most until
 * deadline_ns. 0, or -errno (-EIO, -ETIMEDOUT, ...; the reason logged
 * for bfs_log_err_last): nothing held then. */
int bfs_fetch_hold(struct bfs_fetch *f, struct bfs_fetch_hold *h,
		   const uint64_t *idx, size_t n, uint64_t deadline_ns);
/* After the gather: what bfs_fetch_hold held, let go. Accepts NULL h. */
void bfs_fetch_release(struct bfs_fetch *f, struct bfs_fetch_hold *h);

/* Whether the rows of field 'field' are read by the gathers themselves
 * (so advice and read-ahead leave them alone). Accepts NULL (false). */
bool bfs_fetch_field(const struct bfs_fetch *f, size_t field);

/* Whether the gathers read the rows of some field themselves (data that
 * does not fit, rows of big fields: bfs_fetch_rows), so serving rows
 * from the mappings would read them through the page cache instead.
 * Accepts NULL (false). */
bool bfs_fetch_gathers_read(const struct bfs_fetch *f);

/* Batches are served straight from the mappings (zero copy): from now on
 * no field is read by the gathers, and advice and read-ahead take every
 * field. Before any read (the pool, at its creation). Accepts NULL. */
void bfs_fetch_serve_mapped(struct bfs_fetch *f);

/* A gathering thread's means to read rows itself (its memory), or NULL
 * when no field is read so (data that fits, rows under 32 KiB or not
 * stored as served, a backend that cannot, served mapped). Accepts NULL
 * (NULL). */
struct bfs_fetch_rows;
struct bfs_fetch_rows *bfs_fetch_rows_open(struct bfs_fetch *f);
void bfs_fetch_rows_close(struct bfs_fetch_rows *w); /* accepts NULL */

/* The rows of the fields read so, of samples idx[0..n), read through the
 * backend into w's memory, all in flight at once: *have (valid until w's
 * next read) for bfs_layout_fill_from. 0, or -errno (-EIO: a read failed
 * or came back short; then gather from the mapping, which finds and
 * names the fault). The caller checks the files (bfs_dataset_check)
 * after the reads, before it trusts the bytes. */
int bfs_fetch_rows(struct bfs_fetch *f, struct bfs_fetch_rows *w,
		   const uint64_t *idx, size_t n, bfs_layout_rows *have);

/* Counters since creation, and what reads: the backend's name ("none"
 * without one); 'why' says how and why. */
struct bfs_fetch_stats {
	const char *backend;
	char why[BFS_FETCH_WHY];
	uint64_t ahead_in_flight; /* reads ahead queued or running now */
	uint64_t ahead_bytes;	  /* read ahead */
	uint64_t rows;		  /* rows read by the gathers */
	uint64_t bytes;		  /* ... bytes */
	bool remote;		  /* remote objects: 'objects' says */
	struct bfs_objects_stats objects;
};
void bfs_fetch_stats(struct bfs_fetch *f, struct bfs_fetch_stats *out);

#endif
