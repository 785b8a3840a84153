#!/bin/sh
# Make (or update) the Python environments the tests take from PyPI, one
# venv each under $BFS_VENVS (default build/venv of the source tree,
# shared by every BUILD=), from Debian's python3 (python3-venv: deps.sh
# test installs it). Usage: tools/scripts/venv.sh NAME...
#   torch-V   torch==V (CPU build where the machine has one) and numpy:
#             the order tests run against it as well as Debian's torch
#   s3        moto's S3 server (moto[server]), the tests' S3 endpoint
# A venv whose packages are already there is left alone (a stamp file
# names what was installed), so a second call costs nothing; pip's
# output goes to NAME.log beside it and is shown when pip fails.
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
root=${BFS_VENVS:-$src/build/venv}
py=${BFS_VENV_PYTHON:-/usr/bin/python3}
MOTO_VERSION=5.2.5

[ $# -gt 0 ] || { echo "usage: $0 torch-VERSION|s3 ..." >&2; exit 2; }
mkdir -p "$root"
for name in "$@"; do
	case "$name" in
	torch-[0-9]*) want="torch==${name#torch-} numpy" ;;
	s3) want="moto[server]==$MOTO_VERSION" ;;
	*) echo "$0: unknown environment '$name' (torch-VERSION or s3)" >&2
	   exit 2 ;;
	esac
	dir=$root/$name
	[ "$(cat "$dir/.batchfs-stamp" 2>/dev/null)" = "$want" ] && continue
	echo "venv: $dir: pip install $want" >&2
	rm -rf "$dir"
	if ! "$py" -m venv "$dir" >"$root/$name.log" 2>&1 ||
		! "$dir/bin/python" -m pip install -q --disable-pip-version-check \
			$want >>"$root/$name.log" 2>&1; then
		tail -n 20 "$root/$name.log" >&2
		echo "venv: could not make $dir (log: $root/$name.log);" \
			"the tests that need it are skipped" >&2
		rm -rf "$dir"
		continue
	fi
	echo "$want" >"$dir/.batchfs-stamp"
done
