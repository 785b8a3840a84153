"""batchfs.mount: `batchfs mount` / `batchfs umount` from Python."""
import json
import os
import shutil
import subprocess
import tempfile
import warnings

import numpy as np

_WARNING = "batchfs mount: warning: "


def _is_warning(line):
    """Whether a line `batchfs mount` printed on stderr is a warning: its
    own ("batchfs mount: warning: ...") or one its modules logged before
    the mount ("batchfs[source]: ...: 4 values beside the tensors, not
    served (metadata)")."""
    return line.startswith(_WARNING) or line.startswith("batchfs[")


class MountError(RuntimeError):
    """`batchfs mount` or `batchfs umount` failed. str() is the command's
    message (the error, not a warning printed before it); .returncode is
    its exit status (1 failure, 2 bad usage), .stderr all it printed,
    .warnings the warnings among it."""

    def __init__(self, message, returncode=1, stderr=""):
        super().__init__(message)
        self.returncode, self.stderr = returncode, stderr
        self.warnings = _warnings_of(stderr)


def _warnings_of(stderr):
    """The warnings among what `batchfs mount` printed on stderr, as their
    text (without "batchfs mount: warning: ")."""
    return [line[len(_WARNING):] if line.startswith(_WARNING) else line
            for line in stderr.splitlines() if _is_warning(line)]


def _error_of(stderr, returncode):
    """What a failed `batchfs mount` or `batchfs umount` said: its first
    line "batchfs ...: " that is not a warning (warnings may come first:
    a torch.save archive with metadata says it is skipped before any
    error), else its first line that is not a warning."""
    lines = [line for line in stderr.splitlines()
             if line.strip() and not _is_warning(line)]
    ours = [line for line in lines if line.startswith("batchfs ")]
    if ours or lines:
        return (ours or lines)[0]
    return "batchfs mount failed (exit %d)%s" % (
        returncode, ": " + stderr.strip() if stderr.strip() else "")


# Where `make install` puts the command by default (its PREFIX=/usr/local).
_DEFAULT_INSTALLED = "/usr/local/bin/batchfs"


