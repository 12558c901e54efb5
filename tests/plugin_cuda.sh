#!/usr/bin/env bash
# The CUDA example plugin (examples/plugins/cuda) passes `attnbench validate` on a device: the quick
# verify cases, the property suite (few cases each) and a short benchmark timed with CUDA events
# inside the worker. Exits 77 (CTest: skipped) where the worker finds no CUDA device.
# Usage: plugin_cuda.sh ATTNBENCH CUDA_PLUGIN WORK_DIR
set -uo pipefail
attnbench=$1 plugin=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
"$attnbench" validate --plugin "$plugin" --cases quick --property-cases "${ATTN_PLUGIN_PROPERTY_CASES:-10}" --bench --bench-max-n 256 \
  --timeout 60 --out "$work" 2>&1 | tee "$work/validate.log"
rc=${PIPESTATUS[0]}
if grep -q "unavailable here:" "$work/validate.log"; then
  echo "skipped: $(grep -m1 'unavailable here:' "$work/validate.log")"
  exit 77
fi
[[ $rc == 0 ]] || { echo "FAIL: validate exited $rc"; exit 1; }
python3 - "$work" <<'PY' || exit 1
import json, sys
work = sys.argv[1]
records = json.load(open(f"{work}/verify.json"))["records"]
ran = [r for r in records if r["status"] != "skip"]
assert ran and all(r["status"] == "pass" for r in ran), "a case did not pass"
bench = json.load(open(f"{work}/bench.json"))["benchmarks"]
times = [b for b in bench if b.get("run_type") == "iteration" and "manual_time" in b["name"] and not b.get("error_occurred")]
assert times, "no benchmark timed by the worker (manual time)"
print(f"{len(ran)} case(s) passed, {len(times)} benchmark(s) timed with CUDA events in the worker")
PY
