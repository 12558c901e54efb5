"""The problem list's problems as the peer scripts see them (cpu_peers.py, torch_sdpa.py): the
repro string, FLOP and byte conventions of DESIGN.md and core/problem.cpp, the JSON record of a
problem, and the git revision for the context block. Imported by both scripts, run from this
folder."""
from __future__ import annotations

import math
import subprocess
from dataclasses import dataclass
from pathlib import Path

ELEMENT_BYTES = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2}


@dataclass(frozen=True)
class Problem:
    b: int
    h: int  # h_q = h_kv
    n_q: int
    n_k: int
    d_k: int
    d_v: int
    causal: str  # "none" or "top_left"
    dtype: str = "f32"
    regime: str = "diffuse"
    seed: int = 0

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.d_k)

    def repro(self) -> str:
        return (f"b={self.b} hq={self.h} hkv={self.h} nq={self.n_q} nk={self.n_k} dk={self.d_k} "
                f"dv={self.d_v} dtype={self.dtype} causal={self.causal} regime={self.regime} seed={self.seed}")

    def visible_pairs(self) -> int:
        """Exact count of visible (query, key) pairs over all batches and heads."""
        if self.causal == "none":
            per_head = self.n_q * self.n_k
        else:  # top-left: query i sees keys j <= i
            m = min(self.n_q, self.n_k)
            per_head = m * (m + 1) // 2 + (self.n_q - m) * self.n_k
        return self.b * self.h * per_head

    def flops_exact(self) -> float:
        return 2.0 * self.visible_pairs() * (self.d_k + self.d_v)

    def flops_published(self) -> float:
        full = 2.0 * self.b * self.h * self.n_q * self.n_k * (self.d_k + self.d_v)  # = 4·b·h·n_q·n_k·d
        return full if self.causal == "none" else full / 2.0

    def bytes_min(self) -> float:
        """Q, K, V read once and O written once, in the dtype."""
        return ELEMENT_BYTES[self.dtype] * self.b * self.h * (self.n_q * self.d_k + self.n_k * (self.d_k + self.d_v)
                                                               + self.n_q * self.d_v)

    def to_json(self) -> dict:
        return {"repro": self.repro(), "b": self.b, "h_q": self.h, "h_kv": self.h, "n_q": self.n_q,
                "n_k": self.n_k, "d_k": self.d_k, "d_v": self.d_v, "dtype": self.dtype,
                "causal": self.causal, "scale": self.scale, "scale_is_default": True,
                "regime": self.regime, "seed": self.seed, "visible_pairs": self.visible_pairs(),
                "flops_exact": self.flops_exact(), "flops_published": self.flops_published(),
                "bytes_min": self.bytes_min()}


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
