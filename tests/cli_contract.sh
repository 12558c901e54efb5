#!/usr/bin/env bash
# The attnbench command's contract: exit codes (0 pass, 1 a case failed, 2 bad usage or input)
# and messages that name the problem. Usage: cli_contract.sh path/to/attnbench
set -u

bin=${1:?usage: cli_contract.sh path/to/attnbench}
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
[ -x "$bin" ] || { echo "cli_contract: '$bin' is not an executable" >&2; exit 2; }

. "$(dirname "$0")/cli_checks.sh"  # before the cd below: $0 may be relative
src=$(cd "$(dirname "$0")/.." && pwd)
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
# What each supports, each mask kind, shape and score modification named with yes or no (the GPU
# implementations, in builds that have them, say no to windows beyond causal and to sinks).
expect_in out "attention sinks (sink=, sinks=) yes"
expect_in out "windows beyond causal (sliding, local) yes"
expect_in out "GQA/MQA yes"

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
sampled=(verify --impl cpu_naive --case 'b=1 hq=2 hkv=2 nq=300 nk=16 dk=16 dv=16 dtype=f32 causal=none regime=diffuse seed=0' --json '')
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
strict=(verify --impl cpu_naive --case 'b=1 hq=2 hkv=2 nq=16 nk=16 dk=16 dv=16 dtype=f32 causal=none regime=diffuse seed=0' --k 0 --floor-ulps 0 --json '')
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
# A whole repro string but for the fields a check replaces.
shape='hq=2 hkv=2 nq=4 nk=4 dk=8 dv=8'
rest='causal=none regime=diffuse seed=0'
bad_input zero_batch "b must be positive" verify --case "b=0 $shape dtype=f32 $rest" --json ''
bad_input negative_sampling "--sample-rows-above must be a non-negative" verify --case "b=1 $shape dtype=f32 $rest" --sample-rows-above -5 --json ''
bad_input heads "hq = 3 is not a multiple of hkv = 2" verify --case "b=1 hq=3 hkv=2 nq=4 nk=4 dk=8 dv=8 dtype=f32 $rest" --json ''
bad_input garbage "'garbage'" verify --case 'garbage' --json ''
# Scales whose scores overflow the working precision are the case's fault, never "the oracle is
# unsound": beyond f32's range at all (refused before the run), or for one pair of the inputs.
bad_input scale_range "scale 1e+300 is beyond the range of f32" verify --case "b=1 $shape dtype=f32 causal=none scale=1e300 regime=diffuse seed=1" --json ''
run scores_overflow verify --impl cpu_naive --case "b=1 $shape dtype=f32 causal=none scale=1e30 regime=large seed=1" --json ''
expect_rc 2
expect_in err "beyond the range of f32 (the working precision of these inputs"
checks=$((checks + 1))
bad_input case_file_device "/dev/zero: not a regular file" verify --cases /dev/zero --json ''  # a device is refused, never read without end
bad_input case_file_missing "nosuch.txt: no such case file" verify --cases nosuch.txt --json ''
bad_input unknown_key "unknown repro key 'frobnicate'" verify --case "b=1 $shape dtype=f32 $rest frobnicate=2" --json ''
bad_input bad_dtype "unknown dtype 'f8'" verify --case "b=1 $shape dtype=f8 $rest" --json ''
# Fields are never filled in silently: a partial string says what it lacks; an empty or blank one
# (or a comment alone) is refused, not taken as "no --case" (which would run the whole set).
bad_input partial "lacks hkv nq nk dk dv dtype causal regime seed" verify --case 'b=1 hq=2' --json ''
bad_input partial_causal "lacks causal" verify --case "b=1 $shape dtype=f32 regime=diffuse seed=0" --json ''
bad_input empty_case "empty repro string" verify --case '' --json ''
bad_input blank_case "empty repro string" verify --case '   ' --json ''
bad_input comment_case "empty repro string" verify --case '# nothing' --json ''
bad_input properties_empty_case "empty repro string" properties --case ''
bad_input cases_empty_case "empty repro string" cases --out "$tmp/never" --case ''
checks=$((checks + 1))
if [ -e "$tmp/never" ]; then
  fail "cases --case '' wrote $tmp/never"
fi
bad_input missing_file "/nonexistent" verify --cases /nonexistent --json ''

printf '# a comment\nb=1 hq=2 hkv=1 nq=4 nk=4 dk=8 dv=8 dtype=f32 causal=none regime=diffuse seed=0\nb=1 nq=x\n' >"$tmp/bad_line.txt"
bad_input bad_line "$tmp/bad_line.txt:3:" verify --cases "$tmp/bad_line.txt" --json ''
expect_in err "nq"
printf 'b=1 hq=2 hkv=1 nq=4 nk=4 dk=8 dv=8 dtype=f32 causal=none regime=diffuse seed=0\nb=1 hq=3 hkv=2 nq=4 nk=4 dk=8 dv=8 dtype=f32 causal=none regime=diffuse seed=0\n' >"$tmp/line2.txt"
bad_input line2 "$tmp/line2.txt:2:" verify --cases "$tmp/line2.txt" --json ''
expect_in err "not a multiple"

