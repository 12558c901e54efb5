#!/usr/bin/env python3
"""Standalone check of numpy_kernels.py (no harness): on small random problems (several shapes,
windows, padding, boolean masks, biases, GQA/MQA, fully masked rows, NaN in masked K/V rows; f64,
f32, f16 and bf16 inputs, f16/bf16 inputs with an f32 output)

* the correct kernel matches a float64 reference written here independently, with loops;
* every mutant differs from that reference on at least one problem where its mistake shows, and
  gives exactly the correct kernel's output where its mistake cannot show (tests/mutants_test.cpp's
  inert rules);
* sdpa matches the reference under PyTorch's convention (and torch itself, when it is installed);
  sdpa_ignoring_scale differs where an explicit scale is given.

Run: python python/tests/check_numpy_kernels.py   (exit status 0 when everything holds)
"""

from __future__ import annotations

import math
import os
import sys

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy_kernels as nk  # noqa: E402

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)


# ---------------------------------------------------------------------------------------------
# The float64 reference, written directly: one row at a time, the visible keys listed, math.exp.
# ---------------------------------------------------------------------------------------------

def reference(q, k, v, scale, window, valid_lens, mask, bias):
    q, k, v = (np.asarray(x).astype(np.float64) for x in (q, k, v))
    b_, h_q, n_q, d_k = q.shape
    h_kv, n_k, d_v = k.shape[1], k.shape[2], v.shape[3]
    if scale is None:
        scale = 1.0 / math.sqrt(d_k)
    o = np.zeros((b_, h_q, n_q, d_v))
    lse = np.full((b_, h_q, n_q), -math.inf)
    full_mask = None if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), (b_, h_q, n_q, n_k))
    full_bias = None if bias is None else np.broadcast_to(np.asarray(bias).astype(np.float64), (b_, h_q, n_q, n_k))
    for b in range(b_):
        for h in range(h_q):
            g = h // (h_q // h_kv)
            for i in range(n_q):
                keys = []
                for j in range(n_k):
                    if window is not None:
                        left, right, align = window
                        diag = i + (0 if align == "top_left" else n_k - n_q)
                        if left is not None and j < diag - left:
                            continue
                        if right is not None and j > diag + right:
                            continue
                    if valid_lens is not None:
                        vl = np.asarray(valid_lens)
                        limit = vl[b] if vl.ndim == 1 else vl[b, i]
                        if j >= limit:
                            continue
                    if full_mask is not None and not full_mask[b, h, i, j]:
                        continue
                    s = scale * sum(float(q[b, h, i, t]) * float(k[b, g, j, t]) for t in range(d_k))
                    if full_bias is not None:
                        s += float(full_bias[b, h, i, j])
                    if s == -math.inf:
                        continue
                    keys.append((j, s))
                if not keys:
                    continue
                m = max(s for _, s in keys)
                w = [(j, math.exp(s - m)) for j, s in keys]
                total = sum(x for _, x in w)
                for j, x in w:
                    o[b, h, i] += (x / total) * v[b, g, j]
                lse[b, h, i] = m + math.log(total)
    return o, lse


# ---------------------------------------------------------------------------------------------
# Problems
# ---------------------------------------------------------------------------------------------

