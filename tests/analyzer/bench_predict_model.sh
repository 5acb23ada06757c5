#!/usr/bin/env bash
# bench_predict_model.sh BUILD_DIR [STEPS]: `memsnap predict --checkpoint`'s speed on two runs of
# about a million events each: tests/analyzer/gen_model.py's program (12 blocks, Python stacks)
# written at batch 4 and 8 for STEPS steps (default 1800: 1,010,244 events each). Times (wall,
# CPU, peak memory; best of 3) the checkpointed prediction at batch 16 from both runs, with its
# page (--html) too, the same from the run at 8 alone at its own size, and --optimizer sgd. Figures go to docs/BENCHMARKS.md
# ("Predict: the program changed").
set -eu
build=${1:-build}
steps=${2:-1800}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
here=$(cd "$(dirname "$0")" && pwd)
for n in 4 8; do python3 "$here/gen_model.py" "$dir/b$n.db" --batch "$n" --steps "$steps" --layers 12; done
cli=$build/memsnap
python3 "$here/bench_time.py" \
  "memsnap predict b4.db=4 b8.db=8 --checkpoint Block --at 16" -- "$cli" predict "$dir/b4.db=4" "$dir/b8.db=8" --checkpoint Block --at 16 --- \
  "the same with --html (its page)" -- "$cli" predict "$dir/b4.db=4" "$dir/b8.db=8" --checkpoint Block --at 16 --html "$dir/page.html" --- \
  "memsnap predict b8.db=8 --checkpoint Block" -- "$cli" predict "$dir/b8.db=8" --checkpoint Block --- \
  "memsnap predict b8.db=8 --optimizer sgd" -- "$cli" predict "$dir/b8.db=8" --optimizer sgd
