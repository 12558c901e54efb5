#!/usr/bin/env bash
# The file route end to end: `attnbench cases --out` -> an external program (file_route_standin,
# which computes attention in double from the .npy files alone) -> `attnbench check` passes; then
# the same outputs with one file missing, one truncated, one mis-shaped and one wrong value: exit 1,
# each fault named, the other case still checked; then bad input (exit 2): an edited q file, a
# missing or malformed manifest, a foreign output directory for `cases`; soft-capping and dropout
# carried by the manifest (dropout's keep mask written by the program: a wrong one, one without
# the 1 / (1 - p) rescale and a missing keep file fail).
# Usage: file_route.sh path/to/attnbench path/to/file_route_standin
set -u

bin=${1:?usage: file_route.sh ATTNBENCH STANDIN}
standin=${2:?usage: file_route.sh ATTNBENCH STANDIN}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../cli_checks.sh"
bin=$(absolute "$bin")
standin=$(absolute "$standin")
enter_scratch_dir

# --- cases -> the stand-in -> check ------------------------------------------------------------
run cases cases --out cases --cases "$here/cases.txt"
expect_rc 0
expect_file_has cases.out "5 case(s) written to cases"
for f in manifest.json q_0000.npy k_0001.npy v_0002.npy mask_0003.npy mask_0004.npy bias_0004.npy; do
  checks=$((checks + 1))
  [ -f "cases/$f" ] || fail "cases/$f was not written"
done
checks=$((checks + 1))
[ ! -e cases/mask_0000.npy ] || fail "case 0 masks nothing but has a mask file"

"$standin" cases good || fail "the stand-in failed on the good run"
run good check --cases cases --outputs good --threads 1 --json good.json
expect_rc 0
expect_file_has good.out "5 passed, 0 failed, 0 skipped over 5 cases"
expect_file_has good.json '"implementation": "files:good"'
# The LSE is checked when the outputs have it: without the files the same outputs pass too.
"$standin" cases nolse --no-lse || fail "the stand-in failed without lse"
run nolse check --cases cases --outputs nolse --threads 1 --json ""
expect_rc 0

# --- faults: each case fails naming its file and fault; case 0 is still checked and passes -----
"$standin" cases bad --wrong-shape 2 --wrong-value 4 || fail "the stand-in failed on the faulty run"
rm bad/out_0001.npy
truncate -s 200 bad/out_0003.npy
run bad check --cases cases --outputs bad --threads 1 --json bad.json
expect_rc 1
expect_file_has bad.out "1 passed, 4 failed, 0 skipped over 5 cases"
expect_file_has bad.out "bad/out_0001.npy: no such file"
expect_file_has bad.out "bad/out_0003.npy: header says shape (2, 2, 8, 16) = 512 elements of 4 bytes but the file holds 72 data bytes"
expect_file_has bad.out "bad/out_0002.npy: shape (1, 2, 15, 16) but the case expects (1, 2, 16, 16)"
expect_file_has bad.out "FAIL files:bad on case 4"
checks=$((checks + 1))
python3 - bad.json <<'PY' || fail "bad.json does not record the five verdicts"
import json, sys
doc = json.load(open(sys.argv[1]))
records = doc["records"]
statuses = {r["case_index"]: r["status"] for r in records}
assert statuses == {0: "pass", 1: "fail", 2: "fail", 3: "fail", 4: "fail"}, statuses
PY

# --- bad input: exit 2, naming the file and the fault ------------------------------------------
cp -r cases edited
printf '\x01' | dd of=edited/q_0002.npy bs=1 seek=200 conv=notrunc status=none
run edited check --cases edited --outputs good --json ""
expect_rc 2
expect_file_has edited.err "edited/q_0002.npy: does not hold case 2's q (element"

cp -r cases nomanifest && rm nomanifest/manifest.json
run nomanifest check --cases nomanifest --outputs good --json ""
expect_rc 2
expect_file_has nomanifest.err "nomanifest/manifest.json: no manifest"

cp -r cases broken && echo '{"schema": "attnbench.cases", "version": 1, "cases": [' >broken/manifest.json
run broken check --cases broken --outputs good --json ""
expect_rc 2
expect_file_has broken.err "broken/manifest.json: not valid JSON"

run nooutputs check --cases cases --outputs absent --json ""
expect_rc 2
expect_file_has nooutputs.err "absent: no such directory"

# --- soft-capping: the manifest carries it, the program applies it; a declaration that does not
# list it is given no soft-capped case (skipped, named), one that lists it is ------------------
softcapped="b=1 hq=2 hkv=1 nq=9 nk=12 dk=8 dv=8 dtype=f32 causal=bottom_right bias=1@h softcap=3 regime=large seed=8106"
run capcases cases --out capcases --case "$softcapped"
expect_rc 0
checks=$((checks + 1))
python3 -c "import json,sys; c=json.load(open('capcases/manifest.json'))['cases'][0]; sys.exit(c['softcap'] != 3)" ||
  fail "the manifest does not carry softcap 3"
