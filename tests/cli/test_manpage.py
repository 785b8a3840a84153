#!/usr/bin/python3
"""The documentation says exactly what the command line does: for each
command (mount, umount, status, pack, inspect, bench), the options its --help
prints are the options its section of the man page (tools/batchfs.1)
names, and every option of its getopt table is among them; README.md's
table of mount options names exactly mount --help's long options; the man
page renders without warnings."""
import os
import re
import shutil
import subprocess
import sys

SRC = os.environ.get("BFS_SRC") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..")
BATCHFS = os.environ.get("BATCHFS") or os.path.join(SRC, "build", "batchfs")
COMMANDS = ["mount", "umount", "status", "pack", "inspect", "bench"]
OPTION = re.compile(r"(?<![\w-])(--?[a-zA-Z][a-zA-Z0-9-]*)")
# getopt tables: {"name", no_argument / required_argument, NULL, 'c'}
TABLE = re.compile(r'\{"([a-z][a-z0-9-]*)",\s*(?:no|required|optional)'
                   r'_argument,\s*NULL,\s*(\'.\'|\w+)\}')
SOURCES = {"mount": "tools/cmd_mount.c", "status": "tools/cmd_status.c",
           "pack": "tools/pack.c",
           "inspect": "tools/inspect.c", "bench": "tools/bench.c"}


def options(text):
    """Option-like words of a text; '-' alone, '--' and words that only
    look like options (negative numbers, 'x-y') are not matched."""
    return set(OPTION.findall(text))


def help_options(cmd):
    p = subprocess.run([BATCHFS, cmd, "--help"], capture_output=True,
                       text=True)
    assert p.returncode == 0, (cmd, p.returncode, p.stderr)
    return options(p.stdout)


def man_sections():
    """{command: the roff text of its subsection}, '\\-' as '-'."""
    with open(os.path.join(SRC, "tools", "batchfs.1")) as f:
        text = f.read().replace("\\-", "-")
    out = {}
    parts = re.split(r'^\.S[SH] "?(.*?)"?$', text, flags=re.M)
    for title, body in zip(parts[1::2], parts[2::2]):
        m = re.match(r"batchfs (\w+)", title)
        if m and m.group(1) in COMMANDS:
            out[m.group(1)] = title + "\n" + body
    return out


def table_options(cmd):
    with open(os.path.join(SRC, SOURCES[cmd])) as f:
        src = f.read()
    longs = {"--" + name for name, _ in TABLE.findall(src)}
    optstring = re.search(r'getopt_long\([^"]*"([^"]*)"', src).group(1)
    shorts = {"-" + c for c in optstring if c.isalpha()}
    return longs | shorts


def readme_mount_options():
    with open(os.path.join(SRC, "README.md")) as f:
        text = f.read()
    table = re.split(r"^#+ Options of `batchfs mount`$", text,
                     flags=re.M)[1]
    table = re.split(r"^#+ ", table, flags=re.M)[0]
    rows = [line.split("|")[1] for line in table.splitlines()
            if line.startswith("| `")]
    return {o for row in rows for o in options(row) if o.startswith("--")}


def main():
    man = man_sections()
    bad = []
    for cmd in COMMANDS:
        h = help_options(cmd)
        m = options(man.get(cmd, ""))
        if h != m:
            bad.append("%s: --help only %s, man page only %s"
                       % (cmd, sorted(h - m), sorted(m - h)))
        if cmd in SOURCES and not table_options(cmd) <= h:
            bad.append("%s: options not in --help: %s"
                       % (cmd, sorted(table_options(cmd) - h)))
    longs = {o for o in help_options("mount") if o.startswith("--")}
    readme = readme_mount_options()
    if readme != longs - {"--help"}:
        bad.append("README mount options: --help only %s, README only %s"
                   % (sorted(longs - {"--help"} - readme),
                      sorted(readme - longs)))
    if shutil.which("groff"):
        p = subprocess.run(["groff", "-man", "-Tutf8", "-ww",
                            os.path.join(SRC, "tools", "batchfs.1")],
                           capture_output=True, text=True)
        if p.returncode or p.stderr:
            bad.append("groff: %s" % p.stderr.strip())
    else:
        print("groff not installed: rendering not checked")
    for b in bad:
        print("FAIL: " + b)
    print("ok" if not bad else "%d mismatches" % len(bad))
    return 1 if bad else 0


sys.exit(main())
