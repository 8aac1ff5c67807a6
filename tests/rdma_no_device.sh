#!/usr/bin/env bash
# pdx-info, linked against the system's libibverbs, on a machine without a
# usable RDMA device: PDX_TRANSPORT=rdma fails and says why; auto serves over
# tcp and says why. On a machine with a device both pick rdma.
set -uo pipefail
info=$1
export PDX_LISTEN=127.0.0.1:0

out=$(PDX_TRANSPORT=auto PDX_LOG=info "$info" --transport 2>&1); rc=$?
echo "auto: rc $rc"; echo "$out"
[ $rc -eq 0 ] || { echo "FAIL: auto did not open an engine" >&2; exit 1; }
if grep -q '^transport: rdma' <<<"$out"; then
  echo "an RDMA device is usable here: nothing more to check"
  exit 0
fi
grep -q '^transport: tcp' <<<"$out" || { echo "FAIL: auto picked neither" >&2; exit 1; }
grep -q 'no RDMA device' <<<"$out" || { echo "FAIL: auto fell back without saying why" >&2; exit 1; }

out=$(PDX_TRANSPORT=rdma "$info" --transport 2>&1); rc=$?
echo "rdma: rc $rc"; echo "$out"
[ $rc -ne 0 ] || { echo "FAIL: PDX_TRANSPORT=rdma opened an engine without a device" >&2; exit 1; }
grep -q 'no RDMA device' <<<"$out" || { echo "FAIL: no reason given" >&2; exit 1; }
echo "ok"
