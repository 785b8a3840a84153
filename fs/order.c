/* fs/order: PyTorch's samplers and DataLoader generator consumption, bit
 * for bit (fs/README.md: the order engine).
 *
 * Model. Every epoch is iterated with a fresh DataLoader iterator to its
 * end. The sampler's generator G (manual_seed(seed), or set_state(blob))
 * then consumes a fixed number of words per epoch, independent of the
 * values drawn:
 *   shuffle form  DataLoader(shuffle=True, generator=G): _base_seed (2
 *                 words) is drawn from G first, then randperm(n) and the
 *                 discarded tail randperm(n)            2 + 2·perm(n)
 *   sampler forms DataLoader(sampler=X(generator=G)): _base_seed comes from
 *                 the *global* generator, G sees only the sampler:
 *                 RandomSampler w/o replacement  perm(n)·(m / n + 1)
 *                 RandomSampler with replacement m (2m if n >= 2^32)
 *                 SubsetRandomSampler            perm(len(indices))
 *                 WeightedRandomSampler          2M
 *   DistributedSampler: a fresh Generator().manual_seed(seed + epoch).
 *   global form   RandomSampler with no generator= (global_generator): G
 *                 is torch's global generator; each epoch draws _base_seed
 *                 (2 words), then the sampler's seed (2 words) for a fresh
 *                 Generator() that feeds the sampler          4
 *   persistent workers (DataLoader(num_workers > 0, persistent_workers=
 *                 True)): one iterator for every epoch, so _base_seed is
 *                 drawn once, before epoch 0: the shuffle and global
 *                 forms draw 2 words fewer per epoch, and 2 once (G0 is
 *                 then G after them); the other forms are unchanged.
 * perm(n) = n - 1 words (0 for n <= 1), or 2n for the inside-out shuffle of
 * torch >= 2.7 when n >= 214748364.
 *
 * So G's state at the start of epoch e is G0 advanced by e·words: the
 * states at the starts of the SNAPS epochs started most recently are kept
 * (snapshots, 2.5 KB each: a fixed 40 KB however many epochs a mount
 * lives) and a new one costs one bfs_mt_skip from the nearest earlier
 * snapshot (twists, or a ~0.1 s polynomial jump-ahead when that is
 * cheaper, so a cold epoch 999 costs what epoch 2 does). Reading epochs
 * in order, the previous epoch's snapshot is always there.
 *
 * An epoch's sampler output (its "draws") is computed lazily in one of
 * BFS_ORDER_SLOTS slots (LRU over epochs), only as far as the batch asked
 * for: forward Fisher-Yates fixes a[i] at step i, so batch k needs (k+1)·B
 * steps. Permutations are stored XOR their position (v ^ i), so zero
 * pages already are the identity and starting an epoch costs O(1), not
 * O(n). Values are uint32 when they fit. Each slot's table is its own
 * anonymous mapping, made once and handed back to zero pages with
 * madvise(MADV_DONTNEED) when the slot starts another epoch: memory is
 * bounded by BFS_ORDER_SLOTS tables. (It was calloc'ed per epoch: glibc's
 * mmap threshold rises to the size of the first table freed, so later
 * tables came from the heaps of whichever threads asked, were zeroed by
 * memset, and stayed resident there once freed: RssAnon grew by one table,
 * 5 MB at 1.3 M samples, every few epochs, 6 -> 41 MB by epoch 38.)
 *
 * Locks (lock order: slot->lock, then snap_lock; table_lock is never held
 * while taking another):
 *   table_lock  slot assignment: slots[].epoch, .used, .pins, .stamp, clock
 *   slot->lock  the slot's draws: vals, filled, mt, started
 *   snap_lock   snaps, nsnaps
 * A slot is reassigned only while unpinned; a caller pins its slot under
 * table_lock, fills and copies under slot->lock, and unpins. Reassigning
 * also resets 'started' and 'filled' under table_lock: unpinned, nobody
 * holds or waits for slot->lock, and the next pinner passes table_lock
 * before taking it. */
#include "fs/order_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fs/mt19937.h"
#include "fs/size.h"

#define LARGE_PERM_N 214748364ull /* UINT32_MAX / 20 (torch >= 2.7) */
#define WEIGHTED_ONE(o)                                                        \
	((o)->opt.sampler == BFS_SAMPLER_WEIGHTED &&                           \
	 (o)->opt.num_samples == 1 && (o)->opt.compat >= BFS_TORCH_2_1)
#define MAX_CATEGORIES (1ull << 24)
#define FILL_CHUNK     512 /* fill at least this far ahead per call */
#define LOOKAHEAD      64  /* Fisher-Yates swap targets drawn ahead */

int bfs_torch_compat_of(const char *v, enum bfs_torch_compat *c, bool *verified)
{
	unsigned major, minor;
	int end = 0;

	if (sscanf(v, "%u.%u%n", &major, &minor, &end) != 2 ||
	    (v[end] && v[end] != '.' && v[end] != '+' && v[end] != 'a' &&
	     v[end] != 'r' && v[end] != 'b' && v[end] != 'd') ||
	    major < 1 || (major == 1 && minor < 13))
		return -EINVAL;
	if (major == 1 || (major == 2 && minor == 0))
		*c = BFS_TORCH_1_13;
	else if (major == 2 && minor < 7)
		*c = BFS_TORCH_2_1;
	else
		*c = BFS_TORCH_2_7;
	*verified = (major == 1 && minor == 13) ||
		    (major == 2 && (minor == 13 || minor == 14));
	return 0;
}

const char *bfs_torch_compat_name(enum bfs_torch_compat c)
{
	return c == BFS_TORCH_1_13  ? "1.13"
	       : c == BFS_TORCH_2_1 ? "2.1"
				    : "2.7";
}

const char *bfs_torch_compat_verified(enum bfs_torch_compat c)
{
	return c == BFS_TORCH_1_13  ? "1.13"
	       : c == BFS_TORCH_2_7 ? "2.13 and 2.14"
				    : "";
}

enum bfs_torch_compat bfs_order_torch_compat(const struct bfs_order *o)
{
	return o->opt.compat;
}

bool bfs_order_torch_differs(const struct bfs_order *o)
{
	return (o->opt.sampler == BFS_SAMPLER_WEIGHTED &&
		o->opt.num_samples == 1) ||
	       (o->kind == K_PERM && o->perm_n >= LARGE_PERM_N);
}

int bfs_order_request_check(const struct bfs_order_request *r,
			    struct bfs_error *err)
{
	const char *no = NULL;

