/* tools/cmd_mount: `batchfs mount` (`batchfs umount` is cmd_umount.c).
 *
 * The command line: options and their checks, usage, errors. Before any
 * mount it builds the model (dataset, layout, order: a bad archive or
 * option exits 1 or 2 in the foreground), decides who may read the mount
 * (tools/mount_perm.c), checks that /dev/fuse can be opened and only then
 * opens the daemon's log (a mount refused before creates none); then
 * mount/session.c runs the session (mount, fork, INIT, serving mode, the
 * loop, unmount), calling back start() here to build what is served,
 * once the mode is known, in the daemon, and ready() to print the
 * warnings and the summary line while the caller's terminal is there.
 *
 * `ls epoch` lists every epoch below --epochs (default 1000): each one can
 * be opened; epoch >= --epochs is ENOENT. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fs/log.h"
#include "fs/order_input.h"
#include "mount/mount.h"
#include "mount/postmortem.h"
#include "tools/cli.h"
#include "tools/cmd.h"
#include "tools/mount_log.h"
#include "tools/mountinfo.h"
#include "tools/pack.h"
#include "tools/mount_perm.h"

#define MAX_SOURCES 4096
#define MAX_RANKS   4096 /* ranks one mount serves (--ranks) */

/* What is mounted: built before the mount, served by the session. */
struct model {
	struct bfs_dataset *ds;
	struct bfs_layout layout;
	struct bfs_order *order;
};

struct mount_opts {
	const char *sources[MAX_SOURCES];
	size_t nsources;
	char source_label[PATH_MAX + 64]; /* sources[0] (+ N more shards) */
	const char *mountpoint;
	uint64_t batch_size, epochs, seed, num_samples, cache_mb, pc_mb;
	unsigned workers, prefetch, timeout_s, fuse_threads;
	uint32_t world_size, rank;
	const char *ranks_arg; /* --ranks, expanded into ranks[] */
	uint32_t ranks[MAX_RANKS];
	size_t nranks;
	bool have_rank;
	bool shuffle, have_seed, drop_last, replacement, foreground, verbose;
	bool have_prefetch, have_world, have_pc;
	bool have_compat;	    /* --torch-compat given */
	size_t hidden;		    /* entries the mount hides in MOUNTPOINT */
	char summary[PATH_MAX * 2]; /* the line printed once mounted */
	const char *seed_source;    /* see struct bfs_tree_info */
	enum bfs_serve_mode serve;
	enum bfs_reader_kind reader; /* --reader */
	enum bfs_torch_compat compat;
	const char *subset, *weights, *gen_state, *rng_state, *log_file;
	const char *fields;	      /* --fields */
	struct bfs_mount_log log;     /* where the daemon logs */
	char fuse_o[1024];	      /* user's -o options, comma-joined */
	char line[2048];	      /* the options as one line, for README */
	struct bfs_mount_owner owner; /* --owner */
	struct bfs_perm perm;	      /* who may read the nodes */
	struct bfs_ragged_opt ragged[BFS_LAYOUT_MAX_RAGGED]; /* --pad/--pack */
	size_t nragged;
	char ragged_line[512]; /* them, for README (cut when long) */
};

