"""Flash-attention forward pass in Triton (FlashAttention-2's algorithm), our own.

    O = softmax(Q K^T * scale + causal mask) V,  LSE = log sum exp(Q K^T * scale) per query row

One program computes one tile of BLOCK_M query rows of one (batch, query head): it loops over
tiles of BLOCK_N keys, keeping a running row maximum m, a running sum l of exp(s - m) and an
unnormalised fp32 accumulator, rescaled by exp(m_old - m_new) whenever the maximum grows (the
online softmax); the output is divided by l once, at the end. Scores are kept in base-2 units
(log2(e) folded into the scale, one rounding) so that every exponential is an exp2.

The same source runs under Triton's interpreter on the CPU (``TRITON_INTERPRET=1``, torch CPU
tensors) and compiles for a GPU; only the tile sizes differ (small under the interpreter).

Semantics (attnbench's DESIGN.md, "The problem, normatively"):
  * q [b, h_q, n_q, d_k], k [b, h_kv, n_k, d_k], v [b, h_kv, n_k, d_v], any strides (BHSD index
    order; BSHD or any other layout is a strided view); h_q % h_kv == 0 and query head h reads
    kv head h // (h_q // h_kv) (MHA, GQA and MQA).
  * dtypes float32, float16, bfloat16 (q, k and v the same); the output is in q's dtype; scores,
    softmax and both products are computed in fp32 (fp32 inputs: IEEE products, never TF32;
    P is kept in fp32 for P V, not rounded to the input dtype).
  * causal: None, "top_left" (query i sees key j iff j <= i) or "bottom_right"
    (j <= i + n_k - n_q). Masked keys are excluded exactly (-inf, no finite stand-in).
  * a row that sees no key (bottom_right with n_q > n_k, or n_k = 0) outputs exact zeros and
    LSE = -inf.
  * lse [b, h_q, n_q] float32, natural log, when return_lse.
  * deterministic: no atomics, a fixed order of operations (GQA gives the bits of MHA with the
    kv heads repeated).
  * non-finite values in masked K/V rows: K is safe (its scores are replaced by -inf), V is not:
    a masked key inside a tile that another row of the tile sees enters P V as 0 * V, so a NaN
    or Inf there reaches rows that do not see it (keys masked for the whole query tile are
    never read).
Not supported: key padding, boolean masks, additive bias, ALiBi, sliding windows, soft-capping,
sinks, dropout, varlen/paged layouts, backward.
"""

import math

import torch
import triton
import triton.language as tl

__all__ = ["attention", "SUPPORTED_DTYPES", "MAX_HEAD_DIM"]

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MAX_HEAD_DIM = 256
INTERPRETER_BLOCK = 32  # BLOCK_M = BLOCK_N under the interpreter (a power of two >= 16)
_CAUSAL = (None, "top_left", "bottom_right")
_LOG2E = 1.4426950408889634  # log2(e)


