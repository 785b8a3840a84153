/* tools/cmd_mount: `batchfs mount`'s command line (`batchfs umount` is
 * cmd_umount.c).
 *
 * It owns the options: their table, usage (--help's text is
 * cmd_mount_help.c), their parsing and
 * checks (each one's range, and what they imply together: ranks, the
 * order PyTorch would accept, defaults that follow from others), the
 * usage errors (exit 2) and the check of MOUNTPOINT. What is mounted, and
 * how, is tools/mount_compose.c's, the composition root, which it hands
 * the checked options (struct mount_opts, tools/mount_compose.h).
 *
 * Every option can also be spelled inside -o, as KEY[=VALUE] with '_'
 * or '-' (batch_size=256,shuffle), for mount.fuse3's calling convention
 * `batchfs SOURCE MOUNTPOINT -o OPTIONS` (tools/main.c sends it here),
 * which `mount -t fuse.batchfs` and /etc/fstab use: there every option
 * is in -o, further sources are source=PATH, and mount(8)'s own options
 * (rw, dev, suid, nofail, x-systemd.*, ...) come along and are ignored.
 * What -o holds besides goes to FUSE, as before. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs/tree.h"
#include "tools/cli.h"
#include "tools/cmd.h"
#include "tools/mount_compose.h"
#include "tools/mountinfo.h"

static void usage(FILE *f)
{
	fputs(bfs_cmd_mount_help, f);
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
	OPT_TORCHVER,
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
	OPT_PERSIST,
	OPT_SDROP,
	OPT_RESUME,
	OPT_S3EP,
	OPT_CACHEDIR,
	OPT_CACHEGB,
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
    {"torch-version", required_argument, NULL, OPT_TORCHVER},
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
    {"persistent-workers", no_argument, NULL, OPT_PERSIST},
    {"sampler-drop-last", no_argument, NULL, OPT_SDROP},
    {"resume-at", required_argument, NULL, OPT_RESUME},
    {"s3-endpoint", required_argument, NULL, OPT_S3EP},
    {"cache-dir", required_argument, NULL, OPT_CACHEDIR},
    {"cache-gb", required_argument, NULL, OPT_CACHEGB},
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

/* Store numeric option c's value v (in range) into m. */
static void set_number(int c, uint64_t v, struct mount_opts *m)
{
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
	set_number(c, v, m);
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

/* FUSE option 'o' (as libfuse reads it: unescaped) appended to the -o
 * list passed on, its commas and backslashes escaped again (as "\," and
 * "\\") so that libfuse reads back 'o' itself. */
static void append_o(struct mount_opts *m, const char *o)
{
	size_t n = strlen(m->fuse_o), cap = sizeof(m->fuse_o) - 1;

	if (n && n < cap)
		m->fuse_o[n++] = ',';
	for (; *o && n < cap; o++) {
		if ((*o == ',' || *o == '\\') && n + 1 < cap)
			m->fuse_o[n++] = '\\';
		m->fuse_o[n++] = *o;
	}
	m->fuse_o[n] = '\0';
}

/* mount(8)'s own options, which an fstab line, `mount -t` and
 * mount.fuse3 pass on and which mean nothing here: rw (batchfs is
 * read-only), dev and suid (it has no device or set-user-ID files, and
 * keeps FUSE's nodev,nosuid), and those for mount(8) and systemd
 * alone. */
static bool ignored_o(const char *o)
{
	static const char *const words[] = {
	    "defaults", "rw",	   "ro",   "dev",   "suid",   "auto",  "noauto",
	    "nofail",	"_netdev", "user", "users", "nouser", "owner", "group",
	};

	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		if (!strcmp(o, words[i]))
			return true;
	return !strncmp(o, "x-", 2) || !strncmp(o, "comment=", 8);
}

/* The long option the key of -o item 'o' (its first 'klen' bytes, '_'
 * read as '-') names, or NULL. */
static const struct option *long_opt_of(const char *o, size_t klen)
{
	char key[32];

	if (klen >= sizeof(key))
		return NULL;
	for (size_t i = 0; i < klen; i++)
		key[i] = o[i] == '_' ? '-' : o[i];
	key[klen] = '\0';
	for (const struct option *l = long_opts; l->name; l++)
		if (!strcmp(l->name, key))
			return l;
	return NULL;
}

/* -o fields= or ranks= 'v' after an earlier value in *dst: the list of
 * both (repeating the key makes a list: commas separate -o items). 0, or
 * 2 (printed). */
static int join_list(struct mount_opts *m, const char **dst, const char *v)
{
	char *s;

	if (!*dst) {
		*dst = v;
		return 0;
	}
	if (m->no_copies == MAX_O_ARGS || asprintf(&s, "%s,%s", *dst, v) < 0)
		return bfs_cli_bad_usage("mount", usage, "too many -o options",
					 NULL);
	m->o_copies[m->no_copies++] = s;
	*dst = s;
	return 0;
}

static int one_opt(int c, char *arg, struct mount_opts *m);

/* One item of -o: an option of the table as KEY[=VALUE], source=PATH,
 * one of mount(8)'s (ignored) or a FUSE option (passed on). Returns as
 * one_opt. */
static int o_item(struct mount_opts *m, char *o)
{
	char *eq = strchr(o, '=');
	size_t klen = eq ? (size_t)(eq - o) : strlen(o);
	const struct option *l = long_opt_of(o, klen);
	char msg[160];

	if (!*o || ignored_o(o))
		return 0;
	if (!strncmp(o, "source=", 7)) {
		if (!o[7] || m->no_sources == MAX_O_SOURCES)
			return bfs_cli_bad_usage(
			    "mount", usage,
			    o[7] ? "too many -o source= options"
				 : "-o source=: needs a path",
			    NULL);
		m->o_sources[m->no_sources++] = o + 7;
		return 0;
	}
	if (!l) {
		append_o(m, o);
		return 0;
	}
	if ((l->has_arg == no_argument) != !eq) {
		snprintf(msg, sizeof(msg), "-o %.*s: %s (--%s)", (int)klen, o,
			 eq ? "takes no value" : "needs a value, as KEY=VALUE",
			 l->name);
		return bfs_cli_bad_usage("mount", usage, msg, NULL);
	}
	if (l->val == OPT_FIELDS)
		return join_list(m, &m->fields, eq + 1);
	if (l->val == OPT_RANKS)
		return join_list(m, &m->ranks_arg, eq + 1);
	return one_opt(l->val, eq ? eq + 1 : NULL, m);
}

/* -o OPT[,OPT...], each OPT through o_item as libfuse will read it: a
 * copy of 'arg' cut at its unescaped commas and unescaped, kept in m as
 * long as m (the options point into it). Returns as one_opt, or 1 out of
 * memory. */
static int o_opts(struct mount_opts *m, const char *arg)
{
	char *copy;
	int rc = 0;

	if (m->no_copies == MAX_O_ARGS)
		return bfs_cli_bad_usage("mount", usage, "too many -o options",
					 NULL);
	copy = strdup(arg);
	if (!copy)
		return 1;
	m->o_copies[m->no_copies++] = copy;
	/* split and unescaped as libfuse's option parser does (fuse_opt.c):
	 * "\," is a comma within an item, "\NNN" (octal, NNN <= 377) that
	 * byte, "\C" any other C itself; in place (items only shrink) */
	for (char *s = copy, *d = copy, *item = copy; rc == 0; s++) {
		if (*s == ',' || !*s) {
			bool last = !*s;

			*d = '\0';
			rc = o_item(m, item);
			if (last)
				break;
			item = d = s + 1;
		} else if (s[0] == '\\' && s[1]) {
			s++;
			if (s[0] >= '0' && s[0] <= '3' && s[1] >= '0' &&
			    s[1] <= '7' && s[2] >= '0' && s[2] <= '7') {
				*d++ = (char)((s[0] - '0') * 64 +
					      (s[1] - '0') * 8 + (s[2] - '0'));
				s += 2;
			} else {
				*d++ = *s;
			}
		} else {
			*d++ = *s;
		}
	}
	return rc;
}

/* --torch-compat M: the model itself, 1.13, 2.1 or 2.7; a torch version
 * is refused with the model that serves it (--torch-version takes it). 0
 * or 2 (usage printed). */
static int compat_opt(struct mount_opts *m, const char *arg)
{
	static const char all[] = "1.13 is the order of torch 1.13 and 2.0, "
				  "2.1 that of 2.1 to 2.6, 2.7 that of 2.7 "
				  "and later";
	static const enum bfs_torch_compat models[] = {
	    BFS_TORCH_1_13, BFS_TORCH_2_1, BFS_TORCH_2_7};
	enum bfs_torch_compat c;
	bool verified;
	char msg[300];

	m->have_compat = true;
	m->torch_version = NULL;
	for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++)
		if (!strcmp(arg, bfs_torch_compat_name(models[i]))) {
			m->compat = models[i];
			return 0;
		}
	if (bfs_torch_compat_of(arg, &c, &verified) == 0)
		snprintf(msg, sizeof(msg),
			 "--torch-compat %.40s: use --torch-version %.40s, "
			 "or --torch-compat %s (%s)",
			 arg, arg, bfs_torch_compat_name(c), all);
	else
		snprintf(msg, sizeof(msg),
			 "--torch-compat %.40s: not 1.13, 2.1 or 2.7 (%s; "
			 "older torch is not modelled)",
			 arg, all);
	return bfs_cli_bad_usage("mount", usage, msg, NULL);
}

