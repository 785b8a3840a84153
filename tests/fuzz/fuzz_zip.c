/* libFuzzer target: fs/zip over arbitrary bytes, as a torch archive and
 * as an .npz (no prefix; deflated members refused); when a torch archive
 * parses, fs/pickle over its data.pkl (as fs/source would). Any crash,
 * leak, out-of-bounds read or UB is a bug: the parsers must refuse, not
 * fail. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fs/pickle.h"
#include "fs/zip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The npz mode: records anywhere in the data area, found by full name. */
static void check_npz(const uint8_t *data, size_t size)
{
	struct bfs_error err = {""};
	struct bfs_zip *z = NULL;

	if (bfs_zip_open_mem_kind(&z, data, size, "fuzz.npz", BFS_ZIP_NPZ,
				  &err) != 0) {
		if (!err.msg[0])
			__builtin_trap();
		return;
	}
	for (size_t i = 0; i < z->n_entries; i++) {
		const struct bfs_zip_entry *e = &z->entries[i];

		if (e->method || e->data_off + e->size > z->cd_off ||
		    bfs_zip_find(z, e->name) != e)
			__builtin_trap();
	}
	bfs_zip_close(z);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct bfs_error err = {""};
	struct bfs_zip *z = NULL;
	struct bfs_pickle_result r = {0};
	const struct bfs_zip_entry *e;

	check_npz(data, size);
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
