#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and CUDA under /usr/local/cuda: configure
# pdx for the nvidia platform without Criterion, build tests/gpu/test_gpu,
# run it and print its output (ending in "N passed, N failed"). The exit
# status is the test's. Run from anywhere; BUILD overrides the build folder.
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-/tmp/pdx-gpu}

cmake -S "$src" -B "$build" -DPDX_HIP_PLATFORM=nvidia -DPDX_BUILD_TESTS=OFF \
      -DPDX_BUILD_BENCH=OFF -DPDX_GPU_TESTS=ON || { echo "run.sh: configure failed" >&2; exit 2; }
cmake --build "$build" --target test_gpu -j "$(nproc)" ||
  { echo "run.sh: build failed" >&2; exit 2; }
"$build/tests/gpu/test_gpu"
