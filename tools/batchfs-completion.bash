# bash completion for batchfs(1). make install puts it in
# $(PREFIX)/share/bash-completion/completions/batchfs, where the
# bash-completion package loads it on the first <Tab> after "batchfs";
# without that package, source this file from ~/.bashrc.
#
# The commands and the options of each come from the command being
# completed ('batchfs --help', 'batchfs COMMAND --help', read once per
# shell), so they are never out of date. What is known here: the values
# of the options that take one of a few words (and that --cache-dir takes
# a directory, --cache-gb and --s3-endpoint nothing a file name completes),
# and that umount and status take mount points (the batchfs mounts of
# /proc/self/mountinfo).
# tests/cli/test_completion.sh checks both against the command.

# The text of '$1 [$2] --help', cached per command and subcommand.
declare -gA _batchfs_help_cache
_batchfs_help() {
	local key="$1 $2"
	if [[ -z ${_batchfs_help_cache[$key]+set} ]]; then
		_batchfs_help_cache[$key]=$("$1" ${2:+"$2"} --help 2>/dev/null)
	fi
	printf '%s\n' "${_batchfs_help_cache[$key]}"
}

# The commands 'batchfs --help' lists under "commands:".
_batchfs_commands() {
	_batchfs_help "$1" "" |
		sed -n '/^commands:/,/^$/s/^  \([a-z][a-z0-9-]*\) .*/\1/p'
}

# The long options that 'batchfs COMMAND --help' names.
_batchfs_options() {
	_batchfs_help "$1" "$2" | grep -o -- '--[a-z][a-z0-9-]*' | sort -u
}

# The mount points of the batchfs mounts (mountinfo's octal escapes of
# spaces, tabs and backslashes decoded).
_batchfs_mounts() {
	local line point
	while read -r line; do
		[[ $line == *" - fuse.batchfs "* ]] || continue
		point=$(printf '%s' "$line" | cut -d' ' -f5)
		printf '%b\n' "${point//\\/\\0}"
	done </proc/self/mountinfo
}

# COMPREPLY: the words of list $1 (one a line) that start with $2.
_batchfs_reply() {
	local IFS=$'\n'
	mapfile -t COMPREPLY < <(compgen -W "$1" -- "$2")
}

_batchfs() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
	local bfs=${COMP_WORDS[0]} cmd="" i

	COMPREPLY=()
	if [[ $prev == = ]]; then # --serve=<Tab>: '=' is a word of its own
		prev=${COMP_WORDS[COMP_CWORD - 2]}
	fi
	for ((i = 1; i < COMP_CWORD; i++)); do
		if [[ ${COMP_WORDS[i]} != -* ]]; then
			cmd=${COMP_WORDS[i]}
			break
		fi
	done
	if [[ -z $cmd ]]; then
		_batchfs_reply "$(_batchfs_commands "$bfs")"$'\n--help\n--version' \
			"$cur"
		return
	fi
	case $prev in
	--serve)
		_batchfs_reply $'auto\npassthrough\npush\ndirect\ncache' "$cur"
		return ;;
	--reader)
		_batchfs_reply $'auto\nio_uring\nthreads\nnone' "$cur"
		return ;;
	--torch-compat)
		_batchfs_reply $'1.13\n2.1\n2.7' "$cur"
		return ;;
	--ranks)
		_batchfs_reply all "$cur"
		return ;;
	--owner)
		mapfile -t COMPREPLY < <(compgen -u -- "$cur")
		return ;;
	--cache-dir)
		compopt -o filenames 2>/dev/null
		mapfile -t COMPREPLY < <(compgen -d -- "$cur")
		return ;;
	--cache-gb | --s3-endpoint | --resume-at) # nothing to offer
		compopt +o default 2>/dev/null
		return ;;
	--timeout | -t)
		if [[ $cmd == status ]]; then # SECONDS: nothing to offer
			compopt +o default 2>/dev/null
			return
		fi ;;
	esac
	if [[ $cur == -* ]]; then
		_batchfs_reply "$(_batchfs_options "$bfs" "$cmd")" "$cur"
		return
	fi
	case $cmd in
	umount | status)
		compopt -o filenames 2>/dev/null # quote spaces, as for files
		_batchfs_reply "$(_batchfs_mounts)" "$cur"
		;;
	esac
	# Anything else: file names (-o default, below).
}

complete -o default -F _batchfs batchfs