	if (r->subset && r->weights)
		return bfs_error_set(err, -EINVAL, "--weights", BFS_NO_OFFSET,
				     "cannot be combined with --subset (two "
				     "samplers)");
	if (r->global_generator && r->generator_state)
		return bfs_error_set(
		    err, -EINVAL, "--rng-state", BFS_NO_OFFSET,
		    "cannot be combined with --generator-state "
		    "(one generator)");
	if (r->global_generator && !r->shuffle)
		return bfs_error_set(err, -EINVAL, "--rng-state", BFS_NO_OFFSET,
				     "needs --shuffle");
	if (r->global_generator &&
	    bfs_order_sampler_for(r) != BFS_SAMPLER_RANDOM)
		return bfs_error_set(
		    err, -EINVAL, "--rng-state", BFS_NO_OFFSET,
		    "torch's global generator is modelled for "
		    "DataLoader(shuffle=True) and RandomSampler only: no "
		    "--subset, --weights or --world-size");
	if (r->generator_state &&
	    bfs_order_sampler_for(r) == BFS_SAMPLER_SEQUENTIAL)
		return bfs_error_set(err, -EINVAL, "--generator-state",
				     BFS_NO_OFFSET,
				     "the order is sequential, so no generator "
				     "is drawn from: add --shuffle (or "
				     "--subset, --weights)");
	if (r->sampler_drop_last &&
	    bfs_order_sampler_for(r) != BFS_SAMPLER_DISTRIBUTED)
		return bfs_error_set(err, -EINVAL, "--sampler-drop-last",
				     BFS_NO_OFFSET,
				     "DistributedSampler's drop_last: needs "
				     "--world-size (DataLoader's is "
				     "--drop-last)");
	if (r->generator_state &&
	    bfs_order_sampler_for(r) == BFS_SAMPLER_DISTRIBUTED)
		return bfs_error_set(err, -EINVAL, "--generator-state",
				     BFS_NO_OFFSET,
				     "DistributedSampler (--world-size) draws "
				     "from no given generator: it seeds its "
				     "own from --seed and the epoch");
	if (!r->num_samples)
		return 0;
	if (r->subset)
		no = "SubsetRandomSampler (--subset) has no num_samples: it "
		     "draws each index once per epoch";
	else if (r->weights)
		return 0;
	else if (r->distributed)
		no = "DistributedSampler (--world-size) has no num_samples";
	else if (!r->shuffle)
		no = "needs --shuffle (RandomSampler(num_samples=M)) or "
		     "--weights (WeightedRandomSampler); alone it does not say "
		     "which sampler draws the samples";
	return no ? bfs_error_set(err, -EINVAL, "--num-samples", BFS_NO_OFFSET,
				  "%s", no)
		  : 0;
}

size_t bfs_order_request_unused(const struct bfs_order_request *r,
				const char **msgs, size_t max)
{
	enum bfs_sampler s = bfs_order_sampler_for(r);
	const char *m[5];
	size_t n = 0;

	if (r->have_seed && s == BFS_SAMPLER_SEQUENTIAL)
		m[n++] = "--seed: no effect: the order is sequential (add "
			 "--shuffle for a random one)";
	else if (r->have_seed && !bfs_order_is_random(r))
		m[n++] = "--seed: no effect: DistributedSampler without "
			 "--shuffle keeps each rank's samples in order";
	else if (r->have_seed && (r->generator_state || r->global_generator))
		m[n++] = r->generator_state
			     ? "--seed: no effect: the generator starts from "
			       "the --generator-state file"
			     : "--seed: no effect: the generator starts from "
			       "the --rng-state file";
	if (r->shuffle &&
	    (s == BFS_SAMPLER_SUBSET || s == BFS_SAMPLER_WEIGHTED))
		m[n++] = s == BFS_SAMPLER_SUBSET
			     ? "--shuffle: no effect: --subset "
			       "(SubsetRandomSampler) is a random order "
			       "already"
			     : "--shuffle: no effect: --weights "
			       "(WeightedRandomSampler) draws at random "
			       "already";
	if (r->replacement && s != BFS_SAMPLER_RANDOM)
		m[n++] =
		    s == BFS_SAMPLER_SUBSET
			? "--replacement: no effect: SubsetRandomSampler "
			  "(--subset) draws each index once per epoch"
		    : s == BFS_SAMPLER_WEIGHTED
			? "--replacement: no effect: WeightedRandomSampler "
			  "(--weights) always draws with replacement here"
			: "--replacement: no effect: DistributedSampler "
			  "(--world-size) has no replacement";
	if (r->have_compat && !bfs_order_is_random(r))
		m[n++] = "--torch-compat: no effect: the order is not random, "
			 "so no torch version draws it differently";
	if (r->persistent_workers && !bfs_order_request_draws_base_seed(r))
		m[n++] = "--persistent-workers: no effect: this DataLoader "
			 "draws its base seed from torch's global generator, "
			 "not from the one its order comes from, so its order "
			 "is the same with persistent workers";
	for (size_t i = 0; i < n && i < max; i++)
		msgs[i] = m[i];
	return n < max ? n : max;
}

enum bfs_sampler bfs_order_sampler_for(const struct bfs_order_request *r)
{
	if (r->subset)
		return BFS_SAMPLER_SUBSET;
	if (r->weights)
		return BFS_SAMPLER_WEIGHTED;
	if (r->distributed)
		return BFS_SAMPLER_DISTRIBUTED;
	if (r->shuffle || r->replacement || r->num_samples)
		return BFS_SAMPLER_RANDOM;
	return BFS_SAMPLER_SEQUENTIAL;
}

const char *bfs_order_sampler_name(enum bfs_sampler s)
{
	static const char *const names[] = {
	    [BFS_SAMPLER_SEQUENTIAL] = "sequential",
	    [BFS_SAMPLER_RANDOM] = "random",
	    [BFS_SAMPLER_SUBSET] = "subset_random",
	    [BFS_SAMPLER_WEIGHTED] = "weighted_random",
	    [BFS_SAMPLER_DISTRIBUTED] = "distributed",
	};
	return (unsigned)s <= BFS_SAMPLER_DISTRIBUTED ? names[s] : "?";
}

bool bfs_order_is_random(const struct bfs_order_request *r)
{
	enum bfs_sampler s = bfs_order_sampler_for(r);

	return s != BFS_SAMPLER_SEQUENTIAL &&
	       (s != BFS_SAMPLER_DISTRIBUTED || r->shuffle);
}

bool bfs_order_request_draws_base_seed(const struct bfs_order_request *r)
{
	/* DataLoader(shuffle=True, generator=G) (a RandomSampler with
	 * neither replacement nor num_samples), or any RandomSampler drawn
	 * from torch's global generator */
	return bfs_order_sampler_for(r) == BFS_SAMPLER_RANDOM &&
	       (r->global_generator ||
		(r->shuffle && !r->replacement && !r->num_samples));
}

