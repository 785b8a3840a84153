/* tools/mount_compose: the composition root of `batchfs mount`; the
 * command line that fills in its options is tools/cmd_mount.c
 * (tools/mount_compose.h is the interface between them).
 *
 * It owns what a mount is made of and the order it is made in. Before
 * any mount it builds the model (the remote objects when a source is a
 * URL, then dataset, layout, order: a bad archive or option exits 1 or 2
 * in the foreground), decides who may read the mount
 * (tools/mount_perm.c), checks that /dev/fuse can be opened and only then
 * opens the daemon's log (a mount refused before creates none); then
 * mount/session.c runs the session (mount, fork, INIT, serving mode, the
 * loop, unmount), calling back start() here to build what is served
 * (the rooms of cold data: memory policy, fetch and read-ahead; the
 * serve with its pool options, handed those; the namespace), once the
 * mode is known, in the daemon, and ready() to print the warnings and the
 * summary line while the caller's terminal is there, and stop() after
 * the loop. The rooms of cold data outlive the serve: run() destroys them
 * once the session has destroyed it. The BATCHFS_DEBUG_* switches of the
 * serve, the pool, the memory policy and the fetcher's sizes are read
 * here (debug_opts, start_cold, open_objects).
 *
 * Remote sources: the objects' threads stop before the fork
 * (bfs_objects_suspend) and start again in the daemon, in start()
 * (bfs_objects_resume); start_cold wraps fs/reader's backend in
 * fs/fetch_remote's and sizes the read-ahead by the cache's bound (half
 * of it ahead; planned uses where the objects pass it; wide gaps far
 * ahead where it holds them all and an epoch reads nearly every chunk);
 * stop() cancels the fetches in flight (bfs_objects_abort).
 *
 * `ls epoch` lists every epoch below --epochs (default 1000): each one can
 * be opened; epoch >= --epochs is ENOENT. */
#include "tools/mount_compose.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "fs/fetch.h"
#include "fs/log.h"
#include "fs/memory.h"
#include "fs/remote/object.h"
#include "fs/order_input.h"
#include "fs/readahead.h"
#include "fs/reader.h"
#include "fs/remote/remote.h"
#include "fs/fetch_remote.h"
#include "fs/size.h"
#include "mount/mount.h"
#include "mount/postmortem.h"
#include "tools/cli.h"
#include "tools/mount_log.h"
#include "tools/pack.h"
#include "tools/mount_perm.h"

/* What is mounted: built before the mount, served by the session. */
struct model {
	struct bfs_objects *objects; /* remote sources' (NULL: none) */
	struct bfs_dataset *ds;
	struct bfs_layout layout;
	struct bfs_order *order;
};

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

/* The files --subset, --weights and --generator-state or --rng-state
 * name, into 'in'. 0, or 1 with the message printed ('in' freed). */
static int load_inputs(const struct mount_opts *m, struct order_inputs *in)
{
	const char *state_opt =
	    m->gen_state ? "--generator-state" : "--rng-state";
	struct bfs_error err = {{0}};
	const char *failed = NULL; /* the option whose file was refused */
	int rc = 0;

	if (m->subset) {
		rc = bfs_order_load_indices(m->subset, &in->subset,
					    &in->subset_len, &err);
		failed = "--subset";
	}
	if (rc == 0 && m->weights) {
		rc = bfs_order_load_weights(m->weights, &in->weights,
					    &in->weights_len, &err);
		failed = "--weights";
	}
	if (rc == 0 && (m->gen_state || m->rng_state)) {
		rc = bfs_order_load_state(m->gen_state ? m->gen_state
						       : m->rng_state,
					  &in->state, &in->state_len, &err);
		failed = state_opt;
	}
	if (rc < 0) { /* err.msg starts with the file's name */
		fprintf(stderr, "batchfs mount: %s %s\n", failed,
			err.msg[0] ? err.msg : strerror(-rc));
		free_inputs(in);
		return 1;
	}
	return 0;
}

/* Build the order engine. Returns 0, 1 (a file could not be read) or 2
 * (an option value PyTorch would refuse, with 'usage'); the message is
 * printed. */
