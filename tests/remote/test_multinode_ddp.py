#!/usr/bin/python3
"""Many nodes, one bucket, and a restart on another number of GPUs, on
this machine: network namespaces as hosts (tests/lib/netns.py), an S3
server (moto) on one, two "nodes" on two others. Each node mounts the same
s3:// object for its own ranks (--world-size 4 --ranks 0-1, and 2-3) and
runs torchrun --nnodes 2 --nproc_per_node 2, DDP on gloo across the
bridge, each rank reading batchfs.IterableDataset through
batchfs.DataLoader with a worker:
- every step's batch on every rank is DataLoader + DistributedSampler's
  (num_replicas=4), computed with torch here;
- node B dies mid-epoch 1 (its ranks SIGKILL their torchrun agent and
  themselves right after a step both nodes finished), node A's ranks fail
  on the next step;
- the job restarts on node A alone with 3 ranks: the state every rank
  reached (batchfs.resume_state of the 4 ranks' states), a mount of
  --world-size 3 --ranks all --resume-at E:S:4, torchrun --nproc_per_node
  3 loading that state: it trains the rest of epoch 1, then epoch 2;
- every sample of epoch 1 trained exactly once between the two jobs, the
  only repeats the padding DistributedSampler(3) adds to the rest; epoch
  2 is DistributedSampler(3)'s.
Every wait is bounded; the namespaces, the bridge, the servers and the
mounts go at the end, also on failure."""
import io
import json
import os
import signal
import subprocess
import sys

import mountlib as ml
import netns
import servers

import torch
from torch.utils.data import DataLoader, DistributedSampler

import batchfs

N, B, SEED, EPOCHS = 203, 8, 11, 3
KILL_AT = (1, 3)      # node B dies after the step that leaves this state
PORT = 29517
RUN_S = 300           # the most a torchrun job may take here
TRAIN = r'''
import datetime, json, os, signal, sys
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
import batchfs

mnt, out, kill_at = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
resume = sys.argv[4] if len(sys.argv) > 4 else None
rank = int(os.environ["RANK"])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
torch.manual_seed(0)
model = DDP(torch.nn.Linear(5, 3))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = batchfs.DataLoader(batchfs.IterableDataset(mnt), num_workers=1)
if resume:
    loader.load_state_dict(json.load(open(resume)))
log = open("%s/steps.%d" % (out, rank), "a")
while loader.state_dict()["epoch"] < int(os.environ["EPOCHS"]):
    epoch = loader.state_dict()["epoch"]
    for batch in loader:
        loss = torch.nn.functional.cross_entropy(model(batch["x"]),
                                                 batch["y"])
        opt.zero_grad()
        loss.backward()            # the all-reduce: every rank's step
        opt.step()
        state = loader.state_dict()
        log.write(json.dumps({"epoch": epoch, "ids": batch["i"].tolist(),
                              "state": state}) + "\n")
        log.flush()
        with open("%s/state.%d.tmp" % (out, rank), "w") as f:
            json.dump(state, f)
        os.replace("%s/state.%d.tmp" % (out, rank),
                   "%s/state.%d" % (out, rank))
        if kill_at and [state["epoch"], state["batch"]] == kill_at:
            dist.barrier()         # every rank saved: node B dies now
            if int(os.environ["GROUP_RANK"]) == 1:
                try:
                    os.kill(os.getppid(), signal.SIGKILL)
                except ProcessLookupError:
                    pass
                os.kill(os.getpid(), signal.SIGKILL)
dist.barrier()
dist.destroy_process_group()
'''
failures = []


def reference(world, rank, epoch):
    sampler = DistributedSampler(range(N), num_replicas=world, rank=rank,
                                 shuffle=True, seed=SEED)
    sampler.set_epoch(epoch)
    return [b.tolist() for b in DataLoader(range(N), batch_size=B,
                                           sampler=sampler)]