const char *bfs_order_seed_source(const struct bfs_order_request *r)
{
	if (!bfs_order_is_random(r))
		return "unused";
	if (bfs_order_sampler_for(r) == BFS_SAMPLER_DISTRIBUTED)
		return r->have_seed ? "--seed" : "default";
	if (r->global_generator)
		return "--rng-state";
	if (r->generator_state)
		return "--generator-state";
	return r->have_seed ? "--seed" : "getrandom";
}

/* A refusal of the option 'what' (named as the command line names it). */
static int invalid(struct bfs_error *err, const char *what, const char *fmt,
		   uint64_t v)
{
	return bfs_error_set(err, -EINVAL, what, BFS_NO_OFFSET, fmt, v);
}

static uint64_t perm_words(const struct bfs_order *o, uint64_t n)
{
	if (n <= 1)
		return 0;
	if (o->opt.compat == BFS_TORCH_2_7 && n >= LARGE_PERM_N)
		return 2 * n;
	return n - 1;
}

/* DistributedSampler's num_samples: a list of N split among R ranks,
 * padded to a multiple of R from its head, or cut to one (drop_last). */
static uint64_t dist_per_rank(uint64_t N, uint64_t R, bool drop_last)
{
	if (drop_last && N % R)
		/* ceil((N - R) / R), which Python makes 0 for N < R */
		return N < R ? 0 : (N - R) / R + ((N - R) % R != 0);
	return N / R + (N % R != 0);
}

/* An elastic resume's epoch and position (DistributedSampler's). */
static int validate_resume(const struct bfs_order_opts *p,
			   struct bfs_error *err)
{
	uint32_t w = p->resume_world ? p->resume_world : p->world_size;
	uint64_t whole;

	if (!p->resume)
		return 0;
	if (p->epochs && p->resume_epoch >= p->epochs)
		return bfs_error_set(err, -EINVAL, "--resume-at", BFS_NO_OFFSET,
				     "epoch %" PRIu64 " is past the mount's "
				     "%" PRIu64 " epochs (--epochs)",
				     p->resume_epoch, p->epochs);
	whole = dist_per_rank(p->n, w, p->sampler_drop_last) * w;
	if (p->resume_pos > whole)
		return bfs_error_set(
		    err, -EINVAL, "--resume-at", BFS_NO_OFFSET,
		    "position %" PRIu64 " is past the end of epoch %" PRIu64
		    ": DistributedSampler gives %u ranks %" PRIu64
		    " positions in all (%" PRIu64 " samples%s)",
		    p->resume_pos, p->resume_epoch, w, whole, p->n,
		    p->sampler_drop_last ? ", --sampler-drop-last"
					 : " with padding");
	return 0;
}

static int validate(const struct bfs_order_opts *p, struct bfs_error *err)
{
	const char *sampler = bfs_order_sampler_name(p->sampler);

	if (p->batch_size < 1)
		return invalid(err, "--batch-size",
			       "batch_size should be a positive integer "
			       "value, but got batch_size=%" PRIu64,
			       p->batch_size);
	if (p->compat != 0 && p->compat != BFS_TORCH_1_13 &&
	    p->compat != BFS_TORCH_2_1 && p->compat != BFS_TORCH_2_7)
		return invalid(err, "--torch-compat",
			       "unknown torch_compat %" PRIu64,
			       (uint64_t)p->compat);
	if (p->nranks && p->sampler != BFS_SAMPLER_DISTRIBUTED)
		return invalid(err, "--ranks",
			       "%" PRIu64 " ranks need DistributedSampler "
			       "(--world-size)",
			       (uint64_t)p->nranks);
	if (p->resume && p->sampler != BFS_SAMPLER_DISTRIBUTED)
		return bfs_error_set(err, -EINVAL, "--resume-at", BFS_NO_OFFSET,
				     "an elastic resume continues "
				     "DistributedSampler's epoch: give "
				     "--world-size (the %s sampler has no "
				     "ranks to resume)",
				     sampler);
	if (p->global_generator && p->sampler != BFS_SAMPLER_RANDOM)
		return bfs_error_set(err, -EINVAL, "--rng-state", BFS_NO_OFFSET,
				     "torch's global generator is modelled "
				     "for RandomSampler only, not for the %s "
				     "sampler",
				     sampler);
	if (p->generator_state && (p->sampler == BFS_SAMPLER_SEQUENTIAL ||
				   p->sampler == BFS_SAMPLER_DISTRIBUTED))
		return bfs_error_set(err, -EINVAL, "--generator-state",
				     BFS_NO_OFFSET,
				     "a generator state has no use with the %s "
				     "sampler: it draws no words from a given "
				     "generator",
				     sampler);
	switch (p->sampler) {
	case BFS_SAMPLER_SEQUENTIAL:
		return 0;
	case BFS_SAMPLER_RANDOM:
		if (p->n == 0)
			return bfs_error_set(
			    err, -EINVAL, p->source ? p->source : "dataset",
			    BFS_NO_OFFSET,
			    "num_samples should be a positive integer value, "
			    "but got num_samples=0 (the dataset is empty: a "
			    "random order needs a sample)");
		if (p->num_samples > (1ull << 62))
			return invalid(err, "--num-samples",
				       "num_samples=%" PRIu64 " is too large "
				       "(at most 2^62)",
				       p->num_samples);
		return 0;
	case BFS_SAMPLER_SUBSET:
		for (size_t i = 0; i < p->subset_len; i++)
			if (p->subset[i] < 0 || (uint64_t)p->subset[i] >= p->n)
				return bfs_error_set(
				    err, -EINVAL,
				    p->subset_name ? p->subset_name
						   : "subset indices",
				    BFS_NO_OFFSET,
				    "index %" PRId64 " at position %zu is "
				    "outside the dataset (%" PRIu64 " samples: "
				    "0 .. %" PRIu64 ")",
				    p->subset[i], i, p->n, p->n ? p->n - 1 : 0);
		return 0;
	case BFS_SAMPLER_WEIGHTED:
		return 0; /* checked in setup_weights */
	case BFS_SAMPLER_DISTRIBUTED:
		if (p->world_size < 1)
			return invalid(err, "--world-size",
				       "world_size (num_replicas) must be "
				       ">= 1, got %" PRIu64,
				       (uint64_t)p->world_size);
		for (size_t i = 0; i < (p->nranks ? p->nranks : 1); i++) {
			uint32_t r = p->nranks ? p->ranks[i] : p->rank;

			if (r >= p->world_size)
				return bfs_error_set(
				    err, -EINVAL,
				    p->nranks ? "--ranks" : "--rank",
				    BFS_NO_OFFSET,
				    "Invalid rank %u, rank should be in the "
				    "interval [0, %u]",
				    r, p->world_size - 1);
		}
		for (size_t i = 1; i < p->nranks; i++)
			if (p->ranks[i] <= p->ranks[i - 1])
				return invalid(err, "--ranks",
					       "rank %" PRIu64 " after a rank "
					       "no smaller: give ranks in "
					       "increasing order, each once",
					       (uint64_t)p->ranks[i]);
		if (p->nranks && p->epochs < 1)
			return invalid(err, "--epochs",
				       "%" PRIu64 " ranks need their epochs",
				       (uint64_t)p->nranks);
		return validate_resume(p, err);
	}
	return invalid(err, "sampler", "unknown sampler %" PRIu64,
		       (uint64_t)p->sampler);
}

