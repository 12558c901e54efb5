#!/usr/bin/env python3
"""Times the CPU attention of the peers a user would pick instead of attnbench's kernels.

Peers: ONNX Runtime's com.microsoft MultiHeadAttention contrib operator (a one-node model
built with onnx.helper), JAX's jax.nn.dot_product_attention (implementation='xla') and PyTorch's
torch.nn.functional.scaled_dot_product_attention on the CPU, once per CPU backend
(torch.nn.attention.sdpa_kernel: SDPBackend.MATH as torch_sdpa_math, FLASH_ATTENTION as
torch_sdpa_flash), on the problems and inputs `attnbench bench --peers` writes into a folder and
passes as --cases DIR (benchmarks/peers/README.md): the problem list our families run, each with
the FLOPs and bytes the harness computed, and its q, k, v as .npy files (f32 only here).

Before timing, each peer is checked on the folder's check cases: by the attnbench package
(python/: attnbench.judge, the harness's 113-bit reference, pass rule and diagnosis, on the same
input bits) where this Python has it (ci/install-peers.sh installs it), else against a float64
oracle under the same rule; a peer that fails is recorded as not a valid target.

Run from the repository root after `bash ci/install-peers.sh`, through the harness:

    build/release/cli/attnbench bench --peers '.venv/bin/python benchmarks/peers/cpu_peers.py'

which appends --cases DIR --threads N [--l2 MODE] --out PATH.

Exit codes: 0 every peer that ran passed its checks, 1 a peer failed its checks,
2 bad usage (e.g. a case in a dtype other than f32, or no --cases folder) or no peer could run.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from peer_problem import Case, CasesError, git_revision, load_cases


# --------------------------------------------------------------------------------------
# Inputs: the harness's files (peer_problem.py), in the peers' layout
# --------------------------------------------------------------------------------------

def bsh_inputs(p: Case):
    """The case's Q, K, V ([b, h, n, d] in the files) in BSH layout ([b, n, h*d]), float32."""
    import numpy as np
    return tuple(np.ascontiguousarray(x.transpose(0, 2, 1, 3).reshape(x.shape[0], x.shape[2], -1), dtype=np.float32)
                 for x in p.inputs())


def bsh_d_o(p: Case):
    """A backward case's dO ([b, h, n_q, d_v] in its file) in BSH layout, float32."""
    import numpy as np
    x = p.d_o()
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3).reshape(x.shape[0], x.shape[2], -1), dtype=np.float32)


def textbook_gradients(p: Case, q, k, v, d_o, dtype):
    """dQ, dK, dV of softmax(Q Kᵀ · scale, masked by exclusion) V given dO, in `dtype` (numpy, no
    framework): P, dV = Pᵀ dO, dP = dO Vᵀ, dS = P (dP - rowsum(dP P)), dQ = dS K scale,
    dK = dSᵀ Q scale; BSH in, BSH out."""
    import numpy as np
    def heads(x, n, d):
        return x.reshape(p.b, n, p.h, d).transpose(0, 2, 1, 3).astype(dtype)
    Q, K, V, G = heads(q, p.n_q, p.d_k), heads(k, p.n_k, p.d_k), heads(v, p.n_k, p.d_v), heads(d_o, p.n_q, p.d_v)
    s = (Q @ K.transpose(0, 1, 3, 2)) * dtype(p.scale)
    if p.causal == "top_left":
        s = np.where(np.arange(p.n_k)[None, :] <= np.arange(p.n_q)[:, None], s, dtype(-np.inf))
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    w = w / w.sum(axis=-1, keepdims=True)
    dv = w.transpose(0, 1, 3, 2) @ G
    dp = G @ V.transpose(0, 1, 3, 2)
    ds = w * (dp - (dp * w).sum(axis=-1, keepdims=True))
    dq = (ds @ K) * dtype(p.scale)
    dk = (ds.transpose(0, 1, 3, 2) @ Q) * dtype(p.scale)
    def back(x):
        return x.transpose(0, 2, 1, 3).reshape(p.b, x.shape[2], -1)
    return back(dq), back(dk), back(dv)


