/* fs/order: which samples form batch K of epoch N — PyTorch's samplers and
 * DataLoader generator consumption, bit for bit
 * (fs/README.md: the order engine) — and what names a batch: its id
 * (lane, epoch, batch) and its position (fs/README.md: several ranks in
 * one mount).
 *
 * Epoch N's order is a pure function of (options, N): any batch of any epoch
 * is directly addressable. */
#ifndef BFS_ORDER_H
#define BFS_ORDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/error.h"

enum bfs_sampler {
	BFS_SAMPLER_SEQUENTIAL,	 /* DataLoader(ds, B) */
	BFS_SAMPLER_RANDOM,	 /* shuffle=True / RandomSampler */
	BFS_SAMPLER_SUBSET,	 /* SubsetRandomSampler(indices) */
	BFS_SAMPLER_WEIGHTED,	 /* WeightedRandomSampler(w, M, True) */
	BFS_SAMPLER_DISTRIBUTED, /* DistributedSampler(ds, W, R, ...) */
};

/* Which torch's order (fs/README.md: the order engine). The orders differ
 * in two places only: WeightedRandomSampler drawing one sample per epoch
 * (torch.multinomial's cumulative search in 1.13; from 2.1 on, argmax of
 * weight / Exp(1), 2n words) and randperm(n) for n >= 214748364 (an
 * inside-out shuffle with 64-bit words from 2.7 on). */
enum bfs_torch_compat {
	BFS_TORCH_1_13 = 113, /* torch 1.13 (and 2.0: unverified) */
	BFS_TORCH_2_1 = 201,  /* 2.1 .. 2.6: one weighted draw by argmax */
	BFS_TORCH_2_7 = 207,  /* 2.7+: and the inside-out large randperm */
};
#define BFS_TORCH_DEFAULT BFS_TORCH_2_7

/* The model serving torch version 'v' ("2.13.0", "1.13.1+cpu", "2.7"):
 * 0, *c and *verified (the golden tests ran against that MAJOR.MINOR:
 * 1.13, 2.13, 2.14), or -EINVAL for what is not MAJOR.MINOR... or is older
 * than 1.13 (not modelled). */
int bfs_torch_compat_of(const char *v, enum bfs_torch_compat *c,
			bool *verified);
/* "1.13", "2.1", "2.7"; the torch versions a model was verified against
 * ("1.13", "2.13 and 2.14", or "" when none). */
const char *bfs_torch_compat_name(enum bfs_torch_compat c);
const char *bfs_torch_compat_verified(enum bfs_torch_compat c);

struct bfs_order_opts {
	enum bfs_sampler sampler;
	uint64_t n;	     /* len(dataset) */
	const char *source;  /* the dataset, named when its size is refused */
	uint64_t batch_size; /* >= 1 */
	bool drop_last;	     /* DataLoader's */
	uint64_t seed; /* torch.Generator().manual_seed(seed) / sampler seed */
	/* RANDOM: */
	bool replacement;
	uint64_t num_samples; /* 0 = len(dataset) (RANDOM); required WEIGHTED */
	/* SUBSET: indices into the dataset (copied) */
	const int64_t *subset;
	size_t subset_len;
	/* WEIGHTED: one weight per sample (copied) */
	const double *weights;
	size_t weights_len;
	/* DISTRIBUTED: */
	uint32_t world_size, rank;
	bool shuffle;
	bool sampler_drop_last; /* DistributedSampler's own drop_last */
	/* DISTRIBUTED, several ranks in one engine (a multi-rank mount):
	 * ranks[0 .. nranks) (copied; 'rank' is then unused), in increasing
	 * order, each once: lane l serves rank ranks[l] (struct
	 * bfs_batch_id). nranks 0: one lane, serving 'rank'. */
	const uint32_t *ranks;
	size_t nranks;
	/* DISTRIBUTED, an elastic resume (--resume-at E:S): epoch
	 * resume_epoch holds only what the ranks had not read of it. Its
	 * list is DistributedSampler's for resume_world ranks (0: world_size)
	 * without the padding: the epoch's permutation, cut to a multiple of
	 * resume_world under sampler_drop_last. Positions 0 .. resume_pos of
	 * it were read; the rest is split among world_size ranks as
	 * DistributedSampler splits a list (rank r takes every world_size-th,
	 * padding from the head of the rest unless sampler_drop_last), then
	 * batched as usual. Every other epoch is plain. The resumed epoch
	 * has fewer batches (bfs_order_epoch_len): the ones past it are not
	 * there (bfs_order_has). */
	bool resume;
	uint64_t resume_epoch, resume_pos;
	uint32_t resume_world;
	/* Epochs 0 .. epochs-1 of every lane exist (--epochs): the one
	 * place the mount's epoch count enters the core; the pool, the
	 * read-ahead, serve and the namespace ask bfs_order_epochs. 0: as
	 * many as 64-bit positions hold (one lane only; a multi-rank
	 * engine needs its epochs). */
	uint64_t epochs;
	enum bfs_torch_compat compat; /* 0 = BFS_TORCH_DEFAULT */
	/* Optional torch.Generator.get_state() bytes (5056) to start from
	 * instead of manual_seed(seed); NULL = use seed. */
	const uint8_t *generator_state;
	size_t generator_state_len;
	/* What refusals call the subset, the weights and the state, e.g.
	 * "--subset FILE" (NULL: "subset indices", "weights", "generator
	 * state"). */
	const char *subset_name, *weights_name, *state_name;
	/* RANDOM only: the generator is torch's global one (the state is
	 * torch.get_rng_state()), as for DataLoader(shuffle=True) or
	 * RandomSampler without generator=: each epoch draws the base seed
	 * and then a seed for a fresh Generator() the sampler draws from
	 * (4 words of the global generator per epoch; epochs after the first
	 * assume nothing else drew from it in between). */
	bool global_generator;
	/* DataLoader(num_workers > 0, persistent_workers=True): the loader
	 * keeps one iterator, so its base seed (2 words of the loader's
	 * generator, which the shuffle and global forms draw the order
	 * from too) is drawn once, before epoch 0, not before every
	 * epoch. */
	bool persistent_workers;
};