class Problem:
    def __init__(self, name, *, b=2, h_q=2, h_kv=2, n_q=5, n_k=7, d_k=8, d_v=6, dtype=F32, o_dtype=None,
                 scale=0.3, window=None, valid_lens=None, mask=None, bias=None, magnitude=1.0, seed=0,
                 nan_in_masked=False):
        rng = np.random.default_rng(seed)
        self.name = name
        self.q = (rng.standard_normal((b, h_q, n_q, d_k)) * magnitude).astype(dtype)
        self.k = (rng.standard_normal((b, h_kv, n_k, d_k)) * magnitude).astype(dtype)
        self.v = rng.standard_normal((b, h_kv, n_k, d_v)).astype(dtype)
        self.kwargs = dict(scale=scale, window=window, valid_lens=valid_lens, mask=mask, bias=bias,
                           o_dtype=np.dtype(dtype if o_dtype is None else o_dtype))
        if nan_in_masked:  # NaN in every K/V row that no query of its batch sees (padding)
            assert valid_lens is not None and np.asarray(valid_lens).ndim == 1
            for bb, vl in enumerate(np.asarray(valid_lens)):
                self.k[bb, :, vl:] = np.nan
                self.v[bb, :, vl:] = np.nan
        self.dtype = np.dtype(dtype)
        self.shape = dict(b=b, h_q=h_q, h_kv=h_kv, n_q=n_q, n_k=n_k, d_k=d_k, d_v=d_v)
        self._ref = None

    def __repr__(self):
        return f"{self.name}[{self.dtype.name}->{self.kwargs['o_dtype'].name}]"

    def run(self, fn):
        return fn(self.q, self.k, self.v, **self.kwargs)

    @property
    def ref(self):
        if self._ref is None:
            kw = {key: val for key, val in self.kwargs.items() if key != "o_dtype"}
            self._ref = reference(self.q, self.k, self.v, **kw)
        return self._ref


def bool_mask(rng, shape, p_visible=0.6, empty_row=True):
    m = rng.random(shape) < p_visible
    if empty_row:
        m[..., 1, :] = False  # a fully masked row
    return m


def problems():
    rng = np.random.default_rng(1234)
    out = []
    dtype_pairs = [(F64, F64), (F32, F32), (F16, F16), (F16, F32), (BF16, BF16), (BF16, F32)]
    for dtype, o_dtype in dtype_pairs:
        tag = dict(dtype=dtype, o_dtype=o_dtype)
        out += [
            Problem("plain", **tag),
            Problem("default_scale", scale=1 / math.sqrt(8), **tag),
            Problem("scale_none", scale=None, **tag),
            Problem("one_row", b=1, h_q=1, h_kv=1, n_q=1, n_k=1, **tag),
            Problem("causal_tl", n_q=5, n_k=9, window=(None, 0, "top_left"), **tag),
            Problem("causal_tl_long_q", n_q=9, n_k=5, window=(None, 0, "top_left"), **tag),
            Problem("causal_br", n_q=5, n_k=9, window=(None, 0, "bottom_right"), **tag),
            Problem("causal_br_long_q", n_q=9, n_k=5, window=(None, 0, "bottom_right"), **tag),  # empty rows
            Problem("causal_square", n_q=6, n_k=6, window=(None, 0, "top_left"), **tag),
            Problem("window_2_1", n_q=6, n_k=8, window=(2, 1, "top_left"), **tag),
            Problem("window_inf_3_br", n_q=6, n_k=8, window=(None, 3, "bottom_right"), **tag),
            Problem("window_1_inf_br", n_q=8, n_k=6, window=(1, None, "bottom_right"), **tag),
            Problem("padding_batch", valid_lens=np.array([3, 0], dtype=np.int64), **tag),
            Problem("padding_query", valid_lens=rng.integers(0, 8, size=(2, 5)).astype(np.int64), **tag),
            Problem("padding_causal", n_q=6, n_k=6, window=(None, 0, "top_left"),
                    valid_lens=np.array([4, 6], dtype=np.int64), **tag),
            Problem("bool_mask_batch", mask=bool_mask(rng, (2, 1, 5, 7)), **tag),
            Problem("bool_mask_head", mask=bool_mask(rng, (1, 2, 5, 7)), **tag),
            Problem("bias", bias=np.where(rng.random((1, 2, 5, 7)) < 0.2, -np.inf, rng.standard_normal((1, 2, 5, 7))), **tag),
            Problem("gqa_4_2", h_q=4, h_kv=2, **tag),
            Problem("gqa_6_3_causal", h_q=6, h_kv=3, n_q=4, n_k=4, window=(None, 0, "bottom_right"), **tag),
            Problem("mqa_4_1", h_q=4, h_kv=1, **tag),
            Problem("tile_20", n_k=20, **tag),
            Problem("tile_32", n_k=32, **tag),
            Problem("large", magnitude=30.0 if dtype != F16 else 12.0, **tag),
            Problem("below_finite_max", bias=np.full((1, 1, 5, 7), -3e4), **tag),
            Problem("nan_masked", valid_lens=np.array([4, 6], dtype=np.int64), nan_in_masked=True, **tag),
            Problem("everything", b=2, h_q=4, h_kv=2, n_q=7, n_k=18, d_k=5, d_v=3,
                    window=(None, 0, "bottom_right"), valid_lens=rng.integers(0, 19, size=(2, 7)).astype(np.int64),
                    mask=bool_mask(rng, (2, 1, 7, 18), 0.8), bias=rng.standard_normal((1, 4, 7, 18)), **tag),
        ]
    return out


