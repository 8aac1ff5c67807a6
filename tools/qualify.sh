#!/usr/bin/env bash
# One bounded, read-only qualification run of pdx on a node with AMD GPUs and
# RDMA NICs: builds pdx against the node's ROCm, runs what has only been
# simulated elsewhere, and writes OUT/qualify-report.json and
# OUT/qualify-report.md to send back. It writes nothing outside OUT, runs
# niced on half the CPUs, and stops each step at its share of --time-limit.
#
#   tools/qualify.sh [--dry-run] [--out DIR] [--rocm PATH] [--build DIR]
#                    [--skip STEP,...|all] [--identify] [--time-limit SECONDS]
#                    [--platform amd|nvidia] [--bench-transport rdma|tcp]
#
# Steps (each passes, fails, or is skipped with the reason; a skipped step
# never counts as a pass):
#   info        pdx-info's JSON (GPUs, NICs, ports, GIDs, GPU -> NIC, CPUs),
#               ROCm and rdma-core versions, the kernel's dmabuf and P2PDMA
#               support, a peer-memory module
#   gpu-tests   tests/gpu on the platform: classification, dmabuf export at
#               offsets, words and gates, IPC copies; the engine's gates with
#               kernels, the stale-page test and its control, gate latency
#               and launch rate, the ipc transport between engines
#               (test_gpu_gates, test_gpu_ipc_engine: hipcc on amd)
#   bench       pdx-bench between two processes over the NICs, KV pools in
#               GPU memory of two GPUs (one when there is one), every byte
#               verified: DeepSeek-R1 and Llama-3-70B TP8 geometries, 1 NIC
#               then 2, 4 and 8 where present
#   visibility  a decode kernel queued behind pdx_room_stream_wait reading
#               every byte right after SUCCESS (tests/gpu/visibility), over
#               rdma (tcp without a NIC), PDX_FLUSH off (does the hazard show
#               here?) and auto (it must not)
#   perftest    ib_write_bw on the same NIC pair: pdx's share of line rate
#   markers     a rocprofv3 marker trace of a short run: pdx's ranges in it
#
# --dry-run lists the steps and what this machine lacks for each, builds and
# runs nothing. --identify keeps host names and addresses in the report.
# --bench-transport tcp runs the bench step over tcp (one connection per
# engine, 8 requests, host memory without a GPU): a check of the step
# itself where there is no NIC; its numbers say nothing of a NIC.
# --platform: the GPUs' (default: amd where /sys/class/kfd lists a GPU, else
# nvidia where the driver lists one, else amd); nvidia runs what the same
# steps can on an NVIDIA GPU.
# Exit status: 0 when no check failed, 1 when one did, 2 for bad usage.
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
out=$PWD/qualify-out
rocm=${PDX_ROCM_PATH:-/opt/rocm}
platform=""
build=""
skip=""
dry=0
identify=0
bench_tp=rdma
limit=900
steps=(info gpu-tests bench visibility perftest markers)

usage() {
  sed -n '8,10p' "$0" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) dry=1 ;;
    --identify) identify=1 ;;
    --out) out=${2:?}; shift ;;
    --rocm) rocm=${2:?}; shift ;;
    --build) build=${2:?}; shift ;;
    --skip) skip=${2:?}; shift ;;
    --time-limit) limit=${2:?}; shift ;;
    --platform) platform=${2:?}; shift ;;
    --bench-transport) bench_tp=${2:?}; shift ;;
    -h|--help) sed -n '2,/^# Exit status/p' "$0"; exit 0 ;;
    *) echo "qualify.sh: unknown option $1" >&2; usage ;;
  esac
  shift
done
case $limit in ''|*[!0-9]*) echo "qualify.sh: --time-limit takes seconds" >&2; usage ;; esac
case $platform in ''|amd|nvidia) ;; *) echo "qualify.sh: --platform amd or nvidia" >&2; usage ;; esac
case $bench_tp in rdma|tcp) ;; *) echo "qualify.sh: --bench-transport rdma or tcp" >&2; usage ;; esac
for s in ${skip//,/ }; do
  [ "$s" = all ] || [[ " ${steps[*]} " == *" $s "* ]] ||
    { echo "qualify.sh: no step '$s' (steps: ${steps[*]})" >&2; usage; }
done
t0=$(date +%s)
jobs=$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))

