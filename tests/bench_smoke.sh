#!/usr/bin/env bash
# `attnbench bench --smoke`: every family of every built-in implementation runs once at tiny
# sizes without an error, and the JSON is Google Benchmark's (what compare.py reads) with our
# context, peaks and fits. Also the bench command's bad-input contract (exit 2, nothing written).
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

"$bin" bench --smoke --min-n 100 --json "$tmp/bad/bench.json" >/dev/null 2>&1
[ $? -eq 0 ] || fail "--smoke must ignore --min-n"
"$bin" bench --min-n 100 --json "$tmp/bad2/bench.json" >"$tmp/bad.out" 2>"$tmp/bad.err"
[ $? -eq 2 ] && grep -qF -- "--min-n 100 is not a power of two" "$tmp/bad.err" || fail "--min-n 100 was not rejected"

echo "bench_smoke: $failures failed"
[ "$failures" -eq 0 ]
