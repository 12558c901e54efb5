#!/usr/bin/env bash
# The acceptance of the plugin route (impls/plugin): `attnbench validate` on the correct C example
# plugin passes (verify cases and the property suite, the report written); on each deliberately
# broken plugin (tests/plugins/bad_plugin.c, on ABI version 1: the shim) it completes the run, keeps every case in
# verify.json, exits 1 and names the fault precisely; a plugin that cannot be loaded exits 2
# with the reason.
# Usage: plugin_isolation.sh ATTNBENCH EXAMPLE_PLUGIN TEST_PLUGIN_DIR CASE_FILE WORK_DIR
set -uo pipefail
attnbench=$1 example=$2 plugins=$3 cases=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# validate NAME PLUGIN EXPECTED_EXIT [extra options]: runs, keeps the console in $work/NAME.log.
validate() {
  local name=$1 plugin=$2 expected=$3
  shift 3
  local start=$SECONDS
  "$attnbench" validate --plugin "$plugin" --cases "$cases" --timeout 2 --out "$work/$name" "$@" >"$work/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc in $((SECONDS - start)) s"
  [[ $rc == "$expected" ]] || { fail "$name: exit $rc, expected $expected"; cat "$work/$name.log"; }
}
# expect_log NAME TEXT: the console names it.
expect_log() { grep -qF -- "$2" "$work/$1.log" || { fail "$1: the output lacks '$2'"; cat "$work/$1.log"; }; }
# expect_record NAME CASE STATUS [TEXT]: verify.json has the case with that status (and a reason containing TEXT).
expect_record() {
  python3 - "$work/$1/verify.json" "$2" "$3" "${4:-}" <<'PY' || fail "$1: case $2 is not '$3' with '${4:-}' in verify.json"
import json, sys
path, case, status, text = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
records = [r for r in json.load(open(path))["records"] if r["case_index"] == case]
ok = len(records) == 1 and records[0]["status"] == status and (not text or any(text in reason for reason in records[0].get("reasons", [])))
if not ok: print(json.dumps(records, indent=1)[:3000])
sys.exit(0 if ok else 1)
PY
}

# The correct example passes: every case and the property suite (few cases each), report included.
validate example "$example" 0 --property-cases "${ATTN_PLUGIN_PROPERTY_CASES:-3}"
for c in 0 1 2 3; do expect_record example $c pass; done
expect_log example "attnbench validate: PASSED"
expect_log example "masks: causal top-left, causal bottom-right, padding per batch, padding per query, boolean mask, additive bias"
for f in verify.json properties.json report.md report.html; do [[ -s $work/example/$f ]] || fail "example: no $f"; done
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d['complete'] and all(r['verdict'] in ('held','not_applicable','finding') for r in d['records']) else 1)" \
  "$work/example/properties.json" || fail "example: properties.json is incomplete or has a failure"

# The example as it was built against ABI version 1 (tests/plugins/abi_v1, the header and source
# before version 2) still loads and passes, through the shim.
validate example_v1 "$plugins/c_cpu_plugin_v1.so" 0 --property-cases "${ATTN_PLUGIN_PROPERTY_CASES:-3}"
for c in 0 1 2 3; do expect_record example_v1 $c pass; done
expect_log example_v1 "(ABI version 1)"
expect_log example_v1 "attnbench validate: PASSED"
expect_log example "(ABI version 2)"

# A plugin that takes only BSHD gets BSHD strides (it checks) and its output is read back right.
validate bshd_only "$plugins/bshd_only_plugin.so" 0 --property-cases 2 --properties 3,12
for c in 0 1 2 3; do expect_record bshd_only $c pass; done
expect_log bshd_only "layouts: BSHD"

