#!/usr/bin/env bash
# The tests on a fresh machine: install what is missing; build and run every test under
# AddressSanitizer + UndefinedBehaviorSanitizer (asan preset); then build the ci preset
# (optimised, warnings are errors) and run every CTest test. Between the two, libFuzzer runs on
# the .npy reader and the repro-string parser, 30 s side by side (ci/run-fuzz.sh). Then the Python
# package's pytest suite; its closing line ends the output. CTest runs one test per core side by side (tests whose timing matters are
# RUN_SERIAL in tests/CMakeLists.txt): most tests use one core, and CI's time budget is tight.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
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
# The tests' Python dependencies (python/requirements-test.txt: PyTorch, JAX, NumPy, ONNX Runtime,
# nanobind, pytest, and PyPI's cuobjdump and nvdisasm for cuda_fused_sass) in a venv outside the
# checkout, made once and reused by later runs and clones (ci/python-env.sh; measured: 0.1 s when
# it is there, 140 s and about 6 GB of downloads the first time). Its python runs every Python part
# of the tests (-DATTN_PYTHON below): the file route's PyTorch and NumPy round trips, the peers, the
# examples. Where it cannot be made, python3 stands in and the tests needing what it lacks are
# reported as skipped.
echo "== python: the tests' venv (ci/python-env.sh)"
if pyenv=$(bash ci/python-env.sh | tail -n 1) && [ -x "$pyenv/bin/python" ]; then
  attn_python=$pyenv/bin/python
else
  attn_python=$(command -v python3 || echo python3)
  echo "the tests' venv could not be made: $attn_python runs the Python parts; tests needing what it lacks will be skipped"
fi
echo "python for the tests: $attn_python"
echo "== asan: build and test under AddressSanitizer + UBSan"
cmake --preset asan -DATTN_PYTHON="$attn_python" >/dev/null
cmake --build --preset asan
if ! ctest --preset asan --parallel "$jobs" >build/asan/ctest.log 2>&1; then
  cat build/asan/ctest.log
  echo "asan: tests failed (log above)"
  exit 1
fi
grep -E 'tests passed|Total Test time' build/asan/ctest.log
echo "== fuzz: libFuzzer on the .npy reader and the repro-string parser, 30 s side by side (ci/run-fuzz.sh)"
bash ci/run-fuzz.sh
echo "== ci: build (warnings are errors) and test"
cmake --preset ci -DATTN_PYTHON="$attn_python" >/dev/null
cmake --build --preset ci
ctest --preset ci --parallel "$jobs"
# The Python package (python/): its pytest suite on the ci build's native module (build/ci/python),
# spread over the cores by pytest-xdist. Its closing line ends the output. Where the venv could not
# be made (no nanobind, so no module was built), that is said and the suite is not run.
echo "== python: the attnbench package's pytest suite (python/tests)"
if [ -d build/ci/python/attnbench ] && ls build/ci/python/attnbench/_native*.so >/dev/null 2>&1; then
  PYTHONPATH=build/ci/python ATTNBENCH_CLI=build/ci/cli/attnbench \
    "$attn_python" -m pytest python/tests -p no:cacheprovider -n "$jobs" -q -rs --durations=8
else
  echo "the package's module was not built (nanobind missing from $attn_python): its pytest suite did not run"
  exit 1
fi
