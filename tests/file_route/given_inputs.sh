#!/usr/bin/env bash
# `attnbench check --inputs`: a user's own tensors (given_case_writer writes them, with outputs it
# computed in double from the stated semantics alone). Exact outputs pass (exit 0) for a mask +
# bias + padding + bottom-right causal case, per-query padding with fully masked rows and an LSE,
# bf16, and dropout with the writer's own keep mask (keep.npy; without the 1 / (1 - p) rescale it
# fails, diagnosed; a missing keep.npy, or one without dropout, is exit 2); one element off by 1e-3 fails (exit 1) and the report names the tensors, not a
# regenerating rerun; a known mistake is diagnosed from the tensors themselves; bad settings, shapes,
# dtypes, missing files, lengths and a NaN where it reaches an output are exit 2 naming the
# file and the fault.
# Usage: given_inputs.sh path/to/attnbench path/to/given_case_writer
set -u

bin=${1:?usage: given_inputs.sh ATTNBENCH WRITER}
writer=${2:?usage: given_inputs.sh ATTNBENCH WRITER}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../cli_checks.sh"
bin=$(absolute "$bin")
writer=$(absolute "$writer")
enter_scratch_dir

# --- exact outputs pass ------------------------------------------------------------------------
for scenario in masked padq bf16; do
  "$writer" "$scenario" "$scenario" exact || fail "the writer failed on $scenario"
  run "good_$scenario" check --inputs "$scenario" --threads 1 --json "good_$scenario.json"
  expect_rc 0
  expect_file_has "good_$scenario.out" "1 passed, 0 failed, 0 skipped over 1 cases"
  expect_file_has "good_$scenario.out" "inputs: the tensors in $scenario"
  expect_file_has "good_$scenario.json" "\"inputs_from\": \"the tensors in $scenario\""
done
expect_file_has good_masked.out "f32 b2 h4/2 n6x9 d16/8 causal_br+pad+bool+bias"
expect_file_has good_padq.out "f16 b2 h2/1 n5 d8 causal_tl+padq"
expect_file_has good_bf16.out "bf16 b1 h2 n4x7 d32/16 nomask"
# The LSE was judged too, and the fully masked rows were there.
checks=$((checks + 1))
python3 - good_padq.json <<'PY' || fail "good_padq.json: the LSE or the fully masked rows were not checked"
import json, sys
r = json.load(open(sys.argv[1]))["records"][0]
m = r["metrics"]
assert m["lse"]["violations"] == 0, m
assert m["fully_masked_rows"] > 0 and m["fully_masked_violations"] == 0, m
PY

# --- dropout: settings' "dropout_p" and the kernel's own keep mask (keep.npy, '<f4') ---------------
"$writer" dropout dropout exact || fail "the writer failed on dropout"
run good_dropout check --inputs dropout --threads 1 --json good_dropout.json
expect_rc 0
expect_file_has good_dropout.out "1 passed, 0 failed, 0 skipped over 1 cases"
expect_file_has good_dropout.out "dropout0.2"
"$writer" norescale dropout no-rescale || fail "the writer failed on no-rescale"
run norescale check --inputs norescale --threads 1 --json norescale.json
expect_rc 1
expect_file_has norescale.json '"hypothesis": "dropout_not_rescaled"'
"$writer" nokeep dropout no-keep || fail "the writer failed on no-keep"
run nokeep check --inputs nokeep --json ""
expect_rc 2
expect_file_has nokeep.err "nokeep/keep.npy: missing (settings.json has dropout 0.2: the keep mask"
"$writer" straykeep masked stray-keep || fail "the writer failed on stray-keep"
run straykeep check --inputs straykeep --json ""
expect_rc 2
expect_file_has straykeep.err "straykeep/keep.npy: a keep mask, but straykeep/settings.json has no \"dropout_p\""

# Several directories in one run; outputs from elsewhere.
mkdir -p outs && cp masked/out.npy outs/out.npy && rm masked/out.npy
run two check --inputs bf16 --inputs masked --outputs bf16 --outputs outs --json ""
expect_rc 0
expect_file_has two.out "2 passed, 0 failed, 0 skipped over 2 cases"

# --- one element off by 1e-3 fails -------------------------------------------------------------
"$writer" off masked off || fail "the writer failed on off"
run off check --inputs off --json off.json
expect_rc 1
expect_file_has off.out "0 passed, 1 failed"
expect_file_has off.out "rerun: attnbench check --inputs off (the case is the tensors in off; its repro string cannot regenerate them)"
checks=$((checks + 1))
! grep -q "attnbench verify --impl" off.out || fail "off.out offers a rerun that would generate other tensors"

# --- a known mistake is diagnosed from the given tensors (their own mask and bias, no seed) ----
"$writer" wrong-scale masked wrong-scale || fail "the writer failed on wrong-scale"
run wrong-scale check --inputs wrong-scale --json wrong-scale.json
expect_rc 1
expect_file_has wrong-scale.out "the output matches scale = 1/sqrt(d_k)"
expect_file_has wrong-scale.json "\"hypothesis\": \"scale_constant\""
"$writer" causal-ignored masked causal-ignored || fail "the writer failed on causal-ignored"
run causal-ignored check --inputs causal-ignored --json ""
expect_rc 1
expect_file_has causal-ignored.out "the output matches no causal mask"

# --- bad input: exit 2, the file and the fault named --------------------------------------------
bad() {  # bad MODE SCENARIO TEXT
  "$writer" "bad_$1" "$2" "$1" || fail "the writer failed on $1"
  run "bad_$1" check --inputs "bad_$1" --json ""
  expect_rc 2
  expect_file_has "bad_$1.err" "$3"
}
bad unknown-key masked "bad_unknown-key/settings.json: unknown key 'sink'"
bad twice-key masked "bad_twice-key/settings.json: the key 'causal' is given twice in one object"
bad bad-causal masked "bad_bad-causal/settings.json: causal must be"
bad kdim masked "bad_kdim/k.npy: shape (2, 2, 9, 17): d_k = 17 but q.npy gives d_k = 16"
bad no-v masked "bad_no-v/v.npy: missing"
bad mask-shape masked "bad_mask-shape/mask.npy: shape (3, 4, 6, 9) does not broadcast"
bad int-q masked "bad_int-q/q.npy: descr '<i4' is not a tensor dtype"
bad nan-q bf16 "bad_nan-q/q.npy: element (0, 1, 2, 3) is nan: the reference needs finite inputs"
bad lens-range padq "bad_lens-range/valid_lens.npy: element 0 = 6 is outside [0, n_k = 5]"
"$writer" noout masked exact && rm noout/out.npy
run noout check --inputs noout --json ""
expect_rc 2
expect_file_has noout.err "noout/out.npy: missing"
run mixed check --inputs padq --inputs bf16 --json ""
expect_rc 2
expect_file_has mixed.err "the tensors in padq has an lse.npy and the tensors in bf16 has none"
run both check --inputs masked --cases masked --outputs masked
expect_rc 2
run count check --inputs masked --inputs bf16 --outputs outs
expect_rc 2
expect_file_has count.err "1 --outputs for 2 --inputs"

echo "given_inputs: $checks checks, $failures failures"
[ "$failures" -eq 0 ]