static const char usage_text[] =
    "usage: batchfs mount [OPTIONS] SOURCE... MOUNTPOINT\n"
    "Mount a dataset as a directory of batches: MOUNTPOINT/epoch/N/batch_K\n"
    "(safetensors). MOUNTPOINT: an existing directory that is not a mount\n"
    "point. Returns once the filesystem is ready, printing one line\n"
    "(batches per epoch, serve mode, seed, log file); the daemon stays in\n"
    "the background until `batchfs umount MOUNTPOINT`.\n\n"
    "A SOURCE is a torch.save archive, an .npz from numpy.savez (not\n"
    "savez_compressed), a .safetensors file, a directory of NAME.npy files,\n"
    "or .npy files (consecutive ones are the fields of one shard; a name\n"
    "seen again starts the next). Several sources with the same fields are\n"
    "one dataset (shards, any mix of kinds). Fortran-order and big-endian\n"
    "arrays are served in C order, little-endian. In a torch.save dict,\n"
    "values that are not tensors (metadata) are skipped with a warning,\n"
    "and a nested dict of tensors gives dotted names (train.x).\n"
    "  --fields NAME[,NAME...]\n"
    "                       serve only these fields; NAME may name a dict\n"
    "                       of tensors (--fields train serves train.x and\n"
    "                       train.y as x and y)\n\n"
    "Ragged fields: a pair NAME.values [total, ...] + NAME.offsets (int64,\n"
    "n + 1, from 0, never decreasing, ending at total) is field NAME, whose\n"
    "sample i is rows offsets[i] .. offsets[i+1] of NAME.values.\n"
    "  --pad NAME[=VALUE][:MULTIPLE]\n"
    "                       (the default, VALUE 0) NAME [B, L, ...] padded\n"
    "                       with VALUE to the batch's longest sample, L\n"
    "                       rounded up to MULTIPLE, + NAME.lengths int64\n"
    "                       [B]: pad_sequence(batch_first=True,\n"
    "                       padding_value=VALUE)\n"
    "  --pack NAME          NAME [sum of lengths, ...] back to back +\n"
    "                       NAME.offsets int64 [B + 1] (varlen attention)\n\n"
    "  --batch-size B       samples per batch (default 1)\n"
    "  --shuffle            random order (RandomSampler)\n"
    "  --seed S             generator seed (default: random, reported in\n"
    "                       dataset.json); an order that is not random\n"
    "                       ignores it, with a warning\n"
    "  --drop-last          drop the last incomplete batch\n"
    "  --epochs E           epochs 0..E-1 exist and are listed (default "
    "1000)\n"
    "  --num-samples M      samples drawn per epoch: RandomSampler's\n"
    "                       (with --shuffle) or WeightedRandomSampler's\n"
    "  --replacement        draw with replacement (RandomSampler)\n"
    "  --subset FILE        SubsetRandomSampler over these indices\n"
    "  --weights FILE       WeightedRandomSampler with these weights\n"
    "                       (num_samples defaults to len(weights))\n"
    "  --world-size W       DistributedSampler over W ranks ...\n"
    "  --rank R             ... as rank R (default 0)\n"
    "  --ranks LIST         ... serving several ranks from one mount as\n"
    "                       rank/R/epoch/N/batch_K: all, or ranks and\n"
    "                       ranges such as 0-7 or 0,2,8-15\n"
    "  --torch-compat V     the randperm of torch 1.13 to 2.6: 1.13\n"
    "                       (default), or of torch 2.7 and later: 2.7\n"
    "  --generator-state F  start from torch.Generator.get_state() bytes\n"
    "  --rng-state F        with --shuffle: torch.get_rng_state() bytes,\n"
    "                       for DataLoader(shuffle=True) without\n"
    "                       generator= (torch's global generator)\n"
    "  --workers W          gather threads (default: online cores)\n"
    "  --prefetch P         batches prepared ahead (default 2 x workers)\n"
    "  --cache-mb M         memory budget for batches (default 512); a\n"
    "                       batch over 16 x this is refused at mount\n"
    "  --timeout SEC        a read waits at most SEC for its batch, then\n"
    "                       EIO (default 30)\n"
    "  --serve MODE         how batch files reach readers (default auto):\n"
    "                       passthrough (the kernel reads each batch from\n"
    "                       its own memfd: page-cache speed, read and\n"
    "                       mmap; needs Linux >= 6.9 and CAP_SYS_ADMIN),\n"
    "                       push (each batch stored whole into the page\n"
    "                       cache when opened), direct (direct I/O: no\n"
    "                       page cache, mmap MAP_SHARED fails), cache\n"
    "                       (the kernel's own reads), auto (passthrough\n"
    "                       where it works, else push; the log, stats and\n"
    "                       dataset.json say which and why)\n"
    "  --direct-io          same as --serve direct\n"
    "  --reader KIND        how rows of the batches ahead are read from the\n"
    "                       sources, many at once: io_uring, threads (pread\n"
    "                       in reader threads), none (madvise only), auto\n"
    "                       (default: io_uring where it can be set up, else\n"
    "                       threads; the log, stats and dataset.json say\n"
    "                       which)\n"
    "  --page-cache-mb M    push: pushed batches kept in the page cache\n"
    "                       (default: --cache-mb); older closed ones are\n"
    "                       dropped from it\n"
    "  --fuse-threads N     FUSE request threads (default 4)\n"
    "  --log-file FILE      the daemon's log (default: stderr with -f,\n"
    "                       else MOUNTPOINT's name, e.g. mnt-cifar.log,\n"
    "                       in $XDG_RUNTIME_DIR/batchfs, /run/batchfs\n"
    "                       (root) or /tmp/batchfs-UID: dataset.json\n"
    "                       says which)\n"
    "  --owner USER[:GROUP] make USER (and GROUP, default USER's group)\n"
    "                       the owner of every file, for a mount made by\n"
    "                       root for another user; refused unless USER\n"
    "                       may read every source; implies allow_other\n"
    "  -o OPT[,OPT...]      FUSE mount options (allow_other lets other\n"
    "                       users in, as far as the files' permissions\n"
    "                       allow; it drops auto_unmount on libfuse 3.14)\n"
    "Permissions: every file's owner, group and read bits are no wider\n"
    "than the sources' (the most restrictive of them, their directories\n"
    "included); the kernel enforces them. Nothing is writable.\n"
    "  -f, --foreground     stay in the foreground, log to stderr\n"
    "  -v, --verbose        debug logging: also each batch's open,\n"
    "                       materialize, serve and evict, with timings\n"
    "  -h, --help           this text\n";

static void usage(FILE *f)
{
	fputs(usage_text, f);
}

/* Strict unsigned decimal in [lo, hi]. */
static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (!s || !*s || *s == '-' || *s == '+')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

enum {
	OPT_BATCH = 256,
	OPT_SHUFFLE,
	OPT_SEED,
	OPT_DROP,
	OPT_EPOCHS,
	OPT_WORKERS,
	OPT_PREFETCH,
	OPT_CACHE,
	OPT_TIMEOUT,
	OPT_NSAMPLES,
	OPT_REPL,
	OPT_SUBSET,
	OPT_WEIGHTS,
	OPT_WORLD,
	OPT_RANK,
	OPT_RANKS,
	OPT_COMPAT,
	OPT_GENSTATE,
	OPT_RNGSTATE,
	OPT_DIRECT,
	OPT_SERVE,
	OPT_PCMB,
	OPT_FTHREADS,
	OPT_LOGFILE,
	OPT_PAD,
	OPT_PACK,
	OPT_OWNER,
	OPT_READER,
	OPT_FIELDS,
};