# ---------------------------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------------------------

def unit_roundoff(dtype):
    return {F64: 2.0**-53, F32: 2.0**-24, F16: 2.0**-11, BF16: 2.0**-8}[np.dtype(dtype)]


def mismatch(p: Problem, o, lse):
    """None when (o, lse) match the reference within the rounding of the working precision and the
    output dtype; otherwise a description of the worst difference."""
    ref_o, ref_lse = p.ref
    o = np.asarray(o).astype(np.float64)
    lse = np.asarray(lse).astype(np.float64)
    if o.shape != ref_o.shape or lse.shape != ref_lse.shape:
        return f"shape {o.shape}/{lse.shape} != {ref_o.shape}/{ref_lse.shape}"
    acc = F64 if p.dtype == F64 else F32
    u_acc, u_out = unit_roundoff(acc), unit_roundoff(p.kwargs["o_dtype"])
    s = p.shape
    finite_v = p.v.astype(np.float64)[np.isfinite(p.v.astype(np.float64))]
    vmax = max(1.0, float(np.abs(finite_v).max()) if finite_v.size else 1.0)
    lse_fin = ref_lse[np.isfinite(ref_lse)]
    smax = float(np.abs(lse_fin).max()) if lse_fin.size else 0.0
    growth = 16 * (s["n_k"] + s["d_k"] + smax + 1)
    tol_o = u_out * np.abs(ref_o) + growth * u_acc * vmax + (6e-8 if p.kwargs["o_dtype"] == F16 else 0)
    if not np.isfinite(o).all():
        bad = np.argwhere(~np.isfinite(o))[0]
        return f"non-finite output {o[tuple(bad)]} at {tuple(bad)} (reference {ref_o[tuple(bad)]})"
    err = np.abs(o - ref_o) - tol_o
    if (err > 0).any():
        at = np.unravel_index(np.argmax(err), err.shape)
        return f"O differs at {at}: {o[at]} vs {ref_o[at]} (tolerance {tol_o[at]:.3g})"
    ref_empty, empty = ref_lse == -np.inf, lse == -np.inf
    if (ref_empty != empty).any():
        at = tuple(np.argwhere(ref_empty != empty)[0])
        return f"LSE -inf pattern differs at {at}: {lse[at]} vs {ref_lse[at]}"
    if np.isnan(lse).any():
        return "NaN LSE"
    with np.errstate(invalid="ignore"):
        delta = lse - ref_lse
    diff = np.abs(np.where(empty, 0, delta)) - growth * u_acc * (1 + np.abs(np.where(ref_empty, 0, ref_lse)))
    if (diff > 0).any():
        at = np.unravel_index(np.argmax(diff), diff.shape)
        return f"LSE differs at {at}: {lse[at]} vs {ref_lse[at]}"
    return None


