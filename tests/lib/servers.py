"""Real servers for tests of remote sources, started and stopped by the
test, on 127.0.0.1 only, on free ports (not a test itself).

    with Nginx(root) as ng:            # Debian's nginx, our own config
        ng.url("data.pt")              # http://127.0.0.1:PORT/data.pt
        ng.log()                       # the access log, parsed
        ng.bytes_served("/data.pt")    # body bytes sent for that path

    require_moto()                     # exit 77 where its venv is missing
    with S3Server(workdir, buckets=["data"]) as s3:   # moto's S3 server
        s3.put("data", "key", b"...")
        s3.endpoint                    # what --s3-endpoint gets

nginx runs as a child of the test (no master/worker split, no privilege
change), with its prefix, config, logs and temp dirs in a directory of its
own; it answers Range requests with strong ETags and honours If-Match and
If-Unmodified-Since (412).

moto's server (moto[server] from PyPI) lives in a venv made by
`tools/scripts/venv.sh s3`: $BFS_VENVS/s3, else build/venv/s3 of the
source tree (not of BUILD: every BUILD= shares it). Each S3Server is a
moto of its own, in memory, on a free port of 127.0.0.1, its region
us-east-1, path-style buckets, in an environment of nothing but its
directory (TMPDIR too: objects of more than 5 MB spill there); it reaches
nothing outside. moto accepts any access key and any signature (none: an
empty 403): S3Server(verify=True), the default, puts a FaultProxy in
front of it that checks every signature (and the session token, when one
is given) against the keys and region given, so an unknown access key or
a wrong secret key is refused as S3 refuses it. `direct_url` is moto
itself. moto answers Range requests (206, Content-Range), with the MD5
ETag, and honours If-Match and If-Unmodified-Since (412); it closes the
connection after every answer (no keep-alive).

Every wait is bounded; servers are stopped by the context managers and,
should a test die before, by atexit.
"""
import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

from faultproxy import FaultProxy, sigv4_headers

START_TIMEOUT = 20
S3_ACCESS = "BATCHFSTESTACCESSKEY"  # what S3Server's proxy accepts
S3_SECRET = "batchfs/test/secret+key"
S3_REGION = "us-east-1"  # moto's, and the proxy's unless told

_children = []


def _cleanup():
    for p in list(_children):
        _stop(p)


atexit.register(_cleanup)


