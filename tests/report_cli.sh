#!/usr/bin/env bash
# Result files and `attnbench report` end to end: verify, bench and properties with --json and
# --shard; the shards partition the cases (families) and `report` merges them into the unsharded
# run's records; a verify and a bench run killed midway leave valid JSON with what finished,
# marked incomplete: report exits 1 on them (marking them in red), gate --write-baseline refuses them;
# bad input (missing file, malformed JSON, a foreign schema, an unknown record status, a link to
# /dev/zero or a FIFO, a bad --shard) exits 2 naming it; attnbench's files that are not results
# (a gate baseline, a cases manifest) are skipped with a note.
# Usage: report_cli.sh path/to/attnbench [OUTDIR]   (OUTDIR keeps the report for report_chromium)
set -u

bin=${1:?usage: report_cli.sh path/to/attnbench [OUTDIR]}
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
keep=${2:-}
. "$(dirname "$0")/cli_checks.sh"  # before the cd below: $0 may be relative
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 2

expect_err() {
  checks=$((checks + 1))
  grep -qF -- "$1" "$last.err" || { fail "$last: stderr lacks '$1'"; sed 's/^/    ! /' "$last.err" | tail -n 5; }
}

# Five tiny cases, every dtype.
cat >cases.txt <<'CASES'
b=1 hq=1 hkv=1 nq=3 nk=5 dk=4 dv=4 dtype=f32 causal=none regime=diffuse seed=1
b=1 hq=2 hkv=1 nq=4 nk=4 dk=8 dv=4 dtype=f16 causal=top_left regime=peaked seed=2
b=2 hq=1 hkv=1 nq=5 nk=7 dk=4 dv=8 dtype=bf16 causal=none pad=3,7 regime=saturated seed=3
b=1 hq=1 hkv=1 nq=6 nk=6 dk=4 dv=4 dtype=f64 causal=bottom_right regime=sparse_int seed=4
b=1 hq=1 hkv=1 nq=2 nk=9 dk=16 dv=4 dtype=f32 causal=none regime=large seed=5
CASES

# --- verify: whole, and in three shards ---------------------------------------------------------
run verify_all verify --impl cpu_naive --impl cpu_blocked --cases cases.txt --threads 1 --json verify.json
expect_rc 0
check "verify without a terminal prints plain progress lines" grep -qF "[verify] 10/10 (100%)" verify_all.out
check "no control characters off a terminal" bash -c "! grep -q \$'\\r' verify_all.out"
for i in 1 2 3; do
  run "verify_shard$i" verify --impl cpu_naive --impl cpu_blocked --cases cases.txt --threads 1 --shard "$i/3" --json "verify.$i.json"
  expect_rc 0
done
check "verify shard 1/3 says which cases it runs" grep -qF "shard 1/3: 2 of the 5 cases" verify_shard1.out

# --- bench: smoke sizes, whole and in two shards (by family) ----------------------------------
run bench_all bench --smoke --impl cpu_naive --impl cpu_blocked --dtype f32 --threads 1 --json bench.json
expect_rc 0
for i in 1 2; do
  run "bench_shard$i" bench --smoke --impl cpu_naive --impl cpu_blocked --dtype f32 --threads 1 --shard "$i/2" --json "bench.$i.json"
  expect_rc 0
done

# --- properties --json ---------------------------------------------------------------------------
run props properties --impl cpu_naive --property 1 --property 10 --property-cases 3 --seed 7 --json properties.json
expect_rc 0

# Schema fields of every kind, the shards' partition and the merge, checked with Python's json.
checks=$((checks + 1))
if ! python3 - <<'PY'; then
import json, sys
def load(p):
    with open(p) as f:
        return json.load(f)
ok = True
def need(cond, what):
    global ok
    if not cond:
        print("  " + what)
        ok = False