"$standin" capcases capout || fail "the stand-in failed on the soft-capped case"
run capgood check --cases capcases --outputs capout --threads 1 --json ""
expect_rc 0
expect_file_has capgood.out "1 passed, 0 failed, 0 skipped over 1 cases"
echo '{"schema": "attnbench.capabilities", "version": 1, "dtypes": ["f32"]}' >uncapped.json
run capskip check --cases capcases --outputs capout --declare uncapped.json --threads 1 --json ""
expect_file_has capskip.out "soft-capping (softcap=) not declared"
echo '{"schema": "attnbench.capabilities", "version": 1, "dtypes": ["f32"], "score_modifications": ["softcap"]}' >capped.json
run capdeclared check --cases capcases --outputs capout --declare capped.json --threads 1 --json ""
expect_rc 0
expect_file_has capdeclared.out "1 passed, 0 failed, 0 skipped over 1 cases"
echo '{"schema": "attnbench.capabilities", "version": 1, "dtypes": ["f32"], "score_modifications": ["softcapp"]}' >typo.json
run captypo check --cases capcases --outputs capout --declare typo.json --threads 1 --json ""
expect_rc 2
expect_file_has captypo.err "'score_modifications': unknown \"softcapp\" (expected a list of some of softcap, sink, dropout)"

# --- dropout: the manifest carries p and the stream's seed and names keep_NNNN.npy; the program
# draws its own keep mask (the stand-in: core's built-in stream) and writes it beside the output,
# which is judged given it. A wrong keep mask, kept weights not rescaled by 1 / (1 - p) and a
# missing keep file each fail (exit 1, named); a declaration without dropout skips the case -----
dropped="b=1 hq=2 hkv=1 nq=16 nk=24 dk=8 dv=8 dtype=f32 causal=bottom_right dropout=0.25 dropout_seed=7 regime=diffuse seed=8107"
run dropcases cases --out dropcases --case "$dropped"
expect_rc 0
checks=$((checks + 1))
python3 - dropcases/manifest.json <<'PY' || fail "the manifest does not carry dropout 0.25, seed 7 and keep_0000.npy"
import json, sys
c = json.load(open(sys.argv[1]))["cases"][0]
assert c["dropout_p"] == 0.25 and c["dropout_seed"] == 7 and c["softcap"] is None, c
assert c["keep"] == {"file": "keep_0000.npy", "shape": [1, 2, 16, 24], "npy_dtype": "|b1"}, c["keep"]
PY
"$standin" dropcases dropout || fail "the stand-in failed on the dropout case"
checks=$((checks + 1))
[ -f dropout/keep_0000.npy ] || fail "the stand-in wrote no keep_0000.npy"
run dropgood check --cases dropcases --outputs dropout --threads 1 --json dropgood.json
expect_rc 0
expect_file_has dropgood.out "1 passed, 0 failed, 0 skipped over 1 cases"
"$standin" dropcases dropwrong --keep-wrong 0 || fail "the stand-in failed with --keep-wrong"
run dropwrong check --cases dropcases --outputs dropwrong --threads 1 --json ""
expect_rc 1
expect_file_has dropwrong.out "0 passed, 1 failed"
"$standin" dropcases dropnorescale --no-rescale 0 || fail "the stand-in failed with --no-rescale"
run dropnorescale check --cases dropcases --outputs dropnorescale --threads 1 --json dropnorescale.json
expect_rc 1
expect_file_has dropnorescale.out "0 passed, 1 failed"
expect_file_has dropnorescale.json '"hypothesis": "dropout_not_rescaled"'
"$standin" dropcases dropnokeep --no-keep || fail "the stand-in failed with --no-keep"
run dropnokeep check --cases dropcases --outputs dropnokeep --threads 1 --json ""
expect_rc 1
expect_file_has dropnokeep.out "dropnokeep/keep_0000.npy: no such file (dropout=0.25: the keep mask"
run dropskip check --cases dropcases --outputs dropout --declare uncapped.json --threads 1 --json ""
expect_file_has dropskip.out "dropout with its keep mask reported (dropout=) not declared"
echo '{"schema": "attnbench.capabilities", "version": 1, "dtypes": ["f32"], "score_modifications": ["dropout"]}' >dropdeclared.json
run dropdeclared check --cases dropcases --outputs dropout --declare dropdeclared.json --threads 1 --json ""
expect_rc 0
expect_file_has dropdeclared.out "1 passed, 0 failed, 0 skipped over 1 cases"

mkdir foreign && echo keep >foreign/notes.txt
run foreign cases --out foreign --cases "$here/cases.txt"
expect_rc 2
expect_file_has foreign.err "foreign: not empty and not a cases directory"
checks=$((checks + 1))
[ -f foreign/notes.txt ] || fail "cases removed a file it did not write"
# An earlier cases directory is replaced, stale cases included.
run rewrite cases --out cases --case "b=1 hq=1 hkv=1 nq=3 nk=3 dk=4 dv=4 dtype=f32 causal=none regime=diffuse seed=1"
expect_rc 0
checks=$((checks + 1))
[ ! -e cases/q_0004.npy ] || fail "a rewritten cases directory kept a stale case"

finish file_route
