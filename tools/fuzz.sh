#!/usr/bin/env bash
# The libFuzzer targets of tests/fuzz: build the fuzz preset (clang, ASan +
# UBSan, -Werror), make the seed corpus from real engines, then run every
# target over its corpus (build/fuzz/corpus/TARGET, kept between runs) and
# print the executions each made. The handshake targets (a live engine, with
# and without a key) run in a network namespace of their own (unshare).
#   tools/fuzz.sh            15 seconds per target
#   tools/fuzz.sh 60         60 seconds per target
#   tools/fuzz.sh -runs N    N executions per target
# A crash stops it (exit 1), leaving the input under build/fuzz/crashes.
set -euo pipefail
cd "$(dirname "$0")/.."
limit="-max_total_time=${1:-15}"
if [ "${1:-}" = "-runs" ]; then
  limit="-runs=${2:?tools/fuzz.sh -runs N}"
fi

bash tools/setup.sh
cmake --preset fuzz -DPDX_WERROR=ON >/dev/null
cmake --build --preset fuzz -j "$(nproc)"
bin=build/fuzz/tests/fuzz
rm -rf build/fuzz/seeds
"$bin/fuzz_seeds" build/fuzz/seeds 2>/dev/null
mkdir -p build/fuzz/crashes
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# The handshake targets run a live engine that dials the endpoint addresses
# they are fed: only inside a network namespace of their own (loopback only).
ns() { unshare -rn sh -c 'ip link set lo up && exec "$@"' sh "$@"; }
targets="ctrl notify desc tcp_addr tcp_frames handshake handshake-key"
if ! ns true 2>/dev/null; then
  echo "fuzz_handshake: NOT RUN: no network namespace here (unshare -rn failed)"
  targets="ctrl notify desc tcp_addr tcp_frames"
fi
for t in $targets; do
  target=${t%-key} seeds=$t run=
  case $t in
    handshake) seeds=ctrl run=ns ;;
    handshake-key) seeds=ctrl run=ns; export FUZZ_AUTH_KEY="a key the fuzzer does not know" ;;
  esac
  mkdir -p "build/fuzz/corpus/$t"
  log="build/fuzz/$t.log"
  if ! $run "$bin/fuzz_$target" "$limit" -print_final_stats=1 \
       -artifact_prefix=build/fuzz/crashes/"$t"- \
       "build/fuzz/corpus/$t" "build/fuzz/seeds/$seeds" >"$log" 2>&1; then
    tail -n 40 "$log"
    echo "fuzz_$t: crashed; the input is under build/fuzz/crashes" >&2
    exit 1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log")
  echo "fuzz_$t: $runs executions in ${secs:-?} s, no crash; corpus $(ls "build/fuzz/corpus/$t" | wc -l) inputs"
  unset FUZZ_AUTH_KEY
done
