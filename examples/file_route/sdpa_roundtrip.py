#!/usr/bin/env python3
"""The file route's external program for PyTorch: reads a cases directory written by
`attnbench cases --out CASES`, runs torch.nn.functional.scaled_dot_product_attention on every case
and writes OUTPUTS/out_NNNN.npy, which `attnbench check --cases CASES --outputs OUTPUTS` verifies;
for a backward case (`attnbench cases --backward`) also its LSE and the gradients dq, dk and dv
(and d_sink, d_bias where the case has sinks or a bias).

    python3 sdpa_roundtrip.py CASES OUTPUTS [--device cpu|cuda] [--backend auto|torch|numpy]
    python3 sdpa_roundtrip.py --write-declaration FILE [--fully-masked zeros|nan]

What it follows from manifest.json (see core/case_files.hpp):
  - q, k, v are BHSD; query head h reads kv head h // (h_q // h_kv): k and v are repeated per group.
  - the mask is boolean, True = visible, broadcastable [b or 1, h_q or 1, n_q, n_k]; it goes to
    SDPA as attn_mask; with an additive bias the two become one float mask (bias, -inf where masked).
  - the scale is the manifest's, passed explicitly; so is its soft-cap c (null: none): each scaled
    score s becomes c * tanh(s / c) before the bias. SDPA has no soft-cap, so a soft-capped case
    runs the same steps as PyTorch operations in the inputs' working precision (f64 for f64, else
    f32): q k^T * scale, c * tanh(. / c), the bias and the mask, softmax, times v.
  - the dtype is the case's: f64, f32, f16 as stored; bf16 arrives as f32 holding bf16 values
    (converted exactly) and leaves as f32 holding the bf16 output (out.float()).
  - a mixed-precision case (the repro string's dtypes=, e.g. `dtype=f16 dtypes=o:f32` or `dtype=f32
    dtypes=k:bf16,v:bf16`) has each file in its role's dtype (the manifest's npy_dtype). SDPA takes
    one dtype, so such a case runs in the working precision of its inputs (f64 where q, k, v or the
    bias is f64, else f32; every input converts exactly), as a mixed-precision kernel accumulates,
    and its output is rounded once to o's dtype.
  - a fully masked row (a query that sees no key) follows the case's "fully_masked_rows" policy:
    zeros (SDPA gives NaN there, so such rows are zeroed), nan, or any (left as computed).
  - dropout (the manifest's "dropout_p" and "dropout_seed"): SDPA's dropout_p draws a mask it does not
    report, and attnbench judges a dropout output only given the keep mask it was computed with, so
    SDPA itself cannot run such a case. The script draws its own keep mask (NumPy's PCG64 on the
    manifest's seed: each weight kept with probability 1 - p), runs the steps as PyTorch operations
    in the working precision (the weights after the softmax times the mask and 1 / (1 - p), times
    v), and writes the mask as keep_NNNN.npy ('|b1' [b, h_q, n_q, n_k]) beside the output.
  - a backward case (the manifest's "operation": "backward", with a d_o file): its own forward's
    out and lse_NNNN.npy, and the gradients of sum(out * dO) with respect to q, k and v as
    dq_NNNN.npy, dk_NNNN.npy and dv_NNNN.npy, each rounded once to its role's dtype. PyTorch runs
    the forward's steps as operations in the working precision (f64 for f64, else f32) and
    autograd differentiates them; a row that sees no key is computed on a finite stand-in row and
    multiplied by 0 (softmax over -inf only is NaN, and its gradient too), so it contributes
    nothing, as the manifest's "gradients" says. NumPy computes the textbook backward in float64
    (dV = P^T dO, dP = dO V^T, D = rowsum(P dP), dS = P (dP - D), dQ = scale dS K, dK = scale dS^T
    Q, through the soft-cap's slope, dropout's mask and GQA's group sums). Where the manifest names
    them (a case with sinks, a bias) also d_sink_NNNN.npy, the sinks' gradient [h_q] in f32
    (autograd's through the sinks' column; NumPy's -sum over b and i of P_i,sink D_i), and
    d_bias_NNNN.npy, the bias's in its shape and dtype (autograd's through the broadcast add; NumPy's
    dS before the soft-cap's slope, summed over the dimensions the bias broadcasts over).

--backend numpy computes the same in float64 with NumPy alone (rounded once to the case's dtype):
the loading, masking, GQA and writing code of this script. The default, auto, uses PyTorch where
it can be imported and otherwise falls back to NumPy, saying so and why.

--write-declaration FILE writes what this script implements as a capabilities declaration
(impls/capability_declaration.hpp) for `attnbench cases --declare` and `attnbench check
--declare`: every dtype (also per role), mask, GQA and d_k != d_v, the soft-cap, sinks and dropout
(score_modifications), the forward and the backward (operations) with the sinks' and the bias's
gradients (parameter_gradients), fully masked rows as
--fully-masked says (default zeros). --fully-masked also makes the script write that policy
whatever the manifest asks, so a declaration that does not match what the kernel does fails its
cases.
"""
import argparse
import json
import os
import sys

