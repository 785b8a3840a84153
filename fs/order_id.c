/* fs/order_id: what names a batch (fs/order.h: batch identity;
 * fs/README.md: several ranks in one mount).
 *
 * A batch is (lane, epoch, batch): the rank a lane serves, that rank's own
 * epoch, the batch of that epoch. Its position numbers every batch of
 * every lane lane-major,
 *
 *   pos = (lane x epochs + epoch) x len + batch
 *
 * (epochs: of each lane, len: batches per epoch), so a lane's batches are
 * one range [lane x epochs x len, (lane + 1) x epochs x len) and pos + 1
 * is the batch after pos, across epochs, until that range ends. An epoch
 * serial numbers the epochs the same way (lane x epochs + epoch). This
 * file is the only place that does this arithmetic; setup_epochs (order.c)
 * proved at creation that every position and serial is below 2^64 - 1,
 * so none of it wraps, and UINT64_MAX is never a position.
 *
 * Lanes serve ranks in increasing order (checked at creation), so the
 * lane of a rank is a binary search.
 *
 * Thread-safety: everything here reads what creation wrote. */
#include "fs/order_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>

size_t bfs_order_lanes(const struct bfs_order *o)
{
	return o->opt.nranks ? o->opt.nranks : 1;
}

bool bfs_order_ranked(const struct bfs_order *o)
{
	return o->opt.nranks != 0;
}

uint32_t bfs_order_rank_of_lane(const struct bfs_order *o, size_t lane)
{
	return o->opt.nranks ? o->ranks[lane] : o->opt.rank;
}

int bfs_order_lane_of_rank(const struct bfs_order *o, uint64_t r, size_t *lane)
{
	size_t lo = 0, hi = bfs_order_lanes(o);

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		uint32_t m = bfs_order_rank_of_lane(o, mid);

		if (m == r) {
			*lane = mid;
			return 0;
		}
		if (m < r)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -ENOENT;
}

uint64_t bfs_order_epochs(const struct bfs_order *o)
{
	return o->epochs;
}

uint64_t bfs_order_positions(const struct bfs_order *o)
{
	return bfs_order_lanes(o) * o->epochs * o->batches;
}

bool bfs_order_has(const struct bfs_order *o, struct bfs_batch_id id)
{
	return id.lane < bfs_order_lanes(o) && id.epoch < o->epochs &&
	       id.batch < bfs_order_epoch_len(o, id.epoch);
}

uint64_t bfs_order_pos(const struct bfs_order *o, struct bfs_batch_id id)
{
	if (!bfs_order_has(o, id))
		return UINT64_MAX;
	return bfs_order_epoch_serial(o, id) * o->batches + id.batch;
}

struct bfs_batch_id bfs_order_id(const struct bfs_order *o, uint64_t pos)
{
	uint64_t per_lane = o->epochs * o->batches;

	if (pos >= bfs_order_positions(o)) /* no such batch: no such lane */
		return (struct bfs_batch_id){.lane = bfs_order_lanes(o)};
	return (struct bfs_batch_id){.lane = (size_t)(pos / per_lane),
				     .epoch = pos % per_lane / o->batches,
				     .batch = pos % o->batches};
}

int bfs_order_locate(const struct bfs_order *o, struct bfs_batch_id id,
		     struct bfs_batch_loc *at)
{
	if (!bfs_order_has(o, id))
		return -ENOENT;
	at->id = id;
	at->pos = bfs_order_epoch_serial(o, id) * o->batches + id.batch;
	at->rows = bfs_order_rows(o, id);
	return 0;
}

int bfs_order_locate_pos(const struct bfs_order *o, uint64_t pos,
			 struct bfs_batch_loc *at)
{
	if (pos >= bfs_order_positions(o))
		return -ENOENT;
	at->id = bfs_order_id(o, pos);
	if (!bfs_order_has(o, at->id)) /* a hole: past a resumed epoch */
		return -ENOENT;
	at->pos = pos;
	at->rows = bfs_order_rows(o, at->id);
	return 0;
}

size_t bfs_order_lane_of(const struct bfs_order *o, uint64_t pos)
{
	return bfs_order_id(o, pos).lane;
}

uint64_t bfs_order_lane_end(const struct bfs_order *o, size_t lane)
{
	return (lane + 1) * o->epochs * o->batches;
}

uint64_t bfs_order_epoch_serial(const struct bfs_order *o,
				struct bfs_batch_id id)
{
	return id.lane * o->epochs + id.epoch;
}

uint64_t bfs_order_epoch_serials(const struct bfs_order *o)
{
	return bfs_order_lanes(o) * o->epochs;
}

int bfs_order_epoch_of_serial(const struct bfs_order *o, uint64_t serial,
			      struct bfs_batch_id *id)
{
	if (serial / o->epochs >= bfs_order_lanes(o))
		return -ENOENT;
	*id = (struct bfs_batch_id){.lane = (size_t)(serial / o->epochs),
				    .epoch = serial % o->epochs};
	return 0;
}

void bfs_order_batch_name(const struct bfs_order *o, struct bfs_batch_id id,
			  char *buf, size_t len)
{
	if (o->opt.nranks && id.lane < o->opt.nranks)
		snprintf(buf, len, "rank %u epoch %" PRIu64 " batch %" PRIu64,
			 bfs_order_rank_of_lane(o, id.lane), id.epoch,
			 id.batch);
	else if (o->opt.nranks) /* a caller's bug, named as it is */
		snprintf(buf, len,
			 "lane %zu epoch %" PRIu64 " batch %" PRIu64 " (none)",
			 id.lane, id.epoch, id.batch);
	else
		snprintf(buf, len, "epoch %" PRIu64 " batch %" PRIu64, id.epoch,
			 id.batch);
}
