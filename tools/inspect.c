/* batchfs inspect: describe datasets (torch.save archives, .npz, .npy
 * files and directories, safetensors files; one dataset, possibly sharded)
 * and safetensors batch files.
 *
 * Sources are read through fs/dataset exactly as `batchfs mount` reads
 * them, so what inspect prints is what a mount would serve; a remote
 * source (a URL) is refused: inspect reads local files. --verify reads
 * every record of a ZIP (torch, npz) through libzip (zip_fread to the end
 * checks the CRC), which is independent of our own ZIP parser; its record
 * list is also compared with ours. A batch file is a safetensors file whose
 * __metadata__ says "format": "batchfs/1" (other safetensors files are
 * sources), or one whose header does not parse (the reason is then given
 * as for a batch file); its header is validated as the safetensors spec
 * requires (fs/README.md: the batch file) by fs/safetensors, the parser
 * the loader library uses too; only the header bytes are read.
 *
 * Output goes to stdout; every failure prints "batchfs inspect: FILE:
 * [offset N:] reason" on stderr and makes the exit status 1. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include "fs/dataset.h"
#include "fs/layout.h"
#include "fs/remote/remote.h"
#include "fs/safetensors.h"
#include "fs/zip.h"
#include "tools/cli.h"
#include "tools/cmd.h"

struct opts {
	int verbose, verify, json;
	const char *fields; /* --fields: NULL for all */
};

/* Print 's' as a JSON string literal. */
static void json_str(FILE *f, const char *s)
{
	size_t n = 0;
	char *buf;

	bfs_layout_json_str(NULL, 0, &n, s);
	buf = malloc(n + 1);
	if (!buf)
		return;
	n = 0;
	bfs_layout_json_str(buf, SIZE_MAX, &n, s);
	fwrite(buf, 1, n, f);
	free(buf);
}

static void print_shape(FILE *f, uint64_t n0, const struct bfs_field *fl)
{
	fprintf(f, "[%" PRIu64 "%s", n0, fl->ragged ? ", *" : "");
	for (int d = 0; d < fl->ndim; d++)
		fprintf(f, ", %" PRId64, fl->shape[d]);
	fprintf(f, "]");
}

/* ---- datasets ------------------------------------------------------------ */

static const char *container_name(enum bfs_container c)
{
	switch (c) {
	case BFS_CONTAINER_DICT:
		return "dict";
	case BFS_CONTAINER_LIST:
		return "list";
	case BFS_CONTAINER_TUPLE:
		return "tuple";
	case BFS_CONTAINER_TENSOR:
		return "tensor";
	}
	return "?";
}

static void archive_json(const struct bfs_dataset *ds)
{
	uint64_t n = bfs_dataset_samples(ds);

	printf("{\"samples\": %" PRIu64 ", \"fields\": [", n);
	for (size_t i = 0; i < bfs_dataset_nfields(ds); i++) {
		const struct bfs_field *fl = bfs_dataset_field(ds, i);
		printf("%s{\"name\": ", i ? ", " : "");
		json_str(stdout, fl->name);
		printf(", \"dtype\": \"%s\", \"shape\": ",
		       bfs_dtype_info(fl->dtype)->torch_name);
		if (fl->ragged) { /* [n, null, *row shape] */
			printf("[%" PRIu64 ", null", n);
			for (int d = 0; d < fl->ndim; d++)
				printf(", %" PRId64, fl->shape[d]);
			printf("], \"ragged\": true, \"values_rows\": %" PRIu64
			       ", \"max_length\": %" PRIu64,
			       fl->total, fl->max_len);
		} else {
			print_shape(stdout, n, fl);
		}
		printf("}");
	}
	printf("]}\n");
}

