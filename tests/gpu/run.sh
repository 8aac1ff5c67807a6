#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and CUDA under /usr/local/cuda: configure
# pdx for the nvidia platform without Criterion, build tests/gpu/test_gpu
# (hip/) and test_gpu_gates (the engine's gates with kernels), run both and
# print their output (each ends in "N passed, N failed"). The exit status is
# 1 when either failed. Run from anywhere; BUILD overrides the build folder.
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-/tmp/pdx-gpu}

cmake -S "$src" -B "$build" -DPDX_HIP_PLATFORM=nvidia -DPDX_BUILD_TESTS=OFF \
      -DPDX_BUILD_BENCH=OFF -DPDX_GPU_TESTS=ON || { echo "run.sh: configure failed" >&2; exit 2; }
cmake --build "$build" --target test_gpu test_gpu_gates -j "$(nproc)" ||
  { echo "run.sh: build failed" >&2; exit 2; }
rc=0
echo "=== test_gpu (hip/) ==="
"$build/tests/gpu/test_gpu" || rc=1
echo "=== test_gpu_gates (the engine's gates with kernels) ==="
"$build/tests/gpu/test_gpu_gates" || rc=1
exit $rc
