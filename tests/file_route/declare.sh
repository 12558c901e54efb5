#!/usr/bin/env bash
# The file route with a capabilities declaration (`cases --declare`, `check --declare`): a kernel
# that declares f64 only, no bias, no GQA and causal top-left only gets every case of cases.txt as
# its projection (the manifest keeps what each was projected from), and check passes them; with
# --no-projection the undeclared cases are skipped with their reasons, their missing outputs are
# no failure, while a wrong or missing output of a declared case still fails (exit 1); fully
# masked rows (cases 3 and 4) are judged by the declared policy (NaN rows pass under "nan", fail
# under "zeros"); a malformed declaration is bad input (exit 2) naming the fault.
# Usage: declare.sh path/to/attnbench path/to/file_route_standin
set -u

bin=${1:?usage: declare.sh ATTNBENCH STANDIN}
standin=${2:?usage: declare.sh ATTNBENCH STANDIN}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../cli_checks.sh"
bin=$(absolute "$bin")
standin=$(absolute "$standin")
enter_scratch_dir
json_check() {  # json_check WHAT FILE PYTHON: the Python (with doc = the JSON file) asserts
  checks=$((checks + 1))
  python3 -c "import json, sys
doc = json.load(open(sys.argv[1]))
$3" "$2" || fail "$1"
}

cat >narrow.json <<'EOF'
{"schema": "attnbench.capabilities", "version": 1, "summary": "a narrow kernel",
 "dtypes": ["f64"], "masks": ["causal_top_left", "padding_per_batch", "padding_per_query", "bool_mask"], "gqa": false}
EOF

# --- projected: every case written as its projection, and checked as it -----------------------
run cases cases --out cases --cases "$here/cases.txt" --declare narrow.json
expect_rc 0
expect_file_has cases.out "5 case(s) written to cases (5 projected onto narrow.json, 0 skipped"
expect_file_has cases.out "projected (dtype f32 -> f64) from b=1 hq=2 hkv=2 nq=17"
expect_file_has cases.out "projected (dtype f32 -> f64, h_kv 1 -> 2, bias dropped) from"
json_check "the manifest does not keep the declaration and each case's projection" cases/manifest.json '
cases = {c["index"]: c for c in doc["cases"]}
assert doc["declaration"]["dtypes"] == ["f64"] and doc["declaration"]["gqa"] is False, doc["declaration"]
assert doc["skipped"] == [], doc["skipped"]
assert all(c["dtype"] == "f64" for c in cases.values()), [c["dtype"] for c in cases.values()]
assert cases[1]["projection"] == "h_kv 2 -> 4, causal bottom_right -> none, padding none -> per query", cases[1]["projection"]
assert "causal=bottom_right" in cases[1]["projected_from"] and "causal=none" in cases[1]["repro"], cases[1]
assert cases[4]["bias"] is None and "bias=1@h" in cases[4]["projected_from"], cases[4]
assert all(c["fully_masked_rows"] == "zeros" for c in cases.values())'
"$standin" cases out || fail "the stand-in failed on the projected cases"
# check takes the manifest's declaration: the projections are found, none is skipped.
run projected check --cases cases --outputs out --threads 1 --json projected.json
expect_rc 0
expect_file_has projected.out "declared by cases/manifest.json (its declaration): fully masked rows zeros"
expect_file_has projected.out "5 passed, 0 failed, 0 skipped over 5 cases"
json_check "check.json does not say what each case was projected from" projected.json '
records = doc["records"]
assert len(records) == 5 and all("projected_from" in r for r in records), records
assert all(r["status"] == "pass" for r in records)'
# A wrong value in a declared (projected) case still fails.
"$standin" cases wrong --wrong-value 2 || fail "the stand-in failed"
run wrong check --cases cases --outputs wrong --threads 1 --json ""
expect_rc 1
expect_file_has wrong.out "4 passed, 1 failed, 0 skipped over 5 cases"
expect_file_has wrong.out "FAIL files:wrong on case 2"