static const struct option long_opts[] = {
    {"batch-size", required_argument, NULL, OPT_BATCH},
    {"shuffle", no_argument, NULL, OPT_SHUFFLE},
    {"seed", required_argument, NULL, OPT_SEED},
    {"drop-last", no_argument, NULL, OPT_DROP},
    {"epochs", required_argument, NULL, OPT_EPOCHS},
    {"workers", required_argument, NULL, OPT_WORKERS},
    {"prefetch", required_argument, NULL, OPT_PREFETCH},
    {"cache-mb", required_argument, NULL, OPT_CACHE},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"num-samples", required_argument, NULL, OPT_NSAMPLES},
    {"replacement", no_argument, NULL, OPT_REPL},
    {"subset", required_argument, NULL, OPT_SUBSET},
    {"weights", required_argument, NULL, OPT_WEIGHTS},
    {"world-size", required_argument, NULL, OPT_WORLD},
    {"rank", required_argument, NULL, OPT_RANK},
    {"ranks", required_argument, NULL, OPT_RANKS},
    {"torch-compat", required_argument, NULL, OPT_COMPAT},
    {"generator-state", required_argument, NULL, OPT_GENSTATE},
    {"rng-state", required_argument, NULL, OPT_RNGSTATE},
    {"direct-io", no_argument, NULL, OPT_DIRECT},
    {"serve", required_argument, NULL, OPT_SERVE},
    {"page-cache-mb", required_argument, NULL, OPT_PCMB},
    {"fuse-threads", required_argument, NULL, OPT_FTHREADS},
    {"log-file", required_argument, NULL, OPT_LOGFILE},
    {"pad", required_argument, NULL, OPT_PAD},
    {"pack", required_argument, NULL, OPT_PACK},
    {"owner", required_argument, NULL, OPT_OWNER},
    {"reader", required_argument, NULL, OPT_READER},
    {"fields", required_argument, NULL, OPT_FIELDS},
    {"foreground", no_argument, NULL, 'f'},
    {"verbose", no_argument, NULL, 'v'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static const char *opt_name(int c)
{
	for (const struct option *o = long_opts; o->name; o++)
		if (o->val == c)
			return o->name;
	return "?";
}

/* One numeric option. Returns 0 or 2 (usage printed). */
static int numeric(int c, const char *arg, struct mount_opts *m)
{
	static const struct {
		int c;
		uint64_t lo, hi;
	} lim[] = {
	    {OPT_BATCH, 1, UINT32_MAX},	 {OPT_SEED, 0, UINT64_MAX},
	    {OPT_EPOCHS, 1, 1u << 24},	 {OPT_WORKERS, 1, 256},
	    {OPT_PREFETCH, 0, 4096},	 {OPT_CACHE, 1, 1u << 30},
	    {OPT_TIMEOUT, 1, 86400 * 7}, {OPT_NSAMPLES, 1, UINT64_MAX},
	    {OPT_WORLD, 1, 1u << 20},	 {OPT_RANK, 0, (1u << 20) - 1},
	    {OPT_FTHREADS, 1, 64},	 {OPT_PCMB, 1, 1u << 30},
	};
	uint64_t v = 0;

	for (size_t i = 0; i < sizeof(lim) / sizeof(lim[0]); i++) {
		if (lim[i].c != c)
			continue;
		if (parse_u64(arg, lim[i].lo, lim[i].hi, &v) < 0) {
			char msg[160];

			snprintf(msg, sizeof(msg),
				 "--%s: not an integer in [%" PRIu64
				 ", %" PRIu64 "]",
				 opt_name(c), lim[i].lo, lim[i].hi);
			return bfs_cli_bad_usage("mount", usage, msg, arg);
		}
	}
	switch (c) {
	case OPT_BATCH:
		m->batch_size = v;
		break;
	case OPT_SEED:
		m->seed = v;
		m->have_seed = true;
		break;
	case OPT_EPOCHS:
		m->epochs = v;
		break;
	case OPT_WORKERS:
		m->workers = (unsigned)v;
		break;
	case OPT_PREFETCH:
		m->prefetch = (unsigned)v;
		m->have_prefetch = true;
		break;
	case OPT_CACHE:
		m->cache_mb = v;
		break;
	case OPT_TIMEOUT:
		m->timeout_s = (unsigned)v;
		break;
	case OPT_NSAMPLES:
		m->num_samples = v;
		break;
	case OPT_WORLD:
		m->world_size = (uint32_t)v;
		m->have_world = true;
		break;
	case OPT_RANK:
		m->rank = (uint32_t)v;
		m->have_rank = true;
		break;
	case OPT_FTHREADS:
		m->fuse_threads = (unsigned)v;
		break;
	case OPT_PCMB:
		m->pc_mb = v;
		m->have_pc = true;
		break;
	default:
		break;
	}
	return 0;
}

/* --pad NAME[=VALUE][:MULTIPLE] / --pack NAME (fs/ragged parses them;
 * fs/layout checks them against the dataset). 0 or 2 (usage printed). */
static int ragged_opt(struct mount_opts *m, int c, const char *arg)
{
	char why[160], msg[200];
	size_t n;

	if (m->nragged == BFS_LAYOUT_MAX_RAGGED)
		return bfs_cli_bad_usage("mount", usage,
					 "too many --pad/--pack options", arg);
	if (bfs_ragged_opt_parse(
		arg, c == OPT_PAD ? BFS_RAGGED_PAD : BFS_RAGGED_PACK,
		&m->ragged[m->nragged], why, sizeof(why))) {
		snprintf(msg, sizeof(msg), "--%s: %s", opt_name(c), why);
		return bfs_cli_bad_usage("mount", usage, msg, arg);
	}
	m->nragged++;
	n = strlen(m->ragged_line);
	snprintf(m->ragged_line + n, sizeof(m->ragged_line) - n, " --%s %s",
		 opt_name(c), arg);
	return 0;
}

static void append_o(struct mount_opts *m, const char *o)
{
	size_t n = strlen(m->fuse_o);

	snprintf(m->fuse_o + n, sizeof(m->fuse_o) - n, "%s%s", n ? "," : "", o);
}

/* --torch-compat V: 1.13 or 2.7; a torch version is refused with the
 * value that covers it. 0 or 2 (usage printed). */
static int compat_opt(struct mount_opts *m, const char *arg)
{
	static const char both[] = "1.13 is the order of torch 1.13 to 2.6, "
				   "2.7 that of torch 2.7 and later";
	unsigned major = 0, minor = 0;
	char msg[300];

	m->have_compat = true;
	if (!strcmp(arg, "1.13") || !strcmp(arg, "2.7")) {
		m->compat = arg[0] == '1' ? BFS_TORCH_1_13 : BFS_TORCH_2_7;
		return 0;
	}
	if (sscanf(arg, "%u.%u", &major, &minor) == 2 &&
	    (major > 1 || (major == 1 && minor >= 13)))
		snprintf(
		    msg, sizeof(msg),
		    "--torch-compat %.40s: use --torch-compat %s (%s)", arg,
		    major > 2 || (major == 2 && minor >= 7) ? "2.7" : "1.13",
		    both);
	else
		snprintf(msg, sizeof(msg),
			 "--torch-compat %.40s: not 1.13 or 2.7 (%s; older "
			 "torch is not modelled)",
			 arg, both);
	return bfs_cli_bad_usage("mount", usage, msg, NULL);
}

/* One option that takes no number (numeric() has those). Returns 0, 2
 * (bad usage, printed) or -1 (--help printed). */
static int one_opt(int c, char *arg, struct mount_opts *m)
{
	switch (c) {
	case 'h':
		usage(stdout);
		return -1;
	case 'f':
		m->foreground = true;
		return 0;
	case 'v':
		m->verbose = true;
		return 0;
	case 'o':
		append_o(m, arg);
		return 0;
	case OPT_SHUFFLE:
		m->shuffle = true;
		return 0;
	case OPT_DROP:
		m->drop_last = true;
		return 0;
	case OPT_REPL:
		m->replacement = true;
		return 0;
	case OPT_DIRECT:
		m->serve = BFS_SERVE_DIRECT;
		return 0;
	case OPT_SERVE:
		if (bfs_serve_mode_parse(arg, &m->serve) == 0)
			return 0;
		return bfs_cli_bad_usage("mount", usage,
					 "--serve: not auto, passthrough, "
					 "push, cache or direct",
					 arg);
	case OPT_READER:
		if (bfs_reader_kind_parse(arg, &m->reader) == 0)
			return 0;
		return bfs_cli_bad_usage("mount", usage,
					 "--reader: not auto, io_uring, "
					 "threads or none",
					 arg);
	case OPT_SUBSET:
		m->subset = arg;
		return 0;
	case OPT_RANKS:
		m->ranks_arg = arg;
		return 0;
	case OPT_FIELDS:
		m->fields = arg;
		return 0;
	case OPT_WEIGHTS:
		m->weights = arg;
		return 0;
	case OPT_GENSTATE:
		m->gen_state = arg;
		return 0;
	case OPT_RNGSTATE:
		m->rng_state = arg;
		return 0;
	case OPT_LOGFILE:
		m->log_file = arg;
		return 0;
	case OPT_PAD:
	case OPT_PACK:
		return ragged_opt(m, c, arg);
	case OPT_OWNER: {
		char why[160];

		if (bfs_mount_owner_parse(arg, &m->owner, why, sizeof(why)))
			return bfs_cli_bad_usage("mount", usage, why, NULL);
		return 0;
	}
	case OPT_COMPAT:
		return compat_opt(m, arg);
	default:
		return numeric(c, arg, m);
	}
}

static struct bfs_order_request request_of(const struct mount_opts *m);

/* The operands and what the options imply together. 0 or 2. */
static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

/* Ranks A-B (or A) at the start of s into m->ranks; the rest of s in
 * *end. 0, or -1 with 'msg' saying what is wrong. */
static int rank_range(struct mount_opts *m, const char *s, const char **end,
		      char *msg, size_t len)
{
	char *e;
	unsigned long a, b;

	errno = 0;
	a = s[0] >= '0' && s[0] <= '9' ? strtoul(s, &e, 10) : ULONG_MAX;
	b = a;
	if (a != ULONG_MAX && *e == '-')
		b = e[1] >= '0' && e[1] <= '9' ? strtoul(e + 1, &e, 10)
					       : ULONG_MAX;
	if (a == ULONG_MAX || b == ULONG_MAX || errno || (*e && *e != ',')) {
		snprintf(msg, len,
			 "--ranks: not a list of ranks and ranges "
			 "(e.g. all, 0-7, 0,2,8-15)");
		return -1;
	}
	if (a > b) {
		snprintf(msg, len, "--ranks: %lu-%lu runs backwards", a, b);
		return -1;
	}
	if (b >= m->world_size) {
		snprintf(msg, len,
			 "--ranks: %lu-%lu is not within 0-%u (--world-size "
			 "%u)",
			 a, b, m->world_size - 1, m->world_size);
		return -1;
	}
	for (unsigned long r = a; r <= b; r++) {
		if (m->nranks == MAX_RANKS) {
			snprintf(msg, len,
				 "--ranks: more than %d ranks for one mount",
				 MAX_RANKS);
			return -1;
		}
		m->ranks[m->nranks++] = (uint32_t)r;
	}
	*end = *e ? e + 1 : e;
	return 0;
}

/* --ranks LIST into m->ranks, sorted, each once. Returns 0 or 2 (bad
 * usage, printed). */
static int expand_ranks(struct mount_opts *m)
{
	const char *s = m->ranks_arg;
	char msg[160], all[32];
	size_t n = 0;

	if (!m->have_world)
		return bfs_cli_bad_usage("mount", usage,
					 "--ranks: needs --world-size", NULL);
	if (m->have_rank)
		return bfs_cli_bad_usage(
		    "mount", usage,
		    "--rank and --ranks: one rank, or several; not both", NULL);
	if (!strcmp(s, "all")) {
		snprintf(all, sizeof(all), "0-%u", m->world_size - 1);
		s = all;
	}
	do {
		if (rank_range(m, s, &s, msg, sizeof(msg)) < 0)
			return bfs_cli_bad_usage("mount", usage, msg,
						 m->ranks_arg);
	} while (*s);
	qsort(m->ranks, m->nranks, sizeof(m->ranks[0]), cmp_u32);
	for (size_t i = 0; i < m->nranks; i++)
		if (!n || m->ranks[n - 1] != m->ranks[i])
			m->ranks[n++] = m->ranks[i];
	m->nranks = n;
	if (m->epochs > BFS_TREE_MAX_EPOCHS / n) {
		snprintf(msg, sizeof(msg),
			 "%zu ranks x --epochs %" PRIu64
			 " exceed %llu epochs in all: use --epochs %llu or "
			 "fewer",
			 n, m->epochs, BFS_TREE_MAX_EPOCHS,
			 BFS_TREE_MAX_EPOCHS / n);
		return bfs_cli_bad_usage("mount", usage, msg, NULL);
	}
	return 0;
}

static int operands(int argc, char **argv, struct mount_opts *m)
{
	struct bfs_order_request req;
	struct bfs_error err = {{0}};
	int rc;

	if (argc - optind < 2)
		return bfs_cli_bad_usage("mount", usage,
					 "need at least one SOURCE and a "
					 "MOUNTPOINT",
					 NULL);
	if ((size_t)(argc - optind - 1) > MAX_SOURCES)
		return bfs_cli_bad_usage("mount", usage, "too many archives",
					 NULL);
	for (int i = optind; i < argc - 1; i++)
		m->sources[m->nsources++] = argv[i];
	snprintf(m->source_label, sizeof(m->source_label), "%s", m->sources[0]);
	if (m->nsources > 1)
		snprintf(m->source_label + strlen(m->source_label),
			 sizeof(m->source_label) - strlen(m->source_label),
			 " (and %zu more shards)", m->nsources - 1);
	m->mountpoint = argv[argc - 1];
	req = request_of(m);
	if (bfs_order_request_check(&req, &err) < 0)
		return bfs_cli_bad_usage("mount", usage, err.msg, NULL);
	if (!m->have_world && m->rank)
		return bfs_cli_bad_usage("mount", usage,
					 "--rank: needs --world-size", NULL);
	if (m->have_world && m->rank >= m->world_size) {
		char msg[160];

		snprintf(msg, sizeof(msg),
			 "--rank %u: not below --world-size %u (ranks are 0 "
			 ".. %u)",
			 m->rank, m->world_size, m->world_size - 1);
		return bfs_cli_bad_usage("mount", usage, msg, NULL);
	}
	if (m->ranks_arg && (rc = expand_ranks(m)) != 0)
		return rc;
	if (!m->have_prefetch)
		m->prefetch = 2 * m->workers;
	if (!m->have_pc)
		m->pc_mb = m->cache_mb;
	if (m->owner.set && !strstr(m->fuse_o, "allow_other"))
		append_o(m, "allow_other"); /* else only the mounter gets in */
	return 0;
}

/* Returns 0, 2 (bad usage, printed) or -1 (--help printed). */
static int parse_opts(int argc, char **argv, struct mount_opts *m)
{
	int c, rc = 0;

	m->batch_size = 1;
	m->epochs = 1000;
	m->cache_mb = 512;
	m->timeout_s = 30;
	m->fuse_threads = 4;
	m->compat = BFS_TORCH_1_13;
	m->workers = (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
	if (m->workers < 1)
		m->workers = 1;
	opterr = 0;
	optind = 1;
	while (rc == 0 &&
	       (c = getopt_long(argc, argv, "o:fvh", long_opts, NULL)) != -1)
		rc =
		    c == '?'
			? bfs_cli_bad_usage("mount", usage,
					    "unknown option or missing value",
					    optopt && optopt < OPT_BATCH
						? (char[]){'-', (char)optopt, 0}
						: argv[optind - 1])
			: one_opt(c, optarg, m);
	return rc ? rc : operands(argc, argv, m);
}

/* The options in DataLoader's terms, for fs/order's rules. */
static struct bfs_order_request request_of(const struct mount_opts *m)
{
	return (struct bfs_order_request){
	    .shuffle = m->shuffle,
	    .replacement = m->replacement,
	    .num_samples = m->num_samples,
	    .subset = m->subset != NULL,
	    .weights = m->weights != NULL,
	    .distributed = m->have_world,
	    .have_seed = m->have_seed,
	    .generator_state = m->gen_state != NULL,
	    .global_generator = m->rng_state != NULL,
	    .have_compat = m->have_compat,
	};
}

static enum bfs_sampler pick_sampler(const struct mount_opts *m)
{
	struct bfs_order_request r = request_of(m);

	return bfs_order_sampler_for(&r);
}

/* Inputs read from files for the order engine; freed by free_inputs. */
struct order_inputs {
	int64_t *subset;
	double *weights;
	uint8_t *state;
	size_t subset_len, weights_len, state_len;
};

static void free_inputs(struct order_inputs *in)
{
	free(in->subset);
	free(in->weights);
	free(in->state);
}

/* Build the order engine. Returns 0, 1 (a file could not be read) or 2
 * (an option value PyTorch would refuse); the message is printed. */
static int make_order(struct mount_opts *m, struct model *mt)
{
	const char *state_opt =
	    m->gen_state ? "--generator-state" : "--rng-state";
	char names[3][PATH_MAX + 24]; /* "--subset FILE" ... for refusals */
	struct bfs_order_opts o;
	struct order_inputs in = {0};
	struct bfs_error err = {{0}};
	const char *failed = NULL; /* the option whose file was refused */
	int rc = 0;

	memset(&o, 0, sizeof(o));
	if (m->subset) {
		rc = bfs_order_load_indices(m->subset, &in.subset,
					    &in.subset_len, &err);
		failed = "--subset";
	}
	if (rc == 0 && m->weights) {
		rc = bfs_order_load_weights(m->weights, &in.weights,
					    &in.weights_len, &err);
		failed = "--weights";
	}
	if (rc == 0 && (m->gen_state || m->rng_state)) {
		rc = bfs_order_load_state(m->gen_state ? m->gen_state
						       : m->rng_state,
					  &in.state, &in.state_len, &err);
		failed = state_opt;
	}
	if (rc < 0) { /* err.msg starts with the file's name */
		fprintf(stderr, "batchfs mount: %s %s\n", failed,
			err.msg[0] ? err.msg : strerror(-rc));
		free_inputs(&in);
		return 1;
	}
	snprintf(names[0], sizeof(names[0]), "--subset %s",
		 m->subset ? m->subset : "");
	snprintf(names[1], sizeof(names[1]), "--weights %s",
		 m->weights ? m->weights : "");
	snprintf(names[2], sizeof(names[2]), "%s %s", state_opt,
		 m->gen_state	? m->gen_state
		 : m->rng_state ? m->rng_state
				: "");
	o.subset_name = names[0];
	o.weights_name = names[1];
	o.state_name = names[2];
	o.sampler = pick_sampler(m);
	o.n = bfs_dataset_samples(mt->ds);
	o.batch_size = m->batch_size;
	o.drop_last = m->drop_last;
	o.seed = m->seed;
	o.replacement = m->replacement;
	o.num_samples = m->num_samples;
	if (o.sampler == BFS_SAMPLER_WEIGHTED && !o.num_samples)
		o.num_samples = in.weights_len; /* one epoch = len(weights) */
	o.subset = in.subset;
	o.subset_len = in.subset_len;
	o.weights = in.weights;
	o.weights_len = in.weights_len;
	o.world_size = m->have_world ? m->world_size : 1;
	o.rank = m->rank;
	o.ranks = m->ranks;
	o.nranks = m->nranks;
	o.epochs = m->epochs; /* --epochs enters the core here, once */
	o.shuffle = m->shuffle;
	o.compat = m->compat;
	o.generator_state = in.state;
	o.generator_state_len = in.state_len;
	o.global_generator = m->rng_state != NULL;
	o.source = m->source_label;
	rc = bfs_order_create(&mt->order, &o, &err);
	free_inputs(&in);
	if (rc == -EFBIG) { /* the dataset is too big to order */
		fprintf(stderr, "batchfs mount: %s\n", err.msg);
		return 1;
	}
	if (rc < 0)
		return bfs_cli_bad_usage("mount", usage, err.msg, NULL);
	return 0;
}

/* Everything before FUSE: dataset, layout, order. 0, 1 or 2. */
static int open_model(struct mount_opts *m, struct model *mt)
{
	struct bfs_error err = {{0}};
	char msg[4 * BFS_ERROR_MAX]; /* err.msg escaped: it names files */
	int rc;

	rc = bfs_dataset_open_select(&mt->ds, m->sources, m->nsources,
				     m->fields, &err);
	if (rc == 0)
		rc = bfs_layout_init_ragged(&mt->layout, mt->ds, m->batch_size,
					    m->ragged, m->nragged, &err);
	if (rc == 0)
		rc =
		    bfs_pool_check_budget(&mt->layout, m->cache_mb << 20, &err);
	if (rc < 0) {
		fprintf(stderr, "batchfs mount: %s\n",
			bfs_log_escape(msg, sizeof(msg),
				       err.msg[0] ? err.msg : strerror(-rc)));
		/* an .npz that is a list of samples: say how to pack it */
		for (size_t i = 0; i < m->nsources; i++)
			bfs_pack_list_hint("mount", m->sources[i]);
		return 1;
	}
	rc = make_order(m, mt);
	if (rc)
		return rc;
	bfs_layout_bind_order(&mt->layout, mt->order); /* rank's epochs */
	if (bfs_order_check_len(mt->order, m->source_label, &err) < 0) {
		fprintf(stderr, "batchfs mount: %s\n",
			bfs_log_escape(msg, sizeof(msg), err.msg));
		return 1;
	}
	if (bfs_order_len(mt->order) >= BFS_TREE_MAX_BATCHES) {
		uint64_t n = bfs_dataset_samples(mt->ds);

		fprintf(stderr,
			"batchfs mount: %s: %" PRIu64 " samples make %" PRIu64
			" batches per epoch at --batch-size %" PRIu64
			"; batchfs serves fewer than 2^36 (use --batch-size "
			"%" PRIu64 " or more)\n",
			m->source_label, n, bfs_order_len(mt->order),
			m->batch_size,
			n / (uint64_t)(BFS_TREE_MAX_BATCHES - 1) + 1);
		return 1;
	}
	return 0;
}

static void close_model(struct model *mt)
{
	bfs_order_destroy(mt->order);
	bfs_layout_fini(&mt->layout);
	bfs_dataset_close(mt->ds);
}

/* The serving options the environment sets for tests and measurements:
 * BATCHFS_DEBUG_GATHER_DELAY_MS (workers sleep before each gather),
 * BATCHFS_DEBUG_NO_EARLY_PUSH, BATCHFS_DEBUG_NO_ZERO_COPY,
 * BATCHFS_DEBUG_ZC_NO_CHECK, BATCHFS_DEBUG_ZC_MAX_IOV, BATCHFS_DEBUG_ZC_STOP
 * (the daemon stops itself once, between the check and the first zero-copy
 * reply of rows), BATCHFS_MEMFD_WRITE
 * (gather|slices: how passthrough batches are written), BATCHFS_DEBUG_COLD
 * (the memory policy acts as if the data did not fit: rows of big fields
 * are read with O_DIRECT). */
static void debug_opts(struct bfs_pool_opts *po, struct bfs_serve_opts *so)
{
	const char *delay = getenv("BATCHFS_DEBUG_GATHER_DELAY_MS");
	const char *iov = getenv("BATCHFS_DEBUG_ZC_MAX_IOV");
	const char *wr = getenv("BATCHFS_MEMFD_WRITE");

	po->debug_delay_ms = delay ? (unsigned)strtoul(delay, NULL, 10) : 0;
	po->assume_cold = getenv("BATCHFS_DEBUG_COLD") != NULL;
	po->memfd_write = !wr			  ? BFS_LAYOUT_FD_AUTO
			  : !strcmp(wr, "gather") ? BFS_LAYOUT_FD_GATHER
			  : !strcmp(wr, "slices") ? BFS_LAYOUT_FD_SLICES
						  : BFS_LAYOUT_FD_AUTO;
	so->early_push = !getenv("BATCHFS_DEBUG_NO_EARLY_PUSH");
	so->zero_copy = !getenv("BATCHFS_DEBUG_NO_ZERO_COPY");
	so->zc_no_check = getenv("BATCHFS_DEBUG_ZC_NO_CHECK") != NULL;
	so->zc_debug_stop = getenv("BATCHFS_DEBUG_ZC_STOP") != NULL;
	so->zc_max_iov = iov ? (unsigned)strtoul(iov, NULL, 10) : 0;
}

/* What the session calls back (mount/mount.h). */
struct session_arg {
	struct mount_opts *m;
	struct model *model;
};

static void describe_opts(struct mount_opts *m, enum bfs_serve_mode mode);

/* The line `batchfs mount` prints once mounted, into m->summary: where,
 * batches per epoch, the serve mode, the seed the order was drawn with,
 * the log. */
static void summarize(struct mount_opts *m, const struct model *mt,
		      enum bfs_serve_mode mode)
{
	const char *src = m->seed_source;
	char seed[160], ranks[96] = "";

	if (!strcmp(src, "--seed"))
		snprintf(seed, sizeof(seed), "seed %" PRIu64, m->seed);
	else if (!strcmp(src, "getrandom"))
		snprintf(seed, sizeof(seed),
			 "seed %" PRIu64 " (random: --seed %" PRIu64
			 " repeats it)",
			 m->seed, m->seed);
	else if (!strcmp(src, "default"))
		snprintf(seed, sizeof(seed),
			 "seed 0 (DistributedSampler's default)");
	else if (!strcmp(src, "unused"))
		snprintf(seed, sizeof(seed), "no seed (not a random order)");
	else /* --generator-state, --rng-state */
		snprintf(seed, sizeof(seed), "the generator from %s", src);
	if (m->nranks)
		snprintf(ranks, sizeof(ranks), " per rank (ranks %.40s of %u)",
			 m->ranks_arg, m->world_size);
	snprintf(m->summary, sizeof(m->summary),
		 "batchfs: mounted %s: %" PRIu64
		 " batches per epoch%s, serve mode %s, %s, log %s",
		 m->mountpoint, bfs_order_len(mt->order), ranks,
		 bfs_serve_mode_name(mode), seed, m->log.path);
}

/* The daemon's descriptors: its soft limit raised to the hard one, as
 * servers do (passthrough holds a memfd per batch). Returns how many
 * batches may hold one: the limit less a reserve for the sources, the
 * session, the log and the gathers' own reads. */
static uint64_t batch_fds(void)
{
	struct rlimit rl;
	rlim_t was;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return 0;
	was = rl.rlim_cur;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			rl.rlim_cur = was;
		else
			bfs_log(BFS_LOG_INFO, "mount",
				"descriptor limit raised from %llu to %llu",
				(unsigned long long)was,
				(unsigned long long)rl.rlim_cur);
	}
	if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (1u << 30))
		return 1u << 30;
	return rl.rlim_cur - (rl.rlim_cur / 4 < 256 ? rl.rlim_cur / 4 : 256);
}