/* One line per shard: what kind of source, its samples and size. */
static void shard_line(const struct bfs_shard_info *si)
{
	const struct bfs_source *src = si->source;
	uint64_t bytes = 0;

	for (size_t f = 0; f < src->nfiles; f++)
		bytes += src->files[f].size;
	if (src->kind == BFS_SOURCE_TORCH)
		printf("archive %s: prefix '%s', version %d, byteorder %s, "
		       "%s of %zu tensors, ",
		       si->path, si->zip->prefix, si->version,
		       si->big_endian ? "big (swapped on read)" : "little",
		       container_name(si->container), si->pickle->n_tensors);
	else
		printf("%s %s: %zu tensors%s, ",
		       bfs_source_kind_name(src->kind), si->path, src->ntensors,
		       src->nfiles > 1 ? " (one per .npy file)" : "");
	printf("samples %" PRIu64 "..%" PRIu64 " (%" PRIu64 "), ",
	       si->first_sample,
	       si->samples ? si->first_sample + si->samples - 1
			   : si->first_sample,
	       si->samples);
	if (si->zip)
		printf("%zu records, ", si->zip->n_entries);
	printf("%" PRIu64 " bytes\n", bytes);
}

/* -v: the records of a ZIP, then every tensor's storage view. */
static void shard_details(const struct bfs_shard_info *si)
{
	const struct bfs_source *src = si->source;

	if (si->zip) {
		printf("  %-32s %14s %14s %10s\n", "record", "data offset",
		       "size", "crc32");
		for (size_t r = 0; r < si->zip->n_entries; r++) {
			const struct bfs_zip_entry *e = &si->zip->entries[r];
			printf("  %-32s %14" PRIu64 " %14" PRIu64
			       "   %08" PRIx32 "\n",
			       e->name, e->data_off, e->size, e->crc32);
		}
	}
	for (size_t t = 0; t < src->ntensors; t++) {
		const struct bfs_source_tensor *st = &src->tensors[t];
		const struct bfs_source_file *fl = &src->files[st->file];
		const struct bfs_pickle_tensor *pt = NULL;

		/* by name: the pickle's 0-dim tensors are metadata here */
		for (size_t k = 0; si->pickle && k < si->pickle->n_tensors; k++)
			if (!strcmp(si->pickle->tensors[k].name, st->name))
				pt = &si->pickle->tensors[k];

		printf("  tensor %s: %s %s at file offset %" PRIu64 " (%" PRIu64
		       " bytes), offset %" PRIu64 ", stride (",
		       st->name, bfs_dtype_info(st->dtype)->torch_name,
		       st->store, (uint64_t)(st->data - fl->map),
		       st->data_bytes, st->offset);
		for (int d = 0; d < st->ndim; d++)
			printf("%s%" PRId64, d ? ", " : "", st->stride[d]);
		printf(")%s%s%s\n", st->big_endian ? ", big-endian" : "",
		       pt && pt->is_parameter ? ", Parameter" : "",
		       pt && pt->requires_grad ? ", requires_grad" : "");
	}
}

static void archive_text(const struct bfs_dataset *ds, int verbose)
{
	uint64_t n = bfs_dataset_samples(ds);
	size_t ns = bfs_dataset_nshards(ds);

	printf("dataset: %zu shard%s, %" PRIu64 " samples, %zu fields\n", ns,
	       ns == 1 ? "" : "s", n, bfs_dataset_nfields(ds));
	for (size_t s = 0; s < ns; s++) {
		struct bfs_shard_info si;
		bfs_dataset_shard(ds, s, &si);
		shard_line(&si);
		if (verbose)
			shard_details(&si);
	}
	printf("%-24s %-10s %-24s %12s %16s\n", "field", "dtype", "shape",
	       "row bytes", "bytes");
	for (size_t i = 0; i < bfs_dataset_nfields(ds); i++) {
		const struct bfs_field *fl = bfs_dataset_field(ds, i);
		char shape[256];
		FILE *m = fmemopen(shape, sizeof(shape), "w");
		if (m) {
			print_shape(m, n, fl);
			fclose(m);
		} else {
			shape[0] = 0;
		}
		printf("%-24s %-10s %-24s %12" PRIu64 " %16" PRIu64 "%s\n",
		       fl->name, bfs_dtype_info(fl->dtype)->torch_name, shape,
		       fl->row_bytes,
		       fl->row_bytes * (fl->ragged ? fl->total : n),
		       fl->ragged ? "  ragged" : "");
		if (fl->ragged)
			printf("%-24s %" PRIu64 " rows of values, the longest "
			       "sample %" PRIu64 " rows\n",
			       "", fl->total, fl->max_len);
	}
}

