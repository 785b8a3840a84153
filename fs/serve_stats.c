/* fs/serve_stats: a mount's counters (struct bfs_stats) and the stats
 * file that shows them (serve.h): one "name value" line per counter,
 * fixed width, so the file's size stays the same while the counters
 * change (the remote_* lines, fs/remote/object's, only in a mount with remote
 * sources); the pool's last error comes last, in four lines, the message
 * as it is (no padding). So the size changes when the last error does:
 * the file is read with direct I/O (a read is not cut at a size seen
 * before) and its attributes are not cached (mount/ops.c), and fs/tree
 * renders it again when it changed between sizing and filling. Below
 * the core (serve_impl.h): bfs_serve_stats and bfs_serve_render_stats
 * hand it the mount's base. */
#include "fs/serve_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The plain pool's work added to the mode's (*to): what both did. What
 * each holds stays apart, each under its budget (the mode's in
 * cache_bytes, cache_batches and shmem_bytes, against the budget and the
 * descriptors; the plain pool's in st->direct_cache_*); the workers and
 * the depth are each pool's (the mode's shown), the last error the
 * latest of the two. */
static void add_pool(struct bfs_pool_stats *to, const struct bfs_pool_stats *p)
{
	to->batches_materialized += p->batches_materialized;
	to->prefetch_hits += p->prefetch_hits;
	to->prefetch_misses += p->prefetch_misses;
	to->prefetch_skipped += p->prefetch_skipped;
	to->evictions += p->evictions;
	to->fd_limit_hits += p->fd_limit_hits;
	to->worker_busy_ns += p->worker_busy_ns;
	to->read_wait_ns += p->read_wait_ns;
	to->timeouts += p->timeouts;
	to->errors += p->errors;
	to->buffers_mapped += p->buffers_mapped;
	to->batches_advised += p->batches_advised;
	if (p->last_error.time_ns > to->last_error.time_ns)
		to->last_error = p->last_error;
}

void bfs_serve_stats_of(struct bfs_serve_base *s, struct bfs_stats *st)
{
	memset(st, 0, sizeof(*st));
	bfs_pool_stats(s->pool, &st->pool);
	if (s->plain && s->plain != s->pool) {
		struct bfs_pool_stats plain;

		bfs_pool_stats(s->plain, &plain);
		add_pool(&st->pool, &plain);
		st->direct_cache_bytes = plain.cache_bytes;
		st->direct_cache_batches = plain.cache_batches;
	}
	/* a push open that found its batch pushed ahead by a worker */
	st->pool.prefetch_hits += atomic_load(&s->c.pushed_hits);
	st->batches_opened = atomic_load(&s->c.opened);
	st->batch_reads = atomic_load(&s->c.reads);
	st->batches_served = atomic_load(&s->c.served);
	st->bytes_served = atomic_load(&s->c.bytes);
	st->batches_pushed = atomic_load(&s->c.pushed);
	st->page_cache_drops = atomic_load(&s->c.drops);
	st->page_cache_refills = atomic_load(&s->c.refills);
	st->batches_zero_copy = atomic_load(&s->c.zero_copy);
	st->backing_files = atomic_load(&s->c.backing_now);
	st->backing_opened = atomic_load(&s->c.backing_all);
	st->direct_opens = atomic_load(&s->c.direct_opens);
	st->mode = s->o.mode;
}

/* The last error: four lines (time, epoch, batch, message; "-" for
 * none; a multi-rank mount has last_error_rank too), the first three of
 * fixed width, the message as long as it is. */
static void render_last_error(const struct bfs_pool_error *le, bool ranked,
			      char *buf, size_t len, size_t *pos)
{
	char when[32] = "-", e[24] = "-", k[24] = "-", r[24] = "-";
	time_t sec = (time_t)(le->time_ns / 1000000000u);
	struct tm tm;

	if (le->time_ns && gmtime_r(&sec, &tm)) {
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
		snprintf(e, sizeof(e), "%" PRIu64, le->epoch);
		snprintf(k, sizeof(k), "%" PRIu64, le->batch);
		snprintf(r, sizeof(r), "%" PRId64, le->rank);
	}
	bfs_layout_append(buf, len, pos, "%-22s %20s\n", "last_error_time",
			  when);
	if (ranked)
		bfs_layout_append(buf, len, pos, "%-22s %20s\n",
				  "last_error_rank", r);
	bfs_layout_append(buf, len, pos, "%-22s %20s\n", "last_error_epoch", e);
	bfs_layout_append(buf, len, pos, "%-22s %20s\n", "last_error_batch", k);
	bfs_layout_append(buf, len, pos, "%-22s %.*s\n", "last_error",
			  BFS_POOL_ERROR_MAX, le->time_ns ? le->msg : "-");
}