# ------------------------------------------------------------ the machine

kconfig() { # CONFIG_X: y, m, n, or unknown
  local f=/boot/config-$(uname -r) v
  if [ -r "$f" ]; then v=$(grep -E "^$1=" "$f" | cut -d= -f2)
  elif [ -r /proc/config.gz ]; then v=$(zcat /proc/config.gz | grep -E "^$1=" | cut -d= -f2)
  else echo unknown; return; fi
  echo "${v:-n}"
}
rocm_version=$(cat "$rocm/.info/version" 2>/dev/null || true)
rdma_core=$(dpkg-query -W -f='${Version}' rdma-core 2>/dev/null || rpm -q --qf '%{VERSION}' rdma-core 2>/dev/null || true)
peer_mem=$(awk '$1 ~ /^(amdp2p|ib_peer_mem|peer_mem|amd_peermem)$/ {print $1}' /proc/modules 2>/dev/null | paste -sd, -)
amd_gpus=0
for n in /sys/class/kfd/kfd/topology/nodes/*/gpu_id; do
  [ -r "$n" ] && [ "$(cat "$n")" != 0 ] && amd_gpus=$((amd_gpus + 1))
done
nvidia_gpus=$(ls /proc/driver/nvidia/gpus 2>/dev/null | wc -l)
if [ -z "$platform" ]; then
  platform=amd
  [ "$amd_gpus" = 0 ] && [ "$nvidia_gpus" -gt 0 ] && platform=nvidia
fi
if [ $platform = amd ]; then
  ngpus=$amd_gpus
  gpu_source="/sys/class/kfd lists none"
  runtime=${rocm_version:+ROCm $rocm_version}
else
  ngpus=$nvidia_gpus
  gpu_source="/proc/driver/nvidia/gpus lists none"
  runtime=$(/usr/bin/python3 -c 'import json, sys; print("CUDA " + json.load(open(sys.argv[1]))["cuda"]["version"])' \
            /usr/local/cuda/version.json 2>/dev/null ||
          /usr/local/cuda/bin/nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/CUDA \1/p')
fi
nnics=$(ls /sys/class/infiniband 2>/dev/null | wc -l)
hipcc=$( [ -x "$rocm/bin/hipcc" ] && echo "$rocm/bin/hipcc" || command -v hipcc || true)
perftest=$(command -v ib_write_bw || true)
rocprof=$( [ -x "$rocm/bin/rocprofv3" ] && echo "$rocm/bin/rocprofv3" || command -v rocprofv3 || true)

# Why a step cannot run here ("" when it can).
lacks() {
  [ "$skip" = all ] || [[ ",$skip," == *",$1,"* ]] && { echo "skipped with --skip"; return; }
  case $1 in
    info) ;;
    gpu-tests|markers)
      [ "$ngpus" -gt 0 ] || { echo "no $platform GPU ($gpu_source)"; return; }
      [ "$1" = markers ] && [ $platform != amd ] && { echo "rocprofv3 traces AMD GPUs"; return; }
      [ "$1" = markers ] && [ -z "$rocprof" ] && echo "no rocprofv3 (under $rocm/bin or on PATH)" ;;
    bench|perftest)
      [ "$1" = bench ] && [ $bench_tp = tcp ] && return
      [ "$nnics" -gt 0 ] || { echo "no RDMA device (/sys/class/infiniband is empty)"; return; }
      [ "$1" = bench ] && [ "$ngpus" -eq 0 ] && { echo "no $platform GPU for the KV pools"; return; }
      [ "$1" = perftest ] && [ -z "$perftest" ] && echo "no ib_write_bw (perftest)" ;;
    visibility)
      [ "$ngpus" -gt 0 ] || { echo "no $platform GPU ($gpu_source)"; return; }
      [ $platform = amd ] && [ -z "$hipcc" ] && echo "no hipcc to build its kernels" ;;
  esac
}

if [ $dry = 1 ]; then
  echo "qualify.sh --dry-run: platform $platform (${runtime:-no GPU runtime found}), ROCm ${rocm_version:-not found} at $rocm, rdma-core ${rdma_core:-not found}, kernel $(uname -r)"
  echo "  dmabuf move notify: $(kconfig CONFIG_DMABUF_MOVE_NOTIFY), P2PDMA: $(kconfig CONFIG_PCI_P2PDMA), peer-memory module: ${peer_mem:-none}"
  echo "  $platform GPUs: $ngpus, RDMA devices: $nnics, hipcc: ${hipcc:-none}, ib_write_bw: ${perftest:-none}, rocprofv3: ${rocprof:-none}"
  for s in "${steps[@]}"; do
    why=$(lacks "$s")
    printf '  %-10s %s\n' "$s" "${why:+skipped: }${why:-runs}"
  done
  exit 0
fi

mkdir -p "$out" || exit 2
: > "$out/results.tsv"
result() { # step name status why [numbers]
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$(printf '%s' "$4" | tr '\t\n' '  ')" "${5:-}" \
    >> "$out/results.tsv"
  printf '%-10s %-40s %s%s\n' "$1" "$2" "$3" "${4:+: $4}"
}
left() { echo $(( limit - ($(date +%s) - t0) )); }
run() { # seconds log command...: bounded, niced, its output in log
  local s=$1 log=$2
  shift 2
  [ "$(left)" -lt "$s" ] && s=$(left)
  [ "$s" -gt 0 ] || { echo "time limit reached" > "$log"; return 124; }
  timeout "$s" nice -n 10 "$@" > "$log" 2>&1
}
run_json() { # seconds json command...: as run, stderr in the json's .log
  local s=$1 json=$2
  shift 2
  [ "$(left)" -lt "$s" ] && s=$(left)
  [ "$s" -gt 0 ] || { echo "time limit reached" > "${json%.json}.log"; return 124; }
  timeout "$s" nice -n 10 "$@" > "$json" 2> "${json%.json}.log"
}
jget() { # file key...: a number or string out of a JSON object
  /usr/bin/python3 - "$@" <<'EOF' 2>/dev/null
import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2:]:
    v = v.get(k) if isinstance(v, dict) else None
print("" if v is None else v)
EOF
}

# ------------------------------------------------------------------ build

need_build=0
for s in "${steps[@]}"; do [ -z "$(lacks "$s")" ] && need_build=1; done
if [ $need_build = 1 ] && [ -z "$build" ]; then
  build=$out/build
  gpu_tests=OFF
  [ "$ngpus" -gt 0 ] && gpu_tests=ON
  if run 300 "$out/build.log" cmake -S "$src" -B "$build" -DPDX_HIP_PLATFORM=$platform \
       -DPDX_ROCM_PATH="$rocm" -DPDX_GPU_TESTS=$gpu_tests -DPDX_BUILD_TESTS=OFF \
       -DPDX_BUILD_BENCH=OFF &&
     run 600 "$out/build-2.log" cmake --build "$build" -j "$jobs"; then
    result info build pass "$platform platform${runtime:+, $runtime}" "jobs=$jobs"
  else
    result info build fail "see build.log and build-2.log"
  fi
fi
tool() { echo "$build/tools/$1"; }

# --------------------------------------------------------------- 1. info

{
  echo "platform	$platform"
  echo "gpu_runtime	${runtime:-none}"
  echo "rocm	${rocm_version:-none}"
  echo "rdma_core	${rdma_core:-none}"
  echo "kernel	$(uname -r)"
  echo "dmabuf_move_notify	$(kconfig CONFIG_DMABUF_MOVE_NOTIFY)"
  echo "p2pdma	$(kconfig CONFIG_PCI_P2PDMA)"
  echo "peer_memory_module	${peer_mem:-none}"
  echo "gpus	$ngpus"
  echo "rdma_devices	$nnics"
  echo "hipcc	$( [ -n "$hipcc" ] && echo yes || echo none)"
} > "$out/machine.tsv"
why=$(lacks info)
if [ -n "$why" ]; then
  result info pdx-info skipped "$why"
elif run_json 120 "$out/pdx-info.json" "$(tool pdx-info)" --json; then
  result info pdx-info pass "GPUs, NICs, GPU -> NIC, CPUs in pdx_info" \
    "gpus=$(jget "$out/pdx-info.json" gpus count);rdma_devices=$(jget "$out/pdx-info.json" rdma count)"
else
  result info pdx-info fail "pdx-info --json failed (pdx-info.log)"
  rm -f "$out/pdx-info.json"
fi

# ---------------------------------------------------------- 2. gpu-tests

why=$(lacks gpu-tests)
if [ -n "$why" ]; then
  result gpu-tests "tests/gpu" skipped "$why"
else
  tests="test_gpu test_gpu_ipc"
  for t in test_gpu_gates test_gpu_ipc_engine; do
    [ -x "$build/tests/gpu/$t" ] && tests="$tests $t"
  done
  for t in $tests; do
    run 180 "$out/$t.log" "$build/tests/gpu/$t"
    rc=$?
    counts=$(grep -Eo '[0-9]+ passed, [0-9]+ failed' "$out/$t.log" | tail -1)
    nums="passed=${counts%% passed*};failed=$(echo "$counts" | sed -n 's/.*passed, \([0-9]*\) failed/\1/p')"
    if [ $rc = 0 ]; then result gpu-tests "$t" pass "$counts" "$nums"
    else result gpu-tests "$t" fail "exit $rc: ${counts:-no summary} ($t.log)" "$nums"; fi
  done
  [ -x "$build/tests/gpu/test_gpu_gates" ] ||
    result gpu-tests "gates with kernels, stale pages, the ipc transport" skipped \
      "test_gpu_gates and test_gpu_ipc_engine were not built (no hipcc for these GPUs: build.log)"
fi

# -------------------------------------------------------------- 3. bench

bench_pair() { # name nics flags...: decode on the last GPU, prefill on GPU 0
  local name=$1 nics=$2 port=$((20000 + RANDOM % 20000)) dgpu=$((ngpus > 1 ? 1 : 0))
  local dmem=(--gpu $dgpu) pmem=(--gpu 0) what="$name, $nics NIC(s), GPU 0 -> GPU $dgpu"
  shift 2
  [ $bench_tp = tcp ] && what="$name over tcp, GPU 0 -> GPU $dgpu"
  [ "$ngpus" -eq 0 ] && { dmem=(); pmem=(); what="$name over tcp, host memory"; }
  PDX_NICS=$nics run_json 240 "$out/bench-$name-$nics-decode.json" "$(tool pdx-bench)" \
    --role decode --listen "127.0.0.1:$port" "${dmem[@]}" --transport $bench_tp --json "$@" &
  local dpid=$!
  sleep 1
  PDX_LISTEN=127.0.0.1:0 PDX_NICS=$nics run_json 240 "$out/bench-$name-$nics-prefill.json" \
    "$(tool pdx-bench)" \
    --role prefill --connect "127.0.0.1:$port" "${pmem[@]}" --transport $bench_tp --json "$@"
  local prc=$?
  wait $dpid
  local drc=$? f=$out/bench-$name-$nics-decode.json
  local gbps verified
  gbps=$(jget "$f" decode bw_gbps)
  verified=$(jget "$f" verified)
  if [ $prc = 0 ] && [ $drc = 0 ] && [ "$verified" = True ]; then
    result bench "$what" pass "every byte verified" \
      "gbps=$gbps;lat_p50_us=$(jget "$f" decode lat_p50_us);lat_p99_us=$(jget "$f" decode lat_p99_us)"
    echo "$gbps" > "$out/bench-$name-$nics.gbps"
  else
    result bench "$what" fail \
      "exit $prc/$drc, verified '$verified' (bench-$name-$nics-*.json and .log)"
  fi
}
why=$(lacks bench)
if [ -n "$why" ]; then
  result bench "pdx-bench, GPU memory, rdma" skipped "$why"
elif [ $bench_tp = tcp ]; then
  result bench "the NICs" skipped "--bench-transport tcp: one tcp connection per engine instead"
  bench_pair deepseek 1 -L 61 -b 576 -P 64 -p 64 -n 8
  bench_pair llama70b-tp8 1 -L 160 -b 256 -P 16 -p 256 -n 8
else
  [ "$ngpus" -lt 2 ] && result bench "two GPUs" skipped "$ngpus $platform GPU(s): both pools on GPU 0"
  for nics in 1 2 4 8; do
    if [ "$nics" -gt "$nnics" ]; then
      result bench "$nics NICs per engine" skipped "$nnics RDMA device(s)"
      continue
    fi
    bench_pair deepseek "$nics" -L 61 -b 576 -P 64 -p 64 -n 64
    bench_pair llama70b-tp8 "$nics" -L 160 -b 256 -P 16 -p 256 -n 64
  done
fi

# --------------------------------------------------------- 4. visibility

why=$(lacks visibility)
vis=$build/tests/gpu/visibility
if [ -n "$why" ]; then
  result visibility "decode kernel after SUCCESS" skipped "$why"
elif [ ! -x "$vis" ]; then
  result visibility "decode kernel after SUCCESS" skipped "tests/gpu/visibility was not built (build.log)"
else
  tp=tcp
  [ "$nnics" -gt 0 ] && tp=rdma
  dgpu=$((ngpus > 1 ? 1 : 0))
  for flush in off auto; do
    PDX_FLUSH=$flush PDX_TRANSPORT=$tp run 240 "$out/visibility-$flush.log" "$vis" --rooms 64 \
      --gpu 0 --decode-gpu $dgpu
    rc=$?
    line=$(grep -E '^visibility: ' "$out/visibility-$flush.log" | tail -1)
    stale=$(echo "$line" | sed -n 's/.*SUCCESS, \([0-9]*\) stale.*/\1/p')
    name="PDX_FLUSH=$flush over $tp, GPU 0 -> GPU $dgpu"
    nums="stale_words=${stale:-};rooms=64"
    if [ $rc = 0 ]; then
      result visibility "$name" pass "every byte seen right after SUCCESS" "$nums"
    elif [ $rc = 3 ] && [ $flush = off ]; then
      result visibility "$name" pass "the hazard shows without the flush: stale words after SUCCESS" "$nums"
    else
      result visibility "$name" fail "exit $rc: ${line:-no result} (visibility-$flush.log)" "$nums"
    fi
  done