# --- skipped: --no-projection writes only what is declared; check skips the rest --------------
run skipcases cases --out skipcases --cases "$here/cases.txt" --declare narrow.json --no-projection
expect_rc 0
expect_file_has skipcases.out "0 case(s) written to skipcases (0 projected onto narrow.json, 5 skipped"
expect_file_has skipcases.out "case    0: skipped: dtype f32 not declared"
expect_file_has skipcases.out "case    2: skipped: dtype f16 not declared"
# Case 1 is f64 but GQA with a bottom-right mask: not declared either.
expect_file_has skipcases.out "case    1: skipped: GQA/MQA (h_kv < h_q) not declared"
cat >f64_gqa.json <<'EOF'
{"dtypes": ["f64"], "masks": ["causal_bottom_right"], "different_dk_dv": true}
EOF
run skipcases cases --out skipcases --cases "$here/cases.txt" --declare f64_gqa.json --no-projection
expect_rc 0
expect_file_has skipcases.out "1 case(s) written to skipcases (0 projected onto f64_gqa.json, 4 skipped"
checks=$((checks + 1))
[ ! -e skipcases/q_0000.npy ] && [ -e skipcases/q_0001.npy ] || fail "--no-projection wrote a skipped case or lost the declared one"
"$standin" skipcases skipout || fail "the stand-in failed on the declared case"
run skipped check --cases skipcases --outputs skipout --threads 1 --json skipped.json
expect_rc 0
expect_file_has skipped.out "1 passed, 0 failed, 4 skipped over 5 cases"
# One line for the skipping implementation, its reasons most frequent first.
expect_file_has skipped.out "skipped 4 of 5 cases for files:skipout: dtype f32 not declared (2); "
expect_file_has skipped.out "dtype bf16 not declared (1)"
json_check "check.json does not record the skips with their reasons" skipped.json '
statuses = {r["case_index"]: (r["status"], r.get("skip_reason", "")) for r in doc["records"]}
assert statuses[1] == ("pass", ""), statuses
assert statuses[3] == ("skip", "dtype bf16 not declared"), statuses'
# The declared case's output missing is still a failure.
rm skipout/out_0001.npy
run skipmissing check --cases skipcases --outputs skipout --threads 1 --json ""
expect_rc 1
expect_file_has skipmissing.out "skipout/out_0001.npy: no such file"

# --- check --declare on a directory written without one: the undeclared cases are skipped -----
run plain cases --out plain --cases "$here/cases.txt"
expect_rc 0
"$standin" plain plainout --no-lse || fail "the stand-in failed"
rm plainout/out_0000.npy plainout/out_0002.npy  # undeclared (f32, f16): their absence is no failure
run plaindeclared check --cases plain --outputs plainout --declare f64_gqa.json --threads 1 --json ""
expect_rc 0
expect_file_has plaindeclared.out "declared by f64_gqa.json"
expect_file_has plaindeclared.out "1 passed, 0 failed, 4 skipped over 5 cases"
# Without the declaration every case is expected, as before.
run plainundeclared check --cases plain --outputs plainout --threads 1 --json ""
expect_rc 1
expect_file_has plainundeclared.out "plainout/out_0000.npy: no such file"