/* torch.multinomial's checks and its sequential double cumsum / total,
 * last bucket forced to 1 (MultinomialKernel.cpp), from the caller's
 * weights (p->weights_len of them) into o->cdf. */
static int setup_weights(struct bfs_order *o, const double *weights,
			 struct bfs_error *err)
{
	const struct bfs_order_opts *p = &o->opt;
	const char *what = p->weights_name ? p->weights_name : "weights";
	double sum = 0;
	size_t n = p->weights_len;

	if (p->num_samples < 1)
		return invalid(err, what,
			       "WeightedRandomSampler needs num_samples "
			       ">= 1, got %" PRIu64 " (no weights?)",
			       p->num_samples);
	/* 'replacement' is RandomSampler's option: WeightedRandomSampler
	 * here is always replacement=True, as fs/order.h states (its
	 * replacement=False order is not portable across torch versions). */
	if (n != p->n)
		return bfs_error_set(err, -EINVAL, what, BFS_NO_OFFSET,
				     "%zu weights for a dataset of %" PRIu64
				     " samples: give one weight per sample",
				     n, p->n);
	if (n > MAX_CATEGORIES)
		return bfs_error_set(err, -EINVAL, what, BFS_NO_OFFSET,
				     "number of categories cannot exceed 2^24 "
				     "(got %zu weights)",
				     n);
	o->cdf = malloc(n * sizeof(double));
	if (!o->cdf)
		return -ENOMEM;
	if (WEIGHTED_ONE(o)) {
		o->gumbel_w = malloc(n * sizeof(double));
		if (!o->gumbel_w)
			return -ENOMEM;
		memcpy(o->gumbel_w, weights, n * sizeof(double));
	}
	for (size_t j = 0; j < n; j++) {
		double w = weights[j];

		if (!isfinite(w) || w < 0)
			return bfs_error_set(
			    err, -EINVAL, what, BFS_NO_OFFSET,
			    "weight %zu is %g: invalid "
			    "multinomial distribution (weights "
			    "must be finite and >= 0)",
			    j, w);
		sum += w;
		o->cdf[j] = sum;
	}
	if (!(sum > 0))
		return bfs_error_set(err, -EINVAL, what, BFS_NO_OFFSET,
				     "invalid multinomial distribution (sum "
				     "of probabilities <= 0)");
	for (size_t j = 0; j < n; j++)
		o->cdf[j] /= sum;
	o->cdf[n - 1] = 1.0;
	return 0;
}

/* The list an elastic resume continues: DistributedSampler's for
 * resume_world ranks, without its padding (fs/order.h: opts.resume). */
static uint64_t resume_list(const struct bfs_order_opts *p)
{
	uint32_t w = p->resume_world ? p->resume_world : p->world_size;
	uint64_t whole = dist_per_rank(p->n, w, p->sampler_drop_last) * w;

	return whole < p->n ? whole : p->n;
}

/* The resumed epoch: what world_size ranks split of its list's rest. */
static void setup_resume(struct bfs_order *o)
{
	const struct bfs_order_opts *p = &o->opt;
	uint64_t list = resume_list(p);

	o->resume_left = p->resume_pos < list ? list - p->resume_pos : 0;
	o->resume_samples =
	    dist_per_rank(o->resume_left, p->world_size, p->sampler_drop_last);
}

/* DataLoader's len() over 'samples' samples. */
static uint64_t batches_of(const struct bfs_order *o, uint64_t samples)
{
	uint64_t bs = o->opt.batch_size;

	return samples / bs + (!o->opt.drop_last && samples % bs != 0);
}

/* Draws' shape, words per epoch and len() for the validated options. */
static void setup_draws(struct bfs_order *o)
{
	const struct bfs_order_opts *p = &o->opt;
	uint64_t n = p->n, m = p->num_samples ? p->num_samples : p->n;
	uint64_t big = n >= (1ull << 32) ? 2 : 1;

	o->narrow = n < (1ull << 32);
	switch (p->sampler) {
	case BFS_SAMPLER_SEQUENTIAL:
		o->kind = K_NONE;
		o->samples = n;
		break;
	case BFS_SAMPLER_RANDOM:
		o->samples = m;
		o->cap = m;
		if (p->replacement) {
			o->kind = K_REPL;
			o->epoch_words = m * big;
			break;
		}
		o->kind = K_PERM;
		o->perm_n = n;
		o->cap = (m / n + (m % n != 0)) * n;
		o->epoch_words = perm_words(o, n) * (m / n + 1);
		o->shuffle_form = p->num_samples == 0;
		if (o->shuffle_form)
			o->pre_words = 2;
		o->epoch_words += o->pre_words;
		break;
	case BFS_SAMPLER_SUBSET:
		o->kind = K_PERM;
		o->perm_n = o->cap = o->samples = p->subset_len;
		o->narrow = p->subset_len < (1ull << 32);
		o->epoch_words = perm_words(o, p->subset_len);
		break;
	case BFS_SAMPLER_WEIGHTED:
		o->samples = o->cap = p->num_samples;
		o->kind = K_WEIGHT;
		o->epoch_words = o->gumbel_w ? 2 * n : 2 * p->num_samples;
		break;
	case BFS_SAMPLER_DISTRIBUTED:
		o->samples =
		    dist_per_rank(n, p->world_size, p->sampler_drop_last);
		o->kind = p->shuffle ? K_PERM : K_NONE;
		o->perm_n = o->cap = n;
		if (p->resume)
			setup_resume(o);
		break;
	}
	if (p->global_generator) { /* base seed + the sampler's seed */
		o->pre_words = 2;
		o->epoch_words = 4;
	}
	if (p->persistent_workers && o->pre_words) { /* base seed: once */
		o->once_words = o->pre_words;
		o->epoch_words -= o->pre_words;
		o->pre_words = 0;
	}
	o->batches = batches_of(o, o->samples);
	o->resume_batches = batches_of(o, o->resume_samples);
}

