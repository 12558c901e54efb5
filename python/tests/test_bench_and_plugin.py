"""bench() into the bench schema with its O(n^2) fit, and the pytest plugin under pytest-xdist,
its per-worker results merged by `attnbench report`."""
import json
import subprocess
import sys
import textwrap

import pytest

import attnbench
import numpy_kernels
from conftest import have


def problems(sizes, dtype="f32"):
    return [f"b=1 hq=2 hkv=2 nq={n} nk={n} dk=32 dv=32 dtype={dtype} causal=none regime=diffuse seed=1" for n in sizes]


def test_bench_times_a_checked_callable_and_fits_its_growth(tmp_path, attnbench_cli):
    result = attnbench.bench(numpy_kernels.sdpa, problems([64, 128, 256]), convention="torch_sdpa", repetitions=3, warmup=1)
    medians = result.medians_ms()
    assert len(medians) == 3 and all(ms > 0 for ms in medians.values())
    fit = result.fits[0]
    # The fit is there and made of the three sizes; its exponent is a timing, which a test on a shared
    # machine does not judge (benchmarks/README.md: speed is checked by benchmarks).
    assert fit["sizes_measured"] == [64, 128, 256] and fit["points"] == 3 and fit["exponent"] > 0
    assert result.document["attnbench"]["peaks"]["roofline_gflops"] > 0
    path = tmp_path / "bench.json"
    result.write_json(str(path))
    report = subprocess.run([attnbench_cli, "report", str(path), "--out", str(tmp_path / "r")], capture_output=True, text=True)
    assert report.returncode == 0, report.stderr
    assert "sdpa/f32/d32/none" in (tmp_path / "r" / "report.md").read_text()


def test_bench_refuses_to_time_a_wrong_kernel():
    result = attnbench.bench(numpy_kernels.sdpa_ignoring_scale, [problems([32])[0] + " scale=0.7"], convention="torch_sdpa")
    assert not result.medians_ms() and "not timed: the check failed" in result.errors[0]


def _installed_plugin():
    from importlib.metadata import entry_points
    return any(e.name == "attnbench" for e in entry_points(group="pytest11"))


PLUGIN_TEST = textwrap.dedent("""
    import pytest, numpy_kernels

    @pytest.mark.attnbench_cases("quick")
    def test_numpy_sdpa(attn_case):
        i = attn_case.inputs()
        s = attn_case.settings()
        if s.get("valid_lens") is not None or s.get("window") is not None:
            pytest.skip("the SDPA under test takes a boolean mask only")
        mask = s.get("mask")
        causal = s.get("causal")
        if causal not in (None, "top_left") or (causal and (mask is not None or s.get("bias") is not None)):
            pytest.skip("is_causal is top-left and takes no other mask")
        attn_mask = s.get("bias") if mask is None else mask
        out = numpy_kernels.sdpa(i["q"], i["k"], i["v"], attn_mask=attn_mask, is_causal=causal == "top_left", scale=s["scale"],
                                 enable_gqa=True)
        attn_case.check(out.astype(i["q"].dtype) if out.dtype != i["q"].dtype else out)
""")


@pytest.mark.skipif(not have("xdist"), reason="needs pytest-xdist")
def test_the_pytest_plugin_parametrises_over_a_case_set_under_xdist(tmp_path, attnbench_cli):
    (tmp_path / "test_cases.py").write_text(PLUGIN_TEST)
    results = tmp_path / "results"
    # -p: the build tree's package has no entry point (pip install . registers it as pytest11).
    plugin = [] if _installed_plugin() else ["-p", "attnbench.pytest_plugin"]
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin, "-n", "2", str(tmp_path / "test_cases.py"),
                          "--attnbench-results", str(results), "--rootdir", str(tmp_path)],
                         capture_output=True, text=True, cwd=str(tmp_path),
                         env={**__import__("os").environ, "PYTHONPATH": ":".join(sys.path)})
    assert run.returncode == 0, run.stdout + run.stderr
    files = sorted(results.glob("verify.*.json"))
    assert len(files) == 2, run.stdout  # one per xdist worker
    records = sum(len(json.load(open(f))["records"]) for f in files)
    assert records > 10
    report = subprocess.run([attnbench_cli, "report", *map(str, files), "--out", str(tmp_path / "r")], capture_output=True, text=True)
    assert report.returncode == 0, report.stdout + report.stderr
    assert f"{records} passed" in (tmp_path / "r" / "report.md").read_text() or "passed" in report.stdout
