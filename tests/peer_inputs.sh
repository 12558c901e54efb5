#!/usr/bin/env bash
# The peers run the harness's problems on the harness's inputs (issue 20): `attnbench bench --peers`
# runs a stand-in peer that reads the cases folder through benchmarks/peers/peer_problem.py and
# cpu_peers.py's own input path (bsh_inputs: the files in the peers' layout), computes each case's
# output with cpu_peers.py's float64 oracle, and writes it as the file route's out_NNNN.npy; then
# `attnbench check` judges those outputs against our reference on our inputs under the pass rule.
# They pass only if the peer read our bits: the control run, whose peer draws its own inputs of the
# same distribution (what the scripts did before), must fail the same check. The stand-in also runs
# cpu_peers.py's check_peer/judge on the folder's check cases with an exact peer (all pass) and
# records its timings, which bench compares with ours. Where ONNX Runtime and JAX are installed
# (ci/install-peers.sh), cpu_peers.py itself runs through bench --peers. Exits 77 (CTest: skipped)
# without NumPy.
# Usage: peer_inputs.sh ATTNBENCH [PYTHON]
set -u
export PYTHONDONTWRITEBYTECODE=1  # the peers' modules are imported from the source tree

bin=${1:?usage: peer_inputs.sh ATTNBENCH [PYTHON]}
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
src=$(cd "$(dirname "$0")/.." && pwd)
# The given python, else Debian's (a pyenv python3 earlier on PATH may lack python3-numpy).
python=""
for candidate in "${2:-python3}" /usr/bin/python3; do
  if "$candidate" -c "import numpy" 2>/dev/null; then python=$candidate; break; fi
done
[ -n "$python" ] || { echo "peer_inputs: skipped: no python with NumPy (${2:-python3}, /usr/bin/python3)"; exit 77; }

source "$src/tests/cli_checks.sh"  # fail, enter_scratch_dir
enter_scratch_dir

cat >"$tmp/oracle_peer.py" <<'PY'
import argparse, json, os, sys
import numpy as np
sys.path.insert(0, os.path.join(sys.argv[1], "benchmarks", "peers"))
import cpu_peers
from peer_problem import load_cases

ap = argparse.ArgumentParser()
ap.add_argument("src")
ap.add_argument("outputs")
ap.add_argument("--own-inputs", action="store_true")
ap.add_argument("--cases", required=True)
ap.add_argument("--threads", type=int, required=True)
ap.add_argument("--out", required=True)
a = ap.parse_args()
cases = load_cases(a.cases)
outs = a.outputs
os.makedirs(outs)
rng = np.random.default_rng(0)

def inputs(c):
    if a.own_inputs:  # the old way: the same distribution (diffuse, peaked, ...) but other bits
        return tuple(x.std() * rng.standard_normal(x.shape).astype(np.float32) for x in cpu_peers.bsh_inputs(c))
    return cpu_peers.bsh_inputs(c)

for c in cases:
    o = cpu_peers.textbook_attention(c, *inputs(c), np.float64)  # BSH [b, n_q, h*d_v]
    bhsd = o.reshape(c.b, c.n_q, c.h, c.d_v).transpose(0, 2, 1, 3).astype(np.float32)
    np.save(os.path.join(outs, os.path.basename(c.files[0]).replace("q_", "out_")), bhsd)

class ExactPeer:  # the float64 oracle rounded to f32: every check must pass
    name, version = "oracle64", "1"
    def mask_method(self, causal):
        return "exclusion"
    def prepare(self, c, q, k, v):
        out = cpu_peers.textbook_attention(c, q, k, v, np.float64).astype(np.float32)
        return lambda: out
checks = cpu_peers.check_peer(ExactPeer(), [c for c in cases if c.role == "check"])
valid = all(x["pass"] for x in checks)
timed = [c for c in cases if c.role == "timed"]
print(f"oracle_peer: {len(cases)} outputs written; checks {'pass' if valid else 'FAIL'}; "
      f"{len(timed)} timed, d {sorted({c.d_k for c in timed})} masks {sorted({c.causal for c in timed})}", flush=True)
results = [{"peer": "oracle64", "peer_version": "1", "problem": c.record(), "median_seconds": 1.0, "min_seconds": 1.0,
            "times": [1.0], "gflops_exact": c.flops() / 1e9, "valid_target": valid} for c in timed]
json.dump({"schema": "attnbench.peers", "schema_version": 1, "context": {},
           "peers": [{"peer": "oracle64", "peer_version": "1", "checked": checks, "valid_target": valid}],
           "results": results}, open(a.out, "w"), indent=1)
sys.exit(0 if valid else 1)
PY

