#!/usr/bin/env bash
# `attnbench bench --smoke`: every family of every built-in implementation runs once at tiny
# sizes without an error, and the JSON is Google Benchmark's (what compare.py reads) with our
# context, peaks and fits; `--peers` with a fake peers command (the side-by-side table, the JSON
# comparisons, a failing command, an unavailable peer). GPU implementations: where no device is, they
# are skipped with the reason (not an error), and asked for alone they run nothing (exit 0 with --smoke,
# 1 without); where a device is, their families run like the others (event-timed, named .../l2_cold).
# The peers scripts' contracts on the cases folder bench writes (cpu_peers.py f32 only; torch_sdpa.py
# unavailable without PyTorch or a GPU) and torch_sdpa.py's timing and record logic with a stand-in timer. Also the bench
# command's bad-input contract (exit 2, nothing written).
# Usage: bench_smoke.sh path/to/attnbench
set -u
export PYTHONDONTWRITEBYTECODE=1  # the peers scripts import from the source tree

bin=${1:?usage: bench_smoke.sh path/to/attnbench}
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
[ -x "$bin" ] || { echo "bench_smoke: '$bin' is not an executable" >&2; exit 2; }
src=$(cd "$(dirname "$0")/.." && pwd)  # the repository: benchmarks/peers/*.py

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 2

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# --- the smoke run -----------------------------------------------------------------------------
"$bin" bench --smoke --json "$tmp/out/bench.json" >"$tmp/smoke.out" 2>"$tmp/smoke.err"
rc=$?
if [ "$rc" -ne 0 ]; then
  fail "attnbench bench --smoke exited $rc"
  tail -n 40 "$tmp/smoke.out"
  sed 's/^/  ! /' "$tmp/smoke.err" | tail -n 20
fi
grep -q "fp32 FMA peak" "$tmp/smoke.out" || fail "no FMA peak printed"
grep -q "Eigen SGEMM" "$tmp/smoke.out" || fail "no SGEMM peak printed"
grep -q "^Scaling per family" "$tmp/smoke.out" || fail "no scaling table printed"
# Debian's libbenchmark warns that it was built as DEBUG; the console says what that means instead.
grep -q "Library was built as DEBUG" "$tmp/smoke.out" "$tmp/smoke.err" && fail "Google Benchmark's DEBUG warning is printed unexplained"
grep -Eq "the machine was (quiet|loaded)" "$tmp/smoke.out" || fail "the machine's load during the run is not stated"

"$bin" list >"$tmp/list.out" 2>&1 || fail "attnbench list failed"
# Implementations, their device and the dtypes each accepts, from `attnbench list`.
awk '/^[a-z]/ {name=$1} /dtypes:/ {dev=$0; sub(/.*device: /, "", dev); sub(/;.*/, "", dev); sub(/.*dtypes: /, ""); sub(/;.*/, ""); gsub(/ /, ""); print name, dev, $0}' "$tmp/list.out" >"$tmp/impls.txt"

if ! python3 - "$tmp/out/bench.json" "$tmp/impls.txt" "$tmp/smoke.out" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
console = open(sys.argv[3]).read()
impls, gpu_impls = {}, {}
for line in open(sys.argv[2]):
    name, device, dtypes = line.split()
    (gpu_impls if device == "cuda" else impls)[name] = dtypes.split(",")
assert impls, "no implementations listed"
section = doc["attnbench"]
if gpu_impls:
    # Without a device each is skipped with the reason, printed and in the JSON; with one, its
    # families run like the CPU ones, named .../l2_cold.
    gpu = section["gpu"]
    if not gpu["device"]["available"]:
        for name in gpu_impls:
            note = f"{name}: skipped: {gpu['device']['reason']}"
            assert note in gpu["skipped"] and note in section["notes"], (note, gpu["skipped"])
            assert "note: " + note in console, note
        print("bench_smoke: no CUDA device: %s skipped (%s)" % (", ".join(gpu_impls), gpu["device"]["reason"]))
        gpu_impls = {}
    else:
        ctx = doc["context"]
        for key in ("gpu_name", "gpu_sm_count", "gpu_max_sm_clock_mhz", "gpu_memory_clock_mhz", "cuda_driver_version",
                    "cuda_runtime_version", "gpu_l2_mode", "gpu_timing", "gpu_peak_copy_gbytes_per_second"):
            assert key in ctx, "context lacks " + key
        assert ctx["gpu_l2_mode"] == "cold"
        assert gpu["peaks"]["copy_gbytes_per_second"] > 0 and all(g["gflops"] > 0 for g in gpu["peaks"]["gemm"]), gpu["peaks"]

ctx = doc["context"]
for key in ("git_revision", "compiler", "compiler_flags", "cpu_model", "threads", "build_type",
            "peak_fma_gflops", "peak_sgemm_gflops", "roofline_gflops", "rss_growth_method"):
    assert key in ctx, "context lacks " + key
assert float(ctx["peak_fma_gflops"]) > 0 and float(ctx["peak_sgemm_gflops"]) > 0
assert abs(float(ctx["roofline_gflops"]) - float(ctx["peak_fma_gflops"])) < 0.01  # the FMA peak is the ceiling
load = doc["attnbench"]["machine_load"]
assert load["cores"] >= 1 and 0 <= load["others_cores_during"] <= load["cores"] and load["seconds"] > 0, load
assert load["loaded"] == (load["others_cores_during"] > 0.1 * load["cores"] or
                          (load["others_cores_before"] is not None and load["others_cores_before"] > 0.1 * load["cores"])), load

