# mount/: the batchfs command's entry point, mount/umount and the FUSE ops.
CLI_SRCS += $(sort $(wildcard mount/*.c))
