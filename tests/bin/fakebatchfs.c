/* fakebatchfs: a FUSE filesystem for tests that calls itself batchfs (its
 * mount is of type fuse.batchfs from "batchfs", as a batchfs daemon's is:
 * any FUSE server can) and serves the text files `batchfs status` reads
 * with what the test wants in them. Not shipped.
 *
 *   fakebatchfs [--hang] DATASET_JSON STATS MOUNTPOINT
 *
 * serves MOUNTPOINT/dataset.json and MOUNTPOINT/stats, the bytes of the
 * files DATASET_JSON and STATS (read at start). With --hang, an OPEN of
 * either is read and not answered while it serves: a daemon deadlocked
 * with the request in hand, whose caller waits in D state (SIGKILL does
 * not end it) until the connection is aborted or this process ends. Prints
 * "ready" on stdout once mounted and serves in the foreground until unmounted
 * or sent SIGTERM/SIGINT. */
#include <errno.h>
#include <fuse_lowlevel.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_FILE (1u << 20)

static struct {
	const char *name;
	char *data; /* read-only once loaded */
	size_t len;
} files[] = {
    {"dataset.json", NULL, 0},
    {"stats", NULL, 0},
};
#define NFILES (sizeof(files) / sizeof(files[0]))

#define MAX_HELD 64

static bool hang; /* set before the loop */
/* The OPENs held unanswered (--hang), answered (EIO) once the loop ends
 * so that libfuse frees them: only the loop's thread touches them. */
static fuse_req_t held[MAX_HELD];
static size_t nheld;

/* files[ino - 2] */
static int stat_of(fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	if (ino == FUSE_ROOT_ID) {
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
		return 0;
	}
	if (ino < 2 || ino - 2 >= NFILES)
		return ENOENT;
	st->st_mode = S_IFREG | 0444;
	st->st_nlink = 1;
	st->st_size = (off_t)files[ino - 2].len;
	return 0;
}

static void fk_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;

	memset(&e, 0, sizeof(e));
	for (size_t i = 0; parent == FUSE_ROOT_ID && i < NFILES; i++) {
		if (strcmp(files[i].name, name))
			continue;
		e.ino = i + 2;
		stat_of(e.ino, &e.attr);
		e.entry_timeout = 3600;
		e.attr_timeout = 3600;
		fuse_reply_entry(req, &e);
		return;
	}
	fuse_reply_err(req, ENOENT);
}

static void fk_getattr(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	struct stat st;
	int err = stat_of(ino, &st);

	if (err)
		fuse_reply_err(req, err);
	else
		fuse_reply_attr(req, &st, 3600);
}

static void fk_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (hang && nheld < MAX_HELD) {
		held[nheld++] = req; /* not answered while we serve */
		return;
	}
	fi->direct_io = 1;
	fuse_reply_open(req, fi);
}

static void fk_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	size_t len = files[ino - 2].len;

	if ((size_t)off >= len)
		fuse_reply_buf(req, NULL, 0);
	else
		fuse_reply_buf(req, files[ino - 2].data + off,
			       len - (size_t)off < size ? len - (size_t)off
							: size);
}

static const struct fuse_lowlevel_ops ops = {
    .lookup = fk_lookup,
    .getattr = fk_getattr,
    .open = fk_open,
    .read = fk_read,
};

/* The whole of file 'path' into files[i]. 0, or -1 after saying why. */
static int load(size_t i, const char *path)
{
	FILE *f = fopen(path, "rb");

	files[i].data = malloc(MAX_FILE);
	if (!f || !files[i].data) {
		perror(path);
		if (f)
			fclose(f);
		return -1;
	}
	files[i].len = fread(files[i].data, 1, MAX_FILE, f);
	fclose(f);
	return 0;
}

int main(int argc, char **argv)
{
	char *fargv[] = {argv[0], "-o",
			 "fsname=batchfs,subtype=batchfs,default_permissions",
			 NULL};
	struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
	struct fuse_session *se;
	int rc;

	hang = argc == 5 && !strcmp(argv[1], "--hang");
	argv += hang;
	argc -= hang;
	if (argc != 4) {
		fprintf(stderr, "usage: fakebatchfs [--hang] DATASET_JSON "
				"STATS MOUNTPOINT\n");
		return 2;
	}
	if (load(0, argv[1]) || load(1, argv[2]))
		return 1;
	se = fuse_session_new(&args, &ops, sizeof(ops), NULL);
	fuse_opt_free_args(&args);
	if (!se || fuse_set_signal_handlers(se) ||
	    fuse_session_mount(se, argv[3]))
		return 1;
	printf("ready\n");
	fflush(stdout);
	rc = fuse_session_loop(se) < 0;
	while (nheld)
		fuse_reply_err(held[--nheld], EIO);
	fuse_session_unmount(se);
	fuse_remove_signal_handlers(se);
	fuse_session_destroy(se);
	return rc;
}