runs, bigo, rms = {}, set(), set()
for b in doc["benchmarks"]:
    assert not b.get("error_occurred", False), (b["name"], b.get("error_message"))
    family = b["run_name"].split("/n:")[0].split("/iterations:")[0]
    on_gpu = family.split("/")[0] in gpu_impls
    if b["run_type"] == "iteration":
        # What compare.py reads of every run.
        for key in ("name", "real_time", "cpu_time", "time_unit", "iterations", "family_index", "per_family_instance_index"):
            assert key in b, (b["name"], key)
        assert b["iterations"] == 1, b["name"]
        assert b["time_unit"] == "ms", b["name"]
        assert b["name"].endswith("/manual_time" if on_gpu else "/real_time"), b["name"]
        counters = ("gflops_exact", "gflops_published", "gbytes_per_second", "peak_fraction", "workspace_bytes")
        for counter in counters + (() if on_gpu else ("rss_growth_bytes",)):
            assert counter in b, (b["name"], counter)
        if on_gpu:
            assert "rss_growth_bytes" not in b, b["name"]
        assert b["gflops_exact"] > 0 and b["gflops_published"] >= b["gflops_exact"] * 0.9, b["name"]
        runs.setdefault(family, set()).add(int(b["name"].split("/n:")[1].split("/")[0]))
    elif b.get("aggregate_name") == "BigO":
        assert b["big_o"] == "N^2", b
        bigo.add(family)
    elif b.get("aggregate_name") == "RMS":
        rms.add(family)

expected = {f"{impl}/{dt}/d64/{mask}" for impl, dts in impls.items() for dt in dts for mask in ("none", "causal")}
expected |= {f"{impl}/{dt}/d64/{mask}/l2_cold" for impl, dts in gpu_impls.items() for dt in dts for mask in ("none", "causal")}
missing = expected - set(runs)
assert not missing, "families that did not run: " + ", ".join(sorted(missing))
assert set(runs) == expected, "families that should not have run: " + ", ".join(sorted(set(runs) - expected))
for family in expected:
    assert runs[family] == {16, 32, 64}, (family, runs[family])
    assert family in bigo and family in rms, family + " has no complexity rows"

assert section["errors"] == [], section["errors"]
fits = {f["family"]: f for f in section["fits"]}
for family in expected:
    assert fits[family]["exponent"] is not None and 0 < fits[family]["r_squared"] <= 1.0000001, fits[family]
    assert fits[family]["workspace_bytes_at_16384"] >= 0
print("bench_smoke: %d families, %d runs" % (len(expected), sum(len(v) for v in runs.values())))
PY
then
  fail "the smoke run's JSON does not hold what it should"
fi

# --- repetitions: the table shows each n once (medians), never an aggregate as n = 0 -----------------
"$bin" bench --smoke --impl cpu_blocked --dtype f32 --masks none --benchmark_repetitions=2 --json '' >"$tmp/reps.out" 2>&1 ||
  fail "bench --smoke --benchmark_repetitions=2 failed"
rows=$(awk '/^implementation dtype/ {table=1; next} /^Scaling/ {table=0} table && $1 == "cpu_blocked" {print $6}' "$tmp/reps.out" | tr '\n' ' ')
[ "$rows" = "16 32 64 " ] || { fail "with repetitions the table's n column is '$rows', expected '16 32 64 '"; tail -n 30 "$tmp/reps.out"; }

# --- the backward's passes: families of their own, with the backward's FLOPs; no backward, no family --------
"$bin" bench --smoke --impl cpu_naive --dtype f32 --masks causal --pass backward,forward_backward --json "$tmp/backward.json" >"$tmp/backward.out" 2>&1 ||
  fail "bench --smoke --pass backward,forward_backward failed"
for family in cpu_naive/f32/d64/causal/backward cpu_naive/f32/d64/causal/forward_backward; do
  grep -q "$family/n:64" "$tmp/backward.out" || fail "no $family family in the backward run"
done
grep -q "cpu_naive/f32/d64/causal/n:" "$tmp/backward.out" && fail "--pass backward,forward_backward timed the forward too"
python3 - "$tmp/backward.json" <<'PY' || fail "the backward families' FLOPs are not the backward's (2.5x forward published; forward_backward 3.5x)"
import json, sys
runs = {b["run_name"]: b for b in json.load(open(sys.argv[1]))["benchmarks"] if b.get("run_type") == "iteration"}
def rate(name, key):
    b = next(v for k, v in runs.items() if k.startswith(name + "/n:64"))
    return b[key] * b["real_time"] / 1e3  # GFLOP per call (times in ms)
bwd, both = rate("cpu_naive/f32/d64/causal/backward", "gflops_published"), rate("cpu_naive/f32/d64/causal/forward_backward", "gflops_published")
assert abs(both / bwd - 3.5 / 2.5) < 1e-6, (bwd, both)
PY

