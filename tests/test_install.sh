#!/usr/bin/env bash
# test_install.sh BUILD_DIR: make install into a temporary prefix (docs/c-api.md's C example built
# with pkg-config against it and run on the simulated device; the installed tool runs with no
# variable set), pip install --target into a temporary directory (import memsnap from elsewhere,
# with no MEMSNAP_LIB and nothing of the source tree on the path), make uninstall leaving nothing.
# In a sanitizer build (make sanitize) the same sanitizer flags link and build everything.
set -u
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
passed=0
failed=0
# resolved TOOL: the file the loader resolves TOOL's libmemsnap to.
resolved() { readlink -f "$(env -u LD_LIBRARY_PATH ldd "$1" | awk '/libmemsnap/ {print $3}')"; }
check() { if eval "$2"; then passed=$((passed + 1)); echo "ok   $1"; else failed=$((failed + 1)); echo "FAIL $1"; fi; }

flags=""
if nm -D "$build/libmemsnap.so" | grep -q __asan_init; then flags="-fsanitize=address,undefined"; fi
prefix=$dir/prefix
make --no-print-directory -C "$root" BUILD="$build" EXTRA_LDFLAGS="$flags" install PREFIX="$prefix" >"$dir/install.log" 2>&1
check "make install: exits 0" "[ $? -eq 0 ] || { cat $dir/install.log; false; }"
version=$(sed -n 's/^#define MEMSNAP_VERSION "\(.*\)"/\1/p' "$root/recorder/memsnap.h")
check "make install: the library with its version, soname link and development link" \
  "[ -f $prefix/lib/libmemsnap.so.$version ] && [ \"\$(readlink $prefix/lib/libmemsnap.so.0)\" = libmemsnap.so.$version ] && [ \"\$(readlink $prefix/lib/libmemsnap.so)\" = libmemsnap.so.0 ] && readelf -d $prefix/lib/libmemsnap.so.$version | grep -q 'SONAME.*\[libmemsnap.so.0\]'"
check "make install: header, pkg-config file, tool, man page, docs" \
  "[ -f $prefix/include/memsnap.h ] && [ -f $prefix/lib/pkgconfig/memsnap.pc ] && [ -x $prefix/bin/memsnap ] && [ -f $prefix/share/man/man1/memsnap.1 ] && [ -f $prefix/share/doc/memsnap/README.md ] && [ -f $prefix/share/doc/memsnap/docs/snapshot-format.md ] && [ -f $prefix/share/doc/memsnap/docs/page.png ]"
check "man page: made from the tool's help (every command has a section)" \
  "grep -q '^.SS analyze' $prefix/share/man/man1/memsnap.1 && grep -q '^.SS import' $prefix/share/man/man1/memsnap.1 && grep -q 'MEMSNAP_INVALID_FREE' $prefix/share/man/man1/memsnap.1 && { ! command -v man >/dev/null || man -l $prefix/share/man/man1/memsnap.1 2>/dev/null | grep -q 'SYNOPSIS'; }"

# The C example of docs/c-api.md, as the document writes it, built with pkg-config against the prefix.
awk '/^## Using it from C or CUDA/ {s = 1} s && /^```c$/ {c = 1; next} c && /^```$/ {exit} c' "$root/docs/c-api.md" >"$dir/app.c"
check "docs/c-api.md: has a C example" "grep -q 'memsnap_malloc' $dir/app.c"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
check "pkg-config: names the installed include and library directories" \
  "[ \"\$(echo \$(pkg-config --cflags memsnap))\" = '-I$prefix/include' ] && pkg-config --libs memsnap | grep -q -- '-L$prefix/lib -lmemsnap' && [ \"\$(pkg-config --modversion memsnap)\" = $version ]"
cc $flags -o "$dir/app" "$dir/app.c" $(pkg-config --cflags --libs memsnap) -Wl,-rpath,"$(pkg-config --variable=libdir memsnap)" 2>"$dir/cc.log"
check "docs/c-api.md's C example builds with pkg-config --cflags --libs memsnap" "[ $? -eq 0 ] || { cat $dir/cc.log; false; }"
check "docs/c-api.md's C example runs on the simulated device against the installed library" \
  "[ \"\$(env -u LD_LIBRARY_PATH MEMSNAP_BACKEND=sim $dir/app)\" = 'allocated 0, reserved 67108864 bytes' ] && [ \"\$(resolved $dir/app)\" = $prefix/lib/libmemsnap.so.$version ]"
