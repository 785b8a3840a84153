/* tests/lib/fixture: the data set a C test runs against, built from a small
 * spec and taken down again by one call. tf_setup makes:
 * - a directory of the test's own (mkdtemp under $BFS_TEST_TMP, else
 *   /tmp), which tf_teardown removes with everything in it;
 * - in it, the spec's source: a tests/lib/archive archive of its fields
 *   (storage i is field i's, key "i", record version "3\n"), a directory
 *   of .npy files (one a field, "<name>.npy"), or what `$BATCHFS pack
 *   --demo N` writes; or nothing (a spec of no fields: the directory
 *   alone, for tests that write their own files into it);
 * - the dataset opened over that source (unless the spec is write_only);
 * - with a batch size in the spec's order options, the layout of that
 *   many rows and the order (its sample count the dataset's unless the
 *   spec gives one).
 * Nothing here uses cmocka (the fuzz targets link tests/lib too): calls
 * return 0 or -errno, and fx->err says why where fs/ said. */
#ifndef BFS_TEST_FIXTURE_H
#define BFS_TEST_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/layout.h"
#include "tests/lib/archive.h"

enum tf_format {
	TF_ARCHIVE, /* one archive (tests/lib/archive), "<name>" */
	TF_NPY,	    /* a directory "<name>" of "<field>.npy" files */
	TF_DEMO,    /* "<name>" from $BATCHFS pack --demo <demo_rows> */
};

/* One field: a C-contiguous tensor of 'shape', dim 0 its rows (a ragged
 * field is two of these, "<f>.values" and "<f>.offsets"). Its elements
 * come from 'data' (numel x element size bytes, borrowed), or when that is
 * NULL from 'fill', called on a zeroed buffer of numel elements (no fill:
 * zeros). */
struct tf_field {
	const char *name;
	enum bfs_dtype dtype;
	int ndim;
	int64_t shape[BFS_MAX_DIMS];
	const void *data;
	void (*fill)(void *elems, size_t numel);
	size_t align; /* TF_NPY: data at a multiple of this (0: 64) */
};

struct tf_spec {
	enum tf_format format;
	const char *name; /* the source in the directory (NULL: "data") */
	const struct tf_field *fields;
	size_t nfields;
	int64_t demo_rows; /* TF_DEMO */
	bool write_only;   /* write the source, open nothing */
	/* batch_size 0: no layout and no order; n 0: the dataset's
	 * samples. */
	struct bfs_order_opts order;
};

struct tf_fixture {
	/* short enough for the tests' own path buffers: a $BFS_TEST_TMP
	 * longer than 240 bytes fails tf_setup with -ENAMETOOLONG */
	char dir[256];	/* the test's directory ("" until made) */
	char path[384]; /* the source: "<dir>/<name>" */
	struct bfs_dataset *ds;
	struct bfs_layout layout; /* zeroed without a batch size */
	struct bfs_order *order;
	struct bfs_error err; /* why the last fs/ call failed */
	bool keep;	      /* tf_teardown leaves the directory */
};

/* Build *fx from 'spec' (NULL: the directory alone). Returns 0 or -errno;
 * on failure fx holds what was built (tf_teardown takes it down) and
 * fx->err says which step failed and why. */
int tf_setup(struct tf_fixture *fx, const struct tf_spec *spec);

/* Close what tf_setup opened and remove the directory (unless fx->keep).
 * Takes a zeroed or half-built fixture; fx is zeroed after. Returns 0 or
 * the first -errno of removing the directory. */
int tf_teardown(struct tf_fixture *fx);

/* "<fx->dir>/<name>" into buf[cap]; returns buf, or NULL when it does
 * not fit. */
char *tf_path(const struct tf_fixture *fx, const char *name, char *buf,
	      size_t cap);

/* Write the archive of fields[0..n) (as a TF_ARCHIVE spec does) to
 * 'path'. 0 or -errno. */
int tf_write_archive(const char *path, const struct tf_field *fields, size_t n);

#endif
