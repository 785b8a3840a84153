#!/bin/bash
# A usage error stays on screen: every command given a bad option exits 2
# and prints, on stderr only, one line naming the option, its usage line
# (the forms of the command) and one line pointing to 'batchfs CMD
# --help', not the whole help. An unknown command names the commands in
# one line. 'batchfs version' and '--version' after any command print
# what 'batchfs --version' prints, exit 0.
set -u
BATCHFS=${BATCHFS:-build/batchfs}
work=${BFS_TEST_TMP:-$(mktemp -d)}
fail() { echo "FAIL: $*"; exit 1; }

for cmd in mount umount status pack inspect bench version; do
	"$BATCHFS" $cmd --frobnicate >"$work/out" 2>"$work/err"
	rc=$?
	[ $rc -eq 2 ] || fail "batchfs $cmd --frobnicate: exit $rc"
	[ ! -s "$work/out" ] || fail "batchfs $cmd: a usage error on stdout"
	first=$(head -1 "$work/err")
	[[ $first == "batchfs $cmd: "*--frobnicate* ]] ||
		fail "batchfs $cmd: first line does not name the option: $first"
	grep -q "^usage: batchfs $cmd" "$work/err" ||
		fail "batchfs $cmd: no usage line: $(cat "$work/err")"
	last=$(tail -1 "$work/err")
	[ "$last" = "Try 'batchfs $cmd --help' for more information." ] ||
		fail "batchfs $cmd: last line: $last"
	# the synopsis is the command's forms (bench has four), never the help
	lines=$(wc -l <"$work/err")
	[ "$lines" -le 6 ] ||
		fail "batchfs $cmd: $lines lines for a usage error: $(cat "$work/err")"
	# and --help still prints the whole text, on stdout
	"$BATCHFS" $cmd --help >"$work/help" 2>&1 || fail "$cmd --help: exit $?"
	[ "$(wc -l <"$work/help")" -gt "$lines" ] || fail "$cmd --help is short"
done
# a missing argument too: the error, the usage line, the pointer
"$BATCHFS" mount 2>"$work/err"
rc=$?
[ $rc -eq 2 ] || fail "batchfs mount (no argument): exit $rc"
[ "$(wc -l <"$work/err")" -le 3 ] ||
	fail "batchfs mount (no argument): $(cat "$work/err")"

# an unknown command: the commands in one line, not the whole usage
"$BATCHFS" frobnicate 2>"$work/err"
rc=$?
[ $rc -eq 2 ] || fail "an unknown command: exit $rc"
[ "$(cat "$work/err")" = "batchfs: unknown command 'frobnicate'
commands: $("$BATCHFS" --help | sed -n 's/^  \([a-z]*\)  .*/\1/p' | xargs)
Try 'batchfs --help' for more information." ] ||
	fail "an unknown command: $(cat "$work/err")"

want=$("$BATCHFS" --version) || fail "batchfs --version: exit $?"
[[ $want =~ ^batchfs\ [0-9]+\.[0-9]+\.[0-9]+$ ]] || fail "--version: $want"
for args in "version" "-V" "mount --version" "umount --version" \
	"status --version" "pack --version" "inspect --version" \
	"bench --version" "mount --shuffle --version"; do
	# shellcheck disable=SC2086 # $args: the words of a command line
	got=$("$BATCHFS" $args 2>&1) || fail "batchfs $args: exit $?"
	[ "$got" = "$want" ] || fail "batchfs $args printed: $got"
done
echo ok