# --- Google Benchmark's own compare tool reads the JSON --------------------------------------------
# (Debian's libbenchmark-tools, installed by ci/install-deps.sh, run by Debian's own python3:
# a python3 earlier on PATH, e.g. pyenv's, does not see python3-scipy.) Comparing the run with
# itself must list every benchmark with a zero change.
compare=/usr/share/benchmark/compare.py
debian_python=/usr/bin/python3
if [ -f "$compare" ] && "$debian_python" -c "import scipy" 2>/dev/null; then
  if "$debian_python" "$compare" --no-color benchmarks "$tmp/out/bench.json" "$tmp/out/bench.json" >"$tmp/compare.out" 2>&1; then
    compared=$(grep -c -E '^[a-z][a-z0-9_]*/[^ ]+/(real|manual)_time +[-+]0\.0000 ' "$tmp/compare.out")
    listed=$(python3 -c "import json,sys; print(sum(b['run_type'] == 'iteration' for b in json.load(open(sys.argv[1]))['benchmarks']))" "$tmp/out/bench.json")
    echo "bench_smoke: compare.py read $compared of $listed runs"
    [ "$compared" -eq "$listed" ] || { fail "compare.py listed $compared of $listed runs with a zero change"; tail -n 20 "$tmp/compare.out"; }
  else
    fail "compare.py could not read the JSON"
    tail -n 20 "$tmp/compare.out"
  fi
else
  echo "bench_smoke: compare.py check not run: $compare or scipy missing (bash ci/install-deps.sh installs them)"
fi

# --- --peers: a fake peers command side by side with ours -------------------------------------------
# The fake stands in for benchmarks/peers/cpu_peers.py (no onnxruntime or jax needed): it reads the
# cases folder bench passes (--cases DIR: peer_cases.json, and the .npy files it names, which must be
# there), prints the problem list it found and progress on stdout and stderr, and writes the script's
# JSON schema with made-up medians for each timed case: peer_ok (valid; an error record at none/n=32),
# peer_bad (fastest, but failed its checks: never the target), peer_nochk (checks skipped: valid_target
# null), peer_missing (skipped); Infinity and NaN in the checks, as Python's json writes them. It exits
# 1, as the script does when a peer fails its checks. --mode exit4|nofile|malformed makes it fail;
# --mode unavailable exits 3 as torch_sdpa.py does without PyTorch or a GPU.
cat >"$tmp/fake_peers.py" <<'PY'
import argparse, json, os, sys
ap = argparse.ArgumentParser()
ap.add_argument("--mode", default="ok")
ap.add_argument("--cases", required=True)
ap.add_argument("--threads", type=int, required=True)
ap.add_argument("--out", required=True)
ap.add_argument("--l2", default="-")
a = ap.parse_args()
manifest = json.load(open(os.path.join(a.cases, "peer_cases.json")))
assert manifest["schema"] == "attnbench.peer_cases", manifest["schema"]
cases = manifest["cases"]
for c in cases:
    for t in ("q", "k", "v"):
        assert os.path.isfile(os.path.join(a.cases, c[t])), c[t]
timed = [c for c in cases if c["role"] == "timed"]
checks = [c for c in cases if c["role"] == "check"]
def values(key, mapping=lambda x: x):
    return ",".join(str(mapping(v)) for v in dict.fromkeys(c["problem"][key] for c in timed))
ns = sorted({c["problem"]["n_q"] for c in timed})
print(f"fake_peers: min-n {ns[0]} max-n {ns[-1]} threads {a.threads} masks {values('causal', lambda m: 'causal' if m == 'top_left' else m)} "
      f"batch {values('b')} heads {values('h_q')} d {values('d_k')} dtype {values('dtype')} l2 {a.l2} out {a.out}", flush=True)
print(f"fake_peers: {len(timed)} timed, {len(checks)} checks", flush=True)
print("fake_peers: progress on stderr", file=sys.stderr, flush=True)
if a.mode == "exit4":
    sys.exit(4)
if a.mode == "unavailable":
    json.dump({"context": {}, "peers": [{"peer": "peer_gpu", "skipped": "no CUDA device (made up)"}], "results": []}, open(a.out, "w"))
    sys.exit(3)
if a.mode == "hostile":  # what the sandbox must stop: a write outside, a process left behind, the network
    import socket, subprocess
    try:
        open(os.path.join(os.path.dirname(a.cases.rstrip("/")), "..", "escaped"), "w").write("x")
    except OSError as e:
        print(f"fake_peers: write outside refused: {e}", flush=True)
    subprocess.Popen(["sleep", "3003"], start_new_session=True)
    try:
        socket.create_connection(("127.0.0.1", 9), timeout=2)
    except OSError as e:
        print(f"fake_peers: network refused: {e}", flush=True)
    print(f"fake_peers: pid {os.getpid()}", flush=True)
    a.mode = "ok"
if a.mode == "nofile":
    sys.exit(0)
if a.mode == "malformed":
    open(a.out, "w").write("{not json")
    sys.exit(0)
peers = [{"peer": "peer_ok", "peer_version": "1.0", "checked": [], "valid_target": True},
         {"peer": "peer_bad", "peer_version": "2.0", "valid_target": False,
          "checked": [{"problem": "b=1 ...", "pass": False, "max_abs_error": float("inf"), "ratio_to_naive": float("nan")}]},
         {"peer": "peer_nochk", "peer_version": "3.0", "checked": [], "valid_target": None},
         {"peer": "peer_missing", "skipped": "ModuleNotFoundError: No module named 'peer_missing'"}]
results = []
for c in timed:
    problem = dict(c["problem"], flops=c["flops"], bytes_min=c["bytes_min"])
    n = problem["n_q"]
    def record(peer, version, median, valid):
        return {"peer": peer, "peer_version": version, "problem": problem, "median_seconds": median,
                "min_seconds": median, "times": [median], "valid_target": valid}
    if problem["causal"] == "none" and n == 32:
        results.append({"peer": "peer_ok", "peer_version": "1.0", "problem": problem, "error": "RuntimeError: made up"})
    else:
        results.append(record("peer_ok", "1.0", n * 1e-5, True))
    results.append(record("peer_bad", "2.0", n * 1e-9, False))
    results.append(record("peer_nochk", "3.0", n * 3e-5, None))
