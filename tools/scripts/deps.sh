#!/bin/sh
# Install the Debian packages a make target needs, if they are missing.
# Usage: tools/scripts/deps.sh build|test|torch|fuzz|lint
# build: the libraries batchfs links; test: + cmocka, zip tools, numpy,
# acl (setfacl, for the permission test);
# torch: + python3-torch for interop tests, python3-matplotlib for the
# bench's figures (tools/bench/figures.py); fuzz: + clang and libFuzzer;
# lint: + clang-format (make format-check).
set -eu
want="libfuse3-dev fuse3 libzip-dev liburing-dev pkg-config"
case "${1:-build}" in
build) ;;
test) want="$want libcmocka-dev zip unzip python3-numpy acl" ;;
torch) want="$want libcmocka-dev zip unzip python3-numpy python3-torch acl python3-matplotlib" ;;
fuzz) want="$want clang libclang-rt-14-dev" ;;
lint) want="$want clang-format" ;;
*) echo "usage: $0 build|test|torch|fuzz|lint" >&2; exit 2 ;;
esac
missing=""
for p in $want; do
	st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
	case "$st" in *" installed") ;; *) missing="$missing $p" ;; esac
done
[ -z "$missing" ] && exit 0
echo "deps: installing$missing" >&2
if [ "$(id -u)" -ne 0 ]; then
	SUDO=sudo
else
	SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >&2
$SUDO apt-get install -y -qq --no-install-recommends $missing >&2
