# fs/: the core library (no FUSE headers, no printing, no exit), with its
# wing fs/remote/ (remote objects: client, objects, cache; fs/README.md).
CORE_SRCS += $(sort $(wildcard fs/*.c fs/remote/*.c))
