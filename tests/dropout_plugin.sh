#!/usr/bin/env bash
# Dropout through the plugin ABI (ATTNBENCH_FEATURE_DROPOUT, the KEEP role): a correct kernel
# (tests/plugins/dropout_plugin.c) passes `attnbench validate` on a few dropout cases, its keep
# mask read back from the bytes it wrote; each planted mistake fails them, named: the kept weights
# not rescaled by 1/(1-p) (the output, diagnosed), an all-ones keep mask at p = 0.9 (the keep
# rate, though the output agrees with that mask), the keep mask never written (its poison).
# Usage: dropout_plugin.sh ATTNBENCH PLUGIN_DIR WORK_DIR
set -uo pipefail
bin=$(realpath "$1") plugins=$(realpath "$2") work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

cat >cases.txt <<'EOF'
b=1 hq=2 hkv=2 nq=40 nk=50 dk=16 dv=16 dtype=f32 causal=none dropout=0.9 regime=diffuse seed=1
b=1 hq=2 hkv=1 nq=33 nk=47 dk=16 dv=8 dtype=f32 causal=none dropout=0.1 dropout_seed=7 regime=peaked seed=2
EOF

# validate NAME EXPECTED_EXIT [options]: the plugin dropout_NAME (or dropout_plugin), console in NAME.out.
validate() {
  local name=$1 expected=$2 plugin=$plugins/dropout_$1.so
  shift 2
  [ "$name" = correct ] && plugin=$plugins/dropout_plugin.so
  "$bin" validate --plugin "$plugin" --cases cases.txt --property-cases 0 --timeout 20 --out "$name" "$@" >"$name.out" 2>&1
  local rc=$?
  echo "$name: exit $rc"
  [ "$rc" -eq "$expected" ] || { fail "$name: exit $rc, not $expected"; tail -n 30 "$name.out"; }
}
expect() { grep -qF -- "$2" "$1.out" || { fail "$1: the output lacks '$2'"; tail -n 30 "$1.out"; }; }
# ran NAME: how many cases ran (passed or failed) in NAME/verify.json.
ran() { python3 -c 'import json, sys; print(sum(r["status"] in ("pass", "fail") for r in json.load(open(sys.argv[1]))["records"]))' "$1/verify.json"; }

validate correct 0
expect correct "dropout"
[ "$(ran correct 2>/dev/null)" = 2 ] || fail "correct: $(ran correct 2>/dev/null) cases ran, not 2 (a dropout case was skipped or projected away?)"
# Property 20 (the rate, one seed one mask, another seed another) on the correct kernel.
"$bin" validate --plugin "$plugins/dropout_plugin.so" --cases cases.txt --properties 20 --property-cases 3 --timeout 20 --out property \
  >property.out 2>&1
rc=$?
echo "correct, property 20: exit $rc"
[ "$rc" -eq 0 ] || { fail "correct, property 20: exit $rc, not 0"; tail -n 30 property.out; }
grep -qE "^ *20 (held|gave up)" property.out || { fail "property 20 did not hold"; grep -n "^ *20 " property.out; }

validate not_rescaled 1
expect not_rescaled "without the 1 / (1 - p)"
validate keeps_all 1
expect keeps_all "the dropout stream's rate is not 1 - p"
validate keep_unwritten 1
expect keep_unwritten "keep not written (still poison 0xFF)"

[ "$failures" -eq 0 ] && echo "dropout_plugin: all checks passed"
exit $((failures > 0))
