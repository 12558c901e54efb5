#!/usr/bin/env bash
# examples/file_route/sdpa_roundtrip.py through the file route: `attnbench cases` -> the script ->
# `attnbench check` passes, and NumPy reads every file attnbench wrote. BACKEND torch runs PyTorch's
# scaled_dot_product_attention; numpy runs the script's float64 NumPy path (its loading, masking,
# GQA and writing code). Exits 77 (CTest: skipped, with the reason) where PYTHON lacks NumPy, or
# PyTorch for the torch backend.
# Usage: sdpa_roundtrip.sh ATTNBENCH PYTHON SCRIPT torch|numpy
set -u
bin=${1:?usage: sdpa_roundtrip.sh ATTNBENCH PYTHON SCRIPT BACKEND}
python=${2:?}
script=${3:?}
backend=${4:?}
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
case $script in /*) ;; *) script=$PWD/$script ;; esac
case $python in /*) ;; */*) python=$PWD/$python ;; esac  # a relative path, not a name on PATH
here=$(cd "$(dirname "$0")" && pwd)
need=numpy
[ "$backend" = torch ] && need=torch
if ! "$python" -c "import numpy, $need" 2>/dev/null; then
  echo "skipped: $python cannot import $need (the $backend backend needs it)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 2

"$bin" cases --out cases --cases "$here/cases.txt" >cases.log || { cat cases.log; echo "FAIL: attnbench cases"; exit 1; }
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
"$python" "$script" cases outputs --backend "$backend" >script.log 2>&1 || { cat script.log; echo "FAIL: $script"; exit 1; }
"$bin" check --cases cases --outputs outputs --threads 1 --json check.json >check.log 2>&1
rc=$?
cat check.log
if [ "$rc" -ne 0 ]; then
  echo "FAIL: attnbench check exited $rc on the $backend backend's outputs"
  exit 1
fi
echo "sdpa_roundtrip ($backend): passed"
