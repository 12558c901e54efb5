"""The runs: reference, judge, verify, properties and bench on Python arrays and callables.

Each hands its arguments to the native module, which runs the C++ library the CLI runs, and
wraps the JSON document it returns (the result files' own schema) in a small object.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from . import _arrays, _native
from ._conventions import Convention, convention_of, declaration_json

PASS_RULE_K = 2.0
PASS_RULE_FLOOR_ULPS = 2.0


# ---- inputs of one's own ----

def _given(q, k, v, mask, bias, valid_lens, out=None, **outputs):
    host = {}
    bf16 = False
    for name, x in (("q", q), ("k", k), ("v", v), ("bias", bias), ("out", out), *outputs.items()):
        a, bits = _arrays.to_host(x, name)
        host[name] = a
        bf16 = bf16 or bits
    m = None if mask is None else np.ascontiguousarray(np.asarray(_arrays.to_numpy_result(mask, "mask")), dtype=bool)
    lens = None if valid_lens is None else np.ascontiguousarray(np.asarray(_arrays.to_numpy_result(valid_lens, "valid_lens")), dtype=np.int64)
    return _native._Given(host["q"], host["k"], host["v"], m, host["bias"], lens, bf16), host


def _settings(scale, causal, window, align, o_dtype, score_settings=None, sinks=None):
    s = _native._Settings()
    s.score = dict(score_settings or {})
    if sinks is not None:
        s.sinks = [float(x) for x in np.asarray(_arrays.to_numpy_result(sinks, "sinks"), np.float64).reshape(-1)]
    s.scale = None if scale is None else float(scale)
    s.causal = "none" if causal in (None, False) else ("top_left" if causal is True else str(causal))
    if window is not None:
        left, right = window
        s.window = (None if left is None or left < 0 else int(left), None if right is None or right < 0 else int(right))
        s.align = align
    s.o_dtype = o_dtype
    return s


@dataclass
class Reference:
    """The reference's output (rounded once to o's dtype), its LSE (float64, natural log, -inf for
    a row that sees no key) and the bound it states on its own error before rounding."""
    o: Any
    lse: Any
    error_bound_max_abs: float
    error_bound_max_ulps: float
    lse_error_bound_max_abs: float
    repro: str

    def __iter__(self):
        return iter((self.o, self.lse))


def reference(q, k, v, *, scale=None, causal=None, window=None, align="top_left", mask=None, bias=None, valid_lens=None,
              o_dtype=None, threads=0, arrays=None, **score_settings) -> Reference:
    """Attention on your own arrays at 113 bits, rounded once to o's dtype (default q's).

    q [b, h_q, n_q, d_k], k [b, h_kv, n_k, d_k], v [b, h_kv, n_k, d_v] (numpy, torch or jax;
    read where they lie). ``causal`` None, True (top-left), "top_left" or "bottom_right";
    ``window`` (left, right) with None or -1 unbounded, aligned by ``align``; ``mask`` boolean
    [1|b, 1|h_q, n_q, n_k] (True: visible); ``bias`` additive, same shape; ``valid_lens`` [b] or
    [b, n_q]. Every mask intersects. The score modifications' settings are keywords by their
    names (``softcap=30.0``; ``attnbench.score_settings()`` lists them); dropout's output depends
    on the kernel's keep mask, so it is judged (``judge``), not computed here. Returns O and the
    LSE in the inputs' framework (``arrays``).
    """
    given, _ = _given(q, k, v, mask, bias, valid_lens)
    r = _native._reference(given, _settings(scale, causal, window, align, o_dtype, score_settings), threads)
    framework = arrays or _arrays.framework_of(q)
    problem = _native.Problem.parse(r["repro"])
    o = _arrays.from_native(r["o"], problem.dtype_of("o"), framework)
    lse = _arrays.from_native(r["lse"], "f64", framework)
    return Reference(o, lse, r["bound_max_abs"], r["bound_max_ulps"], r["bound_lse_max_abs"], r["repro"])


# ---- verdicts ----

def _figure(x) -> float:
    """A figure of the result files: a number, or "nan", "inf", "-inf"."""
    return float(x)


def _diagnosis_text(record: dict) -> str:
    d = record.get("diagnosis")
    if d:
        return d.get("summary", "")
    return record.get("diagnosis_skipped", "")


@dataclass
class RoleVerdict:
    role: str
    passed: bool
    max_abs: float
    tolerance: float
    reasons: list

    @property
    def budget_used(self) -> float:
        return self.max_abs / self.tolerance if self.tolerance > 0 else float("inf")


class _RecordView:
    """What one verify record says, for one case."""

    def __init__(self, record: dict):
        self.record = record

    @property
    def passed(self) -> bool:
        return self.record["status"] == "pass"

    @property
    def status(self) -> str:
        return self.record["status"]

    @property
    def repro(self) -> str:
        return self.record["repro"]

    @property
    def reasons(self) -> list:
        return self.record.get("reasons", [])

    @property
    def diagnosis(self) -> str:
        """The known mistakes the output matches ("the output matches scale = 1/sqrt(d_k): ..."),
        or what the diagnosis found instead; "" for a pass."""
        return _diagnosis_text(self.record)

    @property
    def hypotheses(self) -> list:
        d = self.record.get("diagnosis") or {}
        return [m["hypothesis"] for m in d.get("matches", [])]

    @property
    def roles(self) -> dict:
        """Per judged tensor ("o", and "lse" when one was returned): pass, error, tolerance, budget."""
        return {role: RoleVerdict(role, r["passed"], _figure(r["max_abs"]), _figure(r["tolerance"]), r.get("reasons", []))
                for role, r in self.record.get("roles", {}).items()}

    @property
    def budget_used(self) -> Optional[float]:
        b = self.record.get("budget_used")
        return None if b is None else _figure(b)

    @property
    def metrics(self) -> dict:
        return self.record.get("metrics", {})

    @property
    def worst(self) -> str:
        """Where the largest absolute error is: "b=0 h=1 i=3 c=5"."""
        return self.metrics.get("max_abs_at", "-")


class Failure(_RecordView):
    """A failed case: its repro string, the reasons, the diagnosis and the rerun line."""

    def __init__(self, record: dict, rerun: str):
        super().__init__(record)
        self.rerun = rerun

    def __repr__(self):
        return f"Failure({self.repro!r}: {'; '.join(self.reasons)[:200]}; diagnosis: {self.diagnosis})"


def write_document(document: dict, path: str) -> None:
    """A result document as JSON at path, whole or not at all (a temporary file, then renamed)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(document, f, indent=1)
    os.replace(tmp, path)