@triton.jit
def _attention_forward_kernel(
    Q, K, V, O, LSE,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_kb, stride_kh, stride_kn, stride_kd,
    stride_vb, stride_vh, stride_vn, stride_vd,
    stride_ob, stride_oh, stride_om, stride_od,
    stride_lb, stride_lh, stride_lm,
    GROUP, N_Q, N_K, D_K, D_V,
    DELTA,  # the diagonal's offset: 0 top-left, n_k - n_q bottom-right (only read when CAUSAL)
    qk_scale,  # scale * log2(e): the scores in base-2 units, one rounding
    CAUSAL: tl.constexpr,
    RETURN_LSE: tl.constexpr,
    UPCAST: tl.constexpr,  # compute the products on fp32 copies of the tiles
    DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_DK: tl.constexpr,
    BLOCK_DV: tl.constexpr,
):
    LN2: tl.constexpr = 0.6931471805599453
    start_m = tl.program_id(0) * BLOCK_M
    # 64-bit offsets throughout: a tensor may hold more than 2^31 elements.
    off_h = tl.program_id(1).to(tl.int64)
    off_b = tl.program_id(2).to(tl.int64)
    off_hkv = off_h // GROUP  # MHA, GQA and MQA: one rule

    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n0 = tl.arange(0, BLOCK_N)
    offs_dk = tl.arange(0, BLOCK_DK)
    offs_dv = tl.arange(0, BLOCK_DV)
    offs_m64 = offs_m.to(tl.int64)
    offs_dk64 = offs_dk.to(tl.int64)
    offs_dv64 = offs_dv.to(tl.int64)
    row_in = offs_m < N_Q

    q_ptrs = (Q + off_b * stride_qb + off_h * stride_qh
              + offs_m64[:, None] * stride_qm + offs_dk64[None, :] * stride_qd)
    q = tl.load(q_ptrs, mask=row_in[:, None] & (offs_dk[None, :] < D_K), other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    k_base = K + off_b * stride_kb + off_hkv * stride_kh
    v_base = V + off_b * stride_vb + off_hkv * stride_vh

    # Keys this tile of rows can see: [0, kv_end). Under a causal mask the keys past the last
    # row's horizon are masked in every row of the tile: they are never loaded at all.
    kv_end = N_K
    if CAUSAL:
        last_row = tl.minimum(start_m + BLOCK_M, N_Q) - 1
        kv_end = tl.maximum(tl.minimum(kv_end, last_row + DELTA + 1), 0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running max of the scores (base 2)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum of exp2(s - m_i)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)

    for start_n in range(0, kv_end, BLOCK_N):
        offs_n = start_n + offs_n0
        offs_n64 = offs_n.to(tl.int64)
        key_in = offs_n < kv_end
        # K^T tile [BLOCK_DK, BLOCK_N]
        kt = tl.load(k_base + offs_n64[None, :] * stride_kn + offs_dk64[:, None] * stride_kd,
                     mask=key_in[None, :] & (offs_dk[:, None] < D_K), other=0.0)
        if UPCAST:
            kt = kt.to(tl.float32)
        s = tl.dot(q, kt, input_precision=DOT_PRECISION) * qk_scale
        visible = key_in[None, :]
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= offs_m[:, None] + DELTA)
        s = tl.where(visible, s, float("-inf"))

        m_new = tl.maximum(m_i, tl.max(s, 1))
        # A row that has seen no key yet keeps m = -inf; subtract 0 there instead, so that
        # -inf - -inf never makes a NaN: its p and alpha are exp2(-inf) = 0.
        m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp2(s - m_sub[:, None])
        alpha = tl.exp2(m_i - m_sub)
        l_i = l_i * alpha + tl.sum(p, 1)

        v = tl.load(v_base + offs_n64[:, None] * stride_vn + offs_dv64[None, :] * stride_vd,
                    mask=key_in[:, None] & (offs_dv[None, :] < D_V), other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32), input_precision="ieee")
        m_i = m_new

    seen = l_i > 0.0
    l_div = tl.where(seen, l_i, 1.0)
    out = tl.where(seen[:, None], acc / l_div[:, None], 0.0)  # a fully masked row: exact zeros
    o_ptrs = (O + off_b * stride_ob + off_h * stride_oh
              + offs_m64[:, None] * stride_om + offs_dv64[None, :] * stride_od)
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=row_in[:, None] & (offs_dv[None, :] < D_V))
    if RETURN_LSE:
        lse = tl.where(seen, (m_i + tl.log2(l_div)) * LN2, float("-inf"))
        tl.store(LSE + off_b * stride_lb + off_h * stride_lh + offs_m64 * stride_lm, lse, mask=row_in)


def _interpreting():
    # triton.jit hands back an interpreted function when TRITON_INTERPRET was set at import.
    return type(_attention_forward_kernel).__name__ == "InterpretedFunction"


def _block_dim(d):
    return max(16, triton.next_power_of_2(d))


