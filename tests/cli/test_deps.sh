#!/bin/bash
# tools/scripts/deps.sh, with apt-get, dpkg-query and id stood in for
# (nothing is installed):
# - a missing package is installed with apt-get update and install, both
#   with -o DPkg::Lock::Timeout=300 (another apt-get holding the dpkg lock
#   is waited for, not a failure at once; DEPS_LOCK_TIMEOUT sets it);
# - nothing missing: apt-get is not run;
# - a required package that cannot be installed fails the script;
# - `deps.sh install` (make install) installs bash-completion, which
#   loads batchfs's completion, and goes on with a note when it cannot.
set -u
SRC=${BFS_SRC:-$(pwd)}
work=${BFS_TEST_TMP:-$(mktemp -d)}
fail() { echo "FAIL: $*"; exit 1; }

bin=$work/fakebin
mkdir -p "$bin"
# dpkg-query: every package installed but those of $FAKE_MISSING
cat >"$bin/dpkg-query" <<'EOS'
#!/bin/sh
for p; do :; done
case " ${FAKE_MISSING:-} " in
*" $p "*) echo "unknown ok not-installed" ;;
*) echo "install ok installed" ;;
esac
EOS
# apt-get: records its arguments; like the real one, fails at once when
# the dpkg lock is held and it was not told to wait for it
cat >"$bin/apt-get" <<EOS
#!/bin/sh
echo "\$*" >>"$work/apt.calls"
case "\$*" in
*DPkg::Lock::Timeout=*) exit \${FAKE_APT_RC:-0} ;;
*) echo "E: Could not get lock /var/lib/dpkg/lock-frontend" >&2; exit 100 ;;
esac
EOS
printf '#!/bin/sh\necho 0\n' >"$bin/id"
chmod +x "$bin"/*
export PATH="$bin:$PATH"
deps() { rm -f "$work/apt.calls"; "$SRC/tools/scripts/deps.sh" "$@" \
	2>"$work/err"; }
calls() { cat "$work/apt.calls" 2>/dev/null; }

FAKE_MISSING="libzip-dev" deps build || fail "build: exit $?: $(cat "$work/err")"
[ "$(calls)" = "-o DPkg::Lock::Timeout=300 update -qq
-o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends libzip-dev" ] ||
	fail "build with libzip-dev missing: apt-get ran as: $(calls)"

FAKE_MISSING="" deps test || fail "nothing missing: exit $?"
[ -z "$(calls)" ] || fail "nothing missing: apt-get ran: $(calls)"

FAKE_MISSING="libzip-dev" FAKE_APT_RC=100 deps build &&
	fail "build: a required package not installed, but exit 0"

DEPS_LOCK_TIMEOUT=7 FAKE_MISSING="bash-completion" deps install ||
	fail "install: exit $?: $(cat "$work/err")"
grep -qx -- "-o DPkg::Lock::Timeout=7 install .* bash-completion" \
	<<<"$(calls)" || fail "install: bash-completion not installed: $(calls)"

FAKE_MISSING="bash-completion" FAKE_APT_RC=100 deps install ||
	fail "install: bash-completion not installable fails the script"
grep -q "could not install bash-completion" "$work/err" ||
	fail "install: no note that bash-completion is missing: $(cat "$work/err")"
echo ok