def gradient_term_rounding(p: Case, q, k, v, d_o) -> tuple:
    """The pass rule's floor on each gradient's yardstick, as the harness's judge computes it
    (verification/README.md, "The backward pass"): (u_f32 + u_f32 · max|LSE|) times the largest
    sum of the gradient's terms' magnitudes. A gradient can be far smaller than its terms (dQ sums
    rows of dS that sum to zero; exactly 0 where one key dominates), and a kernel that recomputes P
    from its f32 LSE carries that LSE's rounding into every weight."""
    import numpy as np
    def heads(x, n, d):
        return x.reshape(p.b, n, p.h, d).transpose(0, 2, 1, 3).astype(np.float64)
    Q, K, V, G = heads(q, p.n_q, p.d_k), heads(k, p.n_k, p.d_k), heads(v, p.n_k, p.d_v), heads(d_o, p.n_q, p.d_v)
    s = (Q @ K.transpose(0, 1, 3, 2)) * p.scale
    if p.causal == "top_left":
        s = np.where(np.arange(p.n_k)[None, :] <= np.arange(p.n_q)[:, None], s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    lse = m + np.log(np.exp(s - m).sum(axis=-1, keepdims=True))
    w = np.exp(s - lse)
    dp_terms = np.abs(G) @ np.abs(V).transpose(0, 1, 3, 2)
    d_terms = (w * dp_terms).sum(axis=-1, keepdims=True)
    dx_terms = w * (dp_terms + d_terms) * p.scale
    u = 2.0 ** -24
    relative = u + u * float(np.max(np.abs(lse)))
    return (relative * float(np.max(dx_terms @ np.abs(K))), relative * float(np.max(dx_terms.transpose(0, 1, 3, 2) @ np.abs(Q))),
            relative * float(np.max(w.transpose(0, 1, 3, 2) @ np.abs(G))))


# --------------------------------------------------------------------------------------
# Oracle, naive baseline and the pass rule
# --------------------------------------------------------------------------------------

def textbook_attention(p: Case, q, k, v, dtype):
    """softmax(Q Kᵀ · scale, masked by exclusion) V in `dtype`; BSH in, BSH out."""
    import numpy as np
    Q = q.reshape(p.b, p.n_q, p.h, p.d_k).transpose(0, 2, 1, 3).astype(dtype)
    K = k.reshape(p.b, p.n_k, p.h, p.d_k).transpose(0, 2, 1, 3).astype(dtype)
    V = v.reshape(p.b, p.n_k, p.h, p.d_v).transpose(0, 2, 1, 3).astype(dtype)
    s = (Q @ K.transpose(0, 1, 3, 2)) * dtype(p.scale)
    if p.causal == "top_left":
        visible = np.arange(p.n_k)[None, :] <= np.arange(p.n_q)[:, None]
        s = np.where(visible, s, dtype(-np.inf))  # exp(-inf - m) == 0: excluded exactly
    s = s - s.max(axis=-1, keepdims=True)
    w = np.exp(s)
    w = w / w.sum(axis=-1, keepdims=True)
    o = w @ V
    return o.transpose(0, 2, 1, 3).reshape(p.b, p.n_q, p.h * p.d_v)


def f32_quantum(x: float) -> float:
    """Spacing of float32 numbers at magnitude x (core/dtype.cpp's ulp_at for f32)."""
    a = abs(x)
    if a < 2.0 ** -126:
        return 2.0 ** -149
    return 2.0 ** (math.floor(math.log2(a)) - 23)


def judge(peer_out, ref64, naive32, k: float = 2.0, floor_ulps: float = 2.0, term_rounding: float = 0.0) -> dict:
    import numpy as np
    out = np.asarray(peer_out, dtype=np.float64)
    nonfinite = int(np.count_nonzero(~np.isfinite(out)))
    err = float(np.max(np.abs(out - ref64))) if nonfinite == 0 else float("inf")
    naive_err = float(np.max(np.abs(naive32.astype(np.float64) - ref64)))
    ref_max = float(np.max(np.abs(ref64)))
    tolerance = k * max(naive_err, term_rounding) + floor_ulps * f32_quantum(ref_max)
    verdict = {"max_abs_error": err, "naive_f32_max_abs_error": naive_err, "reference_max_abs": ref_max,
               "tolerance": tolerance, "ratio_to_naive": (err / naive_err) if naive_err > 0 else None,
               "nonfinite": nonfinite, "pass": nonfinite == 0 and err <= tolerance}
    return verdict


# --------------------------------------------------------------------------------------
# Peers
# --------------------------------------------------------------------------------------

class OnnxRuntimePeer:
    name = "onnxruntime"

    def __init__(self, threads: int, causal_method: str):
        import numpy as np
        import onnxruntime as ort
        self.np, self.ort = np, ort
        self.version = ort.__version__
        self.threads = threads
        self.causal_method = causal_method
        self.sessions = {}

    def mask_method(self, causal: str) -> str:
        if causal == "none":
            return "none (no mask input; ORT runs its MLAS flash-attention kernel)"
        if self.causal_method == "unidirectional":
            return ("MultiHeadAttention attribute unidirectional=1 (top-left causal; masked keys excluded "
                    "exactly, independent of mask_filter_value; the large-regime checks would catch a finite offset; "
                    "ORT runs its unfused kernel "
                    "that materialises the n_q x n_k scores)")
        return ("additive attention_bias input [1,1,n_q,n_k], -inf above the diagonal "
                "(unidirectional left 0; ORT runs its unfused kernel)")

    def _session(self, h: int, causal: str):
        key = (h, causal)
        if key in self.sessions:
            return self.sessions[key]
        import onnx
        from onnx import TensorProto, helper
        use_bias = causal != "none" and self.causal_method == "bias"
        attrs = {"num_heads": h}
        if causal != "none" and self.causal_method == "unidirectional":
            attrs["unidirectional"] = 1
        # Inputs in order: query, key, value, bias, key_padding_mask, attention_bias; "" skips one.
        inputs = ["query", "key", "value"] + (["", "", "attention_bias"] if use_bias else [])
        node = helper.make_node("MultiHeadAttention", inputs, ["output"], domain="com.microsoft", **attrs)
        dims = {"query": ["b", "n_q", "hd_k"], "key": ["b", "n_k", "hd_k"], "value": ["b", "n_k", "hd_v"]}
        graph_inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, d) for n, d in dims.items()]
        if use_bias:
            graph_inputs.append(helper.make_tensor_value_info("attention_bias", TensorProto.FLOAT,
                                                              [1, 1, "n_q", "n_k"]))
        graph = helper.make_graph([node], "mha", graph_inputs,
                                  [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["b", "n_q", "hd_v"])])
        # IR version 10: the onnx package writes a newer default than this ORT may read.
        model = helper.make_model(graph, ir_version=10,
                                  opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
        onnx.checker.check_model(model)
        so = self.ort.SessionOptions()
        so.intra_op_num_threads = self.threads
        so.inter_op_num_threads = 1
        so.execution_mode = self.ort.ExecutionMode.ORT_SEQUENTIAL
        so.log_severity_level = 3
        sess = self.ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        self.sessions[key] = sess
        return sess

    def prepare(self, p: Case, q, k, v):
        """Returns a zero-argument callable that runs the peer once and returns the output."""
        np = self.np
        sess = self._session(p.h, p.causal)
        binding = sess.io_binding()
        binding.bind_cpu_input("query", q)
        binding.bind_cpu_input("key", k)
        binding.bind_cpu_input("value", v)
        keep = [q, k, v]
        if p.causal != "none" and self.causal_method == "bias":
            bias = np.zeros((1, 1, p.n_q, p.n_k), np.float32)
            bias[0, 0][np.arange(p.n_k)[None, :] > np.arange(p.n_q)[:, None]] = -np.inf
            binding.bind_cpu_input("attention_bias", bias)
            keep.append(bias)
        out = np.empty((p.b, p.n_q, p.h * p.d_v), np.float32)
        binding.bind_output("output", "cpu", 0, np.float32, list(out.shape), out.ctypes.data)
        keep.append(out)

        def run():
            _ = keep  # inputs and output must outlive the binding
            sess.run_with_iobinding(binding)
            return out
        return run

    def close(self):
        self.sessions.clear()


class JaxPeer:
    name = "jax"

    def __init__(self, threads: int):
        import jax
        import jax.numpy as jnp
        self.jax, self.jnp = jax, jnp
        self.version = jax.__version__
        self.threads = threads
        self.fns = {}

    def mask_method(self, causal: str) -> str:
        if causal == "none":
            return "none"
        return ("jax.nn.dot_product_attention(is_causal=True, implementation='xla'): top-left causal; the "
                "XLA path replaces masked logits by a finite -0.7*FLT_MAX before softmax (exact exclusion "
                "in practice while a visible logit exists) and materialises the n_q x n_k scores")

    def prepare(self, p: Case, q, k, v):
        jax = self.jax
        causal = p.causal != "none"
        if causal not in self.fns:
            self.fns[causal] = jax.jit(lambda a, b, c, _c=causal: jax.nn.dot_product_attention(
                a, b, c, is_causal=_c, implementation="xla"))
        fn = self.fns[causal]
        # BSH -> BTNH ([batch, seq, heads, head_dim]) is a free reshape.
        qd = jax.device_put(q.reshape(p.b, p.n_q, p.h, p.d_k))
        kd = jax.device_put(k.reshape(p.b, p.n_k, p.h, p.d_k))
        vd = jax.device_put(v.reshape(p.b, p.n_k, p.h, p.d_v))
        fn.lower(qd, kd, vd).compile()  # compile outside the timed loop (also cached by jit)

        def run():
            return fn(qd, kd, vd).block_until_ready()

        def fetch(o):
            import numpy as np
            return np.asarray(o).reshape(p.b, p.n_q, p.h * p.d_v)
        run.fetch = fetch
        return run

    def close(self):
        self.fns.clear()


class TorchSdpaPeer:
    """torch.nn.functional.scaled_dot_product_attention on the CPU with one backend forced through
    torch.nn.attention.sdpa_kernel (PyTorch 2.3 or later). PyTorch 2.15's CPU backends: MATH (the
    composite: scores, softmax, @V as separate ops) and FLASH_ATTENTION (its fused CPU kernel,
    blocked with an online softmax); EFFICIENT_ATTENTION and CUDNN_ATTENTION are CUDA only."""

    BACKENDS = {"torch_sdpa_math": "MATH", "torch_sdpa_flash": "FLASH_ATTENTION"}

    def __init__(self, name: str, threads: int):
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        self.torch, self.sdpa_kernel = torch, sdpa_kernel
        self.name = name
        self.backend = getattr(SDPBackend, self.BACKENDS[name])
        self.version = torch.__version__
        self.threads = threads
        torch.set_num_threads(threads)
        # A backend without a CPU kernel in this build is refused here, not at every problem.
        q = torch.zeros(1, 1, 2, 8)
        with torch.inference_mode(), sdpa_kernel(self.backend):
            torch.nn.functional.scaled_dot_product_attention(q, q, q)

    def mask_method(self, causal: str) -> str:
        if causal == "none":
            return f"none (sdpa_kernel(SDPBackend.{self.BACKENDS[self.name]}))"
        return (f"is_causal=True (top-left; masked scores -inf, excluded exactly), "
                f"sdpa_kernel(SDPBackend.{self.BACKENDS[self.name]})")

    def prepare(self, p: Case, q, k, v):
        torch = self.torch
        # BSH -> BHSD ([b, h, n, d], SDPA's layout), contiguous, once, outside the timed calls.
        def bhsd(x, n, d):
            return torch.from_numpy(x).view(p.b, n, p.h, d).transpose(1, 2).contiguous()
        qt, kt, vt = bhsd(q, p.n_q, p.d_k), bhsd(k, p.n_k, p.d_k), bhsd(v, p.n_k, p.d_v)
        causal = p.causal != "none"
        sdpa, backend, sdpa_kernel = torch.nn.functional.scaled_dot_product_attention, self.backend, self.sdpa_kernel

        def run():
            with torch.inference_mode(), sdpa_kernel(backend):
                return sdpa(qt, kt, vt, is_causal=causal)

        def fetch(o):
            return o.transpose(1, 2).reshape(p.b, p.n_q, p.h * p.d_v).numpy()
        run.fetch = fetch
        return run

    backward = True  # times the backward pass alone: autograd of SDPA with the graph kept

    def prepare_backward(self, p: Case, q, k, v, d_o):
        """A zero-argument callable computing dQ, dK, dV of one forward's graph (retain_graph: the
        forward runs once, outside the timing, as a training step's backward follows its forward)."""
        torch = self.torch
        def bhsd(x, n, d):
            return torch.from_numpy(x).view(p.b, n, p.h, d).transpose(1, 2).contiguous().requires_grad_(True)
        qt, kt, vt = bhsd(q, p.n_q, p.d_k), bhsd(k, p.n_k, p.d_k), bhsd(v, p.n_k, p.d_v)
        gt = torch.from_numpy(d_o).view(p.b, p.n_q, p.h, p.d_v).transpose(1, 2).contiguous()
        causal = p.causal != "none"
        with self.sdpa_kernel(self.backend):
            out = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)

        def run():
            with self.sdpa_kernel(self.backend):
                return torch.autograd.grad(out, (qt, kt, vt), gt, retain_graph=True)

        def fetch(grads):
            return tuple(g.transpose(1, 2).reshape(p.b, g.shape[2], p.h * g.shape[3]).numpy() for g in grads)
        run.fetch = fetch
        return run

    def close(self):
        pass


