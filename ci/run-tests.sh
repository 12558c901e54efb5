#!/usr/bin/env bash
# The tests on a fresh machine: install what is missing; build and run every test under
# AddressSanitizer + UndefinedBehaviorSanitizer (asan preset); then build the ci preset
# (optimised, warnings are errors) and run every CTest test. The last line is CTest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh
echo "== asan: build and test under AddressSanitizer + UBSan"
cmake --preset asan >/dev/null
cmake --build --preset asan
if ! ctest --preset asan >build/asan/ctest.log 2>&1; then
  cat build/asan/ctest.log
  echo "asan: tests failed (log above)"
  exit 1
fi
grep -E 'tests passed|Total Test time' build/asan/ctest.log
echo "== ci: build (warnings are errors) and test"
cmake --preset ci >/dev/null
cmake --build --preset ci
ctest --preset ci
