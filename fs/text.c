/* fs/text: the README and dataset.json of a mount (text.h), rendered
 * once at mount: what is mounted, how to read it, and the DataLoader it
 * equals. Two passes each (measure, then write) through
 * bfs_layout_append's snprintf semantics. The README's numpy reader takes
 * its table of dtypes from fs/dtype.c's. dataset.json names a local
 * source by its absolute path, a remote one by its URL as its source
 * shows it (without secrets); with remote sources both files say where
 * the cache is and its bound. No state. */
#include "fs/text.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs/size.h"
#include "fs/source.h"

/* What the renderers read. */
struct text {
	const struct bfs_dataset *ds;
	struct bfs_order *order;
	const struct bfs_layout *layout;
	uint64_t len, epochs; /* batches per epoch; epochs (of each rank) */
};

/* A ragged field's serving in dataset.json: how, and its other tensor. */
static void json_ragged(const struct bfs_layout_field *lf,
			const struct bfs_layout_ragged *r, char *b, size_t n,
			size_t *pos)
{
	if (lf->role == BFS_LAYOUT_LENGTHS || lf->role == BFS_LAYOUT_OFFSETS) {
		bfs_layout_append(b, n, pos, ", \"%s_of\": ",
				  lf->role == BFS_LAYOUT_LENGTHS ? "lengths"
								 : "offsets");
		bfs_layout_json_str(b, n, pos, r->f->name);
		return;
	}
	bfs_layout_append(
	    b, n, pos, ", \"ragged\": \"%s\", \"max_length\": %" PRIu64,
	    r->mode == BFS_RAGGED_PAD ? "pad" : "pack", r->f->max_len);
	if (r->mode == BFS_RAGGED_PAD) {
		bfs_layout_append(b, n, pos, ", \"pad_value\": ");
		bfs_layout_json_str(b, n, pos, r->value);
		bfs_layout_append(b, n, pos, ", \"multiple\": %" PRIu64,
				  r->multiple);
	}
}

/* The tensors of a batch file, per sample; a ragged field's shape starts
 * with null (its length varies). */
static void json_fields(const struct text *t, char *b, size_t n, size_t *pos)
{
	bfs_layout_append(b, n, pos, "  \"fields\": [");
	for (size_t i = 0; i < t->layout->nfields; i++) {
		const struct bfs_layout_field *lf = &t->layout->fields[i];
		bool rows = lf->role != BFS_LAYOUT_LENGTHS &&
			    lf->role != BFS_LAYOUT_OFFSETS;

		bfs_layout_append(b, n, pos,
				  "%s\n    {\"name\": ", i ? "," : "");
		bfs_layout_json_str(b, n, pos, lf->name);
		bfs_layout_append(
		    b, n, pos,
		    ", \"dtype\": \"%s\", \"safetensors_dtype\":"
		    " \"%s\", \"shape\": [%s",
		    bfs_dtype_info(lf->dtype)->torch_name, lf->st_dtype,
		    lf->role == BFS_LAYOUT_ROWS || !rows ? "" : "null");
		for (int d = 0; rows && d < lf->f->ndim; d++)
			bfs_layout_append(
			    b, n, pos, "%s%lld",
			    d || lf->role != BFS_LAYOUT_ROWS ? ", " : "",
			    (long long)lf->f->shape[d]);
		bfs_layout_append(b, n, pos, "], \"row_bytes\": %" PRIu64,
				  rows ? lf->f->row_bytes : 8);
		if (lf->role != BFS_LAYOUT_ROWS)
			json_ragged(lf, &t->layout->ragged[lf->slot], b, n,
				    pos);
		bfs_layout_append(b, n, pos, "}");
	}
	bfs_layout_append(b, n, pos, "\n  ],\n");
}

/* Whether metadata key 'key' came before entry i of shard 'shard' (in it
 * or in a shard before it). */
static bool meta_seen(const struct bfs_dataset *ds, size_t shard, size_t i,
		      const char *key)
{
	for (size_t k = 0; k <= shard; k++) {
		struct bfs_shard_info sh;

		bfs_dataset_shard(ds, k, &sh);
		for (size_t j = 0; j < (k == shard ? i : sh.source->nmeta); j++)
			if (!strcmp(sh.source->meta[j].key, key))
				return true;
	}
	return false;
}

