#!/usr/bin/env bash
# Valgrind memcheck over a two-process transfer (pdx-bench --loopback: decode
# and prefill, tcp, every byte verified), once without a key and once with
# PDX_AUTH_KEY: no invalid access, no uninitialised use, nothing definitely
# lost, in either process. Needs the default build (tools/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bench=build/default/tools/pdx-bench
[ -x "$bench" ] || { echo "memcheck.sh: build the default preset first" >&2; exit 2; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
run() {
  env "$@" valgrind --error-exitcode=9 --leak-check=full --show-leak-kinds=definite \
      --errors-for-leak-kinds=definite --trace-children=yes -q \
      "$bench" --loopback --layers 4 --bytes-per-token 576 --page-size 16 --pages 8 \
      --requests 16 --concurrency 2 --chunks 2 --pool-mib 16 >"$log" 2>&1 || {
    cat "$log"
    echo "memcheck.sh: errors under valgrind ($*)" >&2; exit 1; }
  tail -n 4 "$log" | head -n 1
}
run PDX_LOG=warn
run PDX_LOG=warn PDX_AUTH_KEY=memcheck-key-of-enough-bytes
echo "memcheck: two processes, with and without a key: clean"
