#!/usr/bin/env bash
# `attnbench bench --smoke`: every family of every built-in implementation runs once at tiny
# sizes without an error, and the JSON is Google Benchmark's (what compare.py reads) with our
# context, peaks and fits; `--peers` with a fake peers command (the side-by-side table, the JSON
# comparisons, a failing command). Also the bench command's bad-input contract (exit 2, nothing written).
# Usage: bench_smoke.sh path/to/attnbench
set -u

bin=${1:?usage: bench_smoke.sh path/to/attnbench}
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
[ -x "$bin" ] || { echo "bench_smoke: '$bin' is not an executable" >&2; exit 2; }

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

"$bin" list >"$tmp/list.out" 2>&1 || fail "attnbench list failed"
# Implementations and the dtypes each accepts, from `attnbench list`.
awk '/^[a-z]/ {name=$1} /dtypes:/ {sub(/.*dtypes: /, ""); sub(/;.*/, ""); gsub(/ /, ""); print name, $0}' "$tmp/list.out" >"$tmp/impls.txt"

if ! python3 - "$tmp/out/bench.json" "$tmp/impls.txt" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
impls = {}
for line in open(sys.argv[2]):
    name, dtypes = line.split()
    impls[name] = dtypes.split(",")
assert impls, "no implementations listed"

ctx = doc["context"]
for key in ("git_revision", "compiler", "compiler_flags", "cpu_model", "threads", "build_type",
            "peak_fma_gflops", "peak_sgemm_gflops", "roofline_gflops", "rss_growth_method"):
    assert key in ctx, "context lacks " + key
assert float(ctx["peak_fma_gflops"]) > 0 and float(ctx["peak_sgemm_gflops"]) > 0
assert abs(float(ctx["roofline_gflops"]) - min(float(ctx["peak_fma_gflops"]), float(ctx["peak_sgemm_gflops"]))) < 0.01

runs, bigo, rms = {}, set(), set()
for b in doc["benchmarks"]:
    assert not b.get("error_occurred", False), (b["name"], b.get("error_message"))
    family = b["run_name"].split("/n:")[0].split("/iterations:")[0]
    if b["run_type"] == "iteration":
        # What compare.py reads of every run.
        for key in ("name", "real_time", "cpu_time", "time_unit", "iterations", "family_index", "per_family_instance_index"):
            assert key in b, (b["name"], key)
        assert b["iterations"] == 1, b["name"]
        assert b["time_unit"] == "ms", b["name"]
        for counter in ("gflops_exact", "gflops_published", "gbytes_per_second", "peak_fraction", "workspace_bytes", "rss_growth_bytes"):
            assert counter in b, (b["name"], counter)
        assert b["gflops_exact"] > 0 and b["gflops_published"] >= b["gflops_exact"] * 0.9, b["name"]
        runs.setdefault(family, set()).add(int(b["name"].split("/n:")[1].split("/")[0]))
    elif b.get("aggregate_name") == "BigO":
        assert b["big_o"] == "N^2", b
        bigo.add(family)
    elif b.get("aggregate_name") == "RMS":
        rms.add(family)

expected = {f"{impl}/{dt}/d64/{mask}" for impl, dts in impls.items() for dt in dts for mask in ("none", "causal")}
missing = expected - set(runs)
assert not missing, "families that did not run: " + ", ".join(sorted(missing))
for family in expected:
    assert runs[family] == {16, 32, 64}, (family, runs[family])
    assert family in bigo and family in rms, family + " has no complexity rows"

section = doc["attnbench"]
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
rows=$(awk '/^implementation dtype/ {table=1; next} /^Scaling/ {table=0} table && $1 == "cpu_blocked" {print $5}' "$tmp/reps.out" | tr '\n' ' ')
[ "$rows" = "16 32 64 " ] || { fail "with repetitions the table's n column is '$rows', expected '16 32 64 '"; tail -n 30 "$tmp/reps.out"; }