def torchrun(hosts, host, tmp, env, nnodes, nproc, node_rank, args):
    """A torchrun job of one node in host's network, its own session (a
    port of its own for each job size)."""
    cmd = hosts.run_args(host) + [
        sys.executable, "-m", "torch.distributed.run", "--nnodes",
        str(nnodes), "--nproc_per_node", str(nproc), "--node_rank",
        str(node_rank), "--master_addr", hosts.addr["a"], "--master_port",
        str(PORT + nproc), "--max_restarts", "0", "--redirects", "1",
        "--tee", "1",   # Debian 12 torchrun needs both (README)
        os.path.join(tmp, "train.py")] + args
    log = open(os.path.join(tmp, "torchrun-%s-%d.log" % (host, nproc)), "a")
    return subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                            stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def finish_job(procs, what):
    """Wait (bounded) for a job's torchrun processes; kill what is left.
    Their exit statuses."""
    out = []
    for p in procs:
        try:
            out.append(p.wait(RUN_S))
        except subprocess.TimeoutExpired:
            failures.append("%s: still running after %d s: killed"
                            % (what, RUN_S))
            os.killpg(p.pid, signal.SIGKILL)
            out.append(p.wait(30))
    return out


def steps(out, rank):
    path = os.path.join(out, "steps.%d" % rank)
    if not os.path.exists(path):
        return []
    return [json.loads(line) for line in open(path)]


def mount(hosts, host, s3, env, mnt, *opts):
    os.makedirs(mnt, exist_ok=True)
    cmd = hosts.run_args(host) + [
        ml.BATCHFS, "mount", "s3://data/ds.pt", mnt, "--s3-endpoint",
        s3.endpoint, "--cache-dir", os.path.join(ml.TMP, "cache-" + host),
        "--batch-size", str(B), "--shuffle", "--seed", str(SEED),
        "--epochs", str(EPOCHS)] + [str(o) for o in opts]
    subprocess.run(cmd, env=env, check=True, timeout=120,
                   stdin=subprocess.DEVNULL)
    return mnt


def first_job(hosts, s3, env, tmp, out):
    """Two nodes of 2 ranks each; node B dies at KILL_AT."""
    mnts = [mount(hosts, "a", s3, env, os.path.join(tmp, "mnt-a"),
                  "--world-size", 4, "--ranks", "0-1"),
            mount(hosts, "b", s3, env, os.path.join(tmp, "mnt-b"),
                  "--world-size", 4, "--ranks", "2-3")]
    try:
        jobs = [torchrun(hosts, h, tmp, env, 2, 2, i,
                         [mnt, out, json.dumps(list(KILL_AT))])
                for i, (h, mnt) in enumerate(zip("ab", mnts))]
        rc_b = finish_job(jobs[1:], "node B")[0]
        # node A's ranks fail on their next step; its agent then waits for
        # node B at its exit barrier (torchrun's 300 s): stop it once its
        # ranks are gone, as a job scheduler would
        log_a = os.path.join(tmp, "torchrun-a-2.log")
        if not ml.wait_for(lambda: jobs[0].poll() is not None or
                           "failed (exitcode" in open(log_a).read(), RUN_S,
                           every=0.2):
            failures.append("node A's ranks still running %d s after "
                            "node B died" % RUN_S)
        if jobs[0].poll() is None:
            os.killpg(jobs[0].pid, signal.SIGKILL)
        rc_a = finish_job(jobs[:1], "node A")[0]
        if rc_b != -signal.SIGKILL or rc_a == 0:
            failures.append("the two-node job: node B exit %r (killed), "
                            "node A %r (failing after it)" % (rc_b, rc_a))
    finally:
        for m in mnts:
            assert ml.umount(m).returncode == 0
    states = []
    for r in range(4):
        log = steps(out, r)
        want = [b for e in range(KILL_AT[0]) for b in reference(4, r, e)]
        want += reference(4, r, KILL_AT[0])[:KILL_AT[1]]
        if [s["ids"] for s in log] != want:
            failures.append("rank %d of 4: trained %r, want %r"
                            % (r, [s["ids"] for s in log], want))
        states.append(json.load(open(os.path.join(out, "state.%d" % r))))
    print("ok: 2 nodes x 2 ranks: every step DistributedSampler(4)'s, "
          "node B killed at epoch %d batch %d" % KILL_AT)
    return states


