"""Assertions for a test suite: the harness's verdict as a pytest-friendly assert.

    from attnbench.testing import assert_attention_close
    assert_attention_close(out, q, k, v, causal="bottom_right")

fails with an AssertionError whose message carries the errors, the budget used, the worst
element, the diagnosis of the mistake and the repro string of the case.
"""
from __future__ import annotations

from ._runs import judge


def assert_attention_close(out, q, k, v, lse=None, **settings):
    """Judges ``out`` (and ``lse``) against the 113-bit reference on q, k, v under the pass rule
    (attnbench.judge's keywords: scale, causal, window, align, mask, bias, valid_lens, k_factor,
    floor_ulps); raises AssertionError naming what failed, where, and why."""
    verdict = judge(q, k, v, out, lse, **settings)
    if not verdict.passed:
        raise AssertionError(f"attention output does not match the reference\n{verdict!r}\nrepro: {verdict.repro}")
    return verdict
