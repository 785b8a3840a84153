/* zipdiff FILE...: our central-directory listing equals libzip's.
 *
 * For each archive: open it with fs/zip and with libzip (zip_open
 * ZIP_RDONLY|ZIP_CHECKCONS); the record count and, per index, name, size
 * (and compressed size), CRC and method must agree. Records with a CRC
 * and at most 1 MiB are also read through zip_fread (which verifies the
 * CRC) and compared byte for byte with our mapping at data_off, which
 * pins the data offsets. Prints one line per archive; exit 1 on the first
 * difference, 2 on usage or open errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

#include "fs/zip.h"

#define MAX_COMPARE (1u << 20)

static int same_bytes(zip_t *za, zip_uint64_t i, const struct bfs_zip *z,
		      const struct bfs_zip_entry *e)
{
	zip_file_t *f = zip_fopen_index(za, i, 0);
	char *buf = malloc(e->size + 1);
	zip_int64_t n = -1;
	int ok;

	if (f && buf)
		n = zip_fread(f, buf, e->size + 1);
	ok = n == (zip_int64_t)e->size &&
	     memcmp(buf, bfs_zip_data(z, e), e->size) == 0;
	if (f && zip_fclose(f) != 0)
		ok = 0;
	free(buf);
	return ok;
}

static int diff(const char *path)
{
	struct bfs_error err = {""};
	struct bfs_zip *z = NULL;
	int zerr = 0, rc = 1;
	zip_t *za;
	zip_int64_t n;
	size_t compared = 0;

	if (bfs_zip_open(&z, path, &err)) {
		fprintf(stderr, "zipdiff: ours refused: %s\n", err.msg);
		return 2;
	}
	za = zip_open(path, ZIP_RDONLY | ZIP_CHECKCONS, &zerr);
	if (!za) {
		fprintf(stderr, "zipdiff: %s: libzip refused (error %d)\n",
			path, zerr);
		bfs_zip_close(z);
		return 2;
	}
	n = zip_get_num_entries(za, 0);
	if (n != (zip_int64_t)z->n_entries) {
		printf("DIFF %s: %zu records, libzip %lld\n", path,
		       z->n_entries, (long long)n);
		goto out;
	}
	for (zip_int64_t i = 0; i < n; i++) {
		const struct bfs_zip_entry *e = &z->entries[i];
		zip_stat_t st;
		if (zip_stat_index(za, (zip_uint64_t)i, 0, &st) != 0 ||
		    strcmp(st.name, e->name) != 0 || st.size != e->size ||
		    st.comp_size != e->size || st.crc != e->crc32 ||
		    st.comp_method != ZIP_CM_STORE) {
			printf("DIFF %s: record %lld: ours '%s' %llu crc %08x, "
			       "libzip '%s' %llu crc %08x\n",
			       path, (long long)i, e->name,
			       (unsigned long long)e->size, e->crc32, st.name,
			       (unsigned long long)st.size, st.crc);
			goto out;
		}
		if (e->crc32 && e->size <= MAX_COMPARE) {
			if (!same_bytes(za, (zip_uint64_t)i, z, e)) {
				printf("DIFF %s: record '%s': bytes differ\n",
				       path, e->name);
				goto out;
			}
			compared++;
		}
	}
	printf("SAME %s: %zu records (%zu compared byte for byte)\n", path,
	       z->n_entries, compared);
	rc = 0;
out:
	zip_discard(za);
	bfs_zip_close(z);
	return rc;
}

int main(int argc, char **argv)
{
	int rc = argc > 1 ? 0 : 2;

	for (int i = 1; i < argc && rc == 0; i++)
		rc = diff(argv[i]);
	return rc;
}
