#!/usr/bin/python3
"""batchfs mount of s3:// sources from an S3-compatible server: moto's
(tests/lib/servers.py; skipped where its venv is missing:
tools/scripts/venv.sh s3), behind the fault proxy that checks every SigV4
signature against the secret key given to it (moto checks none).

- Credentials from the environment (AWS_ACCESS_KEY_ID,
  AWS_SECRET_ACCESS_KEY), the endpoint from --s3-endpoint: every batch of
  2 epochs equals a local mount of the same archive.
- Credentials from a profile (AWS_PROFILE, in HOME/.aws/credentials), the
  endpoint from AWS_ENDPOINT_URL: the same, for an .npz.
- A missing bucket, a missing key, a wrong secret key: the mount fails
  (exit 1, nothing mounted) with a message that says which ("no such
  bucket", "no such key", "credentials refused").
- The secret key appears in no file the mounts show (README,
  dataset.json, stats), in no log, in no message, in no mount table
  line, in no file of the cache directory."""
import os
import subprocess
import sys

import mountremote as mr
from mountremote import ml, servers

ml.require_fuse()
servers.require_moto()
try:
    import torch  # noqa: F401
except ImportError:
    ml.skip("torch is not installed")

SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYMOUNTSECRET1"
ACCESS = servers.S3_ACCESS
failures = []
seen = []  # every text a secret must not be in


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def shown(mnt, log):
    for name in ("README", "dataset.json", "stats"):
        with open(os.path.join(mnt, name)) as f:
            seen.append((mnt + "/" + name, f.read()))
    with open(log) as f:
        seen.append((log, f.read()))
    with open("/proc/mounts") as f:
        seen.append(("/proc/mounts", f.read()))


def mounted(what, url, local, env, *opts):
    log = os.path.join(mr.TMP, what.replace(" ", "-") + ".log")
    p, rm = mr.mount(url, "--batch-size", 40, "--shuffle", "--seed", 3,
                     "--log-file", log, *opts, env=env, check=False,
                     cache=os.path.join(mr.TMP, "cache"))
    seen.append((what + " stderr", p.stderr + p.stdout))
    check(p.returncode == 0, "%s: mounted (%s)" % (what, p.stderr.strip()))
    if p.returncode:
        return
    _, lm = mr.mount(local, "--batch-size", 40, "--shuffle", "--seed", 3)
    bad = mr.same_batches(rm, lm, 2)
    check(not bad, "%s: every batch of 2 epochs equals the local mount's "
          "(%d differ)" % (what, len(bad)))
    shown(rm, log)
    mr.unmount(rm, lm)


def refused(what, url, env, words, *opts):
    p, mnt = mr.mount(url, *opts, env=env, check=False)
    seen.append((what + " stderr", p.stderr + p.stdout))
    check(p.returncode == 1 and not ml.is_mounted(mnt) and
          all(w in p.stderr for w in words),
          "%s: the mount fails saying %s (%d: %s)"
          % (what, words, p.returncode, p.stderr.strip()))


def main():
    with servers.S3Server(os.path.join(mr.TMP, "s3"), buckets=["data"],
                          keys={ACCESS: SECRET}) as s3:
        local_pt = os.path.join(mr.TMP, "d.pt")
        mr.write("torch", local_pt, mr.arrays(900, 2000, 1))
        local_npz = os.path.join(mr.TMP, "d.npz")
        mr.write("npz", local_npz, mr.arrays(900, 2000, 2))
        for key, path in (("train/d.pt", local_pt),
                          ("train/d.npz", local_npz)):
            with open(path, "rb") as f:
                s3.put("data", key, f.read())
        env = mr.env_without_aws(AWS_ACCESS_KEY_ID=ACCESS,
                                 AWS_SECRET_ACCESS_KEY=SECRET)
        mounted("environment credentials", "s3://data/train/d.pt",
                local_pt, env, "--s3-endpoint", s3.endpoint)
        home = os.path.join(mr.TMP, "profile-home")
        os.makedirs(os.path.join(home, ".aws"), exist_ok=True)
        with open(os.path.join(home, ".aws", "credentials"), "w") as f:
            f.write("[train]\naws_access_key_id = %s\n"
                    "aws_secret_access_key = %s\n" % (ACCESS, SECRET))
        penv = mr.env_without_aws(HOME=home, AWS_PROFILE="train",
                                  AWS_ENDPOINT_URL=s3.endpoint)
        mounted("profile credentials", "s3://data/train/d.npz", local_npz,
                penv)
        refused("a missing bucket", "s3://nobucket/train/d.pt", env,
                ["no such bucket", "nobucket"], "--s3-endpoint",
                s3.endpoint)
        refused("a missing key", "s3://data/train/none.pt", env,
                ["no such key", "train/none.pt"], "--s3-endpoint",
                s3.endpoint)
        wrong = mr.env_without_aws(AWS_ACCESS_KEY_ID=ACCESS,
                                   AWS_SECRET_ACCESS_KEY=SECRET[:-1] + "X")
        refused("a wrong secret key", "s3://data/train/d.pt", wrong,
                ["credentials refused", "SignatureDoesNotMatch"],
                "--s3-endpoint", s3.endpoint)
    cache = os.path.join(mr.TMP, "cache")
    for name in os.listdir(cache):
        with open(os.path.join(cache, name), "rb") as f:
            seen.append((name, f.read().decode("latin-1")))
    found = [where for where, text in seen
             if SECRET in text or SECRET[:-1] + "X" in text]
    check(not found, "the secret key is in none of %d files, logs and "
          "messages (%s)" % (len(seen), found))
    return ml.finish(failures)


if __name__ == "__main__":
    sys.exit(main())
