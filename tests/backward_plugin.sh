#!/usr/bin/env bash
# The backward pass through the plugin ABI (ATTNBENCH_OP_BACKWARD: q k v o lse d_o in, dq dk dv
# out), with the forward's isolation: a correct kernel (tests/plugins/backward_plugin.c) passes
# `attnbench validate --backward` on a few small cases, and so does the C example
# (examples/plugins/c_cpu) on the quick set; each planted fault fails, named, while the run goes
# on: one element written past the end of dK on one case (its guard page; the other cases still
# pass, in a new worker), a row of dV never written (its poison), dO written into (a modified
# input).
# Usage: backward_plugin.sh ATTNBENCH EXAMPLE_PLUGIN PLUGIN_DIR WORK_DIR
set -uo pipefail
bin=$(realpath "$1") example=$(realpath "$2") plugins=$(realpath "$3") work=$4
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# Forward repro strings: --backward makes each a backward case. Case 1 (n_k = 17) is the one
# backward_dk_past_end overruns dK on.
cat >cases.txt <<'EOF'
b=1 hq=2 hkv=1 nq=8 nk=12 dk=16 dv=8 dtype=f32 causal=top_left regime=diffuse seed=1
b=1 hq=2 hkv=2 nq=9 nk=17 dk=16 dv=16 dtype=f64 causal=none regime=peaked seed=2
b=2 hq=2 hkv=2 nq=9 nk=5 dk=8 dv=8 dtype=f32 causal=bottom_right pad=3,5 regime=saturated seed=3
EOF

# validate NAME PLUGIN EXPECTED_EXIT [options]: console in NAME.out.
validate() {
  local name=$1 plugin=$2 expected=$3
  shift 3
  "$bin" validate --plugin "$plugin" --backward --cases cases.txt --property-cases 0 --timeout 20 --out "$name" "$@" >"$name.out" 2>&1
  local rc=$?
  echo "$name: exit $rc"
  [ "$rc" -eq "$expected" ] || { fail "$name: exit $rc, not $expected"; tail -n 30 "$name.out"; }
}
expect() { grep -qF -- "$2" "$1.out" || { fail "$1: the output lacks '$2'"; tail -n 30 "$1.out"; }; }
# record NAME CASE STATUS [TEXT]: verify.json has the backward case with that status (and a reason containing TEXT).
record() {
  python3 - "$1/verify.json" "$2" "$3" "${4:-}" <<'PY' || fail "$1: case $2 is not '$3' with '${4:-}' in verify.json"
import json, sys
path, case, status, text = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
records = [r for r in json.load(open(path))["records"] if r["case_index"] == case]
ok = (len(records) == 1 and records[0]["status"] == status and records[0]["repro"].startswith("op=backward ")
      and (not text or any(text in reason for reason in records[0].get("reasons", []))))
if not ok: print(json.dumps(records, indent=1)[:3000])
sys.exit(0 if ok else 1)
PY
}

validate correct "$plugins/backward_plugin.so" 0
for c in 0 1 2; do record correct $c pass; done
expect correct "operations: forward, backward"
expect correct "3 passed, 0 failed, 0 skipped"

# The example, every feature it declares, on the quick set.
"$bin" validate --plugin "$example" --backward --cases quick --property-cases 0 --timeout 20 --out example >example.out 2>&1
rc=$?
echo "example: exit $rc"
[ "$rc" -eq 0 ] || { fail "example: exit $rc, not 0"; tail -n 30 example.out; }
expect example "32 passed, 0 failed, 0 skipped"

validate dk_past_end "$plugins/backward_dk_past_end.so" 1
record dk_past_end 1 fail "SIGSEGV (segmentation fault) in run(): wrote past the end of dk: guard page hit at byte offset +0 after its last element"
for c in 0 2; do record dk_past_end $c pass; done
expect dk_past_end "worker processes started: 2"

validate dv_row_unwritten "$plugins/backward_dv_row_unwritten.so" 1
record dv_row_unwritten 0 fail "dv not written (still poison): 8 element(s) in 1 row(s), first at b=0 h=0 j=11 c=0; rows b=0 h=0 j=11"
record dv_row_unwritten 2 fail "dv not written (still poison): 8 element(s) in 1 row(s), first at b=0 h=0 j=4 c=0"

validate writes_d_o "$plugins/backward_writes_d_o.so" 1
for c in 0 1 2; do record writes_d_o $c fail "modified input d_o: 1 element(s) changed, first at [0,0,0,0]"; done

[ "$failures" -eq 0 ] && echo "backward_plugin: all checks passed"
exit $((failures > 0))
