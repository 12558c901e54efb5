"""Calling conventions: how attnbench calls a Python attention function, and what it declares.

A convention is the Python counterpart of a plugin's capabilities: a declaration (the JSON of
``impls/capability_declaration.hpp``: dtypes, masks, GQA, head dimensions, the fully masked row
policy, whether an LSE comes back) and the translation of each case into the function's own
arguments. A case outside the declaration runs as its projection onto it (or is skipped, with
the reason), exactly as for a plugin. Everything numeric stays in the harness: a convention only
reshapes arrays and turns the harness's mask, built by its own ``Mask``, into the form the
function takes.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional

import numpy as np

from . import _arrays

ALL_DTYPES = ("f64", "f32", "f16", "bf16")
ALL_MASKS = ("causal_top_left", "causal_bottom_right", "padding_per_batch", "padding_per_query", "bool_mask", "bias", "window")


@dataclass(frozen=True)
class Convention:
    """How to call a function and what it supports.

    ``call`` is one of ``"native"``, ``"torch_sdpa"``, ``"flash_attn"``, ``"described"``.
    The declaration fields are those of a capabilities file, ``default_scale_only`` (the function
    takes no scale) and ``causal_only`` among them: a case outside them runs as its projection
    onto them (the default scale; a causal mask added). ``alibi_only`` (the only bias it takes
    is ALiBi slopes) and ``alignment`` (the one causal/window diagonal it has) refuse the cases
    they cannot express.
    ``layout`` (``"bhsd"`` or ``"bshd"``) and ``mask_form`` (``"bool"``, ``"additive"`` or None)
    describe a ``"described"`` function's arguments: ``fn(q, k, v[, scale=][, causal=][, mask=])``.
    """

    call: str = "native"
    name: str = "native"
    # What it computes (Capabilities::operations): verify(backward=...) adds "backward", the
    # gradients coming from autograd through the function or from a backward callable (invoker).
    operations: tuple = ("forward",)
    # Its backward also gives the gradients of the sinks and of the bias (d_sink [h_q], d_bias in the
    # bias's shape) on the cases that have them (Capabilities::parameter_gradients): autograd
    # (backward=True) differentiates through the ``sinks=`` tensor and the bias (the additive mask
    # of torch_sdpa and described, native's ``bias=``); a backward callable returns them too. Off
    # by default: a kernel that cannot differentiate its mask (PyTorch's CPU flash backend) says nothing.
    parameter_gradients: bool = False
    dtypes: tuple = ALL_DTYPES
    role_dtypes: dict = field(default_factory=dict)
    masks: tuple = ALL_MASKS
    gqa: bool = True
    different_dk_dv: bool = True
    head_dims: Optional[tuple] = None
    min_head_dim: Optional[int] = None
    max_head_dim: Optional[int] = None
    fully_masked: str = "zeros"
    returns_lse: bool = False
    deterministic: bool = True
    masked_nonfinite_safe: bool = False
    # Coarser arithmetic than the working precision (f32 for f16/bf16/f32 data), as unit roundoffs:
    # 2**-11 (TF32 or f16 products; an f16 accumulator) or 2**-8 (bf16); 0 for the working precision's.
    matmul_unit_roundoff: float = 0.0
    accumulation_unit_roundoff: float = 0.0
    default_scale_only: bool = False
    causal_only: bool = False
    # The score pipeline's steps beyond the scale and the masks that the function computes
    # (core/README.md, "The score pipeline"): a case using one passes its settings as keywords by
    # their names (``attnbench.score_settings()``): ("softcap",) passes ``softcap=c`` (each scaled
    # score s becomes c * tanh(s / c) before the bias); ("dropout",) passes ``dropout_p=p,
    # dropout_seed=s``, and the function reports the keep mask it drew (see ``invoker``); ("sink",)
    # passes the tensor ``sinks=`` [h_q]. None by default: such cases are skipped, named.
    score_modifications: tuple = ()
    alibi_only: bool = False
    alignment: Optional[str] = None
    layout: str = "bhsd"
    mask_form: Optional[str] = None
    summary: str = ""

    def declaration(self) -> dict:
        d = {
            "summary": self.summary or f"a Python callable ({self.name} convention)",
            "operations": list(self.operations),
            "parameter_gradients": self.parameter_gradients,
            "dtypes": list(self.dtypes),
            "layouts": ["bhsd"],  # the harness's layout: the convention transposes for the function
            "masks": list(self.masks),
            "gqa": self.gqa,
            "different_dk_dv": self.different_dk_dv,
            "fully_masked": self.fully_masked,
            "returns_lse": self.returns_lse,
            "deterministic": self.deterministic,
            "masked_nonfinite_safe": self.masked_nonfinite_safe,
            "matmul_unit_roundoff": self.matmul_unit_roundoff,
            "accumulation_unit_roundoff": self.accumulation_unit_roundoff,
            "default_scale_only": self.default_scale_only,
            "causal_only": self.causal_only,
            "score_modifications": list(self.score_modifications),
        }
        if self.role_dtypes:
            d["role_dtypes"] = {role: list(v) for role, v in self.role_dtypes.items()}
        if self.head_dims:
            d["head_dims"] = list(self.head_dims)
        if self.min_head_dim is not None:
            d["min_head_dim"] = self.min_head_dim
        if self.max_head_dim is not None:
            d["max_head_dim"] = self.max_head_dim
        return d

    def limits(self) -> dict:
        return {"alibi_only": self.alibi_only, "alignment": self.alignment}

    def with_(self, **changes) -> "Convention":
        """A copy with some fields changed: ``torch_sdpa().with_(fully_masked="nan")``."""
        return replace(self, **changes)

    def invoker(self, fn: Callable, arrays: str = "numpy", device: str = "cpu", backward=None) -> Callable:
        """The one call the native module makes per case: invoke(problem, inputs, want_lse) ->
        (o, lse or None) as host NumPy arrays, and (o, lse or None, keep) on a dropout case.

        On a dropout case (``dropout_p`` given) the function reports the keep mask it drew with
        its own random stream: it returns ``{"o": o, "lse": lse, "keep": keep}`` ("lse" only where
        the convention declares one) or the sequence ``(o, lse, keep)`` (lse None where not
        declared). ``keep`` is [b, h_q, n_q, n_k] whatever the layout, True/1 kept and False/0
        dropped (bool, an integer or a float dtype); o is sum_j P_ij Z_ij / (1 - p) v_j.

        A backward case's second call is invoke(problem, inputs, want_lse, fed) -> (dq, dk, dv,
        d_sink, d_bias), BHSD host arrays, fed = {"d_o", "o", "lse", "parameters"} (BHSD; lse None
        unless declared; parameters: which of "d_sink" and "d_bias" the harness asks for, where
        the convention declares parameter_gradients and the case has sinks or a bias; None for one
        not asked). ``backward`` says where the gradients come from: True, autograd through ``fn``
        (torch or jax arrays), recomputing its forward on q, k and v (and the sinks and the bias
        asked for); or a callable ``backward(q, k, v, out, lse, d_o, **the forward's keywords) ->
        (dq, dk, dv)`` in the function's layout, given the O and LSE fed (its own forward's, or the
        reference's when verify reruns a failure), which returns {"dq", "dk", "dv", "d_sink",
        "d_bias"} (or the five in that order) where it declares parameter_gradients."""
        if arrays not in _arrays.FRAMEWORKS:
            raise ValueError(f"arrays must be one of {_arrays.FRAMEWORKS} (got {arrays!r})")
        self._body()  # an unknown call style is refused here, not at each case
        if backward is True and arrays == "numpy":
            raise ValueError("backward=True takes the gradients from autograd, which NumPy arrays have none of: arrays='torch' or 'jax', "
                             "or backward=callable(q, k, v, out, lse, d_o, **keywords) -> (dq, dk, dv)")
        if backward not in (None, True) and not callable(backward):
            raise TypeError(f"backward must be True (autograd) or a callable (got {type(backward).__name__})")

        def invoke(problem, inputs, want_lse, fed=None):
            args = _Args(problem, inputs, arrays, device)
            if fed is not None:
                if backward is None:
                    raise ValueError("a backward case and no backward: verify(..., backward=True or a callable)")
                gradients = _autograd(self, fn, args, want_lse, fed) if backward is True else \
                    _backward_call(self, fn, backward, args, want_lse, fed)
                return tuple(_arrays.to_numpy_result(g, name) for g, name in zip(gradients, GRADIENTS))
            o, lse, keep = _forward(self, fn, args, want_lse)
            o, lse = _arrays.to_numpy_result(o, "o"), _arrays.to_numpy_result(lse, "lse") if want_lse else None
            if keep is None:
                return o, lse
            return o, lse, np.ascontiguousarray(np.asarray(_arrays.to_numpy_result(keep, "keep")), dtype=np.float32)

        return invoke

    def prepared_call(self, fn: Callable, problem, inputs, arrays: str = "numpy", device: str = "cpu") -> Callable:
        """fn with one case's arguments bound: what bench() times (the conversions happen once, here)."""
        positional, kwargs, _ = self._body()(self, _Args(problem, inputs, arrays, device), False)
        return lambda: fn(*positional, **kwargs)

    def _body(self):
        calls = {"native": _call_native, "torch_sdpa": _call_torch_sdpa, "flash_attn": _call_flash_attn, "described": _call_described}
        if self.call not in calls:
            raise ValueError(f"unknown call style {self.call!r} (one of {sorted(calls)})")
        return calls[self.call]

    def _layout(self) -> str:
        """The layout of the function's q, k, v and o: "bhsd" (the harness's) or "bshd"."""
        return self.layout if self.call == "described" else ("bshd" if self.call == "flash_attn" else "bhsd")


