"""Attention kernels written in numpy, for the Python package's tests: a correct one and the 21
mutants of tests/mutants/ (same names without the ``mutant_`` prefix, same mistakes, same details).

Two calling conventions:

* The harness's "native" one (``CORRECT``, ``MUTANTS``)::

      fn(q, k, v, *, scale, window, valid_lens, mask, bias, o_dtype) -> (o, lse)

  q ``[b, h_q, n_q, d_k]``, k ``[b, h_kv, n_k, d_k]``, v ``[b, h_kv, n_k, d_v]`` (BHSD; float64,
  float32, float16 or ml_dtypes.bfloat16); query head h reads kv head ``h // (h_q // h_kv)``.
  ``scale`` is the effective scale (``None``: the default ``1/sqrt(d_k)``); scores are
  ``scale * q.k + bias``. ``window`` is None or ``(left, right, align)``: query i sees key j iff
  ``i + d - left <= j <= i + d + right`` with ``d = 0`` for ``"top_left"`` and ``n_k - n_q`` for
  ``"bottom_right"``, a side of None unbounded; causal is ``(None, 0, align)``. ``valid_lens`` is
  None or int64 ``[b]`` / ``[b, n_q]`` (keys ``j < valid_len`` visible). ``mask`` is None or a
  bool array broadcastable to ``[b, h_q, n_q, n_k]`` (True = visible); ``bias`` None or an
  additive float array broadcastable likewise. Masks compose by intersection; masked keys are
  excluded exactly (never computed, never multiplied into P V); a row that sees no key gives zeros
  and LSE -inf. Work is in float64 for float64 inputs and float32 otherwise, in cpu_naive's order
  (scores, row max, exp(s - max), sum, divide, P V); O is rounded once to ``o_dtype`` (None: q's
  dtype); LSE is float64 for float64 inputs, else float32.

* PyTorch's ``scaled_dot_product_attention`` (``sdpa``, ``sdpa_ignoring_scale``) on numpy
  arrays; see that section below.

Like tests/mutants/mutants.cpp, every native kernel is one implementation (``_attention``) with at
most one mistake switched on, so a mutant differs from ``correct_attention`` by its mistake only.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

__all__ = ["CORRECT", "MUTANTS", "correct_attention", "sdpa", "sdpa_ignoring_scale", "SDPA_KERNELS",
           "KEY_TILE", "FINITE_ROW_MAX_INIT", "reset_call_counters"]

BF16 = np.dtype(ml_dtypes.bfloat16)

# last_key_tile_dropped's tile width (tests/mutants/mutants.hpp key_tile).
KEY_TILE = 16
# row_max_init_finite's initial row maximum (mutants.hpp finite_row_max_init).
FINITE_ROW_MAX_INIT = -1e4

# The mistakes that change which keys a row sees by misreading the causal window or the padding
# (mutants.cpp key_limit_as_written): they evaluate visibility as a key limit per row.
_LIMIT_MISTAKES = frozenset({"causal_ignored", "causal_alignment_swapped", "causal_strict", "padding_ignored",
                             "padding_one_key_leaks", "last_key_dropped"})

# The nondeterministic mutant's run counter (mutants.cpp MutantAttention::runs_): module-level, one
# per module, counted from 0 so the first call is even-numbered (and wrong).
_nondeterministic_calls = 0


def reset_call_counters() -> None:
    """Reset the nondeterministic mutant's call counter to 0 (its next call is run 0, a swapped one)."""
    global _nondeterministic_calls
    _nondeterministic_calls = 0


# ---------------------------------------------------------------------------------------------
# Pieces
# ---------------------------------------------------------------------------------------------