import numpy as np


DTYPES = ("f64", "f32", "f16", "bf16")
INPUT_ROLES = ("q", "k", "v", "bias")
GRADIENT_ROLES = ("dq", "dk", "dv")


def role_dtypes(case):
    """Each role's dtype (q, k, v, bias, o, d_o, dq, ...): the case's dtype, unless the repro
    string's dtypes= token gives the role its own (dtypes=o:f32, dtypes=k:bf16,v:bf16)."""
    dtypes = {role: case["dtype"] for role in INPUT_ROLES + ("o", "d_o") + GRADIENT_ROLES}
    for token in case["repro"].split("#", 1)[0].split():
        if token.startswith("dtypes="):
            for entry in token[len("dtypes="):].split(","):
                role, _, dtype = entry.partition(":")
                if dtype not in DTYPES:
                    sys.exit(f"case {case['index']}: {token}: unknown dtype {dtype!r} for role {role!r}")
                dtypes[role] = dtype
    return dtypes


def compute_dtype(dtypes, arrays):
    """The dtype SDPA runs in: the case's where every role has it; in a mixed-precision case the
    working precision of its inputs (f64 where q, k, v or the bias is f64, else f32), which holds
    every input exactly (f16 and bf16 values are f32 values)."""
    present = [role for role in INPUT_ROLES if arrays.get(role) is not None]
    if all(dtypes[role] == dtypes["o"] for role in present):
        return dtypes["o"]
    return "f64" if any(dtypes[role] == "f64" for role in present) else "f32"


def load_case(cases_dir, case):
    """The case's arrays as stored: q, k, v, the visibility mask (or None) and the bias (or None)."""
    def load(key):
        entry = case.get(key)
        if entry is None:
            return None
        array = np.load(os.path.join(cases_dir, entry["file"]), allow_pickle=False)
        if list(array.shape) != entry["shape"] or array.dtype.str != entry["npy_dtype"]:
            sys.exit(f"{entry['file']}: shape {array.shape} dtype {array.dtype.str}, the manifest says "
                     f"{tuple(entry['shape'])} {entry['npy_dtype']}")
        return array
    return {key: load(key) for key in ("q", "k", "v", "mask", "bias", "d_o")}


def rows_with_a_visible_key(arrays):
    """[b, h_q, n_q] booleans: False where the row sees no key (its output must be zeros)."""
    q, mask = arrays["q"], arrays["mask"]
    b, h_q, n_q, _ = q.shape
    if mask is None:
        return np.ones((b, h_q, n_q), dtype=bool)
    return np.broadcast_to(mask.any(axis=-1), (b, h_q, n_q))


