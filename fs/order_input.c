/* fs/order_input: load the --subset / --weights / --generator-state files.
 *
 * Every file is read whole (they are small next to a dataset: 8 bytes per
 * index). Text: one value per line, surrounding blanks and blank lines
 * ignored. .npy: fs/npy parses the header; 1-D arrays of the few dtypes
 * these options take are accepted, anything else is refused with the byte
 * offset and reason.
 * No shared state. */
#include "fs/order_input.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/mt19937.h"
#include "fs/npy.h"

#define MAX_INPUT_BYTES (1ull << 36)

/* Read all of 'path' into a malloc'd, NUL-terminated buffer; a file over
 * 'limit' bytes is refused, saying 'expect' (what its size should be)
 * when not NULL. */
static int slurp(const char *path, size_t limit, const char *expect, char **out,
		 size_t *len, struct bfs_error *err)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long size;
	int rc = -errno;

	if (!f)
		return bfs_error_set(err, rc, path, BFS_NO_OFFSET,
				     "cannot open: %s", strerror(-rc));
	rc = -EIO;
	if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0) {
		bfs_error_set(err, rc, path, BFS_NO_OFFSET,
			      "cannot determine the file size");
		goto out_close;
	}
	rc = -EFBIG;
	if ((unsigned long)size > limit && expect) {
		bfs_error_set(err, rc, path, BFS_NO_OFFSET, "%ld bytes; %s",
			      size, expect);
		goto out_close;
	}
	if ((unsigned long)size > limit) {
		bfs_error_set(err, rc, path, BFS_NO_OFFSET,
			      "file is %ld bytes, more than the %zu allowed",
			      size, limit);
		goto out_close;
	}
	rc = -ENOMEM;
	buf = malloc((size_t)size + 1);
	if (!buf)
		goto out_close;
	rc = -EIO;
	if (fread(buf, 1, (size_t)size, f) != (size_t)size) {
		bfs_error_set(err, rc, path, BFS_NO_OFFSET, "read failed");
		goto out_close;
	}
	buf[size] = 0;
	*out = buf;
	*len = (size_t)size;
	buf = NULL;
	rc = 0;
out_close:
	free(buf);
	fclose(f);
	return rc;
}

struct npy {
	char kind;     /* 'i' or 'f' */
	int size;      /* 4 or 8 */
	int swap;      /* big-endian data */
	size_t count;  /* elements */
	size_t offset; /* of the data */
};

/* fs/npy parses the header; these options take 1-D int32/int64/float32/
 * float64 arrays only. */
static int npy_header(const char *path, const char *buf, size_t len,
		      struct npy *h, struct bfs_error *err)
{
	struct bfs_npy np;
	int rc = bfs_npy_parse((const uint8_t *)buf, len, path, &np, err);

	if (rc == -EAGAIN)
		return bfs_error_set(err, -EINVAL, path, len,
				     ".npy header runs past the end of the "
				     "file");
	if (rc)
		return rc;
	h->swap = np.big_endian;
	h->kind =
	    np.dtype == BFS_DT_INT32 || np.dtype == BFS_DT_INT64 ? 'i' : 'f';
	h->size =
	    np.dtype == BFS_DT_INT32 || np.dtype == BFS_DT_FLOAT32 ? 4 : 8;
	if (np.dtype != BFS_DT_INT32 && np.dtype != BFS_DT_INT64 &&
	    np.dtype != BFS_DT_FLOAT32 && np.dtype != BFS_DT_FLOAT64)
		return bfs_error_set(err, -EINVAL, path, 10,
				     ".npy dtype must be one of int32, int64, "
				     "float32, float64");
	if (np.ndim != 1)
		return bfs_error_set(err, -EINVAL, path, 10,
				     ".npy array must be 1-D (it has %d "
				     "dimensions)",
				     np.ndim);
	if (np.data_bytes > len - np.data_off)
		return bfs_error_set(err, -EINVAL, path, np.data_off,
				     ".npy data holds %zu bytes, the shape "
				     "needs %llu",
				     len - (size_t)np.data_off,
				     (unsigned long long)np.data_bytes);
	h->count = (size_t)np.shape[0];
	h->offset = (size_t)np.data_off;
	return 0;
}

/* Element i of the .npy data as raw little-endian bits. */
static uint64_t npy_bits(const char *buf, const struct npy *h, size_t i)
{
	const unsigned char *p =
	    (const unsigned char *)buf + h->offset + i * (size_t)h->size;
	uint64_t v = 0;

	for (int b = 0; b < h->size; b++) {
		int at = h->swap ? b : h->size - 1 - b;

		v = (v << 8) | p[at];
	}
	return v;
}

static double npy_double(const char *buf, const struct npy *h, size_t i)
{
	uint64_t bits = npy_bits(buf, h, i);
	double d;
	float f;
	uint32_t b32 = (uint32_t)bits;

	if (h->size == 4) {
		memcpy(&f, &b32, 4);
		return f;
	}
	memcpy(&d, &bits, 8);
	return d;
}

static int64_t npy_int(const char *buf, const struct npy *h, size_t i)
{
	uint64_t bits = npy_bits(buf, h, i);

	if (h->size == 4)
		return (int32_t)(uint32_t)bits;
	return (int64_t)bits;
}