# A record of a problem it was not given (another seed) is left out, never compared.
off = dict(results[-1], problem=dict(results[-1]["problem"], repro=results[-1]["problem"]["repro"].replace("seed=1", "seed=2")))
results.append(off)
with open(a.out, "w") as f:
    json.dump({"context": {"args": vars(a)}, "peers": peers, "results": results}, f, indent=2)
sys.exit(1)
PY
fake_peers="python3 $tmp/fake_peers.py"
# Where a GPU family runs (a device is here), bench passes --l2 cold too.
l2_passed=$(python3 -c "import json,sys; g=json.load(open(sys.argv[1]))['attnbench'].get('gpu'); print('cold' if g and g['device']['available'] else '-')" "$tmp/out/bench.json" 2>/dev/null)

"$bin" bench --smoke --dtype f32 --threads 1 --json "$tmp/peers/bench.json" --peers "$fake_peers" --peers-cases "$tmp/cases_f32" >"$tmp/peers.out" 2>"$tmp/peers.err"
rc=$?
if [ "$rc" -ne 0 ]; then
  fail "bench --smoke --dtype f32 --peers FAKE exited $rc (a peer failing its own checks is not our failure: expected 0)"
  tail -n 40 "$tmp/peers.out"
  sed 's/^/  ! /' "$tmp/peers.err" | tail -n 20
fi
# The command writes its JSON into its scratch directory; bench copies it beside the bench JSON.
grep -q "^fake_peers: min-n 16 max-n 64 threads 1 masks none,causal batch 1 heads 8 d 64 dtype f32 l2 ${l2_passed:--} out /.*/scratch/peers.json$" "$tmp/peers.out" ||
  fail "--peers: the command's stdout did not stream through with the expected arguments and cases"
[ -s "$tmp/peers/bench.peers.json" ] || fail "--peers: the peers' JSON was not copied to $tmp/peers/bench.peers.json"
grep -q "^fake_peers: 6 timed, 12 checks$" "$tmp/peers.out" || fail "--peers: the cases folder does not hold 6 timed cases and 12 checks"
grep -q "^fake_peers: progress on stderr" "$tmp/peers.err" || fail "--peers: the command's stderr did not stream through"
grep -q "^Side by side with the peers (medians, same run)" "$tmp/peers.out" || fail "--peers: no side-by-side table"
grep -q "peer_bad FAILED" "$tmp/peers.out" || fail "--peers: the invalid peer is not reported prominently"
grep -q "peer peer_missing: skipped" "$tmp/peers.out" || fail "--peers: the skipped peer is not reported"
grep -q "peer_ok f32 d64 none n=32: RuntimeError: made up" "$tmp/peers.out" || fail "--peers: the peer's error record is not reported"
grep -q "seed=2: not one of the 6 problems it was given" "$tmp/peers.out" || fail "--peers: the record off the list is not reported as left out"
if ! python3 - "$tmp/peers/bench.json" "$tmp/peers.out" <<'PY'
import json, re, sys
doc = json.load(open(sys.argv[1]))
table = open(sys.argv[2]).read().split("Side by side with the peers", 1)[1]
section = doc["attnbench"]["peers"]
assert section["exit_code"] == 1 and section["status"] == "peer_checks_failed", section["status"]
assert section["invalid_peers"] == ["peer_bad"], section["invalid_peers"]
assert section["json"] == sys.argv[1].replace("bench.json", "bench.peers.json"), section["json"]
assert [p["peer"] for p in section["peers"]] == ["peer_ok", "peer_bad", "peer_nochk", "peer_missing"]
assert len(section["results"]) == 3 * 2 * 3 + 1
assert len(section["left_out_records"]) == 1, section["left_out_records"]

ours = {}  # (implementation, mask, n) -> time in ms, from Google Benchmark's own records
for b in doc["benchmarks"]:
    if b["run_type"] == "iteration":
        impl, dtype, d, mask = b["run_name"].split("/n:")[0].split("/")[:4]
        ours[(impl, mask, int(b["name"].split("/n:")[1].split("/")[0]))] = b["real_time"]
comparisons = {(c["mask"], c["n"]): c for c in section["comparisons"]}
assert set(comparisons) == {(m, n) for m in ("none", "causal") for n in (16, 32, 64)}, sorted(comparisons)
impls = sorted({k[0] for k in ours})
for (mask, n), c in comparisons.items():
    assert c["peer_mask"] == {"none": "none", "causal": "top_left"}[mask]
    assert (c["dtype"], c["head_dim"]) == ("f32", 64), c
    # Made-up medians: peer_ok n*1e-5 s (an error at none/32), peer_bad n*1e-9 s (invalid), peer_nochk n*3e-5 s.
    if (mask, n) == ("none", 32):
        want = ("peer_nochk", n * 3e-2, None)
    else:
        want = ("peer_ok", n * 1e-2, True)
    t = c["target"]
    assert (t["peer"], t["valid_target"]) == (want[0], want[2]) and abs(t["median_ms"] - want[1]) < 1e-12, (mask, n, t)
    assert {o["implementation"] for o in c["ours"]} == set(impls), c["ours"]
    for o in c["ours"]:
        measured = ours[(o["implementation"], mask, n)]
        assert abs(o["time_ms"] - measured) <= 1e-9 * measured, (o, measured)
        assert abs(o["ratio"] - want[1] / measured) <= 1e-9 * o["ratio"], (o, want[1] / measured)
    # The console row shows the same ratios.
    row = re.search(r"^f32 +64 +%s +%d +(.*)$" % (mask, n), table, re.M)
    assert row, (mask, n)
    cells = row.group(1).split()
    assert cells[-len(impls):] == ["%.2f" % o["ratio"] for o in c["ours"]], (cells, c["ours"])
    assert ("peer_nochk (unchecked)" if want[2] is None else " peer_ok ") in row.group(0), row.group(0)
    assert "(invalid)" in row.group(0), row.group(0)
