#!/bin/bash
# The remote wing's include rule (fs/README.md: the remote wing), on the
# source tree:
# - nothing in fs/remote/ includes an fs/ header outside the wing but the
#   base rooms fs/size.h, fs/error.h, fs/log.h and fs/trust.h;
# - outside the wing, only its two doors include its face,
#   fs/remote/object.h and fs/remote/remote.h: the fetch backend over
#   remote objects (fs/fetch_remote.c/.h) and the source opener
#   (fs/source_file.c); no other file outside it includes a header of the
#   wing but fs/remote/object_stats.h (the counters the engine's stats
#   carry; fs/source.c and the loaders of each kind included). tests/ and
#   tools/ may include any.
# Each offending line is printed (file:line: the #include). The rule is
# then checked to catch a planted breach of each kind, so that a path
# gone wrong here cannot pass unnoticed.
set -u
export LC_ALL=C
SRC=${BFS_SRC:-$(pwd)}
work=${BFS_TEST_TMP:-$(mktemp -d)}
fail() { echo "FAIL: $*"; exit 1; }

INC='^[[:space:]]*#[[:space:]]*include[[:space:]]*"'
INCN='^[0-9]+:[[:space:]]*#[[:space:]]*include[[:space:]]*"' # grep -n's

# check ROOT: the offending lines under ROOT, one a line; none: nothing.
check() {
	local root=$1 f rel
	(
		cd "$root" || exit 1
		# the wing: its own headers and the base rooms' only
		find fs/remote -name '*.[ch]' | sort | while read -r f; do
			grep -nE "$INC"'fs/' "$f" |
				grep -vE "$INCN"'fs/(remote/[a-z0-9_]+|size|error|log|trust)\.h"' |
				sed "s|^|$f:|"
		done
		# outside the wing: its face only from the rooms allowed, its
		# other headers from nobody (but object_stats.h)
		find fs mount loader -name '*.[ch]' -not -path 'fs/remote/*' |
			sort | while read -r f; do
				case "$f" in
				fs/fetch_remote.[ch] | fs/source_file.c)
					grep -nE "$INC"'fs/remote/' "$f" |
						grep -vE "$INCN"'fs/remote/(object|remote|object_stats)\.h"' ;;
				*)
					grep -nE "$INC"'fs/remote/' "$f" |
						grep -vE "$INCN"'fs/remote/object_stats\.h"' ;;
				esac | sed "s|^|$f:|"
			done
	)
}

[ -d "$SRC/fs/remote" ] && [ -f "$SRC/fs/remote/object.h" ] ||
	fail "no fs/remote/object.h under $SRC"

bad=$(check "$SRC")
if [ -n "$bad" ]; then
	echo "the remote wing's include rule (fs/README.md: the remote wing) is broken by:"
	echo "$bad"
	fail "$(echo "$bad" | wc -l) #include line(s) across the wing's wall"
fi
echo "ok: fs/remote/ includes only its own headers and fs/{size,error,log,trust}.h;"
echo "    its face only from fs/fetch_remote and fs/source_file.c"

# The check itself: a copy with one breach of each kind fails, naming each.
t=$work/tree
mkdir -p "$t/fs/remote" "$t/mount" "$t/loader"
printf '#include "fs/remote/object.h"\n#include "fs/size.h"\n' >"$t/fs/source.c"
printf '#include "fs/remote/object.h"\n#include "fs/remote/remote.h"\n' \
	>"$t/fs/source_file.c"
printf '#include "fs/size.h"\n#include "fs/remote/remote.h"\n' \
	>"$t/fs/source_npy.c"
printf '#include "fs/remote/remote.h"\n#include "fs/log.h"\n#include "fs/dataset.h"\n' \
	>"$t/fs/remote/cache.c"
printf '#include "fs/remote/object_stats.h"\n' >"$t/fs/fetch.h"
printf '#include "fs/remote/object.h"\n' >"$t/fs/text.c"
printf '#  include "fs/remote/cache.h"\n' >"$t/mount/ops.c"
printf '#include "fs/remote/cache_impl.h"\n' >"$t/fs/fetch_remote.c"
got=$(check "$t")
want='fs/remote/cache.c:3:#include "fs/dataset.h"
fs/fetch_remote.c:1:#include "fs/remote/cache_impl.h"
fs/source.c:1:#include "fs/remote/object.h"
fs/source_npy.c:2:#include "fs/remote/remote.h"
fs/text.c:1:#include "fs/remote/object.h"
mount/ops.c:1:#  include "fs/remote/cache.h"'
[ "$got" = "$want" ] ||
	fail "the check on planted breaches said
$got
instead of
$want"
echo "ok: planted breaches are each named"
