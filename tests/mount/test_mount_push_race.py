"""--serve push: an open of a batch that another open is still pushing
returns only once the batch is in the page cache.

Regression: the second open returned at once ("already pushed") and its
reads went to the daemon as READs, which lock the pages the first open's
store then waited for. A free FUSE thread answered them, except at
SIGTERM: the loop had stopped reading requests, the store waited forever
and the daemon never exited (test_mount_cycles, 1 of ~30 push cycles).

Here the gather of batch 3 is slowed (BATCHFS_DEBUG_GATHER_DELAY_MS); a
first process opens it and waits; a second opens it meanwhile: when its
open returns, every page of the batch must be resident (mincore over a
mapping of it, before any read), and both read the same right bytes."""
import ctypes
import mmap
import os

import mountlib as ml

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                      ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def resident_pages(fd, size):
    """Pages of the file resident in the page cache (mincore over a
    mapping of it), touching none of them."""
    addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap")
    pages = (size + 4095) // 4096
    vec = (ctypes.c_ubyte * pages)()
    rc = libc.mincore(addr, size, vec)
    err = ctypes.get_errno()
    libc.munmap(addr, size)
    if rc != 0:
        raise OSError(err, "mincore")
    return sum(v & 1 for v in vec)



def main():
    ml.require_fuse()
    try:
        import torch
    except ImportError:
        ml.skip("torch is not installed")
    path = os.path.join(ml.TMP, "race.pt")
    torch.save({"x": torch.arange(400 * 4096).reshape(400, 4096).to(
        torch.uint8)}, path)
    _, mnt = ml.mount(path, None, "--batch-size", 16, "--serve", "push",
                      "--prefetch", 0,
                      env={"BATCHFS_DEBUG_GATHER_DELAY_MS": "1500"})
    f = mnt + "/epoch/0/batch_3"
    size = os.stat(f).st_size
    r, w = os.pipe()
    first = os.fork()
    if first == 0:
        os.close(r)
        data = ml.read_file(f)
        os.write(w, b"1" if len(data) == size else b"0")
        os._exit(0)
    os.close(w)
    assert ml.wait_blocked(first), "the first open does not wait"
    fd = os.open(f, os.O_RDONLY)
    resident = resident_pages(fd, size)
    second = b"".join(iter(lambda: os.read(fd, 1 << 20), b""))
    os.close(fd)
    ok_first = os.read(r, 1) == b"1"
    os.waitpid(first, 0)
    pages = (size + 4095) // 4096
    print("second open: %d of %d pages resident when it returned"
          % (resident, pages))
    assert resident == pages, (resident, pages)
    assert ok_first and len(second) == size
    _, arrs = ml.parse_safetensors(second)
    assert arrs["x"].tobytes() == bytes(
        (i % 256) for i in range(3 * 16 * 4096, 4 * 16 * 4096))
    assert ml.umount(mnt).returncode == 0
    print("ok")


if __name__ == "__main__":
    main()