/* Epochs of each lane: opt.epochs, whose positions (lanes x epochs x
 * len, fs/order.h: batch identity) and epoch serials must be numbers
 * below 2^64 - 1, or (0, one lane) as many as positions can number. */
static int setup_epochs(struct bfs_order *o, struct bfs_error *err)
{
	uint64_t lanes = bfs_order_lanes(o), serials, positions;

	if (!o->opt.epochs) {
		o->epochs =
		    o->batches ? (UINT64_MAX - 1) / o->batches : UINT64_MAX - 1;
		return 0;
	}
	if (__builtin_mul_overflow(o->opt.epochs, lanes, &serials) ||
	    __builtin_mul_overflow(serials, o->batches, &positions) ||
	    serials == UINT64_MAX || positions == UINT64_MAX)
		return invalid(err, "--epochs",
			       "%" PRIu64 " epochs of every rank served make "
			       "more batches than 64-bit positions number",
			       o->opt.epochs);
	o->epochs = o->opt.epochs;
	return 0;
}

/* A random sampler's draws are kept per epoch in a table of cap values;
 * BFS_ORDER_SLOTS of them must fit the machine's memory. */
static int check_tables(const struct bfs_order *o, const char *source,
			struct bfs_error *err)
{
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	uint64_t ram = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page
					     : BFS_SIZE_MAX;
	uint64_t bytes;

	if (o->kind == K_NONE ||
	    (!bfs_size_mul(o->cap, (o->narrow ? 4 : 8) * BFS_ORDER_SLOTS,
			   &bytes) &&
	     bytes <= ram))
		return 0;
	return bfs_error_set(
	    err, -EFBIG, source ? source : "dataset", BFS_NO_OFFSET,
	    "%" PRIu64 " samples: the random order of %" PRIu64 " draws per "
	    "epoch needs %d tables of %" PRIu64 " x %d bytes (the epochs "
	    "kept at once): more than this machine's %" PRIu64 " MiB of "
	    "memory",
	    o->opt.n, o->cap, BFS_ORDER_SLOTS, o->cap, o->narrow ? 4 : 8,
	    ram >> 20);
}

/* Bytes mapped for one slot's table (whole pages). */
static size_t table_bytes(const struct bfs_order *o)
{
	size_t el = o->narrow ? 4 : 8, page = 4096;

	return ((o->cap ? o->cap : 1) * el + page - 1) / page * page;
}

void bfs_order_destroy(struct bfs_order *o)
{
	if (!o)
		return;
	for (int i = 0; i < BFS_ORDER_SLOTS; i++) {
		if (o->slots[i].vals)
			munmap(o->slots[i].vals, table_bytes(o));
		pthread_mutex_destroy(&o->slots[i].lock);
	}
	pthread_mutex_destroy(&o->snap_lock);
	pthread_mutex_destroy(&o->table_lock);
	pthread_cond_destroy(&o->table_cond);
	free(o->subset);
	free(o->cdf);
	free(o->gumbel_w);
	free(o->ranks);
	free(o);
}

int bfs_order_create(struct bfs_order **out, const struct bfs_order_opts *p,
		     struct bfs_error *err)
{
	struct bfs_order *o;
	int rc;

	*out = NULL;
	rc = validate(p, err);
	if (rc)
		return rc;
	o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	o->opt = *p;
	if (!o->opt.compat) /* zero-initialised options: the default */
		o->opt.compat = BFS_TORCH_DEFAULT;
	o->opt.source = NULL; /* borrowed: used during create only */
	o->opt.subset = NULL;
	o->opt.weights = NULL;
	o->opt.generator_state = NULL;
	o->opt.ranks = NULL;
	pthread_mutex_init(&o->snap_lock, NULL);
	pthread_mutex_init(&o->table_lock, NULL);
	pthread_cond_init(&o->table_cond, NULL);
	for (int i = 0; i < BFS_ORDER_SLOTS; i++)
		pthread_mutex_init(&o->slots[i].lock, NULL);
	if (p->sampler == BFS_SAMPLER_SUBSET && p->subset_len) {
		o->subset = malloc(p->subset_len * sizeof(int64_t));
		rc = -ENOMEM;
		if (!o->subset)
			goto err_destroy;
		memcpy(o->subset, p->subset, p->subset_len * sizeof(int64_t));
	}
	if (p->nranks) {
		o->ranks = malloc(p->nranks * sizeof(*o->ranks));
		rc = -ENOMEM;
		if (!o->ranks)
			goto err_destroy;
		memcpy(o->ranks, p->ranks, p->nranks * sizeof(*o->ranks));
	}
	if (p->sampler == BFS_SAMPLER_WEIGHTED) {
		rc = setup_weights(o, p->weights, err);
		if (rc)
			goto err_destroy;
	}
	setup_draws(o);
	rc = setup_epochs(o, err);
	if (rc)
		goto err_destroy;
	rc = check_tables(o, p->source, err);
	if (rc)
		goto err_destroy;
	if (p->generator_state) {
		rc = bfs_mt_import(
		    &o->mt0, p->generator_state, p->generator_state_len,
		    p->state_name ? p->state_name : "generator state", err);
		if (rc)
			goto err_destroy;
	} else {
		bfs_mt_seed(&o->mt0, p->seed);
	}
	bfs_mt_skip(&o->mt0, o->once_words);
	*out = o;
	return 0;
err_destroy:
	bfs_order_destroy(o);
	return rc;
}

int bfs_order_check_len(const struct bfs_order *o, const char *source,
			struct bfs_error *err)
{
	const struct bfs_order_opts *p = &o->opt;
	char rank[64] = "";

	if (o->batches)
		return 0;
	if (p->sampler == BFS_SAMPLER_DISTRIBUTED && p->nranks)
		snprintf(rank, sizeof(rank), " (per rank of %u)",
			 p->world_size);
	else if (p->sampler == BFS_SAMPLER_DISTRIBUTED)
		snprintf(rank, sizeof(rank), " (rank %u of %u)", p->rank,
			 p->world_size);
	if (!o->samples)
		return bfs_error_set(err, -EINVAL, source, BFS_NO_OFFSET,
				     "0 batches per epoch: %" PRIu64
				     " samples in the dataset, 0 per epoch%s",
				     p->n, rank);
	return bfs_error_set(
	    err, -EINVAL, source, BFS_NO_OFFSET,
	    "0 batches per epoch: --drop-last drops the only, incomplete "
	    "batch of %" PRIu64 " samples per epoch%s (--batch-size %" PRIu64
	    "): use a --batch-size of at most %" PRIu64 ", or no --drop-last",
	    o->samples, rank, p->batch_size, o->samples);
}

bool bfs_order_draws_base_seed(const struct bfs_order *o)
{
	return o->shuffle_form || o->opt.global_generator;
}

