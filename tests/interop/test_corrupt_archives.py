#!/usr/bin/python3
"""A real torch.save archive, corrupted in each way an attacker or a broken
disk might, is refused with a message naming the file and the reason, by
our parser (tests/bin/zipcheck: fs/zip + fs/pickle) and by `batchfs inspect`
(exit status non-zero and below 128: an error, not a crash).

Cases: truncation at several offsets, a flipped central-directory
signature, two overlapping records, a deflated record, an encrypted record,
a duplicate name, a '../' name, a data.pkl that calls os.system (plain
Python pickle), a data.pkl with a global outside the allowlist, the legacy
pre-1.6 format, a non-zip file and a central directory larger than its
records can be (refused by that limit). The intact archive must pass both."""

import os
import pickle
import struct
import subprocess
import sys
import zipfile

import torch

SRC = os.environ.get("BFS_SRC", os.getcwd())
import corrupt_zip  # noqa: E402

TMP = os.environ["BFS_TEST_TMP"]
BUILD = os.path.join(SRC, os.environ.get("BUILD", "build"))
ZIPCHECK = os.path.join(BUILD, "tests/bin/zipcheck")
BATCHFS = os.environ.get("BATCHFS", os.path.join(BUILD, "batchfs"))
failures = []


class Evil:
    """Unpickling this runs os.system('touch PWNED') in plain pickle."""

    def __reduce__(self):
        return (os.system, ("touch " + os.path.join(TMP, "PWNED"),))


def write(name, data):
    path = os.path.join(TMP, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def replace_pickle(src, name, pkl):
    """Copy 'src' with its data.pkl replaced (stored, like torch)."""
    path = os.path.join(TMP, name)
    with zipfile.ZipFile(src) as zin, \
            zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith("/data.pkl"):
                data = pkl
            zout.writestr(info.filename, data)
    return path


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def expect_refused(path, reason):
    """Both tools refuse 'path' naming it and 'reason'."""
    tools = [("zipcheck", [ZIPCHECK, path]),
             ("batchfs inspect", [BATCHFS, "inspect", path])]
    for tool, cmd in tools:
        rc, out = run(cmd)
        ok = 0 < rc < 128 and path in out and reason in out
        print("%s %-16s %-28s rc=%d %s" % ("ok  " if ok else "FAIL", tool,
              os.path.basename(path), rc, out.strip().splitlines()[-1:]))
        if not ok:
            failures.append("%s %s: want '%s' (rc %d): %s" %
                            (tool, path, reason, rc, out.strip()))


def expect_ok(path):
    for tool, cmd in [("zipcheck", [ZIPCHECK, path]),
                      ("batchfs inspect", [BATCHFS, "inspect", path])]:
        rc, out = run(cmd)
        print("%s %-16s %s rc=%d" % ("ok  " if rc == 0 else "FAIL", tool,
                                     os.path.basename(path), rc))
        if rc != 0:
            failures.append("%s refused the intact archive: %s" % (tool, out))


def main():
    if not os.access(ZIPCHECK, os.X_OK):
        print("FAIL: %s not built" % ZIPCHECK)
        return 1
    good = os.path.join(TMP, "good.pt")
    torch.save({"x": torch.arange(60, dtype=torch.float32).reshape(5, 12),
                "y": torch.arange(5)}, good)
    expect_ok(good)
    buf = open(good, "rb").read()
    recs = corrupt_zip.records(buf)
    by_name = {r.name: r for r in recs}
    d0, d1 = by_name["good/data/0"], by_name["good/data/1"]
    cd_off = min(r.cd_off for r in recs)

    # Truncation: inside the header, the data, the CD and the end records.
    for cut in (10, 100, d0.data_off + 7, cd_off + 5, len(buf) - 30,
                len(buf) - 1):
        expect_refused(write("cut_%d.pt" % cut, buf[:cut]), "truncated")

    b = bytearray(buf)
    b[by_name["good/data/1"].cd_off + 2] ^= 0xFF
    expect_refused(write("cd_sig.pt", b),
                   "bad central directory entry signature")

    # data/0 claims to run into data/1's local header.
    b = bytearray(buf)
    grow = d1.lfh_off - d0.data_off + 8
    struct.pack_into("<II", b, d0.cd_off + 20, grow, grow)
    expect_refused(write("overlap.pt", b), "overlap")

    b = bytearray(buf)
    struct.pack_into("<H", b, d0.cd_off + 10, 8)
    struct.pack_into("<H", b, d0.lfh_off + 8, 8)
    expect_refused(write("deflated.pt", b), "is compressed (method 8)")

    b = bytearray(buf)
    struct.pack_into("<H", b, d1.cd_off + 8, d1.flags | 1)
    expect_refused(write("encrypted.pt", b), "is encrypted")

    # A second record named like the first storage (at the CD and LFH).
    b = bytearray(buf)
    for off in (d1.cd_off + 46, d1.lfh_off + 30):
        b[off:off + len(d1.name)] = d0.name.encode()
    expect_refused(write("duplicate.pt", b),
                   "duplicate record name 'good/data/0'")

    b = bytearray(buf)
    for off in (d1.cd_off + 46, d1.lfh_off + 30):
        b[off:off + len(d1.name)] = b"good/../1"[:len(d1.name)].ljust(
            len(d1.name), b"x")
    expect_refused(write("dotdot.pt", b), "'..' component")

    evil = pickle.dumps(Evil(), protocol=2)
    expect_refused(replace_pickle(good, "os_system.pt", evil),
                   "refused global 'posix system'")
    evil4 = pickle.dumps(Evil(), protocol=4)
    expect_refused(replace_pickle(good, "os_system_p4.pt", evil4),
                   "refused global 'posix system'")
    expect_refused(replace_pickle(good, "eval.pt",
                                  b"\x80\x02cbuiltins\neval\nX\x01\x00\x00"
                                  b"\x001\x85R."),
                   "refused global 'builtins eval'")
    if os.path.exists(os.path.join(TMP, "PWNED")):
        failures.append("a pickle executed os.system")

    # A central directory larger than its records can be (46 bytes and 3
    # fields of at most 65535 each): refused by that limit, not read.
    b = bytearray(open(replace_pickle(good, "plain.pt", pickle.dumps(
        None)), "rb").read())
    eocd = b.rindex(b"PK\x05\x06")
    n, size = struct.unpack_from("<HI", b, eocd + 10)
    pad = n * (46 + 3 * 65535) + 1 - size
    struct.pack_into("<I", b, eocd + 12, size + pad)
    b[eocd:eocd] = bytes(pad)
    expect_refused(write("cd_huge.pt", b),
                   "central directory of %d bytes exceeds the limit of %d "
                   "bytes for %d records" % (size + pad, n * (46 + 3 * 65535),
                                             n))

    legacy = os.path.join(TMP, "legacy.pt")
    torch.save({"x": torch.ones(3)}, legacy,
               _use_new_zipfile_serialization=False)
    expect_refused(legacy, "legacy torch.save format")
    expect_refused(write("text.pt", b"this is not an archive\n" * 4),
                   "not a ZIP archive")

    if failures:
        print("\n".join(["", "FAILURES:"] + failures))
        return 1
    print("all corruptions refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
