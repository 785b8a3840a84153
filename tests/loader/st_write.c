/* Test helper: a safetensors writer (see st_write.h). Test-only code: it
 * trusts its inputs. */
#include "tests/loader/st_write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void st_fill(void *buf, size_t n, uint64_t seed)
{
	unsigned char *p = buf;
	for (size_t i = 0; i < n; i += 8) {
		uint64_t z = seed + (i / 8 + 1) * 0x9e3779b97f4a7c15ull;
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		z ^= z >> 31;
		for (size_t k = 0; k < 8 && i + k < n; k++)
			p[i + k] = (unsigned char)(z >> (8 * k));
	}
}

/* The JSON header text (unpadded) into a malloc'ed string. */
static char *header_json(const struct st_tensor *t, unsigned n, unsigned epoch,
			 unsigned batch)
{
	char *s = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&s, &len);
	uint64_t off = 0;

	if (!f)
		return NULL;
	fprintf(f,
		"{\"__metadata__\":{\"format\":\"batchfs/1\",\"epoch\":\"%u\","
		"\"batch\":\"%u\"}",
		epoch, batch);
	for (unsigned i = 0; i < n; i++) {
		fprintf(f, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", t[i].name,
			t[i].dtype);
		for (unsigned d = 0; d < t[i].ndim; d++)
			fprintf(f, "%s%llu", d ? "," : "",
				(unsigned long long)t[i].shape[d]);
		fprintf(f, "],\"data_offsets\":[%llu,%llu]}",
			(unsigned long long)off,
			(unsigned long long)(off + t[i].nbytes));
		off += t[i].nbytes;
	}
	fputc('}', f);
	fclose(f);
	return s;
}

long st_write(const char *path, const struct st_tensor *t, unsigned n,
	      unsigned epoch, unsigned batch, size_t extra_pad)
{
	char *json = header_json(t, n, epoch, batch);
	size_t jl, start, hl;
	unsigned char len8[8];
	long rc;
	FILE *f;

	if (!json)
		return -ENOMEM;
	jl = strlen(json);
	start = (8 + jl + extra_pad + 4095) / 4096 * 4096;
	hl = start - 8;
	for (int k = 0; k < 8; k++)
		len8[k] = (unsigned char)((uint64_t)hl >> (8 * k));
	f = fopen(path, "wb");
	if (!f) {
		free(json);
		return -errno;
	}
	fwrite(len8, 1, 8, f);
	fwrite(json, 1, jl, f);
	for (size_t k = jl; k < hl; k++)
		fputc(' ', f);
	for (unsigned i = 0; i < n; i++)
		fwrite(t[i].data, 1, (size_t)t[i].nbytes, f);
	rc = ferror(f) ? -EIO : (long)start;
	if (fclose(f) != 0)
		rc = -EIO;
	free(json);
	return rc;
}