/* In the daemon, once the mode is known: the serve (pool, workers) and
 * the namespace. 0 or -errno with msg. */
static int start(void *arg, enum bfs_serve_mode mode, const char *why,
		 const struct bfs_serve_kernel *kernel,
		 struct bfs_mount_served *out, char *msg, size_t len)
{
	struct session_arg *sa = arg;
	struct mount_opts *m = sa->m;
	struct model *mt = sa->model;
	const struct bfs_order_request req = request_of(m);
	struct bfs_pool_opts po = {
	    .workers = m->workers,
	    .prefetch = m->prefetch,
	    .budget_bytes = m->cache_mb << 20,
	    .timeout_ms = m->timeout_s * 1000u,
	    .memory_policy = !getenv("BATCHFS_DEBUG_NO_WARM"),
	    .reader = m->reader,
	    .max_fds = batch_fds(),
	};
	struct bfs_serve_opts so = {
	    .mode = mode,
	    .page_cache_bytes = m->pc_mb << 20,
	};
	struct bfs_tree_info ti = {
	    .text =
		{
		    .sources = m->sources,
		    .nsources = m->nsources,
		    .seed = m->seed,
		    .shuffle = bfs_order_is_random(&req),
		    .drop_last = m->drop_last,
		    .batch_size = m->batch_size,
		    .seed_source = m->seed_source,
		    .sampler = bfs_order_sampler_name(pick_sampler(m)),
		    .options = m->line,
		    .mountpoint = m->mountpoint,
		    .log = m->log.path,
		    .serve_mode = bfs_serve_mode_name(mode),
		    .serve_why = why,
		},
	    .perm = m->perm,
	};
	int rc;