PEERS = ("onnxruntime", "jax") + tuple(TorchSdpaPeer.BACKENDS)


def output_of(run):
    out = run()
    fetch = getattr(run, "fetch", None)
    return fetch(out) if fetch else out.copy()


# --------------------------------------------------------------------------------------
# Checks and timing
# --------------------------------------------------------------------------------------

def attnbench_package():
    """The attnbench package (python/) where this Python has it: then the peers are judged by the
    harness's own reference and pass rule, on the same bits, exactly as verify judges ours."""
    try:
        import attnbench
        return attnbench
    except ImportError:
        return None


def judge_with_package(attnbench, p: Case, got_bsh) -> dict:
    """The peer's output judged by attnbench.judge (the 113-bit reference, the pass rule, the
    diagnosis) on the case's own inputs."""
    import numpy as np
    q, k, v = (np.ascontiguousarray(x, dtype=np.float32) for x in p.inputs())
    out = np.ascontiguousarray(np.asarray(got_bsh, dtype=np.float32).reshape(p.b, p.n_q, p.h, p.d_v).transpose(0, 2, 1, 3))
    verdict = attnbench.judge(q, k, v, out, scale=p.scale, causal=None if p.causal == "none" else p.causal)
    o = verdict.roles.get("o")
    record = verdict.record
    naive = float(record.get("baseline", {}).get("metrics", {}).get("max_abs", "nan"))
    metrics = verdict.metrics
    err = o.max_abs if o else float("inf")
    return {"max_abs_error": err, "naive_f32_max_abs_error": naive, "reference_max_abs": float(metrics.get("reference_max_abs", "nan")),
            "tolerance": o.tolerance if o else 0.0, "ratio_to_naive": err / naive if naive > 0 else None,
            "nonfinite": int(metrics.get("nan", 0)) + int(metrics.get("pos_inf", 0)) + int(metrics.get("neg_inf", 0)),
            "budget_used": verdict.budget_used, "pass": verdict.passed, "diagnosis": verdict.diagnosis, "reasons": verdict.reasons,
            "oracle": "attnbench.judge: the 113-bit reference and the pass rule"}


