#!/usr/bin/env bash
# A score modification declared and read by name through the plugin ABI (attnbench_score_modifications,
# attnbench_call_setting): soft-capping with neither ATTNBENCH_FEATURE_SOFTCAP nor call->softcap,
# as a plugin would use a modification added after the ABI's bits and fields
# (tests/plugins/softcap_by_name_plugin.c). The correct kernel runs (not skips) and passes the
# soft-capped cases; a kernel that finds the setting and ignores it, and one that asks for a wrong
# name (and so sees none), fail them; a kernel declaring "softcapp" is refused at load, naming it.
# Usage: softcap_by_name_plugin.sh ATTNBENCH PLUGIN_DIR WORK_DIR
set -uo pipefail
bin=$(realpath "$1") plugins=$(realpath "$2") work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# Two soft-capped cases (a cap well inside the scores' range, so ignoring it shows) and one without.
cat >cases.txt <<'EOF'
b=1 hq=2 hkv=2 nq=24 nk=31 dk=16 dv=16 dtype=f32 causal=none softcap=0.5 regime=peaked seed=1
b=2 hq=4 hkv=2 nq=17 nk=40 dk=32 dv=8 dtype=f32 causal=none softcap=2 regime=diffuse seed=3
b=1 hq=2 hkv=1 nq=9 nk=13 dk=8 dv=8 dtype=f32 causal=none regime=diffuse seed=4
EOF

# validate NAME EXPECTED_EXIT: the plugin softcap_by_name_NAME (or softcap_by_name_plugin), console in NAME.out.
validate() {
  local name=$1 expected=$2 plugin=$plugins/softcap_by_name_$1.so
  [ "$name" = correct ] && plugin=$plugins/softcap_by_name_plugin.so
  "$bin" validate --plugin "$plugin" --cases cases.txt --property-cases 0 --timeout 20 --out "$name" >"$name.out" 2>&1
  local rc=$?
  echo "$name: exit $rc"
  [ "$rc" -eq "$expected" ] || { fail "$name: exit $rc, not $expected"; tail -n 30 "$name.out"; }
}
expect() { grep -qF -- "$2" "$1.out" || { fail "$1: the output lacks '$2'"; tail -n 30 "$1.out"; }; }
# count NAME STATUS: how many of NAME/verify.json's records have that status.
count() { python3 -c 'import json, sys; print(sum(r["status"] == sys.argv[2] for r in json.load(open(sys.argv[1]))["records"]))' "$1/verify.json" "$2"; }

validate correct 0
expect correct "score modifications: softcap"
[ "$(count correct pass 2>/dev/null)" = 3 ] || fail "correct: $(count correct pass 2>/dev/null) cases passed, not 3 (a soft-capped case skipped?)"
[ "$(count correct fail 2>/dev/null)" = 0 ] || fail "correct: $(count correct fail 2>/dev/null) cases failed"

# The wrong variants: both soft-capped cases fail, the plain one passes.
for wrong in setting_ignored wrong_name; do
  validate "$wrong" 1
  [ "$(count "$wrong" fail 2>/dev/null)" = 2 ] || fail "$wrong: $(count "$wrong" fail 2>/dev/null) cases failed, not the 2 soft-capped ones"
  [ "$(count "$wrong" pass 2>/dev/null)" = 1 ] || fail "$wrong: $(count "$wrong" pass 2>/dev/null) cases passed, not the plain one"
done

validate unknown_name 2
expect unknown_name "score_modifications: unknown 'softcapp' (known: softcap, sink, dropout)"

[ "$failures" -eq 0 ] && echo "softcap_by_name_plugin: all checks passed"
exit $((failures > 0))
