/* libFuzzer target: fs/zip over arbitrary bytes; when an archive parses,
 * fs/pickle over its data.pkl (as fs/dataset would). Any crash, leak,
 * out-of-bounds read or UB is a bug: the parsers must refuse, not fail. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fs/pickle.h"
#include "fs/zip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct bfs_error err = {""};
	struct bfs_zip *z = NULL;
	struct bfs_pickle_result r = {0};
	const struct bfs_zip_entry *e;

	if (bfs_zip_open_mem(&z, data, size, "fuzz.pt", &err) != 0)
		return 0;
	for (size_t i = 0; i < z->n_entries; i++) {
		e = &z->entries[i];
		/* data in bounds; every record found again by its name */
		if (e->data_off + e->size > z->cd_off ||
		    bfs_zip_find(z, e->name + strlen(z->prefix) + 1) != e)
			__builtin_trap();
	}
	e = bfs_zip_find(z, "data.pkl");
	if (e && bfs_pickle_load(bfs_zip_data(z, e), e->size, e->name, 0, &r,
				 &err) == 0)
		bfs_pickle_result_free(&r);
	bfs_zip_close(z);
	return 0;
}
