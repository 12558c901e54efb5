#!/usr/bin/env bash
# The main job on a fresh machine: install what is missing, build the release preset, and
# verify every built-in implementation on the default case set against the reference.
# Prints a table; writes results/verify.json. Exit code: 0 all pass, 1 a case failed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release
exec ./build/release/cli/attnbench verify --cases default --json results/verify.json
