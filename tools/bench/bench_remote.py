"""make bench, part "remote": a dataset in object storage, read through a
link of known speed, against that link's limit and what users pick.

Not in the default run: BENCH_ONLY=remote (or "small rows remote",
"large rows remote") selects it; `make bench` then installs its servers
and peers (tools/scripts/deps.sh bench: nginx, rclone, s3fs; moto's S3
server: tools/scripts/venv.sh s3). bench.py calls run(); h is bench.py's
module (its helpers and settings: BENCH_SCALE, BENCH_REPS, ...).

The link: nginx (Debian's) on 127.0.0.1 serves the bench's archives
(small rows: 784-byte images + int64 label, batch 256; large rows:
3x224x224 uint8 + label, batch 64; BENCH_SCALE shrinks them) behind
tests/lib/faultproxy.py, which adds BENCH_REMOTE_LATENCY_MS (20) to every
request and caps the bandwidth, shared by every connection, at
BENCH_REMOTE_MBPS (200 MB/s). For each workload, alternated pass by pass
(medians of BENCH_REPS):

  link      the archive fetched by parallel `curl` range requests of
            8 MiB (16 at a time) through the proxy: the link's limit
  local     the same archive mounted from local disk (in the page
            cache), its second epoch (Python readinto 1 MiB), then its
            third through batchfs.Batches()
  batchfs   `batchfs mount http://...` with an emptied --cache-dir: a
            cold shuffled epoch 0 timed from the mount to its last byte
            (read by a process of its own: the proxy's threads are the
            bench's, and a reader there shared their interpreter lock),
            then epoch 1 (the second epoch, from the cache), read the
            same way, and epoch 2 through Batches(); then another cold
            epoch 0 (the cache emptied again) read by Batches(), in a
            process of its own too

then once (BENCH_REMOTE_STEPS picks among link, batchfs, sweep, cache,
peers, bounded; default all):

  sweep     cold epochs with the fetcher's merge gap and request size set
            (BATCHFS_DEBUG_MERGE_GAP, BATCHFS_DEBUG_REQUEST_MAX), one at a
            time around the defaults (BENCH_REMOTE_SWEEP: "GAP/MAX,...")
  cache     --cache-gb a quarter of the archive, BENCH_REMOTE_CACHE_EPOCHS
            (3) shuffled epochs read batch by batch for at most
            BENCH_REMOTE_CACHE_SECONDS (90): chunks fetched against the
            chunk accesses of the batches read (the order's, from the
            mount's index files), hits = accesses - chunks fetched (the
            mount's 2 workers, 1 where a quarter cannot hold the chunks
            2 pin; neither: the step is left out, at too small a
            BENCH_SCALE), beside the hits of evicting by next use
            (Belady's bound) and of LRU on the same sequence
            (build/bench/cache_sim: fs/remote/cache's
            bfs_cache_simulate), and of next use known only K batches
            ahead (the read-ahead's window, and more: cache_sim's own)
  peers     `rclone mount` (its HTTP backend on the same nginx and proxy,
            --vfs-cache-mode full, its cache emptied) and `s3fs` (against
            moto's S3 server behind a proxy of the same latency and cap;
            moto reads the whole object for every range it answers: with
            large archives it, not the link, sets s3fs's pace, 0.02 GB/s
            for 8 MiB ranges of a 256 MiB object on the 2-core machine),
            each read by a torch DataLoader (shuffle=True, the workload's
            batch, BENCH_REMOTE_PEER_WORKERS workers: 8) whose Dataset
            preads each sample's image and label at their offsets in the
            archive file through the mount (torch 1.13's torch.load
            cannot map a file); each bounded by BENCH_REMOTE_PEER_SECONDS
            (60): its samples/s over what it read, "did not finish in N s"
            when the epoch did not end. The s3 link's limit (curl
            --aws-sigv4, 8 MiB ranges) beside it.
  bounded   bigger than the cache and memory at once: a cache of a
            quarter of the archive (batchfs --cache-gb; rclone
            --vfs-cache-max-size, checked every 5 s; s3fs use_cache on an
            ext4 of its own whose ensure_diskfree leaves it a quarter) and
            a memory cgroup of a quarter holding the filesystem and its
            reader (root only), the page cache dropped before each; 3
            shuffled epochs of BENCH_REMOTE_BOUNDED_SECONDS (60) at most
            each: batchfs read file by file (open, readinto 1 MiB), each
            peer by the DataLoader above with BENCH_REMOTE_BOUNDED_WORKERS
            (4) workers; samples/s per epoch (over what it read, where it
            did not end) and over all three, batchfs / the best peer. A
            peer whose next batch has not come a second past the bound
            ends there: its rate is what its workers read by then.

Everything it starts is stopped on exit, also on failure.
"""
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)),
                                "tests", "lib"))
import memcg  # noqa: E402  (memory cgroups, shared with the tests)
import servers  # noqa: E402  (nginx, moto: shared with the tests)
from faultproxy import FaultProxy  # noqa: E402

MBPS = float(os.environ.get("BENCH_REMOTE_MBPS", "200"))
LATENCY = float(os.environ.get("BENCH_REMOTE_LATENCY_MS", "20")) / 1e3
PEER_SECONDS = float(os.environ.get("BENCH_REMOTE_PEER_SECONDS", "60"))
PEER_WORKERS = [int(w) for w in os.environ.get(
    "BENCH_REMOTE_PEER_WORKERS", "8").split(",") if w.strip()]
CACHE_EPOCHS = int(os.environ.get("BENCH_REMOTE_CACHE_EPOCHS", "3"))
CACHE_SECONDS = float(os.environ.get("BENCH_REMOTE_CACHE_SECONDS", "90"))
STEPS = [s for s in os.environ.get(
    "BENCH_REMOTE_STEPS", "link,batchfs,sweep,cache,peers,bounded").split(",")
    if s]
BOUNDED_EPOCHS = 3
BOUNDED_SECONDS = float(os.environ.get("BENCH_REMOTE_BOUNDED_SECONDS", "60"))
BOUNDED_WORKERS = int(os.environ.get("BENCH_REMOTE_BOUNDED_WORKERS", "4"))
# merge gap / request max, one varied at a time around the defaults
# (256K / 8M); a gap of 1 byte merges only adjacent chunks
SWEEP = [s.split("/") for s in os.environ.get(
    "BENCH_REMOTE_SWEEP", "1/8M,64K/8M,256K/8M,1M/8M,4M/8M,16M/8M,"
    "256K/1M,256K/2M,256K/4M,256K/16M,256K/32M").split(",") if s]
