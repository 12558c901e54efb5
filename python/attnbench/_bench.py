"""bench(): a Python callable timed on problems, into the bench schema `attnbench report` reads.

The timing is here (the callable lives in Python); the document, the O(n^2) fit and the
machine's peaks are the C++ benchmarks library's (attnbench._native._bench_document). Each call's
arguments are converted once, before the timed loop: only the call is timed. CUDA tensors are
timed with CUDA events around each call; everything else with the monotonic clock, after
waiting for the result (jax's block_until_ready).
"""
from __future__ import annotations

import json
import time

from . import _native


def _waiter(result):
    first = result[0] if isinstance(result, (tuple, list)) else result
    if hasattr(first, "block_until_ready"):
        return first.block_until_ready
    return None


def time_call(call, device: str, warmup: int, repetitions: int):
    """Milliseconds of each timed call, and what timed them."""
    if device != "cpu":
        import torch
        for _ in range(warmup):
            call()
        torch.cuda.synchronize()
        times = []
        for _ in range(repetitions):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return times, "CUDA events around each call"
    for _ in range(warmup):
        result = call()
        wait = _waiter(result)
        if wait:
            wait()
    times = []
    for _ in range(repetitions):
        start = time.perf_counter_ns()
        result = call()
        wait = _waiter(result)
        if wait:
            wait()
        times.append((time.perf_counter_ns() - start) / 1e6)
    return times, "the monotonic clock (time.perf_counter_ns) around each call, the result waited for"


def run_bench(fn, problems, convention, arrays, device, warmup, repetitions, name, check) -> dict:
    from . import make_inputs
    from ._runs import verify
    entries, timer = [], ""
    for p in problems:
        entry = {"problem": p.repro()}
        if check:
            verdict = verify(fn, cases=[p], convention=convention, arrays=arrays, device=device, name=name)
            record = verdict.records[0]
            if record["status"] != "pass":
                why = record.get("skip_reason") or "; ".join(record.get("reasons", []))[:300]
                entry["error"] = f"not timed: the check {'skipped' if record['status'] == 'skip' else 'failed'} ({why})"
                entries.append(entry)
                continue
            if record.get("projected_from"):
                p = _native.Problem.parse(record["repro"])  # what was checked is what is timed
                entry["problem"] = p.repro()
        raw = _native.make_inputs(p)
        call = convention.prepared_call(fn, p, raw, arrays, device)
        try:
            entry["times_ms"], timer = time_call(call, device, warmup, repetitions)
        except Exception as e:  # noqa: BLE001 - a call that fails is that benchmark's error
            entry["error"] = f"{type(e).__name__}: {e}"
        entries.append(entry)
    request = {"implementation": name, "device": device, "timer": timer, "entries": entries}
    return json.loads(_native._bench_document(json.dumps(request)))