class _Document:
    """A result held as the document its schema writes (what `attnbench report` and `gate` read)."""

    def __init__(self, document: dict):
        self.document = document

    def write_json(self, path: str) -> None:
        write_document(self.document, path)


class VerifyResult(_Document):
    """verify()'s result: every record, in the verify schema that `attnbench report` and `gate` read."""

    def __init__(self, document: dict, rerun: Callable[[dict], str]):
        super().__init__(document)
        self._rerun = rerun

    @property
    def records(self) -> list:
        return self.document["records"]

    @property
    def counts(self) -> dict:
        c = {"pass": 0, "fail": 0, "skip": 0}
        for r in self.records:
            c[r["status"]] += 1
        return c

    @property
    def passed(self) -> bool:
        """Every case that ran passed, and at least one ran (nothing ran is not a pass)."""
        c = self.counts
        return c["fail"] == 0 and c["pass"] > 0

    @property
    def failures(self) -> list:
        return [Failure(r, self._rerun(r)) for r in self.records if r["status"] == "fail"]

    @property
    def skips(self) -> list:
        return [(r["repro"], r.get("skip_reason", "")) for r in self.records if r["status"] == "skip"]

    def of(self, implementation: str) -> "VerifyResult":
        """The records of one callable of a side-by-side run."""
        document = dict(self.document)
        document["records"] = [r for r in self.records if r["implementation"] == implementation]
        return VerifyResult(document, self._rerun)

    @property
    def implementations(self) -> list:
        return list(dict.fromkeys(r["implementation"] for r in self.records))

    def summary(self) -> str:
        c = self.counts
        lines = [f"{c['pass']} passed, {c['fail']} failed, {c['skip']} skipped over {len(self.records)} records"]
        for f in self.failures:
            lines.append(f"FAIL {f.repro}")
            for reason in f.reasons[:3]:
                lines.append(f"  {reason}")
            if f.diagnosis:
                lines.append(f"  diagnosis: {f.diagnosis}")
            lines.append(f"  rerun: {f.rerun}")
        return "\n".join(lines)

    def __repr__(self):
        c = self.counts
        return f"VerifyResult({c['pass']} passed, {c['fail']} failed, {c['skip']} skipped)"


