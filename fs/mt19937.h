/* fs/mt19937: torch's CPU generator (at::mt19937 inside CPUGeneratorImpl),
 * bit for bit (fs/README.md: the order engine).
 *
 * The engine is the reference MT19937 with torch's state bookkeeping
 * ('left' counts down to the next twist, 'next' indexes the state), so a
 * torch.Generator.get_state() blob maps onto it field for field. */
#ifndef BFS_MT19937_H
#define BFS_MT19937_H

#include <stddef.h>
#include <stdint.h>

#include "fs/error.h"

#define BFS_MT_N 624
/* torch.Generator.get_state() sizes: CPUGeneratorImplState (current) and
 * the older CPUGeneratorImplStateLegacy that set_state also accepts. */
#define BFS_MT_STATE_BYTES	  5056
#define BFS_MT_STATE_LEGACY_BYTES 5048

struct bfs_mt {
	uint32_t state[BFS_MT_N];
	uint32_t left; /* words until the next twist, 1..624 */
	uint32_t next; /* index of the next word in 'state' */
	uint64_t seed; /* initial_seed() as torch reports it */
	/* The normal-distribution caches of the state blob, kept only so an
	 * imported state exports unchanged (nothing here draws normals). */
	uint8_t normal_cache[BFS_MT_STATE_BYTES - 5016];
};

/* torch.Generator().manual_seed(seed): only the low 32 bits seed the
 * engine; 'seed' is kept whole as initial_seed(). Cannot fail. */
void bfs_mt_seed(struct bfs_mt *mt, uint64_t seed);

/* CPUGeneratorImpl::random(): one tempered 32-bit word. */
static inline uint32_t bfs_mt_random(struct bfs_mt *mt);

/* CPUGeneratorImpl::random64(): (w1 << 32) | w2. */
static inline uint64_t bfs_mt_random64(struct bfs_mt *mt);

/* Twist the whole state (internal; exposed for the inline draws). */
void bfs_mt_twist(struct bfs_mt *mt);

/* Advance by 'words' draws without producing them: the generator ends
 * where calling bfs_mt_random() 'words' times leaves it. Twists alone
 * (~0.4 ns/word) below BFS_MT_JUMP_MIN words, bfs_mt_jump above. */
void bfs_mt_skip(struct bfs_mt *mt, uint64_t words);

#define BFS_MT_JUMP_MIN (1ull << 26)

/* Advance by 'words' draws in time independent of 'words' (polynomial
 * jump-ahead, ~0.1 s; the first call also derives the MT19937 minimal
 * polynomial, ~0.1 s once per process). The following draws equal those
 * after 'words' bfs_mt_random() calls; the state bytes may differ in the
 * 31 low bits of state[0], which no later draw reads. Returns 0, or
 * -ENOSYS if the polynomial could not be derived (then nothing moved). */
int bfs_mt_jump(struct bfs_mt *mt, uint64_t words);

/* Load a torch.Generator.get_state() blob (5056 bytes, or the 5048-byte
 * legacy layout). Validates as torch's is_valid() does (seeded, 1 <= left
 * <= 624, next <= 624). Returns 0 or -EINVAL with 'err' naming 'what'
 * (a file name, for the message), the offset and the reason. */
int bfs_mt_import(struct bfs_mt *mt, const uint8_t *bytes, size_t len,
		  const char *what, struct bfs_error *err);

/* Write the 5056-byte get_state() blob of 'mt' to 'out'; g.set_state() of
 * these bytes continues exactly where 'mt' stands. */
void bfs_mt_export(const struct bfs_mt *mt, uint8_t out[BFS_MT_STATE_BYTES]);

static inline uint32_t bfs_mt_random(struct bfs_mt *mt)
{
	uint32_t y;

	if (--mt->left == 0)
		bfs_mt_twist(mt);
	y = mt->state[mt->next++];
	y ^= y >> 11;
	y ^= (y << 7) & 0x9d2c5680u;
	y ^= (y << 15) & 0xefc60000u;
	y ^= y >> 18;
	return y;
}

static inline uint64_t bfs_mt_random64(struct bfs_mt *mt)
{
	uint64_t hi = bfs_mt_random(mt);

	return (hi << 32) | bfs_mt_random(mt);
}

#endif
