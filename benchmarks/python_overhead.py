"""The harness's own time per case, Python front door against the CLI, measured side by side.

For each round (interleaved, so that the machine's load hits both alike):
  - `attnbench verify --impl cpu_naive --cases SET --json F`: the harness's time is the command's
    wall time less the implementation's own (each record's "seconds", the wall time of its run);
  - `attnbench.verify(fn, cases=SET, convention="native")` with fn cpu_naive's algorithm in numpy
    (python/tests/numpy_kernels.py): the harness's time is the call's wall time less fn's own,
    timed around each call of fn (the conventions' conversions, the copies of the inputs and the
    outputs are the harness's).
Prints the median per-case overhead of each and their ratio (the issue's target: within 1.2x).

    python benchmarks/python_overhead.py build/release/cli/attnbench [--cases quick] [--rounds 5]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))


def cli_overhead(cli, cases):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "verify.json")
        start = time.perf_counter()
        subprocess.run([cli, "verify", "--impl", "cpu_naive", "--cases", cases, "--json", path, "--threads", "1"], check=True,
                       stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        records = json.load(open(path))["records"]
    ran = [r for r in records if r["status"] != "skip"]
    return (wall - sum(r["seconds"] for r in ran)) / len(ran), len(ran)


def python_overhead(cases):
    import attnbench
    import numpy_kernels
    spent = [0.0]

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return numpy_kernels.CORRECT(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - start

    start = time.perf_counter()
    result = attnbench.verify(timed, cases=cases, convention=attnbench.native(returns_lse=True), name="numpy_naive", threads=1)
    wall = time.perf_counter() - start
    ran = [r for r in result.records if r["status"] != "skip"]
    assert result.passed, result.summary()
    return (wall - spent[0]) / len(ran), len(ran)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("cli")
    parser.add_argument("--cases", default="quick")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    cli, py = [], []
    for _ in range(args.rounds):
        c, nc = cli_overhead(args.cli, args.cases)
        p, np_ = python_overhead(args.cases)
        cli.append(c)
        py.append(p)
    c, p = statistics.median(cli), statistics.median(py)
    print(f"cases: {args.cases} ({nc} for cpu_naive, {np_} for the callable), {args.rounds} rounds, one thread for the reference")
    print(f"harness time per case, median: attnbench verify --impl cpu_naive {c * 1e3:.3f} ms; attnbench.verify(callable) {p * 1e3:.3f} ms")
    print(f"ratio (Python / CLI): {p / c:.3f}")
    print(json.dumps({"cli_ms": c * 1e3, "python_ms": p * 1e3, "ratio": p / c, "cli_rounds_ms": [x * 1e3 for x in cli],
                      "python_rounds_ms": [x * 1e3 for x in py]}))


if __name__ == "__main__":
    main()