	bfs_log_err_reset();
	debug_opts(&po, &so);
	describe_opts(m, mode);
	bfs_log(BFS_LOG_INFO, "mount",
		"mounting %s on %s (pid %ld): %s; files owned by %u:%u, mode "
		"%04o",
		m->source_label, m->mountpoint, (long)getpid(), m->line,
		m->perm.uid, m->perm.gid, m->perm.read);
	rc = bfs_serve_create(&out->serve, mt->ds, mt->order, &mt->layout, &po,
			      &so, kernel);
	if (rc == 0) {
		struct bfs_stats st;

		bfs_serve_stats(out->serve, &st);
		ti.text.reader = st.pool.ra.reader; /* static, or the pool's */
		ti.text.reader_why = st.pool.ra.reader_why;
		bfs_log(BFS_LOG_INFO, "mount", "rows read ahead: %s",
			st.pool.ra.reader_why);
		rc = bfs_tree_create(&out->tree, mt->ds, mt->order, &mt->layout,
				     out->serve, &ti);
	}
	if (rc < 0) /* the reason a callee logged, if one did */
		snprintf(msg, len, "cannot start serving: %s",
			 *bfs_log_err_last() ? bfs_log_err_last()
					     : strerror(-rc));
	else
		summarize(m, mt, mode);
	return rc;
}