fi

# ----------------------------------------------------------- 5. perftest

why=$(lacks perftest)
if [ -n "$why" ]; then
  result perftest ib_write_bw skipped "$why"
else
  dev=$(ls /sys/class/infiniband | head -1)
  run 60 "$out/ib_write_bw-server.log" "$perftest" -d "$dev" -D 5 --report_gbits &
  spid=$!
  sleep 1
  run 60 "$out/ib_write_bw.log" "$perftest" -d "$dev" -D 5 --report_gbits 127.0.0.1
  wait $spid
  line=$(awk '/^ *65536 / {print $4}' "$out/ib_write_bw.log" | tail -1)
  if [ -n "$line" ]; then
    pdx=$(cat "$out/bench-deepseek-1.gbps" 2>/dev/null)
    ratio=$( [ -n "$pdx" ] && awk -v p="$pdx" -v l="$line" 'BEGIN {printf "%.3f", p * 8 / l}')
    result perftest "ib_write_bw on $dev, loopback" pass "line rate against pdx-bench, 1 NIC" \
      "gbits=$line;pdx_share=${ratio:-}"
  else
    result perftest "ib_write_bw on $dev" fail "no bandwidth line (ib_write_bw.log)"
  fi
fi

# ------------------------------------------------------------ 6. markers