/* --torch-version V: the torch whose order to serve (torch.__version__);
 * a later --torch-compat overrides it, as it does a former one. */
static int torch_version_opt(struct mount_opts *m, const char *arg)
{
	bool verified;
	char msg[300];

	if (bfs_torch_compat_of(arg, &m->compat, &verified) == 0) {
		/* not have_compat: the torch at hand is no choice of the
		 * user's, so it is never warned about (batchfs.mount() passes
		 * it whatever the order) */
		m->have_compat = false;
		m->torch_version = arg;
		m->torch_verified = verified;
		return 0;
	}
	snprintf(msg, sizeof(msg),
		 "--torch-version %.40s: not a torch version such as 2.13.0 "
		 "(torch.__version__), or older than 1.13 (not modelled)",
		 arg);
	return bfs_cli_bad_usage("mount", usage, msg, NULL);
}

/* The option whose value is kept as given (a path, a list, a URL), or
 * NULL: where m keeps it. */
static const char **kept_as_given(int c, struct mount_opts *m)
{
	const struct {
		int c;
		const char **at;
	} t[] = {
	    {OPT_SUBSET, &m->subset},	   {OPT_RANKS, &m->ranks_arg},
	    {OPT_FIELDS, &m->fields},	   {OPT_WEIGHTS, &m->weights},
	    {OPT_GENSTATE, &m->gen_state}, {OPT_RNGSTATE, &m->rng_state},
	    {OPT_LOGFILE, &m->log_file},   {OPT_S3EP, &m->s3_endpoint},
	    {OPT_CACHEDIR, &m->cache_dir},
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (t[i].c == c)
			return t[i].at;
	return NULL;
}

/* One option that takes a value but no number (numeric() has those).
 * Returns 0 or 2 (bad usage, printed). */
/* --resume-at E:S[:W]: epoch E from position S of the list W ranks
 * read (fs/order.h: opts.resume). Returns 0 or 2 (bad usage, printed). */
static int resume_opt(struct mount_opts *m, const char *arg)
{
	char e[24] = "", pos[24] = "", w[24] = "";
	uint64_t world = 0;
	int n = sscanf(arg, "%23[0-9]:%23[0-9]%*[:]%23[0-9]", e, pos, w);

	if (n < 2 ||
	    strlen(arg) !=
		strlen(e) + strlen(pos) + 1 + (n == 3 ? strlen(w) + 1 : 0) ||
	    parse_u64(e, 0, UINT64_MAX, &m->resume_epoch) ||
	    parse_u64(pos, 0, UINT64_MAX, &m->resume_pos) ||
	    (n == 3 && parse_u64(w, 1, UINT32_MAX, &world)))
		return bfs_cli_bad_usage(
		    "mount", usage,
		    "--resume-at: not EPOCH:POSITION or EPOCH:POSITION:WORLD "
		    "(the epoch, the samples every rank had read in all, and "
		    "the world size that read them)",
		    arg);
	m->resume = true;
	m->resume_world = (uint32_t)world;
	m->resume_arg = arg;
	return 0;
}

static int value_opt(int c, char *arg, struct mount_opts *m)
{
	const char **kept = kept_as_given(c, m);

	if (kept) {
		*kept = arg;
		return 0;
	}
	switch (c) {
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
	case OPT_TORCHVER:
		return torch_version_opt(m, arg);
	case OPT_RESUME:
		return resume_opt(m, arg);
	case OPT_CACHEGB:
		if (bfs_cli_parse_gb(arg, &m->cache_bytes) == 0)
			return 0;
		return bfs_cli_bad_usage(
		    "mount", usage, "--cache-gb: not a GB count in [1e-6, 1e6]",
		    arg);
	default:
		return numeric(c, arg, m);
	}
}

/* One option. Returns 0, 2 (bad usage, printed) or -1 (--help
 * printed). */
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
		return o_opts(m, arg);
	case OPT_SHUFFLE:
		m->shuffle = true;
		return 0;
	case OPT_DROP:
		m->drop_last = true;
		return 0;
	case OPT_SDROP:
		m->sampler_drop_last = true;
		return 0;
	case OPT_PERSIST:
		m->persistent_workers = true;
		return 0;
	case OPT_REPL:
		m->replacement = true;
		return 0;
	case OPT_DIRECT:
		m->serve = BFS_SERVE_DIRECT;
		return 0;
	default:
		return value_opt(c, arg, m);
	}
}

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

