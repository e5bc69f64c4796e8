"""The user functions a config can name (core/plugins.py loads them): a reward function for the verifier pool, a
label function for data synthesis and a response form for the rollout workers. Their interfaces are defined here,
where the config rules, the verifier (actors/verifier/verifier_pool.py), the labeller (driver/data/user_labels.py)
and the model registry (driver/models/registry.py) all read them.

* `verifier.reward` (a section, core/rewards.py): `fn(problem, candidate, response, label, **extra, **params) ->
  float`, the score of the candidate a selector named, in [0, 1] (a bool counts as 1 or 0), the reward as it is.
  `candidate` is that candidate's text, `response` the selector's whole response, `label` the dataset's label of
  that candidate, `params` the section's keys besides `name`. Keywords it may take: REWARD_EXTRAS.
* `data.label_function` (a section, core/label_functions.py): `fn(problem, candidate, answer, **extra, **params) ->
  bool | float`, the label of one candidate while a dataset is built: True / 1.0 correct, False / 0.0 wrong, a
  number in between a partial score; `answer` is the row's reference answer (code: its tests), "" when the row has
  none; `params` the section's keys besides `name`. Keywords it may take: LABEL_EXTRAS.
* `rollout.response_form` (a section, core/response_forms.py): a registered form or a path to `fn(model_dir, cfg,
  **params) -> ResponseForm` (actors/rollout/response_forms.py), the form every rollout worker and serving replica
  samples a selector's responses with (`cfg`: the run's TrainConfig; `params`: the section's keys besides `name`);
  '' (default): the model's own form (its `response_form` hook).

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

    def check(self, params: tuple = ()):
        return takes_positional(len(self.positional), self.positional, params)

    def load(self, path: str, params: tuple = ()) -> Any:
        """The function `path` names; PluginError naming the key if it does not import or does not take the
        positional arguments and the keyword parameters `params` (a config section's)."""
        return load_object(path, self.key, self.check(params))


REWARD_EXTRAS = ("reference", "candidate_answer", "index", "num_candidates", "domain", "prompt_id", "problem_id",
                 "entry_point", "truncated")
REWARD_FUNCTION = Interface("verifier.reward.name", ("problem", "candidate", "response", "label"), REWARD_EXTRAS)

LABEL_EXTRAS = ("candidate_answer", "index", "domain", "problem_id", "entry_point")
LABEL_FUNCTION = Interface("data.label_function.name", ("problem", "candidate", "answer"), LABEL_EXTRAS)


RESPONSE_FORM = Interface("rollout.response_form.name", ("model_dir", "cfg"), ())


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


__all__ = ["Interface", "REWARD_FUNCTION", "LABEL_FUNCTION", "REWARD_EXTRAS", "LABEL_EXTRAS", "RESPONSE_FORM",
           "as_score"]
