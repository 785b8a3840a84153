# mount/: the FUSE adapter (low-level ops, session, custom-io hooks). The
# only folder compiled with FUSE's include flags (besides the null FUSE
# server of tools/bench): fs/ cannot include a FUSE header.
CLI_SRCS += $(sort $(wildcard mount/*.c))
DIR_CPPFLAGS_mount = $(call pc_cflags,fuse3)
# The daemon exports its functions' names (-rdynamic) so the backtrace of
# a fatal signal (mount/postmortem) names them.
$(BUILD)/batchfs: LDFLAGS += -rdynamic