for path, schema in [("verify.json", "attnbench.verify"), ("bench.json", "attnbench.bench"), ("properties.json", "attnbench.properties"),
                     ("verify.2.json", "attnbench.verify"), ("bench.1.json", "attnbench.bench")]:
    d = load(path)
    need(d.get("schema") == schema, f"{path}: schema {d.get('schema')!r}, expected {schema}")
    need(d.get("schema_version") == 1, f"{path}: schema_version {d.get('schema_version')!r}")
    ctx = d["attnbench"]["context"] if schema == "attnbench.bench" else d.get("context", {})
    for key in ["git_revision", "build_type", "compiler", "compiler_flags", "cpu_model", "cpu_cores", "cpu_mhz", "gpu", "date"]:
        need(key in ctx, f"{path}: context lacks {key}")
whole = load("verify.json")
keys = lambda recs: sorted((r["implementation"], r["case_index"], r["repro"], r["status"]) for r in recs)
shards = [load(f"verify.{i}.json") for i in (1, 2, 3)]
seen = [r["case_index"] for s in shards for r in s["records"] if r["implementation"] == "cpu_naive"]
need(sorted(seen) == list(range(5)), f"verify shards: case indices {sorted(seen)} are not each of 0..4 exactly once")
need(keys(r for s in shards for r in s["records"]) == keys(whole["records"]), "verify shards together differ from the whole run")
for i, s in enumerate(shards, 1):
    need(s.get("shard") == {"index": i, "count": 3} or (s.get("shard", {}).get("index") == i and s["shard"].get("count") == 3),
         f"verify.{i}.json: shard field {s.get('shard')}")
    need(all(r["case_index"] % 3 == i - 1 for r in s["records"]), f"verify.{i}.json: a case of another shard")
fam = lambda d: sorted({b["run_name"].split("/n:")[0] for b in d["benchmarks"] if b.get("run_type") == "iteration"})
b1, b2, ball = load("bench.1.json"), load("bench.2.json"), load("bench.json")
need(not set(fam(b1)) & set(fam(b2)), f"bench shards overlap: {set(fam(b1)) & set(fam(b2))}")
need(sorted(fam(b1) + fam(b2)) == fam(ball), f"bench shards {fam(b1)} + {fam(b2)} != {fam(ball)}")
need(b1.get("shard", {}).get("count") == 2, "bench.1.json lacks shard")
need(ball["attnbench"].get("complete") is True, "bench.json: attnbench.complete is not true")
p = load("properties.json")
need(len(p["records"]) == 2 and all(r["verdict"] == "held" for r in p["records"]), f"properties.json records: {p['records']}")
sys.exit(0 if ok else 1)
PY
  fail "result files (python checks above)"
fi

# --- report: the shards merge into what the whole runs give -------------------------------------
run report_whole report verify.json bench.json properties.json --out whole
expect_rc 0
run report_shards report verify.3.json verify.1.json verify.2.json bench.2.json bench.1.json properties.json --out merged
expect_rc 0
check "report prints the HTML path" grep -qF "merged/report.html" report_shards.out
check "report prints the Markdown path" grep -qF "merged/report.md" report_shards.out
for section in "## Verdicts per implementation × dtype × mask" "## Worst errors (with repro strings)" "## Throughput" \
  "## Fitted exponents" "## Properties (RapidCheck)" "## Why the scale is 1/√d_k"; do
  check "report.md has '$section'" grep -qF -- "$section" merged/report.md
done
check "the merged verdict table equals the unsharded one" \
  diff <(sed -n '/^## Verdicts/,/^## Worst/p' whole/report.md) <(sed -n '/^## Verdicts/,/^## Worst/p' merged/report.md)
check "report.html has SVG charts" grep -qF "<svg" merged/report.html
check "report.html fetches nothing" bash -c "! grep -qE 'https?://' merged/report.html"
run report_partial report verify.1.json verify.3.json --out partial
expect_rc 0
expect_err "shard(s) 2 of 3 missing"

