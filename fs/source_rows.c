/* fs/source_rows: a source's sample count, and its tensors of another
 * first dimension as metadata (fs/README.md: the sample count).
 *
 * The count is the first dimension shared by the most fields too large
 * to be metadata (more than META_NUMEL elements), then by the most
 * fields; two counts alike in both are a tie, refused naming every field,
 * its first dimension and the --fields that serves each count. A ragged
 * pair NAME.values + NAME.offsets does not count: it is a field whatever
 * its length (fs/dataset checks its offsets against the count), and the
 * count of fields all ragged is len(offsets) - 1 of the first. A tensor of
 * another first dimension (a mean of 3 channels, class weights) is metadata:
 * its values as nested lists, read when it has at most META_NUMEL elements
 * within META_SPAN bytes of its storage and the source's tensors' JSON stays
 * within META_JSON; else its dtype and shape, the warning saying why. Its view
 * must lie inside its storage either way, as a field's must. Values are
 * read with pread, or from the mapping for bytes in memory and a remote
 * file (made present first: bfs_source_ensure). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs/size.h"
#include "fs/source_impl.h"

#define META_NUMEL	1024 /* elements rendered, at most */
#define META_NUMEL_TEXT "1024"
#define META_SPAN	(64u << 10)	    /* storage bytes read for one */
#define META_JSON	BFS_PICKLE_META_MAX /* JSON of all of a source's */

/* Room for the fields a tie names, and the --fields it suggests. */
#define TIE_NAMES  300
#define TIE_ADVICE 160

/* What a tensor counts as: its field's samples, whether it votes (a
 * ragged pair's tensors do not: they are always fields), and whether it
 * is too large to be metadata. */
struct count {
	uint64_t n;
	bool votes, ragged, big;
};

/* The tensor 'name' with 'from' replaced by 'to' (".values" for
 * ".offsets"), among those of the same left_out; SIZE_MAX if none. */
static size_t partner(const struct bfs_source *s, size_t i, const char *from,
		      const char *to)
{
	const char *name = s->tensors[i].name;
	size_t n = strlen(name), k = strlen(from), stem = n - k;

	if (n <= k || strcmp(name + stem, from))
		return SIZE_MAX;
	for (size_t j = 0; j < s->ntensors; j++) {
		const char *o = s->tensors[j].name;

		if (j != i &&
		    s->tensors[j].left_out == s->tensors[i].left_out &&
		    !strncmp(o, name, stem) && !strcmp(o + stem, to))
			return j;
	}
	return SIZE_MAX;
}

static bool too_big(const struct bfs_source_tensor *t)
{
	uint64_t numel;

	return bfs_size_prod(t->size, t->ndim, &numel) || numel > META_NUMEL;
}

/* Every tensor's count into c[]: a ragged pair's both by its offsets. */
static void count_all(const struct bfs_source *s, struct count *c)
{
	for (size_t i = 0; i < s->ntensors; i++) {
		const struct bfs_source_tensor *t = &s->tensors[i];
		size_t v = partner(s, i, ".offsets", ".values");

		c[i].n = (uint64_t)t->size[0];
		c[i].ragged = v != SIZE_MAX ||
			      partner(s, i, ".values", ".offsets") != SIZE_MAX;
		c[i].votes = !c[i].ragged;
		c[i].big = too_big(t);
		if (v != SIZE_MAX)
			c[i].n = t->size[0] > 0 ? (uint64_t)t->size[0] - 1 : 0;
	}
	for (size_t i = 0; i < s->ntensors; i++) {
		size_t o = partner(s, i, ".values", ".offsets");

		if (o != SIZE_MAX)
			c[i].n = c[o].n;
	}
}

static int by_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The --fields ITEM list serving the voters of count n: "P" when they
 * are exactly the tensors under a dict "P.", else their names. */
