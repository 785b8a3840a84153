/* Building, reusing and tearing down a loader: the file list (files.c),
 * the ring (one mmap; in CUDA mode pinned once, a device ring and two
 * events per slot), the choice of mode, the threads.
 *
 * Mode: AUTO tries the CUDA backend and, if any step of it fails (no
 * driver, no device, out of device or pinned memory, a failing driver
 * call, a copy thread that cannot bind its context), starts over in CPU
 * mode with one line saying why; mode CUDA fails with that line instead.
 * Errors unrelated to CUDA (no such directory, ...) fail either way.
 *
 * Reuse: bfs_loader_reopen() swaps the file list of an idle loader (no
 * batch held) and restarts its threads; the ring, its registration, the
 * device memory, the stream and the events stay, so a training loop that
 * reopens every epoch pins and allocates once. Copies still in flight are
 * left to the new copy thread to retire.
 *
 * Lock: as in loader.c; the threads are stopped (joined) whenever the
 * fields that are not marked (mu) change. */
#include "loader/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define DEF_SLOTS   3
#define SMALL_SLOTS 8 /* the default for files of one 2 MiB slot */
#define DEF_CHUNK   (4u << 20)
#define SLOT_ALIGN  (2u << 20)
#ifndef MADV_POPULATE_WRITE
#define POPULATE_WRITE 23 /* Linux 5.14; older kernels: EINVAL, memset */
#else
#define POPULATE_WRITE MADV_POPULATE_WRITE
#endif

/* Reader threads by default: half the online CPUs, 4 to 8. On a 16-core
 * H200 machine, 256 MiB batches from the page cache, E (file -> device)
 * went 15.6 -> 25.9 GB/s from 4 to 8 readers (loader/README.md,
 * "Performance"); fewer cores gain nothing from more. */
static unsigned default_readers(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN) / 2;
	return n < 4 ? 4 : n > 8 ? 8 : (unsigned)n;
}

/* The CUDA backend failed: remember why, for the one line open logs. */
static int gpu_failed(struct bfs_loader *L, int rc, const char *what)
{
	L->gpu_failed = 1;
	snprintf(L->why, sizeof(L->why), "%s: %s", what,
		 bfs_loader_gpu_err(L->gpu));
	return rc;
}

/* Slot size = the largest file, rounded up to 2 MiB. By default 3 slots,
 * or SMALL_SLOTS when every file fits in one 2 MiB slot: small batches
 * cost a round trip each more than their bytes, so more of them are read
 * at once (a 16 MiB ring; loader/README.md has the figures). */
