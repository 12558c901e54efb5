#!/usr/bin/env python3
"""Times PyTorch's scaled_dot_product_attention on a CUDA GPU, one backend forced at a time.

Backends (torch.nn.attention.sdpa_kernel): MATH, FLASH_ATTENTION, EFFICIENT_ATTENTION,
CUDNN_ATTENTION, as peers torch_sdpa_math, torch_sdpa_flash, torch_sdpa_efficient and
torch_sdpa_cudnn. Same problem list and FLOP conventions as `attnbench bench`: b, h, d, dtypes
and masks (none, causal = is_causal=True, top-left) as given, n_q = n_k = n over the powers of
two from --min-n to --max-n. CUDA-event timing of one call per repetition after warm-up, L2
flushed before each repetition unless --l2 hot, medians over the repetitions.

Before timing, each backend is checked against a float64 computation on small cases under the
pass rule of DESIGN.md; a backend that fails in a dtype is not a valid target in that dtype. A
backend that refuses a problem (no kernel for that dtype, head dimension or size) is recorded
as unsupported with its error.

    python3 benchmarks/peers/torch_sdpa.py [--min-n 128] [--max-n 8192] [--dtype f16,bf16]
        [--d 64] [--batch 1] [--heads 8] [--masks none,causal] [--l2 cold|hot] [--out PATH]

Exit codes: 0 every backend that ran passed its checks, 1 a backend failed them, 2 bad usage,
3 unavailable here (no PyTorch, no CUDA device, or no sdpa_kernel): the reason is printed and
written to --out as skipped peers.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import statistics
import sys
from pathlib import Path

from peer_problem import ELEMENT_BYTES, Problem, git_revision

EXIT_OK, EXIT_CHECKS_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3

# Our backend names -> torch.nn.attention.SDPBackend members.
BACKENDS = {"math": "MATH", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION"}
MANTISSA_BITS = {"f64": 52, "f32": 23, "f16": 10, "bf16": 7}
MIN_NORMAL_EXPONENT = {"f64": -1022, "f32": -126, "f16": -14, "bf16": -126}
HOLD_CYCLES = 500_000  # torch.cuda._sleep before each timed call: ~0.3 ms at 1.7 GHz


def peer_name(backend: str) -> str:
    return f"torch_sdpa_{backend}"


def ulp(dtype: str, x: float) -> float:
    """Spacing of `dtype` numbers at magnitude x (core/dtype.cpp's ulp_at)."""
    a = abs(x)
    e = MIN_NORMAL_EXPONENT[dtype] if a == 0 else max(math.floor(math.log2(a)), MIN_NORMAL_EXPONENT[dtype])
    return 2.0 ** (e - MANTISSA_BITS[dtype])


# --------------------------------------------------------------------------------------
# Timing: one call between two timer marks per repetition, after warm-up
# --------------------------------------------------------------------------------------

class CudaEventTimer:
    """Marks are CUDA events recorded on the current stream; read after one synchronisation."""

    def __init__(self, torch):
        self.torch = torch

    def mark(self):
        event = self.torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def synchronize(self):
        self.torch.cuda.synchronize()

    @staticmethod
    def seconds(start, stop) -> float:
        return start.elapsed_time(stop) / 1e3


def measure(call, timer, repetitions: int, warmup: int, before_each=None) -> dict:
    """Times `call`: `warmup` untimed calls, then per repetition `before_each()` (the L2 flush and
    the stream hold, outside the marks) and one call between two marks. Medians and minima over
    the repetitions."""
    for _ in range(warmup):
        call()
    timer.synchronize()
    marks = []
    for _ in range(repetitions):
        if before_each is not None:
            before_each()
        start = timer.mark()
        call()
        marks.append((start, timer.mark()))
    timer.synchronize()
    times = [timer.seconds(a, b) for a, b in marks]
    return {"times": times, "median_seconds": statistics.median(times), "min_seconds": min(times),
            "calls_per_repetition": 1, "warmup_calls": warmup}


def timing_record(backend: str, version: str, p: Problem, timing: dict, valid, l2: str) -> dict:
    med = timing["median_seconds"]
    return {"peer": peer_name(backend), "peer_version": version, "problem": p.to_json(), **timing,
            "gflops_exact": p.flops_exact() / med / 1e9, "gflops_published": p.flops_published() / med / 1e9,
            "gbytes_per_second": p.bytes_min() / med / 1e9, "backend": BACKENDS[backend], "l2": l2,
            "mask_method": mask_method(p.causal), "valid_target": valid}


def error_record(backend: str, version: str, p: Problem, error: str, unsupported: bool) -> dict:
    return {"peer": peer_name(backend), "peer_version": version, "problem": p.to_json(),
            "error": ("unsupported: " if unsupported else "") + error, "unsupported": unsupported,
            "backend": BACKENDS[backend]}


def mask_method(causal: str) -> str:
    return "none" if causal == "none" else "is_causal=True (top-left: query i sees keys j <= i)"


# --------------------------------------------------------------------------------------
# The PyTorch side (imported only once PyTorch and a device are known to be there)
# --------------------------------------------------------------------------------------

def torch_dtype(torch, name: str):
    return {"f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[name]


def refused(e: Exception) -> bool:
    """A backend's refusal of a problem (no kernel for it), as opposed to a failure while running."""
    text = str(e)
    return isinstance(e, (RuntimeError, NotImplementedError)) and (
        "No available kernel" in text or "not support" in text or "Unsupported" in text or "unsupported" in text)


def sdpa_call(torch, backend: str, q, k, v, causal: bool):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    member = getattr(SDPBackend, BACKENDS[backend])

    def call():
        with sdpa_kernel(member):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return call


def check_inputs(torch, p: Problem, device):
    """Q, K, V [b, h, n, d] in the dtype (rounded once from float64 draws), the float64 values of
    the rounded inputs, for the oracle. Regimes as core/inputs.cpp: diffuse gives scaled scores
    of unit variance, peaked of variance 64."""
    g = torch.Generator().manual_seed(p.seed)
    sigma = math.sqrt(math.sqrt({"diffuse": 1.0, "peaked": 64.0}[p.regime] / (p.scale * p.scale * p.d_k)))
    shape = (p.b, p.h, p.n_q, p.d_k)
    dt = torch_dtype(torch, p.dtype)
    q = (sigma * torch.randn(shape, generator=g, dtype=torch.float64)).to(dt)
    k = (sigma * torch.randn((p.b, p.h, p.n_k, p.d_k), generator=g, dtype=torch.float64)).to(dt)
    v = torch.randn((p.b, p.h, p.n_k, p.d_k), generator=g, dtype=torch.float64).to(dt)
    return [t.to(device) for t in (q, k, v)], [t.double() for t in (q, k, v)]


def textbook(torch, p: Problem, q, k, v):
    """softmax(Q Kᵀ · scale, masked by exclusion) V in the tensors' own dtype."""
    s = (q @ k.transpose(-2, -1)) * p.scale
    if p.causal == "top_left":
        visible = torch.ones(p.n_q, p.n_k, dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~visible, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def check_backend(torch, backend: str, dtypes, head_dims, device) -> dict:
    """Per dtype: the verdicts of small cases against float64 (DESIGN.md's rule: max abs error at
    most 2 x the naive same-dtype algorithm's, plus 2 ulps of the dtype at max |ref|; NaN or Inf
    fails). A case the backend refuses is unsupported, neither pass nor fail."""
    by_dtype = {}
    for dtype in dtypes:
        verdicts = []
        for d in head_dims:
            for n in (64, 129):
                for causal in ("none", "top_left"):
                    for regime in ("diffuse", "peaked"):
                        p = Problem(1, 2, n, n, d, d, causal, dtype, regime, seed=7)
                        (q, k, v), (q64, k64, v64) = check_inputs(torch, p, device)
                        ref = textbook(torch, p, q64, k64, v64)
                        naive = textbook(torch, p, q, k, v).double().cpu()
                        case = {"problem": p.repro()}
                        try:
                            got = sdpa_call(torch, backend, q, k, v, causal != "none")().double().cpu()
                        except Exception as e:  # noqa: BLE001 - a refusal or a failure, recorded either way
                            case.update({"pass": None if refused(e) else False, "unsupported": refused(e),
                                         "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"})
                            verdicts.append(case)
                            continue
                        nonfinite = int((~torch.isfinite(got)).sum())
                        err = float((got - ref).abs().max()) if nonfinite == 0 else float("inf")
                        naive_err = float((naive - ref).abs().max())
                        tolerance = 2.0 * naive_err + 2.0 * ulp(dtype, float(ref.abs().max()))
                        case.update({"max_abs_error": err, "naive_max_abs_error": naive_err, "tolerance": tolerance,
                                     "nonfinite": nonfinite, "pass": nonfinite == 0 and err <= tolerance})
                        verdicts.append(case)
        ran = [c for c in verdicts if c["pass"] is not None]
        by_dtype[dtype] = {"valid_target": all(c["pass"] for c in ran) if ran else None, "cases": verdicts}
    return by_dtype


def flush_and_hold(torch, l2: str, device):
    """What runs before each timed call, outside the events: with --l2 cold a write of twice the
    L2 size; then torch.cuda._sleep, which keeps the stream busy while Python dispatches the
    call, so the dispatch is not timed. Returns (callable, description)."""
    props = torch.cuda.get_device_properties(device)
    l2_bytes = int(getattr(props, "L2_cache_size", 0) or 0)
    steps, words = [], []
    if l2 == "cold":
        flush = torch.empty(2 * l2_bytes if l2_bytes > 0 else 256 << 20, dtype=torch.uint8, device=device)
        steps.append(flush.zero_)
        words.append(f"L2 cold: zero_() of a {flush.numel() >> 20} MiB buffer before each call")
    else:
        words.append("L2 hot: no flush")
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        steps.append(lambda: sleep(HOLD_CYCLES))
        words.append(f"torch.cuda._sleep({HOLD_CYCLES}) before the start event hides the Python dispatch")
    else:
        words.append("no torch.cuda._sleep: the Python dispatch of each call may be timed")

    def before_each():
        for step in steps:
            step()
    return before_each, "; ".join(words), l2_bytes


# --------------------------------------------------------------------------------------
# Context and output
# --------------------------------------------------------------------------------------

def base_context(args) -> dict:
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "git_revision": git_revision(),
        "arguments": {k: v for k, v in vars(args).items() if not k.endswith("_list")},
        "l2_mode": args.l2,
        "repetitions": args.repetitions,
        "warmup": args.warmup,
        "flops_exact": "2*b*h*P*(d_k+d_v), P = visible (query, key) pairs counted exactly",
        "flops_published": "4*b*h*n_q*n_k*d, halved for causal",
        "bytes": "read Q, K, V once and write O once, at the dtype's element size",
    }


def write_json(path: str, doc: dict) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")


def unavailable(args, reason: str) -> int:
    print(f"torch_sdpa: peer unavailable: {reason}", flush=True)
    peers = [{"peer": peer_name(b), "skipped": reason} for b in args.backend_list]
    write_json(args.out, {"schema": "attnbench.peers", "schema_version": 1, "context": base_context(args), "peers": peers, "results": []})
    print(f"wrote {args.out}")
    return EXIT_UNAVAILABLE


def load_torch():
    """(torch, None) where PyTorch, a CUDA device and sdpa_kernel are there, else (None, why)."""
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - not installed, or broken
        return None, f"PyTorch is not installed ({type(e).__name__}: {e})"
    if not torch.cuda.is_available():
        return None, (f"no CUDA device (torch {torch.__version__}, built with CUDA {torch.version.cuda}: "
                      "torch.cuda.is_available() is False)")
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: F401 - PyTorch 2.3 or later
    except ImportError as e:
        return None, f"torch {torch.__version__} has no torch.nn.attention.sdpa_kernel (PyTorch 2.3 or later): {e}"
    return torch, None


def parse_list(text: str, kind, what: str, ap) -> list:
    try:
        values = [kind(s) for s in text.split(",") if s]
    except ValueError:
        ap.error(f"{what} takes a comma-separated list, got '{text}'")
    if not values:
        ap.error(f"{what} is empty")
    return values


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--min-n", type=int, default=128, help="smallest n (powers of two from here; default 128)")
    ap.add_argument("--max-n", type=int, default=8192, help="largest n (default 8192)")
    ap.add_argument("--threads", type=int, default=None, help="accepted for attnbench bench --peers; a GPU peer does not use it")
    ap.add_argument("--batch", type=int, default=1, help="b (default 1)")
    ap.add_argument("--heads", type=int, default=8, help="h_q = h_kv (default 8)")
    ap.add_argument("--d", default="64", help="head dimensions d_k = d_v, comma-separated (default 64)")
    ap.add_argument("--dtype", default="f16", help="comma-separated subset of f32,f16,bf16,f64 (default f16)")
    ap.add_argument("--masks", default="none,causal", help="comma-separated subset of none,causal")
    ap.add_argument("--l2", choices=("cold", "hot"), default="cold", help="flush L2 before each timed call (cold, default) or not")
    ap.add_argument("--backends", default=",".join(BACKENDS), help=f"comma-separated subset of {','.join(BACKENDS)}")
    ap.add_argument("--repetitions", type=int, default=20, help="timed calls per problem; the median counts (default 20)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls before timing (default 3)")
    ap.add_argument("--out", default="results/torch_sdpa.json", help="JSON output path (default results/torch_sdpa.json)")
    ap.add_argument("--skip-checks", action="store_true", help="do not check the backends against float64")
    args = ap.parse_args(argv)
    if args.min_n < 1 or args.max_n < args.min_n:
        ap.error("need 1 <= --min-n <= --max-n")
    if args.repetitions < 1 or args.warmup < 0:
        ap.error("--repetitions must be at least 1 and --warmup at least 0")
    if args.batch < 1 or args.heads < 1:
        ap.error("--batch and --heads must be at least 1")
    args.d_list = parse_list(args.d, int, "--d", ap)
    if any(d < 1 for d in args.d_list):
        ap.error("--d values must be positive")
    args.dtype_list = parse_list(args.dtype, str, "--dtype", ap)
    unknown = [d for d in args.dtype_list if d not in ELEMENT_BYTES]
    if unknown:
        ap.error(f"--dtype {','.join(unknown)}: torch_sdpa.py supports f32, f16, bf16, f64")
    args.mask_list = parse_list(args.masks, str, "--masks", ap)
    if any(m not in ("none", "causal") for m in args.mask_list):
        ap.error("--masks takes a comma-separated subset of none,causal")
    args.backend_list = parse_list(args.backends, str, "--backends", ap)
    if any(b not in BACKENDS for b in args.backend_list):
        ap.error(f"--backends takes a comma-separated subset of {','.join(BACKENDS)}")
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    torch, why = load_torch()
    if torch is None:
        return unavailable(args, why)

    device = torch.device("cuda")
    props = torch.cuda.get_device_properties(device)
    before_each, hold_method, l2_bytes = flush_and_hold(torch, args.l2, device)
    version = torch.__version__
    ctx = base_context(args)
    ctx.update({"gpu_name": props.name, "gpu_compute_capability": f"{props.major}.{props.minor}",
                "gpu_sm_count": props.multi_processor_count, "gpu_l2_bytes": l2_bytes, "torch": version,
                "torch_cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                "timing": "CUDA events around one call per repetition on the current stream, after warm-up; " + hold_method,
                "layout": "Q, K, V, O [b, h, n, d] contiguous (SDPA's BHSD)"})
    ns = []
    n = args.min_n
    while n <= args.max_n:
        ns.append(n)
        n *= 2
    causals = [{"none": "none", "causal": "top_left"}[m] for m in args.mask_list]
    print(f"torch_sdpa: {props.name}, torch {version} (CUDA {torch.version.cuda}, cuDNN {ctx['cudnn']}); "
          f"b={args.batch} h={args.heads} d={args.d} dtype {args.dtype}, n = {ns[0]} .. {ns[-1]}, masks {args.masks}; "
          f"L2 {args.l2}, {args.repetitions} repetitions\n", flush=True)

    timer = CudaEventTimer(torch)
    records, peers_json, any_failed = [], [], False
    for backend in args.backend_list:
        checks = {} if args.skip_checks else check_backend(torch, backend, args.dtype_list, args.d_list, device)
        valid_by_dtype = {dt: (checks[dt]["valid_target"] if checks else None) for dt in args.dtype_list}
        overall = None if args.skip_checks else (False if False in valid_by_dtype.values() else
                                                 (True if True in valid_by_dtype.values() else None))
        any_failed |= overall is False
        print(f"{peer_name(backend)}: checks " + ("skipped" if args.skip_checks else ", ".join(
            f"{dt} {({True: 'pass', False: 'FAIL', None: 'unsupported'})[v]}" for dt, v in valid_by_dtype.items())), flush=True)
        for dt, c in checks.items():
            for case in c["cases"]:
                if case["pass"] is False:
                    print(f"  FAIL {case['problem']}: " + (case.get("error") or
                          f"max abs err {case['max_abs_error']:.3g} > tol {case['tolerance']:.3g}"))
        peers_json.append({"peer": peer_name(backend), "peer_version": version, "backend": BACKENDS[backend],
                           "checked": checks, "valid_target": overall, "valid_target_by_dtype": valid_by_dtype,
                           "mask_methods": {c: mask_method(c) for c in causals}})
        for dtype in args.dtype_list:
            for d in args.d_list:
                for causal in causals:
                    for n in ns:
                        p = Problem(args.batch, args.heads, n, n, d, d, causal, dtype)
                        try:
                            g = torch.Generator(device=device).manual_seed(p.seed)
                            q, k, v = (torch.randn((p.b, p.h, n, d), generator=g, device=device, dtype=torch_dtype(torch, dtype))
                                       for _ in range(3))
                            t = measure(sdpa_call(torch, backend, q, k, v, causal != "none"), timer, args.repetitions,
                                        args.warmup, before_each)
                        except Exception as e:  # noqa: BLE001 - refusals and failures are records, never fatal
                            text = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                            records.append(error_record(backend, version, p, text, refused(e)))
                            print(f"  {peer_name(backend)} {dtype} d{d} {causal} n={n}: "
                                  f"{'unsupported' if refused(e) else 'error'}: {text}", flush=True)
                            q = k = v = None
                            torch.cuda.empty_cache()
                            continue
                        rec = timing_record(backend, version, p, t, valid_by_dtype[dtype], args.l2)
                        records.append(rec)
                        print(f"  {peer_name(backend):<22} {dtype:<4} d{d:<4} {causal:<9} n={n:<6} median "
                              f"{t['median_seconds'] * 1e3:9.4f} ms  {rec['gflops_exact']:9.1f} GFLOP/s exact", flush=True)
                        q = k = v = None
        print()

    write_json(args.out, {"schema": "attnbench.peers", "schema_version": 1, "context": ctx, "peers": peers_json, "results": records})
    print(f"wrote {args.out}")
    return EXIT_CHECKS_FAILED if any_failed else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