GRADIENTS = ("dq", "dk", "dv", "d_sink", "d_bias")


class _Args:
    """One case's inputs in the framework asked for."""

    def __init__(self, problem, inputs, framework, device):
        self.problem, self.inputs, self.framework, self.device = problem, inputs, framework, device
        # q, k, v (and "sinks", "bias") as autograd differentiates through them (leaves, or tracers),
        # in place of the inputs'.
        self.differentiated: dict = {}

    def tensor(self, role):
        if role in self.differentiated:
            return self.differentiated[role]
        return _arrays.from_native(self.inputs[role], self.problem.dtype_of(role), self.framework, self.device)

    def array(self, a, dtype=None):
        """A mask part (bool, int64 or a bias in its dtype) in the framework."""
        if a is None:
            return None
        if a is self.inputs["bias"] and "bias" in self.differentiated:
            return self.differentiated["bias"]
        return _arrays.from_native(a, dtype or "", self.framework, self.device) if dtype == "bf16" else _plain(a, self.framework, self.device)

    def dtype(self, name):
        return _framework_dtype(name, self.framework)

    def visibility(self):
        return self.inputs["visibility"]()

    def restricted(self):
        """Whether anything but the whole key range is visible somewhere (a window, padding or a mask)."""
        i = self.inputs
        return i["window"] is not None or i["valid_lens"] is not None or i["mask"] is not None