print("bench_smoke: --peers compared %d (mask, n) rows of %d implementations" % (len(comparisons), len(impls)))
PY
then
  fail "--peers: the side-by-side table or the JSON comparisons are wrong"
fi

# No bench JSON (--json ''): the peers write to a temporary file, removed afterwards; bottom_right is
# the peers' causal (top-left) at n_q = n_k.
"$bin" bench --smoke --dtype f32 --impl cpu_naive --masks bottom_right --json '' --peers "$fake_peers" >"$tmp/peers2.out" 2>&1
rc=$?
[ "$rc" -eq 0 ] || { fail "bench --json '' --masks bottom_right --peers FAKE exited $rc"; tail -n 20 "$tmp/peers2.out"; }
grep -q "^fake_peers: min-n 16 max-n 64 threads [0-9]* masks causal batch 1 heads 8 d 64 dtype f32 l2 - out " "$tmp/peers2.out" ||
  fail "--peers --masks bottom_right: the command did not get --masks causal"
grep -qE "^f32 +64 +causal_bottom_right +64 .* peer_ok" "$tmp/peers2.out" || fail "--peers --masks bottom_right: no compared row"
temp_out=$(sed -n 's/^fake_peers: .* out //p' "$tmp/peers2.out")
[ -n "$temp_out" ] && [ ! -e "$temp_out" ] || fail "--peers --json '': the temporary peers file $temp_out was not removed"

# The sandbox (impls/sandbox/README.md): the command is process 1 of its own PID namespace (the
# shell execs it), its write outside the scratch directory is refused, the process it left in a
# session of its own dies with it, it has no network; its results still count. --sandbox=off: the
# same command escapes (the check can fail). Where a bound cannot be set up here, its checks are notes.
sandboxed_peers() {
  local sandbox=$1 out="$tmp/psbx_$1.out"
  rm -rf "$tmp/psbx" "$tmp/escaped"
  "$bin" bench --smoke --dtype f32 --impl cpu_naive --masks none --json "$tmp/psbx/bench.json" --sandbox "$sandbox" \
    --peers "$fake_peers --mode hostile" --peers-cases "$tmp/psbx/cases" >"$out" 2>&1
  local rc=$?
  [ "$rc" -eq 0 ] || { fail "--peers --sandbox $sandbox with a hostile peer: exit $rc, expected 0 (its results count)"; tail -n 10 "$out"; }
  grep -q "^  sandbox: " "$out" || fail "--peers --sandbox $sandbox: no sandbox line"
}
sandboxed_peers on
sandbox_line=$(sed -n 's/^  sandbox: //p' "$tmp/psbx_on.out")
if [[ $sandbox_line == *unavailable* ]]; then
  echo "bench_smoke: note: the peers' sandbox is incomplete here ($sandbox_line): its checks are not run"
else
  [ "$sandbox_line" = "pid namespace, network namespace, landlock" ] || [ "$sandbox_line" = "pid namespace, network namespace, user namespace, landlock" ] ||
    fail "--peers: sandbox line '$sandbox_line'"
  grep -q "^fake_peers: pid 2$" "$tmp/psbx_on.out" || fail "--peers: the command is not the process below process 1 of its own PID namespace"
  grep -q "^fake_peers: write outside refused: .*Permission denied" "$tmp/psbx_on.out" && [ ! -e "$tmp/escaped" ] ||
    fail "--peers: the sandboxed command wrote outside its scratch directory"
  grep -q "^fake_peers: network refused: .*unreachable" "$tmp/psbx_on.out" || fail "--peers: the sandboxed command reached the network"
  pgrep -f "^sleep 3003$" >/dev/null && { fail "--peers: a process the sandboxed command started outlived it"; pkill -f "^sleep 3003$"; }
  python3 -c "import json,sys; s=json.load(open(sys.argv[1]))['attnbench']['peers']['sandbox']; assert s['summary'] == sys.argv[2] and all(b['applied'] for b in s['bounds']), s" \
    "$tmp/psbx/bench.json" "$sandbox_line" || fail "--peers: the JSON does not record the sandbox's bounds"
  sandboxed_peers off
  grep -q "^  sandbox: off (--sandbox=off)$" "$tmp/psbx_off.out" || fail "--peers --sandbox off: not said"
  [ -e "$tmp/escaped" ] || fail "--peers --sandbox off: the hostile peer could not write outside (so the check above proves nothing)"
  pkill -f "^sleep 3003$" || fail "--peers --sandbox off: the hostile peer's process is not there (so the check above proves nothing)"
  echo "bench_smoke: the peers' sandbox held ($sandbox_line); off, the same peer escaped"
