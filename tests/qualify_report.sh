#!/usr/bin/env bash
# tools/qualify.sh here, where no step but pdx-info can run: --dry-run names
# every step and what is missing; --skip all writes a report of skipped
# steps; pdx-info alone (from this build) passes and leaves the engine's
# address and the host name out; the bench step over tcp (--bench-transport
# tcp) verifies its transfers and reports their numbers. Usage: qualify_report.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

bash "$src/tools/qualify.sh" --dry-run > "$work/dry.txt"
for s in info gpu-tests bench visibility perftest markers; do
  grep -Eq "^  $s +(runs|skipped: .+)$" "$work/dry.txt" ||
    { cat "$work/dry.txt"; echo "qualify_report: --dry-run does not say what $s does" >&2; exit 1; }
done
grep -Eq "(amd|nvidia) GPUs: [0-9]+" "$work/dry.txt"

bash "$src/tools/qualify.sh" --skip all --out "$work/skipped" > /dev/null
/usr/bin/python3 "$src/tests/qualify_check.py" "$work/skipped" all-skipped

bash "$src/tools/qualify.sh" --build "$build" --out "$work/info" \
  --skip gpu-tests,bench,visibility,perftest,markers > /dev/null
/usr/bin/python3 "$src/tests/qualify_check.py" "$work/info" info-only

# The bench step's own plumbing (two pdx-bench processes, their JSON, the
# numbers in the report) over tcp with host memory: no NIC here.
bash "$src/tools/qualify.sh" --build "$build" --out "$work/bench" --bench-transport tcp \
  --skip gpu-tests,visibility,perftest,markers > /dev/null
/usr/bin/python3 "$src/tests/qualify_check.py" "$work/bench" bench-tcp
