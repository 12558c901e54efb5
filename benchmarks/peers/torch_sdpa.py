#!/usr/bin/env python3
"""Times PyTorch's scaled_dot_product_attention on a CUDA GPU, one backend forced at a time.

Backends (torch.nn.attention.sdpa_kernel): MATH, FLASH_ATTENTION, EFFICIENT_ATTENTION,
CUDNN_ATTENTION, as peers torch_sdpa_math, torch_sdpa_flash, torch_sdpa_efficient and
torch_sdpa_cudnn. The problems and their inputs are the ones `attnbench bench --peers` writes
into a folder and passes as --cases DIR (benchmarks/peers/README.md): the problem list our
families run (masks none and causal = is_causal=True, top-left), each with the FLOPs and bytes
the harness computed and its q, k, v as .npy files. CUDA-event timing of one call per repetition
after warm-up, L2 flushed before each repetition unless --l2 hot, medians over the repetitions.

Before timing, each backend is checked against a float64 computation on the folder's check cases
under the pass rule of DESIGN.md; a backend that fails in a dtype is not a valid target in that
dtype. A backend that refuses a problem (no kernel for that dtype, head dimension or size) is
recorded as unsupported with its error.

    build/release/cli/attnbench bench --impl cuda_cublas --dtype f16,bf16 --peers 'python3 benchmarks/peers/torch_sdpa.py'

which appends --cases DIR --threads N [--l2 cold|hot] --out PATH.

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

from peer_problem import Case, CasesError, git_revision, load_cases

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


def timing_record(backend: str, version: str, p: Case, timing: dict, valid, l2: str) -> dict:
    med = timing["median_seconds"]
    return {"peer": peer_name(backend), "peer_version": version, "problem": p.record(), **timing,
            "gflops_exact": p.flops() / med / 1e9, "gflops_published": p.flops_published() / med / 1e9,
            "gbytes_per_second": p.bytes_min() / med / 1e9, "backend": BACKENDS[backend], "l2": l2,
            "mask_method": mask_method(p.causal), "valid_target": valid}


def error_record(backend: str, version: str, p: Case, error: str, unsupported: bool) -> dict:
    return {"peer": peer_name(backend), "peer_version": version, "problem": p.record(),
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


def case_inputs(torch, p: Case, device):
    """The case's Q, K, V [b, h, n, d] (the files' layout, SDPA's BHSD) in its dtype on the device,
    and their float64 values (the oracle's). A bf16 file holds exactly bf16 values: .to() is exact."""
    dt = torch_dtype(torch, p.dtype)
    host = [torch.from_numpy(x) for x in p.inputs()]
    return [t.to(dt).to(device) for t in host], [t.to(dt).double() for t in host]


def textbook(torch, p: Case, q, k, v):
    """softmax(Q Kᵀ · scale, masked by exclusion) V in the tensors' own dtype."""
    s = (q @ k.transpose(-2, -1)) * p.scale
    if p.causal == "top_left":
        visible = torch.ones(p.n_q, p.n_k, dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~visible, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


# The check cases' regimes this script judges: in `large` (scores near the dtype's overflow) its
# baseline, the textbook algorithm in the dtype, overflows, so its tolerance means nothing there.
CHECK_REGIMES = ("diffuse", "peaked")


def check_backend(torch, backend: str, dtypes, cases: list[Case], device) -> dict:
    """Per dtype: the verdicts of the check cases against float64 (DESIGN.md's rule: max abs error
    at most 2 x the naive same-dtype algorithm's, plus 2 ulps of the dtype at max |ref|; NaN or Inf
    fails). A case the backend refuses is unsupported, neither pass nor fail."""
    by_dtype = {}
    for dtype in dtypes:
        verdicts = []
        for p in (c for c in cases if c.dtype == dtype and c.regime in CHECK_REGIMES):
            (q, k, v), (q64, k64, v64) = case_inputs(torch, p, device)
            ref = textbook(torch, p, q64, k64, v64)
            naive = textbook(torch, p, q, k, v).double().cpu()
            case = {"problem": p.repro}
            try:
                got = sdpa_call(torch, backend, q, k, v, p.causal != "none")().double().cpu()
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
        "problem_list": {"cases": args.cases, "timed": sum(c.role == "timed" for c in args.case_list),
                         "checks": sum(c.role == "check" for c in args.case_list)},
        "flops_exact": "the harness's Problem::flops (peer_cases.json): 2*b*h*P*(d_k+d_v), P the visible pairs",
        "flops_published": "the harness's Problem::flops_published: 4*b*h*n_q*n_k*d, halved for causal",
        "bytes": "the harness's Problem::bytes_min: Q, K, V read once and O written once",
        "inputs": "the harness's q, k, v files (generate_inputs: the bits verify and bench see)",
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


def parse_list(text: str, what: str, ap) -> list:
    values = [s for s in text.split(",") if s]
    if not values:
        ap.error(f"{what} is empty")
    return values


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", required=True, help="the folder `attnbench bench --peers` writes: the problems and their inputs")
    ap.add_argument("--threads", type=int, default=None, help="accepted for attnbench bench --peers; a GPU peer does not use it")
    ap.add_argument("--l2", choices=("cold", "hot"), default="cold", help="flush L2 before each timed call (cold, default) or not")
    ap.add_argument("--backends", default=",".join(BACKENDS), help=f"comma-separated subset of {','.join(BACKENDS)}")
    ap.add_argument("--repetitions", type=int, default=20, help="timed calls per problem; the median counts (default 20)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls before timing (default 3)")
    ap.add_argument("--out", default="results/torch_sdpa.json", help="JSON output path (default results/torch_sdpa.json)")
    ap.add_argument("--skip-checks", action="store_true", help="do not check the backends against float64")
    args = ap.parse_args(argv)
    if args.repetitions < 1 or args.warmup < 0:
        ap.error("--repetitions must be at least 1 and --warmup at least 0")
    args.backend_list = parse_list(args.backends, "--backends", ap)
    if any(b not in BACKENDS for b in args.backend_list):
        ap.error(f"--backends takes a comma-separated subset of {','.join(BACKENDS)}")
    try:
        args.case_list = load_cases(args.cases)
    except CasesError as e:
        ap.error(str(e))
    unknown = sorted({c.dtype for c in args.case_list} - set(MANTISSA_BITS))
    if unknown:
        ap.error(f"the cases hold {','.join(unknown)}: torch_sdpa.py supports f32, f16, bf16, f64")
    args.dtype_list = list(dict.fromkeys(c.dtype for c in args.case_list if c.role == "timed"))
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
    checks_list = [c for c in args.case_list if c.role == "check"]
    timed = [c for c in args.case_list if c.role == "timed"]
    causals = sorted({c.causal for c in timed})
    print(f"torch_sdpa: {props.name}, torch {version} (CUDA {torch.version.cuda}, cuDNN {ctx['cudnn']}); "
          f"{len(timed)} timed problems and {len(checks_list)} checks from {args.cases} (the harness's inputs), "
          f"dtype {','.join(args.dtype_list)}; L2 {args.l2}, {args.repetitions} repetitions\n", flush=True)

    timer = CudaEventTimer(torch)
    records, peers_json, any_failed = [], [], False
    for backend in args.backend_list:
        checks = {} if args.skip_checks else check_backend(torch, backend, args.dtype_list, checks_list, device)
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
        for p in timed:
            q = k = v = None
            try:
                (q, k, v), _ = case_inputs(torch, p, device)
                t = measure(sdpa_call(torch, backend, q, k, v, p.causal != "none"), timer, args.repetitions,
                            args.warmup, before_each)
            except Exception as e:  # noqa: BLE001 - refusals and failures are records, never fatal
                text = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                records.append(error_record(backend, version, p, text, refused(e)))
                print(f"  {peer_name(backend)} {p.dtype} d{p.d_k} {p.causal} n={p.n_q}: "
                      f"{'unsupported' if refused(e) else 'error'}: {text}", flush=True)
                q = k = v = None
                torch.cuda.empty_cache()
                continue
            rec = timing_record(backend, version, p, t, valid_by_dtype[p.dtype], args.l2)
            records.append(rec)
            print(f"  {peer_name(backend):<22} {p.dtype:<4} d{p.d_k:<4} {p.causal:<9} n={p.n_q:<6} median "
                  f"{t['median_seconds'] * 1e3:9.4f} ms  {rec['gflops_exact']:9.1f} GFLOP/s exact", flush=True)
            q = k = v = None
        print()

    write_json(args.out, {"schema": "attnbench.peers", "schema_version": 1, "context": ctx, "peers": peers_json, "results": records})
    print(f"wrote {args.out}")
    return EXIT_CHECKS_FAILED if any_failed else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