# --- Google Benchmark's own compare tool reads the JSON --------------------------------------------
# (Debian's libbenchmark-tools, installed by ci/install-deps.sh, run by Debian's own python3:
# a python3 earlier on PATH, e.g. pyenv's, does not see python3-scipy.) Comparing the run with
# itself must list every benchmark with a zero change.
compare=/usr/share/benchmark/compare.py
debian_python=/usr/bin/python3
if [ -f "$compare" ] && "$debian_python" -c "import scipy" 2>/dev/null; then
  if "$debian_python" "$compare" --no-color benchmarks "$tmp/out/bench.json" "$tmp/out/bench.json" >"$tmp/compare.out" 2>&1; then
    compared=$(grep -c -E '^cpu_[a-z_]+/[^ ]+/real_time +[-+]0\.0000 ' "$tmp/compare.out")
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
# The fake stands in for benchmarks/peers/cpu_peers.py (no onnxruntime or jax needed): it parses the
# arguments bench appends, prints progress on stdout and stderr, and writes the script's JSON schema
# with made-up medians: peer_ok (valid; an error record at none/n=32), peer_bad (fastest, but failed
# its checks: never the target), peer_nochk (checks skipped: valid_target null), peer_missing
# (skipped); Infinity and NaN in the checks, as Python's json writes them. It exits 1, as the script
# does when a peer fails its checks. --mode exit3|nofile|malformed makes it fail.
cat >"$tmp/fake_peers.py" <<'PY'
import argparse, json, sys
ap = argparse.ArgumentParser()
ap.add_argument("--mode", default="ok")
for name in ("--min-n", "--max-n", "--threads"):
    ap.add_argument(name, type=int, required=True)
ap.add_argument("--masks", required=True)
ap.add_argument("--out", required=True)
a = ap.parse_args()
print(f"fake_peers: min-n {a.min_n} max-n {a.max_n} threads {a.threads} masks {a.masks} out {a.out}", flush=True)
print("fake_peers: progress on stderr", file=sys.stderr, flush=True)
if a.mode == "exit3":
    sys.exit(3)
if a.mode == "nofile":
    sys.exit(0)
if a.mode == "malformed":
    open(a.out, "w").write("{not json")
    sys.exit(0)
ns, n = [], a.min_n
while n <= a.max_n:
    ns.append(n)
    n *= 2
peers = [{"peer": "peer_ok", "peer_version": "1.0", "checked": [], "valid_target": True},
         {"peer": "peer_bad", "peer_version": "2.0", "valid_target": False,
          "checked": [{"problem": "b=1 ...", "pass": False, "max_abs_error": float("inf"), "ratio_to_naive": float("nan")}]},
         {"peer": "peer_nochk", "peer_version": "3.0", "checked": [], "valid_target": None},
         {"peer": "peer_missing", "skipped": "ModuleNotFoundError: No module named 'peer_missing'"}]
results = []
for mask in a.masks.split(","):
    causal = {"none": "none", "causal": "top_left"}[mask]
    for n in ns:
        problem = {"repro": f"b=1 hq=8 hkv=8 nq={n} nk={n} dk=64 dv=64 dtype=f32 causal={causal} regime=diffuse seed=0",
                   "b": 1, "h_q": 8, "h_kv": 8, "n_q": n, "n_k": n, "d_k": 64, "d_v": 64, "dtype": "f32", "causal": causal}
        def record(peer, version, median, valid):
            return {"peer": peer, "peer_version": version, "problem": problem, "median_seconds": median,
                    "min_seconds": median, "times": [median], "valid_target": valid}
        if causal == "none" and n == 32:
            results.append({"peer": "peer_ok", "peer_version": "1.0", "problem": problem, "error": "RuntimeError: made up"})
        else:
            results.append(record("peer_ok", "1.0", n * 1e-5, True))
        results.append(record("peer_bad", "2.0", n * 1e-9, False))
        results.append(record("peer_nochk", "3.0", n * 3e-5, None))
with open(a.out, "w") as f:
    json.dump({"context": {"args": vars(a)}, "peers": peers, "results": results}, f, indent=2)
sys.exit(1)
PY
fake_peers="python3 $tmp/fake_peers.py"

"$bin" bench --smoke --dtype f32 --threads 1 --json "$tmp/peers/bench.json" --peers "$fake_peers" >"$tmp/peers.out" 2>"$tmp/peers.err"
rc=$?
if [ "$rc" -ne 0 ]; then
  fail "bench --smoke --dtype f32 --peers FAKE exited $rc (a peer failing its own checks is not our failure: expected 0)"
  tail -n 40 "$tmp/peers.out"
  sed 's/^/  ! /' "$tmp/peers.err" | tail -n 20
fi
grep -q "^fake_peers: min-n 16 max-n 64 threads 1 masks none,causal out $tmp/peers/bench.peers.json$" "$tmp/peers.out" ||
  fail "--peers: the command's stdout did not stream through with the expected arguments"