def _plain(a, framework, device):
    if framework == "numpy":
        return a
    if framework == "torch":
        import torch
        t = torch.from_numpy(np.ascontiguousarray(a))
        return t if device == "cpu" else t.to(device)
    import jax.numpy as jnp
    return jnp.asarray(a)


def _framework_dtype(name, framework):
    if framework == "numpy":
        if name == "bf16":
            import ml_dtypes
            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype({"f64": np.float64, "f32": np.float32, "f16": np.float16}[name])
    if framework == "torch":
        import torch
        return {"f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[name]
    import jax.numpy as jnp
    return {"f64": jnp.float64, "f32": jnp.float32, "f16": jnp.float16, "bf16": jnp.bfloat16}[name]


def _transpose12(x, framework):
    if framework == "torch":
        return x.transpose(1, 2).contiguous()
    if framework == "jax":
        import jax.numpy as jnp
        return jnp.transpose(x, (0, 2, 1, 3))
    return np.ascontiguousarray(np.transpose(x, (0, 2, 1, 3)))


def _to_bhsd(o, layout, framework):
    if o is None or layout == "bhsd":
        return o
    return _transpose12(o, _arrays.framework_of(o))


def _split(result, want_lse, style):
    if isinstance(result, (tuple, list)):
        if len(result) < 2:
            raise ValueError(f"the {style} callable returned a sequence of {len(result)}; expected o or (o, lse)")
        return result[0], result[1]
    if want_lse:
        raise ValueError(f"the {style} convention declares an LSE, and the callable returned o alone")
    return result, None


def _with_keep(result, want_lse, style):
    """A dropout case's result as (what finish reads: o or (o, lse)), keep."""
    expected = ("{'o': o, 'lse': lse, 'keep': keep} or (o, lse, keep)" if want_lse
                else "{'o': o, 'keep': keep} or (o, None, keep)") + ", keep [b, h_q, n_q, n_k]"
    if isinstance(result, dict):
        missing = [key for key in ("o", "keep") + (("lse",) if want_lse else ()) if result.get(key) is None]
        if missing:
            raise ValueError(f"the {style} callable returned a dict without {', '.join(missing)} on a dropout case; expected {expected}")
        return ((result["o"], result["lse"]) if want_lse else result["o"]), result["keep"]
    if isinstance(result, (tuple, list)) and len(result) == 3 and result[2] is not None:
        return ((result[0], result[1]) if want_lse else result[0]), result[2]
    raise ValueError(f"the {style} callable did not report its keep mask on a dropout case: return {expected}")


def _forward(conv, fn, args, want_lse):
    """fn called on one case: (o BHSD, lse or None, keep or None) in the function's framework."""
    positional, kwargs, finish = conv._body()(conv, args, want_lse)
    result = fn(*positional, **kwargs)
    keep = None
    if "dropout_p" in args.inputs["settings"]:
        result, keep = _with_keep(result, want_lse, conv.call)
    o, lse = finish(result)
    return _to_bhsd(o, conv._layout(), args.framework), lse, keep


def _fed(args, fed, role, layout):
    """The O or dO the harness feeds a backward, as the function's framework holds them, in its layout."""
    x = _arrays.from_native(fed[role], args.problem.dtype_of(role), args.framework, args.device)
    return _transpose12(x, args.framework) if layout == "bshd" else x


def _parameters(args, fed):
    """The sinks ([h_q] float32) and the bias (its shape and dtype) as the framework holds them, for
    each parameter gradient the harness asks for: {"sinks": ..., "bias": ...}."""
    wanted, i = fed.get("parameters") or (), args.inputs
    values = {}
    if "d_sink" in wanted:
        values["sinks"] = _plain(np.asarray(i["sinks"], np.float32), args.framework, args.device)
    if "d_bias" in wanted:
        values["bias"] = args.array(i["bias"], args.problem.dtype_of("bias"))
    return values


def _with_parameters(grads: dict):
    """(dq, dk, dv, d_sink, d_bias) from autograd's gradients by input name, None where not asked."""
    return grads["q"], grads["k"], grads["v"], grads.get("sinks"), grads.get("bias")


def _autograd(conv, fn, args, want_lse, fed):
    """dQ, dK, dV (BHSD), and dσ, dBias where asked, by autograd through fn's forward, recomputed
    on q, k, v (the sinks, the bias) here (so the O and LSE fed are not read): torch's
    autograd.grad, or jax.vjp."""
    d_o = _fed(args, fed, "d_o", "bhsd")
    parameters = _parameters(args, fed)
    names = ("q", "k", "v") + tuple(parameters)
    if args.framework == "torch":
        import torch
        leaves = {r: args.tensor(r).detach().requires_grad_(True) for r in ("q", "k", "v")}
        leaves.update({name: value.detach().requires_grad_(True) for name, value in parameters.items()})
        args.differentiated = leaves
        with torch.enable_grad():
            o = _forward(conv, fn, args, want_lse)[0]
            if not o.requires_grad:
                raise ValueError("the forward's output does not require grad: autograd cannot differentiate it (give backward=callable)")
            # dO in o's dtype, as autograd requires (d_o's own differs only in a mixed-precision case).
            grads = torch.autograd.grad(o, [leaves[r] for r in names], grad_outputs=d_o.to(o.dtype), allow_unused=True)
        # A gradient autograd leaves unused is zero: the output does not depend on that input.
        return _with_parameters({r: torch.zeros_like(leaves[r]) if g is None else g for r, g in zip(names, grads)})
    import jax

    def forward(*values):
        args.differentiated = dict(zip(names, values))
        return _forward(conv, fn, args, want_lse)[0]

    o, vjp = jax.vjp(forward, *(args.tensor(r) for r in ("q", "k", "v")), *parameters.values())
    return _with_parameters(dict(zip(names, vjp(d_o.astype(o.dtype)))))


def _backward_call(conv, fn, backward, args, want_lse, fed):
    """dQ, dK, dV (BHSD) from the user's backward, called as fn is, in its layout, with the O, LSE
    and dO fed and the forward's keywords (its masks, scale, score modifications)."""
    layout = conv._layout()
    positional, kwargs, _ = conv._body()(conv, args, want_lse)
    kwargs.pop("return_attn_probs", None)
    lse = None if fed["lse"] is None else _plain(fed["lse"], args.framework, args.device)
    result = backward(*positional, _fed(args, fed, "o", layout), lse, _fed(args, fed, "d_o", layout), **kwargs)
    wanted = fed.get("parameters") or ()
    if isinstance(result, dict):
        result = tuple(result.get(name) for name in GRADIENTS)
    elif isinstance(result, (tuple, list)) and len(result) == 3:
        result = tuple(result) + (None, None)
    if not isinstance(result, (tuple, list)) or len(result) != 5 or any(g is None for g in result[:3]):
        raise ValueError(f"the backward returned {type(result).__name__}; expected (dq, dk, dv) or {{'dq': dq, 'dk': dk, 'dv': dv}}"
                         f" (and d_sink, d_bias where the convention declares parameter_gradients)")
    for name, g in zip(GRADIENTS[3:], result[3:]):
        if name in wanted and g is None:
            raise ValueError(f"the convention declares parameter_gradients and the backward returned no {name}")
    # dσ [h_q] and dBias in the bias's shape have no layout of their own.
    return tuple(_to_bhsd(g, layout, args.framework) for g in result[:3]) + (result[3] if "d_sink" in wanted else None,
                                                                            result[4] if "d_bias" in wanted else None)


def _additive(args, vis):
    """The bias plus -inf where a key is not visible, in the bias's (else q's) dtype, as one array
    broadcastable to [b, h_q, n_q, n_k]."""
    p, i = args.problem, args.inputs
    dtype = p.dtype_of("bias") if i["bias"] is not None else p.dtype_of("q")
    if "bias" in args.differentiated:
        # The bias autograd differentiates, plus 0 or -inf where masked: the values below (adding
        # either is exact), its gradient summed by autograd over the dimensions it broadcasts over.
        bias = args.differentiated["bias"]
        if vis is None:
            return bias
        return bias + _arrays.from_native(_round(np.where(vis, 0.0, -np.inf), dtype), dtype, args.framework, args.device)
    work = np.float64
    total = np.zeros((1, 1, p.n_q, p.n_k), work)
    if i["bias"] is not None:
        bias = _arrays.from_native(i["bias"], p.dtype_of("bias"), "numpy").astype(work)
        total = total + bias
    if vis is not None:
        total = total + np.where(vis, 0.0, -np.inf)
    return _arrays.from_native(_round(total, dtype), dtype, args.framework, args.device)


def _round(a64, dtype):
    """a64 rounded once to dtype, as the harness's arrays hold it (bf16 as uint16 bits)."""
    if dtype == "bf16":
        import ml_dtypes
        return np.ascontiguousarray(a64.astype(ml_dtypes.bfloat16)).view(np.uint16)
    return np.ascontiguousarray(a64.astype({"f64": np.float64, "f32": np.float32, "f16": np.float16}[dtype]))


# ---- call styles: each returns (positional, kwargs, finish): fn(*positional, **kwargs) calls the
# function, finish(result) -> (o, lse) in its layout ----

def _pass_score_modifications(args, kwargs):
    """The settings of the score modifications the case uses, as keywords by their names
    (softcap=c; dropout_p=p and dropout_seed=s, the case's seed, the function may use a stream of
    its own), and sinks=[h_q] (float32, in the function's framework) for a case with attention
    sinks: only a convention that lists a modification is given its cases."""
    i = args.inputs
    kwargs.update(i["settings"])
    if "sinks" in args.differentiated:
        kwargs["sinks"] = args.differentiated["sinks"]
    elif i["sinks"] is not None:
        kwargs["sinks"] = _plain(np.asarray(i["sinks"], np.float32), args.framework, args.device)


def _call_native(conv, args, want_lse):
    p, i = args.problem, args.inputs
    q, k, v = args.tensor("q"), args.tensor("k"), args.tensor("v")
    kwargs = dict(scale=i["scale"], window=i["window"], valid_lens=args.array(i["valid_lens"]), mask=args.array(i["mask"]),
                  bias=args.array(i["bias"], p.dtype_of("bias")) if i["bias"] is not None else None, o_dtype=args.dtype(p.dtype_of("o")))
    _pass_score_modifications(args, kwargs)
    return (q, k, v), kwargs, (lambda result: _split(result, want_lse, "native"))


def _call_torch_sdpa(conv, args, want_lse):
    p, i = args.problem, args.inputs
    kwargs: dict[str, Any] = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": i["scale"],
                              "enable_gqa": p.h_q != p.h_kv}
    only_top_left_causal = p.causal == "top_left" and i["valid_lens"] is None and i["mask"] is None and i["bias"] is None
    if only_top_left_causal:
        kwargs["is_causal"] = True
    elif i["bias"] is not None:
        kwargs["attn_mask"] = _additive(args, args.visibility() if args.restricted() else None)
    elif args.restricted():
        kwargs["attn_mask"] = _plain(args.visibility().astype(bool), args.framework, args.device)
    _pass_score_modifications(args, kwargs)
    q, k, v = args.tensor("q"), args.tensor("k"), args.tensor("v")
    return (q, k, v), kwargs, (lambda result: _split(result, want_lse, "torch_sdpa"))


