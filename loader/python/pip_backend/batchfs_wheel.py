"""The build backend of loader/python/pyproject.toml (PEP 517): the
wheel of `pip install ./loader/python`.

Standard library only, so that a fresh venv builds it with nothing
downloaded, with or without --no-build-isolation (setuptools before 70.1
needs the `wheel` package, which no fresh venv has, and Python 3.12's
venvs have no setuptools at all). The wheel holds:

- the batchfs package (loader/python/batchfs/*.py) and batchfs_loader.py;
- batchfs/_built.py: the version, read from tools/version.h;
- batchfs/libbatchfs_loader.so.0: the loader library compiled from the
  sources loader/module.mk lists (LOADER_SRCS; its soname and link
  libraries too) with make's flags for it, by $CC (else cc), with
  $CFLAGS (else -O2 -g) and $LDFLAGS as make takes them, and the CUDA
  backend built against $CUDA_HOME/include/cuda.h (default
  /usr/local/cuda) when present, as make does. batchfs_loader finds it
  beside the package.

The wheel is tagged py3-none-<platform>: the library is native code, but
no Python extension (ctypes loads it), so any Python 3 of the platform
takes it. The `batchfs` command is not in it: `make install` installs it
(batchfs.find_batchfs finds it on $PATH).

It builds in place: the repository's tools/ and loader/ must be at ../..
of loader/python, as pip (21.3 and later) leaves them. Hooks: build_wheel
and prepare_metadata_for_build_wheel; no sdist (the package is built from
a source tree) and no editable install (from a source tree, put
loader/python on sys.path: it finds build/libbatchfs_loader.so)."""
import base64
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import zipfile

NAME = "batchfs"
METADATA = """\
Metadata-Version: 2.1
Name: batchfs
Version: {version}
Summary: A dataset mounted as a directory of training batches (batchfs), from Python
Requires-Dist: numpy
Provides-Extra: torch
Requires-Dist: torch; extra == "torch"

The batchfs package: mount a dataset with `batchfs mount`, iterate its
batches, plug them into a DataLoader; batchfs.Loader reads batch files
into a pinned ring and onto the GPU (libbatchfs_loader, bundled).
The `batchfs` command comes from `make install` in the source tree.
"""
LIBRARY = "libbatchfs_loader.so.0"   # its name in the wheel, under batchfs/

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)                     # loader/python
ROOT = os.path.dirname(os.path.dirname(PYTHON_DIR))    # the source tree


class BuildError(RuntimeError):
    """What went wrong, said once by pip."""


def _read(rel):
    path = os.path.join(ROOT, rel)
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        raise BuildError(
            "batchfs: %s: %s: the wheel is built from a batchfs source tree "
            "(pip install ./loader/python in it); pip 21.3 and later build "
            "it in place, older ones copy loader/python alone: upgrade pip, "
            "or install with make install" % (path, e.strerror)) from None


def version():
    """BFS_VERSION of tools/version.h."""
    m = re.search(r'^#define BFS_VERSION "([^"]+)"', _read("tools/version.h"),
                  re.M)
    if not m:
        raise BuildError("batchfs: tools/version.h defines no BFS_VERSION")
    return m.group(1)


def _make_var(text, name):
    """The words of 'name := ...' in a makefile (continued lines too)."""
    m = re.search(r"^%s\s*:=((?:.*\\\n)*.*)$" % name, text, re.M)
    if not m:
        raise BuildError("batchfs: loader/module.mk has no %s" % name)
    return m.group(1).replace("\\\n", " ").split()


