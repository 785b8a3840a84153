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
#include <pthread.h>
#include <stdbool.h>
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

	if (words >= BFS_MT_JUMP_MIN && bfs_mt_jump(mt, words) == 0)
		return;

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

/* ---- Jump-ahead (Haramoto et al., "Efficient jump ahead for F2-linear
 * random number generators", 2008).
 *
 * The raw words obey x[k+624] = x[k+397] ^ twist(x[k], x[k+1]): a linear
 * map T on the window (x[k] .. x[k+623]) whose meaningful part has 19937
 * bits (the low 31 bits of x[k] are never read again). T's minimal
 * polynomial phi (degree 19937) comes from Berlekamp-Massey over 2 * 19937
 * bits of one bit position of the raw sequence; it is a constant, computed
 * once (pthread_once) and read-only afterwards. Then T^J = g(T) with
 * g = x^J mod phi (square-and-multiply: squarings are bit spreads plus a
 * reduction), and g(T)·window is a Horner pass of 19937 one-word steps. */
#define MT_DEG	   19937
#define POLY_WORDS ((MT_DEG + 64) / 64) /* 312: bits 0 .. 19937 */

static uint64_t phi[POLY_WORDS];
static uint64_t phi_shift[64][POLY_WORDS + 1]; /* phi << s, s = 0..63 */
static bool phi_ok;
static pthread_once_t phi_once = PTHREAD_ONCE_INIT;

static int bit_get(const uint64_t *a, uint64_t i)
{
	return (int)((a[i / 64] >> (i % 64)) & 1);
}

/* Bits [at, at + 64) of a (bits past 'nbits' read as 0). */
static uint64_t bits64(const uint64_t *a, size_t words, int64_t at)
{
	int64_t w = at >= 0 ? at / 64 : -((-at + 63) / 64);
	int s = (int)(at - w * 64);
	uint64_t lo = w >= 0 && (size_t)w < words ? a[w] : 0;
	uint64_t hi = w + 1 >= 0 && (size_t)(w + 1) < words ? a[w + 1] : 0;

	return s ? (lo >> s) | (hi << (64 - s)) : lo;
}

/* Berlekamp-Massey over GF(2) on 2 * MT_DEG bits of the raw sequence. */
static void phi_compute(void)
{
	enum { NB = 2 * MT_DEG, SW = (NB + 63) / 64 };
	static uint64_t rev[SW], c[POLY_WORDS + 1], b[POLY_WORDS + 1],
	    t[POLY_WORDS + 1];
	struct bfs_mt mt;
	int64_t L = 0, m = 1;

	/* rev holds the sequence reversed: s[n] at bit NB - 1 - n. */
	bfs_mt_seed(&mt, 5489);
	for (int n = 0; n < NB; n++) {
		uint32_t *s = mt.state;

		if (--mt.left == 0)
			bfs_mt_twist(&mt);
		if ((s[mt.next++] & 1u))
			rev[(NB - 1 - n) / 64] |= 1ull << ((NB - 1 - n) % 64);
	}
	memset(c, 0, sizeof(c));
	memset(b, 0, sizeof(b));
	c[0] = b[0] = 1;
	for (int64_t n = 0; n < NB; n++) {
		/* d = sum_{i=0..L} c_i s[n-i]; s[n-i] is rev bit NB-1-n+i. */
		uint64_t d = 0;

		for (int64_t w = 0; w <= L / 64; w++)
			d ^= c[w] & bits64(rev, SW, NB - 1 - n + 64 * w);
		if (!(__builtin_popcountll(d) & 1)) {
			m++;
			continue;
		}
		memcpy(t, c, sizeof(c));
		/* c ^= b << m */
		for (int64_t w = POLY_WORDS; w >= 0; w--)
			c[w] ^= bits64(b, POLY_WORDS + 1, 64 * w - m);
		if (2 * L <= n) {
			L = n + 1 - L;
			memcpy(b, t, sizeof(b));
			m = 1;
		} else {
			m++;
		}
	}
	/* c is the connection polynomial (c_0 = 1); phi is its reciprocal:
	 * phi_i = c_{L-i}. */
	if (L != MT_DEG)
		return;
	for (int64_t i = 0; i <= L; i++)
		if (bit_get(c, (uint64_t)(L - i)))
			phi[i / 64] |= 1ull << (i % 64);
	for (int s = 0; s < 64; s++)
		for (int w = 0; w <= POLY_WORDS; w++)
			phi_shift[s][w] = bits64(phi, POLY_WORDS, 64 * w - s);
	phi_ok = true;
}