/* Remote sources' counters (fs/remote/object), when the mount has any. */
static void render_remote(const struct bfs_objects_stats *o, char *buf,
			  size_t len, size_t *pos)
{
	const struct {
		const char *name;
		uint64_t v;
	} rows[] = {
	    {"remote_sealed", o->sealed},
	    {"remote_requests", o->requests},
	    {"remote_bytes", o->bytes},
	    {"remote_in_flight", o->in_flight},
	    {"remote_retries", o->retries},
	    {"remote_fetches", o->fetches},
	    {"remote_fetch_failures", o->fetch_failed},
	    {"remote_flight_bytes", o->flight_bytes},
	    {"remote_row_bytes", o->held_bytes},
	    {"remote_memory_bytes", o->mem_bytes},
	    {"remote_cache_hits", o->hit_chunks},
	    {"remote_cache_misses", o->miss_chunks},
	    {"remote_cache_evictions", o->evicted_chunks},
	    {"remote_cache_bytes", o->present_bytes},
	    {"remote_cache_limit", o->limit_bytes},
	};

	if (!o->objects)
		return;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		bfs_layout_append(buf, len, pos, "%-22s %20" PRIu64 "\n",
				  rows[i].name, rows[i].v);
	/* bytes fetched for each byte of rows the gathers read */
	bfs_layout_append(
	    buf, len, pos, "%-22s %20.3f\n", "remote_fetched_per_row",
	    o->held_bytes ? (double)o->fetch_bytes / (double)o->held_bytes
			  : 0.0);
}

void bfs_serve_stats_render(struct bfs_serve_base *s, const char *mode,
			    uint64_t lookups, char *buf, size_t len,
			    size_t *pos)
{
	struct bfs_stats st;
	const struct {
		const char *name;
		const uint64_t *v;
	} rows[] = {
	    {"batches_opened", &st.batches_opened},
	    {"batch_lookups", &lookups},
	    {"batch_reads", &st.batch_reads},
	    {"batches_served", &st.batches_served},
	    {"bytes_served", &st.bytes_served},
	    {"batches_materialized", &st.pool.batches_materialized},
	    {"prefetch_hits", &st.pool.prefetch_hits},
	    {"prefetch_misses", &st.pool.prefetch_misses},
	    {"prefetch_skipped", &st.pool.prefetch_skipped},
	    {"evictions", &st.pool.evictions},
	    {"cache_bytes", &st.pool.cache_bytes},
	    {"cache_batches", &st.pool.cache_batches},
	    {"cache_budget_bytes", &st.pool.cache_budget_bytes},
	    {"direct_cache_bytes", &st.direct_cache_bytes},
	    {"direct_cache_batches", &st.direct_cache_batches},
	    {"shmem_bytes", &st.pool.shmem_bytes},
	    {"worker_busy_ns", &st.pool.worker_busy_ns},
	    {"read_wait_ns", &st.pool.read_wait_ns},
	    {"read_timeouts", &st.pool.timeouts},
	    {"gather_errors", &st.pool.errors},
	    {"workers", &st.pool.workers},
	    {"prefetch_depth", &st.pool.prefetch_depth},
	    {"buffers_mapped", &st.pool.buffers_mapped},
	    {"batches_advised", &st.pool.batches_advised},
	    {"readahead_bytes", &st.pool.ra.warm_bytes},
	    {"rows_resident", &st.pool.ra.rows_resident},
	    {"rows_advised", &st.pool.ra.rows_advised},
	    {"rows_read_ahead", &st.pool.ra.rows_read},
	    {"batches_read_ahead", &st.pool.ra.batches_read},
	    {"readahead_distance", &st.pool.ra.distance},
	    {"reads_in_flight", &st.pool.ra.reads_in_flight},
	    {"bytes_read_ahead", &st.pool.ra.bytes_read},
	    {"rows_read_direct", &st.pool.ra.rows_fetched},
	    {"bytes_read_direct", &st.pool.ra.bytes_fetched},
	    {"batches_pushed", &st.batches_pushed},
	    {"page_cache_drops", &st.page_cache_drops},
	    {"page_cache_refills", &st.page_cache_refills},
	    {"batches_zero_copy", &st.batches_zero_copy},
	    {"backing_files", &st.backing_files},
	    {"backing_opened", &st.backing_opened},
	    {"direct_opens", &st.direct_opens},
	    {"batch_fds_max", &st.pool.max_fds},
	    {"batch_fd_limit_hits", &st.pool.fd_limit_hits},
	};

	bfs_serve_stats_of(s, &st);
	bfs_layout_append(buf, len, pos, "%-22s %20ld\n", "pid",
			  (long)getpid());
	bfs_layout_append(buf, len, pos, "%-22s %20s\n", "serve_mode", mode);
	bfs_layout_append(buf, len, pos, "%-22s %20s\n", "reader",
			  st.pool.ra.reader);
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		bfs_layout_append(buf, len, pos, "%-22s %20" PRIu64 "\n",
				  rows[i].name, *rows[i].v);
	render_remote(&st.pool.ra.objects, buf, len, pos);
	render_last_error(&st.pool.last_error, bfs_order_ranked(s->order), buf,
			  len, pos);
}
