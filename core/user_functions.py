"""The user functions a config can name (core/plugins.py loads them): a reward function for the verifier pool and a
label function for data synthesis. Their interfaces are defined here, where the config rules, the verifier
(actors/verifier.py) and the labeller (driver/data/user_labels.py) all read them.

* `verifier.reward_function`: `fn(problem, candidate, response, label, **extra) -> float`, the score of the
  candidate a selector named, in [0, 1] (a bool counts as 1 or 0). `candidate` is that candidate's text,
  `response` the selector's whole response, `label` the dataset's label of that candidate. Keywords it may take:
  REWARD_EXTRAS.
* `data.label_function`: `fn(problem, candidate, answer, **extra) -> bool | float`, the label of one candidate
  while a dataset is built: True / 1.0 correct, False / 0.0 wrong, a number in between a partial score; `answer`
  is the row's reference answer (code: its tests), "" when the row has none. Keywords it may take: LABEL_EXTRAS.

Pure: stdlib only.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

from core.plugins import load_object, takes_positional


@dataclass(frozen=True)
class Interface:
    """A user function's config key, the positional arguments it is called with, and the keywords it may take."""
    key: str
    positional: tuple
    extras: tuple

    def check(self):
        return takes_positional(len(self.positional), self.positional)

    def load(self, path: str) -> Any:
        """The function `path` names; PluginError naming the key if it does not import or fit."""
        return load_object(path, self.key, self.check())


REWARD_EXTRAS = ("reference", "candidate_answer", "index", "num_candidates", "domain", "prompt_id", "problem_id",
                 "entry_point", "truncated")
REWARD_FUNCTION = Interface("verifier.reward_function", ("problem", "candidate", "response", "label"), REWARD_EXTRAS)

LABEL_EXTRAS = ("candidate_answer", "index", "domain", "problem_id", "entry_point")
LABEL_FUNCTION = Interface("data.label_function", ("problem", "candidate", "answer"), LABEL_EXTRAS)


def as_score(value: Any) -> float:
    """A user function's result as a score in [0, 1]: a bool is 1.0 or 0.0, a number in [0, 1] itself; ValueError
    for anything else (None, a string, a number outside [0, 1], NaN)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, numbers.Real):  # int, float, numpy's scalars
        score = float(value)
        if not math.isnan(score) and 0.0 <= score <= 1.0:
            return score
    raise ValueError(f"returned {value!r}; expected a bool or a number in [0, 1]")


__all__ = ["Interface", "REWARD_FUNCTION", "LABEL_FUNCTION", "REWARD_EXTRAS", "LABEL_EXTRAS", "as_score"]
