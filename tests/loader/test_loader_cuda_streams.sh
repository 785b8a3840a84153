#!/bin/bash
# Consumer races against the fake driver: slow consumer cloning on its
# stream and on a side stream, refused misuse (tests/gpu/ does it on a GPU).
exec bash "$BFS_SRC/tests/loader/with_fake.sh" test_loader_cuda_streams