fi

# A failing peers command: exit 1, a message naming the fault, our results kept in the bench JSON.
peers_fails() {
  local mode=$1 text=$2
  rm -rf "$tmp/pfail"
  "$bin" bench --smoke --dtype f32 --impl cpu_naive --masks none --json "$tmp/pfail/bench.json" \
    --peers "$fake_peers --mode $mode" >"$tmp/pfail.out" 2>&1
  local rc=$?
  [ "$rc" -eq 1 ] || fail "--peers with a command that fails ($mode): exit $rc, expected 1"
  grep -qF -- "$text" "$tmp/pfail.out" || { fail "--peers ($mode): output lacks '$text'"; tail -n 5 "$tmp/pfail.out"; }
  python3 - "$tmp/pfail/bench.json" "$mode" <<'PY' || fail "--peers ($mode): our results were not kept"
import json, sys
doc = json.load(open(sys.argv[1]))
assert sum(b["run_type"] == "iteration" for b in doc["benchmarks"]) == 3, "our runs are missing"
peers = doc["attnbench"]["peers"]
assert peers["status"] == "failed" and peers["failure"], peers
assert peers["exit_code"] == (4 if sys.argv[2] == "exit4" else 0), peers["exit_code"]
assert "comparisons" not in peers
PY
}
peers_fails exit4 "the peers command failed: 'python3 $tmp/fake_peers.py --mode exit4' exited 4"
peers_fails nofile "but it did not write $tmp/pfail/bench.peers.json"
peers_fails malformed "bench.peers.json is not valid JSON"

# Exit 3: the peer cannot run here (torch_sdpa.py without PyTorch or a GPU): said, not a failure.
rm -rf "$tmp/pun"
"$bin" bench --smoke --dtype f32 --impl cpu_naive --masks none --json "$tmp/pun/bench.json" \
  --peers "$fake_peers --mode unavailable" >"$tmp/pun.out" 2>&1
rc=$?
[ "$rc" -eq 0 ] || { fail "--peers with an unavailable peer (exit 3): exit $rc, expected 0"; tail -n 10 "$tmp/pun.out"; }
grep -q "peer unavailable: peer_gpu: no CUDA device (made up)" "$tmp/pun.out" || fail "--peers (exit 3): 'peer unavailable' not reported"
python3 -c "import json,sys; p=json.load(open(sys.argv[1]))['attnbench']['peers']; assert p['status'] == 'unavailable' and p['exit_code'] == 3, p" \
  "$tmp/pun/bench.json" || fail "--peers (exit 3): the JSON does not say unavailable"

# The problem list goes to the peers: batch, heads, every dtype and d our families run; their
# records are compared per (dtype, d).
"$bin" bench --smoke --impl cpu_blocked --masks none --dtype f32,f16 --d 32 --heads 2 --batch 2 --json "$tmp/plist/bench.json" \
  --peers "$fake_peers" --peers-cases "$tmp/cases_f16" >"$tmp/plist.out" 2>&1 || { fail "--peers with --dtype f32,f16 --d 32 --heads 2 --batch 2 failed"; tail -n 20 "$tmp/plist.out"; }
grep -q "^fake_peers: min-n 16 max-n 64 threads [0-9]* masks none batch 2 heads 2 d 32 dtype f32,f16 l2 [-a-z]* out " "$tmp/plist.out" ||
  fail "--peers: the command did not get our batch, heads, d and dtypes"
python3 - "$tmp/plist/bench.json" <<'PY' || fail "--peers: the comparisons are not per (dtype, d)"
import json, sys
c = json.load(open(sys.argv[1]))["attnbench"]["peers"]["comparisons"]
assert sorted((x["dtype"], x["head_dim"], x["n"]) for x in c) == sorted((dt, 32, n) for dt in ("f16", "f32") for n in (16, 32, 64)), c
assert all(x["target"] and x["ours"][0]["ratio"] > 0 for x in c if x["n"] != 32), c
PY

# --- bad input: exit 2, a message naming the problem, no results written ---------------------------
bad_input() {
  local text=$1
  shift
  "$bin" bench --smoke --json "$tmp/bad/bench.json" "$@" >"$tmp/bad.out" 2>"$tmp/bad.err"
  local rc=$?
  [ "$rc" -eq 2 ] || fail "bench $*: exit $rc, expected 2"
  grep -qF -- "$text" "$tmp/bad.err" || { fail "bench $*: stderr lacks '$text'"; sed 's/^/  ! /' "$tmp/bad.err"; }
  [ ! -e "$tmp/bad" ] || fail "bench $*: wrote $tmp/bad despite bad input"
  grep -q "measuring machine peaks" "$tmp/bad.out" && fail "bench $*: started running despite bad input"
}
bad_input "unknown mask 'sliding'" --masks none,sliding
bad_input "unknown dtype 'f8'" --dtype f8
bad_input "unknown implementation 'nosuch'" --impl nosuch
bad_input "unknown option '--bogus'" --bogus
bad_input "use --json PATH" --benchmark_out=x.json
bad_input "--benchmark_min_time" --benchmark_min_time=soon
bad_input "--peers with --smoke needs --dtype f32" --peers "$fake_peers"
bad_input "--peers needs a command" --dtype f32 --peers ' '
bad_input "--l2 'warm': expected cold" --l2 warm
bad_input "--peers-cases requires --peers" --dtype f32 --peers-cases "$tmp/pc"
mkdir -p "$tmp/notpc" && touch "$tmp/notpc/mine.txt"
bad_input "holds mine.txt, so it is not a peer-cases folder" --dtype f32 --peers "$fake_peers" --peers-cases "$tmp/notpc"