# --- fully masked rows by the declared policy (case 3 has a fully masked batch) ----------------
cat >nanrows.json <<'EOF'
{"dtypes": ["f64", "f32", "f16", "bf16"], "fully_masked": "nan"}
EOF
run nancases cases --out nancases --cases "$here/cases.txt" --declare nanrows.json
expect_rc 0
json_check "the manifest does not state the nan policy per case" nancases/manifest.json '
assert all(c["fully_masked_rows"] == "nan" for c in doc["cases"])'
"$standin" nancases nanout || fail "the stand-in failed"
run nanpass check --cases nancases --outputs nanout --threads 1 --json ""
expect_rc 0
expect_file_has nanpass.out "declared by nancases/manifest.json (its declaration): fully masked rows nan"
expect_file_has nanpass.out "5 passed, 0 failed, 0 skipped over 5 cases"
# The same NaN rows against a declaration of zeros: cases 3 and 4 fail, naming the policy.
cat >zerorows.json <<'EOF'
{"dtypes": ["f64", "f32", "f16", "bf16"], "fully_masked": "zeros"}
EOF
run nanfail check --cases nancases --outputs nanout --declare zerorows.json --threads 1 --json ""
expect_rc 1
expect_file_has nanfail.out "3 passed, 2 failed, 0 skipped over 5 cases"  # case 4 has a fully masked row too
expect_file_has nanfail.out "fully masked rows break the declared policy (zeros)"
# Zeros written where NaN is declared fail too.
"$standin" nancases zeroout --fully-masked zeros || fail "the stand-in failed"
run zerofail check --cases nancases --outputs zeroout --threads 1 --json ""
expect_rc 1
expect_file_has zerofail.out "fully masked rows break the declared policy (nan)"
# "any": whatever a fully masked row holds (here 7s) passes, and only there: a wrong value elsewhere still fails.
"$standin" nancases junkout --fully-masked junk || fail "the stand-in failed"
cat >anyrows.json <<'EOF'
{"dtypes": ["f64", "f32", "f16", "bf16"], "fully_masked": "any"}
EOF
run anypass check --cases nancases --outputs junkout --declare anyrows.json --threads 1 --json ""
expect_rc 0
expect_file_has anypass.out "declared by anyrows.json: fully masked rows any"
expect_file_has anypass.out "5 passed, 0 failed, 0 skipped over 5 cases"
run junkfail check --cases nancases --outputs junkout --declare zerorows.json --threads 1 --json ""
expect_rc 1
expect_file_has junkfail.out "fully masked rows break the declared policy (zeros): 16 hold finite non-zero values"
"$standin" nancases junkwrong --fully-masked junk --wrong-value 0 || fail "the stand-in failed"
run anywrong check --cases nancases --outputs junkwrong --declare anyrows.json --threads 1 --json ""
expect_rc 1
expect_file_has anywrong.out "4 passed, 1 failed, 0 skipped over 5 cases"

# --- malformed declarations: exit 2 naming the fault, for cases and check alike ----------------
bad() {  # bad NAME CONTENT EXPECTED
  printf '%s\n' "$2" >"$1.json"
  run "$1" cases --out "$1.cases" --cases "$here/cases.txt" --declare "$1.json"
  expect_rc 2
  expect_file_has "$1.err" "$3"
  checks=$((checks + 1))
  [ ! -e "$1.cases/manifest.json" ] || fail "cases wrote $1.cases despite a malformed declaration"
  run "$1.check" check --cases cases --outputs out --declare "$1.json" --json ""
  expect_rc 2
  expect_file_has "$1.check.err" "$3"
}
bad notjson '{"dtypes": ["f64"' "notjson.json: not valid JSON"
bad nodtypes '{"masks": []}' "nodtypes.json: 'dtypes' is missing"
bad baddtype '{"dtypes": ["f65"]}' "baddtype.json: 'dtypes': unknown dtype 'f65'"
bad badmask '{"dtypes": ["f32"], "masks": ["causal"]}' "badmask.json: 'masks': unknown mask 'causal'"
bad typo '{"dtypes": ["f32"], "gqa_support": false}' "typo.json: unknown key 'gqa_support'"
bad badtype '{"dtypes": ["f32"], "gqa": "no"}' "badtype.json: 'gqa' must be true or false"
bad badpolicy '{"dtypes": ["f32"], "fully_masked": "mean"}' "badpolicy.json: 'fully_masked': unknown policy 'mean'"
bad badlayout '{"dtypes": ["f32"], "layouts": ["bshd"]}' "badlayout.json: 'layouts' must be [\"bhsd\"]"
bad baddims '{"dtypes": ["f32"], "min_head_dim": 64, "max_head_dim": 32}' "baddims.json: head dims [64, 32] is empty"
run nofile cases --out nofile.cases --cases "$here/cases.txt" --declare absent.json
expect_rc 2
expect_file_has nofile.err "absent.json: no such file (the capabilities declaration)"
# A manifest whose declaration is malformed is bad input too.
cp -r cases badmanifest
python3 -c "import json; p='badmanifest/manifest.json'; d=json.load(open(p)); d['declaration']['dtypes']=['f8']; json.dump(d, open(p,'w'))"
run badmanifest check --cases badmanifest --outputs out --json ""
expect_rc 2
expect_file_has badmanifest.err "badmanifest/manifest.json (its declaration): 'dtypes': unknown dtype 'f8'"

finish file_route_declare