: >"$tmp/empty.txt"
bad_input empty_file "$tmp/empty.txt" verify --cases "$tmp/empty.txt" --json ''
expect_in err "no cases"
printf '# only comments\n\n   \n' >"$tmp/comments.txt"
bad_input comments_only "no cases" verify --cases "$tmp/comments.txt" --json ''
# A comment after a case, as the README allows in case files (and so in --case too).
printf 'b=1 hq=2 hkv=1 nq=4 nk=4 dk=8 dv=8 dtype=f32 causal=none regime=diffuse seed=0  # small GQA\n' >"$tmp/trailing.txt"
run trailing_comment verify --impl cpu_naive --cases "$tmp/trailing.txt" --json ''
expect_rc 0
expect_in out "x 1 case(s)"
run trailing_comment_case verify --impl cpu_naive --case "b=1 $shape dtype=f32 $rest # from the log" --json ''
expect_rc 0
expect_in out "x 1 case(s)"

bad_input unknown_impl "unknown implementation 'nosuch'" verify --impl nosuch --cases quick --json ''
expect_in err "cpu_naive"  # the message lists what is known
bad_input bad_k "--k" verify --case "b=1 $shape dtype=f32 $rest" --k -1 --json ''
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
run properties_case properties --impl cpu_naive --property 2 --property 12 --case 'b=1 hq=2 hkv=1 nq=5 nk=9 dk=8 dv=4 dtype=f16 causal=bottom_right regime=diffuse seed=3'
expect_rc 0
expect_in out "property 2: masked keys get exactly zero weight"
expect_in out "property 12: "
expect_in out "0 failed, 0 finding(s), 0 gave up"
run properties_drawn properties --impl cpu_blocked --property 7 --property-cases 3 --seed 5
expect_rc 0
expect_in out "held on 3 cases (RapidCheck seed 5)"
bad_input properties_number "--property 28: there are properties 1 to 27" properties --property 28
bad_input properties_case_bad "nq must be positive" properties --case "b=1 hq=2 hkv=2 nq=0 nk=4 dk=8 dv=8 dtype=f32 $rest"
bad_input properties_impl "unknown implementation 'nosuch'" properties --impl nosuch --property-cases 1
bad_input properties_cases "--property-cases must be positive" properties --property-cases 0
bad_input properties_cases_set "--cases is a case set in every command; the number of successful cases per property is --property-cases 3" properties --cases 3
run properties_list properties --impl cpu_naive --properties 1,10 --property-cases 2 --seed 5
expect_rc 0

# --- nothing ran is not a pass ------------------------------------------------------------------
# An implementation asked for by name that runs no case (cuda_fused without a GPU) fails, unless
# --allow-empty; where a GPU is present the case runs and passes.
run nothing_ran verify --impl cuda_fused --cases quick --json ''
if grep -q "no case ran for cuda_fused" "$tmp/nothing_ran.out"; then
  expect_rc 1
  # Skips are one line per implementation with the reason, not one table row per case.
  expect_in out "skipped every case for cuda_fused: "
  checks=$((checks + 1))
  if grep -q "^cuda_fused " "$tmp/nothing_ran.out"; then  # a table row starts with the implementation's name
    fail "nothing_ran: the skipped implementation fills the table, a row per case"
    show
  fi
  run nothing_ran_allowed verify --impl cuda_fused --cases quick --json '' --allow-empty
  expect_rc 0
elif grep -q "unknown implementation 'cuda_fused'" "$tmp/nothing_ran.err"; then
  expect_rc 2  # a build without CUDA: the name is unknown, also not a pass
else
  expect_rc 0
fi