class _Verdict(_RecordView):
    """What judge() and judge_backward() return: one record of the verify schema, printed."""

    def __init__(self, document: dict):
        super().__init__(document["records"][0])
        self.document = document

    def __bool__(self):
        return self.passed

    @property
    def rerun(self) -> str:
        raise NotImplementedError

    def write_json(self, path: str) -> None:
        write_document(self.document, path)

    def __repr__(self):
        head = "PASS" if self.passed else "FAIL"
        parts = [f"{head} {self.record['label'] if 'label' in self.record else self.repro}"]
        for role in self.roles.values():
            parts.append(f"{role.role}: max abs {role.max_abs:.3g} (tolerance {role.tolerance:.3g}, budget {role.budget_used:.2f})")
        if not self.passed:
            parts.append(f"worst at {self.worst}")
            parts += self.reasons[:3]
            if self.diagnosis:
                parts.append(f"diagnosis: {self.diagnosis}")
            parts.append(f"rerun: {self.rerun}")
        return "\n".join(parts)


class Judgement(_Verdict):
    """judge()'s verdict on one output: pass or fail per tensor (o, and lse when given), the
    errors, the budget used (1.0 = at the pass line), the worst element, the diagnosis, and how to
    rerun it from the command line (save_inputs, then `attnbench check --inputs DIR`)."""

    def __init__(self, document: dict, arrays: dict, settings: dict):
        super().__init__(document)
        self._arrays = arrays
        self._settings = settings

    @property
    def rerun(self) -> str:
        return "judgement.save_inputs(DIR), then: attnbench check --inputs DIR (the same tensors, judged by the CLI)"

    def save_inputs(self, directory: str) -> None:
        """The tensors and settings as a `check --inputs` directory (cli/README.md's format)."""
        os.makedirs(directory, exist_ok=True)
        for name, a in self._arrays.items():
            if a is None:
                continue
            a = _arrays.to_numpy_result(a, name)
            if name == "valid_lens":
                a = np.asarray(a, np.int64)
            np.save(os.path.join(directory, f"{name}.npy"), a)
        with open(os.path.join(directory, "settings.json"), "w") as f:
            json.dump(self._settings, f)


class BackwardJudgement(_Verdict):
    """judge_backward()'s verdict on one set of gradients: pass or fail per gradient (roles dq,
    dk and dv, d_sink and d_bias where given, and keep with dropout), each one's error, tolerance
    and budget, the worst element
    (``dk b=0 h=1 j=5 c=3``), the reasons naming the gradient, and the diagnosis against the known
    backward mistakes (dk_scale_missing, d_omitted, ...). ``gradients``: each one's metrics."""

    @property
    def gradients(self) -> dict:
        return self.record.get("gradients", {})

    @property
    def rerun(self) -> str:
        # `attnbench check --inputs` judges given outputs as a forward pass only.
        return "attnbench.judge_backward(q, k, v, d_o, dq, dk, dv, ...) on the same tensors"