static void advice(const struct bfs_source *s, const struct count *c,
		   uint64_t n, char *buf, size_t len)
{
	const char *first = NULL;
	size_t at = 0, p = 0;
	bool prefix = true;

	for (size_t i = 0; i < s->ntensors; i++)
		if (!s->tensors[i].left_out && c[i].votes && c[i].n == n) {
			first = s->tensors[i].name;
			break;
		}
	if (first && strchr(first, '.'))
		p = (size_t)(strchr(first, '.') - first) + 1;
	for (size_t i = 0; i < s->ntensors && p; i++) {
		const struct bfs_source_tensor *t = &s->tensors[i];
		bool under = !strncmp(t->name, first, p);

		if (!t->left_out && under != (c[i].n == n))
			prefix = false;
	}
	if (p && prefix) {
		snprintf(buf, len, "--fields %.*s", (int)(p - 1), first);
		return;
	}
	at = (size_t)snprintf(buf, len, "--fields ");
	for (size_t i = 0; i < s->ntensors && at < len; i++) {
		const struct bfs_source_tensor *t = &s->tensors[i];
		int k;

		if (t->left_out || !c[i].votes || c[i].n != n)
			continue;
		k = snprintf(buf + at, len - at, "%s%s",
			     buf[at - 1] == ' ' ? "" : ",", t->name);
		if (k < 0 || (size_t)k >= len - at) {
			snprintf(buf + at, len - at, ",...");
			return;
		}
		at += (size_t)k;
	}
}

/* Counts tied[0..ntied) have the best score alike: refused naming
 * every field's count and the --fields serving each. -EINVAL. */
static int tie_refused(const struct bfs_source *s, const struct count *c,
		       const uint64_t *tied, size_t ntied, bool selected,
		       struct bfs_error *err)
{
	char names[TIE_NAMES] = "", adv[TIE_ADVICE] = "";
	size_t at = 0, shown = 0, voters = 0;

	for (size_t k = 0; k < ntied; k++) {
		char one[TIE_ADVICE];
		size_t used = strlen(adv);

		advice(s, c, tied[k], one, sizeof(one));
		if (used + strlen(one) + 8 >= sizeof(adv))
			break;
		snprintf(adv + used, sizeof(adv) - used, "%s%s",
			 k ? (k + 1 == ntied ? ", or " : ", ") : "", one);
	}
	for (size_t i = 0; i < s->ntensors; i++) {
		const struct bfs_source_tensor *t = &s->tensors[i];
		int k;

		if (t->left_out || !c[i].votes)
			continue;
		voters++;
		k = snprintf(names + at, sizeof(names) - at,
			     "%sfield '%s' has %" PRIu64 " samples",
			     at ? ", " : "", t->name, c[i].n);
		if (k < 0 || at + (size_t)k + 16 >= sizeof(names)) {
			names[at] = 0;
			continue;
		}
		at += (size_t)k;
		shown++;
	}
	if (shown < voters)
		snprintf(names + at, sizeof(names) - at, ", and %zu more",
			 voters - shown);
	return bfs_error_set(err, -EINVAL, s->path, BFS_NO_OFFSET,
			     "no sample count (first dimension) is shared by "
			     "the most fields: %s; %s: %s",
			     names,
			     selected ? "--fields must name fields of one "
					"count"
				      : "serve the fields of one count",
			     adv);
}

/* The score of the voters of count n: the fields too large to be
 * metadata first, then all fields (at most BFS_MAX_FIELDS each). */
static uint64_t score(const struct bfs_source *s, const struct count *c,
		      uint64_t n)
{
	uint64_t large = 0, all = 0;

	for (size_t i = 0; i < s->ntensors; i++)
		if (!s->tensors[i].left_out && c[i].votes && c[i].n == n) {
			large += c[i].big;
			all++;
		}
	return large << 32 | all;
}

/* The sample count of the voters not left out into *n (the count of the
 * best score), or a refusal when two counts share the best score. */
static int vote(const struct bfs_source *s, const struct count *c,
		bool selected, uint64_t *n, struct bfs_error *err)
{
	uint64_t *v = malloc((s->ntensors + 1) * sizeof(*v)), best = 0;
	size_t nv = 0, ntied = 0;
	int rc = 0;

	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < s->ntensors; i++)
		if (!s->tensors[i].left_out && c[i].votes)
			v[nv++] = c[i].n;
	qsort(v, nv, sizeof(*v), by_u64);
	for (size_t i = 0; i < nv; i++) /* v[..ntied): the distinct counts */
		if (!i || v[i] != v[i - 1])
			v[ntied++] = v[i];
	for (size_t k = 0; k < ntied; k++)
		if (score(s, c, v[k]) > best)
			best = score(s, c, v[k]);
	nv = ntied;
	ntied = 0;
	for (size_t k = 0; k < nv; k++) /* v[..ntied): the best ones */
		if (score(s, c, v[k]) == best)
			v[ntied++] = v[k];
	*n = ntied ? v[0] : 0;
	for (size_t i = 0; !ntied && i < s->ntensors; i++)
		if (!s->tensors[i].left_out) { /* all ragged */
			*n = c[i].n;
			break;
		}
	if (ntied > 1)
		rc = tie_refused(s, c, v, ntied, selected, err);
	free(v);
	return rc;
}

