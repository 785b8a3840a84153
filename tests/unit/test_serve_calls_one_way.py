"""fs/serve's files call one way (fs/serve_impl.h): the core (serve.c) calls
the ways of serving only through their tables, and no other file of the
room calls into the core; the calls between the room's files have no
circle. Read from the symbols each object file uses and defines
($BUILD/obj/fs/serve*.o, nm)."""
import glob
import os
import shutil
import subprocess
import sys

build = os.environ.get("BUILD", "build")
src = os.environ.get("BFS_SRC", ".")
# the objects of the sources there are (not a stale one of a file gone)
objs = [os.path.join(build, "obj", "fs", os.path.basename(c)[:-2] + ".o")
        for c in sorted(glob.glob(os.path.join(src, "fs", "serve*.c")))]
objs = [o for o in objs if os.path.exists(o)]
if not shutil.which("nm"):
    print("SKIP: no nm")
    sys.exit(77)
if len(objs) < 2 or not any(o.endswith("/serve.o") for o in objs):
    print("FAIL: no fs/serve objects under", build)
    sys.exit(1)

defined, used = {}, {}
for o in objs:
    out = subprocess.run(["nm", o], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    name = os.path.basename(o)[:-2]
    used[name] = {l.split()[-1] for l in out if l.split()[:1] == ["U"]}
    defined[name] = {l.split()[2] for l in out
                     if len(l.split()) == 3 and l.split()[1] in "TDRB"}

calls = {a: {b: sorted(used[a] & defined[b]) for b in defined
             if b != a and used[a] & defined[b]} for a in defined}
bad = []
for a, to in calls.items():
    for b, syms in to.items():
        print(f"{a} -> {b}: {' '.join(syms)}")
        if b == "serve":
            bad.append(f"{a} calls into the core: {' '.join(syms)}")

# a circle: a file that reaches itself
def reach(a, seen):
    for b in calls[a]:
        if b not in seen:
            seen.add(b)
            reach(b, seen)
    return seen

for a in calls:
    if a in reach(a, set()):
        bad.append(f"{a} is on a circle of calls")
for b in bad:
    print("FAIL:", b)
sys.exit(1 if bad else 0)
