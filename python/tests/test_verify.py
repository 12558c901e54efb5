"""verify() and properties() on Python callables: numpy kernels, the mutants of tests/mutants
written in numpy, a crash in an isolated worker."""
import os

import numpy as np
import pytest

import attnbench
import numpy_kernels

# The isolated callables below are numpy only: JAX's warning that a fork does not copy its threads
# (JAX is imported by another test in the same process) does not concern them.
numpy_only_fork = pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")

# The mutants declare what tests/mutants' C++ mutants declare: an LSE, every dtype and mask,
# masked K/V kept out entirely, fully masked rows zeros, deterministic.
MUTANT_CONVENTION = attnbench.native(returns_lse=True, masked_nonfinite_safe=True)

# verify's inputs are finite, so this one only the property suite's masked K/V check can catch.
INERT_ON_FINITE_INPUTS = "masked_nonfinite_leak"

# Names a failure of a mistake may also get where the predictions coincide (tests/diagnosis_test.cpp).
ALSO_NAMED = {
    "last_key_dropped": {"causal_strict", "last_key_tile_dropped", "output_all_zeros"},
    "output_all_zeros": {"last_key_dropped"},
    "row_max_init_finite": {"fully_masked_rows_off_policy"},
}


def test_a_correct_numpy_kernel_passes_the_default_set():
    result = attnbench.verify(numpy_kernels.CORRECT, cases="default", convention=MUTANT_CONVENTION)
    assert result.passed, result.summary()
    # Only the soft-capped cases and those with sinks or dropout are skipped: the convention lists none of them.
    skipped = [r for r in result.records if r["status"] == "skip"]
    assert all(r["skip_reason"] in ("soft-capping (softcap=) not declared", "attention sinks (sink=, sinks=) not declared",
                                    "dropout with its keep mask reported (dropout=) not declared")
               for r in skipped), skipped[:3]
    assert len(skipped) == sum("softcap=" in r["repro"] or " sink=" in r["repro"] or " dropout=" in r["repro"]
                               for r in result.records) > 0


def test_attention_sinks_reach_a_callable_that_lists_them():
    """score_modifications=("sink",) passes sinks=[h_q] (float32) on a case with sinks; a kernel
    that adds them to its denominator passes every such default case, and one that drops them is
    diagnosed sink_ignored."""
    cases = [p for p in attnbench.cases("default") if p.sinks is not None and p.softcap is None]
    assert len(cases) == 20 and all(len(p.sinks) == p.h_q for p in cases)
    convention = attnbench.native(returns_lse=True, masked_nonfinite_safe=True, score_modifications=("sink",))
    result = attnbench.verify(numpy_kernels.CORRECT, cases=cases, convention=convention, name="numpy_sinks")
    assert result.passed and result.counts["skip"] == 0, result.summary()
    dropping = attnbench.verify(lambda *a, sinks=None, **kw: numpy_kernels.CORRECT(*a, **kw), cases=cases[:6], convention=convention,
                                name="numpy_sinks_dropped")
    assert not dropping.passed
    assert all(f.hypotheses and f.hypotheses[0] == "sink_ignored" for f in dropping.failures), dropping.summary()


@pytest.fixture(scope="module")
def mutants_on_quick_cases():
    numpy_kernels.reset_call_counters()
    kernels = {"numpy_control": numpy_kernels.CORRECT, **{f"numpy_{name}": fn for name, fn in numpy_kernels.MUTANTS.items()}}
    return attnbench.verify(kernels, cases="quick", convention=MUTANT_CONVENTION)


def test_every_numpy_mutant_fails_and_is_diagnosed_as_its_own_mistake(mutants_on_quick_cases):
    result = mutants_on_quick_cases
    assert result.of("numpy_control").passed, result.of("numpy_control").summary()
    named_total, unnamed = 0, []
    for name in numpy_kernels.MUTANTS:
        mine = result.of(f"numpy_{name}")
        if name == INERT_ON_FINITE_INPUTS:
            assert mine.passed, mine.summary()
            continue
        assert mine.failures, f"{name} passed every quick case"
        named = 0
        for f in mine.failures:
            if not f.record.get("diagnosis"):
                continue  # past the diagnosed failures' budget, or a replay
            if name == "nondeterministic":
                named += f.diagnosis.startswith("nondeterministic: two runs on the same inputs differ")
            elif f.hypotheses:
                named += f.hypotheses[0] == name or f.hypotheses[0] in ALSO_NAMED.get(name, ())
        if named == 0:
            unnamed.append(name)
        named_total += named
    print(f"numpy mutants: {named_total} failures named as their own mistake")
    assert not unnamed, f"never diagnosed as their own mistake: {unnamed}"


