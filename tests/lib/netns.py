"""Hosts of a test's own on this machine: network namespaces joined by a
bridge (not a test itself). Each host is a namespace with one veth, eth0,
on 10.213.S.0/24 (S from the test's pid, so two tests at once do not
meet); the bridge has .254, so the test reaches every host. Processes
enter a host's network only (nsenter --net): they share the machine's
files and mounts, so a FUSE mount made "on" a host is visible to the
test. Everything is removed at exit, also when the test fails."""
import atexit
import os
import socket
import subprocess
import time


def _ip(*args, check=True):
    return subprocess.run(["ip"] + list(args), capture_output=True,
                          text=True, timeout=30, check=check)


class Hosts:
    """Hosts(names) as a context manager: .addr[name], .run_args(name)."""

    def __init__(self, names):
        tag = os.getpid() % 10000
        self.prefix = "bfs%d" % tag
        self.subnet = "10.213.%d" % (tag % 250)
        self.names = list(names)
        self.addr = {n: "%s.%d" % (self.subnet, i + 1)
                     for i, n in enumerate(self.names)}
        self.bridge = self.prefix + "br"

    def ns(self, name):
        return "%s-%s" % (self.prefix, name)

    def run_args(self, name):
        """The prefix that runs a command in host 'name''s network."""
        return ["nsenter", "--net=/run/netns/" + self.ns(name)]

    def __enter__(self):
        atexit.register(self.remove)
        self.remove()            # a test of this pid before: gone
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", self.subnet + ".254/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, n in enumerate(self.names):
            veth = "%sv%d" % (self.prefix, i)
            _ip("netns", "add", self.ns(n))
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0",
                "netns", self.ns(n))
            _ip("link", "set", veth, "master", self.bridge, "up")
            _ip("-n", self.ns(n), "addr", "add", self.addr[n] + "/24",
                "dev", "eth0")
            _ip("-n", self.ns(n), "link", "set", "eth0", "up")
            _ip("-n", self.ns(n), "link", "set", "lo", "up")
        return self

    def __exit__(self, *exc):
        self.remove()

    def remove(self):
        for n in self.names:
            _ip("netns", "del", self.ns(n), check=False)
        _ip("link", "del", self.bridge, check=False)

    def wait_port(self, name, port, proc, timeout=60):
        """True once host name's port accepts (from the test); False when
        proc exited first."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if proc.poll() is not None:
                return False
            try:
                with socket.create_connection((self.addr[name], port), 0.5):
                    return True
            except OSError:
                time.sleep(0.1)
        raise TimeoutError("nothing listens on %s:%d after %d s"
                           % (self.addr[name], port, timeout))


def usable():
    """None when this machine can make hosts (root, ip, nsenter, netns),
    else why not."""
    if os.geteuid() != 0:
        return "not root: network namespaces need CAP_NET_ADMIN"
    for exe in ("/usr/sbin/ip", "/usr/bin/nsenter"):
        if not os.access(exe, os.X_OK) and \
                not any(os.access(os.path.join(d, os.path.basename(exe)),
                                  os.X_OK)
                        for d in os.environ.get("PATH", "").split(":")):
            return "%s is missing" % os.path.basename(exe)
    probe = "bfsprobe%d" % (os.getpid() % 10000)
    r = _ip("netns", "add", probe, check=False)
    _ip("netns", "del", probe, check=False)
    if r.returncode != 0:
        return "ip netns add failed: %s" % r.stderr.strip()
    return None
