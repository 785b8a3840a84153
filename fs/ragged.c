/* fs/ragged: --pad / --pack arguments and pad values (see ragged.h).
 *
 * Conversions follow torch 1.13's tensor.new_full(size, value): value
 * arrives as a Python number (a C double), integer dtypes take it when it
 * is integral and in range (torch raises otherwise), float32 is (float)v,
 * float16 and bfloat16 are rounded to nearest even from that float (as
 * c10::Half and c10::BFloat16 are built from a float). Integers are parsed
 * exactly (strtoll/strtoull) so int64 pads beyond 2^53 stay exact. */
#include "fs/ragged.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int bfs_ragged_opt_parse(const char *arg, enum bfs_ragged_mode mode,
			 struct bfs_ragged_opt *o, char *why, size_t len)
{
	const char *colon = strrchr(arg, ':'), *end = arg + strlen(arg);
	const char *eq;

	memset(o, 0, sizeof(*o));
	o->mode = mode;
	o->multiple = 1;
	if (mode == BFS_RAGGED_PAD && colon && colon[1] &&
	    strspn(colon + 1, "0123456789") == strlen(colon + 1)) {
		errno = 0;
		o->multiple = strtoull(colon + 1, NULL, 10);
		if (errno || !o->multiple ||
		    o->multiple > BFS_RAGGED_MULTIPLE_MAX) {
			snprintf(why, len, "MULTIPLE must be 1..%u",
				 BFS_RAGGED_MULTIPLE_MAX);
			return -EINVAL;
		}
		end = colon;
	}
	eq = NULL;
	for (const char *p = arg; mode == BFS_RAGGED_PAD && p < end; p++)
		if (*p == '=')
			eq = p;
	if (eq && eq + 1 == end) {
		snprintf(why, len, "empty VALUE after '='");
		return -EINVAL;
	}
	o->name = strndup(arg, (size_t)((eq ? eq : end) - arg));
	o->value = eq ? strndup(eq + 1, (size_t)(end - eq - 1)) : NULL;
	if (!o->name || (eq && !o->value)) {
		bfs_ragged_opt_free(o);
		snprintf(why, len, "out of memory");
		return -ENOMEM;
	}
	if (!o->name[0]) {
		bfs_ragged_opt_free(o);
		snprintf(why, len, "empty NAME");
		return -EINVAL;
	}
	return 0;
}

void bfs_ragged_opt_free(struct bfs_ragged_opt *o)
{
	if (!o)
		return;
	free(o->name);
	free(o->value);
	o->name = o->value = NULL;
}

/* float32 -> IEEE half, round to nearest even (NaN stays NaN). */
static uint16_t f32_to_f16(float f)
{
	uint32_t x, sign, exp, mant, h, rem, mid;
	int e, shift;

	memcpy(&x, &f, 4);
	sign = (x >> 16) & 0x8000u;
	exp = (x >> 23) & 0xffu;
	mant = x & 0x7fffffu;
	if (exp == 0xff)
		return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
	e = (int)exp - 127 + 15;
	if (e >= 0x1f)
		return (uint16_t)(sign | 0x7c00u);
	if (e <= 0) { /* a subnormal half, or 0 */
		if (e < -10)
			return (uint16_t)sign;
		mant |= 0x800000u;
		shift = 14 - e;
		h = mant >> shift;
		rem = mant & ((1u << shift) - 1);
		mid = 1u << (shift - 1);
		if (rem > mid || (rem == mid && (h & 1)))
			h++;
		return (uint16_t)(sign | h);
	}
	h = (uint32_t)e << 10 | mant >> 13;
	rem = mant & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
		h++; /* a carry into the exponent is right, up to inf */
	return (uint16_t)(sign | h);
}

/* float32 -> bfloat16, round to nearest even (c10::BFloat16). */
static uint16_t f32_to_bf16(float f)
{
	uint32_t x;

	memcpy(&x, &f, 4);
	if (isnan(f))
		return (uint16_t)((x >> 16) | 0x40u);
	x += 0x7fffu + ((x >> 16) & 1);
	return (uint16_t)(x >> 16);
}

