#!/usr/bin/env bash
# The attnbench command's contract: exit codes (0 pass, 1 a case failed, 2 bad usage or input)
# and messages that name the problem. Usage: cli_contract.sh path/to/attnbench
set -u

bin=${1:?usage: cli_contract.sh path/to/attnbench}
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
[ -x "$bin" ] || { echo "cli_contract: '$bin' is not an executable" >&2; exit 2; }

. "$(dirname "$0")/cli_checks.sh"  # before the cd below: $0 may be relative
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 2  # a stray default --json path lands here, not in the source tree

# expect_in STREAM TEXT: the stream (out or err) of the last run contains TEXT (fixed string).
expect_in() {
  checks=$((checks + 1))
  if ! grep -qF -- "$2" "$last.$1"; then
    fail "$last: std$1 does not contain '$2'"
    show
    return 1
  fi
}

expect_empty() {
  checks=$((checks + 1))
  if [ -s "$last.$1" ]; then
    fail "$last: std$1 is not empty"
    show
    return 1
  fi
}

# bad_input NAME EXPECTED_TEXT ARGS...: exits 2 with an error on stderr naming the problem,
# and nothing of a run on stdout.
bad_input() {
  local name=$1 text=$2
  shift 2
  run "$name" "$@"
  expect_rc 2
  expect_in err "$text"
  checks=$((checks + 1))
  if grep -q "attnbench verify:" "$tmp/$name.out"; then
    fail "$name: started a verify run despite bad input"
    show
  fi
}

# --- list -----------------------------------------------------------------------------------
run list list
expect_rc 0
expect_in out "cpu_naive"
expect_in out "dtypes: f64, f32, f16, bf16"

# --- verify on the quick cases, with JSON -----------------------------------------------------
run quick verify --cases quick --json "$tmp/q.json"
expect_rc 0
expect_in out "32 case(s)"
expect_in out "results: $tmp/q.json"
checks=$((checks + 1))
if [ ! -s "$tmp/q.json" ]; then
  fail "verify --cases quick did not write $tmp/q.json"
else
  # Every one of the 32 quick cases has a record with its repro string and metrics; the first
  # record's repro string goes to the next check.
  if ! python3 - "$tmp/q.json" >"$tmp/repro.txt" 2>"$tmp/json.err" <<'EOF'
import json, sys
with open(sys.argv[1]) as f:
    doc = json.load(f)
assert doc["schema"] == "attnbench.verify", doc.get("schema")
records = doc["records"]
assert doc["summary"]["cases"] == 32, doc["summary"]
assert doc["summary"]["failed"] == 0, doc["summary"]
indices = sorted({r["case_index"] for r in records})
assert indices == list(range(32)), indices
for r in records:
    assert isinstance(r.get("repro"), str) and r["repro"], r
    assert r["status"] in ("pass", "skip"), (r["status"], r["repro"])
    if r["status"] == "pass":
        assert isinstance(r.get("metrics"), dict), r["repro"]
        assert "max_abs" in r["metrics"] and "max_ulps" in r["metrics"], r["repro"]
    # Every row compared (sampling is opt-in); a skipped case has no reference computed.
    ref = r["reference"]
    if r["status"] != "skip":
        assert ref["rows_checked"] == ref["rows_total"] and not ref["sampled"], (ref, r["repro"])
        assert 0 <= ref["rows_float128"] <= ref["rows_total"], (ref, r["repro"])
naive = [r for r in records if r["implementation"] == "cpu_naive"]
assert len(naive) == 32, len(naive)
print(naive[7]["repro"])
EOF
  then
    fail "verify --cases quick: the JSON does not hold what it should"
    sed 's/^/    ! /' "$tmp/json.err"
  fi
fi

# --- the console: a passing row shows the share of its error budget it used, never "inf" --------
checks=$((checks + 1))
grep -q " budget " "$tmp/quick.out" || fail "quick: the table has no budget column"
checks=$((checks + 1))
if ! awk '$NF == "PASS" && $(NF-1) !~ /^[0-9]+%$/ {bad = 1} END {exit bad}' "$tmp/quick.out"; then
  fail "quick: a passing row does not show its budget as a percentage"
  grep "PASS" "$tmp/quick.out" | head -3
fi
checks=$((checks + 1))
grep -q "inf" <(grep "PASS" "$tmp/quick.out") && fail "quick: a passing row shows inf"

# --- verify one case given by its repro string ------------------------------------------------
repro=$(cat "$tmp/repro.txt" 2>/dev/null)
checks=$((checks + 1))
if [ -z "$repro" ]; then
  fail "no repro string to try (see the JSON check above)"
else
  run single verify --case "$repro" --json ''
  expect_rc 0
  expect_in out "x 1 case(s)"
  expect_in out "passed"
  checks=$((checks + 1))
  if grep -q "^results:" "$tmp/single.out"; then
    fail "single: --json '' still wrote results"
  fi
  checks=$((checks + 1))
  if [ -e "$tmp/results" ]; then
    fail "single: --json '' created $tmp/results"
  fi
fi

# --- row sampling, asked for: the row says how many rows it compared ---------------------------
sampled=(verify --impl cpu_naive --case 'b=1 hq=2 hkv=2 nq=300 nk=16 dk=16 dv=16 dtype=f32' --json '')
run sampled "${sampled[@]}" --sample-rows-above 1000
expect_rc 0
expect_in out "[48/600 rows]"
run unsampled "${sampled[@]}"
expect_rc 0
checks=$((checks + 1))
if grep -q "rows\]" "$tmp/unsampled.out"; then
  fail "unsampled: rows were sampled without --sample-rows-above"