# --- result paths: only ever created or replaced as regular files -------------------------------
# A symlink (to a device or to a file), a FIFO or a directory at a result path is refused with
# exit 2 naming it, before anything runs, and is left as it was; a folder on the path that is a
# file, or one without write permission, is refused the same way. (Never a real device node: a
# link to /dev/null stands for one.)
P=$tmp/paths
mkdir -p "$P" || exit 2
ln -s /dev/null "$P/devlink"
mkfifo "$P/fifo"
echo "earlier results" >"$P/kept.json"
ln -s kept.json "$P/filelink"
mkdir "$P/adir"
echo "a file" >"$P/afile"
# unchanged NAME: $P/NAME is still what it was (the link's target, the FIFO, the file's bytes),
# and no temporary file was left beside it.
unchanged() {
  checks=$((checks + 1))
  (cd "$P" && case $1 in
    devlink) [ -L devlink ] && [ "$(readlink devlink)" = /dev/null ] ;;
    fifo) [ -p fifo ] ;;
    filelink) [ -L filelink ] && [ "$(readlink filelink)" = kept.json ] && [ "$(cat kept.json)" = "earlier results" ] ;;
    adir) [ -d adir ] && [ -z "$(ls -A adir)" ] ;;
    afile) [ "$(cat afile)" = "a file" ] ;;
  esac) || fail "$last: $1 was changed"
  checks=$((checks + 1))
  if ls -a "$P" | grep -q '\.tmp\.'; then
    fail "$last: left a temporary file: $(ls -a "$P" | grep '\.tmp\.')"
  fi
}
one="b=1 $shape dtype=f32 $rest"
for target in devlink fifo filelink adir; do
  bad_input "json_$target" "--json $P/$target: is a" verify --impl cpu_naive --case "$one" --json "$P/$target"
  unchanged "$target"
  bad_input "properties_json_$target" "--json $P/$target: is a" properties --impl cpu_naive --property 1 --case "$one" --json "$P/$target"
  checks=$((checks + 1))
  if grep -q "^property 1" "$tmp/properties_json_$target.out"; then fail "properties_json_$target: checked a property before refusing"; fi
  unchanged "$target"
  bad_input "bench_json_$target" "--json $P/$target: is a" bench --impl cpu_naive --smoke --json "$P/$target"
  unchanged "$target"
done
# bench --peers: the peers script's file beside ours is held to the same rule, before ours is touched.
ln -s /dev/null "$P/pb.peers.json"
bad_input peers_link "peers output $P/pb.peers.json: is a symbolic link" bench --impl cpu_naive --smoke --dtype f32 --peers true --json "$P/pb.json"
checks=$((checks + 1))
[ -L "$P/pb.peers.json" ] && [ ! -e "$P/pb.json" ] || fail "peers_link: the link was replaced or pb.json written"
bad_input json_file_as_folder "--json $P/afile/r.json:" verify --impl cpu_naive --case "$one" --json "$P/afile/r.json"
unchanged afile
# A path ending in '/' names a directory, existing or not: refused before the run, nothing made.
bad_input json_slash "--json $P/newdir/: ends with '/', so it names a directory" verify --impl cpu_naive --case "$one" --json "$P/newdir/"
checks=$((checks + 1))
[ ! -e "$P/newdir" ] || fail "json_slash: $P/newdir was made"
# A result file that is already there and regular is replaced whole (no temporary left beside it).
run json_regular verify --impl cpu_naive --case "$one" --json "$P/kept.json"
expect_rc 0
checks=$((checks + 1))
python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["schema"] == "attnbench.verify"' "$P/kept.json" 2>/dev/null ||
  fail "json_regular: kept.json is not the new results"
echo "earlier results" >"$P/kept.json"
unchanged filelink
# The other writers: report --out, gate --write-baseline and --junit, cases --out, validate --out.
run report_input verify --impl cpu_naive --case "$one" --json "$P/v.json"
expect_rc 0
mkdir -p "$P/rep" && ln -s /dev/null "$P/rep/report.html"
bad_input report_link "$P/rep/report.html: is a symbolic link" report "$P/v.json" --out "$P/rep"
checks=$((checks + 1))
[ -L "$P/rep/report.html" ] && [ "$(readlink "$P/rep/report.html")" = /dev/null ] || fail "report_link: rep/report.html was replaced"
bad_input gate_baseline_link "$P/devlink: is a symbolic link" gate --write-baseline "$P/devlink" "$P/v.json"
unchanged devlink
bad_input gate_junit_link "$P/fifo: is a FIFO" gate --config "$src/ci/gate.json" --baseline "$P/v.json" --junit "$P/fifo" "$P/v.json"
unchanged fifo
mkdir -p "$P/cases_dir" && ln -s /dev/null "$P/cases_dir/q_0000.npy" && echo '{}' >"$P/cases_dir/manifest.json"
bad_input cases_link "$P/cases_dir/q_0000.npy: is a symbolic link" cases --out "$P/cases_dir" --case "$one"
checks=$((checks + 1))
[ -L "$P/cases_dir/q_0000.npy" ] || fail "cases_link: the link was removed or replaced"
# validate --out is checked before the plugin is even loaded (there is none here).
bad_input validate_out_file "--out $P/afile: exists and is not a directory" validate --plugin "$tmp/none.so" --out "$P/afile"
bad_input validate_out_under_file "--out $P/afile/sub" validate --plugin "$tmp/none.so" --out "$P/afile/sub"
mkdir -p "$P/vout" && ln -s /dev/null "$P/vout/verify.json"
bad_input validate_out_link "$P/vout/verify.json: is a symbolic link" validate --plugin "$tmp/none.so" --out "$P/vout"
if [ "$(id -u)" != 0 ]; then  # root writes anywhere
  mkdir -p "$P/locked" && chmod 555 "$P/locked"
  bad_input validate_out_locked "--out $P/locked/v" validate --plugin "$tmp/none.so" --out "$P/locked/v"
  bad_input json_locked "--json $P/locked/r.json" verify --impl cpu_naive --case "$one" --json "$P/locked/r.json"
  chmod 755 "$P/locked"