def _launch_config(dtype, d_k, d_v, interpreting):
    """The kernel's constexprs besides CAUSAL and RETURN_LSE, and its launch options."""
    block_dk, block_dv = _block_dim(d_k), _block_dim(d_v)
    if interpreting:
        # numpy does the work per tile: 32 x 32 keeps the interpreter quick (about 0.1 s for
        # b=1 h=2 n=128 d=64; 16 x 16 takes 3.5 times as long) while small shapes still span
        # several tiles.
        block_m = block_n = INTERPRETER_BLOCK
        launch = {}
        # The interpreter keeps bfloat16 as raw 16-bit words, which its dot (numpy's matmul)
        # would multiply as integers: give it fp32 copies (exact, and the GPU's products of
        # 16-bit inputs are exact in fp32 too).
        upcast = dtype == torch.bfloat16
    else:
        # Shared memory stays under 100 KB (compiled for sm_80/86/90): fp32 tiles of d > 128
        # need the smaller tile and no pipelining.
        wide = max(block_dk, block_dv) > 128
        if dtype == torch.float32 and wide:
            block_m, block_n, stages = 32, 32, 1
        else:
            block_m, block_n, stages = 64, 32 if (wide or dtype == torch.float32) else 64, 2
        launch = {"num_warps": 8 if wide else 4, "num_stages": stages}
        upcast = False
    # fp32 products in IEEE fp32, never TF32; the setting means nothing for 16-bit inputs.
    precision = "ieee" if (dtype == torch.float32 or upcast) else "tf32"
    return dict(UPCAST=upcast, DOT_PRECISION=precision, BLOCK_M=block_m, BLOCK_N=block_n,
                BLOCK_DK=block_dk, BLOCK_DV=block_dv, **launch)


def attention(q, k, v, *, scale=None, causal=None, return_lse=False):
    """Scaled dot-product attention, forward. Returns o, or (o, lse) when return_lse.

    q [b, h_q, n_q, d_k], k [b, h_kv, n_k, d_k], v [b, h_kv, n_k, d_v] (any strides);
    scale defaults to 1/sqrt(d_k); causal is None, "top_left" or "bottom_right".
    o [b, h_q, n_q, d_v] in q's dtype; lse [b, h_q, n_q] float32 (natural log, -inf for a row
    that sees no key).
    """
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v)):
        raise TypeError("attention: q, k and v must be torch tensors")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"attention: q, k, v must be 4-D [b, h, n, d], got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if q.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"attention: dtype {q.dtype} not supported (float32, float16, bfloat16)")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"attention: q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError("attention: q, k and v must be on one device")
    if q.device.type == "cpu" and not _interpreting():
        raise ValueError("attention: CPU tensors run only under Triton's interpreter "
                         "(set TRITON_INTERPRET=1 before importing triton)")
    b, h_q, n_q, d_k = q.shape
    b_k, h_kv, n_k, d_k2 = k.shape
    b_v, h_v, n_v, d_v = v.shape
    if b_k != b or b_v != b:
        raise ValueError(f"attention: batch sizes differ ({b}, {b_k}, {b_v})")
    if h_v != h_kv or n_v != n_k:
        raise ValueError(f"attention: k {tuple(k.shape)} and v {tuple(v.shape)} differ in heads or length")
    if d_k2 != d_k:
        raise ValueError(f"attention: q and k head dims differ ({d_k}, {d_k2})")
    if h_kv == 0 or h_q % h_kv != 0:
        raise ValueError(f"attention: h_q ({h_q}) must be a multiple of h_kv ({h_kv})")
    if not (1 <= d_k <= MAX_HEAD_DIM and 1 <= d_v <= MAX_HEAD_DIM):
        raise ValueError(f"attention: head dims must be in [1, {MAX_HEAD_DIM}], got d_k={d_k}, d_v={d_v}")
    if b > 65535 or h_q > 65535:
        raise ValueError(f"attention: b ({b}) and h_q ({h_q}) must each be at most 65535 (grid limits)")
    if causal is False:
        causal = None
    if causal not in _CAUSAL:
        raise ValueError(f"attention: causal must be None, 'top_left' or 'bottom_right', got {causal!r}")
    if scale is None:
        scale = 1.0 / math.sqrt(d_k)
    scale = float(scale)

    o = torch.empty((b, h_q, n_q, d_v), dtype=q.dtype, device=q.device)
    lse = torch.empty((b, h_q, n_q), dtype=torch.float32, device=q.device)
    if b * h_q * n_q == 0:
        return (o, lse) if return_lse else o

    cfg = _launch_config(q.dtype, d_k, d_v, _interpreting())
    delta = 0 if causal != "bottom_right" else n_k - n_q

    grid = (triton.cdiv(n_q, cfg["BLOCK_M"]), h_q, b)
    _attention_forward_kernel[grid](
        q, k, v, o, lse,
        *q.stride(), *k.stride(), *v.stride(), *o.stride(), *lse.stride(),
        h_q // h_kv, n_q, n_k, d_k, d_v,
        delta, scale * _LOG2E,
        CAUSAL=causal is not None,
        RETURN_LSE=bool(return_lse),
        **cfg,
    )
    return (o, lse) if return_lse else o
