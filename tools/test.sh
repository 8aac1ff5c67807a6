#!/usr/bin/env bash
# Set up, configure, build with -Werror and run every test of one preset
# (default: "default"; also debug, asan, tsan). Ends with ctest's summary.
# Without sanitizers the run is watched by tests/netguard.c: a test process
# that connects to an address outside loopback from this network namespace
# fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-default}

bash tools/setup.sh
cmake --preset "$preset" -DPDX_WERROR=ON >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
guard=build/$preset/tests/libnetguard.so
if [ ! -f "$guard" ]; then
  exec ctest --preset "$preset" -j 2 --timeout 600
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
rc=0
LD_PRELOAD=$PWD/$guard NETGUARD_LOG=$log NETGUARD_NS=$(stat -L -c %i /proc/self/ns/net) \
  ctest --preset "$preset" -j 2 --timeout 600 || rc=$?
if [ -s "$log" ]; then
  echo "test.sh: test processes reached addresses outside loopback (pid, program, address):" >&2
  sort -u -k2 "$log" >&2
  exit 1
fi
exit "$rc"
