#!/usr/bin/env bash
# bench_smoke_gpu (CTest label gpu): `attnbench bench --smoke` on every GPU implementation built
# (device: cuda in `attnbench list`): each family of each dtype runs once at n = 16, 32, 64 without
# an error, event-timed (manual time), named IMPL/DTYPE/d64/MASK/l2_cold (l2_hot with --l2 hot),
# with the GPU counters, the device and the GPU peaks in the JSON; then --peers with torch_sdpa.py
# (a table where PyTorch and the GPU are there, "peer unavailable" otherwise; exit 0 either way).
# Exits 77 (CTest's SKIP_RETURN_CODE: the test shows as skipped, never passed) with the reason
# where no GPU implementation is built or attnbench finds no CUDA device ("nothing to run: ...").
# Usage: bench_smoke_gpu.sh path/to/attnbench
set -u

bin=${1:?usage: bench_smoke_gpu.sh path/to/attnbench}
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
[ -x "$bin" ] || { echo "bench_smoke_gpu: '$bin' is not an executable" >&2; exit 2; }
src=$(cd "$(dirname "$0")/.." && pwd)
skip=77

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 2

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

"$bin" list >"$tmp/list.out" 2>&1 || { echo "bench_smoke_gpu: attnbench list failed"; exit 1; }
awk '/^[a-z]/ {name=$1} /dtypes:/ {dev=$0; sub(/.*device: /, "", dev); sub(/;.*/, "", dev); sub(/.*dtypes: /, ""); sub(/;.*/, ""); gsub(/ /, ""); if (dev == "cuda") print name, $0}' \
  "$tmp/list.out" >"$tmp/gpu_impls.txt"
if [ ! -s "$tmp/gpu_impls.txt" ]; then
  echo "bench_smoke_gpu: skipped: no GPU implementation is registered in this build"
  exit $skip
fi
impl_args=()
while read -r name _; do impl_args+=(--impl "$name"); done <"$tmp/gpu_impls.txt"

# --- the smoke run (L2 cold, the default) -------------------------------------------------------------
"$bin" bench --smoke "${impl_args[@]}" --json "$tmp/out/bench.json" >"$tmp/smoke.out" 2>&1
rc=$?
if grep -q "^attnbench bench: nothing to run: " "$tmp/smoke.out"; then
  echo "bench_smoke_gpu: skipped: $(sed -n 's/^attnbench bench: nothing to run: //p' "$tmp/smoke.out")"
  [ "$rc" -eq 0 ] || { echo "FAIL: bench --smoke without a device exited $rc, expected 0"; exit 1; }
  exit $skip
fi
if [ "$rc" -ne 0 ]; then
  fail "attnbench bench --smoke ${impl_args[*]} exited $rc"
  tail -n 60 "$tmp/smoke.out"
fi
grep -q "cuBLAS GEMM" "$tmp/smoke.out" || fail "no GPU GEMM peak printed"
grep -q "device copy:" "$tmp/smoke.out" || fail "no GPU copy bandwidth printed"
grep -q "^GPU rows: CUDA-event time" "$tmp/smoke.out" || fail "the summary table does not say how GPU rows were timed"

