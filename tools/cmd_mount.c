/* tools/cmd_mount: `batchfs mount` (`batchfs umount` is cmd_umount.c).
 *
 * Session lifecycle, in this order (libfuse example/ order):
 *   parse options -> open the dataset, layout, order (errors: exit 1/2 in
 *   the foreground) -> fuse_session_new -> signal handlers -> mount ->
 *   daemonize (fork; the child starts the pool, then writes ONE readiness
 *   byte on a pipe; the parent exits 0 when it reads it, 1 on EOF) ->
 *   multithreaded loop -> unmount -> remove handlers -> destroy.
 * The pool's threads are started after the fork (threads do not survive
 * fork). SIGTERM/SIGINT/SIGHUP end the loop (fuse_set_signal_handlers) and
 * the daemon unmounts cleanly. auto_unmount (a fusermount3 helper that
 * unmounts when our /dev/fuse descriptor dies) covers kill -9; libfuse 3.14
 * cannot combine it with allow_other, so asking for allow_other drops it
 * with a warning.
 *
 * `ls epoch` lists every epoch below --epochs (default 1000): each one can
 * be opened; epoch >= --epochs is ENOENT. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "fs/log.h"
#include "fs/order_input.h"
#include "mount/mount.h"
#include "mount/postmortem.h"
#include "tools/cli.h"
#include "tools/cmd.h"

#define MAX_SOURCES 4096

struct mount_opts {
	const char *sources[MAX_SOURCES];
	size_t nsources;
	char source_label[PATH_MAX + 64]; /* sources[0] (+ N more shards) */
	const char *mountpoint;
	uint64_t batch_size, epochs, seed, num_samples, cache_mb, pc_mb;
	unsigned workers, prefetch, timeout_s, fuse_threads;
	uint32_t world_size, rank;
	bool shuffle, have_seed, drop_last, replacement, foreground, verbose;
	bool have_prefetch, have_world, have_pc;
	const char *seed_source; /* see struct bfs_tree_info */
	enum bfs_serve serve;
	enum bfs_torch_compat compat;
	const char *subset, *weights, *gen_state, *log_file;
	char fuse_o[1024]; /* user's -o options, comma-joined */
	char line[2048];   /* the options as one line, for README */
};

static const char usage_text[] =
    "usage: batchfs mount [OPTIONS] ARCHIVE... MOUNTPOINT\n"
    "Mount torch.save archives (one dataset; several = shards) as a\n"
    "directory of batches: MOUNTPOINT/epoch/N/batch_K (safetensors).\n"
    "Returns once the filesystem is ready; the daemon stays in the\n"
    "background until `batchfs umount MOUNTPOINT`.\n\n"
    "  --batch-size B       samples per batch (default 1)\n"
    "  --shuffle            random order (RandomSampler)\n"
    "  --seed S             generator seed (default: random, reported in\n"
    "                       dataset.json)\n"
    "  --drop-last          drop the last incomplete batch\n"
    "  --epochs E           epochs 0..E-1 exist and are listed (default "
    "1000)\n"
    "  --num-samples M      samples drawn per epoch (RandomSampler)\n"
    "  --replacement        draw with replacement (RandomSampler)\n"
    "  --subset FILE        SubsetRandomSampler over these indices\n"
    "  --weights FILE       WeightedRandomSampler with these weights\n"
    "                       (num_samples defaults to len(weights))\n"
    "  --world-size W       DistributedSampler over W ranks ...\n"
    "  --rank R             ... as rank R (default 0)\n"
    "  --torch-compat V     randperm of torch 1.13 (default) or 2.7\n"
    "  --generator-state F  start from torch.Generator.get_state() bytes\n"
    "  --workers W          gather threads (default: online cores)\n"
    "  --prefetch P         batches prepared ahead (default 2 x workers)\n"
    "  --cache-mb M         memory budget for batches (default 512); a\n"
    "                       batch over 16 x this is refused at mount\n"
    "  --timeout SEC        a read waits at most SEC for its batch, then\n"
    "                       EIO (default 30)\n"
    "  --serve MODE         how batch files reach readers: push (default:\n"
    "                       each batch is stored whole into the page cache\n"
    "                       when opened), cache (page cache filled by the\n"
    "                       kernel's reads), direct (direct I/O: no page\n"
    "                       cache, but mmap MAP_SHARED fails)\n"
    "  --direct-io          same as --serve direct\n"
    "  --page-cache-mb M    push: pushed batches kept in the page cache\n"
    "                       (default: --cache-mb); older closed ones are\n"
    "                       dropped from it\n"
    "  --fuse-threads N     FUSE request threads (default 4)\n"
    "  --log-file FILE      daemon log (default: syslog)\n"
    "  -o OPT[,OPT...]      FUSE mount options (allow_other drops\n"
    "                       auto_unmount on libfuse 3.14)\n"
    "  -f, --foreground     stay in the foreground, log to stderr\n"
    "  -v, --verbose        debug logging\n"
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
	OPT_COMPAT,
	OPT_GENSTATE,
	OPT_DIRECT,
	OPT_SERVE,
	OPT_PCMB,
	OPT_FTHREADS,
	OPT_LOGFILE,
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
    {"torch-compat", required_argument, NULL, OPT_COMPAT},
    {"generator-state", required_argument, NULL, OPT_GENSTATE},
    {"direct-io", no_argument, NULL, OPT_DIRECT},
    {"serve", required_argument, NULL, OPT_SERVE},
    {"page-cache-mb", required_argument, NULL, OPT_PCMB},
    {"fuse-threads", required_argument, NULL, OPT_FTHREADS},
    {"log-file", required_argument, NULL, OPT_LOGFILE},
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

