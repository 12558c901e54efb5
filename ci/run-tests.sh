#!/usr/bin/env bash
# The tests on a fresh machine: install what is missing, build the ci preset (warnings are
# errors), then run every CTest test. The last line is CTest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh
cmake --preset ci >/dev/null
cmake --build --preset ci
ctest --preset ci