fi

# --- a failing case is diagnosed (a pass rule with no slack fails the correct naive algorithm:
# no known mistake may be named for it); --no-diagnosis leaves it out --------------------------
strict=(verify --impl cpu_naive --case 'b=1 hq=2 hkv=2 nq=16 nk=16 dk=16 dv=16 dtype=f32' --k 0 --floor-ulps 0 --json '')
run diagnosed "${strict[@]}"
expect_rc 1
expect_in out "diagnosis: no known mistake matches"
run undiagnosed "${strict[@]}" --no-diagnosis
expect_rc 1
checks=$((checks + 1))
if grep -q "diagnosis:" "$tmp/undiagnosed.out"; then
  fail "undiagnosed: --no-diagnosis still printed a diagnosis"
fi

# --- bad input: exit 2 with a message that names the problem -----------------------------------
bad_input zero_batch "b must be positive" verify --case 'b=0' --json ''
bad_input negative_sampling "--sample-rows-above must be a non-negative" verify --case 'b=1' --sample-rows-above -5 --json ''
bad_input heads "hq = 3 is not a multiple of hkv = 2" verify --case 'hq=3 hkv=2' --json ''
bad_input garbage "'garbage'" verify --case 'garbage' --json ''
bad_input unknown_key "unknown repro key 'frobnicate'" verify --case 'b=1 frobnicate=2' --json ''
bad_input bad_dtype "unknown dtype 'f8'" verify --case 'dtype=f8' --json ''
bad_input missing_file "/nonexistent" verify --cases /nonexistent --json ''

printf '# a comment\nb=1 hq=2 hkv=1 nq=4 nk=4 dk=8 dv=8 dtype=f32\nb=1 nq=x\n' >"$tmp/bad_line.txt"
bad_input bad_line "$tmp/bad_line.txt:3:" verify --cases "$tmp/bad_line.txt" --json ''
expect_in err "nq"
printf 'b=1 hq=2 hkv=1 nq=4 nk=4 dk=8 dv=8 dtype=f32\nb=1 hq=3 hkv=2\n' >"$tmp/line2.txt"
bad_input line2 "$tmp/line2.txt:2:" verify --cases "$tmp/line2.txt" --json ''
expect_in err "not a multiple"

: >"$tmp/empty.txt"
bad_input empty_file "$tmp/empty.txt" verify --cases "$tmp/empty.txt" --json ''
expect_in err "no cases"
printf '# only comments\n\n   \n' >"$tmp/comments.txt"
bad_input comments_only "no cases" verify --cases "$tmp/comments.txt" --json ''

bad_input unknown_impl "unknown implementation 'nosuch'" verify --impl nosuch --cases quick --json ''
expect_in err "cpu_naive"  # the message lists what is known
bad_input bad_k "--k" verify --case 'b=1' --k -1 --json ''
bad_input unknown_option "--bogus" verify --bogus
bad_input no_subcommand "subcommand" 
bad_input unknown_subcommand "unknown subcommand 'frobnicate'" frobnicate
checks=$((checks + 1))
if [ -e "$tmp/results" ]; then
  fail "a rejected command wrote $tmp/results"
fi

# --- properties -------------------------------------------------------------------------------
# A repro string reruns exactly one problem through a property; unknown numbers and malformed
# problems are bad input.
run properties_case properties --impl cpu_naive --property 2 --property 12 --case 'b=1 hq=2 hkv=1 nq=5 nk=9 dk=8 dv=4 dtype=f16 causal=bottom_right seed=3'
expect_rc 0
expect_in out "property 2: masked keys get exactly zero weight"
expect_in out "property 12: "
expect_in out "0 failed, 0 finding(s), 0 gave up"
run properties_drawn properties --impl cpu_blocked --property 7 --cases 3 --seed 5
expect_rc 0
expect_in out "held on 3 cases (RapidCheck seed 5)"
bad_input properties_number "--property 16: there are properties 1 to 15" properties --property 16
bad_input properties_case_bad "nq" properties --case 'b=1 nq=0'
bad_input properties_impl "unknown implementation 'nosuch'" properties --impl nosuch --cases 1
bad_input properties_cases "--cases must be positive" properties --cases 0

# --- nothing ran is not a pass ------------------------------------------------------------------
# An implementation asked for by name that runs no case (cuda_fused without a GPU) fails, unless
# --allow-empty; where a GPU is present the case runs and passes.
run nothing_ran verify --impl cuda_fused --cases quick --json ''
if grep -q "no case ran for cuda_fused" "$tmp/nothing_ran.out"; then
  expect_rc 1
  # Skips are one line per implementation with the reason, not one table row per case.
  expect_in out "skipped every case for cuda_fused: "
  checks=$((checks + 1))
  if [ "$(grep -c "cuda_fused" "$tmp/nothing_ran.out")" -gt 4 ]; then
    fail "nothing_ran: the skipped implementation fills the console"
    show
  fi
  run nothing_ran_allowed verify --impl cuda_fused --cases quick --json '' --allow-empty
  expect_rc 0
elif grep -q "unknown implementation 'cuda_fused'" "$tmp/nothing_ran.err"; then
  expect_rc 2  # a build without CUDA: the name is unknown, also not a pass
else
  expect_rc 0
fi

# --- help is not an error ----------------------------------------------------------------------
run help --help
expect_rc 0
expect_in out "verify"

finish cli_contract