bool bfs_order_persistent(const struct bfs_order *o)
{
	return o->opt.persistent_workers;
}

uint64_t bfs_order_len(const struct bfs_order *o)
{
	return o->batches;
}

/* Rows of batch k of an epoch of 'samples' in 'batches'. */
static uint64_t rows_of(const struct bfs_order *o, uint64_t samples,
			uint64_t batches, uint64_t k)
{
	uint64_t bs = o->opt.batch_size;

	if (k >= batches)
		return 0;
	if (samples - k * bs < bs)
		return samples - k * bs;
	return bs;
}

static bool resumed_epoch(const struct bfs_order *o, uint64_t e)
{
	return o->opt.resume && e == o->opt.resume_epoch;
}

uint64_t bfs_order_batch_rows(const struct bfs_order *o, uint64_t k)
{
	return rows_of(o, o->samples, o->batches, k);
}

uint64_t bfs_order_rows(const struct bfs_order *o, struct bfs_batch_id id)
{
	if (!bfs_order_has(o, id))
		return 0;
	if (resumed_epoch(o, id.epoch))
		return rows_of(o, o->resume_samples, o->resume_batches,
			       id.batch);
	return rows_of(o, o->samples, o->batches, id.batch);
}

uint64_t bfs_order_epoch_len(const struct bfs_order *o, uint64_t e)
{
	return resumed_epoch(o, e) ? o->resume_batches : o->batches;
}

bool bfs_order_resumes(const struct bfs_order *o, struct bfs_order_resume *r)
{
	const struct bfs_order_opts *p = &o->opt;

	*r = (struct bfs_order_resume){
	    .epoch = p->resume_epoch,
	    .pos = p->resume_pos,
	    .left = o->resume_left,
	    .world = p->resume_world ? p->resume_world : p->world_size,
	};
	return p->resume;
}

bool bfs_order_sampler_drop_last(const struct bfs_order *o)
{
	return o->opt.sampler == BFS_SAMPLER_DISTRIBUTED &&
	       o->opt.sampler_drop_last;
}

/* The snapshot of the latest epoch <= e, NULL if none. [snap_lock] */
static struct snap *snapshot_before(struct bfs_order *o, uint64_t e)
{
	struct snap *best = NULL;

	for (int i = 0; i < SNAPS; i++) {
		struct snap *s = &o->snaps[i];

		if (s->used && s->epoch <= e &&
		    (!best || s->epoch > best->epoch))
			best = s;
	}
	return best;
}

/* Remember G at the start of epoch e, in place of the least recently
 * used snapshot. [snap_lock] */
static void snapshot_store(struct bfs_order *o, uint64_t e,
			   const struct bfs_mt *mt)
{
	struct snap *s = &o->snaps[0];

	for (int i = 0; i < SNAPS; i++) {
		struct snap *c = &o->snaps[i];

		if (c->used && c->epoch == e) {
			s = c;
			break;
		}
		if (!c->used || (s->used && c->stamp < s->stamp))
			s = c;
	}
	s->used = 1;
	s->epoch = e;
	s->stamp = ++o->snap_clock;
	s->mt = *mt;
}

/* G at the start of epoch e's sampler: the nearest earlier snapshot moved
 * on by one bfs_mt_skip (a jump-ahead when far). */
static void epoch_generator(struct bfs_order *o, uint64_t e, struct bfs_mt *mt)
{
	struct snap *base;
	uint64_t b, words;

	if (o->opt.sampler == BFS_SAMPLER_DISTRIBUTED) {
		bfs_mt_seed(mt, o->opt.seed + e);
		return;
	}
	pthread_mutex_lock(&o->snap_lock);
	base = snapshot_before(o, e);
	b = base ? base->epoch : 0;
	*mt = base ? base->mt : o->mt0;
	if (base)
		base->stamp = ++o->snap_clock;
	if (__builtin_mul_overflow(e - b, o->epoch_words, &words))
		for (; b < e; b++)
			bfs_mt_skip(mt, o->epoch_words);
	else
		bfs_mt_skip(mt, words);
	snapshot_store(o, e, mt);
	pthread_mutex_unlock(&o->snap_lock);
	bfs_mt_skip(mt, o->pre_words);
	/* RandomSampler without generator=: seed = torch.empty((),
	 * dtype=torch.int64).random_() (random64() % 2^63) from the global
	 * generator, then Generator().manual_seed(seed) */
	if (o->opt.global_generator)
		bfs_mt_seed(mt, bfs_mt_random64(mt) % (1ull << 63));
}

/* Forward Fisher-Yates steps [from, to) of randperm(P) on a[] stored as
 * value ^ position: z = random() % (P - i), swap(a[i], a[i + z]). The swap
 * targets are drawn LOOKAHEAD steps early (the words do not depend on the
 * data) and prefetched, which hides most of the memory latency. */
#define DEFINE_FISHER_YATES(name, T)                                           \
	static void name(T *a, T P, T from, T to, struct bfs_mt *mt)           \
	{                                                                      \
		T ring[LOOKAHEAD], pre = from, s, j, vi, vj;                   \
                                                                               \
		for (; pre < to && pre - from < LOOKAHEAD; pre++) {            \
			j = pre + (T)bfs_mt_random(mt) % (P - pre);            \
			ring[pre % LOOKAHEAD] = j;                             \
			__builtin_prefetch(&a[j], 1, 0);                       \
		}                                                              \
		for (s = from; s < to; s++) {                                  \
			j = ring[s % LOOKAHEAD];                               \
			if (pre < to) {                                        \
				T z = pre + (T)bfs_mt_random(mt) % (P - pre);  \
				ring[pre % LOOKAHEAD] = z;                     \
				__builtin_prefetch(&a[z], 1, 0);               \
				pre++;                                         \
			}                                                      \
			vi = a[s] ^ s;                                         \
			vj = a[j] ^ j;                                         \
			a[s] = vj ^ s;                                         \
			a[j] = vi ^ j;                                         \
		}                                                              \
	}
DEFINE_FISHER_YATES(fy32, uint32_t)
DEFINE_FISHER_YATES(fy64, uint64_t)

/* torch >= 2.7 randperm for P >= 214748364: inside-out shuffle,
 * z = random64() % (i + 1); a[i] = a[z]; a[z] = i. */
static void inside_out(void *vals, int narrow, uint64_t P, struct bfs_mt *mt)
{
	uint32_t *a32 = vals;
	uint64_t *a64 = vals;

	for (uint64_t i = 0; i < P; i++) {
		uint64_t z = bfs_mt_random64(mt) % (i + 1), v;

		v = narrow ? a32[z] ^ z : a64[z] ^ z;
		if (z == i)
			v = i;
		if (narrow) {
			a32[i] = (uint32_t)(v ^ i);
			a32[z] = (uint32_t)(i ^ z);
		} else {
			a64[i] = v ^ i;
			a64[z] = i ^ z;
		}
	}
}

