/* fs/fetch_remote: fs/fetch's backend for remote sources, wrapping the
 * local one (fetch_remote.h).
 *
 * The read-ahead's pages of a batch (pick): a remote file's all (ragged
 * fields' too; none is known resident), cut at the file's end; a local
 * file's as the local backend picks them. Advice is the local backend's
 * alone (a remote file's rows are never advised); with no local file
 * there are no residency words, and advice finds every row resident (as
 * fs/reader's all-resident word, over no chunk at all).
 *
 * Sealed objects (fs/remote/object: every byte in the cache, pinned whole
 * until unmounted) are read as local files are: not held (rf_held), so
 * a gather pins nothing of them, and nothing of them picked ahead (all
 * resident). A hold that found its rows tries to seal their objects: the
 * first one after the last byte of an object came does.
 *
 * Thread-safety: immutable after creation; fs/remote/object and the local
 * backend are thread-safe. */
#include "fs/fetch_remote.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs/log.h"
#include "fs/size.h"

#define MOD "remote"

struct backend {
	struct bfs_fetch_backend be; /* first */
	struct bfs_fetch_backend *local;
	const struct bfs_dataset *ds;
	struct bfs_objects *objects;
	struct bfs_object **obj; /* [nfiles]: NULL for a local file */
	size_t nfiles;
};

static struct backend *backend_of(struct bfs_fetch_backend *be)
{
	return (struct backend *)be;
}

static struct bfs_object *obj_of(struct backend *b, size_t file)
{
	return file < b->nfiles ? b->obj[file] : NULL;
}

bool bfs_fetch_remote_any(const struct bfs_dataset *ds)
{
	for (size_t i = 0; i < bfs_dataset_nfiles(ds); i++)
		if (bfs_source_file_remote(bfs_dataset_file(ds, i)))
			return true;
	return false;
}

/* The ranges of r[0..n) from *i on that are of one file (r is sorted by
 * file), as the cache's ranges into *cr (grown as needed): how many,
 * *i moved past them. */
static size_t run_of(const struct bfs_fetch_range *r, size_t n, size_t *i,
		     struct bfs_cache_range **cr, size_t *cap)
{
	size_t k = 0, file = r[*i].file;

	for (; *i < n && r[*i].file == file; (*i)++, k++) {
		if (k == *cap) {
			struct bfs_cache_range *m =
			    realloc(*cr, (*cap * 2 + 16) * sizeof(*m));

			if (!m)
				break; /* the rest in the next run */
			*cr = m;
			*cap = *cap * 2 + 16;
		}
		(*cr)[k] = (struct bfs_cache_range){r[*i].off, r[*i].len};
	}
	return k;
}

/* Local ranges to the local backend; remote ones pinned, waited for,
 * copied from the cache file, unpinned (a sealed object's only copied). */
static int rf_read_all(struct bfs_fetch_backend *be,
		       const struct bfs_fetch_range *r, size_t n)
{
	struct backend *b = backend_of(be);
	int rc = 0;

	for (size_t i = 0; i < n && rc == 0; i++) {
		struct bfs_object *o = obj_of(b, r[i].file);
		struct bfs_cache_range cr = {r[i].off, r[i].len};

		if (!o) {
			rc = b->local
				 ? b->local->ops->read_all(b->local, &r[i], 1)
				 : -ENOSYS;
			continue;
		}
		if (bfs_object_sealed(o)) { /* there, and kept */
			rc = bfs_object_read(o, r[i].buf, r[i].off, r[i].len);
			continue;
		}
		rc = bfs_object_pin(o, &cr, 1);
		if (rc)
			continue;
		rc = bfs_object_wait(o, &cr, 1, UINT64_MAX, NULL);
		if (rc == 0)
			rc = bfs_object_read(o, r[i].buf, r[i].off, r[i].len);
		bfs_object_unpin(o, &cr, 1);
	}
	return rc < 0 ? -EIO : 0;
}

static void rf_ahead(struct bfs_fetch_backend *be, size_t file, uint64_t off,
		     uint64_t len, uint64_t when)
{
	struct backend *b = backend_of(be);
	struct bfs_object *o = obj_of(b, file);
	struct bfs_cache_range cr = {off, len};

	if (o)
		bfs_object_ahead(o, &cr, 1, when);
	else if (b->local && b->local->ahead)
		b->local->ops->ahead(b->local, file, off, len, when);
}

