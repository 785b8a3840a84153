#!/bin/sh
# Install the Debian packages a make target needs, if they are missing.
# Usage: tools/scripts/deps.sh build|install|test|torch|bench|fuzz|lint
# build: the libraries batchfs links; install: + bash-completion, which
# loads the completion make install puts in share/bash-completion (not
# needed to build or run: when it cannot be installed, a note says so
# and the script goes on); test: + cmocka, zip tools, numpy, acl
# (setfacl, for the permission test), nginx and openssl (the HTTP
# server of tests/remote), python3-venv (tools/scripts/venv.sh makes the
# venv of their S3 server, moto's, from PyPI); torch: + python3-torch for
# interop tests, python3-matplotlib for the bench's figures
# (tools/bench/figures.py);
# bench: torch's + curl (the link's limit), rclone and s3fs (the FUSE
# mounts users pick for data in object stores), what the bench's remote
# part needs beside the servers (`make bench` installs them only when
# BENCH_ONLY names that part, never `make check`); fuzz: + clang and
# libFuzzer; lint: + clang-format (make format-check).
# apt-get waits up to $DEPS_LOCK_TIMEOUT seconds (300) for another
# apt-get or dpkg that holds the dpkg lock, instead of failing at once.
set -eu
want="libfuse3-dev fuse3 libzip-dev liburing-dev libcurl4-openssl-dev libssl-dev pkg-config"
optional=""
servers="nginx openssl python3-venv"
case "${1:-build}" in
build) ;;
install) optional="bash-completion" ;;
test) want="$want libcmocka-dev zip unzip python3-numpy acl $servers" ;;
torch | bench)
	want="$want libcmocka-dev zip unzip python3-numpy python3-torch acl python3-matplotlib $servers"
	[ "$1" = torch ] || want="$want curl rclone s3fs" ;;
fuzz) want="$want clang libclang-rt-14-dev" ;;
lint) want="$want clang-format" ;;
*) echo "usage: $0 build|install|test|torch|bench|fuzz|lint" >&2; exit 2 ;;
esac

# The packages of $@ that are not installed.
missing_of() {
	for p in "$@"; do
		st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
		case "$st" in *" installed") ;; *) printf ' %s' "$p" ;; esac
	done
}

missing=$(missing_of $want)
missing_optional=$(missing_of $optional)
[ -z "$missing$missing_optional" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
	SUDO=sudo
else
	SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
lock="DPkg::Lock::Timeout=${DEPS_LOCK_TIMEOUT:-300}"

# apt-get install $@ (after one apt-get update).
apt_install() {
	echo "deps: installing$*" >&2
	if [ -z "${updated:-}" ]; then
		$SUDO apt-get -o "$lock" update -qq >&2
		updated=1
	fi
	$SUDO apt-get -o "$lock" install -y -qq --no-install-recommends "$@" >&2
}

if [ -n "$missing" ]; then
	apt_install $missing
fi
if [ -n "$missing_optional" ] && ! apt_install $missing_optional; then
	echo "deps: could not install$missing_optional: bash completion of" \
		"batchfs works once it is installed" >&2
fi
