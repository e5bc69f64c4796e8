"""A reward function (`verifier.reward.name`, core/rewards.py; its interface: core/user_functions.py) run for the
verifier pool.

`RewardFunction(path, processes, timeout_s, params=...)` loads the function once in the calling process (a path that
does not import or does not take the section's `params` as keywords is refused there, with the key), then calls it,
with the params, in `processes` long-lived worker processes
(`sandbox.workers.ProcessPool`, no memory cap: the user's code may load what it likes) under a killable deadline:
a call that hangs past `timeout_s` is a "timeout" verdict and its worker is replaced, a call that raises or returns
something other than a bool or a number in [0, 1] is an "error" verdict, never a silent zero. The worker gets the
dotted path and loads the function itself (`core.plugins.call_by_path`), with the caller's `sys.path`.

`stored_label` is a reward function shipped here: the dataset's label of the named candidate, for data whose labels
come from your own judge (`candidate_labels`, docs/data.md) and that has no reference answer to verify against.
"""
from __future__ import annotations

import sys
from functools import partial
from typing import Optional

from actors.verifier.math_check import ERROR, OK, ProcessPool, Verdict
from core.plugins import call_by_path, load_cached
from core.records import Rollout, SelectionTask
from core.user_functions import REWARD_FUNCTION, as_score


def stored_label(problem: str, candidate: str, response: str, label: float, **extra) -> float:
    """The dataset's label of the named candidate as its score (`verifier.reward.name=stored_label`)."""
    return float(label)


def reward_args(task: SelectionTask, index: int, rollout: Rollout) -> tuple:
    """(positional arguments, keyword extras) of one call: the named candidate `index` of `task` and `rollout`'s
    response (core/user_functions.py REWARD_FUNCTION)."""
    args = (task.problem, task.candidates[index], rollout.response_text, task.labels[index])
    extras = {"reference": task.reference, "candidate_answer": task.candidate_answers[index], "index": index,
              "num_candidates": task.num_candidates, "domain": task.domain, "prompt_id": task.prompt_id,
              "problem_id": task.problem_id, "entry_point": task.entry_point, "truncated": rollout.truncated}
    return args, extras


class RewardFunction:
    """The user's reward function in worker processes; see the module docstring."""

    def __init__(self, path: str, processes: int, timeout_s: float, context: str = "forkserver",
                 params: Optional[dict] = None):
        self.params = dict(params or {})
        REWARD_FUNCTION.load(path, tuple(self.params))  # PluginError naming verifier.reward.name, before any worker
        self.path, self.timeout_s = path, timeout_s
        self._search_path = tuple(sys.path)
        self._pool = ProcessPool(processes, context=context, preload=["core.plugins"], memory_mb=None,
                                 warmup=partial(load_cached, path, REWARD_FUNCTION.key,
                                                len(REWARD_FUNCTION.positional), self._search_path))

    def score(self, task: SelectionTask, index: int, rollout: Rollout) -> tuple:
        """(Verdict, seconds) of the named candidate `index` for `rollout`; never raises."""
        args, extras = reward_args(task, index, rollout)
        outcome = self._pool.run(call_by_path, (self.path, REWARD_FUNCTION.key, len(REWARD_FUNCTION.positional),
                                                args, extras, self._search_path, self.params), self.timeout_s)
        if outcome.status != OK:
            return Verdict(0.0, outcome.status, f"{self.path}: {outcome.value}"), outcome.seconds
        try:
            return Verdict(as_score(outcome.value), OK, self.path), outcome.seconds
        except ValueError as err:
            return Verdict(0.0, ERROR, f"{self.path} {err}"), outcome.seconds

    @property
    def replaced(self) -> int:
        return self._pool.replaced

    def alive(self) -> int:
        return self._pool.alive()

    def close(self) -> None:
        self._pool.close()


__all__ = ["RewardFunction", "stored_label", "reward_args"]