/* Read every record of 'path' through libzip; compare its listing with
 * ours. Returns the number of failures (messages on stderr). */
static int verify_archive(const struct bfs_shard_info *si)
{
	int zerr = 0, bad = 0;
	zip_t *za = zip_open(si->path, ZIP_RDONLY, &zerr);
	char *buf = malloc(1 << 20);
	zip_int64_t n;

	if (!za || !buf) {
		zip_error_t e;
		zip_error_init_with_code(&e, zerr);
		fprintf(stderr, "batchfs inspect: %s: libzip cannot open: %s\n",
			si->path,
			za ? "out of memory" : zip_error_strerror(&e));
		zip_error_fini(&e);
		free(buf);
		if (za)
			zip_discard(za);
		return 1;
	}
	n = zip_get_num_entries(za, 0);
	if (n != (zip_int64_t)si->zip->n_entries) {
		fprintf(stderr,
			"batchfs inspect: %s: libzip sees %" PRId64
			" records, batchfs %zu\n",
			si->path, (int64_t)n, si->zip->n_entries);
		bad++;
	}
	for (zip_int64_t i = 0; i < n; i++) {
		const struct bfs_zip_entry *e = NULL;
		zip_stat_t st;
		if (zip_stat_index(za, (zip_uint64_t)i, 0, &st)) {
			bad++;
			continue;
		}
		for (size_t k = 0; k < si->zip->n_entries; k++)
			if (!strcmp(si->zip->entries[k].name, st.name))
				e = &si->zip->entries[k];
		if (!e || e->size != st.size || e->crc32 != st.crc) {
			fprintf(stderr,
				"batchfs inspect: %s: record '%s': "
				"libzip and batchfs disagree\n",
				si->path, st.name);
			bad++;
			continue;
		}
		if (st.crc == 0 && st.size > 0) {
			printf("%s: %s: crc not computed (0), not checked\n",
			       si->path, st.name);
			continue;
		}
		zip_file_t *zf = zip_fopen_index(za, (zip_uint64_t)i, 0);
		zip_int64_t got = 0, r = 0;
		while (zf && (r = zip_fread(zf, buf, 1 << 20)) > 0)
			got += r;
		if (!zf || r < 0 || (zip_uint64_t)got != st.size) {
			fprintf(stderr,
				"batchfs inspect: %s: offset %" PRIu64
				": record '%s': %s\n",
				si->path, e->data_off, st.name,
				zf ? zip_error_strerror(zip_file_get_error(zf))
				   : zip_error_strerror(zip_get_error(za)));
			bad++;
		}
		if (zf)
			zip_fclose(zf);
	}
	zip_discard(za);
	free(buf);
	if (!bad)
		printf("%s: %" PRId64 " records, every CRC-32 verified by "
		       "libzip\n",
		       si->path, (int64_t)n);
	return bad;
}

static int inspect_archives(char **paths, size_t n, const struct opts *o)
{
	struct bfs_dataset *ds = NULL;
	struct bfs_error err = {{0}};
	int bad = 0;

	if (bfs_dataset_open_select(&ds, (const char *const *)paths, n,
				    o->fields, &err)) {
		fprintf(stderr, "batchfs inspect: %s\n",
			err.msg[0] ? err.msg : "cannot open");
		return 1;
	}
	if (o->json)
		archive_json(ds);
	else
		archive_text(ds, o->verbose);
	for (size_t s = 0; o->verify && s < bfs_dataset_nshards(ds); s++) {
		struct bfs_shard_info si;
		bfs_dataset_shard(ds, s, &si);
		if (si.zip) /* .npy and safetensors files have no CRC */
			bad += verify_archive(&si);
	}
	bfs_dataset_close(ds);
	return bad ? 1 : 0;
}