CURL_PARALLEL = 16
CURL_RANGE = 8 << 20
CHUNK = 64 << 10  # fs/remote/cache's chunk (BFS_CACHE_CHUNK_DEFAULT)
BUCKET = "bench"
CACHE_SIM = os.environ.get("CACHE_SIM") or os.path.join(
    os.path.dirname(os.path.dirname(HERE)), "build", "bench", "cache_sim")


def gb(x):
    return "%.3f" % x if x is not None else "n/a"


def wanted_steps():
    return set(STEPS)


class Servers:
    """nginx behind the proxy; moto's S3 server behind one of its own
    (started on first use); stopped by close()."""

    def __init__(self, h, work, www):
        self.h, self.work, self.www = h, work, www
        self.stack = []
        ng = servers.Nginx(www, workdir=work.path("nginx"), autoindex=True)
        self.nginx = self._enter(ng)
        self.proxy = self._enter(FaultProxy(ng.base_url))
        self.proxy.latency(LATENCY)
        self.proxy.bandwidth(MBPS * 1e6)
        self.s3 = None
        self.s3proxy = None

    def _enter(self, cm):
        got = cm.__enter__()
        self.stack.append(cm)
        return got

    def url(self, name):
        return self.proxy.url("/" + name)

    def s3_start(self, names):
        """moto's S3 server with bucket BUCKET holding the archives
        'names', behind a proxy of the same latency and cap; None (and
        why) where its venv is missing."""
        if self.s3:
            return self.s3proxy, None
        if not servers.moto_server():
            return None, ("moto's S3 server is not installed "
                          "(tools/scripts/venv.sh s3)")
        d = self.work.path("s3")
        os.makedirs(d, exist_ok=True)
        self.s3 = self._enter(servers.S3Server(d, buckets=[BUCKET],
                                               verify=False))
        for name in names:
            with open(os.path.join(self.www, name), "rb") as f:
                self.s3.put(BUCKET, name, f.read())
        self.s3proxy = self._enter(FaultProxy(self.s3.direct_url))
        self.s3proxy.latency(LATENCY)
        self.s3proxy.bandwidth(MBPS * 1e6)
        return self.s3proxy, None

    def close(self):
        while self.stack:
            try:
                self.stack.pop().__exit__(None, None, None)
            except Exception as e:  # noqa: BLE001 (stop the others too)
                self.h.log("  (stopping a server: %s)" % e)


def curl_link(h, work, url, size, opts=()):
    """Seconds to fetch bytes [0, size) of url by parallel curl range
    requests of CURL_RANGE bytes, CURL_PARALLEL at a time. opts: (name,
    value) of curl options every request takes (in the config, each
    request's own: the command line's hold for the first only)."""
    cfg = work.path("curl.cfg")
    with open(cfg, "w") as f:
        for k, off in enumerate(range(0, size, CURL_RANGE)):
            if k:
                f.write("next\n")
            f.write('url = "%s"\nrange = %d-%d\noutput = "/dev/null"\n'
                    'fail\n' % (url, off, min(size, off + CURL_RANGE) - 1))
            for name, value in opts:
                f.write('%s = "%s"\n' % (name, value))
    t0 = time.perf_counter()
    h.run(["curl", "-sS", "--parallel", "--parallel-max",
           str(CURL_PARALLEL), "-K", cfg], timeout=600)
    return time.perf_counter() - t0


def stats(mnt):
    """A mount's stats lines as {name: int} (the numeric ones)."""
    out = {}
    with open(mnt + "/stats") as f:
        for line in f:
            w = line.split()
            if len(w) == 2:
                try:
                    out[w[0]] = int(w[1])
                except ValueError:
                    try:
                        out[w[0]] = float(w[1])
                    except ValueError:
                        pass
    return out


def mount(h, work, src, batch, mnt, opts=(), env=None):
    work.mounts.append(mnt)
    h.run([h.BATCHFS, "mount", "--batch-size", str(batch), "--shuffle",
           "--seed", str(h.SEED)] + h.MOUNT_OPTS + list(opts) + [src, mnt],
          timeout=300, env=env)


def empty(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)


def read_epoch(h, mnt, epoch, nb, buf, n, row):
    """Seconds of every batch of 'epoch' read from Python (readinto
    1 MiB); Failed when the payload is short."""
    b, s = h.read_epoch_py(mnt, epoch, nb, buf, h.MIB)
    if b != n * row:
        raise h.Failed("%s: epoch %d: %d payload bytes, want %d"
                       % (mnt, epoch, b, n * row))
    return s


