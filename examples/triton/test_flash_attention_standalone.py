"""Checks flash_attention.attention against a float64 PyTorch computation (not a pytest file).

    TRITON_INTERPRET=1 python examples/triton/test_flash_attention_standalone.py   # CPU
    python examples/triton/test_flash_attention_standalone.py --device cuda        # a GPU

Each case draws inputs in its dtype and computes the reference in float64 from the stored
values. The pass rule is attnbench's default one (core/pass_rule.hpp): max |o - o_ref| <= K * yardstick
+ FLOOR_ULPS ulps of the output dtype at max |o_ref|, the yardstick being the error of the naive
algorithm in float32 (the working precision of all three dtypes) or, when larger, the typical
error that rounding the scores in float32 causes (reference/reference_row.hpp's estimate: a
single draw of the naive algorithm's roundings can cancel by luck); the same for the LSE. Rows that see no key must be exact
zeros with an LSE of -inf, and no NaN or Inf may appear anywhere else. Prints one line per case; exits 1 when any case fails. --time also times a call
on b=1 h=2 n=128 d=64.
"""

import argparse
import math
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flash_attention import attention  # noqa: E402

K = 2.0  # allowed multiple of the naive algorithm's error
FLOOR_ULPS = 2  # plus this many ulps of the output dtype at the largest |reference| value
EPS = {torch.float32: 2.0**-23, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}
NAMES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


def ulp_at(x, dtype):
    """The spacing of dtype at magnitude x (x > 0): 2^floor(log2 x) * eps."""
    if x <= 0:
        return EPS[dtype] * 2.0**-14
    return 2.0 ** math.floor(math.log2(x)) * EPS[dtype]


