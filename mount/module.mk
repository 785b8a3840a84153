# mount/: the batchfs command's entry point, mount/umount and the FUSE ops.
CLI_SRCS += $(sort $(wildcard mount/*.c))

# make demo: the README's first command. Installs what is missing, builds,
# packs a demo dataset, mounts it, shows it, reads a batch, unmounts.
demo: deps-test
	@$(MAKE) --no-print-directory build-all
	@BUILD=$(BUILD) scripts/demo.sh