"$bin" bench --smoke --min-n 100 --json "$tmp/bad/bench.json" >/dev/null 2>&1
[ $? -eq 0 ] || fail "--smoke must ignore --min-n"
"$bin" bench --min-n 100 --json "$tmp/bad2/bench.json" >"$tmp/bad.out" 2>"$tmp/bad.err"
[ $? -eq 2 ] && grep -qF -- "--min-n 100 is not a power of two" "$tmp/bad.err" || fail "--min-n 100 was not rejected"

# --- GPU implementations without a device ------------------------------------------------------------
# Asked for alone: nothing runs; --smoke exits 0 ("nothing to run: REASON"), a real run exits 1.
gpu_impl=$(awk '$2 == "cuda" {print $1; exit}' "$tmp/impls.txt")
device_available=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['attnbench'].get('gpu', {}).get('device', {}).get('available', False))" "$tmp/out/bench.json" 2>/dev/null)
if [ -n "$gpu_impl" ] && [ "$device_available" = "False" ]; then
  rm -rf "$tmp/nogpu"
  "$bin" bench --smoke --impl "$gpu_impl" --json "$tmp/nogpu/bench.json" >"$tmp/nogpu.out" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || fail "bench --smoke --impl $gpu_impl without a device: exit $rc, expected 0"
  grep -q "^attnbench bench: nothing to run: $gpu_impl: skipped: " "$tmp/nogpu.out" || { fail "bench --smoke --impl $gpu_impl: no 'nothing to run' with the reason"; cat "$tmp/nogpu.out"; }
  [ ! -e "$tmp/nogpu" ] || fail "bench --smoke --impl $gpu_impl without a device wrote $tmp/nogpu"
  grep -q "measuring machine peaks" "$tmp/nogpu.out" && fail "bench --smoke --impl $gpu_impl without a device measured peaks"
  "$bin" bench --impl "$gpu_impl" --json "$tmp/nogpu/bench.json" >"$tmp/nogpu.out" 2>&1
  rc=$?
  [ "$rc" -eq 1 ] || fail "bench --impl $gpu_impl without a device: exit $rc, expected 1"
  grep -q "nothing to run: $gpu_impl: skipped: " "$tmp/nogpu.out" || fail "bench --impl $gpu_impl without a device: the reason is not printed"
  echo "bench_smoke: $gpu_impl alone without a device: --smoke exits 0, a real run 1"
else
  echo "bench_smoke: no-device checks not run (GPU implementation: '${gpu_impl:-none}', device available: ${device_available:-n/a})"
fi

# --- the peers scripts' argument contracts -------------------------------------------------------------
# They read the cases folder bench writes (kept above by --peers-cases) and say what they do not
# run (exit 2): cpu_peers.py times f32 only; a missing folder is named.
[ -f "$tmp/cases_f32/peer_cases.json" ] && [ -f "$tmp/cases_f16/peer_cases.json" ] || fail "--peers-cases DIR: the cases folders were not kept"
python3 "$src/benchmarks/peers/cpu_peers.py" --cases "$tmp/cases_f16" --out "$tmp/cpu_peers.json" >"$tmp/cpu_peers.out" 2>&1
rc=$?
[ "$rc" -eq 2 ] || fail "cpu_peers.py on f32 and f16 cases: exit $rc, expected 2"
grep -qF -- "the cases hold f16: cpu_peers.py times float32 only" "$tmp/cpu_peers.out" || { fail "cpu_peers.py on f16 cases: no clear message"; cat "$tmp/cpu_peers.out"; }
python3 "$src/benchmarks/peers/cpu_peers.py" --cases "$tmp/nosuch" --out "$tmp/cpu_peers.json" >"$tmp/cpu_peers.out" 2>&1
rc=$?
[ "$rc" -eq 2 ] && grep -qF "cannot read $tmp/nosuch/peer_cases.json" "$tmp/cpu_peers.out" ||
  { fail "cpu_peers.py --cases nosuch: exit $rc, expected 2 naming the manifest"; cat "$tmp/cpu_peers.out"; }
python3 "$src/benchmarks/peers/cpu_peers.py" --out "$tmp/cpu_peers.json" >/dev/null 2>&1
[ $? -eq 2 ] || fail "cpu_peers.py without --cases: expected exit 2"

# torch_sdpa.py: bad usage exits 2; without PyTorch or a GPU it exits 3, saying why, and writes the
# reason as skipped peers; `bench --peers` reports that as "peer unavailable" (exit 0).
torch_sdpa="$src/benchmarks/peers/torch_sdpa.py"
python3 "$torch_sdpa" --cases "$tmp/nosuch" --out "$tmp/torch.json" >"$tmp/torch.out" 2>&1
rc=$?
[ "$rc" -eq 2 ] && grep -qF "cannot read $tmp/nosuch/peer_cases.json" "$tmp/torch.out" ||
  { fail "torch_sdpa.py --cases nosuch: exit $rc, expected 2 with a clear message"; cat "$tmp/torch.out"; }
python3 "$torch_sdpa" --cases "$tmp/cases_f32" --backends flash,fast --out "$tmp/torch.json" >/dev/null 2>&1
[ $? -eq 2 ] || fail "torch_sdpa.py --backends flash,fast: expected exit 2"
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1; then
  echo "bench_smoke: PyTorch and a CUDA device are here: torch_sdpa.py's unavailable path not checked"