def _call_flash_attn(conv, args, want_lse):
    p, i = args.problem, args.inputs
    fw = args.framework
    q, k, v = (_transpose12(args.tensor(r), fw) for r in ("q", "k", "v"))
    causal, window = False, (-1, -1)
    if i["window"] is not None:
        left, right, _ = i["window"]
        if left is None and right == 0:
            causal = True
        else:
            window = (-1 if left is None else left, -1 if right is None else right)
    kwargs: dict[str, Any] = {"dropout_p": 0.0, "softmax_scale": i["scale"], "causal": causal, "window_size": window}
    if i["alibi_slopes"] is not None:
        kwargs["alibi_slopes"] = _plain(np.asarray(i["alibi_slopes"], np.float32), fw, args.device)
    if want_lse:
        kwargs["return_attn_probs"] = True
    _pass_score_modifications(args, kwargs)  # flash_attn_func's softcap (FlashAttention >= 2.6)
    def finish(result):
        if want_lse:
            return _split(result, True, "flash_attn")
        return (result[0] if isinstance(result, (tuple, list)) else result), None

    return (q, k, v), kwargs, finish


def _call_described(conv, args, want_lse):
    p, i = args.problem, args.inputs
    fw = args.framework
    q, k, v = (args.tensor(r) for r in ("q", "k", "v"))
    if conv.layout == "bshd":
        q, k, v = (_transpose12(x, fw) for x in (q, k, v))
    kwargs: dict[str, Any] = {}
    if not conv.default_scale_only:
        kwargs["scale"] = i["scale"] if i["scale"] is not None else p.effective_scale
    causal_declared = any(m.startswith("causal_") for m in conv.masks)
    window = i["window"]
    is_causal = window is not None and window[0] is None and window[1] == 0
    if causal_declared and not conv.causal_only:
        kwargs["causal"] = is_causal
    if conv.mask_form is not None:
        # Everything but the causal part (passed as causal=) goes into the mask.
        needs = i["valid_lens"] is not None or i["mask"] is not None or (window is not None and not (is_causal and causal_declared))
        if conv.mask_form == "additive":
            kwargs["mask"] = _additive(args, args.visibility() if needs or (is_causal and not causal_declared) else None) \
                if (needs or i["bias"] is not None) else None
        else:
            kwargs["mask"] = _plain(args.visibility().astype(bool), fw, args.device) if needs else None
    _pass_score_modifications(args, kwargs)
    return (q, k, v), kwargs, (lambda result: _split(result, want_lse, "described"))


