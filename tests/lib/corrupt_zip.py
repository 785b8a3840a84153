#!/usr/bin/python3
"""ZIP helpers for the archive-corruption and libzip-differential tests.

  records(buf)            -> central-directory records of a torch archive
                             (our own small parser, so tests know where
                             each header field lives)
  zero_crcs(buf)          -> the archive with every CRC-32 set to 0, as
                             torch >= 2.6 writes with compute_crc32=False
  write_torch_layout(path, recs)
                          -> writes records the way torch 1.13's miniz does
                             (fs/README.md: torch.save archives): LFH with
                             zero CRC/sizes, flags 0x0808, torch's LFH ZIP64
                             field, 'FB' padding to 64, data descriptors,
                             ZIP64 CD extras, ZIP64 end records. Data of a
                             record given as an int size is left as a hole
                             (sparse file); given as (size, [(offset,
                             bytes)]), a hole with those bytes written in.
  save_big(path, numel)   -> a torch archive holding {'small': int32[4],
                             'big': uint8[numel], 'tail': int64[3]} with
                             data.pkl pickled by torch itself; the big data
                             stays a hole, so a > 4 GiB archive costs no disk.

CLI:  corrupt_zip.py big PATH [NUMEL]
"""

import ctypes
import struct
import sys
import zlib

U32 = 0xFFFFFFFF


class Record:
    """One central-directory entry and where its fields are in the file."""

    def __init__(self, name, cd_off, lfh_off, size, crc, method, flags):
        self.name, self.cd_off, self.lfh_off = name, cd_off, lfh_off
        self.size, self.crc, self.method, self.flags = size, crc, method, flags
        self.data_off = None


