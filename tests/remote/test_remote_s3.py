#!/usr/bin/python3
"""fs/remote against an S3-compatible server: npm's s3rver 3.7.1 (installed
into the build tree at first use; skipped where node or npm are missing)
behind the fault proxy's SigV4 check (tests/lib/servers.py: s3rver itself
checks that the access key exists, not the signature).

- credentials from the environment (AWS_ACCESS_KEY_ID, ...): the
  requests are signed by libcurl and accepted; ranges of an object whose
  key holds '/', a space, '+', '%' and UTF-8 read exact; the endpoint from
  --s3-endpoint, or from AWS_ENDPOINT_URL;
- credentials from a profile (AWS_PROFILE) in a credentials file under
  a HOME of the test's own, the region from [profile NAME] in the config
  file: the signature's region is that one (a checker that wants another
  region refuses it); the [default] profile without AWS_PROFILE; a
  session token (AWS_SESSION_TOKEN) is sent signed, and refused when
  missing;
- a wrong secret key: EACCES, "credentials refused", the S3 error code
  (SignatureDoesNotMatch) and where the credentials came from; a wrong
  access key straight to s3rver (which checks keys): EACCES
  (InvalidAccessKeyId); no credentials at all: EACCES, "credentials
  from: none";
- an object replaced under an open one (s3rver ignores If-Match): ESTALE
  from the answer's ETag, never the new bytes;
- a missing bucket: ENOENT "no such bucket NAME"; a missing key: ENOENT
  "no such key KEY in bucket NAME";
- AWS_PROFILE naming a profile found nowhere: EINVAL naming it.
"""
import os

import remotelib as rl
from remotelib import FaultProxy, servers

servers.require_s3rver()
TMP = rl.TMP
KEY = "dir/my key+%é.bin"
OK = servers.S3RVER_KEY


def env_creds(**extra):
    return rl.clean_env(AWS_ACCESS_KEY_ID=OK, AWS_SECRET_ACCESS_KEY=OK,
                        **extra)


def read_all(p, url, data, failures, what):
    o = p.open(url, ok=False)
    if not o["ok"]:
        failures.append(f"{what}: open: {o}")
        return o
    if o["size"] != len(data):
        failures.append(f"{what}: size {o['size']} != {len(data)}")
        return o
    # not bytes=0-0: s3rver 3.7.1 answers it with the whole object (a
    # wrong Content-Range the client refuses)
    ranges = [(o, n) for o, n in rl.random_ranges(len(data), 40, seed=7,
                                                  max_len=64 * 1024)
              if (o, n) != (0, 1)]
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
    with servers.S3rver(os.path.join(TMP, "s3"),
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
        if s3.proxy.stats()["refused"]:
            failures.append(f"refused: {s3.proxy.stats()}")

        # Replaced under an open object: s3rver ignores If-Match, the
        # answer's new ETag tells (ESTALE, never the new bytes).
        with rl.Probe("--s3-endpoint", ep, env=env_creds()) as p:
            o = p.open(url)
            s3.put("data", KEY, os.urandom(len(data)))
            out = os.path.join(TMP, "replaced.out")
            r = p.cmd(f"read {o['id']} 4096 100000 {out}")
            if r["ok"] or r["errno"] != "ESTALE" or os.path.exists(out):
                failures.append(f"replaced object: {r}")
            s3.put("data", KEY, data)

        # Missing bucket, missing key.
        with rl.Probe("--s3-endpoint", ep, env=env_creds()) as p:
            expect(p.open("s3://nobucket/some/key", ok=False), "ENOENT",
                   ["no such bucket nobucket"], failures, "no bucket")
            expect(p.open("s3://data/nokey", ok=False), "ENOENT",
                   ["no such key nokey in bucket data"], failures,
                   "no key")

        # Wrong secret (the checker), wrong key (s3rver), none.
        with rl.Probe("--s3-endpoint", ep, env=rl.clean_env(
                AWS_ACCESS_KEY_ID=OK,
                AWS_SECRET_ACCESS_KEY="wrong-secret")) as p:
            expect(p.open(url, ok=False), "EACCES",
                   ["credentials refused", "SignatureDoesNotMatch",
                    "credentials from: environment (AWS_ACCESS_KEY_ID)"],
                   failures, "wrong secret")
        with rl.Probe("--s3-endpoint", s3.direct_url, env=rl.clean_env(
                AWS_ACCESS_KEY_ID="NOSUCHKEY",
                AWS_SECRET_ACCESS_KEY=OK)) as p:
            expect(p.open(url, ok=False), "EACCES",
                   ["credentials refused", "InvalidAccessKeyId"],
                   failures, "wrong access key, s3rver itself")
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
                    f"aws_secret_access_key = {OK}\n")
        with open(os.path.join(home, ".aws", "config"), "w") as f:
            f.write("[default]\nregion = us-east-1\n\n"
                    "[profile team]\nregion = eu-west-3\n"
                    "s3 =\n    addressing_style = path\n")
        with FaultProxy(s3.direct_url, verify_sigv4={
                "keys": {OK: OK}, "region": "eu-west-3"}) as eu:
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
                "keys": {OK: OK}, "region": "us-east-1",
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
