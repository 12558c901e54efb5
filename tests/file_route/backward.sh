#!/usr/bin/env bash
# The backward pass through the file route: `attnbench cases --backward` on backward_cases.txt
# (GQA, both causal alignments, key padding that leaves a batch fully masked, a boolean mask with
# a bias, f64, f32, f16 and bf16, a soft-cap with sinks and dropout) -> examples/file_route/
# sdpa_roundtrip.py (BACKEND numpy: its float64 textbook backward; torch: PyTorch's autograd) ->
# `attnbench check`: every case passes, each record judging dq, dk and dv, and d_bias (d_sink) on
# the case with a bias (with sinks), which the script writes where the manifest names them. Then, on
# a copy of the outputs: one dk element changed by a lot fails that case naming dk, a d_sink with its
# sign flipped fails its case naming d_sink, and a missing dv file fails its case naming the file
# while the other cases still run and pass; none is rerun on the
# reference's O and LSE (the program ran once: no "isolation"). An edited d_o file is bad input
# (exit 2). A directory holding the forward and backward cases of one problem, twice, reads each
# case's own files (a dk changed in the second backward case fails that case alone).
# Exits 77 (CTest: skipped, with the reason) where PYTHON lacks NumPy, or PyTorch for torch.
# Usage: backward.sh ATTNBENCH PYTHON SCRIPT numpy|torch
set -u
bin=${1:?usage: backward.sh ATTNBENCH PYTHON SCRIPT BACKEND}
python=${2:?}
script=${3:?}
backend=${4:?}
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
case $script in /*) ;; *) script=$PWD/$script ;; esac
case $python in /*) ;; */*) python=$PWD/$python ;; esac  # a relative path, not a name on PATH
here=$(cd "$(dirname "$0")" && pwd)
need=numpy
[ "$backend" = torch ] && need=torch
if ! "$python" -c "import numpy, $need" 2>/dev/null; then
  echo "skipped: $python cannot import $need (the $backend backend needs it)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 2
fail() { echo "FAIL: $*"; exit 1; }

"$bin" cases --out cases --backward --cases "$here/backward_cases.txt" >cases.log || { cat cases.log; fail "attnbench cases --backward"; }
cases=$(grep -c '^case ' cases.log)
[ "$cases" -eq 5 ] || { cat cases.log; fail "cases --backward wrote $cases cases, not 5"; }
# The manifest names each backward case's d_o and the gradients with their shapes, and states
# their semantics; NumPy reads d_o as it says.
"$python" - cases <<'PY' || fail "the manifest does not describe the backward cases"
import json, os, sys
import numpy as np
d = sys.argv[1]
manifest = json.load(open(os.path.join(d, "manifest.json")))
assert "dV_j = sum_i P_ij Z_ij r dO_i" in manifest["gradients"], manifest["gradients"]
for case in manifest["cases"]:
    i = case["index"]
    assert case["operation"] == "backward" and case["repro"].startswith("op=backward "), case["repro"]
    b, hq, hkv = case["q"]["shape"][0], case["q"]["shape"][1], case["k"]["shape"][1]
    nq, nk, dk, dv = case["q"]["shape"][2], case["k"]["shape"][2], case["q"]["shape"][3], case["v"]["shape"][3]
    want = {"d_o": [b, hq, nq, dv], "dq": [b, hq, nq, dk], "dk": [b, hkv, nk, dk], "dv": [b, hkv, nk, dv]}
    # The parameters' gradients, optional: the sinks' [h_q] in f32, the bias's in its shape and encoding.
    if case["sinks"] is not None:
        want["d_sink"] = [hq]
        assert case["d_sink"]["npy_dtype"] == "<f4" and case["d_sink"]["optional"], (i, case["d_sink"])
    else:
        assert case["d_sink"] is None, (i, case["d_sink"])
    if case["bias"] is not None:
        want["d_bias"] = case["bias"]["shape"]
        assert case["d_bias"]["npy_dtype"] == case["bias"]["npy_dtype"] and case["d_bias"]["optional"], (i, case["d_bias"])
    else:
        assert case["d_bias"] is None, (i, case["d_bias"])
    for key, shape in want.items():
        assert case[key]["file"] == f"{key}_{i:04}.npy" and case[key]["shape"] == shape, (i, key, case[key])
    a = np.load(os.path.join(d, case["d_o"]["file"]), allow_pickle=False)
    assert list(a.shape) == case["d_o"]["shape"] and a.dtype.str == case["d_o"]["npy_dtype"], (i, a.shape, a.dtype.str)
assert [c["index"] for c in manifest["cases"] if c["bias"] is not None] == [3]
assert [c["index"] for c in manifest["cases"] if c["sinks"] is not None] == [4]
print("the manifest names d_o, dq, dk and dv of", len(manifest["cases"]), "backward cases, d_bias and d_sink where they apply")
PY

"$python" "$script" cases outputs --backend "$backend" >script.log 2>&1 || { cat script.log; fail "$script --backend $backend"; }
for f in out_0000 lse_0000 dq_0000 dk_0000 dv_0000 d_bias_0003 d_sink_0004; do
  [ -f outputs/$f.npy ] || { cat script.log; fail "the script wrote no $f.npy"; }