/* The values beside the fields, not served (fs/README.md: metadata):
 * each key path's JSON from the first shard that has it, until the
 * object passes BFS_PICKLE_META_MAX bytes. */
static void json_metadata(const struct text *t, char *b, size_t n, size_t *pos)
{
	size_t start = *pos, shown = 0;

	bfs_layout_append(b, n, pos, "  \"metadata\": {");
	for (size_t k = 0; k < bfs_dataset_nshards(t->ds); k++) {
		struct bfs_shard_info sh;

		bfs_dataset_shard(t->ds, k, &sh);
		for (size_t i = 0; i < sh.source->nmeta; i++) {
			const struct bfs_source_meta *m = &sh.source->meta[i];

			if (*pos - start > BFS_PICKLE_META_MAX)
				break;
			if (meta_seen(t->ds, k, i, m->key))
				continue;
			bfs_layout_append(b, n, pos, "%s\n    ",
					  shown++ ? "," : "");
			bfs_layout_json_str(b, n, pos, m->key);
			bfs_layout_append(b, n, pos, ": %s", m->json);
		}
	}
	bfs_layout_append(b, n, pos, "%s},\n", shown ? "\n  " : "");
}

/* Data offset of batch 0 of epoch 0 (0 rows when there is no batch; 0
 * when a ragged batch 0 cannot be measured). */
static uint64_t header_size(const struct text *t)
{
	struct bfs_layout_dims d;
	struct bfs_batch_loc at;

	if (t->len &&
	    (bfs_order_locate(t->order, (struct bfs_batch_id){0}, &at) ||
	     bfs_layout_batch_dims(t->layout, t->order, &at, &d)))
		return 0;
	if (!t->len)
		memset(&d, 0, sizeof(d));
	return bfs_layout_data_offset_dims(t->layout, &d);
}

/* What batch paths start with: "rank/{rank}/" on a multi-rank mount. */
static const char *rank_dir(const struct text *t)
{
	return bfs_order_ranked(t->order) ? "rank/{rank}/" : "";
}

/* 'path' made absolute, so that dataset.json names the file wherever it
 * is read from: its realpath (a source is open, so it exists), else the
 * working directory joined with it. */
static void absolute(const char *path, char *out, size_t len)
{
	char cwd[PATH_MAX];

	int k = -1;

	if (bfs_source_path_is_url(path)) { /* a remote source's name */
		snprintf(out, len, "%s", path);
		return;
	}
	if (realpath(path, out))
		return;
	if (path[0] != '/' && getcwd(cwd, sizeof(cwd)))
		k = snprintf(out, len, "%s/%s", cwd, path);
	if (k < 0 || (size_t)k >= len) /* too long: as it was given */
		snprintf(out, len, "%s", path);
}

/* Which torch's order: the model, the version asked for, whether it was
 * checked against that torch, and whether this order differs at all
 * between the models. */
static void json_torch(const struct text *t, const struct bfs_text_info *in,
		       char *b, size_t n, size_t *pos)
{
	enum bfs_torch_compat c = bfs_order_torch_compat(t->order);
	bool verified = in->torch_version ? in->torch_verified
					  : *bfs_torch_compat_verified(c);

	bfs_layout_append(b, n, pos,
			  ",\n  \"torch_order\": {\"model\": \"%s\", "
			  "\"torch_version\": ",
			  bfs_torch_compat_name(c));
	if (in->torch_version)
		bfs_layout_json_str(b, n, pos, in->torch_version);
	else
		bfs_layout_append(b, n, pos, "null");
	bfs_layout_append(b, n, pos,
			  ", \"verified\": %s, \"verified_with\": \"%s\", "
			  "\"differs_by_version\": %s}",
			  verified ? "true" : "false",
			  bfs_torch_compat_verified(c),
			  bfs_order_torch_differs(t->order) ? "true" : "false");
}

/* DistributedSampler's drop_last, and an elastic resume (fs/order.h:
 * opts.resume): the epoch, the position it resumes from, whose list, what
 * is left of it and its batches; null when the mount resumes nothing. */
