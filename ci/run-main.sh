#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, build the release preset, verify
# every built-in implementation on the default case set against the reference, the forward pass
# (a table, results/verify.json) and the backward pass where an implementation has one (dQ, dK,
# dV; results/verify-backward.json), then benchmark both passes (a table, the fitted exponents,
# results/bench.json), then write the report of all three (results/report/report.md and
# results/report/report.html) and print its paths. Every step runs even if an earlier one
# fails. Exit code: 0 every case passed, every benchmark ran and the report was written, 1
# otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh || exit 2
cmake --preset release >/dev/null || exit 2
cmake --build --preset release || exit 2
./build/release/cli/attnbench verify --cases default --json results/verify.json
verify_rc=$?
./build/release/cli/attnbench verify --backward --cases default --json results/verify-backward.json
[ $? -eq 0 ] || verify_rc=1
./build/release/cli/attnbench bench --pass forward,backward --json results/bench.json
bench_rc=$?
inputs=()
for f in results/verify.json results/verify-backward.json results/bench.json; do [ -s "$f" ] && inputs+=("$f"); done
report_rc=1
if [ ${#inputs[@]} -gt 0 ]; then
  ./build/release/cli/attnbench report "${inputs[@]}" --out results/report
  report_rc=$?
fi
echo "main job: verify exit $verify_rc, bench exit $bench_rc, report exit $report_rc (results/verify.json, results/verify-backward.json, results/bench.json)"
if [ "$report_rc" -eq 0 ]; then
  echo "report (HTML):     $PWD/results/report/report.html"
  echo "report (Markdown): $PWD/results/report/report.md"
fi
[ "$verify_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ] && [ "$report_rc" -eq 0 ]