static void put(struct bfs_order *o, void *vals, uint64_t p, uint64_t v)
{
	if (o->narrow)
		((uint32_t *)vals)[p] = (uint32_t)v;
	else
		((uint64_t *)vals)[p] = v;
}

static uint64_t get(const struct bfs_order *o, const void *vals, uint64_t p)
{
	return o->narrow ? ((const uint32_t *)vals)[p]
			 : ((const uint64_t *)vals)[p];
}

/* Extend the current randperm block of 'sl' towards draw 'target' (at
 * least FILL_CHUNK steps, at most to the block's end). */
static void fill_perm(struct bfs_order *o, struct slot *sl, uint64_t target)
{
	uint64_t P = o->perm_n, b = sl->filled / P, step = sl->filled % P;
	uint64_t to = target - b * P;
	void *base = o->narrow ? (void *)((uint32_t *)sl->vals + b * P)
			       : (void *)((uint64_t *)sl->vals + b * P);

	if (perm_words(o, P) == 2 * P) {
		inside_out(base, o->narrow, P, &sl->mt);
		sl->filled = (b + 1) * P;
		return;
	}
	if (to < step + FILL_CHUNK)
		to = step + FILL_CHUNK;
	if (to >= P - 1)
		to = P - 1; /* after step P-2 the last element is fixed too */
	if (o->narrow)
		fy32(base, (uint32_t)P, (uint32_t)step, (uint32_t)to, &sl->mt);
	else
		fy64(base, P, step, to, &sl->mt);
	sl->filled = to == P - 1 ? (b + 1) * P : b * P + to;
}

static uint64_t weighted_sample(const struct bfs_order *o, struct bfs_mt *mt)
{
	double u = (double)(bfs_mt_random64(mt) & ((1ull << 53) - 1)) * 0x1p-53;
	uint64_t left = 0, right = o->opt.n;

	while (right > left) {
		uint64_t mid = left + (right - left) / 2;

		if (o->cdf[mid] < u)
			left = mid + 1;
		else
			right = mid;
	}
	return left;
}

/* torch.multinomial(w, 1, replacement=True) from torch 2.1 on: q =
 * exponential_() (u = 53 bits of random64(), q = -log1p(-u)) for every
 * weight, then the first index of the largest w / q (NaN, from 0 / 0,
 * counts as largest): 2n words whatever is drawn. */
static uint64_t weighted_one(const struct bfs_order *o, struct bfs_mt *mt)
{
	uint64_t best = 0;
	double top = 0;

	for (uint64_t j = 0; j < o->opt.n; j++) {
		double u = (double)(bfs_mt_random64(mt) & ((1ull << 53) - 1)) *
			   0x1p-53;
		double r = o->gumbel_w[j] / -log1p(-u);

		if (j == 0 || (!isnan(top) && (isnan(r) || r > top))) {
			top = r;
			best = j;
		}
	}
	return best;
}

/* One sample of RandomSampler(replacement=True) (randint(high=n): one word,
 * two when n >= 2^32) or of WeightedRandomSampler. */
static uint64_t draw(const struct bfs_order *o, struct bfs_mt *mt)
{
	uint64_t n = o->opt.n;

	if (o->kind == K_WEIGHT)
		return o->gumbel_w ? weighted_one(o, mt)
				   : weighted_sample(o, mt);
	return n >= (1ull << 32) ? bfs_mt_random64(mt) % n
				 : bfs_mt_random(mt) % n;
}

/* Make draws [0, target) of the slot's epoch final. Called with
 * sl->lock held. */
static void fill_to(struct bfs_order *o, struct slot *sl, uint64_t e,
		    uint64_t target)
{
	uint64_t end;

	if (!sl->started) {
		epoch_generator(o, e, &sl->mt);
		sl->filled = 0;
		sl->started = 1;
	}
	while (sl->filled < target) {
		switch (o->kind) {
		case K_PERM:
			fill_perm(o, sl, target);
			break;
		case K_REPL:
		case K_WEIGHT:
			end = target + FILL_CHUNK < o->cap ? target + FILL_CHUNK
							   : o->cap;
			for (uint64_t p = sl->filled; p < end; p++)
				put(o, sl->vals, p, draw(o, &sl->mt));
			sl->filled = end;
			break;
		case K_NONE:
			return;
		}
	}
}

/* Pin the slot holding epoch e, assigning the least recently used unpinned
 * slot if none does (waits while all are pinned). */
static struct slot *slot_acquire(struct bfs_order *o, uint64_t e)
{
	struct slot *sl = NULL;

	pthread_mutex_lock(&o->table_lock);
	for (;;) {
		for (int i = 0; i < BFS_ORDER_SLOTS; i++)
			if (o->slots[i].used && o->slots[i].epoch == e)
				sl = &o->slots[i];
		if (sl)
			break;
		for (int i = 0; i < BFS_ORDER_SLOTS; i++) {
			struct slot *c = &o->slots[i];

			if (c->pins == 0 &&
			    (!sl || !c->used ||
			     (sl->used && c->stamp < sl->stamp)))
				sl = c;
		}
		if (sl) {
			/* Unpinned: nobody holds sl->lock. */
			sl->used = 1;
			sl->epoch = e;
			sl->started = 0;
			sl->filled = 0;
			break;
		}
		pthread_cond_wait(&o->table_cond, &o->table_lock);
	}
	sl->pins++;
	sl->stamp = ++o->clock;
	pthread_mutex_unlock(&o->table_lock);
	return sl;
}

static void slot_release(struct bfs_order *o, struct slot *sl, int failed)
{
	pthread_mutex_lock(&o->table_lock);
	sl->pins--;
	if (failed && sl->pins == 0)
		sl->used = 0;
	pthread_cond_broadcast(&o->table_cond);
	pthread_mutex_unlock(&o->table_lock);
}

/* Zeroed draws (= identity permutation) for a new epoch: the
 * slot's table, mapped on first use, given back to zero pages after. */
static int slot_prepare(struct bfs_order *o, struct slot *sl)
{
	size_t bytes = table_bytes(o);
	void *p;

	if (sl->started)
		return 0;
	if (sl->vals) {
		if (madvise(sl->vals, bytes, MADV_DONTNEED) < 0)
			memset(sl->vals, 0, bytes);
		return 0;
	}
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -ENOMEM;
	sl->vals = p;
	return 0;
}

/* The draw of row r of batch id.batch (DistributedSampler: the rank's
 * stride over the padded list; padding repeats the list from its head;
 * a resumed epoch's list is the rest of the epoch's, from resume_pos). */
