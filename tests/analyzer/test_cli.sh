#!/usr/bin/env bash
# test_cli.sh BUILD_DIR: the memsnap command-line tool: usage, exit codes, the options table,
# and that the documents (README.md, docs/) document every command and option: docs/options.md
# every option the library has.
set -u
build=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
cli=$build/memsnap
passed=0
failed=0
check() { # check NAME CMD...
  local name=$1
  shift
  if "$@" >/dev/null 2>&1; then passed=$((passed + 1)); echo "ok   $name"; else failed=$((failed + 1)); echo "FAIL $name"; fi
}
check "cli: no command is a usage error (exit 2)" bash -c "'$cli'; test \$? -eq 2"
check "cli: unknown command names itself, exit 2" bash -c "'$cli' frobnicate 2>&1 | grep -q \"error: unknown command 'frobnicate'\"; '$cli' frobnicate; test \$? -eq 2"
check "cli: help lists commands" bash -c "'$cli' help | grep -q 'memsnap options'"
# memsnap help: the commands grouped by what a user wants, one line each within 80 columns, every
# command of the table listed once; the full forms under memsnap help COMMAND.
"$cli" help >"$build/helpall.out"
check "cli: help groups the commands: record, understand, predict, convert, watch" bash -c "for g in record understand predict convert watch; do grep -q \"^\$g\" '$build/helpall.out' || exit 1; done"
check "cli: help: run under record, analyze diff info under understand, replay predict under predict, import export under convert, top dump recover under watch" \
  bash -c "awk '/^[a-z]/ {g = \$1} /^  memsnap / {print g, \$2}' '$build/helpall.out' | tr -d : | tr '\n' ' ' |
    grep -qx 'record run understand analyze understand diff understand info predict replay predict predict convert import convert export watch top watch dump watch recover more options more help more version '"
check "cli: help: one line a command, none wider than 80 columns" bash -c "! awk 'length > 80' '$build/helpall.out' | grep -q . &&
  [ \$(grep -c '^  memsnap [a-z]' '$build/helpall.out') -eq \$(grep -oE '^  memsnap [a-z]+' '$build/helpall.out' | sort -u | wc -l) ]"
check "cli: help says where the full forms are" grep -q "memsnap help COMMAND' shows a command's full form" "$build/helpall.out"
rm -f "$build/helpall.out"
# memsnap help COMMAND (and memsnap COMMAND --help) for every command of the list.
for cmd in $("$cli" help | grep -oE '^  memsnap [a-z]+' | awk '{print $2}'); do
  check "cli: memsnap help $cmd" bash -c "'$cli' help $cmd >'$build/help.out' && head -1 '$build/help.out' | grep -q '^usage: memsnap $cmd' &&
    '$cli' $cmd --help | cmp -s - '$build/help.out'"
done
check "cli: help analyze and diff name their options and the frames they fold" \
  bash -c "for c in analyze diff; do '$cli' help \$c | grep -q -- '--fold PATTERNS .*globs' && '$cli' help \$c | grep -q 'CUDAPluggableAllocator' || exit 1; done"
rm -f "$build/help.out"
check "cli: version" bash -c "'$cli' version | grep -Eq '^memsnap [0-9]+\.[0-9]+\.[0-9]+$'"
check "cli: options lists MEMSNAP_BACKEND" bash -c "'$cli' options | grep -q '^MEMSNAP_BACKEND '"
missing=$("$cli" options | awk '{print $1}' | while read -r var; do grep -q "\`$var\`" "$root/docs/options.md" || echo "$var"; done)
check "docs/options.md documents every option (missing: ${missing:-none})" test -z "$missing"
# ... with the library's default (`memsnap options` prints NAME, DEFAULT and the comment in
# columns of 40 and 10): docs/options.md's row reads | `VAR` | `DEFAULT` | or | `VAR` | (none) |.
wrong=$("$cli" options | awk '{ d = substr($0, 42, 10); gsub(/ /, "", d); print $1, d }' | while read -r var def; do
  want="\`$def\`"
  [ -n "$def" ] || want="(none)"
  grep -qF "| \`$var\` | $want |" "$root/docs/options.md" || echo "$var"
done)
check "docs/options.md's table has the library's defaults (wrong: ${wrong:-none})" test -z "$wrong"
# Every command of `memsnap help`, and every option its full form (`memsnap help COMMAND`'s usage)
# names, appears in the documents: README.md or docs/.
undocumented=$(for cmd in $("$cli" help | grep -oE '^  memsnap [a-z]+' | awk '{print $2}'); do
    echo "memsnap $cmd"
    "$cli" help "$cmd" | sed -n '1,/^$/p' | grep -oE '(^| |\[)--?[a-z][a-z-]*' | sed -E 's/^[ [](-)/\1/'
  done | sort -u | while read -r word; do cat "$root/README.md" "$root"/docs/*.md | grep -qF -- "$word" || echo "$word"; done | tr '\n' ' ')
check "the documents name every command and its options (missing: ${undocumented:-none})" test -z "$undocumented"
# Every bad argument of every command: exit 2, an error naming the problem, then the usage line.
usage_error() { # usage_error PATTERN ARGS...: exit 2, "error: ..." matching PATTERN, "usage: ..."
  local pattern=$1
  shift
  "$cli" "$@" >/dev/null 2>"$build/cli.err"
  local rc=$?
  check "usage: memsnap $* (exit 2, '$pattern')" \
    bash -c "[ $rc -eq 2 ] && grep -q -- \"$pattern\" '$build/cli.err' && grep -q '^usage: memsnap' '$build/cli.err'"
}
usage_error "no snapshot given" analyze
usage_error "unknown option '--bogus'" analyze --bogus x.db
for opt in --html --frames --iterations; do usage_error "option '$opt' needs a value" analyze x.db "$opt"; done
usage_error "frames takes 1 to 4096" analyze --frames 0 x.db
usage_error "choose one" analyze --json --html out.html x.db
usage_error "two snapshots" diff a.db
usage_error "unknown option '--bogus'" diff --bogus a.db b.db
for opt in --fold --frames; do usage_error "option '$opt' needs a value" diff a.db b.db "$opt"; done
usage_error "frames takes 1 to 4096" diff --frames 0 a.db b.db
usage_error "option '--fold' needs a value" analyze x.db --fold
usage_error "at most 16 --fold options" analyze $(for i in $(seq 17); do printf -- '--fold x '; done) x.db
usage_error "no snapshot given" info
usage_error "unknown option '-x'" info -x a.db
usage_error "no PyTorch snapshot given" import
usage_error "no output given" import x.pickle
usage_error "option '-o' needs a value" import x.pickle -o
usage_error "no snapshot given" export
usage_error "no output given" export x.db
usage_error "option '--format' needs a value" export x.db --format
usage_error "the only format is 'pytorch'" export --format json x.db -o y.pickle
for cmd in options version; do usage_error "no arguments expected" "$cmd" extra; done
usage_error "unknown command 'extra'" help extra
usage_error "one command at most" help analyze diff
rm -f "$build/cli.err"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