/* The options as one line for README (what was asked, plus defaults and
 * the mode chosen). */
static void describe_opts(struct mount_opts *m, enum bfs_serve_mode mode)
{
	char ranks[96] = "";

	if (m->have_world && m->ranks_arg)
		snprintf(ranks, sizeof(ranks), " --world-size %u --ranks %.40s",
			 m->world_size, m->ranks_arg);
	else if (m->have_world)
		snprintf(ranks, sizeof(ranks), " --world-size %u --rank %u",
			 m->world_size, m->rank);
	snprintf(m->line, sizeof(m->line),
		 "--batch-size %" PRIu64 "%s --seed %" PRIu64
		 "%s%s --epochs %" PRIu64
		 " --workers %u --prefetch %u --cache-mb %" PRIu64
		 " --timeout %u --serve %s%s",
		 m->batch_size, m->shuffle ? " --shuffle" : "", m->seed,
		 m->drop_last ? " --drop-last" : "", ranks, m->epochs,
		 m->workers, m->prefetch, m->cache_mb, m->timeout_s,
		 bfs_serve_mode_name(mode), m->ragged_line);
}

/* Detach stdio (the daemon logs to its log file, tools/mount_log.h). */
static void detach_stdio(const struct mount_opts *m)
{
	int nul = open("/dev/null", O_RDWR);

	if (nul >= 0) {
		dup2(nul, STDIN_FILENO);
		dup2(nul, STDOUT_FILENO);
		dup2(nul, STDERR_FILENO);
		if (nul > STDERR_FILENO)
			close(nul);
	}
}