def second_job(hosts, s3, env, tmp, out, state):
    """One node, 3 ranks, from the state every rank reached."""
    at = "%d:%d:%d" % (state["epoch"], state["samples_seen"],
                       state["list_world_size"])
    path = os.path.join(tmp, "resume.json")
    with open(path, "w") as f:
        json.dump(state, f)
    mnt = mount(hosts, "a", s3, env, os.path.join(tmp, "mnt-a3"),
                "--world-size", 3, "--ranks", "all", "--resume-at", at)
    try:
        job = torchrun(hosts, "a", tmp, env, 1, 3, 0,
                       [mnt, out, "null", path])
        rc = finish_job([job], "the restarted job")
        if rc != [0]:
            failures.append("the restarted job: exit %r" % rc)
    finally:
        assert ml.umount(mnt).returncode == 0
    return at


def main():
    ml.require_fuse()
    why = netns.usable()
    if why:
        ml.skip(why)
    servers.require_moto()
    tmp = ml.TMP
    out = os.path.join(tmp, "out")
    out2 = os.path.join(tmp, "out2")
    for d in (out, out2):
        os.makedirs(d, exist_ok=True)
    with open(os.path.join(tmp, "train.py"), "w") as f:
        f.write(TRAIN)
    g = torch.Generator().manual_seed(7)
    buf = io.BytesIO()
    torch.save({"x": torch.randn(N, 5, generator=g),
                "y": torch.randint(0, 3, (N,), generator=g),
                "i": torch.arange(N)}, buf)
    # (the ranks import batchfs through PYTHONPATH, tests/run.sh's)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID=servers.S3_ACCESS,
               AWS_SECRET_ACCESS_KEY=servers.S3_SECRET,
               AWS_DEFAULT_REGION=servers.S3_REGION,
               GLOO_SOCKET_IFNAME="eth0", EPOCHS=str(EPOCHS),
               HOME=os.path.join(tmp, "home"), PYTHONDONTWRITEBYTECODE="1")
    os.makedirs(env["HOME"], exist_ok=True)
    with netns.Hosts(["a", "b", "s3"]) as hosts, \
            servers.S3Server(os.path.join(tmp, "s3"), verify=False,
                             host=hosts.addr["s3"],
                             run_args=hosts.run_args("s3")) as s3:
        s3.put("data", "ds.pt", buf.getvalue())
        states = first_job(hosts, s3, env, tmp, out)
        state = batchfs.resume_state(states)
        e = KILL_AT[0]
        if (state["epoch"], state["samples_seen"]) != (e, 4 * KILL_AT[1] * B):
            failures.append("resume_state: %r" % state)
        at = second_job(hosts, s3, env, tmp, out2, state)
    print("ok: restarted on 1 node x 3 ranks with --resume-at %s" % at)
    first = [i for r in range(4) for s in steps(out, r)
             if s["epoch"] == e for i in s["ids"]]
    full = [reference(4, r, e) for r in range(4)]
    whole = [full[p % 4][p // 4 // B][p // 4 % B] for p in range(N)]
    rest = whole[4 * KILL_AT[1] * B:]
    pad = rest[:-(-len(rest) // 3) * 3 - len(rest)]
    second = []
    for r in range(3):
        log = steps(out2, r)
        got = [s["ids"] for s in log if s["epoch"] == e]
        pick = DistributedSampler(range(len(rest)), num_replicas=3, rank=r,
                                  shuffle=False)
        want = [b.tolist() for b in DataLoader([rest[j] for j in pick],
                                               batch_size=B)]
        if got != want:
            failures.append("restarted rank %d, epoch %d: %r, want %r"
                            % (r, e, got, want))
        nxt = [s["ids"] for s in log if s["epoch"] == e + 1]
        if nxt != reference(3, r, e + 1):
            failures.append("restarted rank %d, epoch %d: %r, want "
                            "DistributedSampler(3)'s %r"
                            % (r, e + 1, nxt, reference(3, r, e + 1)))
        second += [i for b in got for i in b]
    if sorted(first + second) != sorted(list(range(N)) + pad):
        failures.append("epoch %d: samples trained %r, want each of %d "
                        "once and the padding %r"
                        % (e, sorted(first + second), N, pad))
    else:
        print("ok: every sample of epoch %d trained once (%d, padding %r), "
              "epoch %d DistributedSampler(3)'s" % (e, N, pad, e + 1))
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