struct bfs_order;

/* What a command line asked for, in DataLoader's terms. */
struct bfs_order_request {
	bool shuffle;		 /* shuffle=True (RandomSampler, or shuffled
				  * DistributedSampler) */
	bool replacement;	 /* RandomSampler(replacement=True) */
	uint64_t num_samples;	 /* RandomSampler/WeightedRandomSampler M */
	bool subset;		 /* SubsetRandomSampler(indices) */
	bool weights;		 /* WeightedRandomSampler(weights) */
	bool distributed;	 /* DistributedSampler (a world size given) */
	bool have_seed;		 /* a seed was given */
	bool generator_state;	 /* a generator's state was given */
	bool global_generator;	 /* torch's global generator's state was */
	bool have_compat;	 /* a torch version to match was given */
	bool persistent_workers; /* DataLoader(persistent_workers=True) */
	bool sampler_drop_last;	 /* DistributedSampler(drop_last=True) */
};

/* Whether r says one thing in PyTorch's terms: 0, or -EINVAL with 'err'
 * naming the option and why (a usage error). num_samples belongs to
 * RandomSampler (shuffle) or WeightedRandomSampler (weights): alone it
 * would not say which, and SubsetRandomSampler and DistributedSampler
 * have none; a subset and weights are two samplers; torch's global
 * generator is modelled for RandomSampler (shuffle) only; a generator's
 * state needs a sampler that draws from it; the sampler's drop_last is
 * DistributedSampler's (a world size). */
int bfs_order_request_check(const struct bfs_order_request *r,
			    struct bfs_error *err);

/* The options of r (checked) that change nothing in the order its
 * sampler makes, as one line each naming the option and why ("--seed: no
 * effect: ..."), into msgs[0 .. max): a seed for an order that is not
 * random or that starts from a state, --shuffle beside a sampler that is
 * random anyway, --replacement beside one that has no such choice,
 * --torch-compat for an order with no random permutation, persistent
 * workers where the order is not drawn from the generator the base seed
 * comes from. Returns how many (at most max); the strings are static. */
size_t bfs_order_request_unused(const struct bfs_order_request *r,
				const char **msgs, size_t max);

/* The one sampler PyTorch would use for r (a subset or weights win, then
 * distributed, then any random option, else sequential). */
enum bfs_sampler bfs_order_sampler_for(const struct bfs_order_request *r);

/* "sequential", "random", "subset_random", "weighted_random",
 * "distributed". */
const char *bfs_order_sampler_name(enum bfs_sampler s);

/* Whether the order of r is random at all. */
bool bfs_order_is_random(const struct bfs_order_request *r);

/* Whether DataLoader draws its per-iterator base seed from the generator
 * the order of r is drawn from (DataLoader(shuffle=True, generator=G), or
 * torch's global generator with --rng-state): only then do persistent
 * workers, which draw it once, change the order (epochs 1 and later). */
bool bfs_order_request_draws_base_seed(const struct bfs_order_request *r);

