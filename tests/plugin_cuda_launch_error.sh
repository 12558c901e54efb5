#!/usr/bin/env bash
# A CUDA plugin's launch error left pending in the plugin's own CUDA runtime (nvcc links it
# statically) reaches the user: `attnbench validate` on tests/plugins/cuda_launch_error_plugin.cu
# (64 KiB of dynamic shared memory without cudaFuncSetAttribute, the launch's error never read)
# exits 1 and every case that ran fails naming the launch error (cudaErrorInvalidValue, the
# kernel), not as unwritten outputs; the same kernel opting in passes (so the launch is the only
# defect). Exits 77 (CTest: skipped) where the worker finds no CUDA device.
# Usage: plugin_cuda_launch_error.sh ATTNBENCH LAUNCH_ERROR_PLUGIN OPT_IN_PLUGIN WORK_DIR
set -uo pipefail
attnbench=$1 plugin=$2 control=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
validate() {  # NAME PLUGIN: validate's exit status in $work/NAME.rc, its output in $work/NAME.log
  "$attnbench" validate --plugin "$2" --cases quick --property-cases 0 --timeout 60 --out "$work/$1" >"$work/$1.log" 2>&1
  echo $? >"$work/$1.rc"
}
validate launch_error "$plugin"
cat "$work/launch_error.log"
if grep -q "unavailable here:" "$work/launch_error.log"; then
  echo "skipped: $(grep -m1 'unavailable here:' "$work/launch_error.log")"
  exit 77
fi
rc=$(cat "$work/launch_error.rc")
[[ $rc == 1 ]] || { echo "FAIL: validate of the launch-error plugin exited $rc, expected 1 (a case failed)"; exit 1; }
grep -q "cudaErrorInvalidValue" "$work/launch_error.log" || { echo "FAIL: validate's output does not name cudaErrorInvalidValue"; exit 1; }
grep -q "a launch left pending in the plugin's own CUDA runtime" "$work/launch_error.log" ||
  { echo "FAIL: validate's output does not say the launch error was left pending in the plugin's runtime"; exit 1; }
python3 - "$work/launch_error" <<'PY' || exit 1
import json, sys
records = json.load(open(f"{sys.argv[1]}/verify.json"))["records"]
ran = [r for r in records if r["status"] != "skip"]
assert ran, "no case ran"
for r in ran:
    reasons = " ".join(r.get("reasons") or [])
    assert r["status"] == "fail", f"case {r['case_index']} did not fail: {r['status']}"
    assert "cudaErrorInvalidValue" in reasons and "attention_row" in reasons, f"case {r['case_index']} fails without naming the launch: {reasons}"
    assert "not written" not in reasons, f"case {r['case_index']} also reads as unwritten outputs: {reasons}"
print(f"{len(ran)} case(s) failed naming the launch error, e.g.: {ran[0]['reasons'][0]}")
PY
validate opt_in "$control"
rc=$(cat "$work/opt_in.rc")
[[ $rc == 0 ]] || { cat "$work/opt_in.log"; echo "FAIL: the control (the same kernel opting in to 64 KiB) exited $rc, expected 0"; exit 1; }
echo "the control (the same kernel with cudaFuncSetAttribute) passes"
