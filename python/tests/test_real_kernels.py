"""Real third-party kernels from the package registry, verified on the default case set with
their conventions declared truthfully: PyTorch's CPU scaled_dot_product_attention (each CPU
backend), FlexAttention on the CPU, JAX's dot_product_attention, and our own Triton kernel
(examples/triton/) under Triton's interpreter."""
import os
import sys

import numpy as np
import pytest

import attnbench
from conftest import CUDA, have

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

torch_only = pytest.mark.skipif(not have("torch"), reason="needs torch")


def torch_backends():
    if not have("torch"):
        return []
    from torch.nn.attention import SDPBackend
    return [SDPBackend.MATH, SDPBackend.FLASH_ATTENTION]


@torch_only
@pytest.mark.parametrize("backend", torch_backends(), ids=lambda b: str(b).split(".")[-1].lower())
def test_torch_cpu_sdpa_passes_the_default_set(backend):
    import torch
    from torch.nn.attention import sdpa_kernel

    def sdpa(*args, **kwargs):
        with sdpa_kernel([backend]):
            return torch.nn.functional.scaled_dot_product_attention(*args, **kwargs)

    # PyTorch 2.15 on the CPU: the math backend takes every dtype and shape; the flash backend f32,
    # f16 and bf16 with d_k = d_v only (it refuses the rest). Both write zeros for a fully masked
    # row (measured: numpy_kernels.py's note).
    if backend.name == "MATH":
        convention = attnbench.torch_sdpa()
    else:
        convention = attnbench.torch_sdpa(dtypes=("f32", "f16", "bf16"), different_dk_dv=False)
    result = attnbench.verify(sdpa, cases="default", convention=convention, arrays="torch",
                              name=f"torch_sdpa_{backend.name.lower()}")
    assert result.passed, result.summary()


def flex_as_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, softcap=None):
    """FlexAttention called with torch SDPA's arguments (and a soft-cap): the cap, then the mask, as
    one score modification, as Gemma 2's FlexAttention recipe writes it."""
    import torch
    from torch.nn.attention.flex_attention import flex_attention
    assert dropout_p == 0.0
    n_q, n_k = q.shape[2], k.shape[2]
    mask = attn_mask
    if is_causal:
        mask = torch.ones(n_q, n_k, dtype=torch.bool).tril()

    # Captured as a tensor: a Python float captured by score_mod is specialised on, and a second
    # value recompiles it as a symbolic float, which FlexAttention's operator refuses.
    cap = None if softcap is None else torch.tensor(softcap, dtype=q.dtype)

    def score_mod(score, b, h, i, j):
        if cap is not None:
            score = cap * torch.tanh(score / cap)
        if mask is None:
            return score
        m = mask[b if mask.shape[0] > 1 else 0, h if mask.shape[1] > 1 else 0, i, j] if mask.dim() == 4 else mask[i, j]
        if m.dtype == torch.bool:
            return torch.where(m, score, -float("inf"))
        return score + m

    return flex_attention(q, k, v, score_mod=score_mod, scale=scale, enable_gqa=enable_gqa)


@torch_only
# Eager FlexAttention (its unfused path): torch.compile would compile a kernel per shape with the
# machine's C++ compiler, minutes for the quick set; the semantics verified are the same.
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile:UserWarning")
def test_flex_attention_on_the_cpu_passes_the_quick_set():
    try:
        import torch
        from torch.nn.attention.flex_attention import flex_attention  # noqa: F401
        q = torch.randn(1, 1, 4, 8)
        flex_as_sdpa(q, q, q)
    except Exception as e:  # noqa: BLE001 - this PyTorch cannot run it on the CPU
        pytest.skip(f"FlexAttention does not run on this CPU build: {e}")
    result = attnbench.verify(flex_as_sdpa, cases="quick", convention=attnbench.torch_sdpa(dtypes=("f32", "f64")), arrays="torch",
                              name="flex_attention")
    assert result.passed, result.summary()