/* Where the seed of r comes from: "unused" (no generator is drawn from),
 * "default" (DistributedSampler's 0), "--generator-state", "--rng-state"
 * (global_generator), "--seed", or
 * "getrandom" (a random sampler with no seed: the caller draws one and
 * reports it, as torch draws one from its global generator). */
const char *bfs_order_seed_source(const struct bfs_order_request *r);

/* Validate options (as PyTorch would: batch_size > 0, num_samples > 0,
 * rank < world_size, indices within n, weights finite and >= 0 ...; and
 * ranks in increasing order, epochs for several ranks, positions that
 * fit 64 bits) and build the engine. Returns 0, -EINVAL with 'err' saying
 * which option is wrong and why, or -EFBIG with 'err' naming o->source
 * when a random sampler's per-epoch tables (one value per sample drawn, 4
 * or 8 bytes, for each of the epochs kept at once) would not fit this
 * machine's memory. */
int bfs_order_create(struct bfs_order **out, const struct bfs_order_opts *o,
		     struct bfs_error *err);

/* Free; accepts NULL. */
void bfs_order_destroy(struct bfs_order *o);

/* 0 when an epoch of o has at least one batch; else -EINVAL with 'err'
 * (file: 'source') saying why there is none: no samples, or drop_last
 * with fewer samples per epoch (per rank) than a batch. */
int bfs_order_check_len(const struct bfs_order *o, const char *source,
			struct bfs_error *err);

/* Lanes: the ranks served (1 unless opts.nranks). */
size_t bfs_order_lanes(const struct bfs_order *o);

/* Whether o was made with opts.nranks (a mount of it has /rank/R/...),
 * even for one rank. */
bool bfs_order_ranked(const struct bfs_order *o);

/* DistributedSampler's num_replicas (1 for the other samplers). */
uint32_t bfs_order_world_size(const struct bfs_order *o);

/* The rank lane l serves (opts.rank for a one-rank engine). */
uint32_t bfs_order_rank_of_lane(const struct bfs_order *o, size_t lane);

/* The lane serving rank r into *lane: 0, or -ENOENT when o serves no
 * such rank (O(log lanes)). */
int bfs_order_lane_of_rank(const struct bfs_order *o, uint64_t r, size_t *lane);

/* ---- batch identity ------------------------------------------------------
 *
 * A batch is named by its id: batch 'batch' of epoch 'epoch' of the rank
 * that lane 'lane' serves. The epoch is the rank's own: rank/R/epoch/N is
 * epoch N, as on a --rank R mount, and the batch's bytes depend only on
 * (dataset, options, rank, epoch, batch). What keeps batches in tables
 * and windows (the pool, the read-ahead, the push ledger) numbers them
 * by position instead, lane-major:
 *
 *   pos = (lane x epochs + epoch) x len + batch,  0 .. bfs_order_positions
 *
 * so each lane's batches are one range, its epochs one after another,
 * and pos + 1 is the batch its readers want next (until the lane's end).
 * Only this room does that arithmetic: the rooms above convert through
 * the functions below. */
struct bfs_batch_id {
	size_t lane;	/* the rank served: bfs_order_rank_of_lane; 0 on a
			 * one-rank engine */
	uint64_t epoch; /* the rank's epoch, 0 .. bfs_order_epochs - 1 */
	uint64_t batch; /* 0 .. bfs_order_len - 1 */
};

/* A batch the order located (bfs_order_locate): its id, its position and
 * its samples' count, handed down together so a batch is looked up once
 * (an open locates it; serve, the pool and the read-ahead take this). */
struct bfs_batch_loc {
	struct bfs_batch_id id;
	uint64_t pos;  /* bfs_order_pos(id) */
	uint64_t rows; /* bfs_order_rows(id) */
};

/* Epochs of each lane (opts.epochs, or what positions hold). */
uint64_t bfs_order_epochs(const struct bfs_order *o);

/* Positions of o: lanes x epochs x len (a batch's position is below). */
uint64_t bfs_order_positions(const struct bfs_order *o);

/* Whether o has batch id (lane, epoch and batch in range: below
 * bfs_order_epoch_len of its epoch). */
bool bfs_order_has(const struct bfs_order *o, struct bfs_batch_id id);

/* The position of batch id, or UINT64_MAX when o has no such batch. */
uint64_t bfs_order_pos(const struct bfs_order *o, struct bfs_batch_id id);

/* The batch at position pos < bfs_order_positions (past it: lane
 * bfs_order_lanes, never a lane of o). */
struct bfs_batch_id bfs_order_id(const struct bfs_order *o, uint64_t pos);

/* Batch id located into *at, or the batch at position pos: 0, or -ENOENT
 * when o has no such batch. Arithmetic, O(1). */
