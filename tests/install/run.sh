#!/usr/bin/env bash
# Install pdx from a build tree into a scratch prefix, then build a consumer
# through the CMake package and through pkg-config, run both, and check that
# libpdx.so exports the public API and nothing else.
set -euo pipefail
build=$1
src=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmake --install "$build" --prefix "$work/prefix" >/dev/null
lib=$(find "$work/prefix" -name 'libpdx.so' | head -1)
libdir=$(dirname "$lib")

# the CMake package
mkdir -p "$work/cmake"
cp "$src/consumer.c" "$work/cmake/"
cp "$src/CMakeLists.txt.in" "$work/cmake/CMakeLists.txt"
cmake -S "$work/cmake" -B "$work/cmake/build" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/cmake/build" >/dev/null
LD_LIBRARY_PATH=$libdir "$work/cmake/build/consumer"

# pkg-config
flags=$(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --define-prefix --cflags --libs pdx)
cc -std=c11 -Wall -Werror "$src/consumer.c" $flags -o "$work/consumer-pc"
LD_LIBRARY_PATH=$libdir "$work/consumer-pc"

# the Python package, found beside the library it loads (no PDX_LIBRARY)
if [ -x /usr/bin/python3 ]; then
  env -u PDX_LIBRARY PYTHONPATH="$work/prefix/lib/python3/dist-packages" /usr/bin/python3 -c '
import pdx
e = pdx.Engine(listen="127.0.0.1:0", transport="tcp")
assert e.address.startswith("127.0.0.1:"), e.address
e.close()
print("python: pdx", pdx.version())'
fi

# hidden visibility: every exported function is pdx_* and declared in pdx.h
header="$work/prefix/include/pdx/pdx.h"
bad=0
for sym in $(nm -D --defined-only "$lib" | awk '$2 == "T" { print $3 }'); do
  if [[ $sym != pdx_* ]] || ! grep -q "\b$sym(" "$header"; then
    echo "exported but not public API: $sym"
    bad=1
  fi
done
nm -D --defined-only "$lib" | grep -q ' pdx_status_str$' || { echo "pdx_status_str not exported"; bad=1; }
exit $bad
