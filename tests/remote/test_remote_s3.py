#!/usr/bin/python3
"""fs/remote against an S3-compatible server: moto's (tests/lib/servers.py;
skipped where its venv is missing: tools/scripts/venv.sh s3) behind the
fault proxy's SigV4 check (moto itself takes any key and signature).

- credentials from the environment (AWS_ACCESS_KEY_ID, ...): the
  requests are signed by libcurl and accepted; ranges of an object whose
  key holds '/', a space, '+', '%' and UTF-8 read exact; the endpoint from
  --s3-endpoint, or from AWS_ENDPOINT_URL; a server that answers the
  open's bytes=0-0 with more (to the end, as s3rver 3.7.1 did: the
  proxy's open_range): the same;
- credentials from a profile (AWS_PROFILE) in a credentials file under
  a HOME of the test's own, the region from [profile NAME] in the config
  file: the signature's region is that one (a checker that wants another
  region refuses it); the [default] profile without AWS_PROFILE; a
  session token (AWS_SESSION_TOKEN) is sent signed, and refused when
  missing;
- a wrong secret key: EACCES, "credentials refused", the S3 error code
  (SignatureDoesNotMatch) and where the credentials came from; an
  unknown access key: EACCES (InvalidAccessKeyId); no credentials at all:
  EACCES, "credentials from: none";
- an object replaced under an open one: ESTALE, never the new bytes,
  both from moto's 412 to If-Match and, where the proxy drops the
  condition (a server that ignores it, as s3rver 3.7.1 did), from the
  answer's new ETag;
- a missing bucket: ENOENT "no such bucket NAME"; a missing key: ENOENT
  "no such key KEY in bucket NAME";
- AWS_PROFILE naming a profile found nowhere: EINVAL naming it.
"""
import os

import remotelib as rl
from remotelib import FaultProxy, servers

servers.require_moto()
TMP = rl.TMP
KEY = "dir/my key+%é.bin"
OK, SECRET = servers.S3_ACCESS, servers.S3_SECRET


def env_creds(**extra):
    return rl.clean_env(AWS_ACCESS_KEY_ID=OK, AWS_SECRET_ACCESS_KEY=SECRET,
                        **extra)


def read_all(p, url, data, failures, what):
    o = p.open(url, ok=False)
    if not o["ok"]:
        failures.append(f"{what}: open: {o}")
        return o
    if o["size"] != len(data):
        failures.append(f"{what}: size {o['size']} != {len(data)}")
        return o
    ranges = rl.random_ranges(len(data), 40, seed=7, max_len=64 * 1024)
    r, got = rl.read_ranges(p, o["id"], ranges, name="s3")
    if r["failed"]:
        failures.append(f"{what}: reads failed: {r}")
    else:
        rl.check_exact(data, got, ranges)
    return o


def expect(r, errno, words, failures, what):
    if r["ok"] or r["errno"] != errno or \
            not all(w in r["msg"] for w in words):
        failures.append(f"{what}: want {errno} with {words}, got {r}")