def check_peer(peer, cases: list[Case]) -> list[dict]:
    import numpy as np
    package = attnbench_package()
    results = []
    for p in cases:
        q, k, v = bsh_inputs(p)
        if p.backward:
            if getattr(peer, "backward", False):
                results.append(check_peer_backward(peer, p, q, k, v))
            continue
        try:
            got = output_of(peer.prepare(p, q, k, v))
            if package is not None:
                verdict = judge_with_package(package, p, got)
            else:
                ref64 = textbook_attention(p, q, k, v, np.float64)
                naive32 = textbook_attention(p, q, k, v, np.float32)
                verdict = {**judge(got, ref64, naive32), "oracle": "float64 textbook (the attnbench package is not importable here)"}
        except Exception as e:  # a peer that cannot run a case fails it
            verdict = {"pass": False, "error": f"{type(e).__name__}: {e}"}
        results.append({"problem": p.repro, "mask_method": peer.mask_method(p.causal), **verdict})
    return results


def check_peer_backward(peer, p: Case, q, k, v) -> dict:
    """The peer's dQ, dK, dV on a backward check case against float64 textbook gradients, each
    under the pass rule: the float32 textbook's error as its yardstick, floored at the gradient's
    term rounding (gradient_term_rounding), as the harness judges gradients."""
    import numpy as np
    d_o = bsh_d_o(p)
    try:
        got = output_of(peer.prepare_backward(p, q, k, v, d_o))
        ref64 = textbook_gradients(p, q, k, v, d_o, np.float64)
        naive32 = textbook_gradients(p, q, k, v, d_o, np.float32)
        floors = gradient_term_rounding(p, q, k, v, d_o)
        per = {name: judge(g, r, n, term_rounding=t) for name, g, r, n, t in zip(("dq", "dk", "dv"), got, ref64, naive32, floors)}
        verdict = {"pass": all(v["pass"] for v in per.values()), "gradients": per,
                   "max_abs_error": max(v["max_abs_error"] for v in per.values()),
                   "naive_f32_max_abs_error": max(v["naive_f32_max_abs_error"] for v in per.values()),
                   "tolerance": min(v["tolerance"] for v in per.values()),
                   "ratio_to_naive": max((v["ratio_to_naive"] or 0.0) for v in per.values()),
                   "oracle": "float64 textbook gradients (numpy), each gradient under the pass rule"}
    except Exception as e:  # a peer that cannot run a case fails it
        verdict = {"pass": False, "error": f"{type(e).__name__}: {e}"}
    return {"problem": p.repro, "mask_method": peer.mask_method(p.causal) + " (backward: autograd with the forward's graph kept)", **verdict}