def _stop(proc, sig=signal.SIGTERM, timeout=10):
    if proc.poll() is None:
        try:
            proc.send_signal(sig)
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
    if proc in _children:
        _children.remove(proc)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port, proc, timeout=START_TIMEOUT, host="127.0.0.1"):
    """True once host:port accepts; False when proc exited first."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection((host, port), 0.5):
                return True
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port} after {timeout} s")


def src_dir():
    """The source tree."""
    return os.environ.get("BFS_SRC") or os.path.abspath(
        os.path.join(os.path.dirname(__file__), "..", ".."))


def skip(reason):
    print("skip: " + reason)
    sys.exit(77)


# ---- nginx -----------------------------------------------------------

NGINX_CONF = """\
daemon off;
master_process off;
error_log {d}/error.log warn;
pid {d}/nginx.pid;
events {{ worker_connections 1024; }}
http {{
    types {{ }}
    default_type application/octet-stream;
    log_format bfs '$request_method "$uri" $status $body_bytes_sent '
                   '"$http_range" "$http_if_match" '
                   '"$http_if_unmodified_since" $connection';
    access_log {d}/access.log bfs;
    client_body_temp_path {d}/tmp/body;
    proxy_temp_path {d}/tmp/proxy;
    fastcgi_temp_path {d}/tmp/fastcgi;
    uwsgi_temp_path {d}/tmp/uwsgi;
    scgi_temp_path {d}/tmp/scgi;
    keepalive_requests 100000;
    server {{
        listen 127.0.0.1:{port}{tls};
        root {root};
        autoindex {autoindex};
{conf}    }}
}}
"""


def require_nginx():
    if not shutil.which("nginx") and not os.path.exists("/usr/sbin/nginx"):
        skip("nginx is not installed (tools/scripts/deps.sh test)")


class Nginx:
    """nginx serving the files under root; tls=True: HTTPS with a
    self-signed certificate for 127.0.0.1 (self.cert, a PEM file a
    client may trust); autoindex=True: a directory's URL lists its files
    (an HTML index, what rclone's HTTP backend reads); conf: more
    directives of the server block (a location of a test's own)."""

    def __init__(self, root, workdir=None, tls=False, autoindex=False,
                 conf=""):
        self.root = os.path.abspath(root)
        self.conf = conf
        self.tls = tls
        self.autoindex = autoindex
        self.dir = workdir or os.path.join(
            os.environ.get("BFS_TEST_TMP") or "/tmp",
            f"nginx.{os.getpid()}.{id(self)}")
        self.proc = None

    def __enter__(self):
        exe = shutil.which("nginx") or "/usr/sbin/nginx"
        os.makedirs(os.path.join(self.dir, "tmp"), exist_ok=True)
        tls = ""
        if self.tls:
            self.cert = os.path.join(self.dir, "cert.pem")
            key = os.path.join(self.dir, "key.pem")
            subprocess.run(
                [shutil.which("openssl") or "/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                 "-days", "2", "-subj", "/CN=127.0.0.1", "-addext",
                 "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out",
                 self.cert], check=True, capture_output=True, timeout=60)
            tls = (f" ssl;\n        ssl_certificate {self.cert};\n"
                   f"        ssl_certificate_key {key}")
        for attempt in range(5):
            self.port = free_port()
            conf = os.path.join(self.dir, "nginx.conf")
            with open(conf, "w") as f:
                f.write(NGINX_CONF.format(
                    d=self.dir, port=self.port, root=self.root, tls=tls,
                    autoindex="on" if self.autoindex else "off",
                    conf=self.conf))
            self.proc = subprocess.Popen(
                [exe, "-p", self.dir, "-c", conf, "-e",
                 os.path.join(self.dir, "error.log")],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=open(os.path.join(self.dir, "stderr"), "w"))
            _children.append(self.proc)
            if _wait_port(self.port, self.proc):
                scheme = "https" if self.tls else "http"
                self.base_url = f"{scheme}://127.0.0.1:{self.port}"
                return self
            _stop(self.proc)
        raise RuntimeError("nginx did not start: " + self.errors())

    def __exit__(self, *exc):
        if self.proc:
            _stop(self.proc, signal.SIGQUIT)

    def errors(self):
        out = ""
        for name in ("stderr", "error.log"):
            try:
                with open(os.path.join(self.dir, name)) as f:
                    out += f.read()[-2000:]
            except OSError:
                pass
        return out

    def url(self, name):
        return f"{self.base_url}/{urllib.parse.quote(name)}"

    def log(self):
        """The requests served: dicts method, uri, status, bytes, range,
        if_match, if_unmodified_since (as nginx logged them; "-" for
        none), connection (nginx's serial number of the connection)."""
        out = []
        try:
            with open(os.path.join(self.dir, "access.log")) as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return out
        for line in lines:
            method, rest = line.split(" ", 1)
            parts = rest.split('"')
            uri = parts[1]
            status, nbytes = parts[2].split()
            out.append({"method": method, "uri": uri, "status": int(status),
                        "bytes": int(nbytes), "range": parts[3],
                        "if_match": parts[5],
                        "if_unmodified_since": parts[7],
                        "connection": int(parts[8])})
        return out

    def wait_log(self, n, timeout=10):
        """The log once it has n entries at least (nginx writes a line
        after the answer went out: a client may see it first)."""
        end = time.monotonic() + timeout
        while True:
            log = self.log()
            if len(log) >= n or time.monotonic() > end:
                return log
            time.sleep(0.05)

    def requests(self, uri=None):
        return [e for e in self.log() if uri is None or e["uri"] == uri]

    def bytes_served(self, uri=None):
        return sum(e["bytes"] for e in self.requests(uri))


# ---- moto's S3 server ------------------------------------------------

def venv_dir(name):
    """A venv of tools/scripts/venv.sh: $BFS_VENVS/NAME, else
    build/venv/NAME of the source tree (one for every BUILD=)."""
    root = os.environ.get("BFS_VENVS") or os.path.join(src_dir(), "build",
                                                        "venv")
    return os.path.join(root, name)


def moto_server():
    """moto's server in its venv, or None where it is missing."""
    exe = os.path.join(venv_dir("s3"), "bin", "moto_server")
    return exe if os.access(exe, os.X_OK) else None


def require_moto():
    """Exit 77 where moto's server is missing; else return it."""
    exe = moto_server()
    if not exe:
        skip("no moto S3 server: run tools/scripts/venv.sh s3 (%s is "
             "missing)" % os.path.join(venv_dir("s3"), "bin",
                                       "moto_server"))
    return exe


class S3Server:
    """moto's S3 server with buckets, behind a SigV4-checking proxy
    (verify=True). keys: access key -> secret accepted by the proxy (moto
    takes any key and any signature; the proxy forwards what it
    accepts). host, run_args: where moto listens, and a prefix for its
    command (tests/lib/netns.py: a host of the test's own; verify=False
    there, the proxy listens on this machine's 127.0.0.1)."""

    def __init__(self, workdir, buckets=("data",), verify=True,
                 region=S3_REGION, token=None, keys=None, host="127.0.0.1",
                 run_args=()):
        self.dir = os.path.abspath(workdir)
        self.buckets = list(buckets)
        self.verify = verify
        self.region = region
        self.token = token
        self.keys = keys or {S3_ACCESS: S3_SECRET}
        self.proc = None
        self.proxy = None
        self.host, self.run_args = host, list(run_args)

    def _env(self):
        """moto's environment: nothing of the machine's (no AWS settings,
        no proxies), a fixed region; HOME and TMPDIR our directory (it
        writes objects of more than 5 MB to TMPDIR)."""
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": self.dir, "TMPDIR": self.dir, "LANG": "C.UTF-8",
                "AWS_DEFAULT_REGION": S3_REGION, "AWS_REGION": S3_REGION,
                "S3_IGNORE_SUBDOMAIN_BUCKETNAME": "true",  # path style
                "PYTHONDONTWRITEBYTECODE": "1"}  # the venv is shared

    def __enter__(self):
        exe = require_moto()
        os.makedirs(self.dir, exist_ok=True)
        for attempt in range(5):
            self.port = free_port()
            self.proc = subprocess.Popen(
                self.run_args + [exe, "-H", self.host, "-p", str(self.port)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=open(os.path.join(self.dir, "moto.stderr"), "w"),
                env=self._env(), cwd=self.dir)
            _children.append(self.proc)
            if _wait_port(self.port, self.proc, host=self.host):
                break
            _stop(self.proc)
        else:
            raise RuntimeError("moto did not start: " + self._stderr())
        self.direct_url = f"http://{self.host}:{self.port}"
        self.endpoint = self.direct_url
        for b in self.buckets:
            self._request("PUT", f"/{b}", b"")
        if self.verify:
            self.proxy = FaultProxy(
                self.direct_url,
                verify_sigv4={"keys": self.keys, "region": self.region,
                              "token": self.token}).start()
            self.endpoint = self.proxy.base_url
        return self

    def __exit__(self, *exc):
        if self.proxy:
            self.proxy.stop()
        if self.proc:
            _stop(self.proc)

    def _stderr(self):
        try:
            with open(os.path.join(self.dir, "moto.stderr")) as f:
                return f.read()[-2000:]
        except OSError:
            return ""

    def _request(self, method, path, data):
        """A signed request straight to moto, which must answer 200."""
        url = self.direct_url + path
        h = sigv4_headers(method, url, S3_ACCESS, S3_SECRET, S3_REGION,
                          body=data)
        # not urllib's default form type: moto would take the body as a
        # form and store no byte of it
        h["content-type"] = "application/octet-stream"
        req = urllib.request.Request(url, data=data, method=method,
                                     headers=h)
        with urllib.request.urlopen(req, timeout=60) as r:
            assert r.status == 200, (method, path, r.status)

    def put(self, bucket, key, data):
        """Upload an object (straight to moto)."""
        self._request("PUT", f"/{bucket}/"
                      f"{urllib.parse.quote(key, safe='/-_.~')}", data)
