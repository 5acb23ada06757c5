#!/usr/bin/env bash
# pack_out.sh DIR NAME: packs the folder DIR into $OUT/NAME.tar.xz, split into parts of 15 MiB
# (NAME.tar.xz.00, .01, ...) when larger: what comes back from the GPU machine is at most 8 files
# of 16 MiB each (/work/.library/device/README.md). Unpack with: cat NAME.tar.xz.* | tar -xJ
set -eu
dir=$1 name=$2
: "${OUT:?OUT is not set}"
tar -C "$dir" -cJf "$OUT/$name.tar.xz" .
size=$(stat -c %s "$OUT/$name.tar.xz")
if [ "$size" -gt $((15 << 20)) ]; then
  split -b 15M -d "$OUT/$name.tar.xz" "$OUT/$name.tar.xz."
  rm "$OUT/$name.tar.xz"
fi
ls -la "$OUT"