# The stand-in writes its outputs into the test's folder, outside the sandbox's scratch directory:
# the case --sandbox=off is for (bench_smoke checks the sandbox itself).
run() {  # run NAME [--own-inputs]: bench --peers with the stand-in; the cases (kept) and outputs in $tmp/NAME
  "$bin" bench --smoke --impl cpu_naive --dtype f32 --d 32,64 --heads 2 --json "$tmp/$1/bench.json" --sandbox off \
    --peers "$python $tmp/oracle_peer.py $src $tmp/$1/outputs ${2:-}" --peers-cases "$tmp/$1/pc" >"$tmp/$1.out" 2>&1
}

run harness
rc=$?
[ "$rc" -eq 0 ] || { fail "bench --peers with the oracle peer: exit $rc, expected 0"; tail -n 20 "$tmp/harness.out"; }
grep -q "^oracle_peer: 36 outputs written; checks pass; 12 timed, d \[32, 64\] masks \['none', 'top_left'\]$" "$tmp/harness.out" ||
  { fail "the oracle peer did not read 24 checks and 12 timed cases, or cpu_peers.py's checks failed on exact outputs"; grep oracle_peer "$tmp/harness.out"; }
"$python" - "$tmp/harness/bench.json" <<'PY' || fail "bench did not compare the oracle peer's records with ours"
import json, sys
c = json.load(open(sys.argv[1]))["attnbench"]["peers"]["comparisons"]
assert len(c) == 12 and all(x["target"]["peer"] == "oracle64" for x in c), c
PY
"$bin" check --cases "$tmp/harness/pc/cases" --outputs "$tmp/harness/outputs" >"$tmp/check.out" 2>&1
rc=$?
[ "$rc" -eq 0 ] || { fail "attnbench check on the peer's outputs from our inputs: exit $rc, expected 0"; tail -n 20 "$tmp/check.out"; }

# The control: a peer that draws its own inputs cannot pass.
run own --own-inputs
"$bin" check --cases "$tmp/own/pc/cases" --outputs "$tmp/own/outputs" >"$tmp/check_own.out" 2>&1
rc=$?
[ "$rc" -eq 1 ] || { fail "attnbench check on outputs from the peer's own inputs: exit $rc, expected 1 (the check cannot tell)"; tail -n 20 "$tmp/check_own.out"; }
grep -q "FAIL" "$tmp/check_own.out" || fail "attnbench check on outputs from the peer's own inputs: no failed case reported"

# cpu_peers.py itself, where its peers are installed (the tests' venv, ci/python-env.sh, or
# ci/install-peers.sh's .venv): checked on our check cases and timed on our problems, compared with
# ours. PyTorch's CPU SDPA backends (torch_sdpa_math, torch_sdpa_flash) too where PyTorch is.
if "$python" -c "import onnxruntime, onnx, jax" 2>/dev/null; then
  has_torch=0
  "$python" -c "import torch" 2>/dev/null && has_torch=1
  "$bin" bench --smoke --impl cpu_naive --dtype f32 --threads 1 --json "$tmp/real/bench.json" \
    --peers "$python $src/benchmarks/peers/cpu_peers.py --repetitions 1" >"$tmp/real.out" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || { fail "bench --peers cpu_peers.py: exit $rc"; tail -n 20 "$tmp/real.out"; }
  "$python" - "$tmp/real/bench.json" "$has_torch" <<'PY' || fail "bench --peers cpu_peers.py: its checks or records are not of our cases"
import json, sys
p = json.load(open(sys.argv[1]))["attnbench"]["peers"]
assert p["status"] == "ok" and p["cases"] == {"check": 12, "timed": 6}, (p["status"], p["cases"])
ran = [peer for peer in p["peers"] if "skipped" not in peer]
expected = ["onnxruntime", "jax"] + (["torch_sdpa_math", "torch_sdpa_flash"] if sys.argv[2] == "1" else [])
assert [peer["peer"] for peer in ran] == expected, ([peer["peer"] for peer in ran], expected)
for peer in ran:
    assert peer["valid_target"] is True and len(peer["checked"]) == 12, peer
    assert all(c["problem"].endswith("seed=7") for c in peer["checked"]), peer["checked"]
assert len(p["results"]) == 6 * len(ran) and not p["left_out_records"], (len(p["results"]), p["left_out_records"])
assert len(p["comparisons"]) == 6 and all(c["target"] for c in p["comparisons"]), p["comparisons"]
PY
else
  echo "peer_inputs: cpu_peers.py's own peers not run (no onnxruntime, onnx and jax in $python; see ci/install-peers.sh)"
fi

echo "peer_inputs: $failures failed"
[ "$failures" -eq 0 ]
