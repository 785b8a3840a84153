#!/usr/bin/python3
"""An archive larger than 4 GiB, in torch's exact ZIP64 layout
(fs/README.md: torch.save archives), written sparse: the
payloads are holes except a few rows near the start and the end, so it costs
almost no disk and no time. Fields: x uint8 [N, 64] with N*64 = 2^32 + 64
bytes (a record >= 4 GiB: ZIP64 sizes), then y int64 [N] whose local header
lies beyond 4 GiB (ZIP64 header offset, torch's non-standard LFH field).

Checks: Python's zipfile reads the layout we wrote (independent check of the
writer); `batchfs inspect --json` reports N and the shapes; `-v` lists the
records at the offsets zipfile sees; gathering rows near the end (and the
start) gives the bytes written there. Skips (77) only when the temp
filesystem cannot hold a sparse 4.5 GiB file."""
import errno
import json
import os
import struct
import subprocess
import sys
import zipfile

from corrupt_zip import write_torch_layout

TMP = os.environ["BFS_TEST_TMP"]
BATCHFS = os.environ["BATCHFS"]
GATHER = os.path.join(os.environ.get("BUILD", "build"), "tests", "bin", "gather")
if not os.path.isabs(GATHER):
    GATHER = os.path.join(os.environ["BFS_SRC"], GATHER)

ROW = 64
N = (2 ** 32 + 64) // ROW  # 67,108,865 samples


def pickle_dict(tensors):
    """Protocol-2 data.pkl for {name: _rebuild_tensor_v2(...)} as torch
    writes it (LONG1 for values >= 2^31)."""
    def u(s):
        b = s.encode()
        return b"X" + struct.pack("<I", len(b)) + b

    def i(v):
        if 0 <= v < 2 ** 31:
            return b"J" + struct.pack("<i", v)
        return b"\x8a\x08" + struct.pack("<q", v)

    out = b"\x80\x02}("
    for name, storage, key, numel, size, stride in tensors:
        out += u(name) + b"ctorch._utils\n_rebuild_tensor_v2\n(("
        out += u("storage") + b"ctorch\n" + storage.encode() + b"\n"
        out += u(key) + u("cpu") + i(numel) + b"tQ" + i(0) + b"("
        out += b"".join(i(s) for s in size) + b"t("
        out += b"".join(i(s) for s in stride) + b"t\x89"
        out += b"ccollections\nOrderedDict\n)RtR"
    return out + b"u."


def row_x(i):
    return bytes(((i * 31 + k * 7) & 0xFF) for k in range(ROW))


def main():
    path = os.path.join(TMP, "big.pt")
    marked = [0, 1, 2, N - 3, N - 2, N - 1]
    try:
        pkl = pickle_dict([
            ("x", "ByteStorage", "0", N * ROW, [N, ROW], [ROW, 1]),
            ("y", "LongStorage", "1", N, [N], [1])])
        write_torch_layout(path, [
            ("big/data.pkl", pkl),
            ("big/data/0", (N * ROW, [(i * ROW, row_x(i)) for i in marked])),
            ("big/data/1", (N * 8, [(i * 8, struct.pack("<q", -i * 1000003))
                                    for i in marked])),
            ("big/version", b"3\n")])
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            print("skip: temp filesystem cannot hold a sparse 4.5 GiB file: %s" % e)
            sys.exit(77)
        raise
    size = os.path.getsize(path)
    used = os.stat(path).st_blocks * 512
    print("archive: %d bytes apparent, %d bytes on disk" % (size, used))
    assert size > 2 ** 32 + 2 ** 29

    with zipfile.ZipFile(path) as z:  # the writer is right (independent reader)
        infos = {i.filename: i for i in z.infolist()}
        assert infos["big/data/0"].file_size == N * ROW
        assert infos["big/data/1"].header_offset >= 2 ** 32
        assert z.read("big/version") == b"3\n"

    r = subprocess.run([BATCHFS, "inspect", "--json", path], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"samples": N, "fields": [
        {"name": "x", "dtype": "uint8", "shape": [N, ROW]},
        {"name": "y", "dtype": "int64", "shape": [N]}]}, r.stdout
    r = subprocess.run([BATCHFS, "inspect", "-v", path], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    assert r.returncode == 0, r.stderr
    seen = 0
    for line in r.stdout.decode().splitlines():
        parts = line.split()
        if parts and parts[0] in infos:
            seen += 1
            i = infos[parts[0]]
            assert int(parts[2]) == i.file_size, line
            # data offset = header + 30 + name + extra (read the LFH)
            with open(path, "rb") as f:
                f.seek(i.header_offset + 26)
                n, m = struct.unpack("<HH", f.read(4))
            assert int(parts[1]) == i.header_offset + 30 + n + m, line
    assert seen == len(infos), r.stdout
    r = subprocess.run([BATCHFS, "inspect", "--verify", path], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    out = r.stdout.decode()
    assert r.returncode == 0 and "big/data/0: crc not computed" in out, (out, r.stderr)
    print("ok inspect: N=%d, record offsets agree with zipfile" % N)

    order = [N - 1, 0, N - 2, 2, N - 3, 1, N - 1]
    ipath = os.path.join(TMP, "idx.txt")
    open(ipath, "w").write(" ".join(map(str, order)))
    r = subprocess.run([GATHER, ipath, path], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    assert r.returncode == 0, r.stderr
    want = b"".join(row_x(i) for i in order) + \
        b"".join(struct.pack("<q", -i * 1000003) for i in order)
    assert r.stdout == want, "rows near the end differ"
    # An unwritten row (a hole) reads as zeros.
    open(ipath, "w").write(str(N // 2))
    r = subprocess.run([GATHER, ipath, path], stdout=subprocess.PIPE)
    assert r.returncode == 0 and r.stdout == bytes(ROW + 8)
    print("ok gathered rows %s of a %d-byte archive" % (order, size))


main()
