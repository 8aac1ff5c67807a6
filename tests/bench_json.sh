#!/usr/bin/env bash
# pdx-bench --json names the transport its engines used, never the setting
# ("auto"), on both sides of a loopback run, and says why it failed when no
# engine could be made (and then names no transport); --unchecked moves
# every room and claims none verified.
# usage: bench_json.sh PDX-BENCH
set -uo pipefail
bench=$1
py=/usr/bin/python3
args=(--loopback --layers 2 --pages 4 --requests 4 --pool-mib 16 --json)
export PDX_LISTEN=127.0.0.1:0
unset PDX_IB_DEVICES

check() { # what, exit status wanted, JSON on stdin, python asserting on d
  "$py" -c "import json, sys
d = json.load(sys.stdin)
$3" || { echo "FAIL: $1" >&2; exit 1; }
}

out=$(PDX_TRANSPORT=auto "$bench" "${args[@]}"); rc=$?
echo "$out"
[ $rc -eq 0 ] || { echo "FAIL: PDX_TRANSPORT=auto: exit $rc" >&2; exit 1; }
check auto 0 'assert d["transport_setting"] == "auto", d["transport_setting"]
assert d["transport"] in ("tcp", "rdma"), d["transport"]
assert d["decode"]["transport"] == d["prefill"]["transport"] == d["transport"]
assert d["error"] is None and d["decode"]["error"] is None' <<<"$out"

out=$(PDX_TRANSPORT=tcp "$bench" "${args[@]}"); rc=$?
[ $rc -eq 0 ] || { echo "FAIL: PDX_TRANSPORT=tcp: exit $rc" >&2; exit 1; }
check tcp 0 'assert d["transport"] == "tcp" and d["prefill"]["transport"] == "tcp", d' <<<"$out"

# --unchecked: every room moved, none claimed verified
out=$(PDX_TRANSPORT=tcp "$bench" "${args[@]}" --unchecked); rc=$?
[ $rc -eq 0 ] || { echo "FAIL: --unchecked: exit $rc" >&2; exit 1; }
check unchecked 0 'assert d["verified"] is False, d["verified"]
assert d["decode"]["done"] == 4 and d["decode"]["failed"] == 0, d["decode"]
assert d["latency"] == "pdx_expect - decode SUCCESS", d["latency"]' <<<"$out"

out=$(PDX_TRANSPORT=rdma PDX_IB_DEVICES=pdx_no_such_nic "$bench" "${args[@]}" 2>/dev/null); rc=$?
echo "$out"
[ $rc -eq 1 ] || { echo "FAIL: no engine: exit $rc, not 1" >&2; exit 1; }
check no-engine 1 'assert d["transport"] is None, d["transport"]
assert d["error"].startswith("pdx_engine_create: "), d["error"]
assert d["decode"]["error"] == d["error"] and d["decode"]["exit"] == 1' <<<"$out"
echo ok