def repeat_kv(x, h_q):
    return np.repeat(x, h_q // x.shape[1], axis=1)


def round_to_bf16(x):
    """float64 -> the nearest bf16 value (ties to even), as float32."""
    bits = np.ascontiguousarray(x, dtype=np.float64).astype(np.float32).view(np.uint32)
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16) << 16
    return np.where(np.isnan(x), np.float32(np.nan), rounded.astype(np.uint32).view(np.float32))


def encode_output(out64, dtype):
    """An output computed in float64, rounded once to the case's dtype, in the file encoding."""
    if dtype == "f64":
        return out64.astype(np.float64)
    if dtype == "f32":
        return out64.astype(np.float32)
    if dtype == "f16":
        return out64.astype(np.float16)
    if dtype == "bf16":
        return round_to_bf16(out64)
    raise ValueError(f"unknown dtype {dtype}")


def draw_keep(arrays, p, seed):
    """Dropout's keep mask [b, h_q, n_q, n_k] from this script's own stream (NumPy's PCG64 on the
    case's seed): True (kept) with probability 1 - p."""
    b, h_q, n_q, _ = arrays["q"].shape
    n_k = arrays["k"].shape[2]
    return np.random.Generator(np.random.PCG64(seed)).random((b, h_q, n_q, n_k)) >= p


