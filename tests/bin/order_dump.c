/* order_dump: print the batches fs/order computes, for the golden tests.
 *
 *   order_dump --n N [--epochs E] [--batch-size B] [--shuffle] [--seed S]
 *              [--drop-last] [--sampler-drop-last] [--persistent-workers]
 *              [--num-samples M] [--replacement]
 *              [--subset FILE] [--weights FILE] [--world-size W --rank R]
 *              [--torch-compat 1.13|2.1|2.7 | --torch-version V]
 *              [--generator-state FILE] [--only E K] [--describe]
 *              [--sha256] [--resume-at E:S[:W]]
 *
 * Options mirror `batchfs mount`. The sampler is chosen as the mount does:
 * --subset → SubsetRandomSampler, --weights → WeightedRandomSampler,
 * --world-size → DistributedSampler (--shuffle = its shuffle), --shuffle /
 * --num-samples / --replacement → RandomSampler, else sequential.
 * Output: for each epoch a line "epoch E", then one line per batch with
 * its indices separated by spaces. --only prints just batch K of epoch E
 * (random access, computed first); --describe prints the PyTorch line.
 * --sha256 prints, instead of the batches, one line per epoch "epoch E
 * SHA256" of its indices as little-endian int64 (what hashlib gives for
 * torch.cat(batches).numpy().astype("<i8").tobytes()): for orders too big
 * to print, such as randperm(214748364). --resume-at: an elastic resume of
 * epoch E from position S of the list W ranks read (fs/order.h:
 * opts.resume); its epoch prints only the batches it has.
 * Exit 0, or 2 with the error message on stderr. */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "fs/order.h"
#include "fs/order_input.h"

struct args {
	struct bfs_order_opts o;
	uint64_t epochs;
	const char *subset, *weights, *state;
	int only, describe, world, sha256;
	uint64_t only_e, only_k;
};

static int usage(const char *why)
{
	fprintf(stderr, "order_dump: %s\n", why);
	return 2;
}

static int parse(struct args *a, int argc, char **argv)
{
	a->o.batch_size = 1;
	a->o.compat = BFS_TORCH_DEFAULT;
	a->epochs = 1;
	for (int i = 1; i < argc; i++) {
		const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int takes = 1;

		if (!strcmp(k, "--shuffle"))
			a->o.shuffle = true, takes = 0;
		else if (!strcmp(k, "--drop-last"))
			a->o.drop_last = true, takes = 0;
		else if (!strcmp(k, "--sampler-drop-last"))
			a->o.sampler_drop_last = true, takes = 0;
		else if (!strcmp(k, "--persistent-workers"))
			a->o.persistent_workers = true, takes = 0;
		else if (!strcmp(k, "--replacement"))
			a->o.replacement = true, takes = 0;
		else if (!strcmp(k, "--describe"))
			a->describe = 1, takes = 0;
		else if (!strcmp(k, "--sha256"))
			a->sha256 = 1, takes = 0;
		else if (!v)
			return usage("option needs a value");
		else if (!strcmp(k, "--n"))
			a->o.n = strtoull(v, NULL, 0);
		else if (!strcmp(k, "--epochs"))
			a->epochs = strtoull(v, NULL, 0);
		else if (!strcmp(k, "--batch-size"))
			a->o.batch_size = strtoull(v, NULL, 0);
		else if (!strcmp(k, "--seed"))
			a->o.seed = strtoull(v, NULL, 0);
		else if (!strcmp(k, "--num-samples"))
			a->o.num_samples = strtoull(v, NULL, 0);
		else if (!strcmp(k, "--world-size"))
			a->o.world_size = (uint32_t)strtoul(v, NULL, 0),
			a->world = 1;
		else if (!strcmp(k, "--rank"))
			a->o.rank = (uint32_t)strtoul(v, NULL, 0);
		else if (!strcmp(k, "--torch-compat"))
			a->o.compat = !strcmp(v, "1.13")  ? BFS_TORCH_1_13
				      : !strcmp(v, "2.1") ? BFS_TORCH_2_1
							  : BFS_TORCH_2_7;
		else if (!strcmp(k, "--torch-version")) {
			bool verified;

			if (bfs_torch_compat_of(v, &a->o.compat, &verified))
				return usage("--torch-version: not modelled");
		} else if (!strcmp(k, "--resume-at")) {
			char *end;

			a->o.resume = true;
			a->o.resume_epoch = strtoull(v, &end, 0);
			if (*end == ':')
				a->o.resume_pos = strtoull(end + 1, &end, 0);
			if (*end == ':')
				a->o.resume_world =
				    (uint32_t)strtoul(end + 1, &end, 0);
			if (*end)
				return usage("--resume-at: E:S[:W]");
		} else if (!strcmp(k, "--subset"))
			a->subset = v;
		else if (!strcmp(k, "--weights"))
			a->weights = v;
		else if (!strcmp(k, "--generator-state"))
			a->state = v;
		else if (!strcmp(k, "--only") && i + 2 < argc) {
			a->only = 1;
			a->only_e = strtoull(v, NULL, 0);
			a->only_k = strtoull(argv[i + 2], NULL, 0);
			i++;
		} else
			return usage("unknown option");
		i += takes;
	}
	if (a->subset)
		a->o.sampler = BFS_SAMPLER_SUBSET;
	else if (a->weights)
		a->o.sampler = BFS_SAMPLER_WEIGHTED;
	else if (a->world)
		a->o.sampler = BFS_SAMPLER_DISTRIBUTED;
	else if (a->o.shuffle || a->o.num_samples || a->o.replacement)
		a->o.sampler = BFS_SAMPLER_RANDOM;
	return 0;
}

