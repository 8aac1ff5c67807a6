#!/usr/bin/env bash
# On a host with two NVIDIA GPUs or more and CUDA under /usr/local/cuda: the
# ipc transport between two GPUs of one host. Builds the nvidia platform as
# run.sh does, then: pdx-info's GPUs and which GPUs each one reaches (a peer
# engine on a GPU it reaches gets GPU copies, the others go over tcp or
# rdma); test_gpu_ipc_engine with prefill on GPU 0 and decode on GPU 1, then
# the reverse (random page maps at pages of 1, 16 and 64 tokens, gates with
# slow producers, two processes and a killed peer); its --bench across the
# two GPUs against a peer copy of one contiguous buffer and one peer copy per
# page; with four GPUs or more, the bench on pairs 0->1 and 2->3 at once.
# Exit status: 0 all passed, 1 something failed, 2 fewer than two GPUs (or
# no build). BUILD overrides the build folder.
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-/tmp/pdx-gpu}

n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "$n" -lt 2 ]; then
  echo "two_gpus.sh: this host has $n GPU(s); the run needs two" >&2
  exit 2
fi
cmake -S "$src" -B "$build" -DPDX_HIP_PLATFORM=nvidia -DPDX_BUILD_TESTS=OFF \
      -DPDX_BUILD_BENCH=OFF -DPDX_GPU_TESTS=ON || { echo "two_gpus.sh: configure failed" >&2; exit 2; }
cmake --build "$build" --target test_gpu_ipc_engine pdx-info -j "$(nproc)" ||
  { echo "two_gpus.sh: build failed" >&2; exit 2; }
engine=$build/tests/gpu/test_gpu_ipc_engine
rc=0
echo "=== pdx-info: GPUs, and which GPUs each reaches (ipc) ==="
"$build/tools/pdx-info" -gt || rc=1
for pair in 0,1 1,0; do
  echo "=== test_gpu_ipc_engine, PDX_TEST_GPUS=$pair (prefill, decode) ==="
  PDX_TEST_GPUS=$pair "$engine" || rc=1
done
echo "=== test_gpu_ipc_engine --bench, GPU 0 -> GPU 1 ==="
PDX_TEST_GPUS=0,1 "$engine" --bench || rc=1
if [ "$n" -ge 4 ]; then
  echo "=== test_gpu_ipc_engine --bench on GPU 0 -> 1 and GPU 2 -> 3 at once ==="
  PDX_TEST_GPUS=0,1 "$engine" --bench > "$build/bench01.log" 2>&1 &
  a=$!
  PDX_TEST_GPUS=2,3 "$engine" --bench > "$build/bench23.log" 2>&1 &
  b=$!
  wait $a || rc=1
  wait $b || rc=1
  for f in bench01 bench23; do
    echo "--- $f"
    grep -E "GB/s|passed" "$build/$f.log"
  done
else
  echo "=== two pairs at once: not run ($n GPUs; it needs four) ==="
fi
exit $rc