def judge(q, k, v, out, lse=None, *, scale=None, causal=None, window=None, align="top_left", mask=None, bias=None,
          valid_lens=None, keep=None, sinks=None, k_factor=PASS_RULE_K, floor_ulps=PASS_RULE_FLOOR_ULPS,
          threads=0, name="judge", source="the arrays given to attnbench.judge", **score_settings) -> Judgement:
    """Your output against the reference under the pass rule, with the diagnosis of a failure.

    Settings as reference()'s; o's dtype is out's. ``lse`` [b, h_q, n_q] (natural log) is judged
    when given. Nothing is copied: q, k, v and out are read where they lie (a CUDA tensor comes to
    the host first).

    The score modifications' settings are keywords by their names, as reference()'s
    (``softcap=30.0``, ``dropout_p=0.1``; an unknown keyword is an error naming them). ``sinks``
    [h_q]: each query head's attention-sink logit (rounded to float32), one more term of its rows'
    softmax denominator.

    Dropout: ``dropout_p`` (0 < p < 1) with ``keep``, the keep mask [b, h_q, n_q, n_k] the output
    was computed with (True/1 kept, False/0 dropped): out must be sum_j P_ij Z_ij / (1 - p) v_j
    (the LSE is the softmax's), judged given that Z; Z itself must be 0/1 where a key is visible
    with a keep rate in the binomial band of 1 - p. ``dropout_seed`` only names the stream in the
    repro string."""
    given, host = _given(q, k, v, mask, bias, valid_lens, out)
    out_host = host["out"]
    lse_host = None
    if lse is not None:
        lse_host, _ = _arrays.to_host(lse, "lse")
    keep_host = None
    if keep is not None:
        keep_host = np.ascontiguousarray(np.asarray(_arrays.to_numpy_result(keep, "keep")), dtype=np.float32)
    settings = _settings(scale, causal, window, align, None, score_settings, sinks)
    text = _native._judge(given, settings, out_host, lse_host, keep_host, k_factor, floor_ulps, threads, name, source)
    file_settings: dict = {}
    if scale is not None:
        file_settings["scale"] = float(scale)
    if sinks is not None:
        file_settings["sinks"] = list(settings.sinks)
    if causal not in (None, False):
        file_settings["causal"] = "top_left" if causal is True else causal
    file_settings.update({name: value for name, value in score_settings.items() if value is not None})
    kept = {"q": q, "k": k, "v": v, "mask": mask, "bias": bias, "valid_lens": valid_lens, "out": out, "lse": lse, "keep": keep_host}
    return Judgement(json.loads(text), kept, file_settings)


def judge_backward(q, k, v, d_o, dq, dk, dv, *, d_sink=None, d_bias=None, scale=None, causal=None, window=None, align="top_left", mask=None,
                   bias=None, valid_lens=None, keep=None, sinks=None, k_factor=PASS_RULE_K, floor_ulps=PASS_RULE_FLOOR_ULPS, threads=0,
                   name="judge_backward", source="the arrays given to attnbench.judge_backward", **score_settings) -> BackwardJudgement:
    """Your gradients against the backward reference under the pass rule, each diagnosed.

    ``d_o`` [b, h_q, n_q, d_v] the upstream gradient; ``dq`` [b, h_q, n_q, d_k], ``dk`` [b, h_kv,
    n_k, d_k], ``dv`` [b, h_kv, n_k, d_v] the gradients of sum(O * dO) that your backward gave
    (under GQA dK and dV summed over each kv head's query heads), each in its own dtype; every
    other setting as judge()'s (the score modifications' by name: ``softcap=30.0``). Each of dq,
    dk and dv is held to the pass rule against its 113-bit reference (verification/README.md, "The
    backward pass"): the verdict has one role per gradient, and a failure's reasons name it.

    ``d_sink`` [h_q], the gradient of the sinks (``sinks=``, as judge()'s), and ``d_bias``, the bias's in its
    shape (summed over the dimensions it broadcasts over), are judged the same way where given:
    dσ_h = -sum over b and i of P_i,sink D_i, dBias = dS. Left out, the record names them not
    computed (``gradients_not_computed``) where the case has sinks or a bias.

    Dropout: ``dropout_p`` with ``keep``, the keep mask [b, h_q, n_q, n_k] the forward drew (as
    judge()'s): the gradients are judged given that Z, and Z by its keep rate."""
    given, host = _given(q, k, v, mask, bias, valid_lens, d_o=d_o, dq=dq, dk=dk, dv=dv, d_sink=d_sink, d_bias=d_bias)
    keep_host = None
    if keep is not None:
        keep_host = np.ascontiguousarray(np.asarray(_arrays.to_numpy_result(keep, "keep")), dtype=np.float32)
    settings = _settings(scale, causal, window, align, None, score_settings, sinks)
    text = _native._judge_backward(given, settings, host["d_o"], host["dq"], host["dk"], host["dv"], host["d_sink"], host["d_bias"], keep_host,
                                   k_factor, floor_ulps, threads, name, source)
    return BackwardJudgement(json.loads(text))


