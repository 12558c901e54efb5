"""Problem, case sets and inputs through the binding: the C++ core's, not a copy."""
import json

import numpy as np
import pytest

import attnbench
from conftest import have

REPRO = "b=2 hq=4 hkv=2 nq=17 nk=33 dk=16 dv=8 dtype=f16 causal=bottom_right pad=5,33 regime=peaked seed=7"


def test_repro_strings_round_trip():
    p = attnbench.Problem.parse(REPRO)
    assert p.repro() == REPRO and str(p) == REPRO
    assert (p.batch, p.h_q, p.h_kv, p.n_q, p.n_k, p.d_k, p.d_v) == (2, 4, 2, 17, 33, 16, 8)
    assert p.dtype == "f16" and p.causal == "bottom_right" and p.window == (None, 0, "bottom_right")
    assert p.scale is None and p.effective_scale == pytest.approx(0.25)
    assert attnbench.Problem.parse(p.repro()) == p


def test_json_round_trip_keeps_every_field():
    p = attnbench.Problem.parse(REPRO + " dtypes=o:f32 scale=0.3")
    q = attnbench.Problem.from_json(p.to_json())
    assert q == p and json.loads(q.to_json()) == json.loads(p.to_json())
    assert p.dtype_of("o") == "f32" and p.dtype_of("k") == "f16"


def test_bad_repro_strings_name_the_problem():
    with pytest.raises(ValueError, match="nk"):
        attnbench.Problem.parse("b=1 hq=1 hkv=1 nq=3 dk=8 dv=8 dtype=f32 causal=none regime=diffuse seed=1")
    with pytest.raises(ValueError, match="dtype"):
        attnbench.Problem.parse("b=1 hq=1 hkv=1 nq=3 nk=3 dk=8 dv=8 dtype=f8 causal=none regime=diffuse seed=1")


def test_case_sets_by_name():
    default, quick = attnbench.cases("default"), attnbench.cases("quick")
    assert len(quick) > 10 and len(default) > len(quick)
    assert all(isinstance(p, attnbench.Problem) for p in default)


def test_inputs_are_the_cases_bits_in_every_framework():
    p = attnbench.Problem.parse(REPRO)
    a = attnbench.make_inputs(p)
    b = attnbench.make_inputs(p)
    assert a["q"].dtype == np.float16 and a["q"].shape == (2, 4, 17, 16)
    assert np.array_equal(a["q"], b["q"]) and np.array_equal(a["valid_lens"], [5, 33])
    if have("torch"):
        import torch
        t = attnbench.make_inputs(p, arrays="torch")
        assert t["q"].dtype == torch.float16 and torch.equal(t["q"], torch.from_numpy(a["q"]))
    if have("jax"):
        j = attnbench.make_inputs(p, arrays="jax")
        assert np.array_equal(np.asarray(j["k"]), a["k"])


def test_bf16_crosses_as_ml_dtypes_in_numpy_and_dlpack_bfloat_in_torch():
    p = attnbench.Problem.parse("b=1 hq=1 hkv=1 nq=4 nk=4 dk=8 dv=8 dtype=bf16 causal=none regime=diffuse seed=1")
    a = attnbench.make_inputs(p)
    import ml_dtypes
    assert a["q"].dtype == ml_dtypes.bfloat16
    if have("torch"):
        import torch
        t = attnbench.make_inputs(p, arrays="torch")
        assert t["q"].dtype == torch.bfloat16
        assert np.array_equal(t["q"].float().numpy(), a["q"].astype(np.float32))
        # The judge reads torch's bf16 through DLPack's bfloat code, numpy's through ml_dtypes.
        ref = attnbench.reference(t["q"], t["k"], t["v"])
        assert ref.o.dtype == torch.bfloat16
        assert attnbench.judge(t["q"], t["k"], t["v"], ref.o).passed
        assert attnbench.judge(a["q"], a["k"], a["v"], ref.o.float().numpy().astype(ml_dtypes.bfloat16)).passed


def test_the_type_stubs_are_nanobinds_stubgen_of_this_module(tmp_path):
    stubgen = pytest.importorskip("nanobind.stubgen")
    import os
    import subprocess
    import sys
    out = tmp_path / "_native.pyi"
    run = subprocess.run([sys.executable, "-m", "nanobind.stubgen", "-m", "attnbench._native", "-o", str(out)], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    committed = os.path.join(os.path.dirname(attnbench.__file__), "_native.pyi")
    assert out.read_text() == open(committed).read(), "python/attnbench/_native.pyi is stale: rerun nanobind.stubgen (python/README.md)"
