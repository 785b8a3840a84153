#!/bin/bash
# The CUDA backend against the fake driver when things go wrong or the
# process does more (captures, failures, fork, other contexts).
exec bash "$BFS_SRC/tests/loader/with_fake.sh" test_loader_cuda_faults