# ---- a callable on case sets ----

def _problems(cases) -> list:
    if isinstance(cases, str):
        return _native.cases(cases)
    out = []
    for c in cases:
        out.append(c if isinstance(c, _native.Problem) else _native.Problem.parse(str(c)))
    return out


def _invoker(fn, convention: Convention, arrays, device, isolate, timeout, memory_limit, backward=None):
    invoke = convention.invoker(fn, arrays, device, backward)
    if isolate:
        from ._isolate import isolated
        if isolate not in (True, "no-sandbox"):
            raise ValueError(f"isolate={isolate!r}: True (a worker in the sandbox), 'no-sandbox' (a worker without it) or False")
        invoke = isolated(invoke, timeout=timeout, memory_limit=memory_limit, sandbox=isolate is True)
    return invoke


def _name_of(fn, name):
    return name or getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def verify(fn, cases="default", convention="torch_sdpa", arrays="numpy", *, backward=False, device="cpu", isolate=False,
           timeout=60.0, memory_limit=None, name=None, k_factor=PASS_RULE_K, floor_ulps=PASS_RULE_FLOOR_ULPS, threads=0, project=True,
           progress=None) -> VerifyResult:
    """Calls ``fn`` on every case of a case set and judges each output as `attnbench verify` does.

    ``fn``: a callable, or a dict {name: callable} verified side by side in one run (each case's
    reference computed once). ``cases``: a set's name ("default", "quick"), a case file's path, or
    Problems / repro strings. ``convention``: "torch_sdpa", "flash_attn", "native", a Convention,
    or a dict of described()'s keywords; a case outside what it declares runs as its projection
    onto it, or is skipped with the reason. ``arrays``: the framework fn receives ("numpy",
    "torch", "jax"); ``device``: where torch tensors go ("cuda" on a GPU). ``isolate=True``: each
    call runs in a worker process bounded by ``timeout`` seconds and ``memory_limit`` bytes, so a
    crash or a hang fails that case and the run goes on. ``progress``: a callable given each
    record (a dict) as it is made.

    ``backward``: each case verified as its backward pass (op=backward) instead, end to end as
    `attnbench verify --backward` does: ``fn``'s forward, then its gradients of dO (drawn from the
    case's seed) judged one by one (records with roles dq, dk, dv; and d_sink, d_bias on the cases
    with sinks or a bias where the convention declares ``parameter_gradients=True``, else named in
    ``gradients_not_computed``). True takes them from autograd
    through ``fn`` (torch: ``torch.autograd.grad(o, (q, k, v), d_o)``; jax: ``jax.vjp``), recomputing its forward; a
    callable ``backward(q, k, v, out, lse, d_o, **the forward's keywords) -> (dq, dk, dv)``, in
    the convention's layout, is given the forward's O and LSE (lse None unless the convention
    declares one); with side-by-side callables, a dict {name: True or callable}.
    """
    conv = convention_of(convention)
    problems = _problems(cases)
    named = fn if isinstance(fn, dict) else {_name_of(fn, name): fn}
    backwards = {label: (backward.get(label) if isinstance(backward, dict) else backward) or None for label in named}
    # A callable given no backward declares none: it skips the backward cases, saying so.
    declared = {label: conv if b is None else conv.with_(operations=tuple(dict.fromkeys(conv.operations + ("backward",))))
                for label, b in backwards.items()}
    if any(b is not None for b in backwards.values()):
        problems = [p.with_operation("backward") for p in problems]
    kernels = [(_invoker(f, declared[label], arrays, device, isolate, timeout, memory_limit, backwards[label]), label,
                declaration_json(declared[label]), json.dumps({**conv.limits(), "autograd_backward": backwards[label] is True}))
               for label, f in named.items()]
    callback = None if progress is None else (lambda text: progress(json.loads(text)))
    text = _native._verify(kernels, problems, k_factor, floor_ulps, threads, project, callback)
    said = ", backward=..." if any(b is not None for b in backwards.values()) else ""
    return VerifyResult(json.loads(text), lambda r: f"attnbench.verify(fn, cases=[{r['repro']!r}], convention=...{said})")