/* r = r^2 mod phi (r: POLY_WORDS words, degree < MT_DEG). */
static void poly_square(uint64_t *r)
{
	uint64_t sq[2 * POLY_WORDS + 1];

	memset(sq, 0, sizeof(sq));
	for (int w = 0; w < POLY_WORDS; w++)
		for (int i = 0; i < 64; i++)
			if ((r[w] >> i) & 1)
				sq[(128 * w + 2 * i) / 64] |= 1ull
							      << ((2 * i) % 64);
	for (int64_t p = 2 * (MT_DEG - 1); p >= MT_DEG; p--) {
		int64_t off = p - MT_DEG, w0 = off / 64;
		const uint64_t *ps = phi_shift[off % 64];

		if (!((sq[p / 64] >> (p % 64)) & 1))
			continue;
		for (int w = 0; w <= POLY_WORDS && w0 + w < 2 * POLY_WORDS + 1;
		     w++)
			sq[w0 + w] ^= ps[w];
	}
	memcpy(r, sq, POLY_WORDS * sizeof(uint64_t));
}

/* r = r * x mod phi. */
static void poly_times_x(uint64_t *r)
{
	for (int w = POLY_WORDS - 1; w > 0; w--)
		r[w] = (r[w] << 1) | (r[w - 1] >> 63);
	r[0] <<= 1;
	if (bit_get(r, MT_DEG))
		for (int w = 0; w < POLY_WORDS; w++)
			r[w] ^= phi[w];
}

/* One step of the raw recurrence on a ring window (buf, *at). */
static inline void ring_step(uint32_t *buf, int *at)
{
	int i = *at, i1 = i + 1 == BFS_MT_N ? 0 : i + 1;
	int im = i + MT_M >= BFS_MT_N ? i + MT_M - BFS_MT_N : i + MT_M;

	buf[i] = buf[im] ^ twist_word(buf[i], buf[i1]);
	*at = i1;
}

int bfs_mt_jump(struct bfs_mt *mt, uint64_t words)
{
	uint64_t g[POLY_WORDS], before = mt->left - 1;
	uint32_t win[BFS_MT_N], acc[BFS_MT_N];
	int at = 0, top;

	pthread_once(&phi_once, phi_compute);
	if (!phi_ok)
		return -ENOSYS;
	/* Use up the words before the next twist: then state[] is a whole
	 * window (x[k] .. x[k+623]) and left = 1 says "twist next". */
	if (words < before) {
		bfs_mt_skip(mt, words);
		return 0;
	}
	bfs_mt_skip(mt, before);
	words -= before;
	memset(g, 0, sizeof(g));
	g[0] = 1;
	for (top = 63; top >= 0 && !((words >> top) & 1); top--)
		;
	for (int i = top; i >= 0; i--) {
		poly_square(g);
		if ((words >> i) & 1)
			poly_times_x(g);
	}
	/* Horner: acc = sum g_i T^i win. */
	memcpy(win, mt->state, sizeof(win));
	memset(acc, 0, sizeof(acc));
	for (int64_t i = MT_DEG - 1; i >= 0; i--) {
		ring_step(acc, &at);
		if (!bit_get(g, (uint64_t)i))
			continue;
		/* window element j lives at acc[(at + j) % 624] */
		for (int j = 0; j < BFS_MT_N - at; j++)
			acc[at + j] ^= win[j];
		for (int j = BFS_MT_N - at; j < BFS_MT_N; j++)
			acc[at + j - BFS_MT_N] ^= win[j];
	}
	memcpy(mt->state, acc + at, (BFS_MT_N - at) * sizeof(uint32_t));
	memcpy(mt->state + BFS_MT_N - at, acc, at * sizeof(uint32_t));
	mt->left = 1;
	mt->next = 0;
	return 0;
}