static int make_order(struct mount_opts *m, struct model *mt,
		      void (*usage)(FILE *))
{
	const char *state_opt =
	    m->gen_state ? "--generator-state" : "--rng-state";
	char names[3][PATH_MAX + 24]; /* "--subset FILE" ... for refusals */
	struct bfs_order_opts o;
	struct order_inputs in = {0};
	struct bfs_error err = {{0}};
	int rc;

	memset(&o, 0, sizeof(o));
	if (load_inputs(m, &in))
		return 1;
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
	o.sampler_drop_last = m->sampler_drop_last;
	o.persistent_workers = m->persistent_workers;
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
	o.resume = m->resume;
	o.resume_epoch = m->resume_epoch;
	o.resume_pos = m->resume_pos;
	o.resume_world = m->resume_world;
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

/* A size in bytes from the environment variable 'name' (digits, then K,
 * M or G for KiB, MiB, GiB), 0 (fs/remote/object's default) when unset or not
 * such a size. */
static uint64_t env_bytes(const char *name)
{
	const char *v = getenv(name);
	char *end;
	uint64_t n;

	if (!v || *v < '0' || *v > '9')
		return 0;
	errno = 0;
	n = strtoull(v, &end, 10);
	if (errno)
		return 0;
	switch (*end) {
	case 'G':
		n <<= 10; /* fall through */
	case 'M':
		n <<= 10; /* fall through */
	case 'K':
		n <<= 10;
		end++;
	}
	return *end ? 0 : n;
}

/* The remote sources' objects (fs/remote/object), when a source is a URL: the
 * cache directory (--cache-dir, else the default under HOME), its bound
 * (--cache-gb), the S3 endpoint (--s3-endpoint, else the AWS settings'),
 * requests bounded by --timeout. The fetcher's sizes are fs/remote/object's
 * defaults unless the benchmark's sweep sets them:
 * BATCHFS_DEBUG_MERGE_GAP, BATCHFS_DEBUG_REQUEST_MAX and
 * BATCHFS_DEBUG_FLIGHT_MAX (bytes, or with K, M, G), and
 * BATCHFS_DEBUG_IN_FLIGHT (requests on the wire at once). 0 or -errno
 * with err. */
static int open_objects(const struct mount_opts *m, struct model *mt,
			struct bfs_error *err)
{
	uint64_t in_flight = env_bytes("BATCHFS_DEBUG_IN_FLIGHT");
	struct bfs_objects_opts o = {
	    .remote = {.s3_endpoint = m->s3_endpoint,
		       .timeout_s = m->timeout_s,
		       .max_in_flight =
			   in_flight < 4096 ? (unsigned)in_flight : 4096},
	    .cache_dir = m->cache_dir,
	    .cache_bytes = m->cache_bytes,
	    .cache_from_free = true, /* without --cache-gb */
	    .merge_gap = env_bytes("BATCHFS_DEBUG_MERGE_GAP"),
	    .request_max = env_bytes("BATCHFS_DEBUG_REQUEST_MAX"),
	    .flight_max = env_bytes("BATCHFS_DEBUG_FLIGHT_MAX"),
	};
	bool any = false;

	for (size_t i = 0; i < m->nsources; i++)
		any = any || bfs_remote_is_url(m->sources[i]);
	return any ? bfs_objects_create(&mt->objects, &o, err) : 0;
}

/* Everything before FUSE: dataset, layout, order. 0, 1 or 2. */
static int open_model(struct mount_opts *m, struct model *mt,
		      void (*usage)(FILE *))
{
	struct bfs_error err = {{0}};
	char msg[4 * BFS_ERROR_MAX]; /* err.msg escaped: it names files */
	int rc;

	rc = open_objects(m, mt, &err);
	if (rc == 0)
		rc = bfs_dataset_open_in(&mt->ds, m->sources, m->nsources,
					 m->fields, mt->objects, &err);
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
			if (!bfs_remote_is_url(m->sources[i]))
				bfs_pack_list_hint("mount", m->sources[i]);
		return 1;
	}
	rc = make_order(m, mt, usage);
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
	bfs_objects_destroy(mt->objects); /* after the mappings of theirs */
}

