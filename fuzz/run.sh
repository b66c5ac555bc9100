#!/usr/bin/env bash
# Builds every fuzz target and runs each for a fixed budget; fails on the first crash
# (libFuzzer leaves the input under fuzz/artifacts/<target>/). Prints, per target, the
# executions run and the corpus size, for fuzz/README.md.
#
#   fuzz/run.sh [SECONDS_PER_TARGET]   (default 50: six targets stay under 6 minutes)
#
# cargo-fuzz needs nightly flags (-Zsanitizer); RUSTC_BOOTSTRAP=1 lets the stable
# toolchain accept them.
set -euo pipefail
cd "$(dirname "$0")/.."
budget="${1:-50}"
export RUSTC_BOOTSTRAP=1
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
targets=$(cargo fuzz list)
cargo fuzz build
status=0
for target in $targets; do
  mkdir -p "fuzz/corpus/$target"
  seeds=()
  [ -d "fuzz/seeds/$target" ] && seeds=("fuzz/seeds/$target")
  log="fuzz/target/fuzz-$target.log"
  mkdir -p fuzz/target
  if cargo fuzz run "$target" "fuzz/corpus/$target" "${seeds[@]}" -- \
      -max_total_time="$budget" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    files=$(find "fuzz/corpus/$target" -type f | wc -l)
    echo "fuzz $target: ${runs:-?} executions in ${budget} s, corpus ${files} inputs"
  else
    echo "fuzz $target: CRASH (see $log and fuzz/artifacts/$target/)"
    tail -40 "$log"
    status=1
  fi
done
exit $status
