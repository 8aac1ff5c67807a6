#!/usr/bin/env bash
# Soak: a long-lived decode side (pdx-bench --role decode --peers 0
# --keep-going) serves prefill processes that each run about PERIOD seconds
# and exit, one after another, for DURATION seconds; every room of every
# peer is verified. After each peer the decode process's RSS and open fds
# are printed; at the end the totals: rooms verified, failed (must be 0),
# and RSS / fds from the first peer to the last.
#   tools/soak.sh [DURATION_S [PERIOD_S]]      (600 and 30 by default)
# Needs the default build (tools/test.sh). Extra pdx-bench flags: SOAK_FLAGS.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-600}
period=${2:-30}
bench=build/default/tools/pdx-bench
[ -x "$bench" ] || { echo "soak.sh: build the default preset first" >&2; exit 2; }
read -r -a flags <<< "${SOAK_FLAGS:---layers 61 --bytes-per-token 576 --page-size 16 --pages 16 --concurrency 8 --pool-mib 512 --timeout-ms 20000}"
dir=$(mktemp -d)
dpid=
cleanup() { [ -n "$dpid" ] && kill -9 "$dpid" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
export PDX_LISTEN=127.0.0.1:0 # the prefill processes too: everything stays on loopback

# Rooms per peer: what one peer moves in about PERIOD seconds, measured.
"$bench" --loopback --requests 400 "${flags[@]}" --json >"$dir/probe" 2>/dev/null
rate=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["decode"]["requests_per_s"])' "$dir/probe")
per_peer=$(/usr/bin/python3 -c "print(max(100, int($rate * $period)))")

: >"$dir/decode.err"   # read below before the decode process may have opened it
"$bench" --role decode --listen 127.0.0.1:0 --peers 0 --keep-going --requests "$per_peer" \
  "${flags[@]}" >"$dir/decode" 2>"$dir/decode.err" &
dpid=$!
addr=
for _ in $(seq 100); do
  addr=$(sed -n 's/.*listening on \([0-9.]*:[0-9]*\);.*/\1/p' "$dir/decode.err")
  [ -n "$addr" ] && break
  sleep 0.1
done
[ -n "$addr" ] || { cat "$dir/decode.err"; exit 1; }
echo "soak: ${duration} s, a new prefill process about every ${period} s ($per_peer rooms each), decode at $addr"
printf "%-6s %-8s %-10s %-12s %-6s\n" peer time_s rooms rss_kib fds
end=$(( $(date +%s) + duration ))
start=$(date +%s)
n=0
first_rss= first_fds=
while [ "$(date +%s)" -lt "$end" ]; do
  n=$((n + 1))
  "$bench" --role prefill --connect "$addr" --requests "$per_peer" "${flags[@]}" >"$dir/p" 2>&1 ||
    { cat "$dir/p"; echo "soak: prefill $n failed" >&2; exit 1; }
  sleep 0.5 # the decode side closes the peer and its last rooms release
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$dpid/status")
  fds=$(ls "/proc/$dpid/fd" | wc -l)
  [ -z "$first_rss" ] && first_rss=$rss first_fds=$fds
  printf "%-6s %-8s %-10s %-12s %-6s\n" "$n" "$(( $(date +%s) - start ))" "$per_peer" "$rss" "$fds"
done
kill -INT "$dpid"
rc=0
wait "$dpid" || rc=$?
dpid=
verified=$(grep -E '^ peer' "$dir/decode" | awk '{s += $4} END {print s + 0}')
failed=$(grep -E '^ peer' "$dir/decode" | awk '{s += $6} END {print s + 0}')
echo "soak: $n peers, $verified rooms verified, $failed failed; decode RSS $first_rss -> $rss KiB, fds $first_fds -> $fds; decode exit $rc"
[ "$failed" -eq 0 ] && [ "$rc" -eq 0 ] && [ "$verified" -eq $(( n * per_peer )) ]
