#!/bin/sh
# Whether the dynamic linker finds shared libraries in DIR by itself: DIR
# is one of its trusted directories (/lib, /usr/lib and their multiarch
# ones) or is named in /etc/ld.so.conf (and the files it includes), so a
# program linked to a library there runs once ldconfig has updated the
# cache. Otherwise it needs an rpath or LD_LIBRARY_PATH. Used by make
# install for the loader library (loader/module.mk).
#
# Usage: tools/scripts/ld_searched.sh DIR   (exit 0 yes, 1 no)
set -u
dir=${1%/}

# The directories of an ld.so.conf file, its include lines followed
# (relative ones are relative to /etc).
conf_dirs() {
	[ -r "$1" ] || return 0
	while read -r word rest; do
		case $word in
		include)
			for f in $rest; do
				[ -e "$f" ] && conf_dirs "$f"
			done ;;
		/*) echo "${word%/}" ;;
		esac
	done <"$1"
}

ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
# ldconfig -v -N -X lists every directory it would scan (trusted ones
# included) and changes nothing: -N keeps the cache, -X the links.
for d in $(cd /etc && conf_dirs /etc/ld.so.conf) \
	$("$ldconfig" -v -N -X 2>/dev/null | sed -n 's|^\(/[^:]*\):.*|\1|p'); do
	if [ "$d" = "$dir" ] || { [ -d "$d" ] && [ "$d" -ef "$dir" ]; }; then
		exit 0
	fi
done
exit 1