def _round_to_bf16(x: np.ndarray) -> np.ndarray:
    """float64 values rounded to the nearest bfloat16 (ties to even), as float64 (core round_to)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        _, e = np.frexp(x)  # x = m * 2^e, m in [0.5, 1)
        quantum = np.ldexp(1.0, np.maximum(e, -125) - 8)  # 8 significant bits; subnormals below 2^-126
        y = np.rint(x / quantum) * quantum
        y = np.where(np.abs(y) > float(ml_dtypes.finfo(ml_dtypes.bfloat16).max), np.copysign(np.inf, x), y)
    return np.where(np.isfinite(x) & (x != 0), y, x)


def _round_to(o: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """o rounded once to dtype (float64 to bfloat16 directly, not through float32)."""
    dtype = np.dtype(dtype)
    if dtype == BF16 and o.dtype == np.float64:
        return _round_to_bf16(o).astype(BF16)  # exact: every value is a bfloat16 already
    return o.astype(dtype)


def _parse_window(window, n_q: int, n_k: int):
    """(kind, left, right, delta): kind is "none", "causal" or "window"; align given as delta."""
    if window is None:
        return "none", None, None, 0
    left, right, align = window
    if align not in ("top_left", "bottom_right"):
        raise ValueError(f"window align must be 'top_left' or 'bottom_right', not {align!r}")
    delta = 0 if align == "top_left" else n_k - n_q
    if left is None and right is None:
        return "none", None, None, delta
    if left is None and right == 0:
        return "causal", None, 0, delta
    return "window", left, right, delta


def _window_visible(left, right, delta: int, n_q: int, n_k: int) -> np.ndarray:
    """[n_q, n_k]: i + delta - left <= j <= i + delta + right, a side of None unbounded."""
    diagonal = np.arange(n_q, dtype=np.int64)[:, None] + delta
    j = np.arange(n_k, dtype=np.int64)[None, :]
    visible = np.ones((n_q, n_k), dtype=bool)
    if left is not None:
        visible &= j >= diagonal - int(left)
    if right is not None:
        visible &= j <= diagonal + int(right)
    return visible


def _valid_lens_per_row(valid_lens, batch: int, n_q: int):
    """valid_lens as int64 [b, n_q], or None."""
    if valid_lens is None:
        return None
    vl = np.asarray(valid_lens, dtype=np.int64)
    if vl.shape == (batch,):
        return np.broadcast_to(vl[:, None], (batch, n_q))
    if vl.shape == (batch, n_q):
        return vl
    raise ValueError(f"valid_lens must have shape [{batch}] or [{batch}, {n_q}], not {list(vl.shape)}")


def _visibility(mistake, batch, h_q, n_q, n_k, window, valid_lens, mask) -> np.ndarray:
    """Bool [b, h_q, n_q, n_k]: which keys the kernel with `mistake` treats as visible (mutants.cpp sees()).

    The limit mistakes (causal and padding misread) act on a causal window only, as the C++ mutants'
    key_limit_as_written does; another window (which the C++ mutants refuse) is applied correctly.
    """
    kind, left, right, delta = _parse_window(window, n_q, n_k)
    vl = _valid_lens_per_row(valid_lens, batch, n_q)
    i = np.arange(n_q, dtype=np.int64)[None, :]
    j = np.arange(n_k, dtype=np.int64)[None, None, None, :]
    if mistake in _LIMIT_MISTAKES:
        causal = window[2] if kind == "causal" else None  # "top_left" or "bottom_right"
        if mistake == "causal_ignored":
            causal = None
        if mistake == "causal_alignment_swapped" and causal is not None:
            causal = "bottom_right" if causal == "top_left" else "top_left"
        limit = np.full((batch, n_q), n_k, dtype=np.int64)
        diagonal_past = 0 if mistake == "causal_strict" else 1  # strict: key i + delta itself masked
        if causal == "top_left":
            limit = np.minimum(limit, i + diagonal_past)
        elif causal == "bottom_right":
            limit = np.minimum(limit, i + diagonal_past + (n_k - n_q))
        if mistake != "padding_ignored" and vl is not None:
            leak = 1 if mistake == "padding_one_key_leaks" else 0  # j <= valid_len
            limit = np.minimum(limit, np.minimum(vl + leak, n_k))
        if mistake == "last_key_dropped":
            limit = limit - 1  # for (j = 0; j < limit - 1; ++j)
        limit = np.maximum(limit, 0)
        visible = j < limit[:, None, :, None]  # [b, 1, n_q, n_k]
        if kind == "window":
            visible = visible & _window_visible(left, right, delta, n_q, n_k)
    else:
        visible = np.broadcast_to(_window_visible(left, right, delta, n_q, n_k), (1, 1, n_q, n_k))
        if vl is not None:
            visible = visible & (j < vl[:, None, :, None])
        if mistake == "last_key_tile_dropped" and n_k > KEY_TILE:
            visible = visible & (j < n_k // KEY_TILE * KEY_TILE)  # the partial last tile forgotten
    if mask is not None:
        visible = visible & np.broadcast_to(np.asarray(mask, dtype=bool), (batch, h_q, n_q, n_k))
    return np.broadcast_to(visible, (batch, h_q, n_q, n_k))


def _weighted_values(p: np.ndarray, v: np.ndarray, skip_zero_weights: bool) -> np.ndarray:
    """P V over keys. skip_zero_weights: keys of weight 0 are not multiplied in (cpu_naive), so NaN or
    Inf in their V rows changes nothing; otherwise every key is (0 * NaN = NaN leaks)."""
    finite = np.isfinite(v)
    if finite.all():
        return np.matmul(p, v)
    o = np.matmul(p, np.where(finite, v, 0))
    nonfinite = np.where(finite, 0, v)  # [b, h, n_k, d_v], only the NaN/Inf entries
    with np.errstate(all="ignore"):
        for b in range(p.shape[0]):
            for h in range(p.shape[1]):
                if finite[b, h].all():
                    continue
                terms = p[b, h][:, :, None] * nonfinite[b, h][None, :, :]  # [n_q, n_k, d_v]
                if skip_zero_weights:
                    terms = np.where(p[b, h][:, :, None] != 0, terms, 0)
                o[b, h] += terms.sum(axis=1, dtype=o.dtype)
    return o


def _kv_for_query_heads(mistake, x: np.ndarray, h_q: int) -> np.ndarray:
    """[b, h_q, n_k, d]: the K or V block each query head reads, as the kernel with `mistake` reads it."""
    batch, h_kv = x.shape[:2]
    if mistake == "kv_head_as_query_head":
        # Block b * h_q + h of the flat [b * h_kv, n_k, d] tensor; blocks past its end read as zeros.
        flat = x.reshape(batch * h_kv, *x.shape[2:])
        out = np.zeros((batch, h_q) + x.shape[2:], dtype=x.dtype)
        for b in range(batch):
            for h in range(h_q):
                block = b * h_q + h
                if block < batch * h_kv:
                    out[b, h] = flat[block]
        return out
    heads = np.arange(h_q)
    kv = heads % h_kv if mistake == "kv_head_mapping" else heads // (h_q // h_kv)
    return x[:, kv]


def _scale_as_written(mistake, scale, d_k: int) -> float:
    default = 1.0 / math.sqrt(d_k)
    if mistake == "scale_one":
        return 1.0
    if mistake == "scale_one_over_dk":
        # The native convention passes the effective scale only; a scale equal to the default is
        # taken for the default (an explicit scale of exactly 1/sqrt(d_k) is misread with it).
        if scale is None or math.isclose(float(scale), default, rel_tol=1e-12, abs_tol=0.0):
            return 1.0 / d_k
        return float(scale)
    return default if scale is None else float(scale)


# ---------------------------------------------------------------------------------------------
# The one implementation
# ---------------------------------------------------------------------------------------------

def _attention(q, k, v, *, scale, window, valid_lens, mask, bias, o_dtype, mistake=None, sinks=None, dropout_p=None, dropout_seed=None):
    global _nondeterministic_calls
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError("q, k, v must be 4-D [b, h, n, d] (BHSD)")
    batch, h_q, n_q, d_k = q.shape
    _, h_kv, n_k, _ = k.shape
    d_v = v.shape[3]
    if k.shape[0] != batch or k.shape[3] != d_k or v.shape[:3] != k.shape[:3] or h_kv == 0 or h_q % h_kv:
        raise ValueError(f"inconsistent shapes q {q.shape}, k {k.shape}, v {v.shape}")
    acc = np.dtype(np.float64) if q.dtype == np.float64 else np.dtype(np.float32)
    o_dtype = np.dtype(q.dtype if o_dtype is None else o_dtype)
    rows = batch * h_q * n_q

    run_number = None
    if mistake == "nondeterministic":
        run_number = _nondeterministic_calls
        _nondeterministic_calls += 1

    if mistake == "output_all_zeros":  # never ran: the caller's zero-initialised buffers
        return np.zeros((batch, h_q, n_q, d_v), dtype=o_dtype), np.zeros((batch, h_q, n_q), dtype=acc)

    visible = _visibility(mistake, batch, h_q, n_q, n_k, window, valid_lens, mask)
    qa = q.astype(acc)
    ka = _kv_for_query_heads(mistake, k.astype(acc), h_q)
    va = _kv_for_query_heads(mistake, v.astype(acc), h_q)
    s_scale = acc.type(_scale_as_written(mistake, scale, d_k))

    with np.errstate(all="ignore"):
        # Scores: q.k, times scale, plus bias (cast to the working precision).
        s = np.matmul(qa, np.swapaxes(ka, -1, -2)) * s_scale
        if bias is not None:
            s = s + np.broadcast_to(np.asarray(bias).astype(acc), s.shape)

        if mistake == "softmax_over_queries":
            s = np.where(visible, s, -np.inf).astype(acc)
            m = np.fmax.reduce(s, axis=-1, initial=-np.inf)  # the row LSE, from the raw scores
            full = m == -np.inf
            total = np.where(full[..., None], 0, np.exp(s - m[..., None])).sum(axis=-1, dtype=acc)
            lse = np.where(full, -np.inf, m + np.log(total))
            mc = np.fmax.reduce(s, axis=-2, initial=-np.inf)  # the mistake: normalise each key's column
            w = np.where(mc[..., None, :] == -np.inf, 0, np.exp(s - mc[..., None, :])).astype(acc)
            col = w.sum(axis=-2, dtype=acc)
            w = np.where(col[..., None, :] > 0, w / col[..., None, :], w).astype(acc)
            o = _weighted_values(w, va, skip_zero_weights=True)
            return _round_to(o, o_dtype), lse.astype(acc)

        fill = acc.type(-1e4 if q.dtype == np.float16 else -1.0)  # masked_fill's stand-in score
        s = np.where(visible, s, fill if mistake == "masked_fill" else -np.inf).astype(acc)
        init = FINITE_ROW_MAX_INIT if mistake == "row_max_init_finite" else -np.inf
        m = np.fmax.reduce(s, axis=-1, initial=init).astype(acc)  # a NaN score is skipped, as std::max does
        full = m == -np.inf  # every key masked: zeros, LSE -inf
        # Attention sinks: head h's logit joins the max and the sum of every row that sees a key.
        sink = None if sinks is None or mistake == "sink_ignored" else np.asarray(sinks).astype(acc).reshape(1, h_q, 1)
        if sink is not None:
            m = np.where(full, m, np.maximum(m, sink)).astype(acc)
        subtract_max = mistake != "no_max_subtraction"
        e = np.exp(s - m[..., None]) if subtract_max else np.exp(s)
        e = np.where(full[..., None], 0, e).astype(acc)
        total = e.sum(axis=-1, dtype=acc)
        if sink is not None:
            total = np.where(full, total, total + np.exp(sink - m)).astype(acc)
        p = e if mistake == "weights_not_normalised" else e / total[..., None]  # 0/0 = NaN in row_max_init_finite
        p = np.where(full[..., None], 0, p).astype(acc)
        if mistake == "weights_rounded_to_bf16":
            p = _round_to_bf16(p).astype(acc)
        keep = None
        if dropout_p is not None:
            # Dropout after the softmax, from this kernel's own stream (NumPy's PCG64 on the case's
            # seed): each weight kept with probability 1 - p, the kept ones scaled by 1 / (1 - p).
            keep = np.random.Generator(np.random.PCG64(dropout_seed)).random(p.shape) >= dropout_p
            if mistake == "dropout_all_kept":  # a stream that never drops (reports, and uses, all ones)
                keep = np.ones(p.shape, dtype=bool)
            rescale = acc.type(1) if mistake == "dropout_not_rescaled" else acc.type(1) / (acc.type(1) - acc.type(dropout_p))
            p = np.where(keep, p * rescale, 0).astype(acc)
        o = _weighted_values(p, va, skip_zero_weights=mistake != "masked_nonfinite_leak")
        o = np.where(full[..., None], 0, o).astype(acc)
        lse = np.where(full, -np.inf, m + np.log(total) if subtract_max else np.log(total)).astype(acc)

    if mistake == "output_rows_permuted":  # head h's row written at head (h + 1) % h_q; LSE in place
        o = np.roll(o, 1, axis=1)
    out = np.ascontiguousarray(_round_to(o, o_dtype))
    if mistake == "nondeterministic" and rows >= 2 and run_number % 2 == 0:
        # A race: on even-numbered runs the output rows r, r + 1 land swapped, r moving with the run.
        r = (run_number // 2) % (rows - 1)
        flat = out.reshape(rows, d_v)
        flat[[r, r + 1]] = flat[[r + 1, r]]
    if dropout_p is not None:
        return out, lse, keep  # the keep mask it drew, [b, h_q, n_q, n_k]
    return out, lse


# ---------------------------------------------------------------------------------------------
# The native calling convention: the correct kernel and the 21 mutants
# ---------------------------------------------------------------------------------------------

def _kernel(mistake, doc):
    def fn(q, k, v, *, scale=None, window=None, valid_lens=None, mask=None, bias=None, o_dtype=None, sinks=None, dropout_p=None,
           dropout_seed=None):
        return _attention(q, k, v, scale=scale, window=window, valid_lens=valid_lens, mask=mask, bias=bias,
                          o_dtype=o_dtype, mistake=mistake, sinks=sinks, dropout_p=dropout_p, dropout_seed=dropout_seed)
    fn.__name__ = fn.__qualname__ = "correct_attention" if mistake is None else mistake
    fn.__doc__ = doc
    fn.mistake = mistake
    return fn


correct_attention = _kernel(None, "Correct attention: softmax(scale * q.k + bias) V over the visible keys, in cpu_naive's order; "
                                  "fully masked rows give zeros and LSE -inf.")

_MISTAKES = {
    "scale_one": "Scores not scaled: scale 1 instead of the effective scale.",
    "scale_one_over_dk": "Default scale 1/d_k instead of 1/sqrt(d_k); an explicit scale is honoured (a scale equal to "
                         "1/sqrt(d_k), or None, is read as the default).",
    "masked_fill": "Masked scores set to -1 (-1e4 for f16 inputs) instead of excluded, so masked keys get weight and "
                   "fully masked rows are not zero.",
    "causal_ignored": "The causal part of the mask ignored (padding, boolean mask and bias kept).",
    "causal_alignment_swapped": "Causal top-left where bottom-right is asked and vice versa (shows when n_q != n_k).",
    "padding_ignored": "Key padding (per-batch and per-query valid lengths) ignored.",
    "no_max_subtraction": "exp(s) instead of exp(s - max): inf/NaN on large scores; LSE log(sum).",
    "last_key_tile_dropped": "Keys processed in tiles of 16; the partial last tile dropped when n_k > 16.",
    "kv_head_mapping": "Query head h reads kv head h % h_kv instead of h // (h_q // h_kv) (shows when 1 < h_kv < h_q).",
    "weights_not_normalised": "exp(s - max) never divided by the row sum: O wrong, LSE right.",
    "output_rows_permuted": "Head h's output row written at head (h + 1) % h_q; LSE in place.",
    "softmax_over_queries": "Each key's scores normalised down its column (over the queries of the head) instead of "
                            "along the row; the LSE is the row's.",
    "causal_strict": "Causal j < i + delta instead of j <= i + delta: the diagonal key masked (row 0 of top-left "
                     "causal becomes fully masked: zeros).",
    "weights_rounded_to_bf16": "The normalised weights P rounded to bf16 before P V, in every dtype.",
    "padding_one_key_leaks": "Key padding read as j <= valid_len: the first padded key is seen (a row of valid "
                             "length 0 sees key 0).",
    "kv_head_as_query_head": "K/V read at query head h's offset, flat block b*h_q + h of the dense [b, h_kv, n_k, d] "
                             "tensors; blocks past the end read as zeros.",
    "row_max_init_finite": "The row max starts at -1e4, not -inf: a row whose scores all lie below it (every fully "
                           "masked row) gives 0/0 = NaN.",
    "masked_nonfinite_leak": "P V over every key, masked ones with weight 0: 0 * NaN in a masked V row leaks (inert on "
                             "finite inputs).",
    "last_key_dropped": "Keys j < limit - 1 (limit: n_k, the causal limit or the valid length, the smallest): the last "
                        "key of each row's range never processed.",
    "output_all_zeros": "Never runs: O and LSE returned as zeros (a zero-initialised buffer).",
    "nondeterministic": "A race: even-numbered calls (module-level counter, from 0) return output rows r, r + 1 "
                        "swapped, r = (call // 2) % (rows - 1); odd-numbered calls are right.",
}

CORRECT = correct_attention
MUTANTS = {name: _kernel(name, doc) for name, doc in _MISTAKES.items()}


# ---------------------------------------------------------------------------------------------
# The torch-SDPA calling convention
# ---------------------------------------------------------------------------------------------
# torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0,
# is_causal=False, scale=None, enable_gqa=False) on numpy arrays [b, h, n, d]:
# * attn_mask: bool (True = take part in attention) or an additive float mask, broadcastable to
#   [b, h_q, n_q, n_k]; not allowed together with is_causal (PyTorch raises).
# * is_causal: top-left causal (j <= i).
# * GQA (h_q a multiple of h_kv > 1 distinct heads) only with enable_gqa, as PyTorch.
# * A fully masked row (all False, or all -inf) gives a zero output row: what torch 2.15's CPU
#   SDPA returns (checked for float64/float32/float16/bfloat16, the default, MATH and
#   FLASH_ATTENTION backends, boolean and -inf float masks; the math backend has used
#   _safe_softmax since torch 2.5, older versions gave NaN).
# * Work in float64 for float64 inputs, float32 otherwise; the output has q's dtype.
# * dropout_p must be 0: the kernel is deterministic (a nonzero p raises).

def _sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, honour_scale):
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    if dropout_p != 0.0:
        raise ValueError("numpy sdpa: dropout_p must be 0")
    if is_causal and attn_mask is not None:
        raise ValueError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    if q.ndim != 4:
        raise ValueError("numpy sdpa: q, k, v must be 4-D [b, h, n, d]")
    h_q, h_kv = q.shape[1], k.shape[1]
    if h_q != h_kv and not (enable_gqa and h_kv > 0 and h_q % h_kv == 0):
        raise ValueError(f"numpy sdpa: {h_q} query heads and {h_kv} kv heads need enable_gqa=True and h_q % h_kv == 0")
    d_k = q.shape[3]
    effective = 1.0 / math.sqrt(d_k) if (scale is None or not honour_scale) else float(scale)
    mask = bias = None
    if attn_mask is not None:
        attn_mask = np.asarray(attn_mask)
        if attn_mask.dtype == bool:
            mask = attn_mask
        else:
            bias = attn_mask
    o, _ = correct_attention(q, k, v, scale=effective, window=(None, 0, "top_left") if is_causal else None,
                             valid_lens=None, mask=mask, bias=bias, o_dtype=q.dtype)
    return o


def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """PyTorch's scaled_dot_product_attention on numpy arrays, correct (fully masked rows give zeros, as torch 2.15 on CPU)."""
    return _sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, honour_scale=True)


def sdpa_ignoring_scale(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """PyTorch's SDPA convention with one mistake: the scale argument ignored, always 1/sqrt(d_k)."""
    return _sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa, honour_scale=False)


SDPA_KERNELS = {"sdpa": sdpa, "sdpa_ignoring_scale": sdpa_ignoring_scale}

# Dropout's mistakes (only a convention listing "dropout" is given dropout cases, so these are kept
# apart from MUTANTS, which run under conventions that do not): the kept weights not scaled by
# 1 / (1 - p), and a stream that keeps every weight (its all-ones keep mask reported).
DROPOUT_MISTAKES = {
    "dropout_not_rescaled": _kernel("dropout_not_rescaled", "Dropout's kept weights not scaled by 1 / (1 - p)."),
    "dropout_all_kept": _kernel("dropout_all_kept", "A dropout stream that never drops: the all-ones keep mask, reported."),
}