static void append_o(struct mount_opts *m, const char *o)
{
	size_t n = strlen(m->fuse_o);

	snprintf(m->fuse_o + n, sizeof(m->fuse_o) - n, "%s%s", n ? "," : "", o);
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
	       (c = getopt_long(argc, argv, "o:fvh", long_opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			usage(stdout);
			return -1;
		case 'f':
			m->foreground = true;
			break;
		case 'v':
			m->verbose = true;
			break;
		case 'o':
			append_o(m, optarg);
			break;
		case OPT_SHUFFLE:
			m->shuffle = true;
			break;
		case OPT_DROP:
			m->drop_last = true;
			break;
		case OPT_REPL:
			m->replacement = true;
			break;
		case OPT_DIRECT:
			m->serve = BFS_SERVE_DIRECT;
			break;
		case OPT_SERVE:
			if (!strcmp(optarg, "push"))
				m->serve = BFS_SERVE_PUSH;
			else if (!strcmp(optarg, "cache"))
				m->serve = BFS_SERVE_CACHE;
			else if (!strcmp(optarg, "direct"))
				m->serve = BFS_SERVE_DIRECT;
			else
				rc = bfs_cli_bad_usage(
				    "mount", usage,
				    "--serve: not push, cache or direct",
				    optarg);
			break;
		case OPT_SUBSET:
			m->subset = optarg;
			break;
		case OPT_WEIGHTS:
			m->weights = optarg;
			break;
		case OPT_GENSTATE:
			m->gen_state = optarg;
			break;
		case OPT_LOGFILE:
			m->log_file = optarg;
			break;
		case OPT_COMPAT:
			if (!strcmp(optarg, "1.13"))
				m->compat = BFS_TORCH_1_13;
			else if (!strcmp(optarg, "2.7"))
				m->compat = BFS_TORCH_2_7;
			else
				rc = bfs_cli_bad_usage(
				    "mount", usage,
				    "--torch-compat: not 1.13 or 2.7", optarg);
			break;
		case '?':
			rc = bfs_cli_bad_usage(
			    "mount", usage, "unknown option or missing value",
			    optopt && optopt < OPT_BATCH
				? (char[]){'-', (char)optopt, 0}
				: argv[optind - 1]);
			break;
		default:
			rc = numeric(c, optarg, m);
			break;
		}
	}
	if (rc)
		return rc;
	if (argc - optind < 2)
		return bfs_cli_bad_usage("mount", usage,
					 "need at least one ARCHIVE and a "
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
	if (m->subset && m->weights)
		return bfs_cli_bad_usage(
		    "mount", usage,
		    "--weights: cannot be combined with --subset", NULL);
	if (!m->have_world && m->rank)
		return bfs_cli_bad_usage("mount", usage,
					 "--rank: needs --world-size", NULL);
	if (!m->have_prefetch)
		m->prefetch = 2 * m->workers;
	if (!m->have_pc)
		m->pc_mb = m->cache_mb;
	return 0;
}

/* The sampler the options ask for (PyTorch's rules: one sampler). */
static enum bfs_sampler pick_sampler(const struct mount_opts *m)
{
	if (m->subset)
		return BFS_SAMPLER_SUBSET;
	if (m->weights)
		return BFS_SAMPLER_WEIGHTED;
	if (m->have_world)
		return BFS_SAMPLER_DISTRIBUTED;
	if (m->shuffle || m->replacement || m->num_samples)
		return BFS_SAMPLER_RANDOM;
	return BFS_SAMPLER_SEQUENTIAL;
}

static const char *sampler_name(enum bfs_sampler s)
{
	static const char *const names[] = {
	    [BFS_SAMPLER_SEQUENTIAL] = "sequential",
	    [BFS_SAMPLER_RANDOM] = "random",
	    [BFS_SAMPLER_SUBSET] = "subset_random",
	    [BFS_SAMPLER_WEIGHTED] = "weighted_random",
	    [BFS_SAMPLER_DISTRIBUTED] = "distributed",
	};
	return names[s];
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
static int make_order(struct mount_opts *m, struct bfs_mount *mt)
{
	struct bfs_order_opts o;
	struct order_inputs in = {0};
	struct bfs_error err = {{0}};
	int rc = 0;

	memset(&o, 0, sizeof(o));
	if (m->subset)
		rc = bfs_order_load_indices(m->subset, &in.subset,
					    &in.subset_len, &err);
	if (rc == 0 && m->weights)
		rc = bfs_order_load_weights(m->weights, &in.weights,
					    &in.weights_len, &err);
	if (rc == 0 && m->gen_state)
		rc = bfs_order_load_state(m->gen_state, &in.state,
					  &in.state_len, &err);
	if (rc < 0) {
		fprintf(stderr, "batchfs mount: %s\n", err.msg);
		free_inputs(&in);
		return 1;
	}
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
	o.shuffle = m->shuffle;
	o.compat = m->compat;
	o.generator_state = in.state;
	o.generator_state_len = in.state_len;
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
static int open_model(struct mount_opts *m, struct bfs_mount *mt)
{
	struct bfs_error err = {{0}};
	int rc;

	rc = bfs_dataset_open(&mt->ds, m->sources, m->nsources, &err);
	if (rc == 0)
		rc = bfs_layout_init(&mt->layout, mt->ds, m->batch_size, &err);
	if (rc == 0)
		rc =
		    bfs_pool_check_budget(&mt->layout, m->cache_mb << 20, &err);
	if (rc < 0) {
		fprintf(stderr, "batchfs mount: %s\n",
			err.msg[0] ? err.msg : strerror(-rc));
		return 1;
	}
	rc = make_order(m, mt);
	if (rc)
		return rc;
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

static void close_model(struct bfs_mount *mt)
{
	bfs_tree_destroy(mt->tree);
	bfs_pushed_destroy(mt->pushed);
	bfs_pool_destroy(mt->pool);
	bfs_order_destroy(mt->order);
	bfs_layout_fini(&mt->layout);
	bfs_dataset_close(mt->ds);
}

/* Log sinks for the daemon. Set once before any thread starts, read-only
 * after (fs/log.h contract). */
static int log_fd = -1;

static void file_sink(enum bfs_log_level level, const char *line)
{
	char buf[1100];
	int n = snprintf(buf, sizeof(buf), "%s\n", line);

	if (n > 0 && write(log_fd, buf, (size_t)n) < 0) {
		/* nowhere left to report it */
	}
}

static void syslog_sink(enum bfs_log_level level, const char *line)
{
	static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG};

	syslog(prio[level], "%s", line);
}

/* Start the pool and the namespace (after the fork). 0 or -errno. */
static int start_serving(struct mount_opts *m, struct bfs_mount *mt)
{
	struct bfs_pool_opts po = {
	    .workers = m->workers,
	    .prefetch = m->prefetch,
	    .budget_bytes = m->cache_mb << 20,
	    .timeout_ms = m->timeout_s * 1000u,
	    .epochs = m->epochs,
	};
	struct bfs_tree_info ti = {
	    .sources = m->sources,
	    .nsources = m->nsources,
	    .epochs = m->epochs,
	    .seed = m->seed,
	    .shuffle = m->shuffle || m->replacement || m->num_samples ||
		       m->subset || m->weights,
	    .drop_last = m->drop_last,
	    .batch_size = m->batch_size,
	    .seed_source = m->seed_source,
	    .sampler = sampler_name(pick_sampler(m)),
	    .options = m->line,
	    .mountpoint = m->mountpoint,
	};
	const char *delay = getenv("BATCHFS_DEBUG_GATHER_DELAY_MS");
	int rc;

	if (delay)
		po.debug_delay_ms = (unsigned)strtoul(delay, NULL, 10);
	if (mt->serve == BFS_SERVE_PUSH &&
	    !getenv("BATCHFS_DEBUG_NO_EARLY_PUSH")) {
		po.on_ready = bfs_mount_on_ready;
		po.on_ready_arg = mt;
	}
	rc = mt->serve == BFS_SERVE_PUSH
		 ? bfs_pushed_create(&mt->pushed, m->pc_mb << 20)
		 : 0;
	if (rc == 0)
		rc = bfs_pool_create(&mt->pool, mt->ds, mt->order, &mt->layout,
				     &po);
	if (rc == 0)
		rc = bfs_tree_create(&mt->tree, mt->ds, mt->order, &mt->layout,
				     mt->pool, &ti);
	return rc;
}

/* The options as one line for README (what was asked, plus defaults). */
static void describe_opts(struct mount_opts *m)
{
	snprintf(m->line, sizeof(m->line),
		 "--batch-size %" PRIu64 "%s --seed %" PRIu64
		 "%s --epochs %" PRIu64
		 " --workers %u --prefetch %u --cache-mb %" PRIu64
		 " --timeout %u --serve %s",
		 m->batch_size, m->shuffle ? " --shuffle" : "", m->seed,
		 m->drop_last ? " --drop-last" : "", m->epochs, m->workers,
		 m->prefetch, m->cache_mb, m->timeout_s,
		 m->serve == BFS_SERVE_PUSH    ? "push"
		 : m->serve == BFS_SERVE_CACHE ? "cache"
					       : "direct");
}

/* fuse args: read-only, default_permissions, auto_unmount unless the user
 * asked allow_other (libfuse 3.14 refuses both together). */
static int fuse_args_for(struct mount_opts *m, struct fuse_args *args)
{
	char o[1400];
	bool allow_other = strstr(m->fuse_o, "allow_other") != NULL;

	if (allow_other)
		fprintf(stderr, "batchfs mount: warning: -o allow_other: "
				"auto_unmount disabled (libfuse 3.14 cannot "
				"combine them); use batchfs umount\n");
	snprintf(o, sizeof(o),
		 "ro,default_permissions,fsname=batchfs,subtype=batchfs%s%s%s",
		 allow_other ? "" : ",auto_unmount", m->fuse_o[0] ? "," : "",
		 m->fuse_o);
	if (fuse_opt_add_arg(args, "batchfs") || fuse_opt_add_arg(args, "-o") ||
	    fuse_opt_add_arg(args, o))
		return -ENOMEM;
	return 0;
}

/* Fork; the parent waits for the readiness byte and exits with 0 (byte
 * received) or 1 (the child died first). Returns the write end in the
 * child. */
static int daemonize(struct fuse_session *se)
{
	int fds[2];
	pid_t pid;
	char c;

	if (pipe(fds) < 0)
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid > 0) {
		close(fds[1]);
		if (read(fds[0], &c, 1) == 1)
			_exit(0);
		/* The child failed before readiness and reported why. */
		_exit(1);
	}
	close(fds[0]);
	setsid();
	return fds[1];
}

/* Detach stdio (the daemon logs to --log-file or syslog). */
static void detach_stdio(const struct mount_opts *m)
{
	int nul = open("/dev/null", O_RDWR);

	if (m->log_file) {
		log_fd = open(m->log_file,
			      O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	}
	if (log_fd >= 0) {
		bfs_log_setup(m->verbose ? BFS_LOG_DEBUG : BFS_LOG_INFO,
			      file_sink);
	} else {
		openlog("batchfs", LOG_PID, LOG_DAEMON);
		bfs_log_setup(m->verbose ? BFS_LOG_DEBUG : BFS_LOG_INFO,
			      syslog_sink);
	}
	if (nul >= 0) {
		dup2(nul, STDIN_FILENO);
		dup2(nul, STDOUT_FILENO);
		dup2(nul, STDERR_FILENO);
		if (nul > STDERR_FILENO)
			close(nul);
	}
}

/* session_new -> handlers -> mount -> daemonize -> serve -> unmount. */
static int run_session(struct mount_opts *m, struct bfs_mount *mt)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct fuse_session *se = NULL;
	struct fuse_loop_config *cfg = NULL;
	int ready = -1, rc = 1;

	if (fuse_args_for(m, &args) < 0)
		goto out_args;
	se = fuse_session_new(&args, &bfs_mount_ops, sizeof(bfs_mount_ops), mt);
	mt->se = se;
	if (!se) {
		fprintf(stderr, "batchfs mount: bad FUSE options '%s'\n",
			m->fuse_o);
		rc = 2;
		goto out_args;
	}
	if (fuse_set_signal_handlers(se) != 0)
		goto out_destroy;
	if (fuse_session_mount(se, m->mountpoint) != 0) {
		fprintf(stderr, "batchfs mount: cannot mount on %s\n",
			m->mountpoint);
		goto out_handlers;
	}
	if (!m->foreground) {
		ready = daemonize(se);
		if (ready < 0)
			goto out_unmount;
	}
	if (start_serving(m, mt) < 0) {
		fprintf(stderr,
			"batchfs mount: cannot start the worker pool\n");
		goto out_unmount;
	}
	if (ready >= 0) {
		detach_stdio(m);
		bfs_postmortem_install(log_fd); /* -1: syslog */
		if (write(ready, "1", 1) != 1)
			goto out_unmount;
		close(ready);
		ready = -1;
	} else {
		bfs_postmortem_install(STDERR_FILENO);
	}
	bfs_log(BFS_LOG_INFO, "mount", "serving %s", m->mountpoint);
	cfg = fuse_loop_cfg_create();
	if (!cfg)
		goto out_unmount;
	fuse_loop_cfg_set_max_threads(cfg, m->fuse_threads);
	fuse_loop_cfg_set_clone_fd(cfg, 0);
	rc = fuse_session_loop_mt(se, cfg) < 0 ? 1 : 0;
	fuse_loop_cfg_destroy(cfg);
	bfs_mount_handles_free(mt);
	/* Workers push into the session (on_ready): stop them first. */
	bfs_tree_destroy(mt->tree);
	mt->tree = NULL;
	bfs_pool_destroy(mt->pool);
	mt->pool = NULL;
	bfs_log(BFS_LOG_INFO, "mount", "unmounting %s", m->mountpoint);
out_unmount:
	fuse_session_unmount(se);
out_handlers:
	fuse_remove_signal_handlers(se);
out_destroy:
	fuse_session_destroy(se);
out_args:
	fuse_opt_free_args(&args);
	if (ready >= 0)
		close(ready);
	return rc;
}

/* Contract: see tools/cmd.h. Exit 0 once mounted (the daemon keeps
 * serving), 1 on a bad archive or mount failure, 2 on bad usage. */
int bfs_cmd_mount(int argc, char **argv)
{
	struct mount_opts *m = calloc(1, sizeof(*m));
	struct bfs_mount mt;
	char real[PATH_MAX];
	struct stat st;
	int rc;

	memset(&mt, 0, sizeof(mt));
	bfs_mount_handles_init(&mt);
	if (!m)
		return 1;
	rc = parse_opts(argc, argv, m);
	if (rc)
		goto out;
	if (!realpath(m->mountpoint, real) || stat(real, &st) < 0 ||
	    !S_ISDIR(st.st_mode)) {
		fprintf(stderr, "batchfs mount: %s: not a directory\n",
			m->mountpoint);
		rc = 1;
		goto out;
	}
	m->mountpoint = real;
	/* No --seed: a random sampler gets a fresh seed (reported in
	 * dataset.json); DistributedSampler keeps torch's default 0. */
	if (pick_sampler(m) == BFS_SAMPLER_SEQUENTIAL ||
	    (pick_sampler(m) == BFS_SAMPLER_DISTRIBUTED && !m->shuffle)) {
		m->seed_source = "unused";
	} else if (pick_sampler(m) == BFS_SAMPLER_DISTRIBUTED) {
		m->seed_source = m->have_seed ? "--seed" : "default";
	} else if (m->gen_state) {
		m->seed_source = "--generator-state";
	} else if (m->have_seed) {
		m->seed_source = "--seed";
	} else {
		uint32_t s = 0;

		if (getrandom(&s, sizeof(s), 0) != sizeof(s))
			s = (uint32_t)getpid() ^ (uint32_t)time(NULL);
		m->seed = s;
		m->seed_source = "getrandom";
	}
	describe_opts(m);
	bfs_log_setup(m->verbose ? BFS_LOG_DEBUG : BFS_LOG_INFO, NULL);
	rc = open_model(m, &mt);
	if (rc == 0) {
		mt.serve = m->serve;
		rc = run_session(m, &mt);
	}
out:
	close_model(&mt);
	free(m);
	return rc < 0 ? 0 : rc;
}
