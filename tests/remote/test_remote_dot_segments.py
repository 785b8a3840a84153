#!/usr/bin/python3
"""'.' and '..' path segments are sent as written, never removed.

- s3://BUCKET/KEY with keys that hold them ("a/../k", "./k", "a/./b/../k",
  "../other/k"): S3 keys are any strings, and S3 takes a path as sent, so
  each is its own object, distinct from "k" of the same bucket and from
  key "k" of bucket "other" (where "../other/k" would lead once
  resolved); each reads exact the bytes of the key asked for, signed
  right (moto's S3 server behind the proxy's SigV4 check: the signature
  is of the path sent), named as asked for.
- http://HOST/a/../obj.bin and http://HOST/./obj.bin through the fault
  proxy, which serves another object at exactly those paths (a server
  that does not resolve them): that object's bytes are read, not those
  of /obj.bin.
"""
import os

import remotelib as rl
from remotelib import FaultProxy, servers

servers.require_nginx()
servers.require_moto()
TMP = rl.TMP
OK, SECRET = servers.S3_ACCESS, servers.S3_SECRET
KEYS = ["a/../k", "./k", "a/./b/../k", "../other/k"]


def read_all(p, url, data, failures, what):
    o = p.open(url, ok=False)
    if not o["ok"]:
        failures.append(f"{what}: open: {o}")
        return
    if o["size"] != len(data) or o["name"] != url.split("?")[0]:
        failures.append(f"{what}: size {o['size']} (want {len(data)}), "
                        f"name {o['name']}")
        return
    ranges = rl.random_ranges(len(data), 10, seed=13, max_len=16 * 1024)
    r, got = rl.read_ranges(p, o["id"], ranges, name="dots")
    if r["failed"]:
        failures.append(f"{what}: reads failed: {r}")
        return
    try:
        rl.check_exact(data, got, ranges)
    except AssertionError as e:
        failures.append(f"{what}: not the bytes of the key asked for: {e}")


def s3_keys(failures):
    objects = {("data", k): os.urandom(64 * 1024 + i)
               for i, k in enumerate(KEYS)}
    objects[("data", "k")] = os.urandom(70 * 1024)
    objects[("other", "k")] = os.urandom(71 * 1024)
    with servers.S3Server(os.path.join(TMP, "s3"),
                          buckets=["data", "other"]) as s3:
        for (b, k), data in objects.items():
            s3.put(b, k, data)
        env = rl.clean_env(AWS_ACCESS_KEY_ID=OK,
                           AWS_SECRET_ACCESS_KEY=SECRET)
        with rl.Probe("--s3-endpoint", s3.endpoint, env=env) as p:
            for (b, k), data in objects.items():
                read_all(p, f"s3://{b}/{k}", data, failures,
                         f"s3://{b}/{k}")
        if s3.proxy.stats()["refused"]:
            failures.append(f"signatures refused: {s3.proxy.stats()}")


def http_paths(failures):
    root = os.path.join(TMP, "www")
    os.makedirs(root, exist_ok=True)
    obj, other = os.urandom(50 * 1024), os.urandom(50 * 1024)
    for name, data in (("obj.bin", obj), ("other.bin", other)):
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)
    with servers.Nginx(root) as ng, FaultProxy(ng.base_url) as fp:
        with rl.Probe("--timeout", 10) as p:
            for path in ("/a/../obj.bin", "/./obj.bin"):
                fp.replace(path, "/other.bin")
                read_all(p, fp.url(path), other, failures, fp.url(path))
            read_all(p, fp.url("/obj.bin"), obj, failures, "/obj.bin")


def main():
    failures = []
    s3_keys(failures)
    http_paths(failures)
    rl.finish(failures)


if __name__ == "__main__":
    main()