/* ---- safetensors ----------------------------------------------------- */

/* "PATH: offset N: [tensor 'NAME': ]reason" on stderr. */
static void st_report(const char *path, int rc, const struct bfs_st_error *e)
{
	if (rc == -ENOMEM)
		fprintf(stderr, "batchfs inspect: %s: out of memory\n", path);
	else if (e->tensor[0])
		fprintf(stderr,
			"batchfs inspect: %s: offset %" PRIu64
			": tensor '%s': %s\n",
			path, e->offset, e->tensor, e->reason);
	else
		fprintf(stderr, "batchfs inspect: %s: offset %" PRIu64 ": %s\n",
			path, e->offset, e->reason);
}

/* inspect names dtypes as torch does: a valid code torch lacks (C32,
 * C128, F8_E8M0) cannot be described. Returns 0 or -EBADMSG with 'e'. */
static int st_torch_dtypes(const struct bfs_st_header *h,
			   struct bfs_st_error *e)
{
	for (size_t i = 0; i < h->ntensors; i++) {
		const struct bfs_st_tensor *t = &h->tensors[i];
		if (bfs_dtype_from_st(t->dtype))
			continue;
		e->offset = t->entry_off;
		snprintf(e->tensor, sizeof(e->tensor), "%.64s", t->name);
		snprintf(e->reason, sizeof(e->reason),
			 "unknown dtype \"%s\" (torch has none)", t->dtype);
		return -EBADMSG;
	}
	return 0;
}

static void st_print(const char *path, const struct bfs_st_header *h, int json)
{
	if (json) {
		printf("{\"file\": ");
		json_str(stdout, path);
		printf(", \"header_bytes\": %" PRIu64 ", \"metadata\": {",
		       h->header_len);
		for (size_t i = 0; i < h->nmeta; i++) {
			printf("%s", i ? ", " : "");
			json_str(stdout, h->meta[i].key);
			printf(": ");
			json_str(stdout, h->meta[i].value);
		}
		printf("}, \"fields\": [");
	} else {
		printf("%s: safetensors, header %" PRIu64 " bytes, data at "
		       "offset %" PRIu64 ", %zu tensors\n",
		       path, h->header_len, h->data_start, h->ntensors);
		for (size_t i = 0; i < h->nmeta; i++)
			printf("  __metadata__ %s = %s\n", h->meta[i].key,
			       h->meta[i].value);
	}
	for (size_t i = 0; i < h->ntensors; i++) {
		const struct bfs_st_tensor *t = &h->tensors[i];
		const char *tn =
		    bfs_dtype_info(bfs_dtype_from_st(t->dtype))->torch_name;
		if (json) {
			printf("%s{\"name\": ", i ? ", " : "");
			json_str(stdout, t->name);
			printf(", \"dtype\": \"%s\", \"shape\": [", tn);
		} else {
			printf("  %-24s %-5s %-10s [", t->name, t->dtype, tn);
		}
		for (uint32_t d = 0; d < t->ndim; d++)
			printf("%s%" PRIu64, d ? ", " : "", t->shape[d]);
		if (json)
			printf("], \"data_offsets\": [%" PRIu64 ", %" PRIu64
			       "]}",
			       t->begin, t->end);
		else
			printf("]  data [%" PRIu64 ", %" PRIu64
			       ")  file offset %" PRIu64 "\n",
			       t->begin, t->end, h->data_start + t->begin);
	}
	if (json)
		printf("]}\n");
}

/* Read the header bytes only (the data is never read), validate them with
 * fs/safetensors, print. Returns 0 or 1 (reason on stderr). */
