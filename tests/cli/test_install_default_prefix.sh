#!/bin/bash
# make install with the default PREFIX, /usr/local, as a newcomer runs it:
# it runs ldconfig, so a C program built with plain `pkg-config --cflags
# --libs batchfs_loader` (no PKG_CONFIG_PATH, no rpath, no
# LD_LIBRARY_PATH) runs; `import batchfs` works with no PYTHONPATH and
# finds /usr/local/bin/batchfs; make install prints no exports (nothing
# is off the search paths). make uninstall runs ldconfig again: the
# library leaves the cache, and nothing stays behind.
#
# The machine is never touched: it all happens in a private mount
# namespace where /usr/local and /etc (ld.so.cache) are overlays whose
# writes go to a tmpfs, gone with the namespace. Skipped (77) without
# root, unshare or overlayfs.
set -u
SRC=${BFS_SRC:-$(pwd)}
BUILD=${BUILD:-build}
PY=${PYTHON:-/usr/bin/python3}
work=${BFS_TEST_TMP:-$(mktemp -d)}
fail() { echo "FAIL: $*"; exit 1; }

[ "$(id -u)" = 0 ] || { echo "skip: needs root (a mount namespace)"; exit 77; }
unshare --mount true 2>/dev/null ||
	{ echo "skip: no mount namespace (unshare --mount)"; exit 77; }
# build first, outside the namespace, so make install only installs
make -C "$SRC" --no-print-directory BUILD="$BUILD" build-all \
	>"$work/build.log" 2>&1 || { tail "$work/build.log"; fail "make"; }

cat >"$work/t.c" <<'EOF'
#include <batchfs_loader.h>
#include <stdio.h>
int main(void)
{
	printf("%s\n", bfs_loader_strerror(-2));
	return 0;
}
EOF

# Run in the namespace: exit 77 when the overlays cannot be set up.
cat >"$work/inner.sh" <<'EOF'
set -u
SRC=$1 BUILD=$2 PY=$3 work=$4
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$work/ov"
mount -t tmpfs tmpfs "$work/ov" || exit 77
for d in usr/local etc; do
	n=${d//\//-}
	mkdir -p "$work/ov/$n-up" "$work/ov/$n-work"
	mount -t overlay overlay -o "lowerdir=/$d,upperdir=$work/ov/$n-up,workdir=$work/ov/$n-work" "/$d" ||
		{ echo "skip: no overlayfs on /$d"; exit 77; }
done
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
unset PKG_CONFIG_PATH LD_LIBRARY_PATH PYTHONPATH BATCHFS BATCHFS_LOADER_LIB

make -C "$SRC" --no-print-directory install BUILD="$BUILD" PYTHON="$PY" \
	>"$work/install.log" 2>&1 ||
	{ tail -20 "$work/install.log"; fail "make install"; }
grep -qx ldconfig "$work/install.log" || fail "make install ran no ldconfig"
! grep -q "^  export" "$work/install.log" ||
	fail "exports for /usr/local: $(grep '^  export' "$work/install.log")"
site=$("$PY" "$SRC/tools/scripts/python_site.py" /usr/local)
grep -qxF "make install: the Python package batchfs is in $site" \
	"$work/install.log" || fail "make install does not say where Python went"

flags=$(pkg-config --cflags --libs batchfs_loader) || fail "pkg-config"
[[ $flags != *rpath* ]] || fail "an rpath into /usr/local/lib: $flags"
san=${SANITIZE:+-fsanitize=$SANITIZE}
cc $san "$work/t.c" $flags -o "$work/t" || fail "cc against /usr/local"
"$work/t" >/dev/null || fail "a program linked to the library does not run"
ldconfig -p | grep -q "libbatchfs_loader.so.0 .*/usr/local/lib/" ||
	fail "the library is not in the cache"

(cd / && "$PY" -c '
import batchfs
assert batchfs.__file__.startswith("/usr/local/"), batchfs.__file__
assert batchfs.find_batchfs() == "/usr/local/bin/batchfs", batchfs.find_batchfs()
') || fail "import batchfs with no PYTHONPATH"
[ -f /usr/local/share/bash-completion/completions/batchfs ] ||
	fail "no bash completion in /usr/local"

make -C "$SRC" --no-print-directory uninstall BUILD="$BUILD" PYTHON="$PY" \
	>>"$work/install.log" 2>&1 || fail "make uninstall"
! ldconfig -p | grep -q libbatchfs_loader ||
	fail "make uninstall left the library in the cache"
left=$(find "$work/ov/usr-local-up" ! -type d ! -type c)
[ -z "$left" ] || fail "make uninstall left: $left"
echo "inside: ok"
EOF
unshare --mount --propagation private -- \
	bash "$work/inner.sh" "$SRC" "$BUILD" "$PY" "$work"
rc=$?
[ $rc -eq 77 ] && { echo "skip: no private mount namespace with overlays"; exit 77; }
[ $rc -eq 0 ] || exit $rc
! mountpoint -q "$work/ov" || fail "the namespace's tmpfs is mounted here"
echo ok
