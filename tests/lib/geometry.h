/* tests/lib/geometry: random tensor geometries against a simple model of
 * what batchfs must accept and serve, for the property test
 * (tests/unit/test_geometry.c) and the fuzz target
 * (tests/fuzz/fuzz_geometry.c).
 *
 * A case is one archive of 1-3 fields with any sizes, strides, offsets
 * and dtypes (stride 0, negative values, sizes near 2^63 included), small
 * real storages, a batch size and a batch of sample indices. The model,
 * written independently with exact 128-bit arithmetic, says whether the
 * dataset must be accepted (torch's numel and storage-extent rules, the
 * per-sample and per-batch byte limits of 2^63 - 1, serveable dtypes) and
 * what every byte of the batch must be. geo_check opens the archive with
 * fs/dataset and fs/layout, compares acceptance, sizes and, for batch
 * files up to 16 MiB, every byte of a gathered batch written into a buffer
 * with inaccessible guard pages on both sides (a write outside it faults). */
#ifndef BFS_TEST_GEOMETRY_H
#define BFS_TEST_GEOMETRY_H

#include <stdint.h>

#include "tests/lib/archive.h"

#define GEO_FIELDS  3
#define GEO_STORAGE 4096 /* most storage elements written */
#define GEO_ROWS    8	 /* most indices gathered */

struct geo_case {
	size_t nfields;
	struct ta_tensor t[GEO_FIELDS];
	uint8_t *storage[GEO_FIELDS]; /* t[i].numel elements, or NULL */
	size_t storage_bytes[GEO_FIELDS];
	uint64_t batch; /* rows_max of the layout */
	uint64_t idx[GEO_ROWS];
	size_t nidx; /* indices gathered (< samples when accepted) */
};

/* Draw a case from a source of 64-bit words ('next' returns the next
 * one; a fuzzer's exhausted input may return zeros). Free with
 * geo_free. */
void geo_draw(struct geo_case *c, uint64_t (*next)(void *), void *src);

void geo_free(struct geo_case *c);

/* Write the case's archive to 'path', open it and compare with the model.
 * Returns 1 when batchfs accepted it, 0 when it refused it (both as the
 * model says); on any disagreement prints the case and aborts. */
int geo_check(const struct geo_case *c, const char *path);

#endif
