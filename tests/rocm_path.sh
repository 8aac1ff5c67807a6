#!/usr/bin/env bash
# PDX_ROCM_PATH: a ROCm tree (headers only, and a hipcc that builds nothing)
# is where the amd platform takes HIP's headers and hipcc from; without one
# there, the system's. Configures pdx twice in a scratch folder (nothing is
# built). Usage: rocm_path.sh SOURCE_DIR SYSTEM_HIP_INCLUDE_DIR
set -euo pipefail
src=$1
system_inc=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fake=$work/rocm
mkdir -p "$fake/include" "$fake/bin"
cp -r "$system_inc/hip" "$fake/include/hip"
printf '#!/bin/sh\nexit 1\n' > "$fake/bin/hipcc" # it builds for no GPU
chmod +x "$fake/bin/hipcc"

configure() { # rocm_path build_dir
  cmake -S "$src" -B "$2" -DPDX_HIP_PLATFORM=amd -DPDX_ROCM_PATH="$1" \
        -DPDX_BUILD_TESTS=OFF -DPDX_BUILD_BENCH=OFF > "$2.log" 2>&1 ||
    { cat "$2.log"; echo "rocm_path: configure with PDX_ROCM_PATH=$1 failed" >&2; exit 1; }
}
cached() { # build_dir variable
  sed -n "s/^$2:[A-Z]*=//p" "$1/CMakeCache.txt"
}
fail() {
  echo "rocm_path: $*" >&2
  exit 1
}

configure "$fake" "$work/with"
inc=$(cached "$work/with" PDX_HIP_INCLUDE_DIR)
[ "$inc" = "$fake/include" ] || fail "HIP headers from '$inc', not the ROCm tree's $fake/include"
hipcc=$(cached "$work/with" PDX_HIPCC)
[ "$hipcc" = "$fake/bin/hipcc" ] || fail "hipcc '$hipcc', not the ROCm tree's $fake/bin/hipcc"
grep -q "HIP headers: $fake/include" "$work/with.log" || fail "configure does not say which headers"
grep -q "hipcc builds none of" "$work/with.log" || fail "configure does not say hipcc built nothing"
echo "with a ROCm tree at PDX_ROCM_PATH: headers $inc, hipcc $hipcc"

configure "$work/none" "$work/without"
inc=$(cached "$work/without" PDX_HIP_INCLUDE_DIR)
[ "$inc" = "$system_inc" ] || fail "without a ROCm tree, HIP headers from '$inc', not $system_inc"
echo "without one: headers $inc"
