#!/usr/bin/env bash
# The main job: set up, build, then move KV pages of DeepSeek-R1 geometry
# (61 layers, 576 B per token per layer fp8, page size 64, random page maps,
# about 1 GiB of KV pool per side) from a prefill side to a decode side over
# the tcp transport on loopback, and verify every byte on the decode side.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh
cmake --preset default >/dev/null
cmake --build --preset default --target pdx-loopback >/dev/null
exec build/default/tools/pdx-loopback -L 61 -b 576 -P 64 -p 64 -n 16 -m 1024 "$@"
