#!/usr/bin/env bash
# The tests on a fresh machine: install what is missing; build and run every test under
# AddressSanitizer + UndefinedBehaviorSanitizer (asan preset); then build the ci preset
# (optimised, warnings are errors) and run every CTest test. Between the two, libFuzzer runs on
# the .npy reader and the repro-string parser, 30 s side by side (ci/run-fuzz.sh). The last line
# is CTest's summary. CTest runs one test per core side by side (tests whose timing matters are
# RUN_SERIAL in tests/CMakeLists.txt): most tests use one core, and CI's time budget is tight.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
# pip-installs into the git-ignored .venv/, creating it first where there is none.
venv_install() { { [ -x .venv/bin/pip ] || python3 -m venv .venv; } && .venv/bin/pip install -q "$@"; }
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
# cuda_fused_sass disassembles the fused kernels (no GPU needed) with cuobjdump, which this
# machine's toolkit lacks: PyPI's nvidia-cuda-cuobjdump and -nvdisasm (about 6 MB) go into the
# git-ignored .venv/. Where they cannot be installed the test is reported as skipped.
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  if ! ls .venv/lib/python3*/site-packages/nvidia/cu*/bin/cuobjdump >/dev/null 2>&1; then
    echo "== installing cuobjdump and nvdisasm from PyPI into .venv (the SASS check of cuda_fused)"
    if ! venv_install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm; then
      echo "cuobjdump could not be installed: cuda_fused_sass will be skipped"
    fi
  fi
fi
# sdpa_roundtrip_numpy runs the PyTorch example's NumPy path through the file route, and
# sdpa_roundtrip_fallback its fallback to NumPy where `import torch` fails: NumPy goes into the
# same .venv (configure picks .venv/bin/python). Where it cannot be installed both are reported
# as skipped.
if ! { [ -x .venv/bin/python ] && .venv/bin/python -c "import numpy" 2>/dev/null; }; then
  echo "== installing numpy from PyPI into .venv (the file route's NumPy round trip)"
  if ! venv_install numpy; then
    echo "numpy could not be installed: sdpa_roundtrip_numpy and sdpa_roundtrip_fallback will be skipped"
  fi
fi
echo "== asan: build and test under AddressSanitizer + UBSan"
cmake --preset asan >/dev/null
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
cmake --preset ci >/dev/null
cmake --build --preset ci
ctest --preset ci --parallel "$jobs"