why=$(lacks markers)
if [ -n "$why" ]; then
  result markers "rocprofv3 --marker-trace" skipped "$why"
else
  PDX_MARKERS=on run 180 "$out/markers.log" "$rocprof" --marker-trace -d "$out/trace" -- \
    "$(tool pdx-bench)" --loopback --gpu 0 --requests 8
  found=0
  for m in "pdx gate open" "pdx post" "pdx notify" "pdx room completed"; do
    grep -rqs "$m" "$out/trace" && found=$((found + 1))
  done
  if [ $found = 4 ]; then
    result markers "rocprofv3 --marker-trace" pass "gate, post, notify and room ranges in the trace" "ranges=4"
  else
    result markers "rocprofv3 --marker-trace" fail "$found of 4 kinds of pdx range in the trace" "ranges=$found"
  fi
fi

# ------------------------------------------------------------- the report

{
  echo "pdx	$(sed -n 's/^project(pdx VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")"
  echo "seconds	$(( $(date +%s) - t0 ))"
  echo "identify	$identify"
  echo "options	time-limit $limit${skip:+, skip $skip}, bench over $bench_tp"
} > "$out/meta.tsv"
/usr/bin/python3 "$src/tools/qualify_report.py" "$out" || exit 1
echo "qualify.sh: $out/qualify-report.json, $out/qualify-report.md"
! grep -qP '\tfail\t' "$out/results.tsv"