# ---- the built-in conventions ----

def native(**declaration) -> Convention:
    """attnbench's own: ``fn(q, k, v, *, scale, window, valid_lens, mask, bias, o_dtype) -> o or (o, lse)``.

    BHSD arrays; ``scale`` None means 1/sqrt(d_k); ``window`` None or ``(left, right, align)``
    (None: unbounded; causal is ``(None, 0, align)``); ``valid_lens`` [b] or [b, n_q]; ``mask``
    boolean [1|b, 1|h_q, n_q, n_k] (True: visible); ``bias`` additive, same shape; ``o_dtype`` the
    output's dtype. Declares everything unless told otherwise (``native(dtypes=("f32",))``).
    """
    return Convention(call="native", name="native", **declaration)


def torch_sdpa(**declaration) -> Convention:
    """``torch.nn.functional.scaled_dot_product_attention``'s signature:
    ``fn(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False)``.

    BHSD; top-left causal through ``is_causal``; every other mask (bottom-right causal, windows,
    padding, a boolean mask) as a boolean ``attn_mask`` [1|b, 1|h_q, n_q, n_k], and with a bias
    as an additive one (-inf where masked). ``scale`` is None for the default. Declares every
    dtype and mask, GQA, and fully masked rows as zeros (what PyTorch 2.15's CPU backends write);
    a function that writes NaN there says ``torch_sdpa(fully_masked="nan")``.
    """
    defaults = dict(call="torch_sdpa", name="torch_sdpa", summary="torch.nn.functional.scaled_dot_product_attention's signature")
    defaults.update(declaration)
    return Convention(**defaults)


