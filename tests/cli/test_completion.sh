#!/bin/bash
# The bash completion (tools/batchfs-completion.bash, installed as
# share/bash-completion/completions/batchfs) registers _batchfs for
# batchfs and completes: the commands of 'batchfs --help' (status and
# version among them); each command's long options, every one of its
# getopt table among them; the words a prefix selects; the values of
# --serve, --reader and --torch-compat (also after '='), each a word that
# 'batchfs mount --help' names; directories after --cache-dir, nothing
# after --cache-gb and --s3-endpoint; the batchfs mount points after umount
# and status (a space in one kept in a single word); file names elsewhere.
set -u
SRC=${BFS_SRC:-$(pwd)}
BATCHFS=${BATCHFS:-$SRC/build/batchfs}
work=${BFS_TEST_TMP:-$(mktemp -d)}
fail() { echo "FAIL: $*"; exit 1; }
PATH=$(dirname "$BATCHFS"):$PATH
# shellcheck source=tools/batchfs-completion.bash
source "$SRC/tools/batchfs-completion.bash"

spec=$(complete -p batchfs) || fail "no completion registered for batchfs"
[[ $spec == *"-F _batchfs"* && $spec == *"-o default"* ]] || fail "$spec"

# complete WORD...: the words offered for the last WORD, sorted, one a line
complete_words() {
	COMP_WORDS=(batchfs "$@")
	COMP_CWORD=$#
	COMPREPLY=()
	_batchfs batchfs "${COMP_WORDS[COMP_CWORD]}" \
		"${COMP_WORDS[COMP_CWORD - 1]}"
	printf '%s\n' "${COMPREPLY[@]}" | sort
}
same() { # same WHAT GOT WANT
	[ "$2" = "$3" ] || fail "$1: offered [${2//$'\n'/ }], want [${3//$'\n'/ }]"
}

cmds=$("$BATCHFS" --help | sed -n 's/^  \([a-z]*\)  .*/\1/p')
for c in mount umount status pack inspect bench version; do
	grep -qx "$c" <<<"$cmds" || fail "'$c' not in batchfs --help"
done
same "batchfs <Tab>" "$(complete_words "")" \
	"$(printf '%s\n' "$cmds" --help --version | sort)"
same "batchfs st<Tab>" "$(complete_words st)" "status"

for c in $cmds; do
	got=$(complete_words "$c" --)
	want=$("$BATCHFS" "$c" --help | grep -o -- '--[a-z][a-z0-9-]*' | sort -u)
	same "batchfs $c --<Tab>" "$got" "$want"
	grep -qx -- --help <<<"$got" || fail "$c: --help not offered"
done
# every long option a command accepts is offered
for f in tools/cmd_mount.c:mount tools/cmd_status.c:status \
	tools/pack.c:pack tools/inspect.c:inspect tools/bench.c:bench; do
	got=$(complete_words "${f#*:}" --)
	for o in $(sed -n 's/.*{"\([a-z][a-z0-9-]*\)", *[a-z]*_argument.*/\1/p' \
		"$SRC/${f%:*}"); do
		grep -qx -- "--$o" <<<"$got" || fail "${f#*:}: --$o not offered"
	done
done
same "batchfs umount --<Tab>" "$(complete_words umount --)" \
	"$(printf '%s\n' --help --lazy)"
same "batchfs mount --se<Tab>" "$(complete_words mount --se)" \
	"$(printf '%s\n' --seed --serve)"

# option values: each offered word is one that mount --help names
help=$("$BATCHFS" mount --help)
for o in --serve --reader --torch-compat; do
	vals=$(complete_words mount "$o" "")
	[ -n "$vals" ] || fail "no values for $o"
	for v in $vals; do
		grep -qw -- "$v" <<<"$help" || fail "$o $v: not in mount --help"
	done
done
same "--serve <Tab>" "$(complete_words mount --serve "")" \
	"$(printf '%s\n' auto cache direct passthrough push)"
same "--serve=p<Tab>" "$(complete_words mount --serve = p)" \
	"$(printf '%s\n' passthrough push)"
same "--reader i<Tab>" "$(complete_words mount -f --reader i)" "io_uring"
# a source or a mount point: nothing offered here, bash's file names then
same "batchfs mount <Tab>" "$(complete_words mount "")" ""
# the remote sources' cache: a directory; its bound and an endpoint: none
mkdir -p "$work/cachedir.d/sub"
: >"$work/cachefile"
same "--cache-dir <Tab>" "$(complete_words mount --cache-dir "$work/cache")" \
	"$work/cachedir.d"
same "--cache-gb <Tab>" "$(complete_words mount --cache-gb "")" ""
same "--s3-endpoint <Tab>" "$(complete_words mount --s3-endpoint h)" ""

# the mount points of batchfs mounts, for umount and status
if [ -r /dev/fuse ] && [ -w /dev/fuse ] && command -v fusermount3 >/dev/null; then
	mnt="$work/mnt one"
	mkdir -p "$mnt"
	"$BATCHFS" pack --demo 20 -o "$work/d.pt" >/dev/null || fail "pack"
	"$BATCHFS" mount "$work/d.pt" "$mnt" || fail "mount"
	trap '"$BATCHFS" umount "$mnt" || fusermount3 -uz "$mnt"' EXIT
	for c in umount status; do
		complete_words "$c" "$work/mnt" >"$work/offered"
		grep -qxF "$mnt" "$work/offered" ||
			fail "batchfs $c <Tab>: $(cat "$work/offered"), not $mnt"
	done
else
	echo "/dev/fuse not usable: the completion of mount points not checked"
fi
echo ok
