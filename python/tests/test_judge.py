"""reference() and judge() on a user's own arrays, and the same verdict from the CLI."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import attnbench
import numpy_kernels
from attnbench.testing import assert_attention_close
from conftest import have

CASE = "b=2 hq=4 hkv=2 nq=9 nk=13 dk=16 dv=16 dtype=f32 causal=none scale=0.6 regime=peaked seed=11"


def inputs(repro=CASE):
    return attnbench.make_inputs(attnbench.Problem.parse(repro))


def test_reference_states_its_bound_and_matches_a_float64_computation():
    i = inputs()
    ref = attnbench.reference(i["q"], i["k"], i["v"], scale=0.6)
    assert ref.o.dtype == np.float32 and ref.lse.shape == (2, 4, 9)
    assert 0 <= ref.error_bound_max_ulps < 1e-3
    o64, lse64 = numpy_kernels.CORRECT(i["q"].astype(np.float64), i["k"].astype(np.float64), i["v"].astype(np.float64), scale=0.6,
                                       window=None, valid_lens=None, mask=None, bias=None, o_dtype=np.float64)
    assert np.max(np.abs(ref.o - o64)) <= 2 * np.finfo(np.float32).eps * np.max(np.abs(o64))
    assert np.max(np.abs(ref.lse - lse64)) < 1e-12


def test_a_correct_output_passes_and_one_off_by_a_little_fails_naming_the_element():
    i = inputs()
    ref = attnbench.reference(i["q"], i["k"], i["v"], scale=0.6)
    ok = attnbench.judge(i["q"], i["k"], i["v"], ref.o, scale=0.6)
    assert ok.passed and ok.roles["o"].budget_used <= 1
    bad = ref.o.copy()
    bad[1, 2, 3, 4] += 1e-3
    verdict = attnbench.judge(i["q"], i["k"], i["v"], bad, scale=0.6)
    assert not verdict.passed and verdict.worst == "b=1 h=2 i=3 c=4"
    assert verdict.roles["o"].budget_used > 1
    with pytest.raises(AssertionError, match="b=1 h=2 i=3 c=4"):
        assert_attention_close(bad, i["q"], i["k"], i["v"], scale=0.6)


def test_masks_of_ones_own_are_judged_with_the_lse():
    p = attnbench.Problem.parse("b=2 hq=2 hkv=1 nq=6 nk=9 dk=8 dv=8 dtype=f64 causal=none bool=0.5@bh regime=diffuse seed=4")
    i = attnbench.make_inputs(p)
    lens = np.array([[0, 3, 9, 9, 2, 1], [9, 9, 0, 4, 5, 6]])
    ref = attnbench.reference(i["q"], i["k"], i["v"], mask=i["mask"], valid_lens=lens, causal="bottom_right")
    v = attnbench.judge(i["q"], i["k"], i["v"], ref.o, ref.lse, mask=i["mask"], valid_lens=lens, causal="bottom_right")
    assert v.passed and set(v.roles) == {"o", "lse"}
    assert np.all(ref.o[0, :, 0] == 0) and np.all(np.isneginf(ref.lse[0, :, 0]))  # valid length 0: fully masked


def test_bad_arrays_are_refused_by_name():
    i = inputs()
    with pytest.raises(ValueError, match="k: shape"):
        attnbench.judge(i["q"], i["k"][:, :, :, :8], i["v"], i["q"])
    with pytest.raises(ValueError, match="out: shape"):
        attnbench.judge(i["q"], i["k"], i["v"], i["q"][:, :, :, :3])
    with pytest.raises(ValueError, match="not a tensor dtype"):
        attnbench.judge(i["q"].astype(np.int32), i["k"], i["v"], i["q"])


def test_a_scale_ignoring_sdpa_is_diagnosed_alike_by_verify_judge_and_the_cli(tmp_path, attnbench_cli):
    result = attnbench.verify(numpy_kernels.sdpa_ignoring_scale, cases="quick", convention="torch_sdpa")
    assert not result.passed
    scaled = [f for f in result.failures if "scale" in f.repro]
    assert scaled and all("the explicit scale was ignored" in f.diagnosis for f in scaled), result.summary()
    assert all(f.hypotheses[0] == "scale_constant" for f in scaled)

    # The same output, written by hand, given to judge() and to `attnbench check --inputs`.
    i = inputs()
    out = numpy_kernels.sdpa_ignoring_scale(i["q"], i["k"], i["v"], scale=0.6, enable_gqa=True)
    verdict = attnbench.judge(i["q"], i["k"], i["v"], out, scale=0.6)
    assert not verdict.passed and "the explicit scale was ignored for the default" in verdict.diagnosis
    directory = tmp_path / "captured"
    verdict.save_inputs(str(directory))
    cli = subprocess.run([attnbench_cli, "check", "--inputs", str(directory), "--json", str(tmp_path / "check.json")],
                         capture_output=True, text=True)
    assert cli.returncode == 1, cli.stdout + cli.stderr
    record = json.load(open(tmp_path / "check.json"))["records"][0]
    assert record["diagnosis"]["summary"] == verdict.diagnosis
    assert record["diagnosis"]["matches"][0]["hypothesis"] == verdict.hypotheses[0] == "scale_constant"


def test_a_nan_where_it_reaches_an_output_is_bad_input_and_where_masked_it_is_not():
    p = attnbench.Problem.parse("b=1 hq=2 hkv=1 nq=4 nk=6 dk=8 dv=8 dtype=f32 causal=none regime=diffuse seed=2")
    i = attnbench.make_inputs(p)
    q = i["q"].copy()
    q[0, 1, 2, 3] = np.nan
    with pytest.raises(ValueError, match=r"q: element \(0, 1, 2, 3\) is nan"):
        attnbench.reference(q, i["k"], i["v"])
    v = i["v"].copy()
    v[0, 0, 5, :] = np.nan  # a KV-cache row never written, masked for every query
    lens = np.array([5])
    ref = attnbench.reference(i["q"], i["k"], v, valid_lens=lens)
    assert np.all(np.isfinite(ref.o)) and attnbench.judge(i["q"], i["k"], v, ref.o, valid_lens=lens).passed


def test_a_scale_whose_scores_overflow_the_working_precision_is_bad_input_not_an_unsound_oracle(tmp_path, attnbench_cli):
    p = attnbench.Problem.parse("b=1 hq=2 hkv=1 nq=4 nk=6 dk=8 dv=8 dtype=f32 causal=none regime=diffuse seed=2")
    i = attnbench.make_inputs(p)
    out = attnbench.reference(i["q"], i["k"], i["v"]).o
    with pytest.raises(ValueError, match=r"scale 1e\+300 is beyond the range of f32"):
        attnbench.judge(i["q"], i["k"], i["v"], out, scale=1e300)
    # A finite scale, but scores past f32's 3.4e38 for one pair: named with the pair.
    q, k = i["q"].copy(), i["k"].copy()
    q[0, 1, 2, :] = 30.0
    k[0, 0, 4, :] = 30.0
    with pytest.raises(ValueError, match=r"the score of query \(0, 1, 2\) and key 4 is 7.2e\+38"):
        attnbench.judge(q, k, i["v"], out, scale=1e35)
    # The same through check --inputs: exit 2 naming settings.json, never "the oracle is unsound".
    directory = tmp_path / "overflow"
    directory.mkdir()
    for name, a in (("q", i["q"]), ("k", i["k"]), ("v", i["v"]), ("out", out)):
        np.save(directory / f"{name}.npy", a)
    (directory / "settings.json").write_text('{"scale": 1e300}')
    cli = subprocess.run([attnbench_cli, "check", "--inputs", str(directory), "--json", ""], capture_output=True, text=True)
    assert cli.returncode == 2, cli.stdout + cli.stderr
    assert "settings.json: scale 1e+300 is beyond the range of f32" in cli.stderr and "unsound" not in cli.stdout + cli.stderr


def test_check_inputs_takes_a_soft_cap_from_settings_json(tmp_path, attnbench_cli):
    """settings.json's "softcap": c judges outputs of c tanh(s / c) scores; the uncapped ones fail."""
    p = attnbench.Problem.parse("b=1 hq=2 hkv=2 nq=5 nk=7 dk=8 dv=8 dtype=f32 causal=none regime=peaked seed=4")
    i = attnbench.make_inputs(p)

    def attention(cap):
        s = np.einsum("bhqd,bhkd->bhqk", i["q"].astype(np.float64), i["k"].astype(np.float64)) / np.sqrt(8)
        if cap:
            s = cap * np.tanh(s / cap)
        w = np.exp(s - s.max(-1, keepdims=True))
        return ((w / w.sum(-1, keepdims=True)) @ i["v"].astype(np.float64)).astype(np.float32)

    def check(out, settings):
        directory = tmp_path / f"case{len(list(tmp_path.iterdir()))}"
        directory.mkdir()
        for name, a in (("q", i["q"]), ("k", i["k"]), ("v", i["v"]), ("out", out)):
            np.save(directory / f"{name}.npy", a)
        (directory / "settings.json").write_text(settings)
        return subprocess.run([attnbench_cli, "check", "--inputs", str(directory), "--json", ""], capture_output=True, text=True)

    capped = check(attention(2.0), '{"softcap": 2.0}')
    assert capped.returncode == 0 and "softcap2" in capped.stdout, capped.stdout + capped.stderr
    uncapped = check(attention(None), '{"softcap": 2.0}')
    assert uncapped.returncode == 1 and "FAIL" in uncapped.stdout, uncapped.stdout + uncapped.stderr
    bad = check(attention(2.0), '{"softcap": -1}')
    assert bad.returncode == 2 and "settings.json: softcap must be finite and positive (got -1)" in bad.stderr, bad.stderr
    unknown = check(attention(2.0), '{"softcapp": 2.0}')
    assert unknown.returncode == 2 and "unknown key 'softcapp'" in unknown.stderr and "softcap, dropout_p, dropout_seed" in unknown.stderr, unknown.stderr

    # The same settings by name from Python: judge()'s keyword is the setting's name.
    assert attnbench.judge(i["q"], i["k"], i["v"], attention(2.0), softcap=2.0).passed
    wrong = attnbench.judge(i["q"], i["k"], i["v"], attention(None), softcap=2.0)
    assert not wrong.passed and "softcap=2" in wrong.repro, wrong
    with pytest.raises(ValueError, match="unknown keyword softcapp= .*softcap, dropout_p, dropout_seed"):
        attnbench.judge(i["q"], i["k"], i["v"], attention(2.0), softcapp=2.0)
    with pytest.raises(ValueError, match="softcap must be a number"):
        attnbench.judge(i["q"], i["k"], i["v"], attention(2.0), softcap="2")
    reference = attnbench.reference(i["q"], i["k"], i["v"], softcap=2.0)
    assert "softcap=2" in reference.repro and np.allclose(reference.o, attention(2.0), atol=1e-6)


def test_the_score_settings_are_listed_and_each_problem_names_its_own():
    """One list of the score modifications' settings (core/score_pipeline.hpp) names every carrier's keyword."""
    names = {s["name"]: s for s in attnbench.score_settings()}
    assert {"softcap", "dropout_p", "dropout_seed"} <= set(names), names
    assert names["dropout_seed"]["integer"] and not names["softcap"]["integer"] and names["dropout_p"]["modification"] == "dropout"
    p = attnbench.Problem.parse("b=1 hq=2 hkv=2 nq=4 nk=4 dk=8 dv=8 dtype=f32 causal=none softcap=30 dropout=0.5 regime=diffuse seed=9")
    assert p.settings == {"softcap": 30.0, "dropout_p": 0.5, "dropout_seed": 9}, p.settings
    assert p.softcap == 30.0 and p.dropout_seed == 9
    plain = attnbench.Problem.parse("b=1 hq=2 hkv=2 nq=4 nk=4 dk=8 dv=8 dtype=f32 causal=none regime=diffuse seed=9")
    assert plain.settings == {} and plain.softcap is None and plain.dropout_p is None
    with pytest.raises(AttributeError):
        plain.no_such_field
