"""batchfs: a dataset mounted as a directory of training batches, from
Python. Pure Python over the mount (numpy; torch optional):

    import batchfs
    with batchfs.mount("data.pt", "/mnt/data", batch_size=256,
                       shuffle=True, seed=7) as m:
        batches = m.batches(device="cpu")          # dicts of tensors
        for epoch in range(10):
            for batch in batches:                  # each pass: next epoch
                ...

    # or, for DataLoader-based trainers (any num_workers):
    loader = batchfs.DataLoader(batchfs.IterableDataset("/mnt/data"),
                                num_workers=4)
    loader.load_state_dict(saved)              # resuming: where it was
    for batch in loader:
        saved = loader.state_dict()            # the next batch the loop sees

- mount(archive, mountpoint, **options) -> Mount: `batchfs mount` (a
  context manager; .umount(), .dataset, .stats(), .log, .batches()).
- Batches(mountpoint, epoch=0, start_batch=0, device=None, rank=None,
  stream=None, zero_copy=False, whole_dataset=False, readers=None): the
  batches, epoch after epoch, as dicts of numpy arrays or torch tensors
  (read into memory of their own, the fastest way the mount has: small
  batches from the epoch's stream, others with one O_DIRECT read per
  batch file; zero_copy=True: mapped), read ahead by 'readers' threads
  (half the online CPUs, 4 to 8; 1: none) and handed out in order;
  len(), set_epoch(), state_dict()
  / load_state_dict(). Under torchrun (WORLD_SIZE > 1) a mount without
  ranks is a ValueError naming the options that split it, unless
  whole_dataset=True.
- IterableDataset(mountpoint, ...): the same for DataLoader(ds,
  batch_size=None) (needs torch); with a plain DataLoader and workers its
  state_dict() raises (the main process cannot know the position).
- DataLoader(ds, **DataLoader options): torch's DataLoader for an
  IterableDataset, whose state_dict() / load_state_dict() / set_epoch()
  are exact with workers too: it counts the batches the loop receives.
- resume_state(states): of every rank's state_dict(), the one all ranks
  reached; a job restarted on another number of GPUs loads it on a mount
  made with --resume-at (load_state_dict() says the command otherwise).
- read_batch(path, device=None, zero_copy=True): one batch file (a file
  that is not one is a ValueError saying so).
- MountGoneError (an OSError): a mount gone while reading from it (its
  daemon exited); it names the mount and the daemon's log.
- BatchReadError (an OSError, EIO): a batch the mount could not serve,
  with the reason it gives (stats: last_error, e.g. a source changed),
  from Batches and read_batch alike.
- Loader: the GPU loader (libbatchfs_loader through ctypes; pinned ring,
  asynchronous copies), batchfs_loader.Loader (needs torch).

loader/python/batchfs/README.md says why the package lives there.
"""
from ._batchfile import NP, read_batch
from ._batches import Batches
from ._elastic import resume_state
from ._mount import Mount, MountError, find_batchfs, mount
from ._paths import BatchReadError, MountGoneError


def _version():
    """batchfs's version, kept in one place (tools/version.h): written into
    _installed.py by make install, into _built.py by pip's build of the
    wheel (loader/python/pyproject.toml), else read from the source tree
    this package lives in."""
    try:
        from ._installed import VERSION
        return VERSION
    except ImportError:
        pass
    try:
        from ._built import VERSION
        return VERSION
    except ImportError:
        pass
    import os
    import re
    h = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                     "..", "tools", "version.h")
    try:
        with open(h) as f:
            return re.search(r'#define BFS_VERSION "([^"]+)"',
                             f.read()).group(1)
    except (OSError, AttributeError):
        return "unknown"


__version__ = _version()
__all__ = ["mount", "Mount", "MountError", "MountGoneError",
           "BatchReadError", "Batches",
           "IterableDataset", "DataLoader", "read_batch", "find_batchfs",
           "Loader", "LoaderError", "NP", "resume_state"]


def __getattr__(name):
    """What needs torch is imported when first used."""
    if name in ("IterableDataset", "DataLoader"):
        from . import _torch
        return getattr(_torch, name)
    if name in ("Loader", "LoaderError"):
        import batchfs_loader
        return getattr(batchfs_loader, name)
    raise AttributeError("module 'batchfs' has no attribute %r" % name)