int bfs_order_locate(const struct bfs_order *o, struct bfs_batch_id id,
		     struct bfs_batch_loc *at);
int bfs_order_locate_pos(const struct bfs_order *o, uint64_t pos,
			 struct bfs_batch_loc *at);

/* The lane of position pos, and the end of lane l's positions (one past
 * its last batch): a lane's batches are [l's end - epochs x len, end). */
size_t bfs_order_lane_of(const struct bfs_order *o, uint64_t pos);
uint64_t bfs_order_lane_end(const struct bfs_order *o, size_t lane);

/* Every lane's epochs numbered lane-major, lane x epochs + epoch: the
 * number of id's epoch (id.batch ignored), and the epoch of a number
 * (batch 0; -ENOENT past the last). For encodings with a field per epoch
 * (fs/tree's inode numbers). */
uint64_t bfs_order_epoch_serial(const struct bfs_order *o,
				struct bfs_batch_id id);
/* How many numbers bfs_order_epoch_serial gives: every lane's epochs. */
uint64_t bfs_order_epoch_serials(const struct bfs_order *o);
int bfs_order_epoch_of_serial(const struct bfs_order *o, uint64_t serial,
			      struct bfs_batch_id *id);

/* "epoch E batch K", or "rank R epoch E batch K" on a multi-rank engine:
 * what messages call batch id. */
void bfs_order_batch_name(const struct bfs_order *o, struct bfs_batch_id id,
			  char *buf, size_t len);

/* Batches per epoch = len(DataLoader) for this rank (every rank of a
 * multi-rank engine has as many): what positions count per epoch. */
uint64_t bfs_order_len(const struct bfs_order *o);

/* Batches of epoch e: bfs_order_len, or fewer for the epoch an elastic
 * resume starts in (opts.resume): its batches from here to
 * bfs_order_len are holes in the positions, which no one has. */
uint64_t bfs_order_epoch_len(const struct bfs_order *o, uint64_t e);

/* An elastic resume, as dataset.json says it: the epoch, the position it
 * goes on from, the world size whose list that is (opts.resume_world, or
 * the world size), the samples of the epoch left (what the world size
 * splits). */
struct bfs_order_resume {
	uint64_t epoch, pos, left;
	uint32_t world;
};

/* Whether o resumes an epoch (opts.resume), and how into *r. */
bool bfs_order_resumes(const struct bfs_order *o, struct bfs_order_resume *r);

/* DistributedSampler's drop_last (false for the other samplers). */
bool bfs_order_sampler_drop_last(const struct bfs_order *o);

/* Whether o's generator also gives DataLoader's base seed, so that
 * persistent workers change its epochs after the first (as
 * bfs_order_request_draws_base_seed), and whether o models them
 * (opts.persistent_workers). */
bool bfs_order_draws_base_seed(const struct bfs_order *o);
bool bfs_order_persistent(const struct bfs_order *o);

/* Samples in batch k of a plain epoch (batch_size, or fewer for the
 * last batch when drop_last is off); 0 when k >= len. */
uint64_t bfs_order_batch_rows(const struct bfs_order *o, uint64_t k);

/* Samples in batch id, its epoch's own count (a resumed epoch's last
 * batch may be shorter); 0 when o has no such batch. */
uint64_t bfs_order_rows(const struct bfs_order *o, struct bfs_batch_id id);

/* Fill idx[0 .. rows) with the dataset indices of batch id (rows:
 * bfs_order_rows(id)). Thread-safe. The first call for an
 * epoch computes (and caches) that epoch's order; it returns as soon as
 * the batch is known (forward Fisher-Yates fixes a[i] after step i).
 * Returns 0, -ENOENT when o has no such batch, -ENOMEM. */
int bfs_order_batch(struct bfs_order *o, struct bfs_batch_id id, uint64_t *idx);

/* The equivalent PyTorch construction, one line of Python, e.g.
 * "DataLoader(ds, batch_size=256, shuffle=True, drop_last=False,
 *  generator=torch.Generator().manual_seed(7))" (persistent workers add
 * "num_workers=WORKERS, persistent_workers=True": any WORKERS >= 1).
 * Returns the length that snprintf would (the string is always
 * NUL-terminated when len > 0). */
int bfs_order_describe(const struct bfs_order *o, char *buf, size_t len);
/* Whether another torch model (enum bfs_torch_compat) would give this
 * order differently: one weighted draw per epoch, or a randperm of
 * 214748364 or more. */
bool bfs_order_torch_differs(const struct bfs_order *o);
enum bfs_torch_compat bfs_order_torch_compat(const struct bfs_order *o);

#endif