static int size_slots(struct bfs_loader *L, unsigned asked)
{
	if (L->fl.max > SIZE_MAX / 4 - SLOT_ALIGN)
		return -EFBIG;
	L->slot_bytes =
	    (size_t)(L->fl.max + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
	if (!asked && L->slot_bytes == SLOT_ALIGN)
		L->nslots = SMALL_SLOTS;
	if (L->fl.n < L->nslots)
		L->nslots = (unsigned)L->fl.n;
	L->ring_bytes = L->slot_bytes * L->nslots;
	return 0;
}

static int open_gpu(struct bfs_loader *L, int device)
{
	int rc = bfs_loader_gpu_open(&L->gpu, device, L->why, sizeof(L->why));

	if (rc < 0) {
		L->gpu_failed = 1;
		return rc;
	}
	bfs_loader_log(&L->log, BFS_LOADER_LOG_DEBUG, "CUDA mode: %s", L->why);
	return 0;
}

/* make_ring's CUDA part: one registration, the device ring, the events. */
static int make_gpu_ring(struct bfs_loader *L)
{
	char what[96];
	int rc;

	/* A forked child (a DataLoader worker) must not share pinned pages:
	 * whoever writes a copy-on-write page after the fork gets a new page,
	 * and if that is the parent, its ring is no longer what the driver
	 * pinned and copies from. */
	if (madvise(L->ring, L->ring_bytes, MADV_DONTFORK) != 0) {
		rc = -errno;
		L->gpu_failed = 1;
		snprintf(L->why, sizeof(L->why), "madvise(MADV_DONTFORK): %s",
			 bfs_loader_errstr(rc));
		return rc;
	}
	if ((rc = bfs_loader_gpu_push(L->gpu)) < 0)
		return gpu_failed(L, rc, "context");
	snprintf(what, sizeof(what), "pinning the %zu-byte host ring",
		 L->ring_bytes);
	rc = bfs_loader_gpu_register(L->gpu, L->ring, L->ring_bytes);
	L->registered = rc == 0;
	L->st.pin_calls += rc == 0;
	if (rc == 0) {
		snprintf(what, sizeof(what), "the %zu-byte device ring",
			 L->ring_bytes);
		rc = bfs_loader_gpu_alloc(L->gpu, L->ring_bytes, &L->dring);
	}
	for (unsigned i = 0; rc == 0 && i < L->nslots; i++) {
		struct bfs_loader_slot *s = &L->slots[i];
		s->dev = L->dring + (uint64_t)i * L->slot_bytes;
		snprintf(what, sizeof(what), "events");
		rc = bfs_loader_gpu_event_create(L->gpu, &s->ready);
		if (rc == 0)
			rc = bfs_loader_gpu_event_create(L->gpu, &s->released);
	}
	if (rc < 0)
		gpu_failed(L, rc, what);
	bfs_loader_gpu_pop(L->gpu);
	return rc;
}

/* Host ring (one mmap), slots, and in CUDA mode its device side. */
static int make_ring(struct bfs_loader *L)
{
	/* Transparent huge pages where allowed (fewer faults and TLB misses
	 * for the kernel's copy into the ring), then populate up front so no
	 * read takes a page fault. */
	L->ring = mmap(NULL, L->ring_bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (L->ring == MAP_FAILED) {
		L->ring = NULL;
		return -ENOMEM;
	}
	madvise(L->ring, L->ring_bytes, MADV_HUGEPAGE);
	if (madvise(L->ring, L->ring_bytes, POPULATE_WRITE) != 0)
		memset(L->ring, 0, L->ring_bytes);
	L->slots = calloc(L->nslots, sizeof(*L->slots));
	L->inflight = calloc(L->nslots, sizeof(*L->inflight));
	if (!L->slots || !L->inflight)
		return -ENOMEM;
	for (unsigned i = 0; i < L->nslots; i++) {
		struct bfs_loader_slot *s = &L->slots[i];
		s->host = L->ring + (size_t)i * L->slot_bytes;
		s->dev = (uint64_t)(uintptr_t)s->host;
		s->fd = -1;
		s->hbatch = s->dbatch = BFS_LOADER_NO_BATCH;
	}
	return L->gpu ? make_gpu_ring(L) : 0;
}

/* Readers, and in CUDA mode the copy thread, which must have bound the
 * context (copier_up) before this returns. */
static int start_threads(struct bfs_loader *L)
{
	int up;

	if (!L->readers &&
	    !(L->readers = calloc(L->nreaders, sizeof(*L->readers))))
		return -ENOMEM;
	for (; L->nstarted < L->nreaders; L->nstarted++)
		if (pthread_create(&L->readers[L->nstarted], NULL,
				   bfs_loader_reader_main, L))
			return -EAGAIN;
	if (!L->gpu)
		return 0;
	L->copier_live = 1;
	L->copier_up = 0;
	if (pthread_create(&L->copier, NULL, bfs_loader_copier_main, L)) {
		L->copier_live = 0;
		return -EAGAIN;
	}
	L->copier_started = 1;
	pthread_mutex_lock(&L->mu);
	while (!L->copier_up)
		pthread_cond_wait(&L->ready_cv, &L->mu);
	up = L->copier_up;
	pthread_mutex_unlock(&L->mu);
	return up < 0 ? up : 0;
}

/* Stop and join every thread; close the files they left open. */
static void stop_threads(struct bfs_loader *L)
{
	pthread_mutex_lock(&L->mu);
	L->stop = 1;
	pthread_cond_broadcast(&L->work_cv);
	pthread_cond_broadcast(&L->copy_cv);
	pthread_cond_broadcast(&L->ready_cv);
	pthread_mutex_unlock(&L->mu);
	for (unsigned i = 0; i < L->nstarted; i++)
		pthread_join(L->readers[i], NULL);
	L->nstarted = 0;
	if (L->copier_started)
		pthread_join(L->copier, NULL);
	L->copier_started = 0;
	for (unsigned i = 0; L->slots && i < L->nslots; i++) {
		if (L->slots[i].fd >= 0)
			close(L->slots[i].fd);
		L->slots[i].fd = -1;
	}
}

static int check_opts(const struct bfs_loader_opts *o)
{
	if (!o || !o->dir == !o->files || o->mode > BFS_LOADER_CUDA ||
	    o->slots == 1 || o->slots > 256 || o->readers > 256 ||
	    (o->chunk && o->chunk < 4096))
		return -EINVAL;
	return 0;
}

static struct bfs_loader *loader_new(const struct bfs_loader_opts *o)
{
	struct bfs_loader *L = calloc(1, sizeof(*L));

	if (!L)
		return NULL;
	pthread_mutex_init(&L->mu, NULL);
	pthread_cond_init(&L->work_cv, NULL);
	pthread_cond_init(&L->copy_cv, NULL);
	pthread_cond_init(&L->ready_cv, NULL);
	L->log = (struct bfs_loader_logger){o->log, o->log_arg, o->log_level};
	L->nslots = o->slots ? o->slots : DEF_SLOTS;
	L->nreaders = o->readers ? o->readers : default_readers();
	L->chunk = o->chunk ? o->chunk : DEF_CHUNK;
	L->flags = o->flags;
	atomic_init(&L->direct, !(o->flags & BFS_LOADER_NO_DIRECT));
	L->err_batch = BFS_LOADER_NO_BATCH;
	return L;
}

/* Files, ring, backend (when 'cuda'), threads. A failure of the CUDA
 * backend sets L->gpu_failed and L->why. */
static int loader_start(struct bfs_loader *L, const struct bfs_loader_opts *o,
			int cuda)
{
	int rc = bfs_loader_files_list(&L->log, o->dir, o->files, &L->fl);

	if (rc == 0)
		rc = size_slots(L, o->slots);
	if (rc == 0 && cuda)
		rc = open_gpu(L, o->device);
	if (rc == 0)
		rc = make_ring(L);
	if (rc == 0)
		rc = start_threads(L);
	return rc;
}

int bfs_loader_open(struct bfs_loader **out, const struct bfs_loader_opts *o)
{
	struct bfs_loader *L;
	int rc;

	if (!out)
		return -EINVAL;
	*out = NULL;
	if (check_opts(o) < 0)
		return -EINVAL;
	if (!(L = loader_new(o)))
		return -ENOMEM;
	rc = loader_start(L, o, o->mode != BFS_LOADER_CPU);
	if (rc < 0 && L->gpu_failed && o->mode == BFS_LOADER_AUTO) {
		bfs_loader_log(&L->log, BFS_LOADER_LOG_INFO,
			       "CPU mode: CUDA unavailable: %s", L->why);
		bfs_loader_close(L);
		if (!(L = loader_new(o)))
			return -ENOMEM;
		rc = loader_start(L, o, 0);
	} else if (rc < 0 && L->gpu_failed) {
		bfs_loader_log(&L->log, BFS_LOADER_LOG_ERR,
			       "CUDA mode requested but unavailable: %s",
			       L->why);
	}
	if (rc < 0) {
		bfs_loader_close(L);
		return rc;
	}
	L->st.ring_bytes = L->ring_bytes;
	if (L->gpu)
		bfs_loader_gpu_unrelax(L->gpu);
	*out = L;
	return 0;
}

/* Every slot ready for a new file list (threads stopped): host halves
 * with a copy in flight stay COPYING for the new copy thread to retire;
 * released events keep their last record, which the next copy into the
 * device half waits for. */
static void reset_slots(struct bfs_loader *L)
{
	for (unsigned i = 0; i < L->nslots; i++) {
		struct bfs_loader_slot *s = &L->slots[i];
		bfs_loader_meta_free(s->hmeta);
		bfs_loader_meta_free(s->dmeta);
		s->hmeta = s->dmeta = NULL;
		if (s->hs != H_COPYING)
			s->hs = H_FREE;
		s->ds = D_FREE;
		s->dbatch = BFS_LOADER_NO_BATCH;
	}
}

/* Why L cannot switch to the files of fl now (0 when it can). */
static int reopen_refusal(struct bfs_loader *L,
			  const struct bfs_loader_files *fl)
{
	uint64_t held = BFS_LOADER_NO_BATCH;

	pthread_mutex_lock(&L->mu);
	for (unsigned i = 0; i < L->nslots; i++)
		if (L->slots[i].ds == D_HELD || L->slots[i].ds == D_RELEASING)
			held = L->slots[i].dbatch;
	pthread_mutex_unlock(&L->mu);
	if (held != BFS_LOADER_NO_BATCH) {
		bfs_loader_log(&L->log, BFS_LOADER_LOG_ERR,
			       "reopen: batch %llu is still held; release it "
			       "first",
			       (unsigned long long)held);
		return -EBUSY;
	}
	if (fl->max > L->slot_bytes) {
		bfs_loader_log(&L->log, BFS_LOADER_LOG_ERR,
			       "reopen: a file of %llu bytes does not fit the "
			       "ring's %zu-byte slots; open a new loader",
			       (unsigned long long)fl->max, L->slot_bytes);
		return -EFBIG;
	}
	return 0;
}

int bfs_loader_reopen(struct bfs_loader *L, const char *dir,
		      const char *const *files)
{
	struct bfs_loader_files fl;
	int rc;

	if (!L || !dir == !files)
		return -EINVAL;
	rc = bfs_loader_files_list(&L->log, dir, files, &fl);
	if (rc == 0 && (rc = reopen_refusal(L, &fl)) < 0)
		bfs_loader_files_free(&fl);
	if (rc < 0)
		return rc;
	stop_threads(L);
	reset_slots(L);
	bfs_loader_files_free(&L->fl);
	L->fl = fl;
	pthread_mutex_lock(&L->mu);
	L->gen++;
	L->stop = 0;
	L->read_next = L->copy_next = L->deliver_next = 0;
	L->err_batch = BFS_LOADER_NO_BATCH;
	L->err_code = 0;
	L->err_msg[0] = L->user_msg[0] = 0;
	pthread_mutex_unlock(&L->mu);
	rc = start_threads(L);
	if (rc < 0) {
		pthread_mutex_lock(&L->mu);
		L->err_batch = 0;
		L->err_code = rc;
		snprintf(L->err_msg, sizeof(L->err_msg),
			 "reopen: cannot restart the loader's threads: %s",
			 L->gpu_failed ? L->why : bfs_loader_errstr(rc));
		pthread_mutex_unlock(&L->mu);
		bfs_loader_log(&L->log, BFS_LOADER_LOG_ERR, "%s", L->err_msg);
	}
	return rc;
}

/* Undo make_ring's CUDA part: wait for the copy stream and the consumer's
 * recorded releases (blocking waits), then free in reverse order. */
static void free_gpu(struct bfs_loader *L)
{
	bfs_loader_gpu_relax(L->gpu); /* restored by gpu_close */
	if (bfs_loader_gpu_push(L->gpu) == 0) {
		bfs_loader_gpu_drain(L->gpu);
		for (unsigned i = 0; L->slots && i < L->nslots; i++) {
			struct bfs_loader_slot *s = &L->slots[i];
			if (s->released_recorded)
				bfs_loader_gpu_event_sync(L->gpu, s->released);
			if (s->ready)
				bfs_loader_gpu_event_destroy(L->gpu, s->ready);
			if (s->released)
				bfs_loader_gpu_event_destroy(L->gpu,
							     s->released);
		}
		if (L->dring)
			bfs_loader_gpu_free(L->gpu, L->dring);
		if (L->registered)
			bfs_loader_gpu_unregister(L->gpu, L->ring);
		bfs_loader_gpu_pop(L->gpu);
	}
	bfs_loader_gpu_close(L->gpu);
}

void bfs_loader_close(struct bfs_loader *L)
{
	if (!L)
		return;
	stop_threads(L);
	for (unsigned i = 0; L->slots && i < L->nslots; i++) {
		bfs_loader_meta_free(L->slots[i].hmeta);
		bfs_loader_meta_free(L->slots[i].dmeta);
	}
	if (L->gpu)
		free_gpu(L);
	if (L->ring)
		munmap(L->ring, L->ring_bytes);
	bfs_loader_files_free(&L->fl);
	free(L->slots);
	free(L->inflight);
	free(L->readers);
	pthread_cond_destroy(&L->work_cv);
	pthread_cond_destroy(&L->copy_cv);
	pthread_cond_destroy(&L->ready_cv);
	pthread_mutex_destroy(&L->mu);
	free(L);
}
