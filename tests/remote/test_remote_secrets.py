#!/usr/bin/python3
"""No secret in anything fs/remote says: its messages, its counters, its
log (debug lines included).

Secrets: an AWS secret key, a session token and an access key ID in the
environment, for s3:// objects (nginx stands in for the store, behind the
fault proxy's SigV4 check); a presigned-style URL whose query string holds
a signature, a credential and a token; a URL with user:password@. Each is
used for objects that open and read (the signature checked, so the
secrets were really sent), through retried faults (503, resets: debug
lines), and for failures: a wrong secret (403), a missing object (404),
a refused answer (403 to a presigned URL), a port nobody listens on, an
object replaced (412). Every answer, the stats and the log are searched
for each secret: none may appear; objects are named without query string
or user:password.
"""
import os

import remotelib as rl
from remotelib import FaultProxy, servers

servers.require_nginx()
TMP = rl.TMP

ACCESS = "AKIDSECRETACCESSID01"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYSECRETKEY01"
TOKEN = "IQoJb3JpZ2luX2VjSECRETSESSIONTOKEN01"
SIG = "5ecre75e57bada55c0ffee0ddba11deadbeef00decafbad"
QTOKEN = "PRESIGNEDSECRETTOKEN01"
QCRED = "AKIDPRESIGNEDCRED01"
PASSWORD = "hunter2SECRETPASSWORD"
NEEDLES = [ACCESS, SECRET, TOKEN, SIG, QTOKEN, QCRED, PASSWORD,
           "X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token"]


def main():
    root = os.path.join(TMP, "www")
    os.makedirs(os.path.join(root, "bucket"), exist_ok=True)
    data = os.urandom(1 << 20)
    for name in ("obj.bin", "bucket/obj.bin"):
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)
    answers = []
    failures = []
    log = os.path.join(TMP, "probe.log")
    query = (f"?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={QCRED}"
             f"%2F20240101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Expires=60"
             f"&X-Amz-Security-Token={QTOKEN}&X-Amz-Signature={SIG}")
    ranges = rl.random_ranges(len(data), 30, seed=9, max_len=64 * 1024)

    def reads(p, o, name):
        r, got = rl.read_ranges(p, o["id"], ranges, name=name)
        answers.append(r)
        return r, got

    with servers.Nginx(root) as ng, \
            FaultProxy(ng.base_url, verify_sigv4={
                "keys": {ACCESS: SECRET}, "region": "us-east-1",
                "token": TOKEN}) as s3, \
            FaultProxy(ng.base_url) as fp:
        env = rl.clean_env(AWS_ACCESS_KEY_ID=ACCESS,
                           AWS_SECRET_ACCESS_KEY=SECRET,
                           AWS_SESSION_TOKEN=TOKEN)
        with rl.Probe("--s3-endpoint", s3.base_url, "--timeout", 3,
                      "--stall", 1, env=env, log=log) as p:
            o = p.open("s3://bucket/obj.bin")
            answers.append(o)
            s3.fail("503", count=4, retry_after=0)
            s3.fail("reset", count=4)
            r, got = reads(p, o, "s3")
            if r["failed"]:
                failures.append(f"signed reads failed: {r}")
            else:
                rl.check_exact(data, got, ranges)
            answers.append(p.open("s3://bucket/missing.bin", ok=False))
            answers.append(p.open("s3://nobucket/obj.bin", ok=False))
            s3.replace("/bucket/obj.bin", "/obj.bin.gone")
            answers.append(p.cmd(f"read {o['id']} 0 10 {TMP}/x"))
            s3.replace("/bucket/obj.bin", None)
            answers.append(p.stats())
        bad_env = dict(env, AWS_SECRET_ACCESS_KEY=SECRET[:-2] + "xx")
        with rl.Probe("--s3-endpoint", s3.base_url, "--timeout", 3,
                      env=bad_env, log=log) as p:
            r = p.open("s3://bucket/obj.bin", ok=False)
            answers.append(r)
            if r["ok"] or r["errno"] != "EACCES":
                failures.append(f"wrong secret: {r}")

        presigned = fp.url("/obj.bin") + query
        userinfo = fp.base_url.replace("http://",
                                       f"http://user:{PASSWORD}@")
        with rl.Probe("--timeout", 3, "--stall", 1, log=log) as p:
            o = p.open(presigned)
            answers.append(o)
            if o["name"] != fp.url("/obj.bin"):
                failures.append(f"presigned URL named {o['name']}")
            fp.fail("503", count=4, retry_after=0)
            fp.fail("truncate", count=4)
            r, got = reads(p, o, "presigned")
            if r["failed"]:
                failures.append(f"presigned reads failed: {r}")
            fp.fail("status", code=403, s3_code="AccessDenied")
            answers.append(p.cmd(f"read {o['id']} 0 10 {TMP}/x"))
            fp.clear()
            answers.append(p.open(fp.url("/missing.bin") + query,
                                  ok=False))
            answers.append(p.open(
                f"http://127.0.0.1:{servers.free_port()}/x{query}",
                ok=False))
            u = p.open(userinfo + "/obj.bin" + query)
            answers.append(u)
            if u["name"] != fp.url("/obj.bin"):
                failures.append(f"user:password URL named {u['name']}")
            answers.append(p.stats())
    if s3.stats()["refused"].keys() - {"SignatureDoesNotMatch"}:
        failures.append(f"the checker refused {s3.stats()['refused']}")
    with open(log) as f:
        logged = f.read()
    if "again in" not in logged:
        failures.append("no retry was logged: the test lost its teeth")
    text = "\n".join(map(str, answers)) + "\n" + logged
    for n in NEEDLES:
        if n in text:
            line = next(t for t in text.splitlines() if n in t)
            failures.append(f"{n!r} shown: {line[:300]}")
    rl.finish(failures)


if __name__ == "__main__":
    main()