def _run(cmd):
    print(" ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
    try:
        p = subprocess.run(cmd, cwd=ROOT)
    except FileNotFoundError:
        raise BuildError(
            "batchfs: the wheel bundles libbatchfs_loader.so, compiled by "
            "the C compiler %r, which is not installed: install one (gcc), "
            "set CC, or install batchfs with make install" % cmd[0]) from None
    if p.returncode:
        raise BuildError("batchfs: compiling libbatchfs_loader.so failed "
                         "(exit %d): %s" % (p.returncode, " ".join(cmd)))


def build_library(out):
    """Compile libbatchfs_loader.so as loader/module.mk does, into 'out'
    (a file path)."""
    mk = _read("loader/module.mk")
    srcs = _make_var(mk, "LOADER_SRCS")
    soname = _make_var(mk, "LOADER_SONAME")[0]
    libs = _make_var(mk, "LOADER_LIBS")
    cc = shlex.split(os.environ.get("CC") or "cc")
    cflags = shlex.split(os.environ.get("CFLAGS") or "-O2 -g")
    cuda_h = os.path.join(os.environ.get("CUDA_HOME") or "/usr/local/cuda",
                          "include")
    cuda = ["-DBFS_HAVE_CUDA_H", "-I" + cuda_h] \
        if os.path.isfile(os.path.join(cuda_h, "cuda.h")) else []
    # The Makefile's CPPFLAGS and CFLAGS that matter to these sources, and
    # loader/module.mk's own (-fPIC -fvisibility=hidden; the CUDA flags for
    # loader/*.c, not for fs/safetensors.c).
    common = ["-D_GNU_SOURCE", "-D_FILE_OFFSET_BITS=64", "-I" + ROOT,
              *cflags, "-std=gnu11", "-fno-strict-aliasing", "-pthread",
              "-fPIC", "-fvisibility=hidden"]
    objs = []
    for i, src in enumerate(srcs):
        obj = "%s.%d.o" % (out, i)
        _run([*cc, *common, *(cuda if src.startswith("loader/") else []),
              "-c", os.path.join(ROOT, src), "-o", obj])
        objs.append(obj)
    _run([*cc, *shlex.split(os.environ.get("LDFLAGS") or ""), "-shared",
          "-Wl,-soname," + soname, "-Wl,-z,defs", "-o", out, *objs, *libs])
    for obj in objs:
        os.unlink(obj)


def _tag():
    plat = re.sub(r"[^A-Za-z0-9]", "_", sysconfig.get_platform())
    return "py3-none-" + plat


def _dist_info():
    return "%s-%s.dist-info" % (NAME, version())


def _metadata_files(tag):
    """{name in .dist-info: bytes}, RECORD aside."""
    return {
        "METADATA": METADATA.format(version=version()).encode(),
        "WHEEL": ("Wheel-Version: 1.0\nGenerator: batchfs_wheel\n"
                  "Root-Is-Purelib: false\nTag: %s\n" % tag).encode(),
        "top_level.txt": b"batchfs\nbatchfs_loader\n",
    }


def _sources():
    """(name in the wheel, path) of the Python files, in order."""
    pkg = os.path.join(PYTHON_DIR, "batchfs")
    # _installed.py is make install's; _built.py is written below
    names = sorted(n for n in os.listdir(pkg) if n.endswith(".py") and
                   n not in ("_installed.py", "_built.py"))
    return [("batchfs/" + n, os.path.join(pkg, n)) for n in names] + \
        [("batchfs_loader.py", os.path.join(PYTHON_DIR, "batchfs_loader.py"))]


def _hash(data):
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _epoch():
    """Zip timestamps: $SOURCE_DATE_EPOCH, else 1980-01-01 (zip's
    earliest), so that two builds of a tree are the same but for the
    library."""
    t = int(os.environ.get("SOURCE_DATE_EPOCH") or 315532800)
    return time.gmtime(max(t, 315532800))[:6]


def _write_wheel(path, entries):
    """entries: (name, bytes, mode); RECORD is added last."""
    record = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name, _epoch())
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
            record.append("%s,%s,%d" % (name, _hash(data), len(data)))
        rname = _dist_info() + "/RECORD"
        record.append(rname + ",,")
        info = zipfile.ZipInfo(rname, _epoch())
        info.external_attr = 0o100644 << 16
        z.writestr(info, "\n".join(record) + "\n", zipfile.ZIP_DEFLATED)


# ---- PEP 517 hooks ----

def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory,
                                     config_settings=None):
    d = os.path.join(metadata_directory, _dist_info())
    os.makedirs(d, exist_ok=True)
    for name, data in _metadata_files(_tag()).items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    return _dist_info()


def build_wheel(wheel_directory, config_settings=None,
                metadata_directory=None):
    tag = _tag()
    entries = []
    for name, path in _sources():
        with open(path, "rb") as f:
            entries.append((name, f.read(), 0o644))
    entries.append(("batchfs/_built.py", (
        '"""Written by the wheel\'s build (loader/python/pyproject.toml)."""\n'
        'VERSION = "%s"\n' % version()).encode(), 0o644))
    tmp = tempfile.mkdtemp(prefix="batchfs-wheel-")
    try:
        lib = os.path.join(tmp, LIBRARY)
        build_library(lib)
        with open(lib, "rb") as f:
            entries.append(("batchfs/" + LIBRARY, f.read(), 0o755))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    entries += [("%s/%s" % (_dist_info(), name), data, 0o644)
                for name, data in _metadata_files(tag).items()]
    wheel = "%s-%s-%s.whl" % (NAME, version(), tag)
    _write_wheel(os.path.join(wheel_directory, wheel), entries)
    return wheel