static void json_resume(const struct text *t, char *b, size_t n, size_t *pos)
{
	struct bfs_order_resume r;

	bfs_layout_append(b, n, pos, ",\n  \"sampler_drop_last\": %s",
			  bfs_order_sampler_drop_last(t->order) ? "true"
								: "false");
	if (!bfs_order_resumes(t->order, &r)) {
		bfs_layout_append(b, n, pos, ",\n  \"resume\": null");
		return;
	}
	bfs_layout_append(b, n, pos,
			  ",\n  \"resume\": {\"epoch\": %" PRIu64
			  ", \"position\": %" PRIu64
			  ", \"world_size\": %u, \"samples_left\": %" PRIu64
			  ", \"batches\": %" PRIu64 "}",
			  r.epoch, r.pos, r.world, r.left,
			  bfs_order_epoch_len(t->order, r.epoch));
}

/* dataset.json: everything a program needs to read the batches. */
static void render_json(const struct text *t, const struct bfs_text_info *in,
			const char *torch, char *b, size_t n, size_t *pos)
{
	bfs_layout_append(b, n, pos, "{\n  \"sources\": [");
	for (size_t i = 0; i < bfs_dataset_nshards(t->ds); i++) {
		struct bfs_shard_info sh;
		char path[PATH_MAX];

		bfs_dataset_shard(t->ds, i, &sh);
		absolute(sh.path, path, sizeof(path));
		bfs_layout_append(b, n, pos, "%s", i ? ", " : "");
		bfs_layout_json_str(b, n, pos, path);
	}
	bfs_layout_append(b, n, pos, "],\n");
	json_fields(t, b, n, pos);
	json_metadata(t, b, n, pos);
	bfs_layout_append(
	    b, n, pos,
	    "  \"samples\": %" PRIu64 ",\n  \"batch_size\": %" PRIu64
	    ",\n  \"batches_per_epoch\": %" PRIu64 ",\n  \"last_batch_"
	    "size\": %" PRIu64 ",\n  \"epochs\": %" PRIu64
	    ",\n  \"drop_last\": %s,\n  \"sampler\": \"%s\",\n  "
	    "\"shuffle\": %s,\n  \"seed\": %" PRIu64
	    ",\n  \"seed_source\": \"%s\",\n  \"pytorch\": ",
	    bfs_dataset_samples(t->ds), in->batch_size, t->len,
	    t->len ? bfs_order_batch_rows(t->order, t->len - 1) : 0, t->epochs,
	    in->drop_last ? "true" : "false", in->sampler,
	    in->shuffle ? "true" : "false", in->seed, in->seed_source);
	bfs_layout_json_str(b, n, pos, torch);
	bfs_layout_append(b, n, pos, ",\n  \"options\": ");
	bfs_layout_json_str(b, n, pos, in->options ? in->options : "");
	json_torch(t, in, b, n, pos);
	bfs_layout_append(b, n, pos, ",\n  \"world_size\": %u,\n  \"ranks\": [",
			  bfs_order_world_size(t->order));
	for (size_t l = 0; l < bfs_order_lanes(t->order); l++)
		bfs_layout_append(b, n, pos, "%s%u", l ? ", " : "",
				  bfs_order_rank_of_lane(t->order, l));
	bfs_layout_append(b, n, pos, "],\n  \"rank_dirs\": %s",
			  bfs_order_ranked(t->order) ? "true" : "false");
	json_resume(t, b, n, pos);
	bfs_layout_append(b, n, pos, ",\n  \"serve_mode\": ");
	bfs_layout_json_str(b, n, pos, in->serve_mode ? in->serve_mode : "-");
	bfs_layout_append(b, n, pos, ",\n  \"serve_mode_why\": ");
	bfs_layout_json_str(b, n, pos, in->serve_why ? in->serve_why : "");
	bfs_layout_append(b, n, pos, ",\n  \"reader\": ");
	bfs_layout_json_str(b, n, pos, in->reader ? in->reader : "-");
	bfs_layout_append(b, n, pos, ",\n  \"reader_why\": ");
	bfs_layout_json_str(b, n, pos, in->reader_why ? in->reader_why : "");
	if (in->cache_dir) { /* remote sources */
		bfs_layout_append(b, n, pos, ",\n  \"cache\": {\"dir\": ");
		bfs_layout_json_str(b, n, pos, in->cache_dir);
		bfs_layout_append(b, n, pos, ", \"limit_bytes\": %" PRIu64 "}",
				  in->cache_bytes);
	}
	bfs_layout_append(b, n, pos, ",\n  \"log\": ");
	bfs_layout_json_str(b, n, pos, in->log ? in->log : "");
	bfs_layout_append(
	    b, n, pos,
	    ",\n  \"format\": \"safetensors\",\n  \"batch_"
	    "format\": \"batchfs/1\",\n  \"header_size\": %" PRIu64
	    ",\n  \"batch_path\": \"%sepoch/{epoch}/batch_{batch}"
	    "\",\n  \"index_path\": \"%sindex/{epoch}/batch_{batch}"
	    "\",\n  \"stream_path\": \"%sstream/{epoch}"
	    "\",\n  \"offsets_path\": \"%sindex/{epoch}/offsets"
	    "\"\n}\n",
	    header_size(t), rank_dir(t), rank_dir(t), rank_dir(t), rank_dir(t));
}

