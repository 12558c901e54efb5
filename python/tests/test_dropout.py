"""Dropout from Python: a callable whose convention lists "dropout" is given dropout_p= and
dropout_seed=, draws its own keep mask and reports it with the output; judge() takes keep=.
PyTorch's SDPA with dropout_p > 0 does not report its mask, so it cannot be judged here."""
import json
import subprocess

import numpy as np
import pytest

import attnbench
import numpy_kernels

CONVENTION = attnbench.native(returns_lse=True, masked_nonfinite_safe=True, score_modifications=("sink", "dropout"))


def dropout_cases():
    # The default set's dropout cases that the numpy kernel computes (it has no soft-cap).
    return [p for p in attnbench.cases("default") if p.dropout_p is not None and p.softcap is None]


def test_the_problem_carries_dropout_p_and_its_streams_seed():
    p = attnbench.Problem.parse("b=1 hq=2 hkv=2 nq=4 nk=4 dk=8 dv=8 dtype=f32 causal=none dropout=0.1 dropout_seed=7 regime=diffuse seed=3")
    assert p.dropout_p == pytest.approx(0.1) and p.dropout_p == float(np.float32(0.1)) and p.dropout_seed == 7
    q = attnbench.Problem.parse("b=1 hq=2 hkv=2 nq=4 nk=4 dk=8 dv=8 dtype=f32 causal=none dropout=0.1 regime=diffuse seed=3")
    assert q.dropout_seed == 3  # the problem's seed, where dropout_seed= is not given
    plain = attnbench.Problem.parse("b=1 hq=2 hkv=2 nq=4 nk=4 dk=8 dv=8 dtype=f32 causal=none regime=diffuse seed=3")
    assert plain.dropout_p is None and plain.dropout_seed is None


def test_a_numpy_kernel_with_its_own_dropout_stream_passes_and_its_mistakes_fail():
    cases = dropout_cases()
    assert len(cases) >= 12 and {round(p.dropout_p, 3) for p in cases} == {0.1, 0.9}
    result = attnbench.verify(numpy_kernels.CORRECT, cases=cases, convention=CONVENTION, name="numpy_dropout")
    assert result.passed and result.counts["skip"] == 0, result.summary()
    assert all("keep" in r["roles"] for r in result.records), result.records[0]["roles"].keys()

    # Without the 1 / (1 - p) rescale: fails, diagnosed.
    unscaled = attnbench.verify(numpy_kernels.DROPOUT_MISTAKES["dropout_not_rescaled"], cases=cases[:6], convention=CONVENTION,
                                name="numpy_dropout_not_rescaled")
    assert unscaled.counts["fail"] == 6, unscaled.summary()
    assert any("dropout_not_rescaled" in f.hypotheses for f in unscaled.failures), unscaled.summary()

    # A stream that keeps everything, at p = 0.9: its all-ones keep mask fails on the keep rate.
    at_09 = [p for p in cases if round(p.dropout_p, 3) == 0.9]
    all_kept = attnbench.verify(numpy_kernels.DROPOUT_MISTAKES["dropout_all_kept"], cases=at_09, convention=CONVENTION,
                                name="numpy_dropout_all_kept")
    assert all_kept.counts["fail"] == len(at_09) > 0, all_kept.summary()
    assert all(any("the dropout stream's rate is not 1 - p" in r for r in f.reasons) for f in all_kept.failures), all_kept.summary()


def test_dropout_cases_are_skipped_unless_listed_and_a_kernel_that_reports_no_mask_fails():
    cases = dropout_cases()[:3]
    unlisted = attnbench.verify(numpy_kernels.CORRECT, cases=cases, convention=attnbench.native(returns_lse=True, score_modifications=("sink",)))
    assert unlisted.counts["skip"] == 3
    assert all("dropout" in reason and "not declared" in reason for _, reason in unlisted.skips), unlisted.skips

    def no_mask(q, k, v, **kw):
        o, lse, _ = numpy_kernels.CORRECT(q, k, v, **kw)
        return o, lse

    silent = attnbench.verify(no_mask, cases=cases, convention=CONVENTION, name="no_mask")
    assert silent.counts["fail"] == 3
    assert all("did not report its keep mask" in " ".join(f.reasons) for f in silent.failures), silent.summary()


def test_the_keep_mask_may_come_back_in_a_dict_as_bool_or_uint8():
    cases = dropout_cases()[:4]

    def as_dict(q, k, v, **kw):
        o, lse, keep = numpy_kernels.CORRECT(q, k, v, **kw)
        return {"o": o, "lse": lse, "keep": keep.astype(np.uint8)}

    result = attnbench.verify(as_dict, cases=cases, convention=CONVENTION, name="dict_result")
    assert result.passed, result.summary()


def _dropout_case():
    p = attnbench.Problem.parse("b=1 hq=2 hkv=1 nq=12 nk=16 dk=8 dv=8 dtype=f32 causal=bottom_right dropout=0.25 dropout_seed=5 "
                                "regime=diffuse seed=21")
    i = attnbench.make_inputs(p)
    window = (None, 0, "bottom_right")
    o, lse, keep = numpy_kernels.CORRECT(i["q"], i["k"], i["v"], scale=None, window=window, valid_lens=None, mask=None, bias=None,
                                         o_dtype=np.float32, dropout_p=p.dropout_p, dropout_seed=p.dropout_seed)
    return p, i, o, lse, keep


def test_judge_takes_the_keep_mask_and_save_inputs_round_trips_through_the_cli(tmp_path, attnbench_cli):
    p, i, o, lse, keep = _dropout_case()
    verdict = attnbench.judge(i["q"], i["k"], i["v"], o, lse, causal="bottom_right", dropout_p=p.dropout_p, dropout_seed=5, keep=keep)
    assert verdict.passed, verdict
    assert "keep" in verdict.roles and "dropout=0.25 dropout_seed=5" in verdict.repro

    # The output of another mask is wrong given this one.
    other = np.ascontiguousarray(keep[..., ::-1])
    wrong = attnbench.judge(i["q"], i["k"], i["v"], o, lse, causal="bottom_right", dropout_p=p.dropout_p, keep=other)
    assert not wrong.passed

    with pytest.raises(ValueError, match="keep mask"):
        attnbench.judge(i["q"], i["k"], i["v"], o, causal="bottom_right", dropout_p=p.dropout_p)
    with pytest.raises(ValueError, match="without dropout_p"):
        attnbench.judge(i["q"], i["k"], i["v"], o, causal="bottom_right", keep=keep)

    directory = tmp_path / "captured"
    verdict.save_inputs(str(directory))
    saved = json.loads((directory / "settings.json").read_text())
    assert saved["dropout_p"] == p.dropout_p and saved["dropout_seed"] == 5, saved
    assert np.load(directory / "keep.npy").dtype == np.float32
    cli = subprocess.run([attnbench_cli, "check", "--inputs", str(directory), "--json", ""], capture_output=True, text=True)
    assert cli.returncode == 0 and "dropout0.25" in cli.stdout, cli.stdout + cli.stderr

    # keep.npy as booleans reads the same; without it the directory is bad input naming keep.npy.
    np.save(directory / "keep.npy", keep.astype(bool))
    cli = subprocess.run([attnbench_cli, "check", "--inputs", str(directory), "--json", ""], capture_output=True, text=True)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    (directory / "keep.npy").unlink()
    cli = subprocess.run([attnbench_cli, "check", "--inputs", str(directory), "--json", ""], capture_output=True, text=True)
    assert cli.returncode == 2 and "keep.npy: missing" in cli.stderr, cli.stdout + cli.stderr