def main():
    failures = []
    data = os.urandom(3 << 20)
    url = "s3://data/" + KEY
    with servers.S3Server(os.path.join(TMP, "s3"),
                          buckets=["data"]) as s3:
        s3.put("data", KEY, data)
        ep = s3.endpoint

        # Environment credentials, --s3-endpoint, then AWS_ENDPOINT_URL.
        with rl.Probe("--s3-endpoint", ep, env=env_creds()) as p:
            o = read_all(p, url, data, failures, "environment")
            if o.get("auth") != "environment (AWS_ACCESS_KEY_ID)":
                failures.append(f"auth: {o}")
            if o.get("name") != url:
                failures.append(f"name: {o}")
        with rl.Probe(env=env_creds(AWS_ENDPOINT_URL=ep)) as p:
            read_all(p, url, data, failures, "AWS_ENDPOINT_URL")
        # The open's bytes=0-0 answered to the object's end: the size
        # and version taken there, the body cut.
        s3.proxy.fail("open_range", count=1)
        with rl.Probe("--s3-endpoint", ep, env=env_creds()) as p:
            read_all(p, url, data, failures, "open answered with more")
        if s3.proxy.stats()["injected"]["open_range"] != 1:
            failures.append(f"open_range not injected: {s3.proxy.stats()}")
        if s3.proxy.stats()["refused"]:
            failures.append(f"refused: {s3.proxy.stats()}")

        # Replaced under an open object: moto's 412 to If-Match, or, the
        # condition dropped by the proxy, the answer's new ETag tells
        # (ESTALE, never the new bytes).
        for ignored in (False, True):
            with rl.Probe("--s3-endpoint", ep, env=env_creds()) as p:
                o = p.open(url)
                s3.put("data", KEY, os.urandom(len(data)))
                if ignored:
                    s3.proxy.fail("ignore_conditions", count=1)
                out = os.path.join(TMP, "replaced.out")
                r = p.cmd(f"read {o['id']} 4096 100000 {out}")
                if r["ok"] or r["errno"] != "ESTALE" or \
                        os.path.exists(out):
                    failures.append(f"replaced object ({ignored=}): {r}")
                s3.put("data", KEY, data)
        if s3.proxy.stats()["injected"]["ignore_conditions"] != 1:
            failures.append(f"ignore_conditions not injected: "
                            f"{s3.proxy.stats()}")

        # Missing bucket, missing key.
        with rl.Probe("--s3-endpoint", ep, env=env_creds()) as p:
            expect(p.open("s3://nobucket/some/key", ok=False), "ENOENT",
                   ["no such bucket nobucket"], failures, "no bucket")
            expect(p.open("s3://data/nokey", ok=False), "ENOENT",
                   ["no such key nokey in bucket data"], failures,
                   "no key")

        # Wrong secret, unknown key (both refused by the checker), none.
        with rl.Probe("--s3-endpoint", ep, env=rl.clean_env(
                AWS_ACCESS_KEY_ID=OK,
                AWS_SECRET_ACCESS_KEY="wrong-secret")) as p:
            expect(p.open(url, ok=False), "EACCES",
                   ["credentials refused", "SignatureDoesNotMatch",
                    "credentials from: environment (AWS_ACCESS_KEY_ID)"],
                   failures, "wrong secret")
        with rl.Probe("--s3-endpoint", ep, env=rl.clean_env(
                AWS_ACCESS_KEY_ID="NOSUCHKEY",
                AWS_SECRET_ACCESS_KEY=SECRET)) as p:
            expect(p.open(url, ok=False), "EACCES",
                   ["credentials refused", "InvalidAccessKeyId"],
                   failures, "unknown access key")
        with rl.Probe("--s3-endpoint", ep, env=rl.clean_env()) as p:
            expect(p.open(url, ok=False), "EACCES",
                   ["credentials from: none"], failures, "anonymous")

        # A profile: credentials file, region from the config file.
        home = os.path.join(TMP, "profile-home")
        os.makedirs(os.path.join(home, ".aws"), exist_ok=True)
        with open(os.path.join(home, ".aws", "credentials"), "w") as f:
            f.write("[default]\naws_access_key_id = DEFAULTKEY\n"
                    "aws_secret_access_key = wrong\n\n"
                    f"[team]\naws_access_key_id = {OK}\n"
                    f"aws_secret_access_key = {SECRET}\n")
        with open(os.path.join(home, ".aws", "config"), "w") as f:
            f.write("[default]\nregion = us-east-1\n\n"
                    "[profile team]\nregion = eu-west-3\n"
                    "s3 =\n    addressing_style = path\n")
        with FaultProxy(s3.direct_url, verify_sigv4={
                "keys": {OK: SECRET}, "region": "eu-west-3"}) as eu:
            env = rl.clean_env(HOME=home, AWS_PROFILE="team")
            with rl.Probe("--s3-endpoint", eu.base_url, env=env) as p:
                o = read_all(p, url, data, failures, "profile team")
                auth = (f"profile team "
                        f"({os.path.join(home, '.aws', 'credentials')})")
                if o.get("auth") != auth:
                    failures.append(f"profile auth: {o}")
            # the same request signed for us-east-1 is refused there
            with rl.Probe("--s3-endpoint", eu.base_url,
                          env=env_creds(HOME=home)) as p:
                expect(p.open(url, ok=False), "EACCES",
                       ["credentials refused"], failures,
                       "another region")
        # [default] without AWS_PROFILE: DEFAULTKEY, refused by the check.
        with rl.Probe("--s3-endpoint", ep,
                      env=rl.clean_env(HOME=home)) as p:
            expect(p.open(url, ok=False), "EACCES",
                   ["credentials from: profile default"], failures,
                   "default profile")
        with rl.Probe("--s3-endpoint", ep, env=rl.clean_env(
                HOME=home, AWS_PROFILE="nosuch")) as p:
            expect(p.open(url, ok=False), "EINVAL",
                   ["no profile nosuch"], failures, "missing profile")

        # A session token: sent and signed; refused when missing.
        token = "FQoGZXIvYXdzE-session-token"
        with FaultProxy(s3.direct_url, verify_sigv4={
                "keys": {OK: SECRET}, "region": "us-east-1",
                "token": token}) as tk:
            with rl.Probe("--s3-endpoint", tk.base_url,
                          env=env_creds(AWS_SESSION_TOKEN=token)) as p:
                read_all(p, url, data, failures, "session token")
            with rl.Probe("--s3-endpoint", tk.base_url,
                          env=env_creds()) as p:
                expect(p.open(url, ok=False), "EACCES",
                       ["credentials refused", "InvalidToken"], failures,
                       "no session token")
    rl.finish(failures)


if __name__ == "__main__":
    main()