def records(buf):
    """Central-directory records of 'buf' (a torch archive), CD order."""
    eocd = buf.rindex(b"PK\x05\x06")
    n, cd_size, cd_off = struct.unpack_from("<HII", buf, eocd + 10)
    if buf[eocd - 20:eocd - 16] == b"PK\x06\x07":
        e64 = struct.unpack_from("<Q", buf, eocd - 12)[0]
        n, cd_size, cd_off = struct.unpack_from("<QQQ", buf, e64 + 32)
    out, pos = [], cd_off
    for _ in range(n):
        (flags, method, crc, csize, usize, nlen, xlen, klen, lho) = \
            struct.unpack_from("<4xxxxxHHxxxxIIIHHH8xI", buf, pos)
        name = buf[pos + 46:pos + 46 + nlen].decode()
        extra = buf[pos + 46 + nlen:pos + 46 + nlen + xlen]
        fields = [usize, csize, lho]
        i = 0
        while i + 4 <= len(extra):
            hid, hlen = struct.unpack_from("<HH", extra, i)
            if hid == 1:
                vals = iter(struct.unpack_from("<%dQ" % (hlen // 8), extra,
                                               i + 4))
                fields = [next(vals) if f == U32 else f for f in fields]
            i += 4 + hlen
        r = Record(name, pos, fields[2], fields[0], crc, method, flags)
        ln, lx = struct.unpack_from("<HH", buf, r.lfh_off + 26)
        r.data_off = r.lfh_off + 30 + ln + lx
        out.append(r)
        pos += 46 + nlen + xlen + klen
    return out


def zero_crcs(buf):
    """A copy of archive 'buf' with every CRC-32 0, in the central directory
    and in the data descriptors (torch >= 2.6, compute_crc32=False)."""
    out = bytearray(buf)
    for r in records(bytes(buf)):
        struct.pack_into("<I", out, r.cd_off + 16, 0)
        if r.size:  # the data descriptor's CRC too
            struct.pack_into("<I", out, r.data_off + r.size + 4, 0)
    return bytes(out)


def _extra_lfh(cursor, name, size):
    """torch's LFH extra: ZIP64 field (sizes / LFH offset) then 'FB' pad."""
    z64 = b""
    if size >= U32 or cursor >= U32:
        body = b""
        if size >= U32:
            body += struct.pack("<QQ", size, size)
        if cursor >= U32:
            body += struct.pack("<Q", cursor)
        z64 = struct.pack("<HH", 1, len(body)) + body
    start = cursor + 30 + len(name) + len(z64) + 4
    pad = (64 - start % 64) % 64
    return z64 + struct.pack("<HH", 0x4246, pad) + b"Z" * pad


def write_torch_layout(path, recs):
    """recs: [(name, bytes | int | (int, [(int, bytes)]))]; an int is a size
    left as a hole, (size, chunks) a hole with each chunk's bytes written at
    its offset in the record. Holes get CRC 0 (not computed)."""
    cd = []
    with open(path, "wb") as f:
        for name, data in recs:
            nb = name.encode()
            cursor = f.tell()
            if isinstance(data, int):
                data = (data, [])
            if isinstance(data, tuple):
                size, chunks, crc = data[0], data[1], 0
            else:
                size, chunks, crc = len(data), [(0, data)], zlib.crc32(data)
            flags = 0x0808 if size else 0x0800
            extra = _extra_lfh(cursor, nb, size)
            f.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 0, flags, 0, 0,
                                0, 0, 0, 0, len(nb), len(extra)))
            f.write(nb + extra)
            start = f.tell()
            assert start % 64 == 0, "torch aligns record data to 64"
            for off, b in chunks:
                f.seek(start + off)
                f.write(b)
            f.seek(start + size)
            if size:
                if size >= U32 or cursor >= U32:
                    f.write(struct.pack("<IIQQ", 0x08074B50, crc, size, size))
                else:
                    f.write(struct.pack("<IIII", 0x08074B50, crc, size, size))
            cd.append((nb, cursor, size, crc, flags))
        cd_off = f.tell()
        for nb, lho, size, crc, flags in cd:
            body = b""
            if size >= U32:
                body += struct.pack("<QQ", size, size)
            if lho >= U32:
                body += struct.pack("<Q", lho)
            extra = struct.pack("<HH", 1, len(body)) + body if body else b""
            s32 = U32 if size >= U32 else size
            f.write(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0, 0, flags,
                                0, 0, 0, crc, s32, s32, len(nb), len(extra),
                                0, 0, 0, 0, min(lho, U32)))
            f.write(nb + extra)
        cd_end = f.tell()
        n, cd_size = len(cd), cd_end - cd_off
        f.write(struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 0x031E, 45, 0, 0,
                            n, n, cd_size, cd_off))
        f.write(struct.pack("<IIQI", 0x07064B50, 0, cd_end, 1))
        f.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n, n,
                            min(cd_size, U32), min(cd_off, U32), 0))


class _RecordingZip:
    """Stands in for torch's PyTorchFileWriter in torch.serialization._save:
    keeps data.pkl, reads small storages through their data pointer and
    leaves big ones as holes (their bytes are never touched)."""

    def __init__(self):
        self.recs = []

    def write_record(self, name, data, size):
        if isinstance(data, (bytes, bytearray)):
            data = bytes(data)
        elif size < (1 << 20):
            data = ctypes.string_at(data, size)
        else:
            data = int(size)
        self.recs.append(("big/" + name, data))


def save_big(path, numel):
    """A > 4 GiB torch archive whose big storage is a hole (sparse)."""
    import torch  # only here: the ZIP helpers above work without torch

    obj = {
        "small": torch.arange(4, dtype=torch.int32),
        "big": torch.empty(numel, dtype=torch.uint8),  # never touched
        "tail": torch.arange(3, dtype=torch.int64),
    }
    rz = _RecordingZip()
    torch.serialization._save(obj, rz, torch.serialization.pickle, 2)
    # PyTorchFileWriter adds the version record when it closes.
    recs = rz.recs + [("big/version", b"3\n")]
    write_torch_layout(path, recs)
    return recs


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "big":
        numel = int(sys.argv[3]) if len(sys.argv) > 3 else (1 << 32) + 64
        for name, data in save_big(sys.argv[2], numel):
            print(name, data if isinstance(data, int) else len(data))
    else:
        sys.exit(__doc__)