/* One parsed value as its 8 bytes: an int64 (want_int) or a double. */
static uint64_t value_bits(int want_int, int64_t iv, double dv)
{
	uint64_t bits;

	memcpy(&bits, want_int ? (void *)&iv : (void *)&dv, 8);
	return bits;
}

/* The elements of a .npy file as 8-byte values into a malloc'd array. */
static int parse_npy(const char *path, const char *buf, size_t len,
		     int want_int, uint64_t **vals, size_t *count,
		     struct bfs_error *err)
{
	struct npy h = {0};
	int rc = npy_header(path, buf, len, &h, err);

	if (rc)
		return rc;
	if ((h.kind == 'i') != want_int)
		return bfs_error_set(err, -EINVAL, path, 10,
				     ".npy holds %s, expected %s",
				     h.kind == 'i' ? "integers" : "floats",
				     want_int ? "integers" : "floats");
	*vals = malloc((h.count ? h.count : 1) * sizeof(uint64_t));
	if (!*vals)
		return -ENOMEM;
	for (size_t i = 0; i < h.count; i++)
		(*vals)[i] =
		    value_bits(want_int, want_int ? npy_int(buf, &h, i) : 0,
			       want_int ? 0 : npy_double(buf, &h, i));
	*count = h.count;
	return 0;
}

/* The lines of a text file as 8-byte values into a malloc'd array (NULL
 * when there are none); 'buf' is NUL-terminated and modified. */
static int parse_text(const char *path, char *buf, int want_int, uint64_t **out,
		      size_t *out_count, struct bfs_error *err)
{
	char *line, *end;
	size_t count = 0, cap = 0, lineno = 0;
	uint64_t *vals = NULL;
	int rc = 0;

	for (line = buf; line && *line; line = end) {
		char *nl = strchr(line, '\n'), *stop;
		int64_t iv = 0;
		double dv = 0;

		end = nl ? nl + 1 : NULL;
		if (nl)
			*nl = 0;
		lineno++;
		while (*line == ' ' || *line == '\t' || *line == '\r')
			line++;
		if (!*line)
			continue;
		errno = 0;
		if (want_int)
			iv = strtoll(line, &stop, 10);
		else
			dv = strtod(line, &stop);
		while (*stop == ' ' || *stop == '\t' || *stop == '\r')
			stop++;
		if (errno == ERANGE || stop == line || *stop) {
			rc = bfs_error_set(
			    err, -EINVAL, path, BFS_NO_OFFSET,
			    "line %zu: '%.40s' is not %s", lineno, line,
			    want_int ? "an integer" : "a number");
			break;
		}
		if (count == cap) {
			uint64_t *nv;

			cap = cap ? 2 * cap : 1024;
			nv = realloc(vals, cap * sizeof(uint64_t));
			if (!nv) {
				rc = -ENOMEM;
				break;
			}
			vals = nv;
		}
		vals[count++] = value_bits(want_int, iv, dv);
	}
	if (rc) {
		free(vals);
		return rc;
	}
	*out = vals;
	*out_count = count;
	return 0;
}

/* Parse a file of numbers: ints (want_int) or doubles into a malloc'd
 * array of 8-byte elements (never NULL, even for 0 values). */
static int load_numbers(const char *path, int want_int, void **out, size_t *n,
			struct bfs_error *err)
{
	char *buf = NULL;
	size_t len, count = 0;
	uint64_t *vals = NULL;
	int rc;

	rc = slurp(path, MAX_INPUT_BYTES, NULL, &buf, &len, err);
	if (rc)
		return rc;
	if (len >= 6 && memcmp(buf, "\x93NUMPY", 6) == 0)
		rc = parse_npy(path, buf, len, want_int, &vals, &count, err);
	else
		rc = parse_text(path, buf, want_int, &vals, &count, err);
	if (!rc && !vals)
		vals = malloc(sizeof(uint64_t)); /* empty file: 0 values */
	if (!rc && !vals)
		rc = -ENOMEM;
	if (!rc) {
		*out = vals;
		*n = count;
	}
	free(buf);
	return rc;
}

int bfs_order_load_indices(const char *path, int64_t **out, size_t *n,
			   struct bfs_error *err)
{
	return load_numbers(path, 1, (void **)out, n, err);
}

int bfs_order_load_weights(const char *path, double **out, size_t *n,
			   struct bfs_error *err)
{
	return load_numbers(path, 0, (void **)out, n, err);
}

int bfs_order_load_state(const char *path, uint8_t **out, size_t *len,
			 struct bfs_error *err)
{
	static const char expect[] =
	    "a generator state is the 5056 bytes of "
	    "torch.Generator.get_state() or torch.get_rng_state() (5048 "
	    "from older torch), e.g. open(FILE, 'wb').write("
	    "state.numpy().tobytes())";
	int rc =
	    slurp(path, BFS_MT_STATE_BYTES, expect, (char **)out, len, err);

	if (rc == 0 && *len != BFS_MT_STATE_BYTES &&
	    *len != BFS_MT_STATE_LEGACY_BYTES) {
		rc = bfs_error_set(err, -EINVAL, path, BFS_NO_OFFSET,
				   "%zu bytes; %s", *len, expect);
		free(*out);
		*out = NULL;
	}
	return rc;
}
