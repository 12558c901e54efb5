#!/usr/bin/env bash
# A kernel that supports one fixed scale and causal masks only (tests/plugins/fixed_scale_causal_plugin.c,
# declared with ATTNBENCH_FEATURE_DEFAULT_SCALE_ONLY and ATTNBENCH_FEATURE_CAUSAL_ONLY) is checked
# on what it computes, not skipped and not failed for what it does not: `attnbench validate` on
# the default set exits 0 with at least 40 cases run (each the projection of a case onto the
# default scale and a bottom-right causal mask) and no property failing for a problem it refuses;
# each wrong variant (the built-in scale 1/d_k; the diagonal aligned top-left) exits 1 with the
# diagnosis naming its mistake; a finding (property 13 on a kernel that multiplies masked keys in)
# replayed with the command validate printed exits 0 reporting it; a crash inside that same check
# (a variant aborting on a non-finite V) is a failure, exit 1; a crash on GQA cases only is blamed
# on the head mapping.
# Usage: fixed_scale_causal_plugin.sh ATTNBENCH PLUGIN_DIR WORK_DIR
set -uo pipefail
bin=$(realpath "$1") plugins=$(realpath "$2") work=$3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# cases_run DIR: how many cases ran (passed or failed) in DIR/verify.json.
cases_run() {
  python3 -c 'import json, sys; print(sum(r["status"] in ("pass", "fail") for r in json.load(open(sys.argv[1]))["records"]))' "$1/verify.json"
}

"$bin" validate --plugin "$plugins/fixed_scale_causal_plugin.so" --cases default --property-cases 10 --out correct >correct.out 2>&1
rc=$?
ran=$(cases_run correct 2>/dev/null || echo 0)
echo "correct kernel: exit $rc, $ran default cases run"
[ "$rc" -eq 0 ] || { fail "the correct kernel: exit $rc, not 0"; tail -n 30 correct.out; }
[ "$ran" -ge 40 ] || fail "the correct kernel ran $ran default cases, not at least 40"
grep -q "properties: 0 failed" correct.out || fail "a property failed on the correct kernel"

for variant in scale_over_dk:"divided by d_k instead of sqrt(d_k)" top_left:"top-left causal mask where bottom-right was asked"; do
  name=${variant%%:*} named=${variant#*:}
  "$bin" validate --plugin "$plugins/fixed_scale_causal_$name.so" --cases default --property-cases 10 --out "$name" >"$name.out" 2>&1
  rc=$?
  echo "variant $name: exit $rc, $(cases_run "$name" 2>/dev/null || echo 0) cases run"
  [ "$rc" -eq 1 ] || fail "the wrong variant $name: exit $rc, not 1"
  grep -qF "$named" "$name.out" || fail "the diagnosis of $name does not say '$named'"
done
# A finding replayed exits by a finding's rule (0), not as a run in which nothing ran: the
# variant that multiplies masked keys in (0 * NaN) gets property 13's finding, and the rerun
# command validate prints for it, run as printed, reports the finding again and exits 0.
"$bin" validate --plugin "$plugins/fixed_scale_causal_masked_values_multiplied.so" --cases quick --property-cases 20 --out finding \
  >finding.out 2>&1
rc=$?
echo "masked values multiplied in: exit $rc"
[ "$rc" -eq 0 ] || fail "the kernel with a finding: exit $rc, not 0"
rerun=$(grep -m1 -o "replay the finding: attnbench validate --plugin .*--property 13" finding.out)
rerun=${rerun#replay the finding: }
if [ -z "$rerun" ]; then
  fail "no finding of property 13 with a rerun command"
  grep -n "13 " finding.out | head -5
else
  eval "\"$bin\" ${rerun#attnbench } --out replay" >replay.out 2>&1
  rc=$?
  echo "the finding replayed: exit $rc"
  [ "$rc" -eq 0 ] || { fail "the replayed finding: exit $rc, not 0"; tail -n 8 replay.out; }
  grep -q "1 finding(s)" replay.out || fail "the replay does not report the finding"
  grep -q "no case and no property ran" replay.out && fail "the replay says nothing ran"
fi
# A crash is a failure wherever it happens: the variant that aborts on a non-finite V crashes in
# property 13's check, whose mismatches would be findings; validate exits 1 with it failed.
"$bin" validate --plugin "$plugins/fixed_scale_causal_crash_on_nonfinite.so" --cases quick --property-cases 20 --out crash >crash.out 2>&1
rc=$?
echo "crashes on a non-finite V: exit $rc"
[ "$rc" -eq 1 ] || fail "the kernel that crashes in property 13: exit $rc, not 1"
grep -qE "^ *13 FAILED" crash.out || { fail "property 13 is not reported failed for the crash"; grep -n "^ *13 " crash.out | head -3; }
# Named as what it is: the kernel abort()s. (In the sandbox's PID namespace a worker that is its
# process 1 ignores its own SIGABRT, and abort() then faults: it once read SIGSEGV.)
grep -q "the plugin crashed: SIGABRT (abort)" crash.out || { fail "the abort is not named SIGABRT"; grep -m3 "crashed" crash.out; }
# Blame where it belongs: a kernel that crashes on GQA cases only (query head h reads kv head h,
# past the end of K) fails them saying that the same case as MHA passes, naming the head mapping.
"$bin" validate --plugin "$plugins/fixed_scale_causal_gqa_reads_head_h.so" --cases quick --property-cases 2 --out gqa >gqa.out 2>&1
rc=$?
echo "GQA head h read as kv head h: exit $rc"
[ "$rc" -eq 1 ] || fail "the kernel that crashes on GQA: exit $rc, not 1"
grep -q "(MHA) runs and passes: the failure is in its GQA head mapping" gqa.out || fail "no GQA crash names the head mapping"
[ "$failures" -eq 0 ] && echo "fixed_scale_causal_plugin: all checks passed"
[ "$failures" -eq 0 ]
