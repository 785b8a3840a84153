#!/usr/bin/python3
"""What the Python package says when something is off:
- batchfs.mount() of a torch.save archive with metadata (values that are
  not tensors, skipped with a warning) that fails raises MountError whose
  text is the error, not the warning printed before it (.warnings has
  the warning);
- batchfs.mount() that works emits `batchfs mount`'s warnings (the
  metadata, --seed without --shuffle) with warnings.warn, each with one
  prefix ("batchfs mount: --seed: ...", "batchfs[source]: ...: values
  beside the tensors", not "batchfs mount: batchfs[source]: ..."), and
  keeps them in Mount.warnings;
- RANK=3 WORLD_SIZE=2 on a mount `--world-size 2 --ranks all` is a
  ValueError saying that RANK is not below the world size (not "mount
  with --ranks all", which it is);
- a batch whose source changed under the mount raises BatchReadError (an
  OSError, EIO) that carries the reason the mount gives (stats:
  last_error: the source changed), not a bare EIO: from Batches.read and
  from read_batch alike (read_batch raised the bare OSError);
- a stream whose next batch declares a header past the limit (2^40
  bytes) is an OSError naming the file, the byte and the limit."""
import errno
import os
import re
import struct
import time
import warnings

import mountlib as ml

import torch

import batchfs

ml.require_fuse()
TMP = ml.TMP
N, B = 40, 4


def archive(name, seed=0, meta=True):
    g = torch.Generator().manual_seed(seed)
    d = {"x": torch.randint(0, 1000, (N, 3), generator=g), "y": torch.arange(N)}
    if meta:
        d["name"] = "demo"
    path = os.path.join(TMP, name)
    torch.save(d, path)
    day_ago = time.time() - 86400     # a rewrite moves the mtime
    os.utime(path, (day_ago, day_ago))
    return path


def mountpoint(name):
    d = os.path.join(TMP, name)
    os.makedirs(d, exist_ok=True)
    return d


def mount_error_is_the_error_not_a_warning(path):
    try:
        batchfs.mount(path, mountpoint("fails"), batch_size=B, pad="nosuch")
        raise AssertionError("mounted with --pad nosuch")
    except batchfs.MountError as ex:
        assert ex.returncode in (1, 2), ex.returncode
        assert "nosuch" in str(ex), (str(ex), ex.stderr)
        assert "metadata" not in str(ex), (str(ex), ex.stderr)
        assert any("not served (metadata" in w for w in ex.warnings), \
            ex.warnings


def mount_warnings_are_python_warnings(path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m = batchfs.mount(path, mountpoint("warns"), batch_size=B, seed=3)
    try:
        said = [str(w.message) for w in caught]
        assert any("--seed" in w and "shuffle" in w for w in said), said
        assert any("not served (metadata" in w for w in said), said
        for w in said:   # one prefix each: "batchfs mount: " or a module's
            assert re.match(r"batchfs( mount|\[\w+\]): ", w), w
            assert not re.match(r"batchfs[^:]*: (warning: )?batchfs", w), w
        assert len(m.warnings) == 2, m.warnings
        assert any("--seed" in w for w in m.warnings), m.warnings
        assert all(w.category is UserWarning for w in caught)
    finally:
        m.umount()


def rank_not_below_world_size(path):
    m = batchfs.mount(path, mountpoint("ranks"), batch_size=B, shuffle=True,
                      seed=1, world_size=2, ranks="all")
    saved = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE")}
    try:
        os.environ.update(RANK="3", WORLD_SIZE="2")
        try:
            batchfs.Batches(m.path)
            raise AssertionError("RANK=3 WORLD_SIZE=2 accepted")
        except ValueError as ex:
            text = str(ex)
            assert "RANK=3" in text and "world size is 2" in text, text
            assert "below WORLD_SIZE=2" in text, text
            assert "--ranks all" not in text, text
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v
        m.umount()


def changed_source_says_why(path):
    m = batchfs.mount(path, mountpoint("changes"), batch_size=B,
                      shuffle=True, seed=2, prefetch=0)
    try:
        b = batchfs.Batches(m.path)
        b.read(0, 0)
        torch.save({"x": torch.randint(0, 1000, (N, 3)),
                    "y": torch.arange(N) + 1, "name": "demo"}, path)
        try:
            b.read(5, 1)
            raise AssertionError("a batch gathered after the change read")
        except batchfs.BatchReadError as ex:
            assert isinstance(ex, OSError) and ex.errno == errno.EIO, ex
            text = str(ex)
            assert "changed under the mount" in text, text
            assert "epoch/5/batch_1" in text, text
            assert ex.last_error["last_error_epoch"] == "5", ex.last_error
            assert ex.filename.endswith("epoch/5/batch_1"), ex.filename
        for zero_copy in (True, False):
            path = "%s/epoch/6/batch_%d" % (m.path, 2 + zero_copy)
            try:
                batchfs.read_batch(path, zero_copy=zero_copy)
                raise AssertionError("read_batch of %s read" % path)
            except batchfs.BatchReadError as ex:
                assert isinstance(ex, OSError) and ex.errno == errno.EIO
                assert "changed under the mount" in str(ex), str(ex)
                assert ex.filename == path, (ex.filename, path)
    finally:
        m.umount()


def stream_header_past_the_limit_says_so():
    """A stream whose next batch declares a header of 2^40 bytes is an
    OSError naming the file, the byte and the limit (it was a
    MemoryError: the header was allocated before it was checked)."""
    from batchfs._stream import StreamReader
    path = os.path.join(TMP, "stream0")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", 1 << 40) + b'{"x":')
    try:
        StreamReader(path).next()
        raise AssertionError("a header of 2^40 bytes read")
    except OSError as ex:
        want = "%s: byte 0: a batch header of %d bytes exceeds the limit " \
            "of 100000000 bytes" % (path, 1 << 40)
        assert str(ex) == want, (str(ex), want)


def main():
    path = archive("meta.pt")
    mount_error_is_the_error_not_a_warning(path)
    mount_warnings_are_python_warnings(path)
    rank_not_below_world_size(archive("plain.pt", meta=False))
    changed_source_says_why(archive("changes.pt", 1))
    stream_header_past_the_limit_says_so()
    print("ok")


main()