static uint64_t draw_of(const struct bfs_order *o, uint32_t rank,
			struct bfs_batch_id id, uint64_t r)
{
	uint64_t i = id.batch * o->opt.batch_size + r;

	if (o->opt.sampler != BFS_SAMPLER_DISTRIBUTED)
		return i;
	if (resumed_epoch(o, id.epoch))
		return o->opt.resume_pos +
		       (rank + i * o->opt.world_size) % o->resume_left;
	return (rank + i * o->opt.world_size) % o->opt.n;
}

static uint64_t draw_value(const struct bfs_order *o, const void *vals,
			   uint64_t p)
{
	uint64_t v;

	if (o->kind != K_PERM)
		return get(o, vals, p);
	v = get(o, vals, p) ^ (p % o->perm_n);
	return o->subset ? (uint64_t)o->subset[v] : v;
}

uint32_t bfs_order_world_size(const struct bfs_order *o)
{
	return o->opt.sampler == BFS_SAMPLER_DISTRIBUTED ? o->opt.world_size
							 : 1;
}

int bfs_order_batch(struct bfs_order *o, struct bfs_batch_id id, uint64_t *idx)
{
	uint64_t rows = bfs_order_rows(o, id), need = 0;
	struct slot *sl;
	uint32_t rank;
	int rc;

	if (!bfs_order_has(o, id))
		return -ENOENT;
	rank = bfs_order_rank_of_lane(o, id.lane);
	if (o->kind == K_NONE) {
		for (uint64_t r = 0; r < rows; r++)
			idx[r] = draw_of(o, rank, id, r);
		return 0;
	}
	for (uint64_t r = 0; r < rows; r++) {
		uint64_t p = draw_of(o, rank, id, r) + 1;

		need = p > need ? p : need;
	}
	sl = slot_acquire(o, id.epoch);
	pthread_mutex_lock(&sl->lock);
	rc = slot_prepare(o, sl);
	if (!rc) {
		fill_to(o, sl, id.epoch, need);
		for (uint64_t r = 0; r < rows; r++)
			idx[r] =
			    draw_value(o, sl->vals, draw_of(o, rank, id, r));
	}
	pthread_mutex_unlock(&sl->lock);
	slot_release(o, sl, rc != 0);
	return rc;
}

static int describe_generator(const struct bfs_order *o, char *buf, size_t len)
{
	if (o->opt.generator_state_len)
		return snprintf(buf, len, "torch.Generator().set_state(state)");
	return snprintf(buf, len, "torch.Generator().manual_seed(%" PRIu64 ")",
			o->opt.seed);
}

/* The global form (RandomSampler without generator=); 'tail': the
 * DataLoader's last arguments. */
static int describe_global(const struct bfs_order *o, const char *head,
			   const char *tail, char *buf, size_t len)
{
	const struct bfs_order_opts *p = &o->opt;
	const char *dl = p->drop_last ? "True" : "False";
	const char *when = " iterated right after torch.set_rng_state(state), "
			   "each epoch right after the one before";
	char num[48] = "";

	if (o->shuffle_form && !p->replacement)
		return snprintf(buf, len, "%s, shuffle=True, drop_last=%s%s)%s",
				head, dl, tail, when);
	if (p->num_samples)
		snprintf(num, sizeof(num), ", num_samples=%" PRIu64,
			 p->num_samples);
	return snprintf(buf, len,
			"%s, drop_last=%s, sampler=RandomSampler(ds, "
			"replacement=%s%s)%s)%s",
			head, dl, p->replacement ? "True" : "False", num, tail,
			when);
}

/* DistributedSampler's construction. */
static int describe_distributed(const struct bfs_order *o, const char *head,
				const char *tail, char *buf, size_t len)
{
	const struct bfs_order_opts *p = &o->opt;
	char rank[16] = "RANK";

	if (!p->nranks)
		snprintf(rank, sizeof(rank), "%u", p->rank);
	return snprintf(buf, len,
			"%s, drop_last=%s, sampler=DistributedSampler(ds, "
			"num_replicas=%u, rank=%s, shuffle=%s, seed=%" PRIu64
			", drop_last=%s)%s)  # %s sampler.set_epoch(N) before "
			"epoch N",
			head, p->drop_last ? "True" : "False", p->world_size,
			rank, p->shuffle ? "True" : "False", p->seed,
			p->sampler_drop_last ? "True" : "False", tail,
			p->nranks ? "for each RANK served, and" : "and");
}

int bfs_order_describe(const struct bfs_order *o, char *buf, size_t len)
{
	const struct bfs_order_opts *p = &o->opt;
	char gen[96], head[96];
	const char *dl = p->drop_last ? "True" : "False";
	const char *tail =
	    p->persistent_workers
		? ", num_workers=WORKERS, persistent_workers=True"
		: "";

	describe_generator(o, gen, sizeof(gen));
	snprintf(head, sizeof(head), "DataLoader(ds, batch_size=%" PRIu64,
		 p->batch_size);
	if (p->global_generator)
		return describe_global(o, head, tail, buf, len);
	switch (p->sampler) {
	case BFS_SAMPLER_SEQUENTIAL:
		return snprintf(buf, len, "%s, drop_last=%s%s)", head, dl,
				tail);
	case BFS_SAMPLER_RANDOM:
		if (o->shuffle_form && !p->replacement)
			return snprintf(buf, len,
					"%s, shuffle=True, drop_last=%s, "
					"generator=%s%s)",
					head, dl, gen, tail);
		if (p->num_samples)
			return snprintf(
			    buf, len,
			    "%s, drop_last=%s, sampler=RandomSampler"
			    "(ds, replacement=%s, num_samples=%" PRIu64
			    ", generator=%s)%s)",
			    head, dl, p->replacement ? "True" : "False",
			    p->num_samples, gen, tail);
		return snprintf(buf, len,
				"%s, drop_last=%s, sampler=RandomSampler(ds, "
				"replacement=True, generator=%s)%s)",
				head, dl, gen, tail);
	case BFS_SAMPLER_SUBSET:
		return snprintf(buf, len,
				"%s, drop_last=%s, sampler=SubsetRandomSampler"
				"(indices, generator=%s)%s)",
				head, dl, gen, tail);
	case BFS_SAMPLER_WEIGHTED:
		return snprintf(
		    buf, len,
		    "%s, drop_last=%s, sampler=WeightedRandomSampler"
		    "(weights, num_samples=%" PRIu64
		    ", replacement=True, generator=%s)%s)",
		    head, dl, p->num_samples, gen, tail);
	case BFS_SAMPLER_DISTRIBUTED:
		return describe_distributed(o, head, tail, buf, len);
	}
	return snprintf(buf, len, "(unknown sampler)");
}
