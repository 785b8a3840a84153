"""Where things are in a mount, and what to say when they are not there.

A mount's root holds dataset.json, epoch/N/batch_K (or rank/R/epoch/N/
batch_K on a mount of several ranks) and more (README.md: the namespace).
batchfs.Batches and IterableDataset want the root, batchfs_loader.Loader
one epoch's directory: given another path, they say which one they want,
with an example built from the path given.

A mount whose daemon exited answers ENOTCONN ("Transport endpoint is not
connected") until it is unmounted, and after the kernel's auto-unmount its
paths are just missing (ENOENT). MountWatch tells such a failure from any
other (the mountpoint is no longer the directory it was) so that the error
names the mount and the daemon's log instead of a batch file. A batch that
fails with EIO on a mount that is there has a reason the daemon keeps
(stats: last_error): MountWatch raises BatchReadError with it.
"""
import errno
import json
import os


class MountGoneError(OSError):
    """A batch could not be read because its mount is gone: the daemon
    exited (killed, crashed) or the mount was unmounted. str() names the
    mountpoint and the daemon's log (dataset.json's "log"); .mountpoint
    and .log hold them (None when unknown), .errno the failed call's
    (ENOTCONN while a dead mount is still attached, ENOENT after the
    kernel unmounted it). The exception it was raised from is the batch
    file's."""

    def __init__(self, message, mountpoint=None, log=None,
                 err=errno.ENOTCONN):
        # One argument is enough: torch's DataLoader re-raises a worker's
        # exception as type(e)(text).
        super().__init__(err, message)
        self.mountpoint, self.log = mountpoint, log

    def __str__(self):
        return self.strerror

    def __reduce__(self):
        return (type(self), (self.strerror, self.mountpoint, self.log,
                             self.errno))


class BatchReadError(OSError):
    """A batch could not be read (EIO) for a reason its mount gave: the
    mount's last error (stats: last_error), e.g. a source changed under
    the mount, a gather that failed, a batch not ready in time. str()
    names the batch file and that reason; .errno is EIO, .filename the
    batch file, .last_error the stats' last_error* values (a dict). The
    exception it was raised from is the read's."""

    def __init__(self, message, filename=None, last_error=None):
        # One argument is enough, as for MountGoneError.
        super().__init__(errno.EIO, message)
        self.filename, self.last_error = filename, dict(last_error or {})

    def __str__(self):
        return self.strerror

    def __reduce__(self):
        return (type(self), (self.strerror, self.filename, self.last_error))


def last_error(root):
    """The last error of the mount whose root is 'root' (its stats file's
    last_error, last_error_time, _epoch, _batch, _rank lines) as a dict;
    {} when there was none or stats cannot be read."""
    try:
        with open(os.path.join(root, "stats")) as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    got = {}
    for line in lines:
        k, _, v = line.partition(" ")
        if k.startswith("last_error"):
            got[k] = v.strip()
    return got if got.get("last_error", "-") != "-" else {}


def read_error_message(path, err, le):
    """The text of a BatchReadError: the file, the read's error and the
    mount's last error 'le' (last_error())."""
    where = ", ".join("%s %s" % (k[len("last_error_"):], le[k])
                      for k in ("last_error_rank", "last_error_epoch",
                                "last_error_batch", "last_error_time")
                      if le.get(k, "-") != "-")
    return "%s: %s: the mount's last error (%s): %s" % (
        path, err.strerror or os.strerror(errno.EIO), where,
        le["last_error"])


def gone_message(mountpoint, log):
    """The text of a MountGoneError (and of the loader's error on a mount
    that is gone)."""
    if log is None:
        where = "its log: unknown (dataset.json named none)"
    elif log == "stderr":
        where = "its log: the stderr of `batchfs mount -f`"
    else:
        where = "its log: " + log
    return ("the batchfs mount at %s is gone (the daemon exited?); %s"
            % (mountpoint, where))


class MountWatch:
    """The mount at 'path' (its root) as it was when opened: its device
    number, and the daemon's log. Picklable (DataLoader workers)."""

    def __init__(self, path, log):
        self.path, self.log = path, log
        self.dev = os.stat(path).st_dev

    def gone(self):
        """True when the mount is no longer there: the mountpoint is
        another file system (unmounted), or statfs fails (ENOTCONN: the
        daemon is dead; stat may still answer from the kernel's cache).
        Two round trips: call it on a failure, not on every read."""
        try:
            os.statvfs(self.path)
            return os.stat(self.path).st_dev != self.dev
        except OSError:
            return True

    def check(self, err, path=None):
        """Raise MountGoneError from 'err' (an OSError of a read of 'path'
        under the mount) when the mount is gone, and BatchReadError when
        it is an EIO and the mount says why (stats: last_error); return
        when neither (the caller raises err)."""
        if self.gone():
            raise MountGoneError(gone_message(self.path, self.log),
                                 self.path, self.log,
                                 err.errno or errno.ENOTCONN) from err
        if err.errno == errno.EIO:
            le = last_error(self.path)
            if le:
                path = path or err.filename or self.path
                raise BatchReadError(read_error_message(path, err, le),
                                     path, le) from err


