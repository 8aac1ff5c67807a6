#!/usr/bin/env bash
# Layer boundaries: with the include path a layer is built with, a file of
# that layer can include base/ and the public header, and an #include of a
# runtime internal does not compile.
# Usage: tests/boundary.sh CC LAYER "INCLUDE_DIRS" (a ;-separated list)
set -euo pipefail
cc=$1 layer=$2
IFS=';' read -r -a dirs <<<"$3"
flags=()
for d in "${dirs[@]}"; do [ -n "$d" ] && flags+=(-I "$d"); done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
try() { # name, source: 0 when it compiles
  printf '%s\n' "$2" >"$work/$1.c"
  "$cc" -std=c11 -D_GNU_SOURCE -fsyntax-only "${flags[@]}" "$work/$1.c" 2>"$work/$1.err"
}
try allowed '#include "transport.h"
#include "log.h"
#include <pdx/pdx.h>
int main(void) { return PDX_OK; }' || { echo "$layer: its own allowed includes fail:"; cat "$work/allowed.err"; exit 1; }
bad=0
for internal in engine.h room.h shard.h ctrl.h wire.h plan.h runtime/engine.h; do
  name=inc_${internal//\//_}
  # Not found is what must happen; found (compiling or not) is a breach.
  if try "$name" "#include \"$internal\"
int main(void) { return 0; }" || ! grep -q "$internal: No such file" "$work/$name.err"; then
    echo "$layer: #include \"$internal\" finds the header: the boundary is open"
    bad=1
  fi
done
[ $bad -eq 0 ] && echo "$layer: runtime internals cannot be included (7 tried)"
exit $bad
