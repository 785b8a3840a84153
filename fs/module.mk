# fs/: the core library (no FUSE headers, no printing, no exit).
CORE_SRCS += $(sort $(wildcard fs/*.c))
