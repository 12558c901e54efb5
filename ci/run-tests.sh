#!/usr/bin/env bash
# The tests on a fresh machine: install what is missing; build and run every test under
# AddressSanitizer + UndefinedBehaviorSanitizer (asan preset); then build the ci preset
# (optimised, warnings are errors) and run every CTest test. The last line is CTest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh
# report_chromium renders the HTML report in Debian's chromium (about 75 s to install, measured
# on this machine); where it cannot be installed the test is reported as skipped, not passed.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo="sudo"
  echo "== installing chromium (the HTML report's rendering test)"
  if ! { DEBIAN_FRONTEND=noninteractive $sudo apt-get update -qq &&
         DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null; }; then
    echo "chromium could not be installed: report_chromium will be skipped"
  fi
fi
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