def bitwise_equal(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return a.tobytes() == b.tobytes()


# ---------------------------------------------------------------------------------------------
# Where a mutant's mistake cannot show (tests/mutants_test.cpp inert()): it must then give exactly
# the correct kernel's output.
# ---------------------------------------------------------------------------------------------

def same_visibility(mistake, p: Problem):
    s = p.shape
    args = (s["b"], s["h_q"], s["n_q"], s["n_k"], p.kwargs["window"], p.kwargs["valid_lens"], p.kwargs["mask"])
    return np.array_equal(nk._visibility(mistake, *args), nk._visibility(None, *args))


def inert(mistake, p: Problem) -> bool:
    s, kw = p.shape, p.kwargs
    has_nonfinite = not (np.isfinite(p.k.astype(np.float64)).all() and np.isfinite(p.v.astype(np.float64)).all())
    if mistake == "scale_one":
        return kw["scale"] == 1.0
    if mistake == "scale_one_over_dk":
        return (kw["scale"] is not None and not math.isclose(kw["scale"], 1 / math.sqrt(s["d_k"]))) or s["d_k"] == 1
    if mistake == "masked_fill":
        args = (s["b"], s["h_q"], s["n_q"], s["n_k"], kw["window"], kw["valid_lens"], kw["mask"])
        return bool(nk._visibility(None, *args).all())
    if mistake in ("causal_ignored", "causal_alignment_swapped", "padding_ignored", "last_key_tile_dropped",
                   "causal_strict", "padding_one_key_leaks", "last_key_dropped"):
        return same_visibility(mistake, p)
    if mistake == "kv_head_mapping":
        return all(h % s["h_kv"] == h // (s["h_q"] // s["h_kv"]) for h in range(s["h_q"]))
    if mistake == "weights_not_normalised":
        return s["n_k"] == 1
    if mistake == "output_rows_permuted":
        return s["h_q"] == 1
    if mistake == "softmax_over_queries":
        return s["n_q"] == 1 and s["n_k"] == 1
    if mistake == "kv_head_as_query_head":
        return s["h_q"] == s["h_kv"]
    if mistake == "masked_nonfinite_leak":
        return not has_nonfinite
    if mistake == "nondeterministic":
        return s["b"] * s["h_q"] * s["n_q"] < 2
    return False  # no_max_subtraction, weights_rounded_to_bf16, row_max_init_finite, output_all_zeros


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)


def check_bf16_rounding():
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.standard_normal(5000) * 10.0 ** rng.integers(-40, 38, 5000),
                        rng.standard_normal(100) * 1e-39, [0.0, -0.0, np.inf, -np.inf, 1.0, 1 + 2**-8, 1 + 3 * 2**-8]])
    x32 = x.astype(np.float32).astype(np.float64)  # values exact in f32: ml_dtypes' f32 -> bf16 is correctly rounded
    check(np.array_equal(nk._round_to_bf16(x32), x32.astype(np.float32).astype(BF16).astype(np.float64)),
          "_round_to_bf16 disagrees with ml_dtypes on float32 values")
    # float64 -> bf16 directly: 1 + 2^-8 + 2^-30 rounds up (through f32 too); 1 + 2^-8 (a tie) to even (1).
    check(nk._round_to_bf16(np.array([1 + 2**-8 + 2**-40]))[0] == 1 + 2**-7, "_round_to_bf16 double rounding")


def check_correct(probs):
    for p in probs:
        o, lse = p.run(nk.CORRECT)
        check(o.dtype == p.kwargs["o_dtype"], f"correct {p}: O dtype {o.dtype}")
        check(lse.dtype == (F64 if p.dtype == F64 else F32), f"correct {p}: LSE dtype {lse.dtype}")
        why = mismatch(p, o, lse)
        check(why is None, f"correct {p}: {why}")


def check_mutants(probs):
    for name, fn in nk.MUTANTS.items():
        check(bool(fn.__doc__) and fn.__name__ == name, f"{name}: name or docstring")
        shown_on = []
        for p in probs:
            nk.reset_call_counters()
            o, lse = p.run(fn)
            why = mismatch(p, o, lse)
            if why is not None:
                shown_on.append((p, why))
            if inert(name, p):
                nk.reset_call_counters()
                o2, lse2 = p.run(fn)
                o_ok, lse_ok = p.run(nk.CORRECT)
                check(bitwise_equal(o2, o_ok) and bitwise_equal(lse2, lse_ok),
                      f"{name} is inert on {p} but differs from the correct kernel")
        check(shown_on, f"{name}: never differs from the reference")
        kinds = sorted({p.name for p, _ in shown_on})
        print(f"  {name:26s} differs on {len(shown_on):3d}/{len(probs)} problems: {', '.join(kinds[:6])}"
              f"{' ...' if len(kinds) > 6 else ''}")