check "the installed tool finds the installed library with no variable set" \
  "[ \"\$(resolved $prefix/bin/memsnap)\" = $prefix/lib/libmemsnap.so.$version ] && env -u LD_LIBRARY_PATH $prefix/bin/memsnap version | grep -q '$version'"
"$build/tests/gen_snapshots" "$dir" >/dev/null 2>&1
(cd / && env -u LD_LIBRARY_PATH "$prefix/bin/memsnap" analyze --html "$dir/leak.html" "$dir/leak.db" >/dev/null 2>&1)
check "the installed tool writes the page from anywhere (its assets are inside it)" \
  "grep -q 'memsnap-data' $dir/leak.html && grep -q 'keep_history' $dir/leak.html"
cp -a "$prefix" "$dir/moved"
check "the tree still works moved elsewhere (the tool's run path is relative)" \
  "env -u LD_LIBRARY_PATH $dir/moved/bin/memsnap version | grep -q '$version' && [ \"\$(resolved $dir/moved/bin/memsnap)\" = $dir/moved/lib/libmemsnap.so.$version ]"
rm -rf "$dir/moved"
staged=$dir/staged
make --no-print-directory -C "$root" BUILD="$build" EXTRA_LDFLAGS="$flags" install PREFIX=/opt/memsnap DESTDIR="$staged" >"$dir/stage.log" 2>&1
check "DESTDIR stages the tree under it; memsnap.pc names the final prefix" \
  "[ -x $staged/opt/memsnap/bin/memsnap ] && grep -qx 'prefix=/opt/memsnap' $staged/opt/memsnap/lib/pkgconfig/memsnap.pc"
make --no-print-directory -C "$root" BUILD="$build" uninstall PREFIX=/opt/memsnap DESTDIR="$staged" >/dev/null 2>&1
make --no-print-directory -C "$root" BUILD="$build" uninstall PREFIX="$prefix" >"$dir/uninstall.log" 2>&1
check "make uninstall: exits 0" "[ $? -eq 0 ] || { cat $dir/uninstall.log; false; }"
check "make uninstall: leaves no file or link" "[ -z \"\$(find $prefix $staged ! -type d)\" ] || { find $prefix $staged ! -type d; false; }"

# pip install --target: the package with the library and the tool inside it, imported from
# elsewhere with nothing of the source tree on the path. --no-index: no download at all (the
# build backend needs only the standard library, so pip's build isolation installs nothing).
site=$dir/site
MEMSNAP_BUILD_DIR="$build" python3 -m pip install --quiet --no-index --no-cache-dir --target "$site" "$root" >"$dir/pip.log" 2>&1
check "pip install --no-index --target: builds and installs with no download" "[ $? -eq 0 ] || { cat $dir/pip.log; false; }"
check "pip install: the package holds the library and the tool" "[ -f $site/memsnap/libmemsnap.so ] && [ -x $site/memsnap/memsnap-cli ] && [ -x $site/bin/memsnap ]"
out=$(cd "$dir" && env -u MEMSNAP_LIB -u LD_LIBRARY_PATH ${PY_PRELOAD:+LD_PRELOAD="$PY_PRELOAD" ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"} PYTHONPATH="$site" MEMSNAP_BACKEND=sim \
  python3 -c "import memsnap, os, sys
assert not any(p.startswith('$root') for p in sys.path), sys.path
p = memsnap.malloc(1 << 20); memsnap.free(p)
print(os.path.dirname(memsnap.__file__), memsnap.library_path(), memsnap.memory_stats()['num_device_alloc'], memsnap.__version__)" 2>&1)
check "pip install: import memsnap from elsewhere loads the library inside the package, no MEMSNAP_LIB" \
  "[ \"$out\" = '$site/memsnap $site/memsnap/libmemsnap.so 1 $version' ] || { echo \"$out\"; false; }"
check "pip install: the memsnap script runs the tool inside the package" \
  "env -u LD_LIBRARY_PATH PYTHONPATH=$site $site/bin/memsnap version | grep -q '$version'"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