/* The serving options the environment sets for tests and measurements:
 * BATCHFS_DEBUG_GATHER_DELAY_MS (workers sleep before each gather),
 * BATCHFS_DEBUG_NO_EARLY_PUSH, BATCHFS_DEBUG_NO_ZERO_COPY,
 * BATCHFS_DEBUG_ZC_NO_CHECK, BATCHFS_DEBUG_ZC_MAX_IOV, BATCHFS_DEBUG_ZC_STOP
 * (the daemon stops itself once, between the check and the first zero-copy
 * reply of rows), BATCHFS_MEMFD_WRITE
 * (gather|slices: how passthrough batches are written),
 * BATCHFS_DEBUG_NO_DIRECT_OPEN (O_DIRECT opens of batch files fail with
 * EINVAL: the readers' fallback). */
static void debug_opts(struct bfs_pool_opts *po, struct bfs_serve_opts *so)
{
	const char *delay = getenv("BATCHFS_DEBUG_GATHER_DELAY_MS");
	const char *iov = getenv("BATCHFS_DEBUG_ZC_MAX_IOV");
	const char *wr = getenv("BATCHFS_MEMFD_WRITE");

	po->debug_delay_ms = delay ? (unsigned)strtoul(delay, NULL, 10) : 0;
	po->memfd_write = !wr			  ? BFS_LAYOUT_FD_AUTO
			  : !strcmp(wr, "gather") ? BFS_LAYOUT_FD_GATHER
			  : !strcmp(wr, "slices") ? BFS_LAYOUT_FD_SLICES
						  : BFS_LAYOUT_FD_AUTO;
	so->early_push = !getenv("BATCHFS_DEBUG_NO_EARLY_PUSH");
	so->zero_copy = !getenv("BATCHFS_DEBUG_NO_ZERO_COPY");
	so->zc_no_check = getenv("BATCHFS_DEBUG_ZC_NO_CHECK") != NULL;
	so->zc_debug_stop = getenv("BATCHFS_DEBUG_ZC_STOP") != NULL;
	so->zc_max_iov = iov ? (unsigned)strtoul(iov, NULL, 10) : 0;
	so->no_direct_open = getenv("BATCHFS_DEBUG_NO_DIRECT_OPEN") != NULL;
}

/* Cold data (fs/README.md): the rooms start() builds in the daemon and
 * hands to the pool; run() destroys them after the session destroyed the
 * serve. */
struct cold {
	struct bfs_memory *memory;
	struct bfs_fetch *fetch;
	struct bfs_readahead *readahead;
};

/* What the session calls back (mount/mount.h). */
struct session_arg {
	struct mount_opts *m;
	struct model *model;
	struct cold cold;
};

/* The most chunk bytes the read-ahead plans uses for: 2^23 uses of 64 KiB
 * chunks, 128 MiB of the cache's plan (16 bytes a use). */
#define PLAN_BYTES_MAX ((uint64_t)1 << 39)

/* Where the cache holds the remote objects and an epoch reads nearly all
 * their chunks: the read-ahead of batches more than FAR_BATCHES past the
 * readers merges over gaps of FAR_GAP (the sweep of the remote benchmark,
 * small rows: 256 KiB 0.098 GB/s, 4 MiB 0.140, 16 MiB 0.151 for a link of
 * 0.197; a gap that wide delays the first batch unless its own requests
 * stay small). Not with BATCHFS_DEBUG_MERGE_GAP (the sweep: one gap). */
#define FAR_GAP	    ((uint64_t)16 << 20)
#define FAR_BATCHES 4

/* The bytes of ds's remote files. */
static uint64_t remote_bytes(const struct bfs_dataset *ds)
{
	uint64_t n = 0;

	for (size_t i = 0; i < bfs_dataset_nfiles(ds); i++)
		if (bfs_source_file_remote(bfs_dataset_file(ds, i)))
			n += bfs_dataset_file(ds, i)->size;
	return n;
}

/* Wide gaps far ahead (FAR_GAP), said in the log. */
static void far_gap(const struct model *mt)
{
	bfs_objects_far_gap(mt->objects, FAR_GAP,
			    FAR_BATCHES * bfs_order_lanes(mt->order));
	bfs_log(BFS_LOG_INFO, "remote",
		"the cache holds the objects and an epoch reads nearly every "
		"chunk: fetches of batches more than %d past the readers "
		"merge over gaps of up to %llu MiB",
		FAR_BATCHES, (unsigned long long)(FAR_GAP >> 20));
}

/* The share of its remote chunks the order reads each epoch, about: each
 * chunk holds chunk / row bytes rows (of the widest field), each read
 * with the share of samples an epoch reads (its lanes together). */