/* A batch's ranges, each remote file's run at once (its neighbours
 * merge), to 'plan' (planned only: bfs_object_plan) or fetched ahead
 * (bfs_object_ahead; a local file's ranges to the local backend). */
static void each_run(struct bfs_fetch_backend *be,
		     const struct bfs_fetch_range *r, size_t n, uint64_t when,
		     bool plan)
{
	struct backend *b = backend_of(be);
	struct bfs_cache_range *cr = NULL;
	size_t cap = 0;

	for (size_t i = 0; i < n;) {
		struct bfs_object *o = obj_of(b, r[i].file);
		size_t at = i, k;

		if (!o) {
			if (!plan)
				rf_ahead(be, r[i].file, r[i].off, r[i].len,
					 when);
			i++;
			continue;
		}
		k = run_of(r, n, &i, &cr, &cap);
		if (!k)
			i = at + 1; /* out of memory: skipped */
		else if (plan)
			bfs_object_plan(o, cr, k, when);
		else
			bfs_object_ahead(o, cr, k, when);
	}
	free(cr);
}

static void rf_ahead_ranges(struct bfs_fetch_backend *be,
			    const struct bfs_fetch_range *r, size_t n,
			    uint64_t when)
{
	each_run(be, r, n, when, false);
}

static void rf_plan_ranges(struct bfs_fetch_backend *be,
			   const struct bfs_fetch_range *r, size_t n,
			   uint64_t when)
{
	each_run(be, r, n, when, true);
}

/* A remote file's pages all (cut at its end), none of a sealed one's
 * (resident); a local file's as the local backend picks them (none
 * without one). */
static size_t rf_pick(struct bfs_fetch_backend *be, struct bfs_fetch_range *r,
		      size_t n, bool ragged, uint64_t *resident)
{
	struct backend *b = backend_of(be);
	struct bfs_fetch_backend *l = b->local;
	size_t m = 0;

	for (size_t i = 0; i < n; i++) {
		uint64_t size = bfs_dataset_file(b->ds, r[i].file)->size;
		struct bfs_object *o = obj_of(b, r[i].file);
		struct bfs_fetch_range one = r[i];

		if (o && bfs_object_sealed(o)) {
			(*resident)++;
			continue;
		}
		if (o && r[i].off + r[i].len > size)
			one.len = size - r[i].off;
		if (o || (l && (!l->ops->pick ||
				l->ops->pick(l, &one, 1, ragged, resident))))
			r[m++] = one;
	}
	return m;
}

/* Local files' rows to the local backend; without one (no local file,
 * or none given), every row counts as resident: no chunk to look at. */
static void rf_advise(struct bfs_fetch_backend *be, const uint64_t *idx,
		      size_t n, const bool *fields, struct bfs_fetch_tally *out)
{
	struct backend *b = backend_of(be);

	if (b->local && b->local->ops->advise)
		b->local->ops->advise(b->local, idx, n, fields, out);
	for (size_t f = 0; !b->local && f < bfs_dataset_nfields(b->ds); f++)
		out->resident += fields[f] ? n : 0;
}

static void rf_release(struct bfs_fetch_backend *be,
		       const struct bfs_fetch_range *r, size_t n)
{
	struct backend *b = backend_of(be);

	for (size_t i = 0; i < n; i++) {
		struct bfs_object *o = obj_of(b, r[i].file);
		struct bfs_cache_range cr = {r[i].off, r[i].len};

		if (o)
			bfs_object_unpin(o, &cr, 1);
	}
}

/* Pin every file's ranges (their fetches all start, each file's
 * neighbours merged), then wait for each; on a failure, let go of what
 * was pinned: -EIO, the reason logged. */
static int rf_hold(struct bfs_fetch_backend *be,
		   const struct bfs_fetch_range *r, size_t n,
		   uint64_t deadline_ns)
{
	struct backend *b = backend_of(be);
	struct bfs_error err = {{0}};
	struct bfs_cache_range *cr = NULL;
	size_t cap = 0, pinned = 0;
	uint64_t bytes = 0;
	int rc = 0;

	while (pinned < n && rc == 0) { /* [0, pinned) are pinned */
		struct bfs_object *o = obj_of(b, r[pinned].file);
		size_t i = pinned, k = o ? run_of(r, n, &i, &cr, &cap) : 0;

		rc = !o ? -EINVAL : !k ? -ENOMEM : bfs_object_pin(o, cr, k);
		if (rc == 0)
			pinned = i;
	}
	if (rc)
		bfs_error_set(&err, rc, "remote", BFS_NO_OFFSET,
			      "cannot pin rows in the cache: %s",
			      strerror(-rc));
	for (size_t i = 0; i < n && rc == 0; i++) {
		struct bfs_cache_range one = {r[i].off, r[i].len};

		rc = bfs_object_wait(obj_of(b, r[i].file), &one, 1, deadline_ns,
				     &err);
		bytes += r[i].len;
	}
	free(cr);
	if (rc == 0) {
		bfs_objects_count_held(b->objects, bytes);
		for (size_t i = 0; i < n; i++) /* each file once: r is sorted */
			if (i == 0 || r[i].file != r[i - 1].file)
				bfs_object_seal(obj_of(b, r[i].file));
		return 0;
	}
	rf_release(be, r, pinned);
	bfs_log(BFS_LOG_ERR, MOD, "%s", err.msg);
	return -EIO;
}

