#!/bin/bash
# The CUDA backend against the fake driver: stream/event protocol, bytes,
# epochs, no spinning waits.
exec bash "$BFS_SRC/tests/loader/with_fake.sh" test_loader_cuda
