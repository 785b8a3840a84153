#!/bin/sh
# After make install: say where the Python package went and, for what was
# installed outside this machine's search paths (a PREFIX of one's own),
# the lines that make it usable: PATH for the command (man finds the man
# page through it), PKG_CONFIG_PATH for the library's pkg-config file,
# PYTHONPATH for the Python package, LD_LIBRARY_PATH for programs that
# link the library without pkg-config's flags (those have an rpath).
# Nothing to say for /usr/local on Debian: everything is found there.
#
# Usage: tools/scripts/install_notes.sh PYTHON BINDIR LIBDIR PYTHON_SITE
set -u
python=$1 bindir=${2%/} libdir=${3%/} site=${4%/}
here=$(dirname "$0")

in_list() { # in_list DIR LIST(colon-separated)
	case ":$2:" in *":$1:"* | *":$1/:"*) return 0 ;; esac
	return 1
}

notes=""
add() { notes="$notes  $1
"; }
in_list "$bindir" "${PATH:-}" || add "export PATH=$bindir:\$PATH"
pc_path=$(pkg-config --variable pc_path pkg-config 2>/dev/null)
in_list "$libdir/pkgconfig" "$pc_path:${PKG_CONFIG_PATH:-}" ||
	add "export PKG_CONFIG_PATH=$libdir/pkgconfig   # then: pkg-config --cflags --libs batchfs_loader"
"$python" -c 'import sys; sys.exit(sys.argv[1] not in sys.path)' "$site" ||
	add "export PYTHONPATH=$site   # for: import batchfs"
"$here/ld_searched.sh" "$libdir" ||
	add "export LD_LIBRARY_PATH=$libdir   # only for programs not linked with pkg-config's flags"

echo "make install: the Python package batchfs is in $site"
if [ -n "$notes" ]; then
	echo "make install: some of it is outside this machine's search paths; to use it:"
	printf '%s' "$notes"
fi
