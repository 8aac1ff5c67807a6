#!/usr/bin/env bash
# Set up, configure, build with -Werror and run every test of one preset
# (default: "default"; also debug, asan, tsan). Ends with ctest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-default}

bash tools/setup.sh
cmake --preset "$preset" -DPDX_WERROR=ON >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
ctest --preset "$preset" -j 2 --timeout 600
