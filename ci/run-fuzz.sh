#!/usr/bin/env bash
# libFuzzer on the .npy reader and the repro-string parser (fuzz preset: clang-14, ASan + UBSan;
# targets in tests/fuzz): each target for FUZZ_SECONDS (default 30) from its committed seed corpus,
# copied to a temporary directory so the repository stays clean. Fails when libFuzzer reports a
# crash, a sanitizer error, a leak, a timeout (a unit over 10 s) or running out of memory; the
# input that did it is kept in build/fuzz/artifacts/ (reproduce: build/fuzz/tests/fuzz/TARGET FILE).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-30}
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p build/fuzz/artifacts
# The targets run side by side (one core each): CI's time budget is tight.
fuzz_one() {
  local target=$1 corpus=$work/$1
  mkdir -p "$corpus"
  cp tests/fuzz/corpus/"${target%_fuzz}"/* "$corpus"/
  build/fuzz/tests/fuzz/"$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$PWD/build/fuzz/artifacts/$target-" "$corpus" >"$work/$target.log" 2>&1
}
targets=(npy_fuzz problem_fuzz)
echo "== fuzz: ${targets[*]} for $seconds s, side by side"
pids=()
for target in "${targets[@]}"; do
  fuzz_one "$target" &
  pids+=($!)
done
status=0
for i in "${!targets[@]}"; do
  target=${targets[$i]}
  if wait "${pids[$i]}"; then
    echo "-- $target"
    grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)' "$work/$target.log" || tail -n 3 "$work/$target.log"
  else
    tail -n 60 "$work/$target.log"
    echo "fuzz: $target found a failure (input kept in build/fuzz/artifacts/)"
    status=1
  fi
done
exit $status