/* The operands and what the options imply together. 0 or 2. */
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
	if ((size_t)(argc - optind - 1) + m->no_sources > MAX_SOURCES)
		return bfs_cli_bad_usage("mount", usage, "too many archives",
					 NULL);
	for (int i = optind; i < argc - 1; i++)
		m->sources[m->nsources++] = argv[i];
	for (size_t i = 0; i < m->no_sources; i++) /* -o source= */
		m->sources[m->nsources++] = m->o_sources[i];
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
	if (m->resume && !m->have_world)
		return bfs_cli_bad_usage(
		    "mount", usage,
		    "--resume-at: resumes DistributedSampler's "
		    "epoch: needs --world-size",
		    NULL);
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
	m->compat = BFS_TORCH_DEFAULT;
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

/* Contract: see tools/cmd.h. Exit 0 once mounted (the daemon keeps
 * serving), 1 on a bad archive or mount failure, 2 on bad usage. */
int bfs_cmd_mount(int argc, char **argv)
{
	struct mount_opts *m = calloc(1, sizeof(*m));
	char real[PATH_MAX];
	int rc;

	if (!m)
		return 1;
	rc = parse_opts(argc, argv, m);
	if (rc)
		goto out;
	rc = bfs_mountinfo_check_target(m->mountpoint, real, sizeof(real));
	if (rc)
		goto out;
	m->mountpoint = real;
	rc = bfs_mount_compose(m, usage);
out:
	for (size_t i = 0; i < m->nragged; i++)
		bfs_ragged_opt_free(&m->ragged[i]);
	for (size_t i = 0; i < m->no_copies; i++)
		free(m->o_copies[i]);
	free(m);
	return rc < 0 ? 0 : rc;
}
