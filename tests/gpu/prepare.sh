#!/usr/bin/env bash
# prepare.sh: on the development machine, before a GPU run: builds what tests/gpu/run.sh needs
# into build/ and copies beside libmemsnap.so the shared libraries the GPU machine lacks
# (libunwind, cJSON, SQLite; the library's rpath $ORIGIN finds them). Then carry build/.
set -eu
cd "$(dirname "$0")/../.."
make --no-print-directory gpu-bench >/dev/null
make --no-print-directory test-programs >/dev/null  # build/tests/run_cudart, librun_steps.so (dynamic libcudart)
for lib in libunwind.so.8 libcjson.so.1 libsqlite3.so.0 liblzma.so.5 libz.so.1; do
  src=$(ldd build/libmemsnap.so build/memsnap | awk -v l="$lib" '$1 == l {print $3; exit}')
  if [ -n "$src" ] && ! [ "$src" -ef "build/$lib" ]; then cp -L "$src" build/; fi
done
# run_cudart's libcudart.so, for a GPU machine whose toolkit has no lib64 (run_modes.py puts
# build/ on LD_LIBRARY_PATH for it)
cudart=$(ldd build/tests/run_cudart 2>/dev/null | awk '$1 ~ /^libcudart\.so/ {print $3; exit}')
if [ -n "$cudart" ] && ! [ "$cudart" -ef "build/$(basename "$cudart")" ]; then cp -L "$cudart" build/; fi
ls build/*.so* | tr '\n' ' '
echo
