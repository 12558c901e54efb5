"""attnbench's pytest plugin (registered through the ``pytest11`` entry point).

- ``@pytest.mark.attnbench_cases("quick")`` on a test taking an ``attn_case`` argument runs it
  once per case of the set (a name, or a case file's path), each test id the case's label; the
  argument is an ``AttnCase``: ``.problem``, ``.repro``, ``.inputs(arrays="torch")``.
- ``attn_case.check(out, lse=None)`` judges an output for that case (as
  ``testing.assert_attention_close``) and records it; with ``--attnbench-results DIR`` every
  process (each pytest-xdist worker too) writes its records to ``DIR/verify.<worker>.json`` in
  the verify schema, which ``attnbench report DIR/*.json`` merges.
"""
from __future__ import annotations

import json
import os

import pytest

from . import _native
from ._runs import judge


def pytest_addoption(parser):
    group = parser.getgroup("attnbench")
    group.addoption("--attnbench-results", default=None, metavar="DIR",
                    help="write the records of attn_case.check() to DIR/verify.<worker>.json (merge with `attnbench report`)")


def pytest_configure(config):
    config.addinivalue_line("markers", "attnbench_cases(name): run the test once per case of an attnbench case set (attn_case argument)")
    config._attnbench_records = []


class AttnCase:
    """One case of a case set, for a parametrised test."""

    def __init__(self, problem, config, test_name):
        self.problem = problem
        self.repro = problem.repro()
        self._config = config
        self._name = test_name  # the implementation's name in the records: the test function's

    def inputs(self, arrays="numpy", device="cpu"):
        from . import make_inputs
        return make_inputs(self.problem, arrays=arrays, device=device)

    def settings(self, raw=None) -> dict:
        """reference() and judge()'s keywords for this case's scale and masks (raw: the case's
        native inputs, when already made)."""
        i = raw if raw is not None else _native.make_inputs(self.problem)
        s = {"scale": i["scale"], "mask": i["mask"], "valid_lens": i["valid_lens"]}
        if i["bias"] is not None:
            from . import _arrays
            s["bias"] = _arrays.from_native(i["bias"], self.problem.dtype_of("bias"), "numpy")
        w = i["window"]
        if w is not None:
            left, right, align = w
            if left is None and right == 0:
                s["causal"] = align
            else:
                s["window"], s["align"] = (left, right), align
        return s

    def check(self, out, lse=None, **overrides):
        """Judges ``out`` for this case on its own inputs; AssertionError with the diagnosis."""
        from . import _arrays
        raw = _native.make_inputs(self.problem)  # once: the inputs and the mask's parts
        i = {role: _arrays.from_native(raw[role], self.problem.dtype_of(role), "numpy") for role in ("q", "k", "v")}
        settings = self.settings(raw)
        settings.update(overrides)
        verdict = judge(i["q"], i["k"], i["v"], out, lse, name=self._name, source=f"the case {self.repro}", **settings)
        record = dict(verdict.record)
        record["repro"] = self.repro  # the case's own repro string: it regenerates these inputs
        self._config._attnbench_records.append((verdict.document, record))
        if not verdict.passed:
            raise AssertionError(f"{self.repro}\n{verdict!r}")
        return verdict

    def __repr__(self):
        return f"AttnCase({self.repro!r})"


def pytest_generate_tests(metafunc):
    marker = metafunc.definition.get_closest_marker("attnbench_cases")
    if marker is None or "attn_case" not in metafunc.fixturenames:
        return
    name = marker.args[0] if marker.args else "quick"
    problems = _native.cases(name)
    name = metafunc.function.__name__
    metafunc.parametrize("attn_case", [AttnCase(p, metafunc.config, name) for p in problems], ids=[p.label() for p in problems])


def pytest_sessionfinish(session, exitstatus):
    directory = session.config.getoption("--attnbench-results")
    records = getattr(session.config, "_attnbench_records", [])
    if not directory or not records:
        return
    os.makedirs(directory, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    document = dict(records[0][0])
    document["records"] = [r for _, r in records]
    for n, r in enumerate(document["records"]):
        r["case_index"] = n
    path = os.path.join(directory, f"verify.{worker}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(document, f, indent=1)
    os.replace(path + ".tmp", path)
