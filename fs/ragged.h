/* fs/ragged: how a ragged field is served in a batch (fs/README.md:
 * ragged fields), as the options `--pad` and `--pack` of `batchfs
 * mount` ask for it.
 *
 *   pad  (the default): NAME is [B, L, *row] with L the longest sample of
 *        the batch rounded up to MULTIPLE (1), the rows past a sample's
 *        own filled with VALUE (0), plus NAME.lengths int64 [B]: exactly
 *        torch.nn.utils.rnn.pad_sequence(batch_first=True,
 *        padding_value=VALUE) of the batch's samples;
 *   pack: NAME is the samples' rows back to back, [sum of lengths, *row],
 *        plus NAME.offsets int64 [B + 1] (0 first), as variable-length
 *        attention kernels take them.
 *
 * The pad VALUE is converted to the field's dtype as torch's
 * tensor.new_full(..., VALUE) converts a Python number: integers must
 * be integral and fit the dtype, bool is VALUE != 0, float16 and
 * bfloat16 round to nearest even from float32, complex gets VALUE + 0j;
 * float8 fields take only 0. */
#ifndef BFS_RAGGED_H
#define BFS_RAGGED_H

#include <stddef.h>
#include <stdint.h>

#include "fs/dtype.h"

enum bfs_ragged_mode {
	BFS_RAGGED_PAD,
	BFS_RAGGED_PACK,
};

/* The longest pad element (complex128). */
#define BFS_RAGGED_PAD_MAX 16
/* The largest --pad MULTIPLE. */
#define BFS_RAGGED_MULTIPLE_MAX (1u << 20)

/* One --pad / --pack option. */
struct bfs_ragged_opt {
	char *name; /* the ragged field */
	enum bfs_ragged_mode mode;
	char *value;	   /* pad: VALUE as given, NULL for 0 */
	uint64_t multiple; /* pad: L is rounded up to this (>= 1) */
};

/* Parse the argument of --pad ("NAME[=VALUE][:MULTIPLE]": MULTIPLE is a
 * final ':' and digits, VALUE what follows the last '=' before it) or of
 * --pack ("NAME", taken whole). Returns 0, or -EINVAL with the reason in
 * why[len] (an empty NAME or VALUE, a MULTIPLE of 0 or more than
 * BFS_RAGGED_MULTIPLE_MAX). Free with bfs_ragged_opt_free. */
int bfs_ragged_opt_parse(const char *arg, enum bfs_ragged_mode mode,
			 struct bfs_ragged_opt *o, char *why, size_t len);

void bfs_ragged_opt_free(struct bfs_ragged_opt *o);

/* The pad element for 'text' (NULL: 0) in dtype dt, little-endian, into
 * out (bfs_dtype_info(dt)->size bytes, the rest zeroed). Returns 0, or
 * -EINVAL / -ERANGE with the reason in why[len] (not a number, not
 * integral for an integer dtype, out of range, float8 other than 0). */
int bfs_ragged_pad_bytes(enum bfs_dtype dt, const char *text,
			 uint8_t out[BFS_RAGGED_PAD_MAX], char *why,
			 size_t len);

#endif
