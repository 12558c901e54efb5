"""
attnbench's C++ core (nanobind); use the attnbench package, which wraps it
"""

from attnbench import _fields as fields


class Problem:
    """
    One attention problem: shapes, masks, dtypes, data; prints as its repro string
    """

    def __init__(self, repro: str) -> None:
        """The problem a repro string describes (as Problem.parse)"""

    @staticmethod
    def parse(repro: str) -> Problem:
        """
        The problem a repro string describes (every required field given; ValueError naming what is wrong)
        """

    @staticmethod
    def from_json(text: str) -> Problem:
        """The problem a JSON document (to_json's) describes"""

    def to_json(self) -> str:
        """Every field as JSON text (the result files' `problem`)"""

    def with_operation(self, operation: str) -> Problem:
        """
        The same problem for another operation ("forward" or "backward": op=backward in its repro string)
        """

    def repro(self) -> str:
        """The one-line repro string that `--case` and Problem.parse read back"""

    def label(self) -> str:
        """A short label for tables"""

    def __str__(self) -> str: ...

    def __repr__(self) -> str: ...

    def __eq__(self, arg: Problem, /) -> bool: ...

    def __hash__(self) -> int: ...

    @property
    def batch(self) -> int: ...

    @property
    def h_q(self) -> int: ...

    @property
    def h_kv(self) -> int: ...

    @property
    def n_q(self) -> int: ...

    @property
    def n_k(self) -> int: ...

    @property
    def d_k(self) -> int: ...

    @property
    def d_v(self) -> int: ...

    @property
    def seed(self) -> int: ...

    @property
    def dtype(self) -> str: ...

    def dtype_of(self, role: str) -> str:
        """
        The dtype of a role (q k v bias o), its own where the problem mixes dtypes
        """

    @property
    def scale(self) -> float | None:
        """The explicit scale, or None for 1/sqrt(d_k)"""

    @property
    def sinks(self) -> list[float] | None:
        """
        Each query head's attention-sink logit (one more term of its rows' softmax denominator), or None
        """

    @property
    def settings(self) -> dict:
        """
        The score modifications' settings the case uses, by name ({'softcap': 30.0}, {'dropout_p': 0.1, 'dropout_seed': 3}); each is also an attribute (p.softcap), None where the case does not use it
        """

    def __getattr__(self, arg: str, /) -> object: ...

    @property
    def effective_scale(self) -> float: ...

    @property
    def regime(self) -> str: ...

    @property
    def layout(self) -> str: ...

    @property
    def operation(self) -> str: ...

    @property
    def window(self) -> object:
        """
        None, or (left, right, align): query i sees key j iff i + d - left <= j <= i + d + right (None: unbounded)
        """

    @property
    def causal(self) -> object:
        """"none", "top_left" or "bottom_right"; None for another window"""

    @property
    def rows(self) -> int: ...

    def visible_pairs(self) -> int:
        """Visible (query, key) pairs, counted exactly"""

    def flops(self) -> float:
        """2 b h_q P (d_k + d_v), P the visible pairs"""

    def flops_published(self) -> float:
        """4 b h n_q n_k d, halved for causal (the published convention)"""

    def bytes_min(self) -> float:
        """Q, K, V (and the mask) read once, O written once"""

    @property
def cases(name: str) -> list[Problem]:
    """
    A case set by name ("default", "quick") or a case file's path: one repro string per line
    """

def score_settings() -> list:
    """
    The score modifications' settings (core/README.md, "The score pipeline"): each one's name (the keyword judge(), reference() and the conventions use), its modification, and whether it is an integer (a seed)
    """

def make_inputs(problem: Problem) -> dict:
    """
    The problem's seeded inputs (the bits every implementation and the reference read) and its mask in parts
    """
