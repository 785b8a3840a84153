/* fs/order_impl.h: private to fs/order.c (the samplers) and
 * fs/order_id.c (batch identity): the engine's state. Nothing else
 * includes it. */
#ifndef BFS_ORDER_IMPL_H
#define BFS_ORDER_IMPL_H

#include <pthread.h>
#include <stdint.h>

#include "fs/mt19937.h"
#include "fs/order.h"

#define BFS_ORDER_SLOTS 3
#define SNAPS		16 /* generator snapshots kept */

enum draw_kind {
	K_NONE,	  /* sequential / unshuffled distributed: arithmetic */
	K_PERM,	  /* concatenated randperm blocks of size 'perm_n' */
	K_REPL,	  /* randint(high=n) per sample */
	K_WEIGHT, /* multinomial with replacement */
};

struct slot {
	pthread_mutex_t lock;
	/* under table_lock: */
	uint64_t epoch;
	int used;
	unsigned pins;
	uint64_t stamp;
	/* under lock: */
	void *vals;	 /* uint32_t or uint64_t [o->cap], table_bytes mapped */
	uint64_t filled; /* draws [0, filled) are final */
	int started;
	struct bfs_mt mt; /* positioned to continue the draws */
};

struct bfs_order {
	struct bfs_order_opts opt; /* read-only after create */
	int64_t *subset;
	uint32_t *ranks;  /* opt.nranks of them (a multi-rank engine) */
	double *cdf;	  /* WEIGHTED: normalized cumulative weights */
	double *gumbel_w; /* WEIGHTED, one draw (torch >= 2.1): the weights */
	enum draw_kind kind;
	int shuffle_form; /* DataLoader(shuffle=True, generator=G) */
	int narrow;	  /* drawn values < 2^32 */
	uint64_t samples; /* len(sampler) for this rank */
	uint64_t batches;
	/* opt.resume: the resumed epoch's samples left (what world_size
	 * splits), its samples per rank and its batches */
	uint64_t resume_left, resume_samples, resume_batches;
	uint64_t epochs; /* of each lane: opt.epochs, or what positions hold */
	uint64_t perm_n; /* K_PERM block size */
	uint64_t cap;	 /* draws computed per epoch */
	uint64_t once_words;  /* words drawn once, before epoch 0 */
	uint64_t pre_words;   /* words drawn before the sampler */
	uint64_t epoch_words; /* words G consumes per epoch */
	struct bfs_mt mt0;    /* G at the start of epoch 0, after once_words */

	pthread_mutex_t snap_lock;
	struct snap {
		int used;
		uint64_t epoch, stamp;
		struct bfs_mt mt; /* G at the start of 'epoch' */
	} snaps[SNAPS];		  /* snap_lock */
	uint64_t snap_clock;	  /* snap_lock */

	pthread_mutex_t table_lock;
	pthread_cond_t table_cond;
	uint64_t clock;
	struct slot slots[BFS_ORDER_SLOTS];
};

#endif