static bool rf_held(struct bfs_fetch_backend *be, size_t file)
{
	struct bfs_object *o = obj_of(backend_of(be), file);

	return o && !bfs_object_sealed(o);
}

static void rf_now(struct bfs_fetch_backend *be, uint64_t when)
{
	bfs_objects_set_now(backend_of(be)->objects, when);
}

static void rf_remote_stats(struct bfs_fetch_backend *be,
			    struct bfs_objects_stats *out)
{
	bfs_objects_stats(backend_of(be)->objects, out);
}

static void rf_stats(struct bfs_fetch_backend *be,
		     struct bfs_fetch_backend_stats *out)
{
	struct backend *b = backend_of(be);

	memset(out, 0, sizeof(*out));
	if (b->local)
		b->local->ops->stats(b->local, out);
}

static void rf_destroy(struct bfs_fetch_backend *be)
{
	struct backend *b = backend_of(be);

	if (b->local)
		b->local->ops->destroy(b->local);
	free(b->obj);
	free(b);
}

static const struct bfs_fetch_ops remote_ops = {
    .name = "remote",
    .read_all = rf_read_all,
    .ahead = rf_ahead,
    .ahead_ranges = rf_ahead_ranges,
    .pick = rf_pick,
    .plan_ranges = rf_plan_ranges,
    .hold = rf_hold,
    .release = rf_release,
    .advise = rf_advise,
    .held = rf_held,
    .now = rf_now,
    .remote_stats = rf_remote_stats,
    .stats = rf_stats,
    .destroy = rf_destroy,
};

int bfs_fetch_remote_backend(struct bfs_fetch_backend **out,
			     const struct bfs_dataset *ds,
			     struct bfs_objects *objects,
			     struct bfs_fetch_backend *local)
{
	struct backend *b = calloc(1, sizeof(*b));
	uint64_t limit = bfs_objects_limit(objects);
	char bound[64] = "no bound", gb[32];

	*out = NULL;
	if (b)
		b->obj = calloc(bfs_dataset_nfiles(ds) + 1, sizeof(*b->obj));
	if (!b || !b->obj) {
		if (local)
			local->ops->destroy(local);
		if (b)
			free(b);
		return -ENOMEM;
	}
	b->be.ops = &remote_ops;
	for (size_t i = 0; local && i < bfs_dataset_nfiles(ds); i++)
		if (!bfs_source_file_remote(bfs_dataset_file(ds, i)))
			b->local = local; /* a local file: it reads it */
	if (local && !b->local)
		local->ops->destroy(local);
	local = b->local;
	b->ds = ds;
	b->objects = objects;
	b->nfiles = bfs_dataset_nfiles(ds);
	for (size_t i = 0; i < b->nfiles; i++)
		b->obj[i] = bfs_dataset_file(ds, i)->remote;
	b->be.rows = local && local->rows; /* local fields only */
	b->be.ahead = true;		   /* remote ranges always */
	if (limit)
		snprintf(bound, sizeof(bound), "at most %s GB",
			 bfs_size_gb_str(gb, sizeof(gb), limit));
	if (snprintf(b->be.why, sizeof(b->be.why),
		     "remote objects: rows fetched ahead in the sampler's "
		     "order into the cache %s (%s)%s%s",
		     bfs_objects_dir(objects), bound,
		     local ? "; local files: " : "",
		     local ? local->why : "") >= (int)sizeof(b->be.why))
		bfs_log_ellipsize(b->be.why, sizeof(b->be.why));
	b->be.no_ahead = local && !local->ahead ? local->no_ahead : NULL;
	*out = &b->be;
	return 0;
}
