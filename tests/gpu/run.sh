#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and CUDA under /usr/local/cuda: configure
# pdx for the nvidia platform without Criterion, build tests/gpu/test_gpu
# (hip/), test_gpu_gates (the engine's gates with kernels), bench_ipc and
# pdx-bench, print pdx-info and the engine's placement, run both tests (each
# ends in "N passed, N failed"), bench_ipc (IPC pages between two processes:
# the gather kernel against one contiguous copy), bench_wake (the ways a host
# thread can learn that a kernel ended: latency and CPU) and test_gpu_python.py
# (the Python binding with GPU memory; unittest's summary), then a verified
# GPU -> GPU pdx-bench over tcp (one NIC, then two per engine) and the same
# run with host memory for comparison. The exit status is 1 when anything failed. Run from
# anywhere; BUILD overrides the build folder.
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-/tmp/pdx-gpu}

cmake -S "$src" -B "$build" -DPDX_HIP_PLATFORM=nvidia -DPDX_BUILD_TESTS=OFF \
      -DPDX_BUILD_BENCH=OFF -DPDX_GPU_TESTS=ON || { echo "run.sh: configure failed" >&2; exit 2; }
cmake --build "$build" --target pdx test_gpu test_gpu_ipc test_gpu_gates test_gpu_ipc_engine \
      visibility bench_ipc bench_wake pdx-bench pdx-info -j "$(nproc)" ||
  { echo "run.sh: build failed" >&2; exit 2; }
rc=0
echo "=== pdx-info (the build, GPUs, RDMA devices, GPU -> NIC, CPUs, transport) ==="
"$build/tools/pdx-info" -Vgnmct || rc=1
echo "=== the engine's placement (PDX_LOG=info) ==="
PDX_LOG=info "$build/tools/pdx-bench" --gpu 0 --loopback --transport tcp --requests 4 2>&1 |
  grep -E "GPU [0-9]+ \(|not in the machine's topology" || { echo "no placement line"; rc=1; }
echo "=== test_gpu (hip/) ==="
"$build/tests/gpu/test_gpu" || rc=1
echo "=== test_gpu_ipc (gather copies, IPC handles across two processes) ==="
"$build/tests/gpu/test_gpu_ipc" || rc=1
echo "=== bench_ipc (two processes on GPU 0: contiguous copy, gather kernel, per-page copies) ==="
"$build/tests/gpu/bench_ipc" || rc=1
echo "=== test_gpu_gates (the engine's gates with kernels) ==="
"$build/tests/gpu/test_gpu_gates" || rc=1
echo "=== bench_wake (how a host thread learns that a kernel ended, and at what CPU) ==="
"$build/tests/gpu/bench_wake" || rc=1
echo "=== test_gpu_ipc_engine (the ipc transport: page maps, gates, two processes, a killed peer) ==="
"$build/tests/gpu/test_gpu_ipc_engine" || rc=1
echo "=== test_gpu_ipc_engine --bench (ipc against a contiguous copy and per-page copies) ==="
"$build/tests/gpu/test_gpu_ipc_engine" --bench || rc=1
echo "=== test_gpu_ipc_engine --bench-gates (gate to SUCCESS: the GPU's wait against the shard's) ==="
"$build/tests/gpu/test_gpu_ipc_engine" --bench-gates || rc=1
echo "=== test_gpu_ipc_engine --bench-layers (exposed transfer time: whole rooms against layer by layer) ==="
"$build/tests/gpu/test_gpu_ipc_engine" --bench-layers || rc=1
echo "=== test_gpu_ipc_engine --bench-layers all waits (decode's kernels waiting per layer) ==="
"$build/tests/gpu/test_gpu_ipc_engine" --bench-layers all waits || rc=1
echo "=== visibility (decode kernels behind pdx_room_stream_wait read every byte; tcp, two processes) ==="
for flush in off auto; do
  PDX_FLUSH=$flush PDX_TRANSPORT=tcp "$build/tests/gpu/visibility" --rooms 64 || rc=1
done
echo "=== test_gpu_python.py (GPU memory, gates and streams from Python) ==="
PDX_LIBRARY="$build/libpdx.so" PYTHONPATH="$src/python" PYTHONDONTWRITEBYTECODE=1 \
  python3 "$src/tests/gpu/test_gpu_python.py" || rc=1
echo "=== pdx-bench --gpu 0 --loopback (GPU -> GPU over tcp, two processes, verified) ==="
"$build/tools/pdx-bench" --gpu 0 --loopback --transport tcp --requests 64 --chunks 4 || rc=1
echo "=== the same with two NICs per engine (PDX_NICS=2: two tcp transports each) ==="
PDX_NICS=2 "$build/tools/pdx-bench" --gpu 0 --loopback --transport tcp --requests 64 --chunks 4 ||
  rc=1
echo "=== pdx-bench --gpu 0 --loopback with PDX_TRANSPORT=auto: GPU copies (ipc) ==="
"$build/tools/pdx-bench" --gpu 0 --loopback --transport auto --requests 64 --chunks 4 || rc=1
echo "=== the same with host memory ==="
"$build/tools/pdx-bench" --loopback --transport tcp --requests 64 --chunks 4 || rc=1
echo "=== PDX_VERIFY=crc32c: GPU -> GPU (staged checks), then host memory ==="
PDX_VERIFY=crc32c "$build/tools/pdx-bench" --gpu 0 --loopback --transport tcp --requests 64 \
  --chunks 4 || rc=1
PDX_VERIFY=crc32c "$build/tools/pdx-bench" --loopback --transport tcp --requests 64 --chunks 4 ||
  rc=1
exit $rc