def check_specific():
    """Details of particular mutants that a plain 'differs somewhere' does not pin down."""
    m = nk.MUTANTS
    # masked_fill: -1 for f32 inputs, -1e4 for f16; a fully masked row is uniform over all keys, not zero.
    p = Problem("fill", b=1, h_q=1, h_kv=1, n_q=3, n_k=4, valid_lens=np.array([2]), dtype=F32)
    o, _ = p.run(m["masked_fill"])
    s = p.q[0, 0].astype(np.float32) @ p.k[0, 0].astype(np.float32).T * np.float32(0.3)
    s[:, 2:] = -1.0
    w = np.exp(s - s.max(-1, keepdims=True)); w /= w.sum(-1, keepdims=True)
    check(np.allclose(o[0, 0], w @ p.v[0, 0], atol=1e-6), "masked_fill: not the -1 fill")
    p16 = Problem("fill16", b=1, h_q=1, h_kv=1, n_q=3, n_k=4, valid_lens=np.array([0]), dtype=F16, o_dtype=F32)
    o, lse = p16.run(m["masked_fill"])
    check(np.allclose(o[0, 0], p16.v[0, 0].astype(np.float32).mean(0), atol=1e-6) and np.allclose(lse, -1e4 + np.log(4)),
          "masked_fill (f16): a fully masked row is not the uniform average with the -1e4 fill")
    # row_max_init_finite: fully masked rows give NaN with LSE -inf; others right.
    p = Problem("empty", valid_lens=np.array([0, 7]))
    o, lse = p.run(m["row_max_init_finite"])
    check(np.isnan(o[0]).all() and (lse[0] == -np.inf).all() and batch_matches_reference(p, o, 1),
          "row_max_init_finite: fully masked rows are not NaN / -inf")
    # causal_strict: row 0 of top-left causal is fully masked, zeros with LSE -inf.
    p = Problem("strict", n_q=4, n_k=4, window=(None, 0, "top_left"))
    o, lse = p.run(m["causal_strict"])
    check((o[:, :, 0] == 0).all() and (lse[:, :, 0] == -np.inf).all(), "causal_strict: row 0 not zero")
    # padding_one_key_leaks: a row of valid length 0 sees key 0 exactly.
    p = Problem("leak0", valid_lens=np.array([0, 7]))
    o, lse = p.run(m["padding_one_key_leaks"])
    check(np.array_equal(o[0], np.broadcast_to(p.v[0, :, :1], o[0].shape).astype(o.dtype)), "padding_one_key_leaks: length 0 does not see key 0")
    # weights_not_normalised: LSE right, O = sum exp(s - m) v.
    p = Problem("unnormalised")
    o, lse = p.run(m["weights_not_normalised"])
    o_ok, lse_ok = p.run(nk.CORRECT)
    check(np.array_equal(lse, lse_ok) and mismatch(p, o, lse) is not None, "weights_not_normalised: LSE not right / O right")
    # output_rows_permuted: LSE in place, O of head h at head h + 1.
    o, lse = p.run(m["output_rows_permuted"])
    check(np.array_equal(lse, lse_ok) and np.array_equal(o, np.roll(o_ok, 1, axis=1)), "output_rows_permuted: not a roll by one head")
    # kv_head_as_query_head: GQA 4:2, batch 2: heads 0-1 of batch 0 read kv blocks 0-1 (batch 0's heads 0 and 1,
    # so head 1 reads the wrong head), heads 2-3 read batch 1's blocks, batch 1 reads zeros (past the end).
    p = Problem("gqa", h_q=4, h_kv=2, scale=0.3)
    o, lse = p.run(m["kv_head_as_query_head"])
    zeros_v = Problem("gqa", h_q=4, h_kv=2, scale=0.3)
    zeros_v.k[...] = 0
    zeros_v.v[...] = 0
    o_z, _ = zeros_v.run(nk.CORRECT)
    check(np.array_equal(o[1], o_z[1]), "kv_head_as_query_head: blocks past the end are not zeros")
    # output_all_zeros: zeros everywhere, LSE zeros too.
    o, lse = p.run(m["output_all_zeros"])
    check(not o.any() and not lse.any() and o.dtype == p.kwargs["o_dtype"], "output_all_zeros: not all zeros")
    # nondeterministic: call 0 swapped rows 0, 1; call 1 right; call 2 swapped rows 1, 2; call 4 rows 2, 3.
    nk.reset_call_counters()
    p = Problem("race", b=1, h_q=1, h_kv=1, n_q=5, n_k=5)
    o_ok, _ = p.run(nk.CORRECT)
    runs = [p.run(m["nondeterministic"])[0] for _ in range(6)]
    for call, r in ((0, 0), (2, 1), (4, 2)):
        expected = o_ok.copy()
        expected[0, 0, [r, r + 1]] = expected[0, 0, [r + 1, r]]
        check(np.array_equal(runs[call], expected), f"nondeterministic: call {call} does not swap rows {r}, {r + 1}")
    for call in (1, 3, 5):
        check(np.array_equal(runs[call], o_ok), f"nondeterministic: odd call {call} is not right")
    # masked_nonfinite_leak: NaN in masked V rows reaches every row that has a visible key; the correct
    # kernel (and every other mutant that excludes masked keys) stays finite.
    p = Problem("nan", valid_lens=np.array([3, 0]), nan_in_masked=True)
    o, _ = p.run(m["masked_nonfinite_leak"])
    check(np.isnan(o[0]).all() and (o[1] == 0).all(), "masked_nonfinite_leak: NaN does not leak (or fully masked rows not zero)")
    o, _ = p.run(nk.CORRECT)
    check(np.isfinite(o).all(), "correct: NaN in masked K/V rows leaks")
    # scale_one_over_dk: an explicit scale is honoured, None or 1/sqrt(d_k) read as the default.
    p = Problem("dk", scale=None)
    o_none, _ = p.run(m["scale_one_over_dk"])
    p.kwargs["scale"] = 1 / 8
    o_dk, _ = p.run(nk.CORRECT)
    check(np.array_equal(o_none, o_dk), "scale_one_over_dk: default scale is not 1/d_k")
    # weights_rounded_to_bf16 on f64: error at bf16's level, not f64's.
    p = Problem("bf16w", dtype=F64)
    o, _ = p.run(m["weights_rounded_to_bf16"])
    err = np.abs(o - p.ref[0]).max()
    check(1e-5 < err < 0.05, f"weights_rounded_to_bf16: error {err} not at bf16's level")
    # last_key_tile_dropped: n_k = 20 sees keys 0..15 only; n_k = 16 and 32 see all.
    p = Problem("tile", n_k=20)
    p16 = Problem("tile", n_k=20, valid_lens=np.array([16, 16]))
    check(np.array_equal(p.run(m["last_key_tile_dropped"])[0], p16.run(nk.CORRECT)[0]), "last_key_tile_dropped: not keys 0..15")