/* A warning for the user (stderr) and the log, once the mount works. */
static void warn(const struct mount_opts *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void warn(const struct mount_opts *m, const char *fmt, ...)
{
	char msg[PATH_MAX + 200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "batchfs mount: warning: %s\n", msg);
	if (m->log.fd >= 0) /* else the log is stderr */
		bfs_log(BFS_LOG_WARN, "mount", "warning: %s", msg);
}

/* Right before the mount is reported ready: the warnings (options that
 * change nothing, files the mount hides) and the summary line, while the
 * caller's terminal is still there; then logs go to their sink. */
static void ready(void *arg)
{
	struct session_arg *sa = arg;
	struct bfs_order_request req = request_of(sa->m);
	const char *unused[8];
	size_t n = bfs_order_request_unused(&req, unused, 8);

	for (size_t i = 0; i < n; i++)
		warn(sa->m, "%s", unused[i]);
	if (sa->m->hidden)
		warn(sa->m,
		     "%s is not empty: its %zu entr%s hidden while it is "
		     "mounted",
		     sa->m->mountpoint, sa->m->hidden,
		     sa->m->hidden == 1 ? "y is" : "ies are");
	printf("%s\n", sa->m->summary);
	fflush(stdout);
	if (!sa->m->foreground)
		detach_stdio(sa->m);
	/* a fatal signal's last words go to the log too */
	bfs_postmortem_install(sa->m->log.fd >= 0 ? sa->m->log.fd
						  : STDERR_FILENO);
}

/* Mount and serve the model (mount/mount.h). */
static int run(struct mount_opts *m, struct model *mt)
{
	struct session_arg sa = {m, mt};
	const struct bfs_mount_params p = {
	    .mountpoint = m->mountpoint,
	    .fuse_opts = m->fuse_o,
	    .fuse_threads = m->fuse_threads,
	    .foreground = m->foreground,
	    .log_failure = m->log.fd >= 0,
	    .serve = m->serve,
	    .start = start,
	    .ready = ready,
	    .arg = &sa,
	};

	return bfs_mount_run(&p);
}

/* Whether the mount can open /dev/fuse: 0, or 1 with what to do
 * printed. */
static int check_device(void)
{
	char msg[800];

	if (bfs_mount_check_device(msg, sizeof(msg)) == 0)
		return 0;
	fprintf(stderr, "batchfs mount: %s\n", msg);
	return 1;
}

/* Entries of directory 'path' besides . and .. (0 if it cannot be read):
 * what a mount on it hides. */
static size_t count_entries(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	size_t n = 0;

	while (d && (e = readdir(d)))
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	if (d)
		closedir(d);
	return n;
}

/* Contract: see tools/cmd.h. Exit 0 once mounted (the daemon keeps
 * serving), 1 on a bad archive or mount failure, 2 on bad usage. */
int bfs_cmd_mount(int argc, char **argv)
{
	struct mount_opts *m = calloc(1, sizeof(*m));
	struct bfs_order_request req;
	struct model mt;
	char real[PATH_MAX];
	int rc;

	memset(&mt, 0, sizeof(mt));
	if (!m)
		return 1;
	m->log.fd = -1;
	rc = parse_opts(argc, argv, m);
	if (rc)
		goto out;
	rc = bfs_mountinfo_check_target(m->mountpoint, real, sizeof(real));
	if (rc)
		goto out;
	m->mountpoint = real;
	/* No --seed: a random sampler gets a fresh seed (reported in
	 * dataset.json); DistributedSampler keeps torch's default 0. */
	req = request_of(m);
	m->seed_source = bfs_order_seed_source(&req);
	if (!strcmp(m->seed_source, "getrandom")) {
		uint32_t s = 0;

		if (getrandom(&s, sizeof(s), 0) != sizeof(s))
			s = (uint32_t)getpid() ^ (uint32_t)time(NULL);
		m->seed = s;
	}
	bfs_log_setup(m->verbose ? BFS_LOG_DEBUG : BFS_LOG_INFO, NULL);
	rc = open_model(m, &mt);
	if (rc == 0)
		rc = bfs_mount_perm_decide(
		    mt.ds, &m->owner, strstr(m->fuse_o, "allow_other") != NULL,
		    &m->perm);
	if (rc == 0)
		rc = check_device();
	/* The log only now: a mount refused before this creates none, and
	 * one that fails from here on writes its reason into it. */
	if (rc == 0)
		rc = bfs_mount_log_open(&m->log, m->log_file, m->foreground,
					real);
	if (rc == 0) {
		m->hidden = count_entries(real);
		bfs_mount_log_start(&m->log, m->verbose);
		rc = run(m, &mt);
	}
out:
	close_model(&mt);
	for (size_t i = 0; i < m->nragged; i++)
		bfs_ragged_opt_free(&m->ragged[i]);
	if (m->log.fd >= 0)
		close(m->log.fd);
	free(m);
	return rc < 0 ? 0 : rc;
}
