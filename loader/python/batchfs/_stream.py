"""An epoch's batches read from its stream file (stream/N: the batch files
back to back), one open per epoch instead of one per batch."""
import json
import os

from ._batchfile import aligned, check_header

# Bytes read at once (at least: a batch and the next one's header). A
# batchfs mount answers a stream's read with direct I/O in every serve
# mode: the kernel splits it into 1 MiB requests served side by side.
CHUNK = 8 << 20
# Read past a batch so that the next one's header comes with it.
LOOKAHEAD = 64 << 10
# The longest header read (safetensors', fs/safetensors.h's
# BFS_ST_MAX_HEADER): a longer one is refused before it is read.
MAX_HEADER = 100000000


class StreamReader:
    """Batch files one after another from 'path' (a stream/N file),
    starting at byte 'offset' (index/N/offsets says where batch K starts).

    Reads go into page-aligned buffers of CHUNK bytes or more from
    alloc(size) (one read each, unbuffered; _batchfile.Buffers hands a
    buffer out again once no batch of it is held); next() returns each
    batch file's bytes as a numpy view into one of them and its header,
    checked (read_header's answer; the JSON of one layout is parsed once:
    the batches differ only in their __metadata__), so a batch costs no
    copy of its own and a buffer lives as long as some batch of it does.
    A batch cut by the end of a buffer is moved into the next one: at
    most one batch per buffer."""

    def __init__(self, path, offset=0, alloc=aligned):
        self.path = path
        self._alloc = alloc          # alloc(size): a buffer
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._pos = offset           # where the next read starts
        self._buf = aligned(0)
        self._lo = self._hi = 0
        self._heads = {}             # (n, JSON after the metadata): header

    def close(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _need(self, m):
        """At least m bytes from _lo in _buf; False at the end of the
        stream before them."""
        if self._hi - self._lo >= m:
            return True
        have = self._hi - self._lo
        new = self._alloc(max(CHUNK, m + LOOKAHEAD))
        new[:have] = self._buf[self._lo:self._hi]
        while have < m:
            n = os.preadv(self._fd, [new[have:]], self._pos)
            if not n:
                break
            have += n
            self._pos += n
        self._buf, self._lo, self._hi = new, 0, have
        return have >= m

    def preload(self, buf, n, at):
        """The next batches come from the first n bytes of 'buf': the
        stream's bytes from byte 'at' on, read by someone else (a reader
        thread of Batches: a range of whole batches, index/N/offsets
        says where they start); past them, reads go on from at + n. The
        batches before must have ended at 'at', else an OSError (the
        stream and its offsets disagree)."""
        if self._hi > self._lo or self._pos != at:
            raise OSError("%s: the batches before byte %d end at byte %d "
                          "(the stream and its index/N/offsets disagree)"
                          % (self.path, at, self._pos - self._hi + self._lo))
        self._buf, self._lo, self._hi, self._pos = buf, 0, n, at + n

    def _header(self, lo, n):
        """The checked header of the batch whose JSON is the n bytes at
        lo + 8, and the batch's size."""
        hb = bytes(self._buf[lo + 8:lo + 8 + n])
        cut = hb.find(b"}") if hb.startswith(b'{"__metadata__":{') else -1
        key = (n, hb[cut:]) if cut > 0 else None
        got = self._heads.get(key) if key else None
        if got:
            return got
        try:
            head = json.loads(hb)
            end = max([int(t["data_offsets"][1]) for k, t in head.items()
                       if k != "__metadata__"] + [0])
        except (ValueError, KeyError, TypeError, IndexError):
            raise OSError("%s: byte %d does not start a batch file"
                          % (self.path, self._pos - self._hi + lo)) \
                from None
        try:
            got = check_header(head, n, 8 + n + end), 8 + n + end
        except ValueError as e:
            raise ValueError("%s (the batch at byte %d) is not a batch "
                             "file: %s" % (self.path, self._pos - self._hi
                                           + lo, e)) from None
        if key and len(self._heads) < 64:
            self._heads[key] = got
        return got

    def next(self):
        """The next batch file's bytes (a numpy uint8 view) and its header
        checked (read_header's answer, for parse_batch's header=), or
        (None, None) at the end of the stream. A stream that ends inside
        a batch, or whose next header would be longer than MAX_HEADER, is
        an OSError."""
        if not self._need(8):
            if self._hi > self._lo:
                raise OSError("%s: %d bytes after the last batch"
                              % (self.path, self._hi - self._lo))
            return None, None
        lo = self._lo
        n = int.from_bytes(bytes(self._buf[lo:lo + 8]), "little")
        if n > MAX_HEADER:
            raise OSError("%s: byte %d: a batch header of %d bytes exceeds "
                          "the limit of %d bytes" % (
                              self.path, self._pos - self._hi + lo, n,
                              MAX_HEADER))
        if not self._need(8 + n):
            raise OSError("%s ends inside a batch header" % self.path)
        header, size = self._header(self._lo, n)
        if not self._need(size):
            raise OSError("%s ends inside a batch" % self.path)
        lo = self._lo
        self._lo = lo + size
        return self._buf[lo:lo + size], header


def stream_offsets(index_dir, k, n):
    """Where batches k..n-1 start in the stream of the epoch whose index
    directory is 'index_dir', and where batch n-1 ends (its 'offsets'
    file: line K is where batch K starts, the last line the stream's
    size): n - k + 1 numbers, or fewer when the file has fewer lines."""
    with open(index_dir + "/offsets", "rb") as f:
        f.seek(21 * k)
        text = f.read(21 * (n - k + 1))
    return [int(text[i:i + 20]) for i in range(0, len(text) - 19, 21)]


def stream_offset(index_dir, k):
    """Where batch k starts in the stream of the epoch whose index
    directory is 'index_dir' (its 'offsets' file: 20 digits and a newline
    per batch)."""
    with open(index_dir + "/offsets", "rb") as f:
        f.seek(21 * k)
        return int(f.read(20))
