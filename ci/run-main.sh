#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, build the release preset, verify
# every built-in implementation on the default case set against the reference (a table,
# results/verify.json), then benchmark them (a table, the fitted exponents,
# results/bench.json). Both run even if the first fails. Exit code: 0 every case passed and
# every benchmark ran, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh || exit 2
cmake --preset release >/dev/null || exit 2
cmake --build --preset release || exit 2
./build/release/cli/attnbench verify --cases default --json results/verify.json
verify_rc=$?
./build/release/cli/attnbench bench --json results/bench.json
bench_rc=$?
echo "main job: verify exit $verify_rc, bench exit $bench_rc (results/verify.json, results/bench.json)"
[ "$verify_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]
