#!/bin/bash
# make install / make uninstall into a temporary PREFIX (never the
# machine's): bin/batchfs, its man page (renders without warnings), its
# bash completion (registers itself), the loader's libraries, header and
# pkg-config file, the Python package and batchfs_loader in the site
# directory. make install says where the Python package went and ends
# with the exports a PREFIX outside the search paths needs; with them
# alone, a C program built with pkg-config's flags runs (an rpath: no
# LD_LIBRARY_PATH, no ldconfig), the Python package imports (outside the
# source tree) and finds the installed command and library. batchfs
# --version matches the package's __version__; batchfs and every
# subcommand answer --help with exit 0. DESTDIR stages the same files
# with the final paths written in, the rpath only where the final
# directory needs one, and never runs ldconfig (for a staged /usr/local
# neither). make uninstall leaves no file behind.
# (test_install_default_prefix.sh: the default PREFIX, /usr/local.)
set -eu
SRC=${BFS_SRC:-$(pwd)}
BUILD=${BUILD:-build}
PY=${PYTHON:-/usr/bin/python3}
work=${BFS_TEST_TMP:-$(mktemp -d)}
prefix=$work/prefix
fail() { echo "FAIL: $*"; exit 1; }

# ldconfig as make install finds it: one that records the calls that
# would rebuild the machine's cache (listings, -N, go to the real one)
real_ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
mkdir -p "$work/fakebin"
printf '#!/bin/sh\ncase " $* " in *" -N "*) exec %s "$@" ;; esac\n%s\n' \
	"$real_ldconfig" "echo \"ldconfig \$*\" >>$work/ldconfig.calls" \
	>"$work/fakebin/ldconfig"
chmod +x "$work/fakebin/ldconfig"
export PATH="$work/fakebin:$PATH"
ldconfig_calls() { cat "$work/ldconfig.calls" 2>/dev/null; }

make -C "$SRC" --no-print-directory install PREFIX="$prefix" \
	BUILD="$BUILD" >"$work/install.log" 2>&1 ||
	{ tail -20 "$work/install.log"; fail "make install"; }
site=$("$PY" "$SRC/tools/scripts/python_site.py" "$prefix")
for f in bin/batchfs share/man/man1/batchfs.1 include/batchfs_loader.h \
	lib/libbatchfs_loader.a lib/libbatchfs_loader.so \
	lib/libbatchfs_loader.so.0 lib/pkgconfig/batchfs_loader.pc \
	share/bash-completion/completions/batchfs; do
	[ -e "$prefix/$f" ] || fail "make install did not install $f"
done
for f in batchfs/__init__.py batchfs/_installed.py batchfs_loader.py; do
	[ -e "$site/$f" ] || fail "make install did not install $site/$f"
done

# the command: --version, --help everywhere
bfs=$prefix/bin/batchfs
version=$("$bfs" --version) || fail "batchfs --version: exit $?"
[[ $version =~ ^batchfs\ [0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "version: $version"
for cmd in "" mount umount status pack inspect bench version; do
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

# the bash completion, as bash-completion would load it
spec=$(bash -c 'source "$1" && complete -p batchfs' - \
	"$prefix/share/bash-completion/completions/batchfs") ||
	fail "the installed completion does not load"
[[ $spec == *"-F _batchfs"* ]] || fail "completion: $spec"

# what make install says: where the Python package went, and the exports
# that make this PREFIX usable (it is on none of the search paths)
grep -qxF "make install: the Python package batchfs is in $site" \
	"$work/install.log" || fail "make install does not say where Python went"
for v in PATH PKG_CONFIG_PATH PYTHONPATH LD_LIBRARY_PATH; do
	grep -q "^  export $v=$prefix/" "$work/install.log" ||
		fail "make install prints no $v: $(tail -8 "$work/install.log")"
done
exports=$(sed -n 's/^  \(export [A-Z_]*=[^ ]*\).*/\1/p' "$work/install.log")
[ -z "$(ldconfig_calls)" ] || fail "ldconfig run for $prefix: $(ldconfig_calls)"

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
flags=$(env -u PKG_CONFIG_PATH bash -c "$exports"'
	pkg-config --cflags --libs batchfs_loader') ||
	fail "pkg-config batchfs_loader, with make install's exports"
[[ $flags == *"-I$prefix/include"* && $flags == *"-L$prefix/lib"* &&
	$flags == *"-Wl,-rpath,$prefix/lib"* ]] || fail "pkg-config flags: $flags"
san=${SANITIZE:+-fsanitize=$SANITIZE}  # a SANITIZE= build's library
cc $san "$work/t.c" $flags -o "$work/t" ||
	fail "a program does not build against the installed library"
env -u LD_LIBRARY_PATH "$work/t" >/dev/null ||
	fail "a program built with pkg-config's flags does not run"

# the Python side, from the site directory alone (cwd outside the tree)
cd /
[[ $exports == *"export PYTHONPATH=$site"* ]] || fail "PYTHONPATH: $exports"
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
pc=$work/stage/opt/bfs/lib/pkgconfig/batchfs_loader.pc
grep -q '^prefix=/opt/bfs$' "$pc" || fail "DESTDIR: the pkg-config file"
grep -qF 'Libs: -L${libdir} -Wl,-rpath,${libdir} -lbatchfs_loader' "$pc" ||
	fail "DESTDIR: no rpath to /opt/bfs/lib: $(grep Libs: "$pc")"
[ -x "$work/stage/opt/bfs/bin/batchfs" ] || fail "DESTDIR: bin/batchfs"
[ -f "$work/stage/opt/bfs/share/bash-completion/completions/batchfs" ] ||
	fail "DESTDIR: the bash completion"
# a staged /usr/local: no rpath (ld.so searches it), and no ldconfig: the
# cache of this machine is not the target's
make -C "$SRC" --no-print-directory install DESTDIR="$work/stage" \
	PREFIX=/usr/local BUILD="$BUILD" >>"$work/install.log" 2>&1 ||
	fail "make install DESTDIR= PREFIX=/usr/local"
pc=$work/stage/usr/local/lib/pkgconfig/batchfs_loader.pc
grep -qF 'Libs: -L${libdir} -lbatchfs_loader' "$pc" ||
	fail "DESTDIR, /usr/local: $(grep Libs: "$pc")"
[ -z "$(ldconfig_calls)" ] || fail "DESTDIR ran ldconfig: $(ldconfig_calls)"

# uninstall: nothing left
for args in "PREFIX=$prefix" "DESTDIR=$work/stage PREFIX=/opt/bfs" \
	"DESTDIR=$work/stage PREFIX=/usr/local"; do
	make -C "$SRC" --no-print-directory uninstall $args BUILD="$BUILD" \
		>>"$work/install.log" 2>&1 || fail "make uninstall $args"
done
left=$(find "$prefix" "$work/stage" ! -type d)
[ -z "$left" ] || fail "make uninstall left: $left"
[ -z "$(ldconfig_calls)" ] || fail "uninstall ran ldconfig: $(ldconfig_calls)"
echo ok