def batchfs_epochs(h, work, url, batch, n, row, env=None, opts=(),
                   epochs=2, after=None, py=False, cold_py=False):
    """An emptied cache, `batchfs mount url`, then 'epochs' epochs read
    (epoch 0 through Batches() with 'cold_py'; with 'py', one more through
    Batches());
    returns ([seconds of epoch 0 from the mount on, of epoch 1, ...],
    stats after the mount (with "first batch s": the seconds from the
    mount on to the end of batch 0, read first), stats at the end (with
    "epoch0": those after epoch 0, when more were read), after(mountpoint)
    or None: called before the unmount)."""
    nb = -(-n // batch)
    mnt = work.mountpoint("remote")
    cache = work.path("rcache")
    empty(cache)
    buf = h.batch_buffer(batch, row)
    cold = cold_reader(h, mnt, nb, cold_py)  # imported before the clock
    t0 = time.perf_counter()
    try:
        mount(h, work, url, batch, mnt, ["--cache-dir", cache] + list(opts),
              env)
        st0 = stats(mnt)
        fd = os.open(mnt + "/epoch/0/batch_0", os.O_RDONLY)
        try:
            while os.readv(fd, [buf]):
                pass
        finally:
            os.close(fd)
        first = time.perf_counter() - t0
        times = []
        for e in range(epochs):
            if e == 0:
                read_cold(h, mnt, nb, n, row, cold)
                times.append(time.perf_counter() - t0)
            else:
                times.append(read_epoch(h, mnt, e, nb, buf, n, row))
            if e == 0:
                st1 = stats(mnt)
        if py:
            times.append(batches_secs(h, mnt, epochs, nb))
        if epochs > 1:
            st1 = dict(stats(mnt), epoch0=st1)
        st0["first batch s"] = first
        return times, st0, st1, after(mnt) if after else None
    finally:
        if cold and cold.poll() is None:
            cold.kill()
            cold.communicate()
        work.unmount(mnt)


def batches_secs(h, mnt, epoch, nb):
    """Seconds of 'epoch' read through batchfs.Batches(); Failed when it
    gives another count of batches."""
    s, k = h.batches_epoch(mnt, epoch)
    if k != nb:
        raise h.Failed("%s: Batches() gave %d batches, want %d"
                       % (mnt, k, nb))
    return s


def local_second_epoch(h, work, arch, batch, n, row):
    """Seconds of the second epoch of a local mount of arch (in the page
    cache), and of its third through Batches()."""
    nb = -(-n // batch)
    mnt = work.mountpoint("local")
    buf = h.batch_buffer(batch, row)
    mount(h, work, arch, batch, mnt)
    try:
        read_epoch(h, mnt, 0, nb, buf, n, row)
        return (read_epoch(h, mnt, 1, nb, buf, n, row),
                batches_secs(h, mnt, 2, nb))
    finally:
        work.unmount(mnt)


def chunk_sequence(mnt, batches, img, lab, row):
    """The chunks the batches [(epoch, k)] touch, in order: per batch its
    rows' image and label chunks, each once, ascending (as a gather pins
    them). Returns (sequence, accesses per batch)."""
    seq, per = [], []
    isz = row - 8
    for e, k in batches:
        with open("%s/index/%d/batch_%d" % (mnt, e, k)) as f:
            idx = [int(x) for x in f.read().split()]
        cs = set()
        for i in idx:
            a = img + i * isz
            cs.update(range(a // CHUNK, (a + isz - 1) // CHUNK + 1))
            cs.add((lab + 8 * i) // CHUNK)
        seq.extend(sorted(cs))
        per.append(len(cs))
    return seq, per


def simulate(work, seq, capacity, universe, horizons=()):
    """{"next use": hits, "lru": hits, "accesses", "distinct", and
    horizon K: hits} of seq, by build/bench/cache_sim."""
    if not os.access(CACHE_SIM, os.X_OK):
        raise RuntimeError("%s is missing (make bench builds it)"
                           % CACHE_SIM)
    path = work.path("seq.txt")
    with open(path, "w") as f:
        f.write("\n".join(map(str, seq)) + "\n")
    with open(path) as f:
        out = subprocess.run([CACHE_SIM, str(capacity), str(universe)] +
                             [str(k) for k in horizons], stdin=f,
                             capture_output=True, text=True, timeout=1800)
    os.unlink(path)
    m = re.search(r"accesses=(\d+) distinct=(\d+) next_use=(\d+) "
                  r"lru=(\d+)", out.stdout)
    if out.returncode or not m:
        raise RuntimeError("cache_sim: %s" % out.stderr.strip())
    got = dict(zip(("accesses", "distinct", "next use", "lru"),
                   map(int, m.groups())))
    for k, v in re.findall(r"horizon_(\d+)=(\d+)", out.stdout):
        got[int(k)] = int(v)
    return got


def window_batches(mnt):
    """The read-ahead's window in batches (dataset.json's reader_why)."""
    with open(mnt + "/dataset.json") as f:
        m = re.search(r"up to (\d+) batches ahead", json.load(f).get(
            "reader_why", ""))
    return int(m.group(1)) if m else None


def pinned(row, batch, workers, arch_size):
    """The bytes the batches being gathered may pin at once, as `batchfs
    mount` reckons them (it warns below: a batch that finds no room
    fails): per row and field, its 64 KiB chunks and one more."""
    per_row = sum((-(-b // CHUNK) + 1) * CHUNK for b in (row - 8, 8))
    return min(arch_size, per_row * batch * workers)


def cache_quarter(h, work, url, arch_size, batch, n, row, img, lab):
    """--cache-gb a quarter of the archive, CACHE_EPOCHS shuffled epochs,
    batch by batch, for CACHE_SECONDS at most: chunks fetched against
    what evicting by next use and LRU would fetch on the same batches,
    and next use known only a few batches ahead (the read-ahead's window
    and more)."""
    nb = -(-n // batch)
    limit = arch_size // 4
    workers = [w for w in (2, 1) if pinned(row, batch, w, arch_size) <= limit]
    if not workers:
        return {"error": "a quarter of the archive (%.1f MB) cannot hold "
                "the chunks one worker's batch pins (%.1f MB): raise "
                "BENCH_SCALE" % (limit / 1e6, pinned(row, batch, 1,
                                                     arch_size) / 1e6)}
    mnt = work.mountpoint("remote")
    cache = work.path("rcache")
    empty(cache)
    mount(h, work, url, batch, mnt,
          ["--cache-dir", cache, "--cache-gb", "%.9f" % (limit / 1e9),
           "--workers", str(workers[0])])
    try:
        st0 = stats(mnt)
        done = []
        t0 = time.perf_counter()
        for e in range(CACHE_EPOCHS):
            for k in range(nb):
                if time.perf_counter() - t0 > CACHE_SECONDS:
                    break
                h.ml_read(mnt, e, k)
                done.append((e, k))
        secs = time.perf_counter() - t0
        st1 = stats(mnt)
        window = window_batches(mnt)
        seq, per = chunk_sequence(mnt, done, img, lab, row)
    finally:
        work.unmount(mnt)
    universe = -(-arch_size // CHUNK)
    capacity = limit // CHUNK
    mean = sum(per) / len(per)
    ks = sorted({1, window or 2, 4 * (window or 2), 16 * (window or 2),
                 64 * (window or 2), nb})
    horizons = {k: int(round(k * mean)) for k in ks}
    sim = simulate(work, seq, capacity, universe, horizons.values())
    fetched = (st1["remote_bytes"] - st0["remote_bytes"]) / CHUNK
    acc = sim["accesses"]
    return {"epochs": CACHE_EPOCHS, "limit": limit, "accesses": acc,
            "workers": workers[0],
            "batches read": len(done), "batches": nb * CACHE_EPOCHS,
            "seconds": secs, "distinct": sim["distinct"],
            "capacity": capacity, "fetched chunks": fetched,
            "hits": acc - fetched, "next use hits": sim["next use"],
            "lru hits": sim["lru"], "window": window,
            "horizon hits": {k: sim[v] for k, v in horizons.items()},
            "pin hits": st1.get("remote_cache_hits", 0) -
            st0.get("remote_cache_hits", 0),
            "pin misses": st1.get("remote_cache_misses", 0) -
            st0.get("remote_cache_misses", 0),
            "evictions": st1.get("remote_cache_evictions")}


def sweep(h, work, url, arch_size, batch, n, row):
    """Cold epochs per (merge gap, request max): {"GAP/MAX": {...}}."""
    out = {}
    for rep in range(h.REPS):
        for gap, req in SWEEP if rep % 2 == 0 else reversed(SWEEP):
            env = {"BATCHFS_DEBUG_MERGE_GAP": gap,
                   "BATCHFS_DEBUG_REQUEST_MAX": req}
            times, st0, st1, _ = batchfs_epochs(h, work, url, batch, n, row,
                                                env=env, epochs=1)
            d = out.setdefault("%s/%s" % (gap, req),
                               {"GB/s": [], "requests": [], "fetched": [],
                                "first batch s": []})
            d["GB/s"].append(arch_size / times[0] / 1e9)
            d["first batch s"].append(st0["first batch s"])
            d["requests"].append(st1["remote_requests"])
            d["fetched"].append(st1["remote_bytes"] / arch_size)
    return {k: {f: statistics.median(v) for f, v in d.items()}
            for k, d in out.items()}


def wait_mounted(mnt, proc, what, timeout=60):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError("%s exited %d before mounting"
                               % (what, proc.returncode))
        with open("/proc/self/mountinfo") as f:
            if any(line.split()[4] == os.path.realpath(mnt) for line in f):
                return
        time.sleep(0.1)
    raise RuntimeError("%s did not mount in %d s" % (what, timeout))


def peer_mount(h, work, kind, srv, mnt, opts=(), preexec_fn=None):
    """Start the peer 'kind' ("rclone" or "s3fs") mounting the archives
    at mnt, in the foreground as our child, with the options opts more,
    started with preexec_fn; returns the process."""
    os.makedirs(mnt, exist_ok=True)
    log = open(work.path(kind + ".log"), "w")
    if kind == "rclone":
        cache = work.path("rclone-cache")
        empty(cache)
        cmd = ["rclone", "mount", ":http:", mnt, "--http-url",
               srv.proxy.base_url + "/", "--vfs-cache-mode", "full",
               "--cache-dir", cache, "--read-only",
               "--config", work.path("rclone.conf")] + list(opts)
    else:
        pw = work.path("s3fs.passwd")
        with open(pw, "w") as f:
            f.write("%s:%s\n" % (servers.S3_ACCESS, servers.S3_SECRET))
        os.chmod(pw, 0o600)
        cmd = ["s3fs", BUCKET, mnt, "-f", "-o", "url=" + srv.s3proxy.base_url,
               "-o", "use_path_request_style", "-o", "passwd_file=" + pw,
               "-o", "ro", "-o", "endpoint=us-east-1"] + list(opts)
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, preexec_fn=preexec_fn)
    work.procs.append(proc)
    work.mounts.append(mnt)
    wait_mounted(mnt, proc, kind)
    return proc


def peer_stop(work, proc, mnt):
    subprocess.run(["fusermount3", "-u", mnt], capture_output=True,
                   timeout=60)
    work.stop(proc)
    work.unmount(mnt)


def peer_epoch(h, path, n, row, img, lab, batch, workers, epochs=1,
               secs=PEER_SECONDS, preexec_fn=None, each=False):
    """(samples, seconds, done) of a DataLoader whose Dataset preads each
    sample's image and label at their offsets in path (bench.py's
    DL_PREAD, no fadvise: what one writes for a file torch 1.13's
    torch.load cannot map), over 'epochs' epochs of 'secs' seconds at
    most each, started with preexec_fn; with 'each', a fourth: the
    epochs' [(samples, seconds, done)]."""
    limit = epochs * secs + 300
    # Its output to files, its own session: a worker blocked in a read
    # of the peer's mount holds no pipe open, and is killed after.
    with open(os.devnull, "rb") as null, \
            tempfile.TemporaryFile("w+") as so, \
            tempfile.TemporaryFile("w+") as se:
        p = subprocess.Popen(
            [sys.executable, "-c", h.DL_PREAD, path, str(n), str(row),
             str(img), str(lab), str(batch), str(workers), str(secs), "0",
             str(epochs)], stdin=null, stdout=so, stderr=se,
            preexec_fn=preexec_fn, start_new_session=True)
        try:
            rc = p.wait(limit)
        except subprocess.TimeoutExpired:
            rc = None
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
        so.seek(0)
        se.seek(0)
        stdout, stderr = so.read(), se.read()
    if rc is None:
        return (0, limit, False) + (([],) if each else ())
    m = re.search(r"samples=(\d+) seconds=([\d.]+) done=(\d)", stdout)
    if not m:
        raise h.Failed("DataLoader over %s: exit %d: %s"
                       % (path, rc, stderr.strip()[-300:]))
    got = (int(m.group(1)), float(m.group(2)), m.group(3) == "1")
    if not each:
        return got
    if epochs == 1:
        return got + ([got],)
    return got + ([(int(k), float(t), d == "1") for k, t, d in re.findall(
        r"epoch=\d+ n=(\d+) t=([\d.]+) done=(\d)", stdout)],)


def peers(h, work, srv, names, name, batch, n, row, img, lab):
    """{peer: {"workers": w, "samples/s": x, "samples": k, "seconds": s,
    "done": bool} or {"error": why}}: each peer's best worker count."""
    out = {}
    for kind in ("rclone", "s3fs"):
        if not shutil.which(kind):
            out[kind] = {"error": "not installed (tools/scripts/deps.sh "
                         "bench)"}
            continue
        if kind == "s3fs":
            _, why = srv.s3_start(names)
            if why:
                out[kind] = {"error": why}
                continue
        best = None
        for w in PEER_WORKERS:
            mnt = work.path("peer-" + kind)
            try:
                proc = peer_mount(h, work, kind, srv, mnt)
            except (RuntimeError, OSError) as e:
                out[kind] = {"error": str(e)}
                break
            try:
                k, s, done = peer_epoch(h, os.path.join(mnt, name), n, row,
                                        img, lab, batch, w)
            except h.Failed as e:  # the peer's failure, not the part's
                out[kind] = {"error": str(e)[-300:]}
                h.log("    %s: %s" % (kind, out[kind]["error"]))
                break
            finally:
                peer_stop(work, proc, mnt)
            got = {"workers": w, "samples": k, "seconds": s, "done": done,
                   "samples/s": k / s if s else 0.0}
            h.log("    %s, DataLoader %d workers: %d samples in %.1f s%s"
                  % (kind, w, k, s, "" if done else
                     " (did not finish in %d s)" % PEER_SECONDS))
            if best is None or got["samples/s"] > best["samples/s"]:
                best = got
        if best:
            out[kind] = best
    return out


# Epochs of a mount read batch file by batch file (open, readinto 1 MiB),
# each bounded: argv mnt, batches per epoch, epochs, seconds; prints
# "epoch=E batches=K t=SECONDS done=D bytes=B" for each.
READ_EPOCHS = r"""
import mmap, os, sys, time
mnt, nb, epochs, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    float(sys.argv[4])
buf = memoryview(mmap.mmap(-1, 1 << 20))
for e in range(epochs):
    k, b, t0 = 0, 0, time.perf_counter()
    while k < nb and time.perf_counter() - t0 <= secs:
        with open("%s/epoch/%d/batch_%d" % (mnt, e, k), "rb",
                  buffering=0) as f:
            while True:
                got = f.readinto(buf)
                if not got:
                    break
                b += got
        k += 1
    print("epoch=%d batches=%d t=%.3f done=%d bytes=%d"
          % (e, k, time.perf_counter() - t0, k == nb, b), flush=True)
"""


# Epoch 0 of a mount through batchfs.Batches() (torch tensors on the
# CPU), said as READ_EPOCHS says it. argv: the mount, the batch count. It
# says "ready" once imported and starts at the line its parent sends.
# torch is imported here too: batchfs imports it only at its first
# tensor, which on a cold mount comes once the download is nearly done,
# and its import (1-1.5 s on 2 cores) is not the epoch's time.
READ_BATCHES = r"""
import sys, time
import batchfs
import torch  # noqa: F401  (what Batches() imports at its first tensor)
mnt, nb = sys.argv[1], int(sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()
k, b, t0 = 0, 0, time.perf_counter()
for x in batchfs.Batches(mnt, epoch=0, device="cpu"):
    k += 1
    b += sum(v.numel() * v.element_size() for v in x.values())
print("epoch=0 batches=%d t=%.3f done=%d bytes=%d"
      % (k, time.perf_counter() - t0, k == nb, b), flush=True)
"""


def cold_reader(h, mnt, nb, py):
    """With 'py', the process that will read epoch 0 of mnt through
    Batches() (READ_BATCHES), started and imported now, before the mount
    and its clock, reading once read_cold says so; else None (READ_EPOCHS
    starts in read_cold, in a moment)."""
    if not py:
        return None
    env = dict(os.environ, PYTHONPATH=os.path.join(h.ROOT, "loader",
                                                   "python"))
    p = subprocess.Popen([sys.executable, "-c", READ_BATCHES, mnt, str(nb)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    if p.stdout.readline().strip() != "ready":
        p.kill()
        raise h.Failed("Batches() reader: %s" % p.communicate()[1][-300:])
    return p


def read_cold(h, mnt, nb, n, row, p=None):
    """Epoch 0 of mnt read in a process of its own (the proxy's threads
    are this process's: a reader here would share their interpreter
    lock): p (cold_reader's), or READ_EPOCHS; Failed when it is short."""
    if p:
        out, err = p.communicate("go\n", timeout=1800)
        rc = p.returncode
    else:
        q = subprocess.run([sys.executable, "-c", READ_EPOCHS, mnt, str(nb),
                            "1", "1e9"], capture_output=True, text=True,
                           timeout=1800)
        out, err, rc = q.stdout, q.stderr, q.returncode
    m = re.search(r"batches=(\d+) t=[\d.]+ done=1 bytes=(\d+)", out)
    if rc or not m or int(m.group(2)) < n * row:
        raise h.Failed("%s: epoch 0: %s%s" % (mnt, out.strip(),
                                              err.strip()[-300:]))


def bounded_batchfs(h, work, url, limit, workers, batch, n, join):
    """bounded()'s batchfs: `batchfs mount url --cache-gb limit` and
    BOUNDED_EPOCHS epochs read by READ_EPOCHS, all in the cgroup."""
    nb = -(-n // batch)
    mnt = work.mountpoint("bounded")
    cache = work.path("bcache")
    empty(cache)
    h.drop_caches()
    work.mounts.append(mnt)
    p = subprocess.run(
        [h.BATCHFS, "mount", "--batch-size", str(batch), "--shuffle",
         "--seed", str(h.SEED)] + h.MOUNT_OPTS +
        ["--cache-dir", cache, "--cache-gb", "%.9f" % (limit / 1e9),
         "--workers", str(workers), url, mnt], capture_output=True,
        text=True, preexec_fn=join, timeout=300)
    if p.returncode:
        raise h.Failed("batchfs mount (bounded): %s" % p.stderr[-300:])
    try:
        out = subprocess.run(
            [sys.executable, "-c", READ_EPOCHS, mnt, str(nb),
             str(BOUNDED_EPOCHS), str(BOUNDED_SECONDS)],
            capture_output=True, text=True, preexec_fn=join,
            timeout=BOUNDED_EPOCHS * BOUNDED_SECONDS + 300)
        got = [(min(int(k) * batch, n), float(t), d == "1")
               for k, t, d in re.findall(
                   r"epoch=\d+ batches=(\d+) t=([\d.]+) done=(\d)",
                   out.stdout)]
        if out.returncode or len(got) != BOUNDED_EPOCHS:
            raise h.Failed("reading the bounded mount: exit %d: %s"
                           % (out.returncode, out.stderr[-300:]))
        st = stats(mnt)
    finally:
        work.unmount(mnt)
    return {"workers": workers, "epochs": got,
            "received": st.get("remote_bytes", 0),
            "requests": st.get("remote_requests", 0),
            "evictions": st.get("remote_cache_evictions", 0)}


def loop_fs(h, work, name, size):
    """An ext4 of 'size' bytes on a loop device (direct I/O: its file's
    pages are not cached beside it), mounted at work/name: (its device,
    mountpoint)."""
    img = work.path(name + ".img")
    with open(img, "wb") as f:
        f.truncate(size)
    dev = h.run(["losetup", "--direct-io=on", "-f", "--show", img]).strip()
    try:
        h.run(["mkfs.ext4", "-q", "-m", "0", dev])
        mnt = work.mountpoint(name)
        h.run(["mount", dev, mnt])
    except h.Failed:
        subprocess.run(["losetup", "-d", dev], capture_output=True)
        raise
    return dev, mnt


def loop_fs_drop(dev, mnt):
    subprocess.run(["umount", "-l", mnt], capture_output=True, timeout=60)
    subprocess.run(["losetup", "-d", dev], capture_output=True, timeout=60)


def bounded_peer(h, work, srv, names, kind, base, limit, batch, n, row,
                 img, lab, join):
    """bounded()'s peer 'kind' with a cache of 'limit' bytes, read by a
    DataLoader of BOUNDED_WORKERS workers, both in the cgroup. rclone:
    --vfs-cache-max-size (checked every 5 s; rclone keeps an open file's
    cache past it, so its size at the end is reported); s3fs: use_cache
    on an ext4 of its own with ensure_diskfree leaving it 'limit'."""
    if not shutil.which(kind):
        return {"error": "not installed (tools/scripts/deps.sh bench)"}
    fs = None
    if kind == "rclone":
        opts = ["--vfs-cache-max-size", "%dM" % (limit >> 20),
                "--vfs-cache-poll-interval", "5s"]
        cache = work.path("rclone-cache")
    else:
        _, why = srv.s3_start(names)
        if why:
            return {"error": why}
        reserve = 64 << 20
        try:
            fs = loop_fs(h, work, "s3fs-cache", limit + 2 * reserve)
        except h.Failed as e:
            return {"error": "no bounded cache filesystem: %s" % e}
        v = os.statvfs(fs[1])
        free = v.f_bavail * v.f_frsize
        opts = ["-o", "use_cache=" + fs[1], "-o", "ensure_diskfree=%d"
                % max(1, (free - limit) >> 20)]
        cache = fs[1]
    mnt = work.path("peer-" + kind)
    try:
        h.drop_caches()
        proc = peer_mount(h, work, kind, srv, mnt, opts, join)
        try:
            k, s, done, got = peer_epoch(
                h, os.path.join(mnt, base), n, row, img, lab, batch,
                BOUNDED_WORKERS, BOUNDED_EPOCHS, BOUNDED_SECONDS, join,
                each=True)
        finally:
            peer_stop(work, proc, mnt)
        held = int(h.run(["du", "-s", "--block-size=1", cache]).split()[0])
    except (h.Failed, RuntimeError, OSError) as e:
        return {"error": str(e)[-300:]}
    finally:
        if fs:
            loop_fs_drop(*fs)
    if not got:
        return {"error": "the DataLoader reported no epoch"}
    return {"workers": BOUNDED_WORKERS, "epochs": got, "cache held": held}


def footprint(h, cmd):
    """The memory a reader holds of its own (interpreter, libraries,
    workers, batches in flight): the peak of a memory cgroup without a
    bound in which cmd runs, over data in memory (tmpfs pages are not
    charged to their readers). Bytes."""
    cg = h.memory_cgroup(64 << 10)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True,
                           timeout=600, preexec_fn=lambda: memcg.join(cg))
        if p.returncode:
            raise h.Failed("%s: exit %d: %s" % (cmd[0], p.returncode,
                                                p.stderr[-300:]))
        return memcg.peak(cg) or 0
    finally:
        memcg.remove(cg)


def tmpfs_rows(work, n, row):
    """A file of n rows of row - 8 bytes and n int64 labels after them,
    in /dev/shm (else the work directory): its path."""
    d = "/dev/shm" if os.path.isdir("/dev/shm") else work.dir
    path = os.path.join(d, "bfs-bench-rows.%d" % os.getpid())
    with open(path, "wb") as f:
        f.truncate(n * row)
    return path


def bounded(h, work, srv, names, url, base, size, batch, n, row, img, lab):
    """Bigger than the cache and memory at once: a cache of a quarter of
    the archive; the filesystem and its reader in a memory cgroup of a
    quarter and the reader's own footprint (footprint(): a DataLoader
    with workers holds far more of its own than batchfs's reader, and
    in a cgroup of a quarter alone it thrashed on its own pages);
    batchfs (read()) and each peer (+ a DataLoader), BOUNDED_EPOCHS
    shuffled epochs of BOUNDED_SECONDS at most each."""
    limit = size // 4
    workers = [w for w in (2, 1) if pinned(row, batch, w, size) <= limit]
    if not workers:
        return {"error": "a quarter of the archive cannot hold the chunks "
                "one worker's batch pins: raise BENCH_SCALE"}
    k = batch * 2 * max(1, BOUNDED_WORKERS)
    rows = tmpfs_rows(work, k, row)
    try:
        own = {"batchfs": footprint(h, [
            sys.executable, "-c", READ_EPOCHS, rows, "0", "1", "1"]),
            "DataLoader": footprint(h, [
                sys.executable, "-c", h.DL_PREAD, rows, str(k), str(row),
                "0", str(k * (row - 8)), str(batch), str(BOUNDED_WORKERS),
                "60", "0"])}
    except h.Skipped as e:
        return {"error": str(e)}
    except h.Failed as e:
        return {"error": "measuring the readers' own memory: %s" % e}
    finally:
        os.unlink(rows)
    out = {"limit": limit, "reader MiB": {x: v >> 20 for x, v in
                                          own.items()}}
    h.log("  bigger than the cache and memory at once: --cache-gb %.3f, "
          "memory cgroups of %d MiB + the reader's own (%s), %d epochs of "
          "%d s at most (%s)" % (limit / 1e9, limit >> 20, ", ".join(
              "%s %d MiB" % kv for kv in out["reader MiB"].items()),
              BOUNDED_EPOCHS, BOUNDED_SECONDS, h.loadavg()))
    for k in ("batchfs", "rclone", "s3fs"):
        mine = own["batchfs" if k == "batchfs" else "DataLoader"]
        cg = h.memory_cgroup((limit + mine) >> 20)
        join = lambda: memcg.join(cg)  # noqa: E731
        try:
            if k == "batchfs":
                try:
                    out[k] = bounded_batchfs(h, work, url, limit,
                                             workers[0], batch, n, join)
                except h.Failed as e:
                    out[k] = {"error": str(e)}
            else:
                out[k] = bounded_peer(h, work, srv, names, k, base, limit,
                                      batch, n, row, img, lab, join)
            out[k]["cgroup MiB"] = (limit + mine) >> 20
            out[k]["oom kills"] = memcg.oom_kills(cg)
        finally:
            memcg.remove(cg)
        e = out[k].get("epochs")
        if e:
            out[k]["samples/s"] = (sum(x[0] for x in e) /
                                   sum(x[1] for x in e))
        h.log("    %s: %s (%s)" % (k, out[k], h.loadavg()))
    return out


def measure(h, work, srv, wl, names, results):
    name, shape, batch, arch, n = wl
    row = int(h.np.prod(shape)) + 8
    size = os.path.getsize(arch)
    base = os.path.basename(arch)
    url = srv.url(base)
    img, lab = h.archive_rows(arch, n, row)
    since = h.started()
    steps = wanted_steps()
    h.log("\n== %s remote: %d B/sample, batch %d, n=%d, archive %.3f GB, "
          "link %g ms + %g MB/s (%s)" % (name, row, batch, n, size / 1e9,
                                         LATENCY * 1e3, MBPS, h.loadavg()))
    r = {"n": n, "archive bytes": size, "payload bytes": n * row,
         "latency ms": LATENCY * 1e3, "cap MB/s": MBPS}
    got = {"link": [], "local": [], "cold": [], "warm": [], "load": [],
           "first batch": [], "local py": [], "warm py": [], "cold py": []}
    for rep in range(h.REPS):
        got["load"].append(round(os.getloadavg()[0], 2))
        order = ["link", "local", "batchfs", "batchfs py"]
        if rep % 2:
            order.reverse()
        for what in order:
            if what == "link" and "link" in steps:
                got["link"].append(curl_link(h, work, url, size))
            elif what == "local" and "batchfs" in steps:
                s, spy = local_second_epoch(h, work, arch, batch, n, row)
                got["local"].append(s)
                got["local py"].append(spy)
            elif what == "batchfs" and "batchfs" in steps:
                times, st0, st1, _ = batchfs_epochs(h, work, url, batch, n,
                                                    row, py=True)
                got["cold"].append(times[0])
                got["warm"].append(times[1])
                got["warm py"].append(times[2])
                got["first batch"].append(st0["first batch s"])
                r["stats"] = {k: v for k, v in st1["epoch0"].items()
                              if k.startswith("remote_")}
                r["mount bytes"] = st0.get("remote_bytes")
                r["mount requests"] = st0.get("remote_requests")
            elif what == "batchfs py" and "batchfs" in steps:
                times, _, _, _ = batchfs_epochs(h, work, url, batch, n, row,
                                                epochs=1, cold_py=True)
                got["cold py"].append(times[0])
    for k, v in got.items():
        if v and k != "load":
            r[k + " s"] = statistics.median(v)
            r[k + " all"] = v
    r["loads"] = got["load"]
    if "sweep" in steps:
        h.log("  sweep of merge gap / request max (cold epochs, median of "
              "%d; %s)" % (h.REPS, h.loadavg()))
        r["sweep"] = sweep(h, work, url, size, batch, n, row)
    if "cache" in steps:
        r["cache"] = cache_quarter(h, work, url, size, batch, n, row, img,
                                   lab)
    if "peers" in steps:
        srv_link = None
        r["peers"] = peers(h, work, srv, names, base, batch, n, row, img,
                           lab)
        if srv.s3proxy and "link" in steps:
            try:
                srv_link = curl_link(
                    h, work, srv.s3proxy.url("/%s/%s" % (BUCKET, base)),
                    size, [("aws-sigv4", "aws:amz:us-east-1:s3"),
                           ("user", "%s:%s" % (servers.S3_ACCESS,
                                               servers.S3_SECRET))])
            except h.Failed as e:
                h.log("  s3 link: %s" % e)
        r["s3 link s"] = srv_link
    if "bounded" in steps:
        r["bounded"] = bounded(h, work, srv, names, url, base, size, batch,
                               n, row, img, lab)
    derive(r, n)
    report(h, name, r, n, row)
    results[name + " remote"] = h.finished("remote", r, since, n=n, row=row,
                                           batch=batch, archive=size)


def derive(r, n):
    """The rates the report and the figure use, from the seconds."""
    size, payload = r["archive bytes"], r["payload bytes"]
    if r.get("link s"):
        r["link GB/s"] = size / r["link s"] / 1e9
    if r.get("cold s"):
        r["cold GB/s"] = size / r["cold s"] / 1e9
        r["cold samples/s"] = n / r["cold s"]
    if r.get("cold py s"):
        r["cold py GB/s"] = size / r["cold py s"] / 1e9
    if r.get("warm s"):
        r["warm GB/s"] = payload / r["warm s"] / 1e9
    if r.get("local s"):
        r["local GB/s"] = payload / r["local s"] / 1e9
    for k in ("warm py", "local py"):
        if r.get(k + " s"):
            r[k + " GB/s"] = payload / r[k + " s"] / 1e9
    if r.get("link s") and r.get("warm s"):
        # the small rows' target: download at the link limit + a warm epoch
        r["download+warm s"] = r["link s"] + r["warm s"]
    rates = [p["samples/s"] for p in (r.get("peers") or {}).values()
             if p.get("samples/s")]
    if rates:
        r["best peer samples/s"] = max(rates)
    c = r.get("cache")
    if c and "error" not in c:
        c["hit ratio"] = c["hits"] / c["accesses"]
        c["next use ratio"] = c["next use hits"] / c["accesses"]
        c["lru ratio"] = c["lru hits"] / c["accesses"]


def report(h, name, r, n, row):
    """The part's table and its targets."""
    L = h.log

    def target(label, ok):
        return "  [%s %s]" % (label, "MET" if ok else "MISSED")

    L("\n  %s remote (median of %d; loads %s; %s)"
      % (name, h.REPS, r["loads"], h.loadavg()))
    if r.get("link s"):
        L("  %-56s %7.2f s %8.3f GB/s" % (
            "link: curl, %d x 8 MiB ranges in parallel" % CURL_PARALLEL,
            r["link s"], r["link GB/s"]))
    if r.get("cold s"):
        large = not name.startswith("small")
        for k, how in (("cold", "read()"), ("cold py", "Batches()")):
            if r.get(k + " s"):
                L("  %-56s %7.2f s %8.3f GB/s  %.2fx link%s" % (
                    "batchfs: mount + cold shuffled epoch 0, " + how,
                    r[k + " s"], r[k + " GB/s"], r[k + " GB/s"] /
                    r["link GB/s"] if r.get("link GB/s") else float("nan"),
                    target("target >= 0.85x", r[k + " GB/s"] >=
                           0.85 * r["link GB/s"])
                    if r.get("link GB/s") else ""))
        L("  %-56s %7.2f s %8.3f GB/s" % (
            "batchfs: second epoch (from the cache)", r["warm s"],
            r["warm GB/s"]))
        L("  %-56s %7.2f s %8.3f GB/s  %.2fx%s" % (
            "local disk (page cache): second epoch", r["local s"],
            r["local GB/s"], r["warm GB/s"] / r["local GB/s"],
            target("second epoch >= 0.9x", r["warm GB/s"] >=
                   0.9 * r["local GB/s"])))
        if r.get("warm py s") and r.get("local py s"):
            L("  %-56s %7.2f s %8.3f GB/s" % (
                "batchfs: third epoch (from the cache), Batches()",
                r["warm py s"], r["warm py GB/s"]))
            L("  %-56s %7.2f s %8.3f GB/s  %.2fx%s" % (
                "local disk (page cache): third epoch, Batches()",
                r["local py s"], r["local py GB/s"],
                r["warm py GB/s"] / r["local py GB/s"],
                target("Batches() >= 0.9x", r["warm py GB/s"] >=
                       0.9 * r["local py GB/s"])))
        if r.get("download+warm s"):
            L("  %-56s %7.2f s  cold epoch %.2fx of it%s" % (
                "download at the link limit + the warm epoch",
                r["download+warm s"], r["cold s"] / r["download+warm s"],
                target("target <= 1.2x", r["cold s"] <=
                       1.2 * r["download+warm s"])
                if not large else ""))
        st = r.get("stats") or {}
        L("    cold epoch: %d requests (%d at mount, %d bytes), %.3f bytes "
          "received per archive byte, %d retries; batch 0 after %.2f s" % (
              st.get("remote_requests", 0), r.get("mount requests") or 0,
              r.get("mount bytes") or 0,
              st.get("remote_bytes", 0) / r["archive bytes"],
              st.get("remote_retries", 0), r.get("first batch s") or 0))
    for k, v in (r.get("sweep") or {}).items():
        L("  %-56s %7s   %8.3f GB/s  %d requests, %.3fx archive fetched, "
          "batch 0 after %.2f s" % (
              "sweep: merge gap / request max %s" % k, "", v["GB/s"],
              v["requests"], v["fetched"], v["first batch s"]))
    c = r.get("cache")
    if c and "error" in c:
        L("  cache of a quarter: %s" % c["error"])
    elif c:
        L("  cache of a quarter (%.3f GB, %d chunks): %d of %d batches of %d "
          "epochs in %.0f s (budget %d s): %d chunk accesses, %d distinct"
          % (c["limit"] / 1e9, c["capacity"], c["batches read"],
             c["batches"], c["epochs"], c["seconds"], CACHE_SECONDS,
             c["accesses"], c["distinct"]))
        L("  %-56s %8.4f  (%.0f chunks fetched)" % (
            "hit ratio achieved (1 - fetched / accesses)", c["hit ratio"],
            c["fetched chunks"]))
        L("  %-56s %8.4f  achieved %.2fx%s" % (
            "evicting by next use (Belady), simulated", c["next use ratio"],
            c["hits"] / c["next use hits"] if c["next use hits"] else 0,
            target("target >= 0.9x", c["hits"] >= 0.9 * c["next use hits"])))
        L("  %-56s %8.4f  achieved %.2fx%s" % (
            "LRU, simulated", c["lru ratio"],
            c["hits"] / c["lru hits"] if c["lru hits"] else float("inf"),
            target("target > 1x", c["hits"] > c["lru hits"])))
        for k, v in sorted(c["horizon hits"].items(), key=lambda kv:
                           int(kv[0])):
            L("  %-56s %8.4f" % (
                "next use known %s batches ahead, simulated%s" % (
                    k, " (the read-ahead's window)"
                    if int(k) == c["window"] else ""),
                v / c["accesses"]))
        L("    gathers' pins: %d hits, %d misses; %s evictions"
          % (c["pin hits"], c["pin misses"], c["evictions"]))
    for kind, p in (r.get("peers") or {}).items():
        if "error" in p:
            L("  %-56s %s" % ("peer %s" % kind, p["error"]))
            continue
        L("  %-56s %10.0f samples/s%s" % (
            "peer %s + DataLoader (%d workers)" % (kind, p["workers"]),
            p["samples/s"], "" if p["done"] else
            "  (did not finish in %d s: %d of %d samples)"
            % (PEER_SECONDS, p["samples"], n)))
    if r.get("s3 link s"):
        L("  %-56s %7.2f s %8.3f GB/s" % (
            "s3 link: curl --aws-sigv4, 8 MiB ranges", r["s3 link s"],
            r["archive bytes"] / r["s3 link s"] / 1e9))
    if r.get("best peer samples/s") and r.get("cold samples/s"):
        ratio = r["cold samples/s"] / r["best peer samples/s"]
        L("  %-56s %7.1fx%s" % ("batchfs cold epoch / best peer",
                                ratio, target("target >= 10x", ratio >= 10)))
    b = r.get("bounded")
    if b and "error" in b:
        L("  bigger than the cache and memory: %s" % b["error"])
    elif b:
        L("  bigger than the cache and memory at once: --cache-gb %.3f (a "
          "quarter of the archive); the filesystem and its reader in a "
          "memory cgroup of a quarter (%d MiB) + the reader's own (%s); "
          "%d shuffled epochs of %d s at most; samples/s per epoch, then "
          "over all" % (b["limit"] / 1e9, b["limit"] >> 20, ", ".join(
              "%s %d MiB" % kv for kv in b["reader MiB"].items()),
              BOUNDED_EPOCHS, BOUNDED_SECONDS))
        for k in ("batchfs", "rclone", "s3fs"):
            p = b[k]
            what = ("batchfs (%d workers), read()" % p["workers"]
                    if k == "batchfs" and "workers" in p else
                    "%s + DataLoader (%d workers)" % (k, p["workers"])
                    if "workers" in p else k)
            if "error" in p:
                L("  %-56s %s" % (what, p["error"]))
                continue
            L("  %-56s %s  %8.1f samples/s%s" % (what, " ".join(
                "%7.1f%s" % (x[0] / x[1] if x[1] else 0,
                             "" if x[2] else "*") for x in p["epochs"]),
                p["samples/s"], "" if len(p["epochs"]) == BOUNDED_EPOCHS
                else "  (ended in epoch %d: its batches stopped coming)"
                % (len(p["epochs"]) - 1)))
            if k == "batchfs":
                L("    %.2f bytes received per archive byte per epoch, "
                  "%d requests, %d evictions" % (
                      p["received"] / r["archive bytes"] / BOUNDED_EPOCHS,
                      p["requests"], p["evictions"]))
            else:
                L("    its cache held %.3f GB at the end" %
                  (p["cache held"] / 1e9))
            L("    memory cgroup %d MiB, %d OOM kills"
              % (p["cgroup MiB"], p["oom kills"]))
        rates = [b[k]["samples/s"] for k in ("rclone", "s3fs")
                 if b[k].get("samples/s")]
        if rates and b["batchfs"].get("samples/s"):
            ratio = b["batchfs"]["samples/s"] / max(rates)
            L("  %-56s %7.1fx%s" % ("batchfs / best peer, bigger than "
                                    "cache and memory", ratio,
                                    target("target >= 5x", ratio >= 5)))
        L("    (* an epoch not finished in %d s: its rate over what it "
          "read)" % BOUNDED_SECONDS)


def run(h, work, results):
    """The remote part of every workload BENCH_ONLY asks for. Returns
    the failures (strings)."""
    if not shutil.which("nginx") and not os.path.exists("/usr/sbin/nginx"):
        raise h.Skipped("nginx is not installed (tools/scripts/deps.sh "
                        "bench)")
    if not shutil.which("curl"):
        raise h.Skipped("curl is not installed")
    www = work.path("www")
    os.makedirs(www, exist_ok=True)
    wls = []
    for name, shape, batch, n0 in h.WORKLOADS:
        if not h.wanted(name + " remote"):
            continue
        n = max(batch * 8, int(round(n0 * h.SCALE)))
        arch, _ = h.make_archive(work, name.split()[0], shape, n)
        dest = os.path.join(www, os.path.basename(arch))
        os.rename(arch, dest)
        wls.append((name, shape, batch, dest, n))
    names = [os.path.basename(w[3]) for w in wls]
    errors = []
    srv = Servers(h, work, www)
    try:
        for wl in wls:
            try:
                measure(h, work, srv, wl, names, results)
            except (h.Failed, OSError, RuntimeError,
                    subprocess.TimeoutExpired) as e:
                errors.append("%s remote: %s" % (wl[0], e))
                h.log("  %s remote: FAILED: %s" % (wl[0], e))
    finally:
        srv.close()
    return errors