def reference(q, k, v, scale, causal, work=torch.float64):
    """Attention on the stored values computed in `work` (float64: the reference; float32: the
    naive algorithm); (o, lse, seen), zeros and -inf in the rows that see no key."""
    q, k, v = q.to(work), k.to(work), v.to(work)
    h_q, h_kv = q.shape[1], k.shape[1]
    if h_q != h_kv:
        k = k.repeat_interleave(h_q // h_kv, dim=1)
        v = v.repeat_interleave(h_q // h_kv, dim=1)
    n_q, n_k = q.shape[2], k.shape[2]
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if causal is not None:
        delta = 0 if causal == "top_left" else n_k - n_q
        i = torch.arange(n_q).view(-1, 1)
        j = torch.arange(n_k).view(1, -1)
        s = s.masked_fill(~(j <= i + delta), float("-inf"))
    if n_k == 0:
        lse = torch.full(s.shape[:-1], float("-inf"), dtype=work)
        return torch.zeros(s.shape[:-1] + (v.shape[-1],), dtype=work), lse, torch.isfinite(lse)
    m = s.amax(dim=-1, keepdim=True)
    seen = torch.isfinite(m)
    e = torch.exp(s - torch.where(seen, m, torch.zeros_like(m)))
    l = e.sum(dim=-1, keepdim=True)
    o = torch.where(seen, torch.matmul(e, v) / torch.where(seen, l, torch.ones_like(l)), torch.zeros((), dtype=work))
    lse = torch.where(seen, m + torch.log(l), torch.full_like(m, float("-inf"))).squeeze(-1)
    return o, lse, seen.squeeze(-1)


def score_rounding(q, k, v, scale, causal, o_ref, lse_ref, seen, u=2.0**-24):
    """attnbench's estimate of the error that rounding the scores in float32 causes (per row:
    sigma_j = scale * sqrt(sum_t partial_dot_t^2) + |s_j|, weighted by the softmax weights w_j):
    max over rows and columns of u * sqrt(sum_j (w_j sigma_j (v_jc - o_c))^2), and for the LSE of
    u * sqrt(sum_j (w_j sigma_j)^2)."""
    q, k, v = q.double(), k.double(), v.double()
    h_q, h_kv, n_q, n_k = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    if n_k == 0 or not seen.any():
        return 0.0, 0.0
    if h_q != h_kv:
        k = k.repeat_interleave(h_q // h_kv, dim=1)
        v = v.repeat_interleave(h_q // h_kv, dim=1)
    partial = torch.cumsum(q.unsqueeze(3) * k.unsqueeze(2), dim=-1)  # [b, h, n_q, n_k, d_k]
    s = partial[..., -1] * scale
    sigma = abs(scale) * partial.square().sum(-1).sqrt() + s.abs()
    lse = torch.where(seen, lse_ref, torch.zeros_like(lse_ref)).unsqueeze(-1)
    w = torch.exp(s - lse)
    if causal is not None:
        delta = 0 if causal == "top_left" else n_k - n_q
        hidden = torch.arange(n_k).view(1, -1) > torch.arange(n_q).view(-1, 1) + delta
        w = w.masked_fill(hidden, 0.0)
    w = torch.where(seen.unsqueeze(-1), w, torch.zeros_like(w))
    ws = w * sigma  # [b, h, n_q, n_k]
    lse_sr = u * ws.square().sum(-1).sqrt().max().item()
    diff = v.unsqueeze(2) - o_ref.unsqueeze(3)  # [b, h, n_q, n_k, d_v]
    out_sr = u * (ws.unsqueeze(-1) * diff).square().sum(3).sqrt().max().item()
    return out_sr, lse_sr


def make(shape, dtype, device, std, gen, layout="bhsd"):
    b, h, n, d = shape
    if layout == "bshd":  # a strided view of a [b, n, h, d] buffer
        x = torch.randn((b, n, h, d), generator=gen, dtype=torch.float64) * std
        return x.to(dtype).to(device).transpose(1, 2)
    if layout == "strided":  # every other element of the last dim, heads and rows swapped in memory
        x = torch.randn((b, n, h, 2 * d), generator=gen, dtype=torch.float64) * std
        return x.to(dtype).to(device).transpose(1, 2)[..., ::2]
    x = torch.randn((b, h, n, d), generator=gen, dtype=torch.float64) * std
    return x.to(dtype).to(device)


# (b, h_q, h_kv, n_q, n_k, d_k, d_v, dtype, causal, extras)
F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
CASES = [
    (1, 1, 1, 1, 1, 16, 16, F32, None, {}),
    (1, 1, 1, 1, 1, 64, 64, BF16, "bottom_right", {}),
    (1, 2, 2, 17, 17, 64, 64, F32, None, {}),
    (1, 2, 2, 17, 17, 64, 64, F16, "top_left", {}),
    (2, 2, 2, 17, 33, 32, 32, F16, None, {}),
    (2, 2, 2, 33, 17, 32, 32, BF16, None, {}),
    (1, 2, 2, 31, 47, 40, 72, F32, None, {}),
    (1, 1, 1, 31, 29, 256, 256, F16, None, {}),
    (1, 1, 1, 33, 31, 256, 8, F32, "top_left", {}),
    (1, 4, 2, 32, 31, 64, 64, F32, None, {}),
    (2, 3, 1, 29, 37, 16, 24, BF16, "bottom_right", {}),
    (1, 2, 2, 37, 37, 64, 64, F32, "top_left", {}),
    (1, 2, 2, 13, 50, 64, 64, F16, "bottom_right", {}),
    (1, 2, 2, 50, 13, 64, 64, F32, "bottom_right", {}),  # rows 0..36 see no key
    (1, 2, 2, 50, 13, 64, 64, BF16, "top_left", {}),
    (1, 2, 2, 13, 50, 64, 64, F32, "top_left", {}),
    (1, 1, 1, 1, 100, 128, 128, F16, "bottom_right", {}),
    (1, 1, 1, 7, 0, 16, 16, F32, None, {}),  # no key at all
    (1, 1, 1, 5, 3, 3, 5, F32, "bottom_right", {}),
    (1, 2, 2, 64, 64, 64, 64, F32, None, {"scale": 0.3}),
    (1, 2, 2, 64, 64, 64, 64, F32, None, {"std_qk": 8.0 ** 0.5}),  # peaked: score std ~ 8
    (1, 2, 2, 64, 64, 64, 64, F16, "top_left", {"std_qk": 8.0 ** 0.5}),
    (2, 4, 2, 45, 70, 96, 80, F16, "bottom_right", {"layout": "bshd"}),
    (2, 4, 2, 70, 45, 96, 80, BF16, "top_left", {"layout": "bshd"}),
    (1, 8, 1, 16, 128, 256, 256, BF16, None, {}),
    (1, 2, 2, 65, 65, 64, 64, F32, "bottom_right", {"large": True}),
    (1, 2, 2, 65, 65, 64, 64, F16, None, {"large": True}),
    (1, 1, 1, 100, 13, 32, 32, BF16, "bottom_right", {}),  # whole query tiles see no key
    (2, 6, 3, 40, 41, 48, 24, F32, "top_left", {"layout": "strided"}),
]


def run_case(case, device, gen):
    b, h_q, h_kv, n_q, n_k, d_k, d_v, dtype, causal, extra = case
    layout = extra.get("layout", "bhsd")
    std = extra.get("std_qk", 1.0)
    if extra.get("large"):  # scores near max_float/16 (before scaling): far past exp's range
        std = math.sqrt(torch.finfo(dtype).max / (16.0 * math.sqrt(d_k)))
    q = make((b, h_q, n_q, d_k), dtype, device, std, gen, layout)
    k = make((b, h_kv, n_k, d_k), dtype, device, std, gen, layout)
    v = make((b, h_kv, n_k, d_v), dtype, device, 1.0, gen, layout)
    scale = extra.get("scale")
    o, lse = attention(q, k, v, scale=scale, causal=causal, return_lse=True)
    scale_value = scale if scale is not None else 1 / math.sqrt(d_k)
    o_ref, lse_ref, seen = reference(q.cpu(), k.cpu(), v.cpu(), scale_value, causal)
    o_naive, lse_naive, _ = reference(q.cpu(), k.cpu(), v.cpu(), scale_value, causal, torch.float32)
    o_naive = o_naive.to(dtype).double()  # rounded once to the output dtype, as a kernel's is
    sr_o, sr_lse = score_rounding(q.cpu(), k.cpu(), v.cpu(), scale_value, causal, o_ref, lse_ref, seen)
    o, lse, lse_naive = o.cpu().double(), lse.cpu().double(), lse_naive.double()

    problems = []
    if o.shape != o_ref.shape or lse.shape != lse_ref.shape:
        return False, f"shape o {tuple(o.shape)} lse {tuple(lse.shape)}", 0.0
    unseen = ~seen
    if unseen.any():
        if not bool((o[unseen] == 0).all()):
            problems.append("a row that sees no key is not zero")
        if not bool((lse[unseen] == float("-inf")).all()):
            problems.append("a row that sees no key has an LSE other than -inf")
    if not bool(torch.isfinite(o[seen]).all()) or not bool(torch.isfinite(lse[seen]).all()):
        problems.append("NaN or Inf in a row that sees keys")
    ratio, ulps = 0.0, 0.0
    if seen.any():
        ulp_o = ulp_at(o_ref[seen].abs().max().item(), dtype)
        err_o = (o - o_ref)[seen].abs().max().item()
        tol_o = K * max((o_naive - o_ref)[seen].abs().max().item(), sr_o) + FLOOR_ULPS * ulp_o
        err_l = (lse - lse_ref)[seen].abs().max().item()
        tol_l = (K * max((lse_naive - lse_ref)[seen].abs().max().item(), sr_lse)
                 + FLOOR_ULPS * ulp_at(lse_ref[seen].abs().max().item(), torch.float32))
        ratio = max(err_o / tol_o, err_l / tol_l)
        ulps = err_o / ulp_o
        if not err_o <= tol_o:
            problems.append(f"o error {err_o:.3g} > {tol_o:.3g}")
        if not err_l <= tol_l:
            problems.append(f"lse error {err_l:.3g} > {tol_l:.3g}")
    problems += invariances(q, k, v, scale, causal, o, lse, gen)
    return not problems, "; ".join(problems), ratio, ulps


def invariances(q, k, v, scale, causal, o, lse, gen):
    """Bit-exact checks: masked keys with other finite values change nothing; GQA equals MHA
    with the kv heads repeated. Returns the problems found."""
    problems = []
    h_q, h_kv, n_q, n_k = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    if causal is not None and n_k > 0:
        # Every key past row i's horizon redrawn with large finite values: row i keeps every bit.
        delta = 0 if causal == "top_left" else n_k - n_q
        i = n_q // 2
        first_hidden = max(i + delta + 1, 0)
        if first_hidden < n_k:
            big = 0.25 * torch.finfo(q.dtype).max ** 0.5
            k2, v2 = k.clone(), v.clone()
            k2[:, :, first_hidden:] = (torch.rand(k2[:, :, first_hidden:].shape, generator=gen) * big).to(k.dtype).to(k.device)
            v2[:, :, first_hidden:] = (torch.rand(v2[:, :, first_hidden:].shape, generator=gen) * big).to(v.dtype).to(v.device)
            o2, lse2 = attention(q, k2, v2, scale=scale, causal=causal, return_lse=True)
            if not (torch.equal(o2[:, :, i].cpu(), o[:, :, i].cpu().to(o2.dtype)) and torch.equal(lse2[:, :, i].cpu(), lse[:, :, i].cpu().float())):
                problems.append(f"row {i} changed when keys {first_hidden}.. it cannot see were redrawn")
    if h_q != h_kv:
        g = h_q // h_kv
        o3, lse3 = attention(q, k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1),
                             scale=scale, causal=causal, return_lse=True)
        if not (torch.equal(o3.cpu(), o.cpu().to(o3.dtype)) and torch.equal(lse3.cpu(), lse.cpu().float())):
            problems.append("GQA differs from MHA with repeated kv heads")
    return problems


def describe(case):
    b, h_q, h_kv, n_q, n_k, d_k, d_v, dtype, causal, extra = case
    extras = " ".join(f"{k}={v}" for k, v in extra.items())
    return (f"b={b} h={h_q}/{h_kv} n={n_q}x{n_k} d={d_k}/{d_v} {NAMES[dtype]} "
            f"causal={causal or 'none'} {extras}").rstrip()


def time_call(device, dtype, causal, repeats):
    gen = torch.Generator().manual_seed(1)
    q, k, v = (make((1, 2, 128, 64), dtype, device, 1.0, gen) for _ in range(3))
    attention(q, k, v, causal=causal)  # warm-up (compilation on a GPU)
    if device != "cpu":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(repeats):
        attention(q, k, v, causal=causal)
    if device != "cpu":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / repeats


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", help="cpu (needs TRITON_INTERPRET=1) or cuda")
    ap.add_argument("--time", action="store_true", help="also time b=1 h=2 n=128 d=64")
    args = ap.parse_args()
    if args.device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        print("set TRITON_INTERPRET=1 to run on the CPU (Triton's interpreter)", file=sys.stderr)
        return 2
    gen = torch.Generator().manual_seed(20240607)
    failed = 0
    t_all = time.perf_counter()
    for case in CASES:
        t0 = time.perf_counter()
        try:
            ok, why, ratio, ulps = run_case(case, args.device, gen)
        except Exception as e:  # report and go on
            ok, why, ratio, ulps = False, f"{type(e).__name__}: {e}", float("nan"), float("nan")
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'}  {describe(case):66s} {ratio:5.2f} of tol, o {ulps:5.2f} ulps  "
              f"{time.perf_counter() - t0:5.2f} s  {why}")
    print(f"{len(CASES) - failed}/{len(CASES)} passed in {time.perf_counter() - t_all:.1f} s")
    if args.time:
        for dtype in (F32, F16, BF16):
            for causal in (None, "top_left"):
                t = time_call(args.device, dtype, causal, 3 if args.device == "cpu" else 50)
                print(f"time b=1 h=2 n=128 d=64 {NAMES[dtype]} causal={causal or 'none'}: {t * 1e3:.1f} ms per call")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