# --- bad input: exit 2, naming the file --------------------------------------------------------
run missing report nosuch.json --out bad
expect_rc 2
expect_err "nosuch.json: no such file"
printf '{"schema": "attnbench.verify", "records": [' >truncated.json
run malformed report truncated.json --out bad
expect_rc 2
expect_err "truncated.json: not valid JSON"
printf '{"schema": "attnbench.elsewhere", "records": []}' >foreign.json
run foreign report foreign.json --out bad
expect_rc 2
expect_err "foreign.json: unknown schema 'attnbench.elsewhere'"
python3 -c "import json; d=json.load(open('bench.json')); d['attnbench']['context']['git_revision']='0000000deadbeef'; json.dump(d, open('old.json','w'))"
run mixed report verify.json old.json --out bad
expect_rc 2
expect_err "--allow-mixed-revisions"
# A status the report does not know (the gate refuses it too): exit 2 naming file and record.
python3 -c "import json; d=json.load(open('verify.json')); d['records'][3]['status']='banana'; json.dump(d, open('banana.json','w'))"
run banana report banana.json --out bad
expect_rc 2
expect_err "banana.json: records[3] ("
expect_err "unknown status 'banana'"
# Not a file to read from: a link to /dev/zero or a FIFO is refused, not read without end.
ln -s /dev/zero zero.json
mkfifo fifo.json
for input in zero fifo; do
  timeout 20 "$bin" report "$input.json" --out bad >"report_$input.out" 2>"report_$input.err"
  rc=$? last=report_$input  # as run does, under a timeout: a read without end must not hang the test
  expect_rc 2
  expect_err "$input.json: not a regular file"
  timeout 20 "$bin" gate --write-baseline "gate_$input.json" "$input.json" >"gate_$input.out" 2>"gate_$input.err"
  rc=$? last=gate_$input
  expect_rc 2
  expect_err "$input.json: not a regular file"
done

# --- inputs are chosen by schema: what a glob such as results/*.json picks up besides results ----
# A gate baseline and a cases manifest are skipped with a note; check's results (the file
# route's) are merged as their own implementation, and the report says so.
mkdir -p glob
cp verify.json bench.json properties.json glob/
run glob_baseline gate --write-baseline glob/baseline.json verify.json
expect_rc 0
run glob_cases cases --out glob_cases --case "$(head -1 cases.txt)"
expect_rc 0
cp glob_cases/manifest.json glob/cases.json
run glob_check_outputs verify --impl cpu_naive --case "$(head -1 cases.txt)" --json ''
expect_rc 0
python3 - <<'PY'
import json
d = json.load(open("verify.json"))
d["command"] = "check"
for r in d["records"]:
    r["implementation"] = "files:out"
