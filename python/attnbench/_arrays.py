"""Arrays in and out of the native module, for numpy, torch and jax.

The native module reads any CPU array through DLPack where it lies (dense, aligned) and hands
out NumPy arrays that own their elements. bf16 crosses as DLPack's bfloat code (torch) or, for
NumPy, as uint16 bits viewed as ``ml_dtypes.bfloat16``.
"""
from __future__ import annotations

import numpy as np

FRAMEWORKS = ("numpy", "torch", "jax")
DTYPES = ("f64", "f32", "f16", "bf16")


def _ml_bfloat16():
    try:
        import ml_dtypes
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("bf16 arrays in NumPy need ml_dtypes (pip install ml_dtypes)") from e
    return ml_dtypes.bfloat16


def framework_of(x) -> str:
    module = type(x).__module__
    if module.startswith("torch"):
        return "torch"
    if module.startswith("jax") or module.startswith("jaxlib"):
        return "jax"
    return "numpy"


def dtype_name(x) -> str:
    """'f64', 'f32', 'f16' or 'bf16' for an array of any framework; ValueError otherwise."""
    text = str(getattr(x, "dtype", "?")).replace("torch.", "")
    names = {"float64": "f64", "float32": "f32", "float16": "f16", "bfloat16": "bf16"}
    if text not in names:
        raise ValueError(f"dtype {text} is not a tensor dtype (float64, float32, float16, bfloat16)")
    return names[text]


def to_host(x, name: str):
    """(array the native module reads, bf16_bits): a CPU, C-contiguous view of x, copied only where
    it is not already one (a CUDA tensor comes to the host; a strided view is made dense)."""
    if x is None:
        return None, False
    fw = framework_of(x)
    if fw == "torch":
        t = x.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        return t.contiguous(), False
    if fw == "jax":
        x = np.asarray(x)
    a = np.asarray(x)
    if _is_bf16(a):
        return np.ascontiguousarray(a).view(np.uint16), True
    if a.dtype.kind not in "fbiu":
        raise ValueError(f"{name}: dtype {a.dtype} is not a tensor dtype")
    return np.ascontiguousarray(a), False


def _is_bf16(a) -> bool:
    try:
        import ml_dtypes
    except ImportError:  # pragma: no cover - without ml_dtypes NumPy holds no bf16 array
        return False
    return a.dtype == np.dtype(ml_dtypes.bfloat16)


def from_native(a: np.ndarray, dtype: str, framework: str, device: str = "cpu"):
    """A harness array (bf16 as uint16 bits) in the framework asked for: zero-copy for numpy and
    torch on the CPU; jax takes a copy where its alignment rules require one."""
    if framework == "numpy":
        return a.view(_ml_bfloat16()) if dtype == "bf16" else a
    if framework == "torch":
        import torch
        t = torch.from_numpy(a)
        if dtype == "bf16":
            t = t.view(torch.bfloat16)
        return t if device == "cpu" else t.to(device)
    if framework == "jax":
        import jax.numpy as jnp
        return jnp.asarray(a.view(_ml_bfloat16()) if dtype == "bf16" else a)
    raise ValueError(f"arrays must be one of {FRAMEWORKS} (got {framework!r})")


def to_numpy_result(x, name: str):
    """What a callable returned, as a host NumPy array (bf16 as uint16 bits) for the native module."""
    if x is None:
        return None
    fw = framework_of(x)
    if fw == "torch":
        import torch
        t = x.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(np.uint16)
        return t.numpy()
    a = np.asarray(x)
    if _is_bf16(a):
        return np.ascontiguousarray(a).view(np.uint16)
    return np.ascontiguousarray(a)
