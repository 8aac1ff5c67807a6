#!/usr/bin/env bash
# The main job: set up, build, then pdx-bench --loopback: a decode process and
# a prefill process on this host move KV pages of DeepSeek-R1 geometry
# (61 layers, 576 B per token per layer fp8, page size 64, random page maps,
# about 1 GiB of KV pool per side) over the tcp transport, and the decode side
# checks every byte of every page of every layer.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh
cmake --preset default >/dev/null
cmake --build --preset default --target pdx-bench >/dev/null
exec build/default/tools/pdx-bench --loopback --layers 61 --bytes-per-token 576 --page-size 64 \
    --pages 64 --requests 64 --concurrency 7 --pool-mib 1024 "$@"