def softmax_numpy(arrays, scale, softcap=None, sinks=None):
    """The softmax's weights P [b, h_q, n_q, n_k] in float64 (after the sink; zero in a row that
    sees no key), the scaled products x before the soft-cap, the rows that see a key [b, h_q, n_q,
    1] and the LSE [b, h_q, n_q] (-inf where a row sees no key)."""
    q = arrays["q"].astype(np.float64)
    h_q = q.shape[1]
    k = repeat_kv(arrays["k"].astype(np.float64), h_q)
    x = scale * np.einsum("bhid,bhjd->bhij", q, k)
    scores = x
    if softcap is not None:
        scores = softcap * np.tanh(x / softcap)
    if arrays["bias"] is not None:
        scores = scores + arrays["bias"].astype(np.float64)
    if arrays["mask"] is not None:
        scores = np.where(arrays["mask"], scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    visible = np.isfinite(row_max)
    sink = None if sinks is None else np.asarray(sinks, dtype=np.float64).reshape(1, h_q, 1, 1)
    if sink is not None:
        row_max = np.maximum(row_max, sink)
    weights = np.exp(scores - np.where(visible, row_max, 0.0))
    total = weights.sum(axis=-1, keepdims=True)
    if sink is not None:
        total = total + np.exp(sink - np.where(visible, row_max, 0.0))
    weights = weights / np.where(visible, total, 1.0)
    with np.errstate(divide="ignore"):
        lse = np.where(visible, row_max + np.log(np.where(visible, total, 1.0)), -np.inf)[..., 0]
    return weights, x, visible, lse


def attention_numpy(arrays, scale, softcap=None, sinks=None, keep=None, dropout_p=0.0):
    """softmax(cap(q k^T * scale) + bias, masked keys excluded) v in float64, cap(s) = c tanh(s / c)
    when the case has a soft-cap c, and head h's sink logit one more term of each row's denominator
    when it has sinks; fully masked rows zero (apply_policy turns them into NaN where that is the
    policy)."""
    weights, _, visible, _ = softmax_numpy(arrays, scale, softcap, sinks)
    v = repeat_kv(arrays["v"].astype(np.float64), weights.shape[1])
    if keep is not None:  # dropout after the softmax: kept weights scaled by 1 / (1 - p)
        weights = np.where(keep, weights / (1.0 - dropout_p), 0.0)
    return np.einsum("bhij,bhjd->bhid", weights, v) * visible


def sum_over_groups(x, h_kv):
    """[b, h_q, ...] -> [b, h_kv, ...]: a kv head's gradient sums those of the query heads reading it."""
    b, h_q = x.shape[:2]
    return x.reshape(b, h_kv, h_q // h_kv, *x.shape[2:]).sum(axis=2)


def attention_backward_numpy(arrays, scale, softcap=None, sinks=None, keep=None, dropout_p=0.0):
    """The forward's out and LSE and the textbook backward (dq, dk, dv) in float64, as the
    manifest's "gradients" states them."""
    P, x, visible, lse = softmax_numpy(arrays, scale, softcap, sinks)
    q = arrays["q"].astype(np.float64)
    h_q, h_kv = q.shape[1], arrays["k"].shape[1]
    k = repeat_kv(arrays["k"].astype(np.float64), h_q)
    v = repeat_kv(arrays["v"].astype(np.float64), h_q)
    d_o = arrays["d_o"].astype(np.float64)
    # Z r: dropout's kept weights scaled by 1 / (1 - p); 1 without dropout.
    zr = np.ones_like(P) if keep is None else np.where(keep, 1.0 / (1.0 - dropout_p), 0.0)
    out = np.einsum("bhij,bhjd->bhid", P * zr, v) * visible
    dv = np.einsum("bhij,bhid->bhjd", P * zr, d_o)
    dp = np.einsum("bhid,bhjd->bhij", d_o, v) * zr
    d = (P * dp).sum(axis=-1, keepdims=True)
    ds = P * (dp - d)
    gradients = {}
    if sinks is not None:  # dsigma_h = -sum over b and i of P_i,sink D_i; a row that sees no key adds nothing
        sees = visible[..., 0]
        sink = np.asarray(sinks, dtype=np.float64).reshape(1, h_q, 1)
        p_sink = np.where(sees, np.exp(sink - np.where(sees, lse, 0.0)), 0.0)
        gradients["d_sink"] = -(p_sink * d[..., 0]).sum(axis=(0, 2))
    if arrays["bias"] is not None:  # dS (the bias is added after the soft-cap) summed where the bias broadcasts
        broadcast = tuple(axis for axis in (0, 1) if arrays["bias"].shape[axis] == 1)
        gradients["d_bias"] = ds.sum(axis=broadcast, keepdims=True)
    if softcap is not None:  # the soft-cap's slope, sech^2(x / c) = 1 - tanh^2(x / c)
        ds = ds * (1.0 - np.tanh(x / softcap) ** 2)
    dq = scale * np.einsum("bhij,bhjd->bhid", ds, k)
    dk = scale * np.einsum("bhij,bhid->bhjd", ds, q)
    gradients.update({"dq": dq, "dk": sum_over_groups(dk, h_kv), "dv": sum_over_groups(dv, h_kv)})
    return out, lse, gradients


def apply_policy(out, arrays, policy):
    """Fully masked rows as the policy says: zeros, NaN (what SDPA computes there), or as computed (any)."""
    if policy == "any":
        return out
    keep = rows_with_a_visible_key(arrays)[..., None]
    fill = 0.0 if policy == "zeros" else np.nan
    return np.where(keep, out, np.asarray(fill, dtype=out.dtype))


def attention_torch(arrays, scale, dtypes, device, softcap=None, sinks=None, keep=None, dropout_p=0.0):
    """SDPA on the case in compute_dtype(), its output in o's dtype's file encoding; a soft-capped
    case or one with sinks (which SDPA cannot express) as PyTorch operations in the working
    precision, the sinks as one more column of the scores whose weight is then dropped (gpt-oss's
    reference form)."""
    import torch
    import torch.nn.functional as F

    dtype = compute_dtype(dtypes, arrays)
    manual = softcap is not None or sinks is not None or keep is not None
    if manual:
        dtype = "f64" if dtype == "f64" else "f32"
    torch_dtype = {"f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]

    def tensor(array):
        # Every input's values are exact in torch_dtype (bf16 inputs are f32 holding bf16 values):
        # the conversion is exact.
        return torch.from_numpy(np.ascontiguousarray(array)).to(device=device, dtype=torch_dtype)

    q = tensor(arrays["q"])
    h_q = q.shape[1]
    k = tensor(repeat_kv(arrays["k"], h_q))
    v = tensor(repeat_kv(arrays["v"], h_q))
    mask = None if arrays["mask"] is None else torch.from_numpy(arrays["mask"]).to(device)
    if arrays["bias"] is None:
        attn_mask = mask
    else:
        attn_mask = tensor(arrays["bias"])
        if mask is not None:
            attn_mask = attn_mask.masked_fill(~mask, float("-inf"))
    with torch.no_grad():
        if not manual:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale)
        else:
            scores = q @ k.transpose(-2, -1) * scale
            if softcap is not None:
                scores = softcap * torch.tanh(scores / softcap)
            if attn_mask is not None:
                scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
            if sinks is None:
                weights = torch.softmax(scores, dim=-1)
            else:
                column = tensor(np.asarray(sinks, dtype=np.float64)).reshape(1, h_q, 1, 1).expand(*scores.shape[:3], 1)
                weights = torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]
            if keep is not None:  # dropout with this script's own keep mask, the kept weights scaled by 1 / (1 - p)
                weights = weights * torch.from_numpy(keep).to(device=device, dtype=torch_dtype) / (1.0 - dropout_p)
            out = weights @ v
    if dtype != dtypes["o"]:
        # A mixed-precision case: the f32 or f64 result rounded once to o's dtype (float64 holds
        # it exactly; encode_output rounds from there).
        return encode_output(out.double().cpu().numpy(), dtypes["o"])
    if dtype == "bf16":
        return out.float().cpu().numpy()  # f32 holding the bf16 values
    return out.cpu().numpy()


def attention_backward_torch(arrays, scale, dtypes, device, softcap=None, sinks=None, keep=None, dropout_p=0.0):
    """The forward's steps as PyTorch operations in the working precision (f64 where an input is
    f64, else f32; every input converts exactly) and autograd's gradients of sum(out * dO): out,
    LSE and the gradients as float64 arrays holding those values (encode_output rounds them once)."""
    import torch

    dtype = torch.float64 if compute_dtype(dtypes, arrays) == "f64" or dtypes["d_o"] == "f64" else torch.float32

    def tensor(array, grad=False):
        return torch.from_numpy(np.ascontiguousarray(array)).to(device=device, dtype=dtype).requires_grad_(grad)

    q, k, v = tensor(arrays["q"], True), tensor(arrays["k"], True), tensor(arrays["v"], True)
    h_q = q.shape[1]
    group = h_q // k.shape[1]
    # repeat_interleave under autograd sums a kv head's gradient over the query heads reading it.
    k_rep, v_rep = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = q @ k_rep.transpose(-2, -1) * scale
    if softcap is not None:
        scores = softcap * torch.tanh(scores / softcap)
    bias = None if arrays["bias"] is None else tensor(arrays["bias"], True)
    if bias is not None:  # broadcast over batches or heads: autograd sums its gradient over them
        scores = scores + bias
    sees = torch.ones(scores.shape[:3] + (1,), dtype=torch.bool, device=device)
    if arrays["mask"] is not None:
        mask = torch.from_numpy(np.ascontiguousarray(np.broadcast_to(arrays["mask"], scores.shape))).to(device)
        sees = mask.any(dim=-1, keepdim=True)
        # A row that sees no key is computed on its unmasked scores (a finite stand-in: softmax over
        # -inf alone is NaN, and so is its gradient) and multiplied by 0 below, so it adds nothing.
        scores = scores.masked_fill(~mask & sees, float("-inf"))
    sink = None if sinks is None else tensor(np.asarray(sinks, dtype=np.float64), True)
    if sink is not None:
        column = sink.reshape(1, h_q, 1, 1).expand(*scores.shape[:3], 1)
        scores = torch.cat([scores, column], dim=-1)
    lse = torch.logsumexp(scores, dim=-1).masked_fill(~sees[..., 0], float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if sinks is not None:
        weights = weights[..., :-1]
    weights = weights * sees
    if keep is not None:  # dropout with this script's own keep mask, the kept weights scaled by 1 / (1 - p)
        weights = weights * torch.from_numpy(keep).to(device=device, dtype=dtype) / (1.0 - dropout_p)
    out = weights @ v_rep
    (out * tensor(arrays["d_o"])).sum().backward()

    def array(t):
        return t.detach().double().cpu().numpy()

    gradients = {"dq": array(q.grad), "dk": array(k.grad), "dv": array(v.grad)}
    if sink is not None:
        gradients["d_sink"] = array(sink.grad)
    if bias is not None:
        gradients["d_bias"] = array(bias.grad)
    return array(out), array(lse), gradients


def declaration(fully_masked):
    """What this script implements, as attnbench's capabilities declaration."""
    return {
        "schema": "attnbench.capabilities",
        "version": 1,
        "summary": "examples/file_route/sdpa_roundtrip.py: torch.nn.functional.scaled_dot_product_attention (or NumPy in float64)",
        "dtypes": list(DTYPES),
        # A dtype per role (mixed precision, dtypes= in the repro string): each input in its own, the
        # output rounded once to o's (compute_dtype).
        "role_dtypes": {role: list(DTYPES) for role in INPUT_ROLES + ("o",)},
        "layouts": ["bhsd"],
        "masks": ["causal_top_left", "causal_bottom_right", "padding_per_batch", "padding_per_query", "bool_mask", "bias"],
        "gqa": True,
        "different_dk_dv": True,
        "score_modifications": ["softcap", "sink", "dropout"],
        # The backward (attnbench cases --backward): its own forward's out and lse, then dq, dk, dv,
        # and the sinks' and the bias's gradients where a case has them.
        "operations": ["forward", "backward"],
        "parameter_gradients": True,
        "fully_masked": fully_masked,
        "returns_lse": False,
    }


def choose_backend(requested):
    """The backend to run and, when auto fell back to NumPy, why. Any failure to import PyTorch
    (not installed, or installed but broken) is a reason to fall back; asked for by name, it is an error."""
    if requested == "numpy":
        return "numpy", None
    try:
        import torch  # noqa: F401
    except Exception as e:  # ImportError, or a broken install's OSError
        if requested == "torch":
            sys.exit(f"sdpa_roundtrip: --backend torch, but PyTorch cannot be imported ({type(e).__name__}: {e}); "
                     f"--backend numpy needs NumPy alone")
        return "numpy", f"{type(e).__name__}: {e}"
    return "torch", None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="?", help="cases directory (attnbench cases --out)")
    parser.add_argument("outputs", nargs="?", help="directory to write out_NNNN.npy into")
    parser.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
    parser.add_argument("--backend", choices=("auto", "torch", "numpy"), default="auto",
                        help="torch: scaled_dot_product_attention; numpy: the same in float64 (no PyTorch needed); "
                             "auto (default): torch where PyTorch imports, else numpy")
    parser.add_argument("--fully-masked", choices=("zeros", "nan"), default=None,
                        help="fully masked rows: zeros or NaN (default: as each case's manifest entry asks; zeros in a declaration)")
    parser.add_argument("--write-declaration", metavar="FILE", help="write the capabilities declaration of this script and exit")
    args = parser.parse_args()

    if args.write_declaration:
        with open(args.write_declaration, "w") as f:
            json.dump(declaration(args.fully_masked or "zeros"), f, indent=1)
            f.write("\n")
        print(f"declaration written to {args.write_declaration}")
        return
    if args.cases is None or args.outputs is None:
        parser.error("CASES and OUTPUTS are required (or --write-declaration FILE)")

    with open(os.path.join(args.cases, "manifest.json")) as f:
        manifest = json.load(f)
    if manifest.get("schema") != "attnbench.cases" or manifest.get("version") != 1:
        sys.exit(f"{args.cases}/manifest.json: not an attnbench cases manifest of version 1")
    backend, fallback_reason = choose_backend(args.backend)
    if fallback_reason is not None:
        print(f"sdpa_roundtrip: PyTorch is not available ({fallback_reason}): falling back to the NumPy backend "
              f"(float64, rounded once to each case's dtype); --backend torch makes this an error", file=sys.stderr)
    device = args.device
    if backend == "torch" and device is None:
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
    os.makedirs(args.outputs, exist_ok=True)

    for case in manifest["cases"]:
        policy = args.fully_masked or case["fully_masked_rows"]
        if policy not in ("zeros", "nan", "any"):
            sys.exit(f"case {case['index']}: fully masked row policy {policy!r} is not handled")
        arrays = load_case(args.cases, case)
        dtypes, scale, softcap, sinks = role_dtypes(case), case["scale"], case.get("softcap"), case.get("sinks")
        dropout = case.get("dropout_p")
        keep = None if dropout is None else draw_keep(arrays, dropout, case["dropout_seed"])
        p = 0.0 if dropout is None else dropout
        written = {}  # manifest key -> array, each checked against the manifest's shape and npy_dtype
        if case.get("operation", "forward") == "backward":
            backward = attention_backward_torch if backend == "torch" else attention_backward_numpy
            extra = (dtypes, device) if backend == "torch" else ()
            out, lse, gradients = backward(arrays, scale, *extra, softcap, sinks, keep, p)
            written["out"] = apply_policy(encode_output(out, dtypes["o"]), arrays, policy)
            written["lse"] = lse.astype(np.dtype(case["lse"]["npy_dtype"]))
            for role in GRADIENT_ROLES:
                written[role] = encode_output(gradients[role], dtypes[role])
            # Where the manifest names them (manifests before them do not): the sinks' in f32, the bias's in its dtype.
            if case.get("d_sink") is not None:
                written["d_sink"] = gradients["d_sink"].astype(np.float32)
            if case.get("d_bias") is not None:
                written["d_bias"] = encode_output(gradients["d_bias"], dtypes["bias"])
        elif backend == "torch":
            written["out"] = apply_policy(attention_torch(arrays, scale, dtypes, device, softcap, sinks, keep, p), arrays, policy)
        else:
            written["out"] = apply_policy(encode_output(attention_numpy(arrays, scale, softcap, sinks, keep, p), dtypes["o"]), arrays, policy)
        for key, array in written.items():
            expected = case[key]
            if list(array.shape) != expected["shape"] or array.dtype.str != expected["npy_dtype"]:
                sys.exit(f"case {case['index']} ({case['repro']}): its {key} is {list(array.shape)} {array.dtype.str}, "
                         f"the manifest asks for {expected['shape']} {expected['npy_dtype']}")
            np.save(os.path.join(args.outputs, expected["file"]), np.ascontiguousarray(array))
        if keep is not None:  # the keep mask the output was computed with, which attnbench judges it given
            np.save(os.path.join(args.outputs, case["keep"]["file"]), np.ascontiguousarray(keep))
        projected = f" (projected from {case['projected_from']})" if case.get("projected_from") else ""
        files = ", ".join(case[key]["file"] for key in written)
        print(f"case {case['index']:>4}: {case['label']} -> {files}{projected}")
    for skipped in manifest.get("skipped", []):
        print(f"case {skipped['index']:>4}: skipped by attnbench: {skipped['reason']}")
    print(f"{len(manifest['cases'])} output(s) written to {args.outputs} ({backend}{'' if device is None else ' on ' + device})")


if __name__ == "__main__":
    main()