static int inspect_batch(const char *path, int fd, uint64_t fsize,
			 const struct opts *o)
{
	struct bfs_st_error e = {0};
	struct bfs_st_header *h = NULL;
	unsigned char *buf = NULL;
	uint8_t lenb[8];
	uint64_t hlen;
	int rc;

	if (pread(fd, lenb, 8, 0) != 8)
		goto err_read;
	rc = bfs_st_header_len(lenb, fsize, &hlen, &e);
	if (rc < 0)
		goto err_report;
	buf = malloc(8 + hlen);
	if (!buf || pread(fd, buf, 8 + hlen, 0) != (ssize_t)(8 + hlen))
		goto err_read;
	rc = bfs_st_parse(buf, 8 + hlen, fsize, 0, &h, &e);
	if (rc == 0)
		rc = st_torch_dtypes(h, &e);
	if (rc < 0)
		goto err_report;
	st_print(path, h, o->json);
	bfs_st_free(h);
	free(buf);
	return 0;
err_read:
	fprintf(stderr, "batchfs inspect: %s: cannot read header\n", path);
	free(buf);
	return 1;
err_report:
	st_report(path, rc, &e);
	bfs_st_free(h);
	free(buf);
	return 1;
}

/* ---- command line -------------------------------------------------------- */

enum kind { KIND_BAD, KIND_ARCHIVE, KIND_BATCH };

/* 1 when the safetensors file on fd says it is a batch file
 * (__metadata__ "format" is "batchfs/1"): its header is described;
 * other safetensors files are dataset sources. */
static int batch_file(int fd, uint64_t fsize)
{
	struct bfs_st_header *h = NULL;
	unsigned char *buf = NULL;
	uint8_t lenb[8];
	uint64_t hlen;
	int yes = 0;

	if (pread(fd, lenb, 8, 0) != 8 ||
	    bfs_st_header_len(lenb, fsize, &hlen, NULL) ||
	    !(buf = malloc(8 + hlen)) ||
	    pread(fd, buf, 8 + hlen, 0) != (ssize_t)(8 + hlen) ||
	    bfs_st_parse(buf, 8 + hlen, fsize, BFS_ST_ANY_DTYPE, &h, NULL)) {
		free(buf);
		return 1; /* not readable as a source either: say why here */
	}
	for (size_t i = 0; i < h->nmeta; i++)
		yes |= !strcmp(h->meta[i].key, "format") &&
		       !strcmp(h->meta[i].value, "batchfs/1");
	bfs_st_free(h);
	free(buf);
	return yes;
}

static enum kind classify(const char *path, int *fd, uint64_t *size)
{
	struct stat st;
	uint8_t b[9];
	char shown[1024];

	*fd = -1;
	if (bfs_remote_is_url(path)) { /* named without its secrets */
		fprintf(stderr,
			"batchfs inspect: %s: a remote source: inspect reads "
			"local files (batchfs mount reads remote ones)\n",
			bfs_remote_url_display(shown, sizeof(shown), path));
		return KIND_BAD;
	}
	*fd = open(path, O_RDONLY | O_CLOEXEC);
	if (*fd < 0 || fstat(*fd, &st)) {
		fprintf(stderr, "batchfs inspect: %s: %s\n", path,
			strerror(errno));
		return KIND_BAD;
	}
	*size = (uint64_t)st.st_size;
	if (st.st_size >= 9 && pread(*fd, b, 9, 0) == 9 && b[8] == '{' &&
	    batch_file(*fd, *size))
		return KIND_BATCH;
	/* A dataset source: fs/source recognises its kind, or fs/zip says
	 * precisely what it is instead (e.g. "legacy torch.save format"). */
	return KIND_ARCHIVE;
}

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: batchfs inspect [-v] [--verify] [--json] [--fields LIST]\n"
	    "                       FILE...\n"
	    "\n"
	    "Describe a dataset or safetensors batch files. A dataset is made\n"
	    "of sources, as `batchfs mount` takes them: torch.save archives,\n"
	    ".npz files (numpy.savez), .safetensors files, directories of\n"
	    ".npy files, runs of .npy files; several are one dataset (shards\n"
	    "concatenated along dim 0, any mix of kinds). Printed: its fields\n"
	    "(name, dtype, shape, bytes; a ragged field NAME, from a pair\n"
	    "NAME.values + NAME.offsets, shows its rows and longest sample),\n"
	    "the sample count, and each shard's kind, version and byte order.\n"
	    "A batch file (a safetensors file whose __metadata__ format is\n"
	    "batchfs/1) is validated as the safetensors spec requires and its\n"
	    "header is printed: fields, dtypes, shapes, data offsets,\n"
	    "__metadata__.\n"
	    "\n"
	    "  -v, --verbose  also list every ZIP record (name, data offset,\n"
	    "                 size, crc32) and each tensor's storage view\n"
	    "      --verify   read every ZIP record (torch, npz) through\n"
	    "                 libzip and check its CRC-32 (CRC 0 on a\n"
	    "                 non-empty record means \"not computed\":\n"
	    "                 reported, not a failure)\n"
	    "      --json     print one JSON object: for a dataset\n"
	    "                 {\"samples\": N, \"fields\": [{\"name\", "
	    "\"dtype\",\n"
	    "                 \"shape\"}]} (torch dtype names, full shapes; a\n"
	    "                 ragged field: [N, null, ...], \"ragged\": true,\n"
	    "                 \"values_rows\", \"max_length\");\n"
	    "                 for one batch file its header with torch names\n"
	    "      --fields NAME[=NEWNAME][,...]\n"
	    "                 describe the dataset with only these fields, as\n"
	    "                 `batchfs mount --fields` serves it\n"
	    "  -h, --help     this help\n"
	    "\n"
	    "Exit status: 0 ok, 1 bad or unreadable input (the reason, file\n"
	    "and byte offset on stderr), 2 bad usage.\n");
}

