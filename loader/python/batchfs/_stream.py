"""An epoch's batches read from its stream file (stream/N: the batch files
back to back), one open per epoch instead of one per batch."""
import json

import numpy as np

# Bytes read at once (at least: a batch and the next one's header).
CHUNK = 4 << 20
# Read past a batch so that the next one's header comes with it.
LOOKAHEAD = 64 << 10


class StreamReader:
    """Batch files one after another from 'path' (a stream/N file),
    starting at byte 'offset' (index/N/offsets says where batch K starts).

    Reads go into fresh buffers of CHUNK bytes or more (one read each,
    unbuffered); next() returns each batch file's bytes as a numpy view
    into one of them (and its header, parsed once), so a batch costs no
    copy of its own and a buffer lives as long as some batch of it does. A batch cut by the end of a
    buffer is moved into the next one: at most one batch per buffer."""

    def __init__(self, path, offset=0):
        self.path = path
        self._f = open(path, "rb", buffering=0)
        if offset:
            self._f.seek(offset)
        self._buf = bytearray()
        self._lo = self._hi = 0

    def close(self):
        self._f.close()

    def _need(self, m):
        """At least m bytes from _lo in _buf; False at the end of the
        stream before them."""
        if self._hi - self._lo >= m:
            return True
        have = self._hi - self._lo
        new = bytearray(max(CHUNK, m + LOOKAHEAD))
        new[:have] = self._buf[self._lo:self._hi]
        view = memoryview(new)
        while have < m:
            n = self._f.readinto(view[have:])
            if not n:
                break
            have += n
        self._buf, self._lo, self._hi = new, 0, have
        return have >= m

    def next(self):
        """The next batch file's bytes (a numpy uint8 view) and its header
        parsed, (head, n) for parse_batch, or (None, None) at the end of
        the stream. A stream that ends inside a batch is an OSError."""
        if not self._need(8):
            if self._hi > self._lo:
                raise OSError("%s: %d bytes after the last batch"
                              % (self.path, self._hi - self._lo))
            return None, None
        lo = self._lo
        n = int.from_bytes(self._buf[lo:lo + 8], "little")
        if not self._need(8 + n):
            raise OSError("%s ends inside a batch header" % self.path)
        lo = self._lo
        try:
            head = json.loads(bytes(self._buf[lo + 8:lo + 8 + n]))
            end = max([int(t["data_offsets"][1]) for k, t in head.items()
                       if k != "__metadata__"] + [0])
        except (ValueError, KeyError, TypeError, IndexError):
            raise OSError("%s: byte %d does not start a batch file"
                          % (self.path, self._f.tell() - self._hi + lo)) \
                from None
        if not self._need(8 + n + end):
            raise OSError("%s ends inside a batch" % self.path)
        lo = self._lo
        self._lo = lo + 8 + n + end
        return np.frombuffer(self._buf, np.uint8, 8 + n + end, lo), (head, n)


def stream_offset(index_dir, k):
    """Where batch k starts in the stream of the epoch whose index
    directory is 'index_dir' (its 'offsets' file: 20 digits and a newline
    per batch)."""
    with open(index_dir + "/offsets", "rb") as f:
        f.seek(21 * k)
        return int(f.read(20))
