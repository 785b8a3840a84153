#!/usr/bin/python3
"""README's torchrun recipe ("One mount for all GPUs"), run as written:
its two commands (the mount, then torchrun with the spelling of
--nproc_per_node that every torch accepts) with a node of 2 instead of 8
(--world-size and --nproc_per_node), its train_ddp.py unchanged but for
the mountpoint, on a 10,000-sample cifar.pt as README's walkthrough packs:
- a run ends with rank 0's checkpoint after epoch 9 (loader at epoch 10);
- a run killed (SIGKILL of torchrun and every rank) once a checkpoint of
  epoch 2 or later is there leaves a checkpoint torch.load reads (the
  recipe writes a temporary file and renames it); run again, it resumes
  from it, finishes, and ends with the weights and optimizer state of the
  run that was not killed, bit for bit;
- README's restart on another number of GPUs ("Many nodes, and a restart
  ..."), its four commands with 3 GPUs for its 6: a run killed after a
  checkpoint mid-epoch 2 or later, the position printed from that
  checkpoint, the mount unmounted and made again with --world-size 3
  --resume-at that position, torchrun of 3 ranks: the same train_ddp.py
  loads the checkpoint of 2 ranks and runs to its end."""
import os
import re
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
import mountlib as ml  # noqa: E402

import torch  # noqa: E402

NODE = 2          # ranks on this machine, for README's 8
RUN_S = 300       # a whole run, bounded


def recipe():
    """(the shell commands, train_ddp.py) of README's section."""
    text = open(os.path.join(SRC, "README.md")).read()
    rest = text[text.index("### One mount for all GPUs"):]
    shell = re.findall(r"^```\n(.*?)^```$", rest, re.S | re.M)[0]
    python = re.findall(r"^```python\n(.*?)^```$", rest, re.S | re.M)[0]
    cmds = [line[2:].split("  #")[0].strip()
            for line in shell.splitlines() if line.startswith("$ ")]
    return cmds, python


def restart_recipe():
    """The shell commands of README's restart, and the position its
    example prints."""
    text = open(os.path.join(SRC, "README.md")).read()
    rest = text[text.index("### Many nodes, and a restart"):]
    shell = re.findall(r"^```\n(.*?)^```$", rest, re.S | re.M)[0]
    lines = shell.splitlines()
    cmds = [line[2:] for line in lines if line.startswith("$ ")]
    return cmds, lines[1]


def mid_checkpoint(d):
    """A checkpoint within epoch 2 or later (not at its start)."""
    try:
        at = checkpoint(d)["loader"]
        return at["epoch"] >= 2 and at["batch"] > 0
    except (OSError, EOFError, RuntimeError, KeyError):
        return False


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(cmd, cwd, env, kill_when=None):
    """Run README's torchrun command in cwd; with kill_when, SIGKILL its
    process group once kill_when() is true. Returns the exit status."""
    p = subprocess.Popen(["bash", "-c", cmd], cwd=cwd, start_new_session=True,
                         env=dict(env, PET_MASTER_PORT=str(free_port())),
                         stdout=open(os.path.join(cwd, "out.log"), "ab"),
                         stderr=subprocess.STDOUT)
    deadline = time.monotonic() + RUN_S
    try:
        while p.poll() is None and time.monotonic() < deadline:
            if kill_when and kill_when():
                os.killpg(p.pid, signal.SIGKILL)
                break
            time.sleep(0.01)
    finally:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        rc = p.wait()
        try:   # the ranks and their workers too, whatever happened
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return rc