static int load_inputs(struct args *a, struct bfs_error *err)
{
	int64_t *idx;
	double *w;
	uint8_t *st;
	size_t n;
	int rc = 0;

	if (a->subset &&
	    !(rc = bfs_order_load_indices(a->subset, &idx, &n, err))) {
		a->o.subset = idx;
		a->o.subset_len = n;
	}
	if (!rc && a->weights &&
	    !(rc = bfs_order_load_weights(a->weights, &w, &n, err))) {
		a->o.weights = w;
		a->o.weights_len = n;
	}
	if (!rc && a->state &&
	    !(rc = bfs_order_load_state(a->state, &st, &n, err))) {
		a->o.generator_state = st;
		a->o.generator_state_len = n;
	}
	return rc;
}

/* "epoch E SHA256" of epoch e's indices as little-endian int64. */
static int print_sha256(struct bfs_order *ord, uint64_t e, uint64_t *idx)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned len = 0;
	int rc = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) ? 0 : 2;

	for (uint64_t k = 0; k < bfs_order_epoch_len(ord, e) && !rc; k++) {
		struct bfs_batch_id id = {.epoch = e, .batch = k};
		uint64_t rows = bfs_order_rows(ord, id);

		rc = bfs_order_batch(ord, id, idx);
		for (uint64_t r = 0; r < rows; r++)
			idx[r] = htole64(idx[r]);
		if (!rc && !EVP_DigestUpdate(ctx, idx, rows * sizeof(*idx)))
			rc = 2;
	}
	if (!rc && EVP_DigestFinal_ex(ctx, md, &len)) {
		printf("epoch %" PRIu64 " ", e);
		for (unsigned i = 0; i < len; i++)
			printf("%02x", md[i]);
		putchar('\n');
	}
	EVP_MD_CTX_free(ctx);
	return rc ? 2 : 0;
}

static int print_batch(struct bfs_order *ord, uint64_t e, uint64_t k,
		       uint64_t *idx)
{
	struct bfs_batch_id id = {.epoch = e, .batch = k};
	uint64_t rows = bfs_order_rows(ord, id);
	int rc = bfs_order_batch(ord, id, idx);

	if (rc)
		return rc;
	for (uint64_t r = 0; r < rows; r++)
		printf(r ? " %" PRIu64 : "%" PRIu64, idx[r]);
	putchar('\n');
	return 0;
}

int main(int argc, char **argv)
{
	struct args a = {0};
	struct bfs_error err = {{0}};
	struct bfs_order *ord = NULL;
	uint64_t *idx = NULL;
	char line[1024];
	int rc = parse(&a, argc, argv);

	if (rc)
		return rc;
	rc = load_inputs(&a, &err);
	if (!rc)
		rc = bfs_order_create(&ord, &a.o, &err);
	if (rc) {
		fprintf(stderr, "order_dump: %s (%s)\n", err.msg,
			strerror(-rc));
		rc = 2;
		goto out;
	}
	idx = malloc((a.o.batch_size ? a.o.batch_size : 1) * sizeof(*idx));
	if (!idx) {
		rc = 2;
		goto out;
	}
	if (a.describe) {
		bfs_order_describe(ord, line, sizeof(line));
		printf("%s\n", line);
	}
	if (a.only) {
		rc = print_batch(ord, a.only_e, a.only_k, idx) ? 2 : 0;
		goto out;
	}
	for (uint64_t e = 0; e < a.epochs && !rc && a.sha256; e++)
		rc = print_sha256(ord, e, idx);
	for (uint64_t e = 0; e < a.epochs && !rc && !a.sha256; e++) {
		printf("epoch %" PRIu64 "\n", e);
		for (uint64_t k = 0; k < bfs_order_epoch_len(ord, e) && !rc;
		     k++)
			rc = print_batch(ord, e, k, idx) ? 2 : 0;
	}
out:
	bfs_order_destroy(ord);
	free(idx);
	free((void *)a.o.subset);
	free((void *)a.o.weights);
	free((void *)a.o.generator_state);
	return rc;
}
