"""Zero copy: what judging a 1 GiB torch output adds to the peak memory beyond the reference's own.

Two processes on the same arrays (O: 1 GiB of f32, 65536 rows of d_v = 4096; q, k, v small):
  judge      attnbench.judge(q, k, v, out): the reference, the naive yardstick and the verdict;
  reference  the reference and the naive yardstick alone (what judging must compute anyway).
Each prints its peak resident memory less its resident memory before the call; the difference is
what the judge's handling of the arrays costs (a copy of O would add 1024 MiB). The target: under
64 MiB. A measurement, not a test (the machines are shared): run it by hand.

    PYTHONPATH=build/release/python python benchmarks/python_zero_copy.py
"""
import json
import resource
import subprocess
import sys


def step(which):
    import torch
    import attnbench
    from attnbench import _native, _runs
    torch.manual_seed(0)
    b, h, nq, nk, dk, dv = 1, 1, 1 << 16, 2, 16, 4096
    q, k, v = torch.randn(b, h, nq, dk), torch.randn(b, h, nk, dk), torch.randn(b, h, nk, dv)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert out.numel() * 4 == 1 << 30

    def rss_mib():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:"))

    before = rss_mib()
    passed = None
    if which == "judge":
        passed = attnbench.judge(q, k, v, out).passed
    else:
        given, _ = _runs._given(q, k, v, None, None, None)
        _native._yardstick_only(given, _runs._settings(None, None, None, "top_left", None), 0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"step": which, "passed": passed, "before_mib": before, "peak_mib": peak, "added_mib": peak - before}))


def main():
    if len(sys.argv) > 1:
        return step(sys.argv[1])
    figures = {}
    for which in ("judge", "reference"):
        run = subprocess.run([sys.executable, __file__, which], capture_output=True, text=True, check=True)
        figures[which] = json.loads(run.stdout.strip().splitlines()[-1])
    extra = figures["judge"]["added_mib"] - figures["reference"]["added_mib"]
    print(f"judge of a 1 GiB torch output: peak +{figures['judge']['added_mib']:.1f} MiB (passed: {figures['judge']['passed']}); "
          f"the reference and yardstick alone: +{figures['reference']['added_mib']:.1f} MiB; beyond the reference's own: {extra:.1f} MiB "
          f"(target < 64 MiB)")
    return 0 if extra < 64 and figures["judge"]["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