grep -q "^fake_peers: progress on stderr" "$tmp/peers.err" || fail "--peers: the command's stderr did not stream through"
grep -q "^Side by side with the peers (medians, same run)" "$tmp/peers.out" || fail "--peers: no side-by-side table"
grep -q "peer_bad FAILED" "$tmp/peers.out" || fail "--peers: the invalid peer is not reported prominently"
grep -q "peer peer_missing: skipped" "$tmp/peers.out" || fail "--peers: the skipped peer is not reported"
grep -q "peer_ok none n=32: RuntimeError: made up" "$tmp/peers.out" || fail "--peers: the peer's error record is not reported"
if ! python3 - "$tmp/peers/bench.json" "$tmp/peers.out" <<'PY'
import json, re, sys
doc = json.load(open(sys.argv[1]))
table = open(sys.argv[2]).read().split("Side by side with the peers", 1)[1]
section = doc["attnbench"]["peers"]
assert section["exit_code"] == 1 and section["status"] == "peer_checks_failed", section["status"]
assert section["invalid_peers"] == ["peer_bad"], section["invalid_peers"]
assert section["json"] == sys.argv[1].replace("bench.json", "bench.peers.json"), section["json"]
assert [p["peer"] for p in section["peers"]] == ["peer_ok", "peer_bad", "peer_nochk", "peer_missing"]
assert len(section["results"]) == 3 * 2 * 3

ours = {}  # (implementation, mask, n) -> time in ms, from Google Benchmark's own records
for b in doc["benchmarks"]:
    if b["run_type"] == "iteration":
        impl, dtype, d, mask = b["run_name"].split("/n:")[0].split("/")
        ours[(impl, mask, int(b["name"].split("/n:")[1].split("/")[0]))] = b["real_time"]
comparisons = {(c["mask"], c["n"]): c for c in section["comparisons"]}
assert set(comparisons) == {(m, n) for m in ("none", "causal") for n in (16, 32, 64)}, sorted(comparisons)
impls = sorted({k[0] for k in ours})
for (mask, n), c in comparisons.items():
    assert c["peer_mask"] == {"none": "none", "causal": "top_left"}[mask]
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
    row = re.search(r"^%s +%d +(.*)$" % (mask, n), table, re.M)
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
grep -q "^fake_peers: min-n 16 max-n 64 threads [0-9]* masks causal out " "$tmp/peers2.out" ||
  fail "--peers --masks bottom_right: the command did not get --masks causal"
grep -qE "^causal_bottom_right +64 .* peer_ok" "$tmp/peers2.out" || fail "--peers --masks bottom_right: no compared row"
temp_out=$(sed -n 's/^fake_peers: .* out //p' "$tmp/peers2.out")
[ -n "$temp_out" ] && [ ! -e "$temp_out" ] || fail "--peers --json '': the temporary peers file $temp_out was not removed"

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
assert peers["exit_code"] == (3 if sys.argv[2] == "exit3" else 0), peers["exit_code"]
assert "comparisons" not in peers
PY
}
peers_fails exit3 "the peers command failed: 'python3 $tmp/fake_peers.py --mode exit3' exited 3"
peers_fails nofile "but it did not write $tmp/pfail/bench.peers.json"
peers_fails malformed "bench.peers.json is not valid JSON"

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
bad_input "--peers: --heads 4 does not match the peers' problem list" --dtype f32 --heads 4 --peers "$fake_peers"
bad_input "--peers: --d 128 does not match" --dtype f32 --d 128 --peers "$fake_peers"
bad_input "--peers: --dtype f16 does not match" --dtype f32,f16 --peers "$fake_peers"
bad_input "--peers with --smoke needs --dtype f32" --peers "$fake_peers"
bad_input "--peers needs a command" --dtype f32 --peers ' '

"$bin" bench --smoke --min-n 100 --json "$tmp/bad/bench.json" >/dev/null 2>&1
[ $? -eq 0 ] || fail "--smoke must ignore --min-n"
"$bin" bench --min-n 100 --json "$tmp/bad2/bench.json" >"$tmp/bad.out" 2>"$tmp/bad.err"
[ $? -eq 2 ] && grep -qF -- "--min-n 100 is not a power of two" "$tmp/bad.err" || fail "--min-n 100 was not rejected"

echo "bench_smoke: $failures failed"
[ "$failures" -eq 0 ]