/* README's reader's table of dtypes, from fs/dtype.c's: every dtype a
 * batch file can hold (a safetensors code) as numpy reads it, its raw
 * bits where numpy has no such dtype (bfloat16, float8). Lines of at
 * most 80 columns. */
static void render_np(char *b, size_t n, size_t *pos)
{
	size_t col = 6; /* "NP = {" */
	bool first = true;

	bfs_layout_append(b, n, pos, "NP = {");
	for (int dt = 1; dt < BFS_DT_COUNT; dt++) {
		const struct bfs_dtype_info *di = bfs_dtype_info(dt);
		char entry[48], bits[8];
		int len;

		if (!di->st_name)
			continue; /* refused at mount */
		if (di->size == 1)
			snprintf(bits, sizeof(bits), "|u1");
		else
			snprintf(bits, sizeof(bits), "<u%zu", di->size);
		len = snprintf(entry, sizeof(entry), "\"%s\": \"%s\"",
			       di->st_name,
			       di->numpy_descr ? di->numpy_descr : bits);
		if (!first && col + 2 + (size_t)len + 1 > 80) {
			bfs_layout_append(b, n, pos, ",\n      ");
			col = 6;
		} else if (!first) {
			bfs_layout_append(b, n, pos, ", ");
			col += 2;
		}
		bfs_layout_append(b, n, pos, "%s", entry);
		col += (size_t)len;
		first = false;
	}
	bfs_layout_append(b, n, pos, "}\n#");
	for (int dt = 1; dt < BFS_DT_COUNT; dt++) {
		const struct bfs_dtype_info *di = bfs_dtype_info(dt);

		if (di->st_name && !di->numpy_descr)
			bfs_layout_append(b, n, pos, " %s", di->st_name);
	}
	bfs_layout_append(b, n, pos, ": raw bits (numpy has no such dtype)\n");
}

/* The reader in README, after its imports and NP: json + numpy only. */
static const char readme_reader[] =
    "def read_batch(path):\n"
    "    buf = open(path, \"rb\").read()        # one big read\n"
    "    n = int.from_bytes(buf[:8], \"little\")\n"
    "    head = json.loads(buf[8:8 + n]); head.pop(\"__metadata__\")\n"
    "    return {k: np.frombuffer(buf, NP[v[\"dtype\"]], "
    "offset=8 + n + v[\"data_offsets\"][0],\n"
    "                             count=int(np.prod(v[\"shape\"])))"
    ".reshape(v[\"shape\"])\n"
    "            for k, v in head.items()}\n";

/* The stream reader in README: json + numpy only, after readme_reader. */
static const char readme_stream[] =
    "def read_stream(path):                   # the batches of stream/N, "
    "in order\n"
    "    buf, pos = open(path, \"rb\").read(), 0\n"
    "    while pos < len(buf):\n"
    "        n = int.from_bytes(buf[pos:pos + 8], \"little\")\n"
    "        head = json.loads(buf[pos + 8:pos + 8 + n]); "
    "head.pop(\"__metadata__\")\n"
    "        yield {k: np.frombuffer(buf, NP[v[\"dtype\"]], offset=pos + 8 "
    "+ n + v[\"data_offsets\"][0],\n"
    "                                count=int(np.prod(v[\"shape\"])))"
    ".reshape(v[\"shape\"])\n"
    "               for k, v in head.items()}\n"
    "        pos += 8 + n + max(v[\"data_offsets\"][1] for v in "
    "head.values())\n";