@torch_only
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile:UserWarning")
def test_flex_attention_soft_capping_passes_the_default_sets_soft_capped_cases():
    """FlexAttention's score_mod form of soft-capping (c tanh(score / c), then the mask and bias),
    a real third-party kernel, on every soft-capped case of the default set in f32 and f64: with
    ALiBi, a sliding window, padding, saturated scores."""
    try:
        import torch
        q = torch.randn(1, 1, 4, 8)
        flex_as_sdpa(q, q, q, softcap=2.0)
    except Exception as e:  # noqa: BLE001 - this PyTorch cannot run it on the CPU
        pytest.skip(f"FlexAttention does not run on this CPU build: {e}")
    # With a soft-cap and no sink (SDPA's signature has none) nor dropout (SDPA's dropout reports no
    # keep mask, so its output cannot be judged): ALiBi, sliding windows, padding.
    cases = [p for p in attnbench.cases("default")
             if p.softcap is not None and p.sinks is None and p.dropout_p is None and p.dtype in ("f32", "f64")]
    assert len(cases) == 12
    convention = attnbench.torch_sdpa(dtypes=("f32", "f64"), score_modifications=("softcap",))
    result = attnbench.verify(flex_as_sdpa, cases=cases, convention=convention, arrays="torch", name="flex_attention_softcap")
    assert result.passed and result.counts["skip"] == 0, result.summary()
    # The same kernel with its cap dropped fails each case, diagnosed as a soft-cap ignored.
    ignoring = attnbench.verify(lambda *a, softcap=None, **kw: flex_as_sdpa(*a, **kw), cases=cases[:4], convention=convention,
                                arrays="torch", name="flex_attention_cap_dropped")
    assert not ignoring.passed
    assert all(f.hypotheses and f.hypotheses[0] == "softcap_ignored" for f in ignoring.failures), ignoring.summary()


def flex_as_flash_attn(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), alibi_slopes=None, softcap=0.0,
                       return_attn_probs=False, mistake=None):
    """FlexAttention called with flash_attn_func's arguments (BSHD), each variant in FlexAttention's
    own form, computed from the positions: the causal mask and the sliding window as a mask_mod
    (a BlockMask), ALiBi (-slope_h |i + n_k - n_q - j|) and the soft-cap in the score_mod. A
    `mistake` writes one of them wrong, as a kernel author might."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    assert dropout_p == 0.0 and not return_attn_probs
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    n_q, n_k = qt.shape[2], kt.shape[2]
    delta = n_k - n_q  # flash_attn_func aligns bottom-right
    left, right = window_size
    if causal:
        right = 0
    if mistake == "window_lower_bound_off_by_one" and left >= 0:
        left += 1
    slopes = None if alibi_slopes is None else alibi_slopes.to(qt.dtype)
    if slopes is not None and mistake == "alibi_slopes_reversed":
        slopes = slopes.flip(0)
    cap = torch.tensor(softcap, dtype=qt.dtype) if softcap else None

    def score_mod(score, b, h, i, j):
        if cap is not None:
            score = cap * torch.tanh(score / cap)
        if slopes is not None:
            score = score - slopes[h] * torch.abs(i + delta - j)
        return score

    def mask_mod(b, h, i, j):
        keep = j >= 0
        if right >= 0:
            keep = keep & (j <= i + delta + right)
        if left >= 0:
            keep = keep & (j >= i + delta - left)
        return keep

    block_mask = None
    if left >= 0 or right >= 0:
        block_mask = create_block_mask(mask_mod, B=None, H=None, Q_LEN=n_q, KV_LEN=n_k, device=str(qt.device))
    out = flex_attention(qt, kt, vt, score_mod=score_mod, block_mask=block_mask, scale=softmax_scale, enable_gqa=qt.shape[1] != kt.shape[1])
    return out.transpose(1, 2)


@torch_only
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile:UserWarning")
def test_flex_attention_positional_alibi_window_and_soft_cap_pass_and_their_mistakes_are_named():
    """FlexAttention's own forms of ALiBi (a score_mod of the positions), the sliding window and
    the causal mask (a mask_mod), and soft-capping, as real third-party kernels through
    flash_attn_func's convention, on every default case in f32 and f64 with ALiBi, a window or a
    soft-cap; the same kernel with ALiBi's slopes reversed, or its window one key wider, is named."""
    try:
        import torch
        q = torch.randn(1, 4, 1, 8)
        flex_as_flash_attn(q, q, q, causal=True, alibi_slopes=torch.ones(1))
    except Exception as e:  # noqa: BLE001 - this PyTorch cannot run it on the CPU
        pytest.skip(f"FlexAttention does not run on this CPU build: {e}")
    convention = attnbench.flash_attn(dtypes=("f32", "f64"), score_modifications=("softcap",))

    def variant(p):
        alibi = "bias=alibi" in p.repro()
        return p.dtype in ("f32", "f64") and p.sinks is None and (alibi or "window=" in p.repro() or p.softcap is not None)

    cases = [p for p in attnbench.cases("default") if variant(p)]
    result = attnbench.verify(flex_as_flash_attn, cases=cases, convention=convention, arrays="torch", name="flex_attention_positional")
    assert result.passed, result.summary()
    ran = [r for r in result.records if r["status"] != "skip"]
    assert len(ran) >= 20, result.summary()
    assert any("bias=alibi" in r["repro"] for r in ran) and any("window=" in r["repro"] for r in ran)
    for mistake, matched in (("alibi_slopes_reversed", lambda p: "bias=alibi" in p.repro() and p.h_q > 1),
                             ("window_lower_bound_off_by_one", lambda p: "window=" in p.repro())):
        wrong = attnbench.verify(lambda *a, **kw: flex_as_flash_attn(*a, mistake=mistake, **kw), cases=[p for p in cases if matched(p)][:4],
                                 convention=convention, arrays="torch", name=f"flex_{mistake}")
        assert not wrong.passed, mistake
        assert all(f.hypotheses and f.hypotheses[0] == mistake for f in wrong.failures), wrong.summary()