static double chunks_read(const struct model *mt)
{
	const struct bfs_dataset *ds = mt->ds;
	uint64_t n = bfs_dataset_samples(ds), row = 1;
	double f, k;

	for (size_t i = 0; i < bfs_dataset_nfields(ds); i++)
		if (bfs_dataset_field(ds, i)->row_bytes > row)
			row = bfs_dataset_field(ds, i)->row_bytes;
	f = n ? (double)bfs_order_len(mt->order) *
		    (double)bfs_order_lanes(mt->order) *
		    (double)bfs_order_batch_rows(mt->order, 0) / (double)n
	      : 0;
	f = f > 1 ? 1 : f;
	k = (double)BFS_CACHE_CHUNK_DEFAULT / (double)row;
	return k <= 1 ? f : 1 - pow(1 - f, k);
}

/* The memory policy (BATCHFS_DEBUG_NO_WARM: none; BATCHFS_DEBUG_COLD: as
 * if the data did not fit, so rows of big fields are read with
 * O_DIRECT), the fetch over fs/reader's backend (--reader) and the
 * read-ahead of mt's batches, into c. 0 or -errno (logged: a reader that
 * cannot be had). */
static int start_cold(struct cold *c, const struct mount_opts *m,
		      const struct model *mt)
{
	const struct bfs_memory_opts mo = {
	    .policy = !getenv("BATCHFS_DEBUG_NO_WARM"),
	    .assume_cold = getenv("BATCHFS_DEBUG_COLD") != NULL,
	};
	struct bfs_fetch_backend *be = NULL;
	struct bfs_readahead_opts ro = {
	    .order = mt->order, .memory = c->memory, .fetch = NULL};
	int rc = bfs_memory_create(&c->memory, mt->ds, &mo);

	if (rc == 0)
		rc = bfs_reader_backend(&be, mt->ds, m->reader,
					bfs_memory_cold(c->memory));
	if (rc == 0 && mt->objects) { /* remote files: fetched, wrapping be */
		uint64_t limit = bfs_objects_limit(mt->objects);

		rc = bfs_fetch_remote_backend(&be, mt->ds, mt->objects, be);
		/* ahead as far as half the cache's bound holds */
		ro.bytes = limit ? limit / 2 : (uint64_t)4 << 30;
		ro.granule = BFS_CACHE_CHUNK_DEFAULT;
		/* a bound the objects pass: eviction by the order's next
		 * uses, planned for batches whose chunks are 8 times it */
		if (limit && limit < remote_bytes(mt->ds))
			ro.plan_bytes = 8 * limit < PLAN_BYTES_MAX
					    ? 8 * limit
					    : PLAN_BYTES_MAX;
		/* the cache holds it all and an epoch reads nearly every
		 * chunk: past the first batches, fetch over wide gaps */
		else if (chunks_read(mt) >= 0.9 &&
			 !getenv("BATCHFS_DEBUG_MERGE_GAP"))
			far_gap(mt);
	}
	if (rc == 0)
		rc = bfs_fetch_create(&c->fetch, mt->ds, be); /* owns be */
	ro.memory = c->memory;
	ro.fetch = c->fetch;
	if (rc == 0)
		rc = bfs_readahead_create(&c->readahead, mt->ds, &ro);
	return rc;
}

/* After the serve that used them: the read-ahead first (its thread reads
 * through the fetch and asks the memory policy). */
static void stop_cold(struct cold *c)
{
	bfs_readahead_destroy(c->readahead);
	bfs_fetch_destroy(c->fetch);
	bfs_memory_destroy(c->memory); /* stops the read-in */
	memset(c, 0, sizeof(*c));
}

static void describe_opts(struct mount_opts *m, enum bfs_serve_mode mode);

/* 'n' bytes for people: "6.7 MB", "1.2 GB". */
static const char *size_text(char *out, size_t len, uint64_t n)
{
	if (n >= 1000000000)
		snprintf(out, len, "%.3g GB", (double)n / 1e9);
	else if (n >= 1000000)
		snprintf(out, len, "%.3g MB", (double)n / 1e6);
	else
		snprintf(out, len, "%" PRIu64 " bytes", n);
	return out;
}

/* The remote objects' cache, for the mount's line: ", cache DIR (at most
 * SIZE, WHERE FROM)"; "" without remote sources. */