json.dump(d, open("glob/check.json", "w"))
PY
run glob report glob/*.json --out glob_report
expect_rc 0
expect_err "note: skipped glob/baseline.json: a gate baseline"
expect_err "note: skipped glob/cases.json: a cases directory's manifest"
expect_err "glob/check.json holds \`attnbench check\` results"
check "the report lists check.json as check's" grep -qF "verify (check)" glob_report/report.md
check "the report lists the baseline nowhere" bash -c "! grep -qF baseline.json glob_report/report.md"
run only_baseline report glob/baseline.json --out bad
expect_rc 2
expect_err "none of the files given is a result file"

for bad in 0/3 4/3 x 1/0; do
  run "shard_${bad//\//_of_}" verify --cases cases.txt --shard "$bad" --json ''
  expect_rc 2
  expect_err "--shard"
done
run bench_shard_bad bench --smoke --shard 3/2 --json ''
expect_rc 2
expect_err "--shard"

# --- a run killed midway keeps what it measured ---------------------------------------------------
# verify: 40 cases large enough that the run takes seconds; killed once the file holds two records.
for s in $(seq 1 40); do echo "b=1 hq=4 hkv=4 nq=96 nk=96 dk=32 dv=32 dtype=f32 causal=none regime=diffuse seed=$s"; done >slow_cases.txt
"$bin" verify --impl cpu_naive --cases slow_cases.txt --threads 1 --json killed_verify.json >killed_verify.out 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  [ "$(grep -c '"case_index"' killed_verify.json 2>/dev/null)" -ge 2 ] && break
  sleep 0.05
done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
checks=$((checks + 1))
python3 - <<'PY' || fail "verify killed midway: the JSON is not valid or holds no finished case"
import json
d = json.load(open("killed_verify.json"))
assert d["schema"] == "attnbench.verify" and len(d["records"]) >= 2, d
assert all(r["status"] in ("pass", "fail", "skip") for r in d["records"])
assert d["complete"] is False, "a killed run's file says it finished"
assert json.load(open("verify.json"))["complete"] is True
print(f"  verify killed after {len(d['records'])} of 40 cases: valid JSON")
PY
# bench: killed once the file holds a finished benchmark.
"$bin" bench --impl cpu_naive --dtype f32 --masks none --min-n 64 --max-n 1024 --threads 1 --json killed_bench.json >killed_bench.out 2>&1 &
pid=$!
for _ in $(seq 1 1200); do
  grep -qs '"run_type"' killed_bench.json && break
  sleep 0.05
done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
checks=$((checks + 1))
python3 - <<'PY' || fail "bench killed midway: the JSON is not valid or holds no finished benchmark"
import json
d = json.load(open("killed_bench.json"))
assert d["schema"] == "attnbench.bench" and len(d["benchmarks"]) >= 1, d
print(f"  bench killed after {len(d['benchmarks'])} benchmark(s), complete={d['attnbench']['complete']}: valid JSON")
PY
# Incomplete is not a pass: the report is written, marked, and exits 1 (0 with --allow-incomplete);
# no baseline is taken from it.
run report_killed report killed_verify.json killed_bench.json --out killed
expect_rc 1
expect_err "INCOMPLETE: killed_verify.json, killed_bench.json are of a run that did not finish"
check "the report marks the killed runs first, in red" grep -qF 'class="fail">⚠ <code>killed_verify.json</code> is of a run that did not finish' killed/report.html
check "report.md says it too" grep -qF "**⚠ \`killed_bench.json\` is of a run that did not finish" killed/report.md
run report_killed_allowed report killed_verify.json --out killed_allowed --allow-incomplete
expect_rc 0
run baseline_killed gate --write-baseline killed_baseline.json killed_verify.json
expect_rc 2
expect_err "killed_verify.json is of a run that did not finish (\"complete\": false): a baseline is taken from whole runs only"
check "no baseline written from a killed run" test ! -e killed_baseline.json

# --- a results path that turns into a link while the run goes on: nothing measured is lost ----
# The run goes on; its last save puts everything in PATH.rescued-PID.json beside the path, exit 2
# says so, and the link is left as it was.
moved() {  # moved NAME ARGS...: runs attnbench ARGS in the background, replaces NAME.json by a link once written
  local name=$1
  shift
  "$bin" "$@" --json "$tmp/$name.json" >"$name.out" 2>"$name.err" &
  local pid=$!
  for _ in $(seq 1 1200); do
    grep -qs "$marker" "$name.json" && break
    sleep 0.05
  done
  rm -f "$name.json" && ln -s /dev/null "$name.json"
  wait "$pid"
  rc=$? last=$name
}
# Seconds of cases after the first is saved: the link comes long before the end.
for s in $(seq 1 16); do echo "b=1 hq=4 hkv=4 nq=256 nk=256 dk=32 dv=32 dtype=f32 causal=none regime=diffuse seed=$s"; done >slower_cases.txt
marker='"case_index"'
moved moved_verify verify --impl cpu_naive --cases slower_cases.txt --threads 1
expect_rc 2
expect_err "the results were saved to $tmp/moved_verify.json.rescued-"
marker='"run_type"'
moved moved_bench bench --impl cpu_naive --dtype f32 --masks none --min-n 64 --max-n 512 --threads 1
expect_rc 2
expect_err "the results were saved to $tmp/moved_bench.json.rescued-"
checks=$((checks + 1))
python3 - <<'PY' || fail "moved: the rescued results are incomplete or the links were replaced"
import glob, json, os
for name, kind, key, count in (("moved_verify", "attnbench.verify", "records", 16), ("moved_bench", "attnbench.bench", "benchmarks", 4)):
    assert os.readlink(name + ".json") == "/dev/null", name
    (rescued,) = glob.glob(name + ".json.rescued-*.json")
    d = json.load(open(rescued))
    assert d["schema"] == kind and len(d[key]) >= count, (name, len(d[key]))
print("  results rescued from paths that became links mid-run: complete")
PY

if [ -n "$keep" ]; then
  mkdir -p "$keep" && cp whole/report.html whole/report.md "$keep/"
fi
finish report_cli