def restart(run_cmd, d, mnt, env, tmp):
    """README's restart on 3 GPUs of a run of 2 killed mid-epoch."""
    cmds, example = restart_recipe()
    assert len(cmds) == 4 and cmds[0].startswith("python3 -c ") and \
        cmds[1].startswith("batchfs umount ") and \
        cmds[2].startswith("batchfs mount ") and \
        cmds[3].startswith("torchrun "), cmds
    rc = torchrun(run_cmd, d, env, kill_when=lambda: mid_checkpoint(d))
    assert rc != 0, "the run to kill ended before it was killed"
    at = subprocess.run(["bash", "-c", cmds[0]], cwd=d, env=env,
                        capture_output=True, text=True, timeout=120)
    assert at.returncode == 0 and re.fullmatch(r"\d+:\d+:%d\n" % NODE,
                                               at.stdout), at
    at = at.stdout.strip()
    print("ok: killed at %s (epoch:samples_seen:world_size)" % at)
    three = lambda c: c.replace(" 6", " 3").replace(example, at) \
        .replace("/mnt/cifar", mnt)  # noqa: E731
    for c in cmds[1:3]:
        p = subprocess.run(["bash", "-c", three(c)], cwd=tmp, env=env,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, (three(c), p.stderr)
    assert "--resume-at %s" % at in three(cmds[2]) and \
        "--world-size 3" in three(cmds[2]), three(cmds[2])
    rc = torchrun(three(cmds[3]), d, env)
    assert rc == 0, "restarted on 3: exit %d\n%s" % (rc, log_tail(d))
    end = checkpoint(d)["loader"]
    assert end["epoch"] == 10 and end["world_size"] == 3, end
    print("ok: restarted on 3 ranks with --resume-at %s, ran to its end: "
          "%r" % (at, end))


def checkpoint(d):
    return torch.load(os.path.join(d, "ckpt.pt"))


def late_checkpoint(d):
    """A checkpoint of epoch 2 or later is there."""
    try:
        return checkpoint(d)["loader"]["epoch"] >= 2
    except (OSError, EOFError, RuntimeError, KeyError):
        return False


def same(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    return a == b


def log_tail(d):
    with open(os.path.join(d, "out.log"), errors="replace") as f:
        return f.read()[-3000:]


def main():
    ml.require_fuse()
    tmp = ml.TMP
    mnt = os.path.join(tmp, "mnt", "cifar")
    os.makedirs(mnt)
    g = torch.Generator().manual_seed(1)
    torch.save({"images": torch.randint(0, 256, (10000, 3, 32, 32),
                                        dtype=torch.uint8, generator=g),
                "labels": torch.randint(0, 10, (10000,), generator=g)},
               os.path.join(tmp, "cifar.pt"))
    cmds, python = recipe()
    assert len(cmds) == 2 and cmds[0].startswith("batchfs mount ") and \
        cmds[1].startswith("torchrun "), cmds
    node = lambda c: c.replace(" 8", " %d" % NODE)  # noqa: E731
    mount_cmd, run_cmd = node(cmds[0]), node(cmds[1])
    assert "--world-size %d" % NODE in mount_cmd and \
        "--nproc_per_node %d" % NODE in run_cmd, (mount_cmd, run_cmd)
    env = dict(os.environ,
               PATH=os.pathsep.join([os.path.dirname(ml.BATCHFS),
                                     "/usr/bin", "/bin"]),
               PYTHONPATH=os.path.join(SRC, "loader", "python"))
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
              "MASTER_PORT"):
        env.pop(k, None)
    p = subprocess.run(["bash", "-c", mount_cmd.replace("/mnt/cifar", mnt)],
                       cwd=tmp, env=env, capture_output=True, text=True)
    assert p.returncode == 0, (mount_cmd, p.stderr)
    ml._mounts.append(mnt)
    failures = []
    runs = {}
    try:
        for name in ("whole", "killed", "restart"):
            runs[name] = os.path.join(tmp, name)
            os.makedirs(runs[name])
            with open(os.path.join(runs[name], "train_ddp.py"), "w") as f:
                f.write(python.replace("/mnt/cifar", mnt))
        rc = torchrun(run_cmd, runs["whole"], env)
        if rc != 0:
            failures.append("%s: exit %d\n%s" % (run_cmd, rc,
                                                 log_tail(runs["whole"])))
            return ml.finish(failures)
        whole = checkpoint(runs["whole"])
        # where it stopped, and (a --world-size mount) where that is in
        # the epoch's list: at the start of epoch 10
        if {k: whole["loader"].get(k) for k in ("epoch", "batch",
                                                "samples_seen")} != \
                {"epoch": 10, "batch": 0, "samples_seen": 0}:
            failures.append("the whole run's checkpoint: %r"
                            % whole["loader"])
        print("ok: %s ran to its end: %r" % (run_cmd, whole["loader"]))
        d = runs["killed"]
        rc = torchrun(run_cmd, d, env, kill_when=lambda: late_checkpoint(d))
        if rc == 0:
            failures.append("the run to kill ended before it was killed")
        try:
            at = checkpoint(d)["loader"]
            print("ok: killed (exit %d); its checkpoint loads: %r" % (rc, at))
        except Exception as ex:  # noqa: BLE001 - what the user would get
            failures.append("the killed run's checkpoint: %r" % ex)
        rc = torchrun(run_cmd, d, env)
        if rc != 0:
            failures.append("resumed: exit %d\n%s" % (rc, log_tail(d)))
        else:
            resumed = checkpoint(d)
            if not same(resumed, whole):
                failures.append("resumed: the checkpoint differs from the "
                                "whole run's")
            else:
                print("ok: resumed to the end: the weights and optimizer "
                      "state of the whole run, bit for bit")
        restart(run_cmd, runs["restart"], mnt, env, tmp)
    finally:
        assert ml.umount(mnt).returncode == 0
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