static void put_le(uint8_t *out, uint64_t v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] = (uint8_t)(v >> (8 * i));
}

/* An integer pad: exact text, else an integral double (torch takes a
 * Python float for an integer tensor when it is integral). */
static int int_value(const char *text, bool is_signed, int64_t *sv,
		     uint64_t *uv)
{
	char *end;
	double d;

	errno = 0;
	if (is_signed)
		*sv = strtoll(text, &end, 10);
	else if (text[0] != '-')
		*uv = strtoull(text, &end, 10);
	else
		end = (char *)text;
	if (!errno && !*end && end != text)
		return 0;
	d = strtod(text, &end);
	if (*end || end == text || d != floor(d) ||
	    fabs(d) > 9007199254740992.0)
		return -EINVAL;
	if (is_signed)
		*sv = (int64_t)d;
	else if (d < 0)
		return -ERANGE;
	else
		*uv = (uint64_t)d;
	return 0;
}

/* Integer dtypes: their width, signedness and range. */
static int int_pad(const struct bfs_dtype_info *di, bool is_signed,
		   const char *text, uint8_t *out, char *why, size_t len)
{
	unsigned bits = (unsigned)di->size * 8;
	int64_t sv = 0;
	uint64_t uv = 0;
	int rc = int_value(text, is_signed, &sv, &uv);

	if (rc == -EINVAL) {
		snprintf(why, len,
			 "pad value '%s' is not an integer (the "
			 "field is %s)",
			 text, di->torch_name);
		return rc;
	}
	if (!rc && is_signed && bits < 64 &&
	    (sv < -((int64_t)1 << (bits - 1)) ||
	     sv >= ((int64_t)1 << (bits - 1))))
		rc = -ERANGE;
	if (!rc && !is_signed && bits < 64 && uv >> bits)
		rc = -ERANGE;
	if (rc) {
		snprintf(why, len, "pad value '%s' does not fit %s", text,
			 di->torch_name);
		return -ERANGE;
	}
	put_le(out, is_signed ? (uint64_t)sv : uv, di->size);
	return 0;
}

int bfs_ragged_pad_bytes(enum bfs_dtype dt, const char *text,
			 uint8_t out[BFS_RAGGED_PAD_MAX], char *why, size_t len)
{
	const struct bfs_dtype_info *di = bfs_dtype_info(dt);
	char *end;
	double v;
	float f;

	memset(out, 0, BFS_RAGGED_PAD_MAX);
	if (!di || di->size > BFS_RAGGED_PAD_MAX) {
		snprintf(why, len, "no pad value for this dtype");
		return -EINVAL;
	}
	if (!text)
		return 0;
	switch (dt) {
	case BFS_DT_UINT8:
	case BFS_DT_UINT16:
	case BFS_DT_UINT32:
	case BFS_DT_UINT64:
		return int_pad(di, false, text, out, why, len);
	case BFS_DT_INT8:
	case BFS_DT_INT16:
	case BFS_DT_INT32:
	case BFS_DT_INT64:
		return int_pad(di, true, text, out, why, len);
	default:
		break;
	}
	errno = 0;
	v = strtod(text, &end);
	if (*end || end == text) {
		snprintf(why, len, "pad value '%s' is not a number", text);
		return -EINVAL;
	}
	f = (float)v;
	switch (dt) {
	case BFS_DT_BOOL:
		out[0] = v != 0;
		return 0;
	case BFS_DT_FLOAT16:
		put_le(out, f32_to_f16(f), 2);
		return 0;
	case BFS_DT_BFLOAT16:
		put_le(out, f32_to_bf16(f), 2);
		return 0;
	case BFS_DT_FLOAT32:
	case BFS_DT_COMPLEX64: /* VALUE + 0j */
		memcpy(out, &f, 4);
		return 0;
	case BFS_DT_FLOAT64:
	case BFS_DT_COMPLEX128:
		memcpy(out, &v, 8);
		return 0;
	default: /* float8, complex32: only 0 */
		if (v == 0 && !signbit(v))
			return 0;
		snprintf(why, len, "%s fields can only be padded with 0",
			 di->torch_name);
		return -EINVAL;
	}
}