def batch_matches_reference(p, o, batch):
    return np.allclose(o[batch], p.ref[0][batch], atol=1e-5)


def check_sdpa():
    rng = np.random.default_rng(99)
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:  # the comparison with torch is optional
        torch = None

    def t(x):  # numpy to torch, bf16 included
        x = np.asarray(x)
        if x.dtype == BF16:  # exact: every bf16 value is a float32
            return torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16)
        return torch.from_numpy(np.ascontiguousarray(x))

    cases = []
    for dtype in (F64, F32, F16, BF16):
        q = rng.standard_normal((2, 4, 5, 8)).astype(dtype)
        k = rng.standard_normal((2, 2, 7, 8)).astype(dtype)
        v = rng.standard_normal((2, 2, 7, 6)).astype(dtype)
        k_mha = rng.standard_normal((2, 4, 7, 8)).astype(dtype)
        v_mha = rng.standard_normal((2, 4, 7, 6)).astype(dtype)
        bmask = bool_mask(rng, (2, 1, 5, 7))
        fmask = np.where(bmask, rng.standard_normal((2, 1, 5, 7)), -np.inf).astype(dtype)
        cases += [
            ("mha", q, k_mha, v_mha, dict()),
            ("mha_scale", q, k_mha, v_mha, dict(scale=0.7)),
            ("gqa", q, k, v, dict(enable_gqa=True)),
            ("gqa_causal_scale", q, k, v, dict(enable_gqa=True, is_causal=True, scale=0.2)),
            ("bool_mask", q, k_mha, v_mha, dict(attn_mask=bmask)),
            ("float_mask", q, k_mha, v_mha, dict(attn_mask=fmask, scale=0.5)),
            ("mask_2d", q, k_mha, v_mha, dict(attn_mask=bmask[0, 0])),
        ]
    for name, q, k, v, kw in cases:
        o = nk.sdpa(q, k, v, **kw)
        check(o.dtype == q.dtype and o.shape == q.shape[:3] + v.shape[3:], f"sdpa {name}: dtype/shape")
        mask = bias = None
        if "attn_mask" in kw:
            if kw["attn_mask"].dtype == bool:
                mask = kw["attn_mask"]
            else:
                bias = kw["attn_mask"]
        h_q, h_kv = q.shape[1], k.shape[1]
        p = Problem.__new__(Problem)
        p.name, p.q, p.k, p.v, p.dtype, p._ref = "sdpa_" + name, q, k, v, np.dtype(q.dtype), None
        p.shape = dict(b=q.shape[0], h_q=h_q, h_kv=h_kv, n_q=q.shape[2], n_k=k.shape[2], d_k=q.shape[3], d_v=v.shape[3])
        p.kwargs = dict(scale=kw.get("scale"), window=(None, 0, "top_left") if kw.get("is_causal") else None,
                        valid_lens=None, mask=mask, bias=bias, o_dtype=np.dtype(q.dtype))
        why = mismatch(p, o, p.ref[1].astype(np.float32) if q.dtype != F64 else p.ref[1])
        check(why is None, f"sdpa {name} [{np.dtype(q.dtype).name}]: {why}")
        o_ign = nk.sdpa_ignoring_scale(q, k, v, **kw)
        if kw.get("scale") is None:
            check(bitwise_equal(o_ign, o), f"sdpa_ignoring_scale {name}: differs without a scale")
        else:
            check(mismatch(p, o_ign, p.ref[1]) is not None, f"sdpa_ignoring_scale {name}: does not differ with a scale")
        if torch is not None:
            tkw = dict(kw)
            if "attn_mask" in tkw:
                tkw["attn_mask"] = t(tkw["attn_mask"])
            to = F.scaled_dot_product_attention(t(q), t(k), t(v), **tkw).double().numpy()
            tol = {F64: 1e-10, F32: 1e-5, F16: 4e-3, BF16: 3e-2}[np.dtype(q.dtype)]
            err = np.abs(to - o.astype(np.float64)).max()
            check(np.isfinite(to).all() and err <= tol, f"sdpa {name} [{np.dtype(q.dtype).name}]: differs from torch by {err}")
    q = rng.standard_normal((1, 4, 3, 8)).astype(np.float32)
    k = rng.standard_normal((1, 2, 3, 8)).astype(np.float32)
    for bad in (dict(), dict(enable_gqa=True, is_causal=True, attn_mask=np.ones((3, 3), bool)), dict(dropout_p=0.1, enable_gqa=True)):
        try:
            nk.sdpa(q, k, k, **bad)
            check(False, f"sdpa accepted {bad}")
        except ValueError:
            pass
    # A fully masked row: zeros (torch 2.15 on CPU), not NaN.
    o = nk.sdpa(q[:, :2], k, k, attn_mask=np.zeros((3, 3), bool))
    check((o == 0).all(), "sdpa: a fully masked row is not zeros")
    if torch is not None:
        to = F.scaled_dot_product_attention(t(q[:, :2]), t(k), t(k), attn_mask=torch.zeros(3, 3, dtype=torch.bool))
        check(bool((to == 0).all()), f"torch {torch.__version__} gives {to[0, 0, 0, :3].tolist()} for a fully masked row, not zeros")


def main():
    probs = problems()
    print(f"{len(probs)} problems")
    check_bf16_rounding()
    check_correct(probs)
    print("mutants:")
    check_mutants(probs)
    check_specific()
    check_sdpa()
    if failures:
        print(f"\n{len(failures)} FAILED:")
        for f in failures:
            print("  " + f)
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