def time_peer(run, repetitions: int, min_repetition_seconds: float) -> dict:
    # Warm-up outside the timed loop; also calibrates how many calls make one repetition.
    t0 = time.perf_counter()
    run()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    run()
    second = time.perf_counter() - t0
    calls = max(1, math.ceil(min_repetition_seconds / max(second, 1e-9))) if second < min_repetition_seconds else 1
    times = []
    for _ in range(repetitions):
        t0 = time.perf_counter()
        for _ in range(calls):
            run()
        times.append((time.perf_counter() - t0) / calls)
    return {"times": times, "median_seconds": statistics.median(times), "min_seconds": min(times),
            "calls_per_repetition": calls, "warmup_seconds": [first, second]}


# --------------------------------------------------------------------------------------
# Context and output
# --------------------------------------------------------------------------------------

def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def context(args, cases: list[Case], threads: int, xla_flags: str) -> dict:
    timed = [c for c in cases if c.role == "timed"]
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu_model": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "threads": threads,
        "load_average_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "packages": {n: package_version(n) for n in ("numpy", "onnxruntime", "onnx", "jax", "jaxlib", "torch")},
        "xla_flags": xla_flags,
        "problem_list": {"cases": args.cases, "timed": len(timed), "checks": len(cases) - len(timed),
                         "dtypes": sorted({c.dtype for c in timed}), "head_dims": sorted({c.d_k for c in timed})},
        "l2": (f"--l2 {args.l2} given: not applicable (CPU timing flushes no cache)" if args.l2 else None),
        "git_revision": git_revision(),
        "repetitions": args.repetitions,
        "min_repetition_seconds": args.min_repetition_seconds,
        "timing": "warm-up (2 calls) outside the timed loop; each repetition times `calls_per_repetition` "
                  "back-to-back calls and records their mean; median and min over repetitions",
        "flops_exact": "the harness's Problem::flops (peer_cases.json): 2*b*h*P*(d_k+d_v), P the visible pairs",
        "flops_published": "the harness's Problem::flops_published: 4*b*h*n_q*n_k*d, halved for causal",
        "bytes": "the harness's Problem::bytes_min: Q, K, V read once and O written once",
        "inputs": "the harness's q, k, v files (generate_inputs: the bits verify and bench see)",
    }


