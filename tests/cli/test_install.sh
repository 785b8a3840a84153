#!/bin/bash
# make install / make uninstall into a temporary PREFIX (never the
# machine's): bin/batchfs, its man page (renders without warnings), the
# loader's libraries, header and pkg-config file (a C program builds and
# runs against them), the Python package and batchfs_loader in the site
# directory, which import from there (outside the source tree) and find
# the installed command and library. batchfs --version matches the
# package's __version__; batchfs and every subcommand answer --help with
# exit 0. DESTDIR stages the same files with the final paths written in.
# make uninstall leaves no file behind.
set -eu
SRC=${BFS_SRC:-$(pwd)}
BUILD=${BUILD:-build}
PY=${PYTHON:-/usr/bin/python3}
work=${BFS_TEST_TMP:-$(mktemp -d)}
prefix=$work/prefix
fail() { echo "FAIL: $*"; exit 1; }

make -C "$SRC" --no-print-directory install PREFIX="$prefix" \
	BUILD="$BUILD" >"$work/install.log" 2>&1 ||
	{ tail -20 "$work/install.log"; fail "make install"; }
site=$("$PY" "$SRC/tools/scripts/python_site.py" "$prefix")
for f in bin/batchfs share/man/man1/batchfs.1 include/batchfs_loader.h \
	lib/libbatchfs_loader.a lib/libbatchfs_loader.so \
	lib/libbatchfs_loader.so.0 lib/pkgconfig/batchfs_loader.pc; do
	[ -e "$prefix/$f" ] || fail "make install did not install $f"
done
for f in batchfs/__init__.py batchfs/_installed.py batchfs_loader.py; do
	[ -e "$site/$f" ] || fail "make install did not install $site/$f"
done

# the command: --version, --help everywhere
bfs=$prefix/bin/batchfs
version=$("$bfs" --version) || fail "batchfs --version: exit $?"
[[ $version =~ ^batchfs\ [0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "version: $version"
for cmd in "" mount umount pack inspect bench; do
	out=$("$bfs" $cmd --help) || fail "batchfs $cmd --help: exit $?"
	[[ $out == *usage:* ]] || fail "batchfs $cmd --help printed no usage"
done
"$bfs" help >/dev/null || fail "batchfs help: exit $?"

# the man page renders cleanly and names the version
if command -v groff >/dev/null; then
	warn=$(groff -man -Tutf8 -ww "$prefix/share/man/man1/batchfs.1" 2>&1 \
		>"$work/man.txt") || fail "groff failed"
	[ -z "$warn" ] || fail "man page warnings: $warn"
	grep -q "batchfs ${version#batchfs }" "$work/man.txt" ||
		fail "man page lacks its version"
fi

# the library: pkg-config, a program built against it
cat >"$work/t.c" <<'EOF'
#include <batchfs_loader.h>
#include <stdio.h>
int main(void)
{
	printf("%s\n", bfs_loader_strerror(-2));
	return 0;
}
EOF
flags=$(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs \
	batchfs_loader) || fail "pkg-config batchfs_loader"
[[ $flags == *"-I$prefix/include"* && $flags == *"-L$prefix/lib"* ]] ||
	fail "pkg-config flags: $flags"
san=${SANITIZE:+-fsanitize=$SANITIZE}  # a SANITIZE= build's library
cc $san "$work/t.c" $flags -Wl,-rpath,"$prefix/lib" -o "$work/t" ||
	fail "a program does not build against the installed library"
"$work/t" >/dev/null || fail "a program linked to the library does not run"

# the Python side, from the site directory alone (cwd outside the tree)
cd /
env -u BATCHFS -u BATCHFS_LOADER_LIB PYTHONPATH="$site" \
	PATH="/usr/bin:/bin" "$PY" - "$prefix" "$version" <<'EOF' ||
import os, sys
prefix, version = sys.argv[1], sys.argv[2]
import batchfs, batchfs_loader
assert batchfs.__file__.startswith(prefix), batchfs.__file__
assert batchfs.find_batchfs() == prefix + "/bin/batchfs", batchfs.find_batchfs()
assert version == "batchfs " + batchfs.__version__, (version, batchfs.__version__)
assert batchfs_loader._INSTALLED_LIB == prefix + "/lib/libbatchfs_loader.so.0"
if "san" not in os.popen("ldd " + batchfs_loader._INSTALLED_LIB).read():
    lib = batchfs_loader.load_library()
    assert lib._name == batchfs_loader._INSTALLED_LIB, lib._name
print("python: ok")
EOF
	fail "the installed Python package"
cd "$SRC"

# DESTDIR: the same files under DESTDIR, the final paths written in them
make -C "$SRC" --no-print-directory install DESTDIR="$work/stage" \
	PREFIX=/opt/bfs BUILD="$BUILD" >>"$work/install.log" 2>&1 ||
	fail "make install DESTDIR="
stsite=$work/stage$("$PY" "$SRC/tools/scripts/python_site.py" /opt/bfs)
grep -q '^BATCHFS = "/opt/bfs/bin/batchfs"$' "$stsite/batchfs/_installed.py" ||
	fail "DESTDIR: _installed.py names $(cat "$stsite/batchfs/_installed.py")"
grep -q '^prefix=/opt/bfs$' "$work/stage/opt/bfs/lib/pkgconfig/batchfs_loader.pc" ||
	fail "DESTDIR: the pkg-config file"
[ -x "$work/stage/opt/bfs/bin/batchfs" ] || fail "DESTDIR: bin/batchfs"

# uninstall: nothing left
for args in "PREFIX=$prefix" "DESTDIR=$work/stage PREFIX=/opt/bfs"; do
	make -C "$SRC" --no-print-directory uninstall $args BUILD="$BUILD" \
		>>"$work/install.log" 2>&1 || fail "make uninstall $args"
done
left=$(find "$prefix" "$work/stage" ! -type d)
[ -z "$left" ] || fail "make uninstall left: $left"
echo ok
