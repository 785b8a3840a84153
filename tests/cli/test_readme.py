#!/usr/bin/python3
"""README.md, followed literally after `make install` (into a temporary
PREFIX; /mnt/cifar becomes a directory here): make .npy files with numpy,
pack them, mkdir the mountpoint, mount, ls, head, cat stats, train.py
(the "From Python" code), the DataLoader code, umount, then the
batchfs.mount code. The numpy reader (fs/README.md: the batch file)
reads every dtype a mount serves (fs/dtype.c's safetensors codes) and
the mount's batch. README.md stays a guide: at most 350 lines. Every relative
link of the repository's Markdown files leads to a file of the
repository (or a heading of it), and none names a file outside it; every
pointer from code and docs into a folder README names a heading there."""
import os
import re
import subprocess
import sys

SRC = os.path.abspath(os.environ.get("BFS_SRC") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BUILD = os.environ.get("BUILD", "build")
PY = os.environ.get("PYTHON", "/usr/bin/python3")
TMP = os.environ.get("BFS_TEST_TMP") or "/tmp"


def tracked(*patterns):
    """The repository's files matching git pathspecs (tracked or not yet:
    what a commit of the working tree would hold)."""
    out = subprocess.run(["git", "-C", SRC, "ls-files", "--cached",
                          "--others", "--exclude-standard", "--", *patterns],
                         capture_output=True, text=True).stdout.split()
    return sorted(set(p for p in out if os.path.exists(os.path.join(SRC, p))))


DOCS = tracked("*.md")


def readme(name="README.md"):
    with open(os.path.join(SRC, name)) as f:
        return f.read()


def block_after(text, marker, lang="", nth=0):
    """The nth code block (```lang) after the line containing marker."""
    rest = text[text.index(marker):]
    blocks = re.findall(r"^```%s\n(.*?)^```$" % lang, rest, re.S | re.M)
    return blocks[nth]


def slug(heading):
    h = heading.strip().lower().replace("`", "")
    return re.sub(r"[^a-z0-9 _-]", "", h).replace(" ", "-")


def links_lead_somewhere():
    bad = []
    for doc in DOCS:
        path = os.path.join(SRC, doc)
        with open(path) as f:
            text = f.read()
        # A clone has only the repository: a Markdown file it does not
        # hold, or a path climbing out of it, points nowhere.
        for name in re.findall(r"[\w./-]*[\w-]\.md\b", text):
            if not any(os.path.exists(os.path.normpath(os.path.join(d, name)))
                       for d in (os.path.dirname(path), SRC)):
                bad.append("%s names %s, not in the repository" % (doc, name))
        for up in re.findall(r"(?<![\w.])\.\./[\w./-]*[\w/-]", text):
            dest = os.path.normpath(os.path.join(os.path.dirname(path), up))
            if not dest.startswith(SRC + os.sep) or not os.path.exists(dest):
                bad.append("%s names %s, not in the repository" % (doc, up))
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+://", target):
                continue
            file, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) \
                if file else path
            if not dest.startswith(SRC + os.sep) or not os.path.exists(dest):
                bad.append("%s: link %s leads nowhere" % (doc, target))
                continue
            if anchor and dest.endswith(".md"):
                with open(dest) as f:
                    prose = re.sub(r"^```.*?^```$", "", f.read(),
                                   flags=re.S | re.M)
                heads = [slug(h) for h in re.findall(r"^#+ (.*)$", prose,
                                                     re.M)]
                if anchor not in heads:
                    bad.append("%s: link %s: no such heading" % (doc, target))
    assert not bad, "\n".join(bad)


def norm(text):
    """A heading or a reference to one, compared: lower case, words only."""
    text = re.sub(r"[^a-z0-9 ]", " ", text.lower().replace("`", ""))
    return " ".join(text.split())


def references_name_headings():
    """Code and docs point into a folder's README as "fs/README.md: the
    gather" (up to a comma, a semicolon or a parenthesis): the words must
    begin a heading of that README."""
    heads = {}
    for doc in DOCS:
        with open(os.path.join(SRC, doc)) as f:
            heads[doc] = [norm(h) for h in re.findall(r"^#+ (.*)$", f.read(),
                                                      re.M)]
    bad = []
    for name in tracked("*.c", "*.h", "*.py", "*.md", "*.sh"):
        with open(os.path.join(SRC, name), errors="replace") as f:
            text = f.read()
        for m in re.finditer(r"((?:[\w./-]+/)?README\.md): +([^,;:)\n*]+)",
                             text):
            doc, ref = m.group(1), norm(m.group(2))
            if not ref:
                continue
            doc = os.path.normpath(doc if os.path.exists(
                os.path.join(SRC, doc)) else os.path.join(
                    os.path.dirname(name), doc))
            if doc not in heads:
                bad.append("%s names %s, no README of the repository"
                           % (name, m.group(0)))
            elif not any(h.startswith(ref) for h in heads[doc]):
                bad.append("%s: '%s': no such heading" % (name, m.group(0)))
    assert not bad, "\n".join(bad)