def test_the_masked_nonfinite_leak_is_caught_by_the_property_suite():
    leak = attnbench.properties(numpy_kernels.MUTANTS[INERT_ON_FINITE_INPUTS], convention=MUTANT_CONVENTION, properties=[13], cases=20,
                                seed=1)
    assert not leak.passed and leak.failures[0].property == 13, leak
    control = attnbench.properties(numpy_kernels.CORRECT, convention=MUTANT_CONVENTION, properties=[13], cases=20, seed=1)
    assert control.passed, control


def test_properties_hold_on_a_correct_kernel_and_a_counterexample_replays():
    held = attnbench.properties(numpy_kernels.CORRECT, convention=MUTANT_CONVENTION, cases=5, seed=3)
    assert held.passed, held.failures
    broken = attnbench.properties(numpy_kernels.MUTANTS["causal_ignored"], convention=MUTANT_CONVENTION, cases=20, seed=3)
    assert not broken.passed
    failure = broken.failures[0]
    replayed = attnbench.properties(numpy_kernels.MUTANTS["causal_ignored"], convention=MUTANT_CONVENTION,
                                    properties=[failure.property], replay=failure.repro)
    assert not replayed.passed, (failure, replayed.records)


def test_a_narrow_convention_projects_the_cases_it_does_not_declare():
    narrow = attnbench.native(dtypes=("f32",), masks=("causal_top_left",), gqa=False)
    result = attnbench.verify(numpy_kernels.CORRECT, cases="quick", convention=narrow)
    assert result.passed, result.summary()
    projected = [r for r in result.records if r.get("projected_from")]
    assert projected and all(r["problem"]["dtype"] == "f32" for r in result.records if r["status"] != "skip")


def test_results_are_in_the_verify_schema_that_report_reads(tmp_path, attnbench_cli):
    import subprocess
    result = attnbench.verify(numpy_kernels.sdpa_ignoring_scale, cases="quick", convention="torch_sdpa")
    path = tmp_path / "verify.json"
    result.write_json(str(path))
    report = subprocess.run([attnbench_cli, "report", str(path), "--out", str(tmp_path / "report")], capture_output=True, text=True)
    assert report.returncode == 0, report.stdout + report.stderr
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "sdpa_ignoring_scale" in markdown and "the explicit scale was ignored" in markdown


def aborts_on_one_case(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if q.shape[2] == 1:  # the single-query cases
        os.abort()
    return numpy_kernels.sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)


@numpy_only_fork
def test_an_isolated_callable_that_aborts_fails_that_case_and_the_run_goes_on():
    cases = [p for p in attnbench.cases("quick")][:12]
    assert any(p.n_q == 1 for p in cases) and any(p.n_q > 1 for p in cases)
    result = attnbench.verify(aborts_on_one_case, cases=cases, convention="torch_sdpa", isolate=True, timeout=60)
    failed = {f.repro for f in result.failures}
    for r in result.records:
        p = attnbench.Problem.parse(r["repro"])
        if p.n_q == 1:
            assert r["status"] == "fail" and any("SIGABRT" in why for why in r["reasons"]), r
        else:
            assert r["status"] == "pass", r
    assert failed


def hangs_on_one_case(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if q.shape[2] == 1:
        import time
        time.sleep(600)
    return numpy_kernels.sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)


@numpy_only_fork
def test_an_isolated_callable_that_hangs_is_killed_at_its_timeout_and_the_run_goes_on():
    cases = [p for p in attnbench.cases("quick")][:6]
    result = attnbench.verify(hangs_on_one_case, cases=cases, convention="torch_sdpa", isolate=True, timeout=2)
    for r in result.records:
        if attnbench.Problem.parse(r["repro"]).n_q == 1:
            assert r["status"] == "fail" and any("did not return within 2 s" in why for why in r["reasons"]), r
        else:
            assert r["status"] == "pass", r


def flash_attn_func_in_numpy(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), alibi_slopes=None,
                             deterministic=False, return_attn_probs=False):
    """flash_attn_func's contract in numpy (BSHD; causal and windows bottom-right; ALiBi as
    -slope |i + n_k - n_q - j|), through the numpy control: the flash_attn convention's glue is what
    is under test."""
    assert dropout_p == 0.0
    qb, kb, vb = (np.ascontiguousarray(np.transpose(x, (0, 2, 1, 3))) for x in (q, k, v))
    n_q, n_k = qb.shape[2], kb.shape[2]
    window = None
    if causal:
        window = (None if window_size[0] < 0 else window_size[0], 0, "bottom_right")
    elif tuple(window_size) != (-1, -1):
        window = (None if window_size[0] < 0 else window_size[0], None if window_size[1] < 0 else window_size[1], "bottom_right")
    bias = None
    if alibi_slopes is not None:
        i = np.arange(n_q)[:, None]
        j = np.arange(n_k)[None, :]
        distance = np.abs(i + n_k - n_q - j).astype(np.float64)
        bias = (-np.asarray(alibi_slopes, np.float64)[None, :, None, None] * distance[None, None]).astype(qb.dtype)
    o, lse = numpy_kernels.CORRECT(qb, kb, vb, scale=softmax_scale, window=window, valid_lens=None, mask=None, bias=bias,
                                   o_dtype=qb.dtype)
    o = np.ascontiguousarray(np.transpose(o, (0, 2, 1, 3)))
    return (o, lse, None) if return_attn_probs else o


