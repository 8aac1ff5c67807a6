#!/usr/bin/env bash
# softnic must define every verbs symbol the rdma objects use: a symbol it
# lacks would link against nothing in the tests (or be missed silently).
# usage: symbols.sh libsoftnic.a rdma-object...
set -euo pipefail
lib=$1; shift
used=$(nm -u "$@" | awk '{print $NF}' | grep -E '^_?_?ibv_' | sort -u)
defined=$(nm --defined-only "$lib" | awk '$2 == "T" || $2 == "W" {print $3}' | sort -u)
[ -n "$used" ] || { echo "symbols.sh: the rdma objects use no verbs symbol: wrong objects?" >&2; exit 1; }
missing=$(comm -23 <(echo "$used") <(echo "$defined"))
echo "verbs symbols used by rdma/: $(echo "$used" | wc -l)"
if [ -n "$missing" ]; then
  echo "softnic lacks:" >&2
  echo "$missing" >&2
  exit 1
fi
