#!/usr/bin/python3
"""pip install ./loader/python into a fresh venv, offline, and the
installed package over a real mount with torch 2.13:

- The venv is a plain `python -m venv` (its own pip and setuptools, as
  the Python that makes it ships them) of the Python the prepared venv
  $BFS_VENVS/torch-2.13.0 was made from (tools/scripts/venv.sh
  torch-2.13.0; default BFS_VENVS: build/venv of the source tree). torch
  and numpy are neither copied nor downloaded: a .pth file in the fresh
  venv puts the prepared venv's site-packages on its sys.path (after its
  own). Skipped (77) when that venv is missing.
- pip runs with no configuration and --no-index (nothing it could
  download from): `pip wheel` with build isolation makes
  batchfs-V-py3-none-PLATFORM.whl (V: tools/version.h's), holding the
  package, batchfs_loader.py, _built.py and the library, which exports
  the functions build/libbatchfs_loader.so exports; the build writes
  nothing into the source tree. `pip install --no-build-isolation
  ./loader/python` installs it.
- In the venv's Python, run outside the source tree: batchfs and
  batchfs_loader come from the venv, __version__ and pip's metadata are
  V; batchfs.mount() (the build's command, through $BATCHFS) mounts a
  torch.save archive; Batches gives DataLoader's batches for two epochs,
  and a state_dict() taken mid-epoch resumes at the next batch;
  read_batch; IterableDataset in batchfs.DataLoader with 2 workers,
  checkpointed and resumed; batchfs.Loader through the bundled library,
  loaded from the venv; the with block unmounts.
- find_batchfs() finds the command on $PATH without $BATCHFS; with none
  to be found, its MountError names make install. load_library() with
  $BATCHFS_LOADER_LIB naming no file, and with the bundled copy removed
  (an install without it), fails naming make install and
  BATCHFS_LOADER_LIB (unless the machine has one installed where the
  dynamic linker finds it: then it loads that one).
- pip uninstall removes it all.

Every child is bounded (a timeout); a mount the venv's Python leaves
behind is unmounted (mountlib)."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH = "2.13.0"
N, B, SEED = 45, 8, 11
LIB = "libbatchfs_loader.so.0"


# ---- in the fresh venv's Python (run as: PYTHON THIS --in-venv ...) ----

def in_venv(src, mnt, version):
    """The installed package at work; imports nothing of the source tree
    but tests/lib/fixtures (torch only)."""
    import importlib.metadata
    import torch
    sys.path.insert(0, os.path.join(src, "tests", "lib"))
    from fixtures import DictDataset

    import batchfs
    import batchfs_loader

    prefix = os.path.realpath(sys.prefix) + os.sep
    for mod in (batchfs, batchfs_loader):
        where = os.path.realpath(mod.__file__)
        assert where.startswith(prefix), (where, prefix)
        assert not where.startswith(os.path.realpath(src) + os.sep), where
    assert batchfs.__version__ == version, (batchfs.__version__, version)
    assert importlib.metadata.version("batchfs") == version
    assert torch.__version__.split("+")[0] == TORCH, torch.__version__
    assert batchfs.find_batchfs() == os.path.abspath(os.environ["BATCHFS"])

    g = torch.Generator().manual_seed(5)
    fields = {"x": torch.randn(N, 5, generator=g),
              "y": torch.randint(0, 3, (N,), generator=g)}
    archive = os.path.join(os.path.dirname(mnt), "data.pt")
    torch.save(fields, archive)
    loader = torch.utils.data.DataLoader(
        DictDataset(fields), batch_size=B, shuffle=True,
        generator=torch.Generator().manual_seed(SEED))
    want = [list(loader) for _ in range(3)]

    def same(got, w, what):
        assert got.keys() == w.keys(), (what, got.keys())
        for k in w:
            assert got[k].dtype == w[k].dtype and \
                torch.equal(got[k], w[k]), (what, k)

    def same_all(got, ws, what):
        assert len(got) == len(ws), (what, len(got), len(ws))
        for i, (g_, w) in enumerate(zip(got, ws)):
            same(g_, w, "%s %d" % (what, i))

    with batchfs.mount(archive, mnt, batch_size=B, shuffle=True,
                       seed=SEED) as m:
        assert m.path == os.path.realpath(mnt)
        b = batchfs.Batches(m.path, device="cpu")
        assert len(b) == len(want[0]) == m.dataset["batches_per_epoch"]
        for e in range(2):                        # each pass: next epoch
            same_all(list(b), want[e], "Batches epoch %d" % e)
        for k, got in enumerate(b):               # epoch 2: stop after 3
            same(got, want[2][k], "epoch 2 batch %d" % k)
            if k == 2:
                break
        state = json.loads(json.dumps(b.state_dict()))
        assert state == {"epoch": 2, "batch": 3}, state
        r = batchfs.Batches(m.path, device="cpu")
        r.load_state_dict(state)
        same_all(list(r), want[2][3:], "resumed Batches")

        one = batchfs.read_batch(os.path.join(m.path, "epoch/1/batch_2"),
                                 device="cpu")
        same(one, want[1][2], "read_batch")

        dl = batchfs.DataLoader(batchfs.IterableDataset(m.path),
                                num_workers=2)
        assert len(dl) == len(want[0])
        first = []
        for k, got in enumerate(dl):
            first.append(got)
            if k == 3:
                break
        state = json.loads(json.dumps(dl.state_dict()))
        assert state == {"epoch": 0, "batch": 4}, state
        del dl
        dl = batchfs.DataLoader(batchfs.IterableDataset(m.path),
                                num_workers=2)
        dl.load_state_dict(state)
        same_all(first + list(dl), want[0], "DataLoader, resumed")
        assert dl.state_dict() == {"epoch": 1, "batch": 0}, dl.state_dict()
        del dl

        lib = batchfs_loader.load_library()
        bundled = os.path.join(os.path.dirname(batchfs.__file__), LIB)
        assert lib._name == bundled, (lib._name, bundled)
        with open("/proc/self/maps") as f:
            assert os.path.realpath(bundled) in f.read(), "not mapped"
        with batchfs.Loader(os.path.join(m.path, "epoch", "0"),
                            device="cpu") as L:
            same_all(list(L), want[0], "batchfs.Loader")
    with open("/proc/mounts") as f:
        assert not any(line.split()[1] == m.path for line in f), \
            "still mounted after the with block"
    print("in the venv: ok")


# ---- the test (Debian's python3) ----

def main():
    import mountlib as ml

    src = os.environ.get("BFS_SRC") or os.path.abspath(
        os.path.join(HERE, "..", ".."))
    venvs = os.environ.get("BFS_VENVS") or os.path.join(src, "build", "venv")
    torch_venv = os.path.join(venvs, "torch-" + TORCH)
    try:
        with open(os.path.join(torch_venv, ".batchfs-stamp")) as f:
            stamp = f.read().split()
    except OSError:
        stamp = []
    if "torch==" + TORCH not in stamp:
        ml.skip("no venv with torch %s at %s: make it with "
                "tools/scripts/venv.sh torch-%s (or set BFS_VENVS)"
                % (TORCH, torch_venv, TORCH))
    ml.require_fuse()
    if not shutil.which(os.environ.get("CC") or "cc"):
        ml.skip("no C compiler (cc): the wheel's build compiles the library")
    build = os.path.join(src, os.environ.get("BUILD", "build"))
    batchfs_cmd = os.environ.get("BATCHFS") or os.path.join(build, "batchfs")
    built_lib = os.path.join(build, "libbatchfs_loader.so")
    for f in (batchfs_cmd, built_lib):
        assert os.path.exists(f), "%s: not built (make)" % f
    with open(os.path.join(src, "tools", "version.h")) as f:
        version = re.search(r'#define BFS_VERSION "([^"]+)"',
                            f.read()).group(1)
    pkg_src = os.path.join(src, "loader", "python")

    work = ml.TMP
    venv = os.path.join(work, "venv")
    py = os.path.join(venv, "bin", "python")
    took = {}

    def run(what, cmd, timeout, env=None, check=True, cwd=work):
        """cmd in a session of its own, killed whole after 'timeout'
        seconds (a liveness bound); its output is printed."""
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, cwd=cwd, env=env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True)
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
            print(out)
            raise AssertionError("%s: still running after %d s" %
                                 (what, timeout))
        took[what] = time.monotonic() - t0
        print("--- %s (%.1f s, exit %d)\n%s" % (what, took[what],
                                               p.returncode, out.rstrip()))
        if check and p.returncode:
            raise AssertionError("%s: exit %d" % (what, p.returncode))
        return p.returncode, out

    # The environment of everything run in the venv: no PYTHONPATH, no
    # library or command named, pip without configuration (no index, no
    # find-links: nothing to download from).
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PIP_") and k not in
           ("PYTHONPATH", "PYTHONHOME", "BATCHFS", "BATCHFS_LOADER_LIB",
            "VIRTUAL_ENV")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_NO_INPUT="1")

    # the fresh venv, of the Python the torch venv was made from
    with open(os.path.join(torch_venv, "pyvenv.cfg")) as f:
        cfg = dict(map(str.strip, line.split("=", 1)) for line in f
                   if "=" in line)
    base = cfg.get("executable") or os.path.join(cfg["home"], "python3")
    run("python -m venv", [base, "-m", "venv", venv], 300, env)
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig."
                           "get_path('purelib'))"], capture_output=True,
                          text=True, env=env, timeout=60,
                          check=True).stdout.strip()
    torch_site = subprocess.run(
        [os.path.join(torch_venv, "bin", "python"), "-c",
         "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, env=env, timeout=60,
        check=True).stdout.strip()
    with open(os.path.join(site, "torch-%s-venv.pth" % TORCH), "w") as f:
        f.write(torch_site + "\n")

    def tree(top):
        return sorted(os.path.join(d, n) for d, _, files in os.walk(top)
                      for n in files)
    before = tree(pkg_src)

    # the wheel, built with isolation: offline, it needs nothing
    wheels = os.path.join(work, "wheels")
    run("pip wheel --no-index", [py, "-m", "pip", "wheel", "--no-index",
                                 "--no-deps", "-w", wheels, pkg_src], 300, env)
    plat = subprocess.run([py, "-c", "import sysconfig; print(sysconfig."
                           "get_platform())"], capture_output=True, text=True,
                          env=env, timeout=60, check=True).stdout.strip()
    name = "batchfs-%s-py3-none-%s.whl" % (
        version, plat.replace("-", "_").replace(".", "_"))
    assert os.listdir(wheels) == [name], (os.listdir(wheels), name)
    dist = "batchfs-%s.dist-info/" % version
    with zipfile.ZipFile(os.path.join(wheels, name)) as z:
        names = set(z.namelist())
        z.extract("batchfs/" + LIB, work)
    want = {"batchfs/" + n for n in os.listdir(os.path.join(pkg_src,
                                                            "batchfs"))
            if n.endswith(".py")}
    want |= {"batchfs_loader.py", "batchfs/_built.py", "batchfs/" + LIB}
    want |= {dist + n for n in ("METADATA", "WHEEL", "RECORD",
                                "top_level.txt")}
    assert names == want, ("in the wheel", sorted(names ^ want))

    def exported(lib):
        out = subprocess.run(["nm", "-D", "--defined-only", lib],
                             capture_output=True, text=True, timeout=60,
                             check=True).stdout
        return sorted(line.split()[-1] for line in out.splitlines()
                      if line.split()[1:2] == ["T"])
    # (the build's own may be a SANITIZE= build's, with the runtime's too)
    got = exported(os.path.join(work, "batchfs", LIB))
    made = [s for s in exported(built_lib) if s.startswith("bfs_")]
    assert got == made and "bfs_loader_open" in got, (got, made)
    dyn = subprocess.run(["readelf", "-d", os.path.join(work, "batchfs", LIB)],
                         capture_output=True, text=True, timeout=60,
                         check=True).stdout
    assert "Library soname: [%s]" % LIB in dyn, dyn

    # the install, as documented for offline use
    run("pip install --no-index --no-build-isolation",
        [py, "-m", "pip", "install", "--no-index", "--no-build-isolation",
         pkg_src], 300, env)
    assert tree(pkg_src) == before, \
        ("the build wrote into the source tree", set(tree(pkg_src)) ^
         set(before))
    installed = os.path.join(site, "batchfs")
    assert os.path.isfile(os.path.join(installed, LIB))

    # the package at work, outside the source tree
    out_of_tree = os.path.join(work, "elsewhere")
    os.makedirs(out_of_tree)
    mnt = os.path.join(work, "mnt")
    os.makedirs(mnt)
    ml._mounts.append(mnt)      # unmounted at exit if the venv's Python
    venv_env = dict(env, BATCHFS=batchfs_cmd)          # leaves it behind
    try:
        run("the package in the venv", [py, os.path.abspath(__file__),
                                        "--in-venv", src, mnt, version],
            300, venv_env, cwd=out_of_tree)
    except AssertionError:
        if ml.is_mounted(mnt):
            ml.abort_mount(mnt)
        raise

    def in_py(what, code, extra_env, **kw):
        e = dict(env, **extra_env)
        for k in [k for k, v in e.items() if v is None]:
            del e[k]
        return run(what, [py, "-c", code], 120, e, cwd=out_of_tree, **kw)

    # the command: on $PATH; none at all
    bindir = os.path.join(work, "bin")
    os.makedirs(bindir)
    os.symlink(os.path.realpath(batchfs_cmd), os.path.join(bindir, "batchfs"))
    on_path = os.path.join(bindir, "batchfs")
    in_py("find_batchfs on $PATH", "import batchfs\n"
          "assert batchfs.find_batchfs() == %r, batchfs.find_batchfs()"
          % on_path, {"PATH": bindir + ":/usr/bin:/bin"})
    other = shutil.which("batchfs", path="/usr/bin:/bin") or \
        ("/usr/local/bin/batchfs"
         if os.access("/usr/local/bin/batchfs", os.X_OK) else None)
    rc, out = in_py("find_batchfs, none", "import batchfs\n"
                    "try:\n print('found', batchfs.find_batchfs())\n"
                    "except batchfs.MountError as e:\n print('error:', e)",
                    {"PATH": "/usr/bin:/bin"})
    if other:
        print("this machine has %s (make install's): found instead" % other)
        assert ("found " + other) in out, out
    else:
        assert "error: " in out and "`make install`" in out, out

    # the library: $BATCHFS_LOADER_LIB naming no file; none bundled
    load = ("import batchfs_loader\ntry:\n l = batchfs_loader.load_library()"
            "\n print('loaded', l._name)\nexcept OSError as e:\n"
            " print('error:', e)")
    rc, out = in_py("BATCHFS_LOADER_LIB naming no file", load,
                    {"BATCHFS_LOADER_LIB": "/nonexistent/" + LIB})
    assert "error: [Errno 2] BATCHFS_LOADER_LIB=/nonexistent/" + LIB in out \
        and "make install" in out, out
    aside = os.path.join(work, LIB + ".aside")
    os.rename(os.path.join(installed, LIB), aside)
    try:
        rc, out = in_py("no bundled library", load + "\nimport ctypes.util\n"
                        "print('system:', ctypes.util.find_library("
                        "'batchfs_loader'))", {})
    finally:
        os.rename(aside, os.path.join(installed, LIB))
    system = out.rsplit("system: ", 1)[-1].strip()
    if system != "None":
        print("this machine has %s installed: loaded instead" % system)
        assert "loaded " + system in out, out
    else:
        assert "error: [Errno 2] libbatchfs_loader.so not found" in out and \
            "make install" in out and "BATCHFS_LOADER_LIB" in out, out

    run("pip uninstall", [py, "-m", "pip", "uninstall", "-y", "batchfs"],
        120, env)
    left = [n for n in os.listdir(site) if n.startswith("batchfs")]
    assert not left, left
    print("times: " + ", ".join("%s %.1f s" % kv for kv in took.items()))
    print("ok")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--in-venv"]:
        in_venv(*sys.argv[2:5])
    else:
        main()
