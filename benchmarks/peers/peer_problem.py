"""The harness's cases as the peer scripts read them (cpu_peers.py, torch_sdpa.py): the folder
`attnbench bench --peers` writes and passes as --cases DIR (benchmarks/peer_cases.hpp): the
problems as data, each with the FLOPs and bytes the harness computed (Problem::flops,
flops_published, bytes_min) and its q, k, v as .npy files, BHSD [b, h, n, d], holding the bits our
verify and bench see. Nothing here draws an input or derives a convention. Also the git revision
for the context block. Imported by both scripts, run from this folder."""
from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

MANIFEST = "peer_cases.json"
SCHEMA, VERSION = "attnbench.peer_cases", 1


class CasesError(Exception):
    """The --cases folder is missing, malformed, or asks for what the peers do not run."""


@dataclass(frozen=True)
class Case:
    role: str      # "check": a correctness check before timing; "timed"
    problem: dict  # the problem's JSON as the harness wrote it (core/problem.hpp's to_json)
    figures: dict  # visible_pairs, flops, flops_published, bytes_min, from the harness
    files: tuple   # absolute paths of q, k, v
    d_o_file: str | None = None  # a backward case's upstream gradient dO, BHSD like q

    @property
    def repro(self) -> str:
        return self.problem["repro"]

    def __getattr__(self, name):  # b, h_q, n_q, n_k, d_k, d_v, dtype, causal, regime, scale
        if name in ("role", "problem", "figures", "files", "d_o_file"):  # not set yet (copying, unpickling)
            raise AttributeError(name)
        key = {"h": "h_q"}.get(name, name)
        try:
            return self.problem[key]
        except KeyError:
            raise AttributeError(name) from None

    def flops(self) -> float:
        return self.figures["flops"]

    def flops_published(self) -> float:
        return self.figures["flops_published"]

    def bytes_min(self) -> float:
        return self.figures["bytes_min"]

    def inputs(self):
        """q, k, v as numpy arrays, BHSD, as written: float64, float32 or float16; bf16 cases
        are float32 holding exactly the bf16 values."""
        import numpy as np
        return tuple(np.load(path, allow_pickle=False) for path in self.files)

    @property
    def backward(self) -> bool:
        """Timed as the backward pass alone: the gradients of O with respect to Q, K, V given dO."""
        return self.problem.get("operation", "forward") == "backward"

    def d_o(self):
        """The upstream gradient dO of a backward case, BHSD, as written."""
        import numpy as np
        return np.load(self.d_o_file, allow_pickle=False)

    def record(self) -> dict:
        """The problem as a result record carries it: the harness's JSON and figures."""
        return {**self.problem, **self.figures}


def load_cases(folder: str) -> list[Case]:
    """The cases of a peer-cases folder, checks first, in the harness's order. Raises CasesError
    naming the fault; only what the peers run is accepted: h_q = h_kv, no mask or top-left causal,
    the default scale, no padding, boolean mask or bias. A backward case (operation backward) comes
    with its dO."""
    root = Path(folder)
    path = root / MANIFEST
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CasesError(f"cannot read {path} ({type(e).__name__}: {e}): --cases takes the folder "
                         "`attnbench bench --peers` writes") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or doc.get("version") != VERSION:
        raise CasesError(f"{path}: not schema {SCHEMA} version {VERSION}")
    cases = []
    for i, c in enumerate(doc.get("cases", [])):
        try:
            p = c["problem"]
            figures = {k: c[k] for k in ("visible_pairs", "flops", "flops_published", "bytes_min")}
            files = tuple(str(root / c[t]) for t in ("q", "k", "v"))
            if c["role"] not in ("check", "timed"):
                raise CasesError(f"{path}: case {i}: role {c['role']!r}")
            if p["h_q"] != p["h_kv"] or p.get("causal") not in ("none", "top_left"):
                raise CasesError(f"{path}: case {i} ({p['repro']}): the peers run h_q = h_kv with no mask or a "
                                 "top-left causal one")
            if any(p.get(k) for k in ("padding", "bool_mask", "bias")) or not p.get("scale_is_default", True):
                raise CasesError(f"{path}: case {i} ({p['repro']}): the peers run the default scale, with no padding, "
                                 "boolean mask or bias")
            d_o = str(root / c["d_o"]) if p.get("operation", "forward") == "backward" else None
        except (KeyError, TypeError) as e:
            raise CasesError(f"{path}: case {i} lacks {e}") from None
        cases.append(Case(c["role"], p, figures, files, d_o))
    if not any(c.role == "timed" for c in cases):
        raise CasesError(f"{path}: no timed case")
    return cases


def git_revision() -> str | None:
    """HEAD of this checkout, with -dirty when tracked files changed; None outside git."""
    try:
        root = Path(__file__).resolve().parents[2]
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        if rev.returncode != 0:
            return None
        return rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None