/* Element bytes b (dtype di) in host order. */
static void swap(uint8_t *b, const struct bfs_dtype_info *di)
{
	for (size_t k = 0; di->size > 1 && k < di->size; k += di->swap_unit)
		for (size_t a = k, z = k + di->swap_unit - 1; a < z; a++, z--) {
			uint8_t x = b[a];

			b[a] = b[z];
			b[z] = x;
		}
}

/* Bounded JSON text. */
struct jbuf {
	char *p;
	size_t len, cap;
	bool full;
};

static void jput(struct jbuf *o, const char *s)
{
	size_t n = strlen(s);

	if (o->full || o->len + n >= o->cap) {
		o->full = true;
		return;
	}
	memcpy(o->p + o->len, s, n + 1);
	o->len += n;
}

/* Dims d.. of tensor t from element 'at', its storage view in b (from
 * element t->offset), as nested lists (depth at most BFS_MAX_DIMS). */
static void emit(struct jbuf *o, const struct bfs_source_tensor *t,
		 const uint8_t *b, int d, uint64_t at)
{
	const struct bfs_dtype_info *di = bfs_dtype_info(t->dtype);

	jput(o, "[");
	for (int64_t i = 0; i < t->size[d] && !o->full; i++) {
		uint64_t e = at + (uint64_t)i * (uint64_t)t->stride[d];

		if (i)
			jput(o, ", ");
		if (d + 1 < t->ndim) {
			emit(o, t, b, d + 1, e);
		} else {
			uint8_t x[16];
			char num[160];

			memcpy(x, b + (e - t->offset) * di->size, di->size);
			if (t->big_endian)
				swap(x, di);
			bfs_pickle_json_scalar(t->dtype, x, num, sizeof(num));
			jput(o, num);
		}
	}
	jput(o, "]");
}

/* The last element of t's view (strides >= 0) into *last; -EINVAL if a
 * stride is negative or the sum overflows. */
static int last_element(const struct bfs_source_tensor *t, uint64_t *last)
{
	uint64_t at = t->offset, step;

	for (int d = 0; d < t->ndim; d++) {
		if (t->size[d] <= 1)
			continue;
		if (t->stride[d] < 0 ||
		    bfs_size_mul((uint64_t)t->size[d] - 1,
				 (uint64_t)t->stride[d], &step) ||
		    bfs_size_add(at, step, &at))
			return -EINVAL;
	}
	*last = at;
	return 0;
}

/* Why tensor t cannot be rendered (NULL: it can), given the storage
 * bytes its view spans and the JSON room left. */
static const char *unrendered(const struct bfs_source_tensor *t, uint64_t numel,
			      uint64_t span, size_t room)
{
	uint64_t outer = 1;
	char num[160];
	uint8_t zero[16] = {0};

	for (int d = 0; d < t->ndim && t->size[d]; d++)
		if (bfs_size_mul(outer, (uint64_t)t->size[d], &outer))
			outer = UINT64_MAX;
	if (numel > META_NUMEL || outer > META_NUMEL)
		return "more than " META_NUMEL_TEXT " elements";
	if (bfs_pickle_json_scalar(t->dtype, zero, num, sizeof(num)))
		return "its dtype has no JSON number";
	if (span > META_SPAN)
		return "its elements lie far apart in its storage";
	if (room < 2 * numel + 2)
		return "past the 64 KiB of JSON the tensors' metadata takes";
	return NULL;
}

/* "an" before "int64", "a" before "float32". */
static const char *article(const char *word)
{
	return word[0] == 'i' ? "an" : "a";
}

