/* fs/mt19937: torch's CPU Mersenne Twister and its get_state() blob.
 *
 * Mirrors ATen/core/MT19937RNGEngine.h: init_with_uint32 seeding with
 * left = 1 (the first draw twists), a countdown 'left' and an index 'next'.
 * The blob layout (little-endian, x86-64 struct packing) was found by
 * experiment with torch 1.13 (fs/order_input.h tells how to make one):
 *
 *   0    u64 the_initial_seed        16   u64 next
 *   8    i32 left                    24   u64 state[624] (low 32 bits used)
 *   12   i32 seeded                  5016 f64 normal_x, normal_y, normal_rho
 *   5040 i32 normal_is_valid         5048 f32 next_float_normal_sample
 *   5052 u8  is_next_float_normal_sample_valid, padded to 5056
 *
 * No state is global: every function works on the caller's struct. */
#include "fs/mt19937.h"

#include <errno.h>
#include <string.h>

#define MT_M	    397
#define MT_MATRIX_A 0x9908b0dfu
#define MT_UMASK    0x80000000u
#define MT_LMASK    0x7fffffffu
#define OFF_LEFT    8
#define OFF_SEEDED  12
#define OFF_NEXT    16
#define OFF_STATE   24
#define OFF_NORMAL  5016

static inline uint32_t twist_word(uint32_t u, uint32_t v)
{
	uint32_t y = (u & MT_UMASK) | (v & MT_LMASK);

	return (y >> 1) ^ ((v & 1u) ? MT_MATRIX_A : 0u);
}

void bfs_mt_seed(struct bfs_mt *mt, uint64_t seed)
{
	memset(mt, 0, sizeof(*mt));
	mt->seed = seed;
	mt->state[0] = (uint32_t)seed;
	for (uint32_t j = 1; j < BFS_MT_N; j++)
		mt->state[j] = 1812433253u * (mt->state[j - 1] ^
					      (mt->state[j - 1] >> 30)) +
			       j;
	mt->left = 1;
	mt->next = 0;
}

void bfs_mt_twist(struct bfs_mt *mt)
{
	uint32_t *s = mt->state;
	int j;

	for (j = 0; j < BFS_MT_N - MT_M; j++)
		s[j] = s[j + MT_M] ^ twist_word(s[j], s[j + 1]);
	for (; j < BFS_MT_N - 1; j++)
		s[j] = s[j + MT_M - BFS_MT_N] ^ twist_word(s[j], s[j + 1]);
	s[j] = s[j + MT_M - BFS_MT_N] ^ twist_word(s[j], s[0]);
	mt->left = BFS_MT_N;
	mt->next = 0;
}

void bfs_mt_skip(struct bfs_mt *mt, uint64_t words)
{
	uint64_t before_twist = mt->left - 1, twists, j;

	if (words <= before_twist) {
		mt->left -= (uint32_t)words;
		mt->next += (uint32_t)words;
		return;
	}
	words -= before_twist;
	/* Each twist serves 624 words; after j words of the last one,
	 * torch's bookkeeping reads left = 625 - j, next = j. */
	twists = (words + BFS_MT_N - 1) / BFS_MT_N;
	for (uint64_t t = 0; t < twists; t++)
		bfs_mt_twist(mt);
	j = words - (twists - 1) * BFS_MT_N;
	mt->left = (uint32_t)(BFS_MT_N + 1 - j);
	mt->next = (uint32_t)j;
}

static uint64_t get_u64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static uint32_t get_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static void put_u64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

int bfs_mt_import(struct bfs_mt *mt, const uint8_t *bytes, size_t len,
		  const char *what, struct bfs_error *err)
{
	int32_t left, seeded;
	uint64_t next;

	if (len != BFS_MT_STATE_BYTES && len != BFS_MT_STATE_LEGACY_BYTES)
		return bfs_error_set(err, -EINVAL, what, BFS_NO_OFFSET,
				     "generator state is %zu bytes, expected "
				     "%d (torch.Generator.get_state()) or %d",
				     len, BFS_MT_STATE_BYTES,
				     BFS_MT_STATE_LEGACY_BYTES);
	left = (int32_t)get_u32(bytes + OFF_LEFT);
	seeded = (int32_t)get_u32(bytes + OFF_SEEDED);
	next = get_u64(bytes + OFF_NEXT);
	if (seeded != 1)
		return bfs_error_set(err, -EINVAL, what, OFF_SEEDED,
				     "generator state is not seeded (%d)",
				     (int)seeded);
	if (left < 1 || left > BFS_MT_N)
		return bfs_error_set(err, -EINVAL, what, OFF_LEFT,
				     "'left' is %d, must be in 1..624",
				     (int)left);
	/* torch checks next <= 624 only; the words read before the next
	 * twist, state[next .. next+left-2], must also lie in the state. */
	if (next > BFS_MT_N || next + (uint64_t)left - 1 > BFS_MT_N)
		return bfs_error_set(err, -EINVAL, what, OFF_NEXT,
				     "'next' is %llu with left %d: outside "
				     "the 624-word state",
				     (unsigned long long)next, (int)left);
	memset(mt, 0, sizeof(*mt));
	mt->seed = get_u64(bytes);
	mt->left = (uint32_t)left;
	mt->next = (uint32_t)next;
	for (int i = 0; i < BFS_MT_N; i++)
		mt->state[i] = (uint32_t)get_u64(bytes + OFF_STATE + 8 * i);
	memcpy(mt->normal_cache, bytes + OFF_NORMAL, len - OFF_NORMAL);
	return 0;
}

void bfs_mt_export(const struct bfs_mt *mt, uint8_t out[BFS_MT_STATE_BYTES])
{
	memset(out, 0, BFS_MT_STATE_BYTES);
	put_u64(out, mt->seed);
	out[OFF_LEFT] = (uint8_t)mt->left;
	out[OFF_LEFT + 1] = (uint8_t)(mt->left >> 8);
	out[OFF_SEEDED] = 1;
	put_u64(out + OFF_NEXT, mt->next);
	for (int i = 0; i < BFS_MT_N; i++)
		put_u64(out + OFF_STATE + 8 * i, mt->state[i]);
	memcpy(out + OFF_NORMAL, mt->normal_cache, sizeof(mt->normal_cache));
}
