#!/usr/bin/env bash
# Run the example's two sides as two processes on this host: prefill
# listens and prints its address, decode connects to it. Both must exit 0.
# Usage: examples/run.sh PATH/TO/pd_transfer
set -euo pipefail
bin=$1
out=$(mktemp)
trap 'rm -f "$out"; kill "$pre" 2>/dev/null || true' EXIT
"$bin" prefill >"$out" &
pre=$!
for _ in $(seq 1 100); do
  addr=$(head -1 "$out")
  [ -n "$addr" ] && break
  sleep 0.05
done
[ -n "$addr" ] || { echo "prefill printed no address" >&2; exit 1; }
"$bin" decode "$addr"
wait "$pre"
echo "prefill: exit 0"