def find_batchfs():
    """The batchfs command: $BATCHFS, else the one `make install` put
    beside this package, else build/batchfs of the source tree this file
    is in, else `batchfs` on $PATH, else make install's default place
    (/usr/local/bin). pip's wheel has no command: a package installed
    with pip finds the one `make install` installed on $PATH."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.environ.get("BATCHFS")]
    try:
        from . import _installed
        candidates.append(_installed.BATCHFS)
    except ImportError:
        pass
    candidates += [os.path.join(here, "..", "..", "..", "build", "batchfs"),
                   shutil.which("batchfs"), _DEFAULT_INSTALLED]
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return os.path.abspath(c)
    raise MountError("the batchfs command was not found (not on $PATH, "
                     "nor in %s): install it with `make install` in the "
                     "batchfs source tree (pip installs the Python package "
                     "alone), build it there (make), or set $BATCHFS to its "
                     "path" % os.path.dirname(_DEFAULT_INSTALLED))


def _option_args(options, tmp):
    """mount(**options) as command-line arguments. Values that stand for a
    file (subset=, weights=: a sequence or array; generator_state=,
    rng_state=: bytes or a torch.ByteTensor) are written to files in
    'tmp' first."""
    args = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-") if len(key) > 1 else "-" + key
        if value is None or value is False:
            continue
        if value is True:
            args.append(flag)
            continue
        if key == "o" and not isinstance(value, str):
            value = ",".join(value)
        elif key in ("subset", "weights") and \
                not isinstance(value, (str, os.PathLike)):
            path = os.path.join(tmp, key + ".npy")
            np.save(path, np.asarray(value, dtype=np.int64
                                     if key == "subset" else np.float64))
            value = path
        elif key in ("generator_state", "rng_state") and \
                not isinstance(value, (str, os.PathLike)):
            path = os.path.join(tmp, key + ".bin")
            with open(path, "wb") as f:
                f.write(bytes(value.numpy().tobytes()
                              if hasattr(value, "numpy") else value))
            value = path
        args += [flag, os.fspath(value) if isinstance(value, os.PathLike)
                 else str(value)]
    return args


def _installed_torch():
    """The version of the torch this Python would import (None: none)."""
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover (Python < 3.8)
        return None
    try:
        return version("torch")
    except PackageNotFoundError:
        return None


class Mount:
    """A batchfs mount (returned by batchfs.mount). A context manager: the
    with block unmounts it at its end (lazily: batches still held stay
    valid). .path is the mountpoint; .warnings what `batchfs mount`
    warned about (options that change nothing, skipped metadata, ...),
    also emitted as Python warnings (UserWarning) by batchfs.mount."""

    def __init__(self, path, warnings=()):
        self.path = path
        self.warnings = list(warnings)
        self._dataset = None

    def __fspath__(self):
        return self.path

    def __repr__(self):
        return "batchfs.Mount(%r)" % self.path

    @property
    def dataset(self):
        """dataset.json as a dict (fields, samples, batches_per_epoch,
        sampler, seed, serve_mode, log, ...)."""
        if self._dataset is None:
            with open(os.path.join(self.path, "dataset.json")) as f:
                self._dataset = json.load(f)
        return self._dataset

    @property
    def log(self):
        """Where the daemon logs (a file, or "stderr")."""
        return self.dataset["log"]

    def stats(self):
        """The stats file as a dict: counters as ints, the rest as strings
        ("-" for a last_error there was none of)."""
        with open(os.path.join(self.path, "stats")) as f:
            pairs = [line.rstrip("\n").split(None, 1) for line in f]
        return {k: int(v) if v.strip().isdigit() else v.strip()
                for k, v in pairs}

    def batches(self, epoch=0, start_batch=0, device=None, zero_copy=False,
                **options):
        """batchfs.Batches over this mount; 'options' are Batches' others
        (rank=, stream=, whole_dataset=, readers=)."""
        from ._batches import Batches
        return Batches(self.path, epoch, start_batch, device, zero_copy,
                       **options)

    def umount(self, lazy=False):
        """`batchfs umount`; MountError when it fails (busy: the message
        names the processes that hold it). lazy=True (`--lazy`) detaches
        the mount even when busy: batches still held stay valid, and the
        daemon exits when the last of them is gone."""
        p = subprocess.run([find_batchfs(), "umount",
                            *(["--lazy"] if lazy else []), self.path],
                           capture_output=True, text=True)
        if p.returncode:
            raise MountError(p.stderr.strip(), p.returncode, p.stderr)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        """The end of a with block unmounts lazily: batches you still
        hold stay valid."""
        self.umount(lazy=True)


def mount(archive, mountpoint, **options):
    """Mount 'archive' (a path, or a list of shards) on 'mountpoint' (an
    existing directory) with `batchfs mount`, and return a Mount once the
    filesystem is ready. Options are the command's, with "_" for "-":
    mount("d.pt", "/mnt/d", batch_size=256, shuffle=True, seed=7,
    o=["allow_other"]); True is a flag, False and None leave an option
    out; subset=/weights= may be sequences and generator_state=/rng_state=
    bytes or torch.get_rng_state()'s tensor. Raises MountError with the
    command's message (exit 1: the archive, the mountpoint; 2: bad
    options) and its message (not a warning printed before it); the
    warnings of a mount that works are emitted with warnings.warn and
    kept in Mount.warnings.

    The order served is that of the torch installed beside this package
    (torch_version= its version, read from the package's metadata without
    importing torch) unless torch_version= or torch_compat= is given;
    without torch, the command's default."""
    if options.get("foreground") or options.get("f"):
        raise ValueError("foreground: mount() returns once mounted; run "
                         "`batchfs mount -f` yourself to keep a terminal")
    sources = [archive] if isinstance(archive, (str, os.PathLike)) \
        else list(archive)
    if options.get("torch_version") is None and \
            options.get("torch_compat") is None:
        options["torch_version"] = _installed_torch()
    with tempfile.TemporaryDirectory(prefix="batchfs-opts-") as tmp:
        cmd = [find_batchfs(), "mount", *_option_args(options, tmp),
               *map(os.fspath, sources), os.fspath(mountpoint)]
        p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        raise MountError(_error_of(p.stderr, p.returncode), p.returncode,
                         p.stderr)
    said = _warnings_of(p.stderr)
    for w in said:  # a module's line has its prefix ("batchfs[source]: ")
        warnings.warn(w if w.startswith("batchfs[") else
                      "batchfs mount: " + w, stacklevel=2)
    return Mount(os.path.realpath(mountpoint), said)
