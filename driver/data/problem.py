"""The record every problem source yields: a problem, its reference, and K candidate solutions.

Sources (`driver.data.sources`) produce `RawProblem`s without labels; `driver.data.labeling` fills
`labels` with verifier scores; `driver.data.builder` turns labeled problems into `SelectionTask`s.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional


class DataError(ValueError):
    """The data or the data config cannot be used (a bad row under bad_rows=error, a missing file, a token
    budget the model cannot read). The message is one line that says where and why; `driver.synth` prints it
    as `error: ...` without a traceback."""


@dataclass(frozen=True)
class RawProblem:
    """One source problem with its candidates.

    Attributes:
        id: unique id within the source (the unit of the train/held-out split).
        domain: "math" or "code".
        problem: the problem statement (code: the prompt, e.g. a signature and docstring).
        reference: math: the reference answer; code: the test program defining `check(candidate)`.
        candidates: K candidate solution texts (code: complete programs).
        candidate_answers: K final answers (math) or programs (code) the verifier judges.
        entry_point: code: the function under test; "" for math.
        labels: K verifier scores (1.0 / 0.0 or a unit-test pass fraction); None until labeled.
        origin: where it came from (a file:line for user files), for error messages.
    """
    id: str
    domain: str
    problem: str
    reference: str
    candidates: tuple
    candidate_answers: tuple
    entry_point: str = ""
    labels: Optional[tuple] = None
    origin: str = ""
    extras: dict = field(default_factory=dict, compare=False)

    def with_labels(self, labels) -> "RawProblem":
        return replace(self, labels=tuple(float(x) for x in labels))

    @property
    def num_correct(self) -> int:
        return sum(1 for x in (self.labels or ()) if x >= 1.0)

    def corpus_text(self) -> str:
        """All text of the problem (tokenizer training)."""
        return "\n".join([self.problem, *self.candidates])