def test_the_flash_attn_convention_runs_its_declared_cases_and_projects_the_rest():
    result = attnbench.verify(flash_attn_func_in_numpy, cases="quick", convention="flash_attn", name="flash_attn_numpy")
    assert result.passed, result.summary()
    ran = [r for r in result.records if r["status"] == "pass"]
    assert all(r["problem"]["dtype"] in ("f16", "bf16") for r in ran)
    assert any("bottom_right" in r["repro"] for r in ran)
    alibi = [p for p in attnbench.cases("default") if "alibi" in str(p)]
    with_lse = attnbench.verify(flash_attn_func_in_numpy, cases=alibi, convention=attnbench.flash_attn(returns_lse=True))
    assert with_lse.passed, with_lse.summary()


def bshd_causal_kernel(q, k, v, scale, causal, mask):
    """A kernel described rather than conventional: BSHD, top-left `causal=`, a boolean `mask=`."""
    qb, kb, vb = (np.ascontiguousarray(np.transpose(x, (0, 2, 1, 3))) for x in (q, k, v))
    o, _ = numpy_kernels.CORRECT(qb, kb, vb, scale=scale, window=(None, 0, "top_left") if causal else None, valid_lens=None, mask=mask,
                                 bias=None, o_dtype=qb.dtype)
    return np.ascontiguousarray(np.transpose(o, (0, 2, 1, 3)))


def test_a_described_convention_calls_the_function_as_described():
    convention = {"layout": "bshd", "causal": "top_left", "mask": "bool", "padding": True, "window": True, "dtypes": ("f32", "f64")}
    result = attnbench.verify(bshd_causal_kernel, cases="quick", convention=convention)
    assert result.passed, result.summary()
    fixed = attnbench.described(fixed_scale=True, dtypes=("f32",))
    at_default = attnbench.verify(default_scale_kernel, cases="quick", convention=fixed)
    assert at_default.passed, at_default.summary()
    # A fixed scale is declared like a plugin's: a case with an explicit scale runs as its
    # projection onto the default scale, never with the scale it cannot take, and is not skipped.
    assert all(" scale=" not in r["repro"] for r in at_default.records if r["status"] != "skip")
    assert not any(" scale=" in repro for repro, _ in at_default.skips)
    assert at_default.counts["pass"] == 32


def default_scale_kernel(q, k, v):
    """Takes no scale: always 1/sqrt(d_k), no mask."""
    return numpy_kernels.CORRECT(q, k, v, scale=None, window=None, valid_lens=None, mask=None, bias=None, o_dtype=q.dtype)[0]


def misbehaves_on_one_case(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """On the single-query cases: prints, leaves a process running and allocates without bound."""
    if q.shape[2] == 1:
        import subprocess
        print("about to misbehave", flush=True)
        subprocess.Popen(["sleep", "300"], start_new_session=True)  # left running, even out of the group
        hoard = []
        while True:
            hoard.append(np.ones(1 << 27))  # 1 GiB at a time
    return numpy_kernels.sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)


@numpy_only_fork
def test_an_isolated_callable_is_bounded_in_memory_and_leaves_nothing_running():
    import subprocess
    cases = [p for p in attnbench.cases("quick")][:3]
    before = subprocess.run(["pgrep", "-f", "sleep 300"], capture_output=True, text=True).stdout.split()
    # Without the sandbox, which would refuse the process before the memory limit is reached.
    result = attnbench.verify(misbehaves_on_one_case, cases=cases, convention="torch_sdpa", isolate="no-sandbox", timeout=60,
                              memory_limit=2 << 30)
    for r in result.records:
        if attnbench.Problem.parse(r["repro"]).n_q == 1:
            why = " ".join(r["reasons"])
            assert r["status"] == "fail" and "memory limit" in why and "about to misbehave" in why, r
        else:
            assert r["status"] == "pass", r
    after = subprocess.run(["pgrep", "-f", "sleep 300"], capture_output=True, text=True).stdout.split()
    assert set(after) <= set(before), "a process the callable started outlived its call"