check_json() {  # JSON, L2 mode, implementations file
  python3 - "$@" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
mode = sys.argv[2]
impls = {}
for line in open(sys.argv[3]):
    name, dtypes = line.split()
    impls[name] = dtypes.split(",")
dtypes_only = sys.argv[4].split(",") if len(sys.argv) > 4 else None
masks = sys.argv[5].split(",") if len(sys.argv) > 5 else ["none", "causal"]

ctx = doc["context"]
for key in ("gpu_name", "gpu_sm_count", "gpu_max_sm_clock_mhz", "gpu_memory_clock_mhz", "gpu_l2_bytes", "cuda_driver_version",
            "cuda_runtime_version", "gpu_l2_mode", "gpu_timing", "gpu_peak_copy_gbytes_per_second"):
    assert key in ctx, "context lacks " + key
assert ctx["gpu_l2_mode"] == mode, ctx["gpu_l2_mode"]
assert int(ctx["gpu_sm_count"]) > 0 and float(ctx["gpu_peak_copy_gbytes_per_second"]) > 0
gpu = doc["attnbench"]["gpu"]
assert gpu["device"]["available"] and gpu["l2_mode"] == mode and not gpu["errors"], gpu
peaks = {g["precision"]: g["gflops"] for g in gpu["peaks"]["gemm"]}
assert peaks and all(v > 0 for v in peaks.values()), peaks
for precision in peaks:
    assert float(ctx[f"gpu_peak_gemm_{precision}_gflops"]) > 0, precision

runs = {}
for b in doc["benchmarks"]:
    assert not b.get("error_occurred", False), (b["name"], b.get("error_message"))
    if b["run_type"] != "iteration":
        continue
    family = b["run_name"].split("/n:")[0]
    assert b["name"].endswith("/manual_time"), b["name"]
    assert b["time_unit"] == "ms" and b["iterations"] == 1 and b["real_time"] > 0, b
    for counter in ("gflops_exact", "gflops_published", "gbytes_per_second", "peak_fraction", "workspace_bytes"):
        assert counter in b, (b["name"], counter)
    assert "rss_growth_bytes" not in b, b["name"]
    assert 0 < b["peak_fraction"], b
    runs.setdefault(family, set()).add(int(b["name"].split("/n:")[1].split("/")[0]))
expected = {f"{impl}/{dt}/d64/{mask}/l2_{mode}" for impl, dts in impls.items() for dt in dts
            if dtypes_only is None or dt in dtypes_only for mask in masks}
assert set(runs) == expected, (sorted(runs), sorted(expected))
assert all(v == {16, 32, 64} for v in runs.values()), runs
fits = {f["family"]: f for f in doc["attnbench"]["fits"]}
for family in expected:
    assert fits[family]["device"] == "cuda" and fits[family]["roofline_precision"] in peaks, fits[family]
print("bench_smoke_gpu: L2 %s: %d families, %d runs on %s; GEMM peaks %s GFLOP/s" %
      (mode, len(expected), sum(len(v) for v in runs.values()), ctx["gpu_name"],
       ", ".join("%s %.0f" % kv for kv in peaks.items())))
PY
}
check_json "$tmp/out/bench.json" cold "$tmp/gpu_impls.txt" || fail "the smoke run's JSON does not hold what it should"

# --- L2 hot: the mode is in the names and the context --------------------------------------------------
first=$(awk '{print $1; exit}' "$tmp/gpu_impls.txt")
"$bin" bench --smoke --impl "$first" --dtype f32 --masks causal --l2 hot --json "$tmp/hot/bench.json" >"$tmp/hot.out" 2>&1 ||
  { fail "bench --smoke --impl $first --l2 hot failed"; tail -n 30 "$tmp/hot.out"; }
grep "^$first " "$tmp/gpu_impls.txt" >"$tmp/first.txt"
check_json "$tmp/hot/bench.json" hot "$tmp/first.txt" f32 causal || fail "the --l2 hot run's JSON does not hold what it should"

# --- the torch peer: a table where PyTorch is, "peer unavailable" where not; exit 0 either way -------------
"$bin" bench --smoke --impl "$first" --dtype f32 --json "$tmp/peers/bench.json" \
  --peers "python3 $src/benchmarks/peers/torch_sdpa.py --repetitions 3 --backends math,efficient" >"$tmp/peers.out" 2>&1
rc=$?
[ "$rc" -eq 0 ] || { fail "bench --peers torch_sdpa.py exited $rc"; tail -n 40 "$tmp/peers.out"; }
if grep -q "peer unavailable: " "$tmp/peers.out"; then
  echo "bench_smoke_gpu: torch peer unavailable: $(sed -n 's/.*peer unavailable: //p' "$tmp/peers.out" | head -n 1)"
else
  grep -q "^Side by side with the peers" "$tmp/peers.out" || fail "bench --peers torch_sdpa.py: no side-by-side table"
  python3 - "$tmp/peers/bench.json" <<'PY' || fail "bench --peers torch_sdpa.py: no comparison with a torch target"
import json, sys
p = json.load(open(sys.argv[1]))["attnbench"]["peers"]
# A backend failing its own checks is marked invalid (status peer_checks_failed), not our failure.
assert p["status"] in ("ok", "peer_checks_failed") and "--l2 cold" in p["arguments"], p.get("status")
assert p["comparisons"] and all(c["peers"] for c in p["comparisons"]), p["comparisons"]
PY
fi

echo "bench_smoke_gpu: $failures failed"
[ "$failures" -eq 0 ]