def jax_as_sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """jax.nn.dot_product_attention with torch SDPA's arguments (it takes BSHD and a boolean mask
    or an additive bias)."""
    import jax
    import jax.numpy as jnp
    qt, kt, vt = (jnp.transpose(x, (0, 2, 1, 3)) for x in (q, k, v))
    bias = mask = None
    if attn_mask is not None:
        if attn_mask.dtype == jnp.bool_:
            mask = attn_mask
        else:
            bias = attn_mask
    o = jax.nn.dot_product_attention(qt, kt, vt, bias=bias, mask=mask, scale=scale, is_causal=is_causal)
    return jnp.transpose(o, (0, 2, 1, 3))


@pytest.mark.skipif(not have("jax"), reason="needs jax")
def test_jax_dot_product_attention_passes_the_default_set():
    # JAX masks with the dtype's lowest finite value, so a row that sees no key holds the mean of
    # V: nothing is promised there ("any"). Its XLA path on the CPU has no f64 unless x64 is on, and
    # it takes d_k = d_v only.
    convention = attnbench.torch_sdpa(dtypes=("f32", "f16", "bf16"), different_dk_dv=False, fully_masked="any", name="jax_sdpa")
    result = attnbench.verify(jax_as_sdpa, cases="default", convention=convention, arrays="jax", name="jax_dot_product_attention")
    assert result.passed, result.summary()


@torch_only
def test_our_triton_kernel_passes_the_quick_set_interpreted_here_compiled_on_a_gpu():
    if not have("triton"):
        pytest.skip("needs triton")
    sys.path.insert(0, os.path.join(ROOT, "examples", "triton"))
    import flash_attention

    def triton_attention(q, k, v, *, scale, window, valid_lens, mask, bias, o_dtype):
        # Declared causal masks only, so a window here is causal; its alignment is the kernel's `causal`.
        return flash_attention.attention(q, k, v, scale=scale, causal=None if window is None else window[2], return_lse=True)

    # What examples/triton/README.md says it supports: f32, f16, bf16; causal both ways; GQA;
    # d_k != d_v up to 256; the LSE; zeros for a row that sees no key.
    convention = attnbench.native(dtypes=("f32", "f16", "bf16"), masks=("causal_top_left", "causal_bottom_right"), max_head_dim=256,
                                  returns_lse=True)
    # Compiled on a GPU (the tensors go to it), interpreted on the CPU (conftest.py).
    result = attnbench.verify(triton_attention, cases="quick", convention=convention, arrays="torch", device="cuda" if CUDA else "cpu",
                              name="triton_flash_attention")
    assert result.passed, result.summary()
    assert result.counts["pass"] >= 20
