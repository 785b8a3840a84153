# tools/: subcommands linked into build/batchfs (pack, inspect, bench).
CLI_SRCS += $(sort $(wildcard tools/*.c))