def root_above(path):
    """The root of the mount batch file 'path' is in (root/epoch/N/batch_K
    or root/rank/R/epoch/N/batch_K), or None."""
    d = os.path.dirname(os.path.abspath(path))
    for _ in range(5):
        if _is_root(d):
            return d
        d = os.path.dirname(d)
    return None


def check_read_error(err, path):
    """Raise BatchReadError from 'err' (an OSError of a read of batch file
    'path', found without a MountWatch: read_batch) when it is an EIO and
    the mount the file is in says why (stats: last_error), as Batches
    does; return when not (the caller raises err)."""
    if err.errno != errno.EIO:
        return
    root = root_above(path)
    le = last_error(root) if root else {}
    if le:
        raise BatchReadError(read_error_message(path, err, le), path,
                             le) from err


def read_dataset(path):
    """dataset.json of the mount whose root is 'path' as a dict; None when
    'path' holds none, or one that is not batchfs's. ENOTCONN (a dead
    mount) is a MountGoneError; other errors (EACCES, ...) are raised."""
    try:
        with open(os.path.join(path, "dataset.json"), "rb") as f:
            text = f.read()
    except OSError as e:
        if e.errno == errno.ENOTCONN:
            raise MountGoneError(
                "the mount at %s is gone (%s: its FUSE daemon exited): "
                "unmount it (batchfs umount %s) and mount again"
                % (path, os.strerror(e.errno), path), path) from e
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise
    try:
        info = json.loads(text)
    except ValueError:
        return None
    if not isinstance(info, dict) or "batches_per_epoch" not in info:
        return None
    return info


def _is_root(path):
    try:
        return read_dataset(path) is not None
    except OSError:
        return False


def _inside(path):
    """(root, parts) when 'path' is at most four levels inside a mount
    (root/rank/R/epoch/N): the root and the names below it; else None."""
    d, parts = os.path.abspath(path), []
    for _ in range(4):
        d, name = os.path.split(d)
        if not name:
            return None
        parts.insert(0, name)
        if _is_root(d):
            return d, parts
    return None


def _number_after(parts, name):
    """N of ".../name/N/..." in parts, or None."""
    for i, p in enumerate(parts[:-1]):
        if p == name and parts[i + 1].isdigit():
            return int(parts[i + 1])
    return None


def dataset_of_root(path, api):
    """dataset.json of the mount whose root is 'path', for 'api' (e.g.
    "batchfs.Batches", which wants a mount's root). Another path is an
    error that says which one 'api' wants, with an example: a ValueError
    (inside a mount: the root, with epoch= and rank= from the path; a
    directory that is no mount), a FileNotFoundError (no such path);
    MountGoneError on a dead mount."""
    info = read_dataset(path)
    if info is not None:
        return info
    if not os.path.exists(path):
        raise FileNotFoundError(
            errno.ENOENT, "%s: no such directory: %s wants the directory "
            "`batchfs mount` mounted, e.g. %s('/mnt/data') after `batchfs "
            "mount data.pt /mnt/data`" % (path, api, api))
    found = _inside(path)
    if found is None:
        raise ValueError(
            "%s is not a batchfs mount (it has no batchfs dataset.json): %s "
            "wants the directory `batchfs mount` mounted, e.g. "
            "%s('/mnt/data') after `batchfs mount data.pt /mnt/data`"
            % (path, api, api))
    root, parts = found
    epoch, rank = _number_after(parts, "epoch"), _number_after(parts, "rank")
    example = "%s(%r%s%s)" % (api, root,
                              "" if epoch is None else ", epoch=%d" % epoch,
                              "" if rank is None else ", rank=%d" % rank)
    raise ValueError("%s is inside the batchfs mount at %s: %s wants the "
                     "mount's root, e.g. %s" % (path, root, api, example))


def epoch_dir_hint(path):
    """What to say when 'path', given to the loader as an epoch's
    directory, holds no batch files and is another directory of a mount:
    which one the loader wants ("... e.g. '/m/epoch/0'"). None when
    'path' is in no mount, or is an epoch's (one the mount does not
    have): the library's own message says enough."""
    if _is_root(path):
        root, parts = os.path.abspath(path), []
    else:
        found = _inside(path)
        if found is None or found[1][-2:-1] == ["epoch"]:
            return None
        root, parts = found
    try:
        info = read_dataset(root) or {}
    except OSError:
        info = {}
    rank = _number_after(parts, "rank")
    if rank is None and info.get("rank_dirs"):
        rank = (info.get("ranks") or [0])[0]
    want = os.path.join(root, "" if rank is None else "rank/%d" % rank,
                        "epoch/0")
    return ("%s is %s the batchfs mount at %s, not an epoch's directory: "
            "the loader reads one epoch's batch files, e.g. %r"
            % (path, "a directory of" if parts else "the root of", root,
               want))


def watch_epoch_dir(path):
    """A MountWatch of the mount 'path' is an epoch's directory of
    (root/epoch/N or root/rank/R/epoch/N), or None (not in a mount, or
    the mount cannot be read)."""
    found = _inside(path)
    if found is None or found[1][-2:-1] != ["epoch"]:
        return None
    try:
        return MountWatch(found[0], read_dataset(found[0]).get("log"))
    except (OSError, AttributeError):
        return None