def flash_attn(**declaration) -> Convention:
    """``flash_attn_func``'s signature: ``fn(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
    window_size=(-1, -1), alibi_slopes=None, return_attn_probs=False)``.

    BSHD; causal and windows aligned bottom-right; ALiBi as per-head slopes (FlashAttention's
    ``-slope |i + n_k - n_q - j|``); no padding, boolean mask or other bias. f16 and bf16, head
    dimensions up to 256, fully masked rows zeros. With ``returns_lse=True`` it asks for
    ``return_attn_probs`` and reads the LSE from the second element.
    """
    defaults = dict(call="flash_attn", name="flash_attn", dtypes=("f16", "bf16"), masks=("causal_bottom_right", "window", "bias"),
                    alibi_only=True, alignment="bottom_right", max_head_dim=256, summary="flash_attn_func's signature")
    defaults.update(declaration)
    return Convention(**defaults)


def described(*, layout="bhsd", causal=None, mask=None, padding=False, bias=False, window=False, dtypes=ALL_DTYPES,
              fully_masked="zeros", fixed_scale=False, causal_only=False, returns_lse=False, gqa=True, **declaration) -> Convention:
    """A convention for any other function: ``fn(q, k, v[, scale=][, causal=][, mask=]) -> o or (o, lse)``.

    ``layout`` "bhsd" or "bshd" (q, k, v and o); ``causal`` the alignment of its ``causal=`` flag
    ("top_left" or "bottom_right"; None: it has none); ``mask`` "bool" or "additive" for a
    ``mask=`` argument [1|b, 1|h_q, n_q, n_k] carrying every other mask declared (``padding``,
    ``window``, a boolean mask; with "additive" also ``bias``); ``fixed_scale``: it takes no scale
    (1/sqrt(d_k) only); ``causal_only``: it computes causal attention only (no ``causal=``).
    """
    masks = []
    if causal:
        masks.append(f"causal_{causal}")
    if mask is not None:
        masks += ["bool_mask"]
        if padding:
            masks += ["padding_per_batch", "padding_per_query"]
        if window:
            masks.append("window")
        if bias and mask == "additive":
            masks.append("bias")
    return Convention(call="described", name="described", layout=layout, mask_form=mask, masks=tuple(masks), dtypes=tuple(dtypes),
                      fully_masked=fully_masked, default_scale_only=fixed_scale, causal_only=causal_only, returns_lse=returns_lse,
                      gqa=gqa, alignment=causal, **declaration)


BUILT_IN = {"native": native, "torch_sdpa": torch_sdpa, "flash_attn": flash_attn}


def convention_of(convention) -> Convention:
    """A Convention from a name, a Convention, or a dict of described()'s keywords."""
    if isinstance(convention, Convention):
        return convention
    if isinstance(convention, str):
        if convention not in BUILT_IN:
            raise ValueError(f"unknown convention {convention!r}: one of {sorted(BUILT_IN)}, a Convention, or a dict for described()")
        return BUILT_IN[convention]()
    if isinstance(convention, dict):
        return described(**convention)
    raise TypeError(f"convention must be a name, a Convention or a dict (got {type(convention).__name__})")


def declaration_json(convention: Convention) -> str:
    return json.dumps(convention.declaration())