def print_checks(peer_name: str, checks: list[dict]) -> None:
    oracles = sorted({c["oracle"] for c in checks if "oracle" in c})
    if oracles:
        print(f"  judged by: {'; '.join(oracles)}")
    for c in checks:
        status = "pass" if c["pass"] else "FAIL"
        if "error" in c:
            print(f"  {peer_name:<16} {status}  {c['problem']}: {c['error']}")
        else:
            ratio = c["ratio_to_naive"]
            print(f"  {peer_name:<16} {status}  {c['problem']}: max abs err {c['max_abs_error']:.3g} "
                  f"(naive f32 {c['naive_f32_max_abs_error']:.3g}, tol {c['tolerance']:.3g}, "
                  f"{'n/a' if ratio is None else f'{ratio:.2f}'} x naive)")


def print_table(records: list[dict]) -> None:
    header = f"{'peer':<16} {'mask':<9} {'n':>6} {'median ms':>11} {'min ms':>10} {'GFLOP/s exact':>14} " \
             f"{'GFLOP/s publ.':>14} {'GB/s':>7}  valid"
    print(header)
    print("-" * len(header))
    for r in records:
        p = r["problem"]
        print(f"{r['peer']:<16} {p['causal']:<9} {p['n_q']:>6} {r['median_seconds'] * 1e3:>11.3f} "
              f"{r['min_seconds'] * 1e3:>10.3f} {r['gflops_exact']:>14.2f} {r['gflops_published']:>14.2f} "
              f"{r['gbytes_per_second']:>7.3f}  { {True: 'yes', False: 'NO', None: 'unchecked'}[r['valid_target']] }")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", required=True,
                    help="the folder `attnbench bench --peers` writes: the problems and their inputs")
    ap.add_argument("--threads", type=int, default=None, help="threads per peer (default: all usable cores)")
    ap.add_argument("--repetitions", type=int, default=5, help="timed repetitions per problem (default 5)")
    ap.add_argument("--min-repetition-seconds", type=float, default=0.05,
                    help="a repetition repeats the call until it lasts at least this long (default 0.05)")
    ap.add_argument("--out", default="results/peers.json", help="JSON output path (default results/peers.json)")
    ap.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated subset of {','.join(PEERS)} (default: all)")
    ap.add_argument("--ort-causal", choices=("unidirectional", "bias"), default="unidirectional",
                    help="how ORT's MultiHeadAttention gets the causal mask: its unidirectional attribute "
                         "(default) or an additive -inf attention_bias")
    ap.add_argument("--skip-checks", action="store_true", help="do not check the peers against the oracle")
    ap.add_argument("--l2", choices=("cold", "hot"), default=None,
                    help="accepted for GPU runs of attnbench bench; CPU timing flushes no cache (recorded, ignored)")
    args = ap.parse_args(argv)
    if args.repetitions < 1:
        ap.error("--repetitions must be at least 1")
    if args.threads is not None and args.threads < 1:
        ap.error("--threads must be at least 1")
    peers = [s for s in args.peers.split(",") if s]
    if not peers or any(s not in PEERS for s in peers):
        ap.error(f"--peers takes a comma-separated subset of {','.join(PEERS)}")
    args.peer_list = peers
    try:
        args.case_list = load_cases(args.cases)
    except CasesError as e:
        ap.error(str(e))
    other = sorted({c.dtype for c in args.case_list if c.dtype != "f32"})
    if other:
        ap.error(f"the cases hold {','.join(other)}: cpu_peers.py times float32 only (bench --peers with --dtype f32)")
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = args.threads or usable

    # XLA reads its flags when jax is first imported, so they are set before any import of jax.
    # XLA has no intra-op thread-count flag on CPU; its thread pool is sized by the CPUs the
    # process may use, so with fewer threads than usable cores the process is also pinned.
    xla_flags = f"--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads={threads}"
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + xla_flags).strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if threads < usable and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:threads])

    checks_list = [c for c in args.case_list if c.role == "check"]
    timed = [c for c in args.case_list if c.role == "timed"]
    causals = sorted({c.causal for c in timed})

    ctx = context(args, args.case_list, threads, os.environ["XLA_FLAGS"])
    print(f"cpu_peers: {ctx['cpu_model']}, {threads} thread(s), python {ctx['python']}, "
          + ", ".join(f"{k} {v}" for k, v in ctx["packages"].items() if v))
    print(f"problems: {len(timed)} timed and {len(checks_list)} checks from {args.cases} (the harness's inputs); "
          f"{args.repetitions} repetitions\n")

    makers = {"onnxruntime": lambda: OnnxRuntimePeer(threads, args.ort_causal), "jax": lambda: JaxPeer(threads),
              **{name: (lambda name=name: TorchSdpaPeer(name, threads)) for name in TorchSdpaPeer.BACKENDS}}
    records, peers_json, any_failed, any_ran = [], [], False, False
    for name in args.peer_list:
        try:
            peer = makers[name]()
        except Exception as e:  # not installed, or broken: a skip with a reason
            print(f"{name}: skipped ({type(e).__name__}: {e})\n")
            peers_json.append({"peer": name, "skipped": f"{type(e).__name__}: {e}"})
            continue
        any_ran = True
        checks = [] if args.skip_checks else check_peer(peer, checks_list)
        valid = all(c["pass"] for c in checks) if checks else None
        any_failed |= valid is False
        print(f"{name} {peer.version}: correctness checks "
              + ("skipped" if valid is None else ("pass" if valid else "FAIL: not a valid target")))
        print_checks(name, checks)
        print()
        peers_json.append({"peer": name, "peer_version": peer.version, "checked": checks,
                           "valid_target": valid, "mask_methods": {c: peer.mask_method(c) for c in causals},
                           "backward": "timed alone: autograd with the forward's graph kept" if getattr(peer, "backward", False)
                           else "not timed: forward only"})
        for p in timed:
            if p.backward and not getattr(peer, "backward", False):
                continue  # this peer times the forward only (said in its mask_methods)
            try:
                run = peer.prepare_backward(p, *bsh_inputs(p), bsh_d_o(p)) if p.backward else peer.prepare(p, *bsh_inputs(p))
                t = time_peer(run, args.repetitions, args.min_repetition_seconds)
            except Exception as e:
                print(f"  {name} {p.repro}: error {type(e).__name__}: {e}")
                records.append({"peer": name, "peer_version": peer.version, "problem": p.record(),
                                "error": f"{type(e).__name__}: {e}"})
                continue
            med = t["median_seconds"]
            rec = {"peer": name, "peer_version": peer.version, "problem": p.record(), **t,
                   "gflops_exact": p.flops() / med / 1e9,
                   "gflops_published": p.flops_published() / med / 1e9,
                   "gbytes_per_second": p.bytes_min() / med / 1e9,
                   "threads": threads, "mask_method": peer.mask_method(p.causal), "valid_target": valid}
            records.append(rec)
            print(f"  {name:<16} d{p.d_k:<4} {p.causal:<9} {'backward' if p.backward else 'forward':<8} n={p.n_q:<5} median {med * 1e3:9.3f} ms  "
                  f"{rec['gflops_exact']:7.2f} GFLOP/s exact", flush=True)
        peer.close()
        print()

    ctx["load_average_at_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    timed = [r for r in records if "error" not in r]
    if timed:
        print_table(timed)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"schema": "attnbench.peers", "schema_version": 1, "context": ctx, "peers": peers_json, "results": records}, indent=2) + "\n")
    print(f"\nwrote {out}")
    if not any_ran:
        return 2
    return 1 if any_failed else 0


if __name__ == "__main__":
    sys.exit(main())