@dataclass
class PropertyFailure:
    property: int
    name: str
    message: str
    repro: str
    seed: int

    @property
    def rerun(self) -> str:
        return f"attnbench.properties(fn, properties=[{self.property}], replay={self.repro!r})  # or seed={self.seed}"


class PropertiesResult(_Document):
    """properties()'s verdicts, in the properties schema (`attnbench report` reads it)."""

    @property
    def records(self) -> list:
        return self.document["records"]

    @property
    def failures(self) -> list:
        return [PropertyFailure(r["property"], r.get("name", ""), r.get("message", ""), r.get("repro", ""), r.get("seed", 0))
                for r in self.records if r.get("verdict") == "failed"]

    @property
    def passed(self) -> bool:
        return not self.failures and any(r.get("verdict") == "held" for r in self.records)

    def __repr__(self):
        kinds: dict = {}
        for r in self.records:
            kinds[r.get("verdict")] = kinds.get(r.get("verdict"), 0) + 1
        return f"PropertiesResult({kinds})"


def properties(fn, convention="torch_sdpa", arrays="numpy", *, properties=None, cases=40, seed=0, shrink=True, replay=None,
               device="cpu", isolate=False, timeout=60.0, memory_limit=None, name=None) -> PropertiesResult:
    """The property suite (RapidCheck) on ``fn``: every invariant of attention it can be asked
    about under its convention, ``cases`` draws each, counterexamples shrunk and printed as repro
    strings. ``replay``: check exactly that problem (a failure's repro) instead of drawing."""
    conv = convention_of(convention)
    invoke = _invoker(fn, conv, arrays, device, isolate, timeout, memory_limit)
    single = None if replay is None else (replay if isinstance(replay, _native.Problem) else _native.Problem.parse(replay))
    text = _native._properties(invoke, _name_of(fn, name), declaration_json(conv), json.dumps(conv.limits()), list(properties or []),
                               cases, seed, shrink, single)
    return PropertiesResult(json.loads(text))


def property_names() -> dict:
    return dict(_native._property_names())


# ---- timing ----

class BenchResult(_Document):
    """bench()'s runs, in the bench schema (`attnbench report` and `gate` read it)."""

    @property
    def benchmarks(self) -> list:
        return self.document["benchmarks"]

    def medians_ms(self) -> dict:
        """{(family, n): median time in ms} of the timed runs."""
        times: dict = {}
        for b in self.benchmarks:
            if "error_message" not in b and b.get("run_type", "iteration") == "iteration":
                times.setdefault((b["family"], b["n"]), []).append(b["real_time"])
        return {key: sorted(v)[len(v) // 2] for key, v in times.items()}

    @property
    def errors(self) -> list:
        return self.document["attnbench"].get("errors", [])

    @property
    def fits(self) -> list:
        return self.document["attnbench"].get("fits", [])

    def __repr__(self):
        parts = [f"{family}/n:{n} {ms:.4g} ms" for (family, n), ms in self.medians_ms().items()]
        return "BenchResult(" + ", ".join(parts + [f"error: {e}" for e in self.errors]) + ")"


def bench(fn, problems, convention="torch_sdpa", arrays="numpy", *, device="cpu", warmup=2, repetitions=5, name=None,
          check=True) -> BenchResult:
    """Times ``fn`` on each problem: ``warmup`` untimed calls, then ``repetitions`` timed ones
    (CUDA events around the call for CUDA tensors, the monotonic clock otherwise). Each problem is
    verified first when ``check`` (a wrong kernel's time is not a result)."""
    from ._bench import run_bench
    return BenchResult(run_bench(fn, _problems(problems), convention_of(convention), arrays, device, warmup, repetitions,
                                 _name_of(fn, name), check))