int bfs_cmd_inspect(int argc, char **argv)
{
	static const struct option lopts[] = {
	    {"verbose", no_argument, NULL, 'v'},
	    {"verify", no_argument, NULL, 'V'},
	    {"json", no_argument, NULL, 'j'},
	    {"fields", required_argument, NULL, 'f'},
	    {"help", no_argument, NULL, 'h'},
	    {0},
	};
	struct opts o = {0};
	char **arch = NULL;
	enum kind *kinds = NULL;
	size_t narch = 0, nbatch = 0;
	int c, rc = 0;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+vh", lopts, NULL)) != -1) {
		switch (c) {
		case 'v':
			o.verbose = 1;
			break;
		case 'V':
			o.verify = 1;
			break;
		case 'j':
			o.json = 1;
			break;
		case 'f':
			o.fields = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			return bfs_cli_bad_usage("inspect", usage,
						 "unknown option",
						 argv[optind - 1]);
		}
	}
	if (optind >= argc)
		return bfs_cli_bad_usage("inspect", usage, "no FILE given",
					 NULL);
	arch = calloc((size_t)(argc - optind), sizeof(*arch));
	kinds = calloc((size_t)(argc - optind), sizeof(*kinds));
	if (!arch || !kinds) {
		free(arch);
		free(kinds);
		return 1;
	}
	for (int i = optind; i < argc; i++) {
		int fd;
		uint64_t size;
		enum kind k = classify(argv[i], &fd, &size);
		kinds[i - optind] = k;
		if (k == KIND_ARCHIVE)
			arch[narch++] = argv[i];
		else if (k == KIND_BATCH)
			nbatch++;
		if (fd >= 0)
			close(fd);
		if (k == KIND_BAD)
			rc = 1;
	}
	if (o.json && nbatch + (narch ? 1 : 0) > 1) {
		free(arch);
		free(kinds);
		return bfs_cli_bad_usage(
		    "inspect", usage,
		    "--json describes one dataset or one batch "
		    "file",
		    NULL);
	}
	if (narch && inspect_archives(arch, narch, &o))
		rc = 1;
	for (int i = optind; i < argc; i++) {
		int fd;
		uint64_t size;
		if (kinds[i - optind] != KIND_BATCH)
			continue;
		if (classify(argv[i], &fd, &size) != KIND_BATCH ||
		    inspect_batch(argv[i], fd, size, &o))
			rc = 1;
		if (fd >= 0)
			close(fd);
	}
	free(kinds);
	free(arch);
	return rc;
}