done
"$bin" check --cases cases --outputs outputs --threads 1 --json check.json >check.log 2>&1
rc=$?
cat check.log
[ "$rc" -eq 0 ] || fail "attnbench check exited $rc on the $backend backend's gradients"
grep -q "^5 passed, 0 failed, 0 skipped over 5 cases" check.log || fail "not every backward case passed"
"$python" - check.json <<'PY' || fail "check's records do not judge dq, dk and dv"
import json, sys
records = json.load(open(sys.argv[1]))["records"]
assert len(records) == 5
for r in records:
    assert r["status"] == "pass" and r["problem"]["operation"] == "backward", r["repro"]
    judged = ["dq", "dk", "dv"] + {3: ["d_bias"], 4: ["d_sink"]}.get(r["case_index"], [])
    assert sorted(r["gradients"]) == sorted(judged) and all(r["roles"][g]["passed"] for g in judged), r["repro"]
    assert "gradients_not_computed" not in r, r["repro"]
PY

# One dk element of case 0 changed by a lot, case 4's d_sink with its sign flipped, and case 2's
# dv missing: all three fail, named; the other two still pass.
cp -r outputs bad
"$python" -c "
import numpy as np
a = np.load('bad/dk_0000.npy'); a[0, 1, 3, 2] += 100; np.save('bad/dk_0000.npy', a)
a = np.load('bad/d_sink_0004.npy'); np.save('bad/d_sink_0004.npy', -a)" || fail "could not plant the dk and d_sink faults"
rm bad/dv_0002.npy
"$bin" check --cases cases --outputs bad --threads 1 --json bad.json >bad.log 2>&1
rc=$?
cat bad.log
[ "$rc" -eq 1 ] || fail "check exited $rc, not 1, with a wrong dk, a wrong d_sink and a missing dv"
grep -q "^2 passed, 3 failed, 0 skipped over 5 cases" bad.log || fail "the other cases did not run and pass beside the three faults"
grep -qE -- "^  - dk: dk max abs error 100 > tolerance" bad.log || fail "the wrong dk element is not named dk"
grep -qE -- "^  - d_sink: d_sink max abs error .* > tolerance" bad.log || fail "the wrong d_sink is not named d_sink"
grep -qF "run failed: bad/dv_0002.npy: no such file" bad.log || fail "the missing dv file is not named"
if grep -qF "fed the reference's O and LSE" bad.log; then fail "given gradients were 'isolated' on the reference's O and LSE"; fi
"$python" - bad.json <<'PY' || fail "the failing records are not as expected"
import json, sys
records = {r["case_index"]: r for r in json.load(open(sys.argv[1]))["records"]}
assert records[0]["status"] == "fail" and not records[0]["roles"]["dk"]["passed"], records[0]["reasons"]
assert records[0]["roles"]["dq"]["passed"] and records[0]["roles"]["dv"]["passed"], records[0]["reasons"]
assert records[2]["status"] == "fail" and any("dv_0002.npy" in r for r in records[2]["reasons"]), records[2]["reasons"]
assert records[4]["status"] == "fail" and not records[4]["roles"]["d_sink"]["passed"], records[4]["reasons"]
assert all(records[4]["roles"][g]["passed"] for g in ("dq", "dk", "dv")), records[4]["reasons"]
assert records[4]["metrics"]["max_abs_at"].startswith("d_sink h="), records[4]["metrics"]["max_abs_at"]
assert all(records[i]["status"] == "pass" for i in (1, 3))
assert not any("isolation" in r for r in records.values())
PY

# An edited dO is not the one the reference regenerates: bad input.
"$python" -c "
import numpy as np
a = np.load('cases/d_o_0001.npy'); a[0, 0, 0, 0] += 1; np.save('cases/d_o_0001.npy', a)" || fail "could not edit d_o"
"$bin" check --cases cases --outputs outputs --threads 1 --json '' >edited.log 2>&1
rc=$?
[ "$rc" -eq 2 ] || { cat edited.log; fail "check exited $rc, not 2, on an edited d_o file"; }
grep -qF "d_o_0001.npy: does not hold case 1's d_o" edited.log || { cat edited.log; fail "the edited d_o file is not named"; }

# The forward and the backward case of one problem, twice: each case reads its own files.
x='b=1 hq=2 hkv=1 nq=6 nk=7 dk=4 dv=4 dtype=f32 causal=top_left regime=diffuse seed=8210'
printf '%s\nop=backward %s\n%s\nop=backward %s\n' "$x" "$x" "$x" "$x" >mixed.txt
"$bin" cases --out mixed --cases mixed.txt >mixed_cases.log || { cat mixed_cases.log; fail "attnbench cases on mixed.txt"; }
"$python" "$script" mixed mixed_out --backend "$backend" >mixed_script.log 2>&1 || { cat mixed_script.log; fail "$script on mixed"; }
"$bin" check --cases mixed --outputs mixed_out --threads 1 --json '' >mixed.log 2>&1 ||
  { cat mixed.log; fail "forward and backward cases of one problem in one directory do not pass"; }
"$python" -c "
import numpy as np
a = np.load('mixed_out/dk_0003.npy'); a[0, 0, 1, 1] += 100; np.save('mixed_out/dk_0003.npy', a)" || fail "could not plant the dk fault"
"$bin" check --cases mixed --outputs mixed_out --threads 1 --json mixed.json >mixed.log 2>&1
rc=$?
[ "$rc" -eq 1 ] || { cat mixed.log; fail "check exited $rc, not 1, with case 3's dk wrong"; }
"$python" - mixed.json <<'PY' || { cat mixed.log; fail "a case read another case's files"; }
import json, sys
status = {r["case_index"]: r["status"] for r in json.load(open(sys.argv[1]))["records"]}
assert status == {0: "pass", 1: "pass", 2: "pass", 3: "fail"}, status
PY
echo "file_route_backward ($backend): passed"