static void cache_said(const struct model *mt, char *out, size_t len)
{
	uint64_t limit = mt->objects ? bfs_objects_limit(mt->objects) : 0;
	char size[32], share[16];

	snprintf(share, sizeof(share), "%d/%d ", BFS_CACHE_FREE_SHARE_NUM,
		 BFS_CACHE_FREE_SHARE_DEN);
	out[0] = 0;
	if (!mt->objects)
		return;
	if (!limit)
		snprintf(out, len, ", cache %.900s (no bound)",
			 bfs_objects_dir(mt->objects));
	else
		snprintf(out, len, ", cache %.900s (at most %s, %s%s)",
			 bfs_objects_dir(mt->objects),
			 size_text(size, sizeof(size), limit),
			 bfs_objects_limit_from_free(mt->objects) ? share : "",
			 bfs_objects_limit_from_free(mt->objects)
			     ? "of its filesystem's free space: --cache-gb "
			       "sets it"
			     : "--cache-gb");
}

/* The line `batchfs mount` prints once mounted, into m->summary: where,
 * batches per epoch, the serve mode, the seed the order was drawn with,
 * the remote objects' cache and its bound, the log. */
static void summarize(struct mount_opts *m, const struct model *mt,
		      enum bfs_serve_mode mode)
{
	const char *src = m->seed_source;
	char seed[160], ranks[224] = "", cache[1024];
	struct bfs_order_resume r;
	size_t n;

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
	n = strlen(ranks);
	if (bfs_order_resumes(mt->order, &r))
		snprintf(ranks + n, sizeof(ranks) - n,
			 " (epoch %" PRIu64 ": %" PRIu64
			 ", the rest after position %" PRIu64 " of %u ranks' "
			 "list)",
			 r.epoch, bfs_order_epoch_len(mt->order, r.epoch),
			 r.pos, r.world);
	cache_said(mt, cache, sizeof(cache));
	snprintf(m->summary, sizeof(m->summary),
		 "batchfs: mounted %s: %" PRIu64
		 " batches per epoch%s, serve mode %s, %s%s, log %s",
		 m->mountpoint, bfs_order_len(mt->order), ranks,
		 bfs_serve_mode_name(mode), seed, cache, m->log.path);
}

/* The daemon's descriptors: its soft limit raised to the hard one, as
 * servers do (passthrough holds a memfd per batch; the pool bounds them
 * by the limit, read again as it moves: fs/pool.h). Returns true, for
 * the pool's option. */
static bool raise_fd_limit(void)
{
	struct rlimit rl;
	rlim_t was;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return true;
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
	return true;
}

/* What the namespace says of the mount (dataset.json, README), served
 * in 'mode' ('why': the reason it was chosen). */
static struct bfs_tree_info tree_info(const struct mount_opts *m,
				      enum bfs_serve_mode mode, const char *why)
{
	const struct bfs_order_request req = request_of(m);

	return (struct bfs_tree_info){
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
		    .torch_version = m->torch_version,
		    .torch_verified = m->torch_verified,
		},
	    .perm = m->perm,
	};
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
	struct bfs_pool_opts po = {
	    .workers = m->workers,
	    .prefetch = m->prefetch,
	    .budget_bytes = m->cache_mb << 20,
	    .timeout_ms = m->timeout_s * 1000u,
	    .fds_bounded = raise_fd_limit(),
	};
	struct bfs_serve_opts so = {
	    .mode = mode,
	    .page_cache_bytes = m->pc_mb << 20,
	};
	struct bfs_tree_info ti = tree_info(m, mode, why);
	struct bfs_error err = {{0}};
	int rc;

	bfs_log_err_reset();
	if (mt->objects) { /* their threads, after the fork */
		ti.text.cache_dir = bfs_objects_dir(mt->objects);
		ti.text.cache_bytes = bfs_objects_limit(mt->objects);
		if (bfs_objects_resume(mt->objects, &err) < 0) {
			snprintf(msg, len, "cannot start serving: %s", err.msg);
			return -EIO;
		}
	}
	debug_opts(&po, &so);
	describe_opts(m, mode);
	bfs_log(BFS_LOG_INFO, "mount",
		"mounting %s on %s (pid %ld): %s; files owned by %u:%u, mode "
		"%04o",
		m->source_label, m->mountpoint, (long)getpid(), m->line,
		m->perm.uid, m->perm.gid, m->perm.read);
	rc = start_cold(&sa->cold, m, mt);
	po.readahead = sa->cold.readahead;
	po.fetch = sa->cold.fetch;
	if (rc == 0)
		rc = bfs_serve_create(&out->serve, mt->ds, mt->order,
				      &mt->layout, &po, &so, kernel);
	if (rc == 0) {
		struct bfs_stats st;

		bfs_serve_stats(out->serve, &st);
		ti.text.reader = st.pool.ra.reader; /* static, or the pool's */
		ti.text.reader_why = st.pool.ra.reader_why;
		bfs_log(BFS_LOG_INFO, "mount", "rows read ahead: %s",
			st.pool.ra.reader_why);
		rc = bfs_tree_create(&out->tree, mt->ds, mt->order, &mt->layout,
				     out->serve, &ti);
		if (rc < 0) { /* the session takes neither: its pool goes
			       * before the rooms of cold data it uses */
			bfs_serve_destroy(out->serve);
			out->serve = NULL;
		}
	}
	if (rc < 0) /* the reason a callee logged, if one did */
		snprintf(msg, len, "cannot start serving: %s",
			 *bfs_log_err_last() ? bfs_log_err_last()
					     : strerror(-rc));
	else
		summarize(m, mt, mode);
	return rc;
}