else
  python3 "$torch_sdpa" --cases "$tmp/cases_f16" --l2 hot --out "$tmp/torch/peers.json" >"$tmp/torch.out" 2>&1
  rc=$?
  [ "$rc" -eq 3 ] || { fail "torch_sdpa.py without PyTorch or a GPU: exit $rc, expected 3"; cat "$tmp/torch.out"; }
  grep -q "^torch_sdpa: peer unavailable: " "$tmp/torch.out" || fail "torch_sdpa.py: the reason is not printed"
  python3 - "$tmp/torch/peers.json" <<'PY' || fail "torch_sdpa.py unavailable: its JSON does not hold the skipped peers"
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["results"] == [] and doc["context"]["l2_mode"] == "hot", doc
assert doc["context"]["problem_list"]["timed"] == 6 and doc["context"]["problem_list"]["checks"] == 24, doc["context"]
assert [p["peer"] for p in doc["peers"]] == ["torch_sdpa_math", "torch_sdpa_flash", "torch_sdpa_efficient", "torch_sdpa_cudnn"], doc["peers"]
assert all(p["skipped"] for p in doc["peers"]), doc["peers"]
PY
  "$bin" bench --smoke --impl cpu_blocked --dtype f16 --masks causal --json '' --peers "python3 $torch_sdpa" >"$tmp/tpeers.out" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || { fail "bench --peers torch_sdpa.py without PyTorch or a GPU: exit $rc, expected 0"; tail -n 10 "$tmp/tpeers.out"; }
  grep -q "peer unavailable: torch_sdpa_math: " "$tmp/tpeers.out" || fail "bench --peers torch_sdpa.py: 'peer unavailable' not reported"
fi

# torch_sdpa.py's timing and records with a stand-in timer (no PyTorch needed): warm-up outside the marks,
# before_each (flush, hold) before each start mark, medians, and records that carry the harness's
# problem and divide its FLOPs and bytes (peer_cases.json) by the median.
python3 - "$torch_sdpa" "$tmp/cases_f16" <<'PY' || fail "torch_sdpa.py: the timing or record logic is wrong"
import importlib.util, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[1])))  # peer_problem.py, as when run as a script
spec = importlib.util.spec_from_file_location("torch_sdpa", sys.argv[1])
m = importlib.util.module_from_spec(spec)
sys.modules["torch_sdpa"] = m  # dataclasses look their module up
spec.loader.exec_module(m)

log = []
class FakeTimer:  # "time" advances 1 per call; marks are log positions
    def mark(self):
        log.append("mark")
        return len(log)
    def synchronize(self):
        log.append("sync")
    @staticmethod
    def seconds(a, b):
        return float(b - a - 1) * 1e-3
durations = iter([1, 5, 3])
def call():
    log.append("call")
    for _ in range(next(durations, 0)):
        log.append("work")
t = m.measure(call, FakeTimer(), repetitions=3, warmup=2, before_each=lambda: log.append("flush"))
# The two warm-up calls consume durations 1 and 5: the timed calls take 3, 0 and 0 "work" steps.
assert log[:9] == ["call", "work", "call", "work", "work", "work", "work", "work", "sync"], log
assert log[9:12] == ["flush", "mark", "call"], log
assert t["times"] == [0.004, 0.001, 0.001] and t["median_seconds"] == 0.001 and t["min_seconds"] == 0.001, t
assert t["calls_per_repetition"] == 1 and t["warmup_calls"] == 2

cases = m.load_cases(sys.argv[2])
p = [c for c in cases if c.role == "timed" and c.dtype == "f16"][-1]  # b=2 h=2 n=64 d=32, no mask
assert (p.b, p.h, p.n_q, p.d_k, p.causal) == (2, 2, 64, 32, "none"), p.repro
assert p.flops() == 2.0 * 2 * 2 * 64 * 64 * (32 + 32) and p.bytes_min() == 2 * 2 * 2 * 64 * 32 * 4, p.figures
r = m.timing_record("flash", "2.9.0", p, {"times": [0.002, 0.001, 0.003], "median_seconds": 0.002, "min_seconds": 0.001,
                                            "calls_per_repetition": 1, "warmup_calls": 3}, True, "cold")
assert r["peer"] == "torch_sdpa_flash" and r["backend"] == "FLASH_ATTENTION" and r["valid_target"] is True
assert abs(r["gflops_exact"] - p.flops() / 0.002 / 1e9) < 1e-9 and r["problem"]["repro"] == p.repro and r["problem"]["dtype"] == "f16"
assert abs(r["gbytes_per_second"] - p.bytes_min() / 0.002 / 1e9) < 1e-9
e = m.error_record("cudnn", "2.9.0", p, "RuntimeError: No available kernel", True)
assert e["error"].startswith("unsupported: ") and e["unsupported"] and "median_seconds" not in e
assert m.ulp("f16", 1.0) == 2.0 ** -10 and m.ulp("bf16", 3.0) == 2.0 ** -6 and m.ulp("f32", 0.0) == 2.0 ** -149
assert m.refused(RuntimeError("No available kernel. Aborting execution.")) and not m.refused(RuntimeError("CUDA error: illegal address"))
print("bench_smoke: torch_sdpa.py timing and records checked with a stand-in timer")
PY

echo "bench_smoke: $failures failed"
[ "$failures" -eq 0 ]