fi

# --- check (the file route) reads at most what a .npy header promises ----------------------------
# An input replaced by a link to /dev/zero, a FIFO, or a file longer or shorter than its header
# says: exit 2 naming it, at once (a timeout guards against a read without end).
run fr_cases cases --out "$tmp/fr" --case "$one"
expect_rc 0
for variant in zero fifo long short; do
  rm -rf "$tmp/fr_$variant" && cp -r "$tmp/fr" "$tmp/fr_$variant"
  q=$tmp/fr_$variant/q_0000.npy
  case $variant in
    zero) rm "$q" && ln -s /dev/zero "$q" ;;
    fifo) rm "$q" && mkfifo "$q" ;;
    long) printf 'trailing' >>"$q" ;;
    short) truncate -s -4 "$q" ;;
  esac
  timeout 20 "$bin" check --cases "$tmp/fr_$variant" --outputs "$tmp/none" --json '' >"fr_$variant.out" 2>"fr_$variant.err"
  rc=$? last=fr_$variant  # as run does, under a timeout
  expect_rc 2
  expect_in err "q_0000.npy: "
done
expect_in err "data bytes"
rm -rf "$tmp/fr_manifest" && cp -r "$tmp/fr" "$tmp/fr_manifest" && rm "$tmp/fr_manifest/manifest.json" && ln -s /dev/zero "$tmp/fr_manifest/manifest.json"
timeout 20 "$bin" check --cases "$tmp/fr_manifest" --outputs "$tmp/none" --json '' >fr_manifest.out 2>fr_manifest.err
rc=$? last=fr_manifest
expect_rc 2
expect_in err "manifest.json: not a regular file"

# --- a case too large for this machine: exit 2 with what it needs, before anything is allocated -
bad_input huge_nq "needs about" verify --impl cpu_naive --case "b=1 hq=1 hkv=1 nq=1000000000 nk=1 dk=64 dv=64 dtype=f32 $rest" --json "$tmp/huge.json"
expect_in err "is available here"
checks=$((checks + 1))
[ -e "$tmp/huge.json" ] && fail "huge_nq: wrote $tmp/huge.json"
# n = 2^20: the naive yardstick's n_q x n_k scores alone are 4 TiB (more than any machine here has; n = 131072, 64 GiB, is refused where less is available).
bad_input huge_square "naive yardstick 4 TiB" verify --impl cpu_naive --case "b=1 hq=1 hkv=1 nq=1048576 nk=1048576 dk=64 dv=64 dtype=f32 $rest" --json ''
# Past 2^64 bytes: a figure, not an overflow.
bad_input huge_overflow "EiB" verify --impl cpu_blocked --case "b=1 hq=1 hkv=1 nq=2147483648 nk=2147483648 dk=16 dv=16 dtype=f64 $rest" --json ''
bad_input huge_properties "needs about" properties --impl cpu_naive --property 1 --case "b=1 hq=1 hkv=1 nq=1048576 nk=1048576 dk=64 dv=64 dtype=f32 $rest"
bad_input huge_cases "needs about" cases --out "$tmp/huge_cases" --case "b=1 hq=1 hkv=1 nq=1000000000 nk=1 dk=64 dv=64 dtype=f32 $rest"
bad_input huge_validate "needs about" validate --plugin "$tmp/none.so" --out "$tmp/huge_validate" --case "b=1 hq=1 hkv=1 nq=1048576 nk=1048576 dk=64 dv=64 dtype=f32 $rest"
checks=$((checks + 1))
if grep -q "internal error" "$tmp"/huge_*.err; then fail "a huge case ended in an internal error"; fi

# --- help is not an error ----------------------------------------------------------------------
run help --help
expect_rc 0
expect_in out "verify"
expect_in out "Exit codes: 0 success, 1 something failed"
# Every command's --help states its exit codes; --version names the build.
for command in verify list properties bench gate report cases check validate; do
  run "help_$command" "$command" --help
  expect_rc 0
  expect_in out "Exit codes: 0 "
  expect_in out "2 bad usage or bad input"
done
run version --version
expect_rc 0
expect_in out "attnbench 0."
expect_in out "(git "

finish cli_contract