/* README's words on the epochs: which iterator each is a pass of, and
 * whether persistent workers change them (bfs_order_draws_base_seed). */
static void render_epochs(const struct text *t, char *b, size_t n, size_t *pos)
{
	const char *s;

	if (!bfs_order_draws_base_seed(t->order))
		s = "Each epoch is one pass (for batch in loader:), with or "
		    "without workers,\npersistent or not: this order does not "
		    "depend on them.\n\n";
	else if (bfs_order_persistent(t->order))
		s = "Each epoch is one pass of the loader's one iterator: "
		    "persistent workers\n(any num_workers >= 1) draw the base "
		    "seed once, before epoch 0.\n\n";
	else
		s = "Each epoch is one pass of a fresh iterator (for batch in "
		    "loader:), with or\nwithout workers. persistent_workers="
		    "True draws the base seed once, so its\nepochs 1 and later "
		    "differ: mount with --persistent-workers for that "
		    "loader.\n\n";
	bfs_layout_append(b, n, pos, "%s", s);
}

/* README's words on ragged fields: which collate_fn they equal. */
static void render_ragged(const struct text *t, char *b, size_t n, size_t *pos)
{
	for (size_t i = 0; i < t->layout->nragged; i++) {
		const struct bfs_layout_ragged *r = &t->layout->ragged[i];
		const char *f = r->f->name;

		if (r->mode == BFS_RAGGED_PACK)
			bfs_layout_append(
			    b, n, pos,
			    "Ragged field %s is packed: %s is its samples' "
			    "rows back to back,\n%s.offsets (int64, B + 1) "
			    "where each starts.\n",
			    f, f, f);
		else
			bfs_layout_append(
			    b, n, pos,
			    "Ragged field %s is padded: %s = torch.nn.utils."
			    "rnn.pad_sequence(samples,\nbatch_first=True, "
			    "padding_value=%s) (length rounded up to a "
			    "multiple of %" PRIu64 "),\n%s.lengths (int64, "
			    "B) each sample's length.\n",
			    f, f, r->value, r->multiple, f);
	}
	if (t->layout->nragged)
		bfs_layout_append(b, n, pos, "\n");
}

/* README's words on a multi-rank mount's ranks. */
static void render_ranks(const struct text *t, char *b, size_t n, size_t *pos)
{
	size_t lanes = bfs_order_lanes(t->order);

	if (!bfs_order_ranked(t->order))
		return;
	bfs_layout_append(b, n, pos,
			  "Ranks: this mount serves %zu of the %u ranks (",
			  lanes, bfs_order_world_size(t->order));
	for (size_t l = 0; l < lanes; l++) {
		uint32_t r = bfs_order_rank_of_lane(t->order, l);
		size_t e = l;

		while (e + 1 < lanes && bfs_order_rank_of_lane(
					    t->order, e + 1) == r + (e + 1 - l))
			e++;
		bfs_layout_append(b, n, pos, "%s%u", l ? "," : "", r);
		if (e > l)
			bfs_layout_append(b, n, pos, "-%u",
					  bfs_order_rank_of_lane(t->order, e));
		l = e;
	}
	bfs_layout_append(
	    b, n, pos,
	    "), rank R in rank/R/.\nA training process of rank R "
	    "(torchrun's RANK) reads rank/R/ (batchfs.Batches and\n"
	    "batchfs.IterableDataset pick it from RANK and WORLD_SIZE).\n\n");
}

