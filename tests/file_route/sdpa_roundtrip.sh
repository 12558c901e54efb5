#!/usr/bin/env bash
# examples/file_route/sdpa_roundtrip.py through the file route: `attnbench cases` -> the script ->
# `attnbench check` passes, and NumPy reads every file attnbench wrote. BACKEND torch runs PyTorch's
# scaled_dot_product_attention; numpy runs the script's float64 NumPy path (its loading, masking,
# GQA and writing code). BACKEND fallback runs the script with no --backend where `import torch`
# fails (a torch.py that raises ImportError shadows any installed PyTorch): it must fall back to
# NumPy and say so and why, refuse an explicit --backend torch, and round-trip with the
# declaration it writes (--write-declaration, fully masked rows NaN: judged by that policy).
# CASES (optional) is the case set, a name (`default`: every dtype, mixed precision, ALiBi, ...) or a
# file of repro strings; by default tests/file_route/cases.txt.
# Exits 77 (CTest: skipped, with the reason) where PYTHON lacks NumPy, or PyTorch for the torch
# backend.
# Usage: sdpa_roundtrip.sh ATTNBENCH PYTHON SCRIPT torch|numpy|fallback [CASES]
set -u
bin=${1:?usage: sdpa_roundtrip.sh ATTNBENCH PYTHON SCRIPT BACKEND}
python=${2:?}
script=${3:?}
backend=${4:?}
set_arg=${5:-}
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
case $script in /*) ;; *) script=$PWD/$script ;; esac
case $python in /*) ;; */*) python=$PWD/$python ;; esac  # a relative path, not a name on PATH
here=$(cd "$(dirname "$0")" && pwd)
cases_set=${set_arg:-$here/cases.txt}
# A file named relative to where the test started (the script works in a temporary directory).
if [ -f "$cases_set" ]; then case $cases_set in /*) ;; *) cases_set=$PWD/$cases_set ;; esac; fi
need=numpy
[ "$backend" = torch ] && need=torch
if ! "$python" -c "import numpy, $need" 2>/dev/null; then
  echo "skipped: $python cannot import $need (the $backend backend needs it)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 2

"$bin" cases --out cases --cases "$cases_set" >cases.log || { cat cases.log; echo "FAIL: attnbench cases"; exit 1; }
# NumPy reads what attnbench wrote, with the shapes and dtypes the manifest states.
"$python" - cases <<'PY' || { echo "FAIL: NumPy does not read the cases directory as the manifest describes it"; exit 1; }
import json, os, sys
import numpy as np
d = sys.argv[1]
manifest = json.load(open(os.path.join(d, "manifest.json")))
for case in manifest["cases"]:
    for key in ("q", "k", "v", "mask", "bias"):
        entry = case[key]
        if entry is None:
            continue
        a = np.load(os.path.join(d, entry["file"]), allow_pickle=False)
        assert list(a.shape) == entry["shape"] and a.dtype.str == entry["npy_dtype"], (case["index"], key, a.shape, a.dtype.str)
        if case["dtype"] == "bf16" and key != "mask":  # f32 holding exactly bf16 values
            assert not (a.view(np.uint32) & 0xFFFF).any(), (case["index"], key)
print("numpy reads", len(manifest["cases"]), "cases")
PY
if [ "$backend" = fallback ]; then
  mkdir notorch
  printf 'raise ImportError("planted by sdpa_roundtrip.sh: no PyTorch here")\n' >notorch/torch.py
  export PYTHONPATH=$tmp/notorch${PYTHONPATH:+:$PYTHONPATH}
  if "$python" "$script" cases refused --backend torch >refused.log 2>&1; then
    cat refused.log; echo "FAIL: --backend torch without PyTorch exited 0"; exit 1
  fi
  grep -qF -- "--backend torch, but PyTorch cannot be imported (ImportError: planted by sdpa_roundtrip.sh" refused.log ||
    { cat refused.log; echo "FAIL: --backend torch without PyTorch does not say why it stopped"; exit 1; }
  # The script's own declaration, NaN for fully masked rows: cases and check both follow it.
  "$python" "$script" --write-declaration sdpa.json --fully-masked nan >declare.log 2>&1 || { cat declare.log; echo "FAIL: --write-declaration"; exit 1; }
  "$bin" cases --out cases --cases "$cases_set" --declare sdpa.json >cases.log || { cat cases.log; echo "FAIL: attnbench cases --declare"; exit 1; }
  "$python" "$script" cases outputs >script.log 2>&1 || { cat script.log; echo "FAIL: $script without PyTorch"; exit 1; }
  cat script.log
  grep -qF "PyTorch is not available (ImportError: planted by sdpa_roundtrip.sh: no PyTorch here): falling back to the NumPy backend" script.log ||
    { echo "FAIL: the script did not say it fell back to NumPy, and why"; exit 1; }
  grep -qF "output(s) written to outputs (numpy)" script.log || { echo "FAIL: the script did not run the NumPy backend"; exit 1; }
  "$python" - outputs <<'PY' || { echo "FAIL: the fully masked rows of case 3 are not NaN as declared"; exit 1; }
import sys, numpy as np
out = np.load(sys.argv[1] + "/out_0003.npy")
assert np.isnan(out[1]).all() and not np.isnan(out[0]).any(), "batch 1 sees no key: NaN there only"
PY
else
  "$python" "$script" cases outputs --backend "$backend" >script.log 2>&1 || { cat script.log; echo "FAIL: $script"; exit 1; }
fi
"$bin" check --cases cases --outputs outputs --threads 1 --json check.json >check.log 2>&1
rc=$?
cat check.log
if [ "$rc" -ne 0 ]; then
  echo "FAIL: attnbench check exited $rc on the $backend backend's outputs"
  exit 1
fi
echo "sdpa_roundtrip ($backend): passed"