/* The options as one line for README and the log (what was asked, plus
 * defaults and the mode chosen): the seed only for an order it draws (a
 * state file names the generator instead, an order that is not random
 * has none). */
static void describe_opts(struct mount_opts *m, enum bfs_serve_mode mode)
{
	const char *src = m->seed_source;
	char ranks[128] = "", seed[PATH_MAX + 32] = "";
	size_t r;

	if (!strcmp(src, "--generator-state") || !strcmp(src, "--rng-state"))
		snprintf(seed, sizeof(seed), " %s %s", src,
			 m->gen_state ? m->gen_state : m->rng_state);
	else if (strcmp(src, "unused"))
		snprintf(seed, sizeof(seed), " --seed %" PRIu64, m->seed);
	if (m->have_world && m->ranks_arg)
		snprintf(ranks, sizeof(ranks), " --world-size %u --ranks %.40s",
			 m->world_size, m->ranks_arg);
	else if (m->have_world)
		snprintf(ranks, sizeof(ranks), " --world-size %u --rank %u",
			 m->world_size, m->rank);
	r = strlen(ranks); /* the sampler's drop_last, DataLoader's workers */
	snprintf(ranks + r, sizeof(ranks) - r, "%s%s%s%.60s",
		 m->sampler_drop_last ? " --sampler-drop-last" : "",
		 m->persistent_workers ? " --persistent-workers" : "",
		 m->resume ? " --resume-at " : "",
		 m->resume ? m->resume_arg : "");
	snprintf(m->line, sizeof(m->line),
		 "%s%.1024s%s--batch-size %" PRIu64 "%s%s%s%s --epochs %" PRIu64
		 " --workers %u --prefetch %u --cache-mb %" PRIu64
		 " --timeout %u --serve %s%s",
		 m->fields ? "--fields " : "", m->fields ? m->fields : "",
		 m->fields ? " " : "", m->batch_size,
		 m->shuffle ? " --shuffle" : "", seed,
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

/* A warning when --cache-mb cannot hold the batches --prefetch asks to
 * prepare: the pool skips a prefetch it has no room for (fs/pool.c), so
 * a budget of fewer than two batches (the one read, one ahead) prefetches
 * nothing, and one of fewer than prefetch + 1 per rank served prefetches
 * less than asked (said when --prefetch was given). */
static void warn_budget(const struct mount_opts *m, const struct model *mt)
{
	uint64_t batch = (mt->layout.max_file_size + 4095) & ~(uint64_t)4095;
	uint64_t budget = m->cache_mb << 20, fit = batch ? budget / batch : 0;
	uint64_t lanes = m->nranks ? m->nranks : 1;
	uint64_t want = lanes * (m->prefetch + 1ull), mb;

	if (!m->prefetch || !batch || fit >= want ||
	    (fit >= 2 && !m->have_prefetch))
		return;
	mb = (want * batch + (1u << 20) - 1) >> 20;
	if (fit < 2)
		warn(m,
		     "--cache-mb %" PRIu64 " holds %s batch of %" PRIu64
		     " bytes: --prefetch %u prefetches nothing (use "
		     "--cache-mb %" PRIu64 " or more for it)",
		     m->cache_mb, fit ? "one" : "not one", batch, m->prefetch,
		     mb);
	else
		warn(
		    m,
		    "--cache-mb %" PRIu64 " holds %" PRIu64
		    " batches of %" PRIu64
		    " bytes: fewer than --prefetch %u ahead of each of %" PRIu64
		    " reader%s are prepared (use --cache-mb %" PRIu64
		    " or more for them all)",
		    m->cache_mb, fit, batch, m->prefetch, lanes,
		    lanes > 1 ? "s" : "", mb);
}

/* A warning when the remote objects ('remote' bytes) exceed the cache's
 * bound ('limit'): they are fetched again as batches need them. What to
 * do: room on the directory's filesystem for a bound from its free
 * space, else a larger --cache-gb. */
static void warn_past_bound(const struct mount_opts *m, const struct model *mt,
			    uint64_t remote, uint64_t limit)
{
	const char *dir = bfs_objects_dir(mt->objects);
	char have[32], bound[32], want[32];

	size_text(have, sizeof(have), remote);
	size_text(bound, sizeof(bound), limit);
	if (bfs_objects_limit_from_free(mt->objects))
		warn(m,
		     "the remote objects (%s) exceed the cache's bound (%s, "
		     "%d/%d of the free space of the filesystem of %s): "
		     "chunks are evicted and fetched again as the batches "
		     "need them; to fetch each byte once, make room there "
		     "or choose a --cache-dir with %s free or more",
		     have, bound, BFS_CACHE_FREE_SHARE_NUM,
		     BFS_CACHE_FREE_SHARE_DEN, dir,
		     size_text(want, sizeof(want),
			       remote / BFS_CACHE_FREE_SHARE_NUM *
				   BFS_CACHE_FREE_SHARE_DEN));
	else
		warn(m,
		     "the remote objects (%s) exceed the cache's bound (%s, "
		     "--cache-gb): chunks are evicted and fetched again as "
		     "the batches need them; to fetch each byte once, use "
		     "--cache-gb %.6g or more (with that much free in %s)",
		     have, bound, (double)remote / 1e9, dir);
}

/* A warning when the remote sources exceed the cache's bound; and when
 * --cache-gb may not hold the chunks that the batches being gathered pin
 * at once: each worker pins every chunk its batch's rows touch (up to
 * 1 + a row's chunks a row), all of them at most the remote sources'
 * bytes; a batch that finds no room fails with EIO (with a bound taken
 * from the free space its rows are served from memory instead). */
static void warn_cache(const struct mount_opts *m, const struct model *mt)
{
	uint64_t limit = mt->objects ? bfs_objects_limit(mt->objects) : 0;
	uint64_t chunk = BFS_CACHE_CHUNK_DEFAULT, row = 0, remote = 0, need;
	char has[32], gb[32];

	if (!limit)
		return;
	for (size_t i = 0; i < bfs_dataset_nfiles(mt->ds); i++)
		if (bfs_source_file_remote(bfs_dataset_file(mt->ds, i)))
			remote += bfs_dataset_file(mt->ds, i)->size;
	if (remote > limit)
		warn_past_bound(m, mt, remote, limit);
	for (size_t f = 0; f < bfs_dataset_nfields(mt->ds); f++) {
		const struct bfs_field *fl = bfs_dataset_field(mt->ds, f);
		uint64_t b =
		    fl->ragged ? fl->max_len * fl->row_bytes : fl->row_bytes;

		row += ((b + chunk - 1) / chunk + 1) * chunk;
	}
	need = row * m->batch_size * m->workers;
	if (need > remote)
		need = remote;
	/* a bound from the free space: such rows are served from memory */
	if (limit < need && !bfs_objects_limit_from_free(mt->objects))
		warn(m,
		     "--cache-gb %s may not hold the 64 KiB chunks that %u "
		     "workers' batches pin at once (up to %.1f MB): a batch "
		     "that finds no room fails with EIO (use --cache-gb %s "
		     "or more, or fewer --workers)",
		     bfs_size_gb_str(has, sizeof(has), limit), m->workers,
		     (double)need / 1e6, bfs_size_gb_str(gb, sizeof(gb), need));
}

/* The options for remote sources given to a mount that has none (or,
 * --s3-endpoint, no s3:// one): they change nothing, said as the order's
 * options that change nothing are. */
static void warn_remote_only(const struct mount_opts *m)
{
	bool url = false, s3 = false;

	for (size_t i = 0; i < m->nsources; i++) {
		url = url || bfs_remote_is_url(m->sources[i]);
		s3 = s3 || !strncmp(m->sources[i], "s3://", 5);
	}
	if (m->s3_endpoint && !s3)
		warn(m, "--s3-endpoint: no effect: no source is s3://");
	if (url)
		return;
	if (m->cache_dir)
		warn(m, "--cache-dir: no effect: every source is local (it "
			"holds what is fetched of remote ones)");
	if (m->cache_bytes)
		warn(m, "--cache-gb: no effect: every source is local (it "
			"bounds the cache of remote ones)");
}

/* Right before the mount is reported ready: the warnings (options that
 * change nothing, a budget too small for --prefetch, files the mount
 * hides) and the summary line, while the caller's terminal is still
 * there; then logs go to their sink. */
static void ready(void *arg)
{
	struct session_arg *sa = arg;
	struct bfs_order_request req = request_of(sa->m);
	const char *unused[8];
	size_t n = bfs_order_request_unused(&req, unused, 8);

	for (size_t i = 0; i < n; i++)
		warn(sa->m, "%s", unused[i]);
	warn_remote_only(sa->m);
	warn_budget(sa->m, sa->model);
	warn_cache(sa->m, sa->model);
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

/* The session ended: the fetches in flight are cancelled (a worker
 * waiting on a server that does not answer must not hold the daemon's
 * exit for --timeout). */
static void stop(void *arg)
{
	struct session_arg *sa = arg;

	bfs_objects_abort(sa->model->objects);
}

/* Mount and serve the model (mount/mount.h). */
static int run(struct mount_opts *m, struct model *mt)
{
	struct session_arg sa = {m, mt, {0}};
	const struct bfs_mount_params p = {
	    .mountpoint = m->mountpoint,
	    .fuse_opts = m->fuse_o,
	    .fsname = m->fsname,
	    .fuse_threads = m->fuse_threads,
	    .foreground = m->foreground,
	    .log_failure = m->log.fd >= 0,
	    .serve = m->serve,
	    .start = start,
	    .ready = ready,
	    .stop = stop,
	    .arg = &sa,
	};
	int rc = bfs_mount_run(&p);

	stop_cold(&sa.cold); /* the session destroyed the serve */
	return rc;
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

/* What names the sources in the log, messages and mount tables: the
 * first one (a URL without its query or userinfo: they may hold
 * secrets) and how many more; fsname, its absolute path or name. */
static void name_sources(struct mount_opts *m)
{
	const char *first = m->sources[0];
	size_t n;

	if (bfs_remote_is_url(first))
		bfs_remote_url_display(m->source_label, sizeof(m->source_label),
				       first);
	else
		snprintf(m->source_label, sizeof(m->source_label), "%s", first);
	n = strlen(m->source_label);
	if (m->nsources > 1)
		snprintf(m->source_label + n, sizeof(m->source_label) - n,
			 " (and %zu more shards)", m->nsources - 1);
	if (bfs_remote_is_url(first))
		bfs_remote_url_display(m->fsname, sizeof(m->fsname), first);
	else if (!realpath(first, m->fsname)) /* open_model says why */
		snprintf(m->fsname, sizeof(m->fsname), "%s", first);
}

/* Contract: see tools/mount_compose.h. */
int bfs_mount_compose(struct mount_opts *m, void (*usage)(FILE *))
{
	struct bfs_order_request req;
	struct model mt;
	int rc;

	memset(&mt, 0, sizeof(mt));
	m->log.fd = -1;
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
	name_sources(m);
	rc = open_model(m, &mt, usage);
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
					m->mountpoint);
	if (rc == 0) {
		m->hidden = count_entries(m->mountpoint);
		bfs_mount_log_start(&m->log, m->verbose);
		if (mt.objects) /* its threads stop before the fork */
			bfs_objects_suspend(mt.objects);
		rc = run(m, &mt);
	}
	close_model(&mt);
	if (m->log.fd >= 0)
		close(m->log.fd);
	return rc;
}