static void render_readme(const struct text *t, const struct bfs_text_info *in,
			  const char *torch, char *b, size_t n, size_t *pos)
{
	bool ranked = bfs_order_ranked(t->order);
	const char *R = ranked ? "rank/R/" : "", *pad = ranked ? "       " : "";
	char first_rank[32], gb[32];

	snprintf(first_rank, sizeof(first_rank), "rank/%u/",
		 bfs_order_rank_of_lane(t->order, 0));
	bfs_layout_append(
	    b, n, pos,
	    "batchfs: a dataset as a directory of training batches\n\n"
	    "Mounted on %s from %zu archive(s), %" PRIu64
	    " samples, %zu field(s).\nOptions: %s\n\n"
	    "  %sepoch/N/batch_K   batch K of epoch N: a safetensors file "
	    "(8-byte LE header\n          %s          length, JSON header, "
	    "data at byte %" PRIu64 ")\n"
	    "  %sindex/N/batch_K   its sample indices, one per line\n"
	    "  %sstream/N          epoch N's batch files back to back (batch\n"
	    "          %s          K starts at line K of index/N/offsets)\n"
	    "  dataset.json%s      fields, sizes, sampler, seed, metadata\n"
	    "  stats%s             live counters (name value)\n\n"
	    "%" PRIu64 " batches per epoch; epochs 0..%" PRIu64
	    " can be opened (ls %sepoch lists them all).\n"
	    "The batches are exactly those of this PyTorch loader "
	    "(default_collate of dict samples):\n\n  %s\n\n",
	    in->mountpoint ? in->mountpoint : "?", bfs_dataset_nshards(t->ds),
	    bfs_dataset_samples(t->ds), bfs_dataset_nfields(t->ds),
	    in->options ? in->options : "", R, pad, header_size(t), R, R, pad,
	    pad, pad, t->len, t->epochs ? t->epochs - 1 : 0, R, torch);
	render_epochs(t, b, n, pos);
	render_ranks(t, b, n, pos);
	render_ragged(t, b, n, pos);
	if (in->cache_dir && in->cache_bytes)
		bfs_layout_append(
		    b, n, pos,
		    "Remote sources are fetched ahead of the "
		    "readers, in the sampler's order, into\n%s "
		    "(at most %s GB, what is needed furthest "
		    "ahead evicted first).\n\n",
		    in->cache_dir,
		    bfs_size_gb_str(gb, sizeof(gb), in->cache_bytes));
	else if (in->cache_dir)
		bfs_layout_append(b, n, pos,
				  "Remote sources are fetched ahead of the "
				  "readers, in the sampler's order, into\n%s "
				  "(no bound: --cache-gb sets one).\n\n",
				  in->cache_dir);
	bfs_layout_append(b, n, pos,
			  "Read a batch with numpy only:\n\n"
			  "import json, numpy as np\n");
	render_np(b, n, pos);
	bfs_layout_append(
	    b, n, pos,
	    "%sbatch = read_batch(\"%s/%sepoch/0/batch_0\")\n\n"
	    "Or a whole epoch in one open, from its stream (batch "
	    "K starts at line K of\nindex/N/offsets):\n\n"
	    "%sbatches = list(read_stream(\"%s/%sstream/0\"))\n\n"
	    "Read with >= 1 MiB reads (cat, cp, np.fromfile, "
	    "readinto): small reads cost a round trip each.\n"
	    "The daemon logs to: %s\n"
	    "Unmount with: batchfs umount %s\n",
	    readme_reader, in->mountpoint ? in->mountpoint : ".",
	    bfs_order_ranked(t->order) ? first_rank : "", readme_stream,
	    in->mountpoint ? in->mountpoint : ".",
	    bfs_order_ranked(t->order) ? first_rank : "",
	    in->log ? in->log : "?",
	    in->mountpoint ? in->mountpoint : "MOUNTPOINT");
}

typedef void render_fn(const struct text *t, const struct bfs_text_info *in,
		       const char *torch, char *b, size_t n, size_t *pos);

/* Render into a fresh malloc'd string (two passes: measure, write).
 * Returns 0 or -ENOMEM. */
static int render_alloc(const struct text *t, const struct bfs_text_info *in,
			const char *torch, render_fn *fn, char **out)
{
	size_t need = 0, got = 0;

	fn(t, in, torch, NULL, 0, &need);
	*out = malloc(need + 1);
	if (!*out)
		return -ENOMEM;
	fn(t, in, torch, *out, need + 1, &got);
	return 0;
}

int bfs_text_render(const struct bfs_dataset *ds, struct bfs_order *order,
		    const struct bfs_layout *layout,
		    const struct bfs_text_info *in, char **readme, char **json)
{
	const struct text t = {ds, order, layout, bfs_order_len(order),
			       bfs_order_epochs(order)};
	char torch[1024];
	int rc;

	*readme = *json = NULL;
	bfs_order_describe(order, torch, sizeof(torch));
	rc = render_alloc(&t, in, torch, render_json, json);
	if (rc == 0)
		rc = render_alloc(&t, in, torch, render_readme, readme);
	if (rc < 0) {
		free(*json);
		*json = NULL;
	}
	return rc;
}
