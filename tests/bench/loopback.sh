#!/usr/bin/env bash
# Two-process throughput on this host, next to the raw socket pair measured in
# the same run: one plain TCP socket pair moving 1 MiB messages (bench_tcp
# --only socket) against pdx-bench --loopback with DeepSeek-R1 geometry at
# page sizes 64 and 1. Usage: tests/bench/loopback.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build/default}
# The first value of a JSON key in pdx-bench's output (decode's object comes first).
first() { grep -o "\"$1\": *[0-9.]*" | head -1 | sed 's/.*: *//'; }

sock=$("$build/tests/bench/bench_tcp" --only socket -s 1048576 -D 3 --json 2>/dev/null |
       sed -n 's/.*"socket": {[^}]*"bw_gbps": *\([0-9.]*\).*/\1/p')
printf '%-44s %10s %12s %8s\n' "case" "BW[GB/s]" "requests/s" "ratio"
printf -- '-%.0s' {1..78}; echo
printf '%-44s %10.2f %12s %8s\n' "plain TCP socket pair, 1 MiB messages" "$sock" "-" "1.00"
run() {   # label, pdx-bench flags
  local label=$1; shift
  local out
  out=$("$build/tools/pdx-bench" --loopback --json --layers 61 --bytes-per-token 576 "$@" \
        2>/dev/null) || { echo "$label: pdx-bench failed (exit $?)"; return 0; }
  local b r
  b=$(echo "$out" | first bw_gbps)
  r=$(echo "$out" | first requests_per_s)
  printf '%-44s %10.2f %12.1f %8.2f\n' "$label" "$b" "$r" "$(awk -v b="$b" -v s="$sock" 'BEGIN { print b / s }')"
}
run "pdx-bench, page size 64, 64 pages/request" --page-size 64 --pages 64 --requests 64 \
    --concurrency 7 --pool-mib 1024
run "pdx-bench, page size 1, 4096 pages/request" --page-size 1 --pages 4096 --requests 64 \
    --concurrency 7 --pool-mib 1024
