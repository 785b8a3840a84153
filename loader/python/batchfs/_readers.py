"""Reading ahead in parallel: several batch files, or ranges of a stream,
read at once by threads of their own, handed out in order.

A read is a few system calls (open, one preadv sized to the file, close;
or one preadv of a stream range) which release the GIL, so N threads keep
N requests in flight at the daemon, as the C loader's readers do
(loader/README.md). The threads are a ThreadPoolExecutor made when an
iteration starts, in the process that iterates (never pickled: a
DataLoader worker makes its own), and shut down when the iteration ends,
fails or is abandoned (a break closes the generator): reads not started
are cancelled, those running finish their one read, then every thread
has exited."""
import collections
import os
from concurrent.futures import ThreadPoolExecutor

# The reader threads' names start so (threading.enumerate() shows them).
THREAD_PREFIX = "batchfs-reader"


def default_readers():
    """Reader threads by default: half the online CPUs, 4 to 8, as the C
    loader's default_readers() (loader/open.c)."""
    try:
        n = os.sysconf("SC_NPROCESSORS_ONLN") // 2
    except (ValueError, OSError):
        n = 4
    return max(4, min(8, n))


def stream_readers(readers, asked):
    """Reader threads of a stream iteration: 'readers' when the caller
    asked for them (asked), else at most half the online CPUs (1 on 2
    cores: there, reading a small-row stream in one thread was faster,
    1.28 against 0.98 GB/s with 4 threads, the parsing and the daemon
    sharing the two cores; tools/bench/RESULTS.md)."""
    if asked:
        return readers
    try:
        half = os.sysconf("SC_NPROCESSORS_ONLN") // 2
    except (ValueError, OSError):
        half = 1
    return max(1, min(readers, half))


def check_readers(readers):
    """readers= of Batches and IterableDataset: None is the default
    (default_readers()); otherwise an int of at least 1 (1: one batch at
    a time, in the iterating thread), else a ValueError."""
    if readers is None:
        return default_readers()
    try:
        n = int(readers)
    except (TypeError, ValueError):
        n = 0
    if n < 1 or n != readers:
        raise ValueError("readers=%r: the number of reader threads, 1 or "
                         "more (1: one batch at a time, no threads; None: "
                         "half the online CPUs, 4 to 8)" % (readers,))
    return n


def in_order(items, read, readers, before=None):
    """(item, future of read(item)) for each of 'items', in their order,
    with up to 'readers' reads running at once in threads of their own,
    ahead of the caller: the read of an item starts once the one
    'readers' items before it is handed out. The caller takes
    future.result(), which raises what read(item) raised, at that item's
    turn. before(item), when given, runs in the caller's thread before
    the read of item is submitted. Closing the generator (or its end)
    cancels the reads not started, waits for those running and leaves
    no thread behind."""
    it = iter(items)
    pending = collections.deque()
    pool = ThreadPoolExecutor(readers, thread_name_prefix=THREAD_PREFIX)

    def submit():
        for item in it:
            if before is not None:
                before(item)
            pending.append((item, pool.submit(read, item)))
            return True
        return False
    try:
        while len(pending) < readers and submit():
            pass
        while pending:
            item, fut = pending.popleft()
            submit()
            yield item, fut
            del fut
    finally:
        for _, fut in pending:
            fut.cancel()
        pending.clear()
        pool.shutdown(wait=True)
