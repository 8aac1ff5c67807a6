#!/usr/bin/env bash
# Installs every Debian 12 package pdx's build and tests need. Idempotent:
# does nothing when all are present. Run as root (or with sudo available).
set -euo pipefail

packages=(
  gcc libc6-dev make cmake ninja-build pkg-config   # toolchain
  libcriterion-dev                                  # unit tests
  clang libclang-rt-14-dev                          # the libFuzzer targets (tools/fuzz.sh)
  python3                                           # the Python binding and its tests
  libibverbs-dev                                    # the rdma transport (and softnic)
  libsodium-dev                                     # PDX_AUTH_KEY: MACs and sealing
  libhwloc-dev                                      # runtime/topo_hwloc.c: GPU, NIC and CPU placement
  libamdhip64-dev                                   # hip/ on amd: HIP headers, libamdhip64
  iproute2 procps                                   # tests and demo helpers
  valgrind                                          # tools/memcheck.sh
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup.sh: need root to install: ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
echo "setup.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
