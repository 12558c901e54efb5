"""attnbench: verify, judge, property-test and time attention kernels written in Python.

The package binds attnbench's C++ core (nanobind): the 113-bit reference, the pass rule, the
diagnosis of a failure, the case sets and the property suite are the ones ``attnbench verify``
uses, computed by the same code. Ten lines::

    import torch, attnbench
    sdpa = torch.nn.functional.scaled_dot_product_attention
    result = attnbench.verify(sdpa, cases="quick", convention="torch_sdpa", arrays="torch")
    assert result.passed, result.summary()
    for failure in result.failures:
        print(failure.repro, failure.diagnosis)
    result.write_json("results/verify.json")          # attnbench report / gate read it
    verdict = attnbench.judge(q, k, v, out, causal="bottom_right")
    print(verdict)                                    # pass/fail, errors, budget, worst element, diagnosis
    grads = attnbench.verify(sdpa, cases="quick", convention="torch_sdpa", arrays="torch", backward=True)  # dQ, dK, dV by autograd
"""
from __future__ import annotations

from ._native import Problem, cases, make_inputs as _make_inputs, score_settings
from ._conventions import Convention, described, flash_attn, native, torch_sdpa
from ._runs import (BackwardJudgement, BenchResult, Failure, Judgement, PropertiesResult, Reference, VerifyResult, bench, judge,
                    judge_backward, properties, reference, verify)
from . import _arrays

__all__ = ["Problem", "cases", "make_inputs", "score_settings", "reference", "judge", "judge_backward", "verify", "properties", "bench",
           "Convention", "native", "torch_sdpa", "flash_attn", "described", "VerifyResult", "Failure", "Judgement", "BackwardJudgement",
           "Reference", "PropertiesResult", "BenchResult"]


def _fields(problem) -> dict:
    """Every field of the problem, as the result files' JSON holds it."""
    import json
    return json.loads(problem.to_json())


Problem.fields = property(_fields)


def make_inputs(problem, arrays: str = "numpy", device: str = "cpu") -> dict:
    """The problem's seeded inputs, the bits every implementation and the reference read.

    Returns {"q", "k", "v"} in the framework asked for (numpy arrays own their memory; torch
    tensors share it, zero-copy; bf16 as ml_dtypes.bfloat16 in NumPy), and the mask's parts as the
    native convention names them: "scale" (None: 1/sqrt(d_k)), "window", "valid_lens", "mask",
    "bias", "alibi_slopes", "o_dtype".
    """
    if isinstance(problem, str):
        problem = Problem.parse(problem)
    raw = _make_inputs(problem)
    out = {}
    for role in ("q", "k", "v"):
        out[role] = _arrays.from_native(raw[role], problem.dtype_of(role), arrays, device)
    for key in ("scale", "window", "valid_lens", "mask", "alibi_slopes", "o_dtype"):
        out[key] = raw[key]
    out["bias"] = None if raw["bias"] is None else _arrays.from_native(raw["bias"], problem.dtype_of("bias"), arrays, device)
    return out
