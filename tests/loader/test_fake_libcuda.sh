#!/bin/bash
# The fake CUDA driver's model (streams, events, waits, failures, capture,
# contexts) against its own test, before any loader test relies on it.
exec bash "$BFS_SRC/tests/loader/with_fake.sh" test_fake_libcuda