# Benchmarks: the plugin's calls timed inside the worker, as manual time.
validate example_bench "$example" 0 --property-cases 0 --bench --bench-max-n 128
python3 - "$work/example_bench/bench.json" <<'PY' || fail "example_bench: bench.json lacks the plugin's manual-time runs"
import json, sys
runs = [b for b in json.load(open(sys.argv[1]))["benchmarks"] if b.get("run_type") == "iteration"]
# Two families (none, causal) at n = 128, each as the bench's three repetitions.
reps = sorted((b["name"], b["repetition_index"]) for b in runs)
ok = len({name for name, _ in reps}) == 2 and reps == sorted((name, i) for name in {name for name, _ in reps} for i in range(3)) \
    and all(b["name"].startswith("c_cpu_reference/f32/d64/") and b["name"].endswith("/n:128/manual_time")
            and not b.get("error_occurred") and b["real_time"] > 0 for b in runs)
if not ok: print(json.dumps(runs, indent=1)[:3000])
sys.exit(0 if ok else 1)
PY

# Crashes on exactly one case: that case names the signal, the others are still verified.
validate segfault "$plugins/bad_segfault_on_n17.so" 1 --property-cases 0
expect_record segfault 1 fail "SIGSEGV (segmentation fault) in run()"
for c in 0 2 3; do expect_record segfault $c pass; done
expect_log segfault "worker processes started: 2"

# One element past the end of out: the guard page after it.
validate past_end "$plugins/bad_write_past_end.so" 1 --property-cases 0
for c in 0 1 2 3; do expect_record past_end $c fail "past the end of out: guard page hit at byte offset +0 after its last element"; done
expect_record past_end 0 fail "SIGSEGV (segmentation fault) in run(): wrote past the end of out"

# The last row left unwritten: its coordinates (case 0: b=1 hq=2 nq=8 dv=8).
validate last_row "$plugins/bad_last_row_unwritten.so" 1 --property-cases 0
expect_record last_row 0 fail "out not written (still poison): 8 element(s) in 1 row(s), first at b=0 h=1 i=7 c=0; rows b=0 h=1 i=7"
expect_record last_row 2 fail "first at b=1 h=1 i=8 c=0"

# Hangs on one case: killed after the timeout, the others verified.
validate hang "$plugins/bad_hang_on_n17.so" 1 --property-cases 0
expect_record hang 1 fail "timed out after 2 s in run()"
for c in 0 2 3; do expect_record hang $c pass; done

# Modifies an input.
validate modify_input "$plugins/bad_modify_input.so" 1 --property-cases 0
expect_record modify_input 0 fail "modified input q: 1 element(s) changed, first at [0,0,0,0]"
expect_record modify_input 3 fail "modified input q"

# The property suite sees the same isolation (one property, a crash on every call).
validate past_end_properties "$plugins/bad_write_past_end.so" 1 --properties 2 --property-cases 2 --no-shrink --seed 1
expect_log past_end_properties "   2 FAILED: masked keys get exactly zero weight"
expect_log past_end_properties "wrote past the end of out"

# Cannot be loaded at all: exit 2, the reason named.
validate missing "$work/no_such_plugin.so" 2
expect_log missing "no such file"
validate no_entry "$plugins/no_entry_point.so" 2
expect_log no_entry "no entry point: the library does not export attnbench_plugin_get"
validate wrong_abi "$plugins/wrong_abi_version.so" 2
expect_log wrong_abi "ABI version mismatch: the plugin describes itself as ABI version 99; this attnbench speaks versions 2 and 1"
validate not_a_library "$cases" 2
expect_log not_a_library "dlopen failed"

# A memory limit below what the worker already holds with the plugin loaded is the user's mistake,
# not the plugin's: exit 2 naming the limit and what it must be at least (where RLIMIT_AS applies;
# sanitizer builds cannot set one and say so).
"$attnbench" validate --plugin "$example" --cases "$cases" --plugin-memory-limit 1K --property-cases 1 --out "$work/tiny_limit" \
  >"$work/tiny_limit.log" 2>&1
rc=$?
if grep -q "memory limit: none: not applied" "$work/tiny_limit.log"; then
  echo "== tiny_limit: no address-space limit applies in this build (exit $rc)"
else
  echo "== tiny_limit: exit $rc"
  [[ $rc == 2 ]] || { fail "tiny_limit: exit $rc, expected 2"; cat "$work/tiny_limit.log"; }
  expect_log tiny_limit "--plugin-memory-limit 1 KiB leaves the worker no room"
fi

echo "$failures failure(s)"
exit $((failures > 0))