/* Tensor t of s as metadata: its values as nested lists, or its dtype and
 * shape with why not. *json_used counts the source's JSON so far. */
static int tensor_meta(struct bfs_source *s, const struct bfs_source_tensor *t,
		       size_t *json_used, struct bfs_error *err)
{
	const struct bfs_dtype_info *di = bfs_dtype_info(t->dtype);
	const struct bfs_source_file *f = &s->files[t->file];
	char shape[160], what[320], *json = NULL;
	uint64_t numel = 0, last = 0, lo = 0, hi = 0, off;
	const char *why;
	struct jbuf o = {0};
	uint8_t *b = NULL;
	int rc = 0;

	bfs_size_shape_str(shape, sizeof(shape), t->size, t->ndim);
	if (!di || bfs_size_prod(t->size, t->ndim, &numel) ||
	    (numel && (last_element(t, &last) ||
		       bfs_size_mul(t->offset, di->size, &lo) ||
		       bfs_size_add(last, 1, &hi) ||
		       bfs_size_mul(hi, di->size, &hi) || hi > t->data_bytes)))
		return bfs_error_set(err, -EINVAL, f->path, t->store_off,
				     "tensor '%s' %s: its elements (offset "
				     "%" PRIu64 ") lie outside %s",
				     t->name, shape, t->offset, t->store);
	why = unrendered(t, numel, hi - lo, META_JSON - *json_used);
	if (!why) {
		o.cap = META_JSON - *json_used;
		o.p = json = malloc(o.cap);
		b = malloc(hi - lo ? hi - lo : 1);
		if (!json || !b)
			rc = -ENOMEM;
		off = (uint64_t)(t->data - f->map) + lo;
		if (!rc && numel)
			rc = bfs_source_ensure(s, t->file, off, hi - lo, err);
		if (!rc && numel && !bfs_source_file_local(f))
			memcpy(b, f->map + off, hi - lo);
		else if (!rc && numel &&
			 pread(f->fd, b, hi - lo, (off_t)off) !=
			     (ssize_t)(hi - lo))
			rc = bfs_error_set(err, -EIO, f->path, off,
					   "tensor '%s': cannot read its "
					   "elements",
					   t->name);
		if (!rc)
			emit(&o, t, b, 0, t->offset);
		if (o.full)
			why = "past the 64 KiB of JSON the tensors' metadata "
			      "takes";
	}
	free(b);
	if (!rc && why) {
		snprintf(what, sizeof(what),
			 "%s %s tensor %s, too big to render: %s",
			 article(di->torch_name), di->torch_name, shape, why);
		free(json);
		json = NULL;
		if (asprintf(&json,
			     "{\"__type__\": \"torch.Tensor\", \"dtype\": "
			     "\"%s\", \"shape\": %s, \"__omitted__\": \"%s\"}",
			     di->torch_name, shape, why) < 0)
			json = NULL, rc = -ENOMEM;
	} else if (!rc) {
		snprintf(what, sizeof(what), "%s %s tensor %s",
			 article(di->torch_name), di->torch_name, shape);
		*json_used += o.len + 1;
	}
	if (!rc)
		rc = bfs_source_meta_add(s, t->name, json, what);
	free(json);
	return rc;
}

int bfs_source_rows(struct bfs_source *s, struct bfs_error *err)
{
	struct count *c = calloc(s->ntensors + 1, sizeof(*c));
	size_t kept = 0, json_used = 0, n = s->ntensors;
	bool selected = false;
	int rc;

	if (!c)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		selected |= s->tensors[i].left_out;
	count_all(s, c);
	rc = vote(s, c, selected, &s->samples, err);
	for (size_t i = 0; i < n; i++) {
		struct bfs_source_tensor *t = &s->tensors[i];

		if (!rc && !t->left_out &&
		    (c[i].ragged || c[i].n == s->samples)) {
			s->tensors[kept++] = *t;
			continue;
		}
		if (!rc && !c[i].ragged && c[i].n != s->samples) {
			rc = tensor_meta(s, t, &json_used, err);
			s->nmeta_tensors++;
		}
		if (rc) { /* kept, for bfs_source_close */
			s->tensors[kept++] = *t;
			continue;
		}
		free(t->name);
		free(t->store);
	}
	s->ntensors = kept;
	free(c);
	return rc;
}