def served_codes():
    with open(os.path.join(SRC, "fs", "dtype.c")) as f:
        return re.findall(r'\[BFS_DT_\w+\] = \{"\w+", "(\w+)"', f.read())


def numpy_reader(path):
    """README's numpy reader run on 'path': its 'batch'."""
    code = block_after(readme("fs/README.md"),
                       "Reading a batch with numpy alone", "python")
    code = code.replace('"/mnt/cifar/epoch/0/batch_0"', repr(path))
    ns = {}
    exec(code, ns)
    return ns["batch"], ns["NP"]


def numpy_reader_reads_every_dtype():
    codes = sorted(served_codes())
    head, blobs, off = {}, [], 0
    want = {}
    for i, code in enumerate(codes):
        size = {"F64": 8, "I64": 8, "U64": 8, "C64": 8, "F32": 4, "I32": 4,
                "U32": 4, "F16": 2, "BF16": 2, "I16": 2, "U16": 2}.get(code, 1)
        raw = bytes((i * 5 + j) % 251 for j in range(6 * size))
        head[code] = '{"dtype": "%s", "shape": [2, 3], "data_offsets": ' \
            '[%d, %d]}' % (code, off, off + len(raw))
        if code == "BOOL":
            raw = bytes(b & 1 for b in raw)
        blobs.append(raw)
        want[code] = raw
        off += len(raw)
    text = ('{"__metadata__": {"format": "batchfs/1"}, ' +
            ", ".join('"%s": %s' % kv for kv in head.items()) + "}").encode()
    path = os.path.join(TMP, "every-dtype.st")
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))
    batch, table = numpy_reader(path)
    assert set(table) == set(codes), (sorted(table), codes)
    for code in codes:
        assert batch[code].shape == (2, 3), code
        assert batch[code].tobytes() == want[code], code


def run(cmd, env, cwd):
    print("$ " + cmd)
    p = subprocess.run(["bash", "-c", cmd], env=env, cwd=cwd,
                       capture_output=True)
    out = p.stdout.decode(errors="replace")
    print(out[-2000:] + p.stderr.decode(errors="replace")[-2000:])
    assert p.returncode == 0, (cmd, p.returncode)
    return out


def walkthrough():
    prefix = os.path.join(TMP, "prefix")
    p = subprocess.run(["make", "-C", SRC, "--no-print-directory", "install",
                        "PREFIX=" + prefix, "BUILD=" + BUILD],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    site = subprocess.run([PY, os.path.join(SRC, "tools", "scripts",
                                            "python_site.py"), prefix],
                          capture_output=True, text=True).stdout.strip()
    home = os.path.join(TMP, "home")
    os.makedirs(home)
    mnt = os.path.join(TMP, "mnt", "cifar")
    env = {k: v for k, v in os.environ.items()
           if k not in ("BATCHFS", "BATCHFS_LOADER_LIB", "PYTHONPATH")}
    # the installed command first; python3 = the system Python, whose
    # site directory for this PREFIX is added as /usr/local's would be
    env.update(PATH=os.pathsep.join([os.path.join(prefix, "bin"),
                                     os.path.dirname(PY), "/usr/bin", "/bin"]),
               PYTHONPATH=site)
    text = readme()
    python = [block_after(text, "### From Python", "python", i)
              for i in range(3)]
    lit = lambda s: s.replace("/mnt/cifar", mnt)  # noqa: E731
    with open(os.path.join(home, "train.py"), "w") as f:
        f.write(lit(python[0]))
    steps = block_after(text, "Then, with a dataset of your own")
    lines = steps.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("$ "):
            continue
        cmd = lit(line[2:])
        if cmd.startswith("python3 train.py"):
            out = run(cmd, env, home)
            assert len(re.findall(r"^epoch \d loss ", out, re.M)) == 2, out
            loader = "import batchfs, torch\n" + lit(python[1])
            run("python3 -c %s" % sh_quote(loader), env, home)
            batch, _ = numpy_reader(mnt + "/epoch/0/batch_0")
            assert batch["images"].shape == (256, 3, 32, 32)
            continue
        out = run(cmd, env, home)
        expect = lines[i + 1] if i + 1 < len(lines) else "$ "
        if not expect.startswith("$ "):          # the output README shows
            assert out.split() == expect.split(), (cmd, out, expect)
    assert not is_mounted(mnt), "umount left the mount"
    run("python3 -c %s" % sh_quote("import batchfs\n" + lit(python[2])),
        env, home)
    assert not is_mounted(mnt), "batchfs.mount's with block left the mount"


def sh_quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


def is_mounted(mnt):
    with open("/proc/mounts") as f:
        return any(line.split()[1] == mnt for line in f)


def main():
    lines = readme().count("\n")
    assert lines <= 350, "README.md has %d lines: keep it a guide (<= 350)" \
        % lines
    links_lead_somewhere()
    references_name_headings()
    numpy_reader_reads_every_dtype()
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        print("skip: /dev/fuse is not usable (links and numpy reader ok)")
        sys.exit(77)
    walkthrough()
    print("ok")


main()
