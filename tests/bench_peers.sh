#!/usr/bin/env bash
# pdx-bench --role decode --peers 3 --keep-going serves three prefill
# processes one after another; the second is killed (SIGKILL) in the middle
# of its requests. The first and the third verify every room, the decode
# side counts the second's failures, goes on, and exits 1 for them.
set -euo pipefail
bench=$1
dir=$(mktemp -d)
dpid=
cleanup() { [ -n "$dpid" ] && kill -9 "$dpid" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
# Every engine on loopback: a wildcard listener would advertise, and be dialed
# at, the address of the default route's interface.
export PDX_LISTEN=127.0.0.1:0
# On failure: what each side said, less the lines every killed peer causes.
fail() {
  echo "bench_peers: $*" >&2
  for f in "$dir"/p1 "$dir"/p2 "$dir"/p3 "$dir"/decode; do
    [ -s "$f" ] && { echo "--- ${f##*/}"; cat "$f"; } >&2
  done
  echo "--- decode's stderr (without the killed peer's rooms)" >&2
  grep -v "no longer connected\|pdx_expect: peer gone" "$dir/decode.err" | tail -n 60 >&2
  exit 1
}
flags=(--layers 4 --bytes-per-token 576 --page-size 16 --pages 8 --concurrency 2
       --pool-mib 16 --timeout-ms 5000 --requests 8000)

: >"$dir/decode.err"   # read below before the decode process may have opened it
"$bench" --role decode --listen 127.0.0.1:0 --peers 3 --keep-going "${flags[@]}" \
  >"$dir/decode" 2>"$dir/decode.err" &
dpid=$!
addr=
for _ in $(seq 100); do
  addr=$(sed -n 's/.*listening on \([0-9.]*:[0-9]*\);.*/\1/p' "$dir/decode.err")
  [ -n "$addr" ] && break
  sleep 0.1
done
[ -n "$addr" ] || fail "decode did not listen"

"$bench" --role prefill --connect "$addr" "${flags[@]}" >"$dir/p1" 2>&1 || fail "prefill 1 failed"
"$bench" --role prefill --connect "$addr" "${flags[@]}" >"$dir/p2" 2>&1 &
p2=$!
for _ in $(seq 200); do  # killed only once it is served, however loaded the machine
  grep -q "peer 2 connected" "$dir/decode.err" && break
  sleep 0.05
done
sleep 0.3
kill -9 "$p2"
wait "$p2" 2>/dev/null || true
"$bench" --role prefill --connect "$addr" "${flags[@]}" >"$dir/p3" 2>&1 || fail "prefill 3 failed"
rc=0
wait "$dpid" || rc=$?
dpid=
grep -q " peer 1 *: 8000 verified, 0 failed" "$dir/decode" || fail "peer 1"
grep -Eq " peer 2 *: [0-9]+ verified, [1-9][0-9]* failed" "$dir/decode" ||
  fail "peer 2 was not cut short (it finished within 0.3 s?)"
grep -q " peer 3 *: 8000 verified, 0 failed" "$dir/decode" || fail "peer 3"
[ "$rc" -eq 1 ] || fail "decode exited $rc, not 1"
cat "$dir/decode"
echo "bench_peers: 3 peers served in turn, the killed one's rooms failed, the others verified"