def attacks_on_one_case(mode, outside):
    """A correct kernel that, on the single-query cases, tries what the sandbox refuses."""
    def kernel(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if q.shape[2] == 1:
            import socket
            try:
                if mode == "network":
                    socket.socket(socket.AF_INET, socket.SOCK_STREAM).connect(("127.0.0.1", 9))
                elif mode == "process":
                    os.waitpid(os.fork(), 0)  # a child that exits at once, were it started
                elif mode == "signal":
                    os.kill(os.getppid(), 0)  # only a probe: harmless even were the sandbox missing
                elif mode == "write":
                    with open(outside, "w") as f:
                        f.write("escaped")
            except OSError:
                pass  # careless code goes on; the sandbox still names what it refused
        return numpy_kernels.sdpa(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                                  enable_gqa=enable_gqa)
    return kernel


@numpy_only_fork
@pytest.mark.parametrize("mode, named", [("network", "socket(AF_INET): no network in the sandbox"),
                                         ("process", "clone() of a new process"),
                                         ("signal", "kill("),
                                         ("write", "open of ")])
def test_an_isolated_callable_runs_in_the_sandbox_and_each_refused_call_fails_its_case_named(mode, named, tmp_path):
    outside = tmp_path / "outside.txt"
    cases = [p for p in attnbench.cases("quick")][:6]
    result = attnbench.verify(attacks_on_one_case(mode, str(outside)), cases=cases, convention="torch_sdpa", isolate=True, timeout=60)
    for r in result.records:
        if attnbench.Problem.parse(r["repro"]).n_q == 1:
            why = " ".join(r["reasons"])
            assert r["status"] == "fail" and "the sandbox refused the callable's " + named in why, r
            assert mode != "write" or ("outside.txt for writing: only its scratch directory" in why), r
        else:
            assert r["status"] == "pass", r
    assert not outside.exists(), "a write outside the scratch directory got through"
    # Without the sandbox the same calls go through (the fork, the probe, the write), and pass.
    if mode in ("process", "write"):
        loose = attnbench.verify(attacks_on_one_case(mode, str(outside)), cases=cases, convention="torch_sdpa", isolate="no-sandbox",
                                 timeout=60)
        assert loose.passed, loose.summary()


def reports_its_process(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    with open("/proc/self/stat") as f:
        proc_pid = f.read().split()[0]
    raise ValueError(f"pid {os.getpid()} parent {os.getppid()} /proc/self {proc_pid} processes {sorted(p for p in os.listdir('/proc') if p.isdigit())}")


@numpy_only_fork
def test_an_isolated_callable_runs_in_a_pid_namespace_of_its_own():
    """Process 2 under the sandbox's process 1, with a /proc of its own: nothing else is visible."""
    from attnbench._isolate import isolated
    call = isolated(lambda problem, inputs, want_lse: reports_its_process(*inputs), timeout=60)
    with pytest.raises(RuntimeError) as raised:
        call(None, [None, None, None], False)
    bounds = {name: applied for name, applied, _ in call.sandbox_bounds}
    if not bounds.get("pid namespace"):
        pytest.skip(f"no PID namespace here: {call.sandbox_bounds}")
    assert "ValueError: pid 2 parent 1 /proc/self 2 processes ['1', '2']" in str(raised.value), raised.value


def f16_accumulating(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """Scores and softmax in f32, but P·V summed key by key in an f16 accumulator (no mask: the cases below have none)."""
    assert attn_mask is None and not is_causal
    f32 = np.float32
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(f32), k.astype(f32)) * f32(scale if scale is not None else 1 / np.sqrt(q.shape[-1]))
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    terms = (p[..., :, None] * v.astype(f32)[:, :, None, :, :]).astype(np.float16)  # [b, h, q, k, d]
    return np.add.accumulate(terms, axis=-2, dtype=np.float16)[..., -1, :]


def test_a_kernel_accumulating_in_f16_fails_undeclared_and_passes_declared():
    cases = [f"b=1 hq=2 hkv=2 nq=16 nk=1000 dk=64 dv=64 dtype=f16 causal=none regime={r} seed={s}"
             for s, r in enumerate(["diffuse", "uniform01", "peaked"])]
    undeclared = attnbench.verify(f16_accumulating, cases=cases, convention="torch_sdpa")
    assert not undeclared.passed, undeclared.summary()
    declared = attnbench.verify(f16_accumulating, cases=cases, convention=attnbench.torch_sdpa(accumulation_unit_roundoff=2**-11))
    assert declared.passed, declared.summary()
