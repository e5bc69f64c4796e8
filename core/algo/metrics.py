"""Best-of-N evaluation metrics: pass@k, max@k, majority@k, GenSelect@N, random@N, pass@N, bootstrap CIs.

``pass_at_k`` and ``max_at_k`` are :mod:`core.algo.passk`'s (which also has the curves over k, majority@k
and BoN@k over subsets, and curve CIs); this module scores one problem's given answers.

Per-problem functions return one float; average them over problems and put :func:`bootstrap_ci` around the
average (resampling problems, the unit that is i.i.d.). The unbiased estimators follow Chen et al.,
"Evaluating Large Language Models Trained on Code" (arXiv 2107.03374) for pass@k and its order-statistics
generalisation to continuous rewards (max@k, arXiv 2510.23393).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence

import numpy as np

from core.algo.passk import max_at_k, pass_at_k  # noqa: F401  (one implementation: passk.py)


def majority_at_k(answers: Sequence[Hashable | None], correct: Sequence[bool]) -> float:
    """Majority vote over one problem's ``k`` sampled answers: correctness of the most frequent answer.

    ``answers[i]`` is the normalised final answer of sample i (None = unparsed: it does not vote) and
    ``correct[i]`` whether it is right. Ties between answers: the average correctness of the tied answers
    (the expected score of a uniform tie-break). No vote at all scores 0.
    """
    if len(answers) != len(correct):
        raise ValueError(f"{len(answers)} answers but {len(correct)} correctness flags")
    votes: dict[Hashable, list[bool]] = defaultdict(list)
    for answer, ok in zip(answers, correct):
        if answer is not None:
            votes[answer].append(bool(ok))
    if not votes:
        return 0.0
    top = max(len(v) for v in votes.values())
    tied = [v for v in votes.values() if len(v) == top]
    return float(np.mean([np.mean(v) for v in tied]))


def genselect_accuracy(chosen_correct: Sequence[bool]) -> float:
    """GenSelect@N (arXiv 2602.02143): fraction of problems whose selected candidate is correct.

    ``chosen_correct[j]``: whether the selector's choice on problem j was a correct candidate (a parse failure
    counts as False).
    """
    return float(np.mean(np.asarray(chosen_correct, dtype=np.float64))) if len(chosen_correct) else 0.0


def random_at_n(correct: Sequence[bool]) -> float:
    """random@N for one problem: expected accuracy of a uniform choice among N candidates = fraction correct."""
    if not len(correct):
        raise ValueError("random@N of zero candidates")
    return float(np.mean(np.asarray(correct, dtype=np.float64)))


def pass_at_n(correct: Sequence[bool]) -> float:
    """pass@N (oracle selector) for one problem: 1.0 if any of the N candidates is correct."""
    return float(any(bool(c) for c in correct))


def bootstrap_ci(
    per_problem_values: Sequence[float], n_boot: int = 1000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float, float]:
    """Percentile bootstrap over problems (Efron & Tibshirani 1993): ``(mean, lo, hi)``.

    Resamples the ``P`` per-problem values with replacement ``n_boot`` times; ``lo``/``hi`` are the
    ``alpha/2`` and ``1 - alpha/2`` quantiles of the resampled means. Deterministic for a given ``seed``.
    """
    values = np.asarray(per_problem_values, dtype=np.float64)
    if values.size == 0:
        raise ValueError("bootstrap_ci of zero problems")
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, values.size, size=(n_boot, values.size))].mean(axis=1)
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(values.mean()), float(lo), float(hi)


def unforced_rate(groups) -> dict:
    """{"unforced_judgment_rate": share of the groups' responses whose judgment the model wrote} where the response
    form forces the rest (`rollout.response_form.name=forced_judgment`: the groups carry `forced_judgments`); {}
    otherwise."""
    rollouts = [r for g in groups if "forced_judgments" in g.extras for r in g.rollouts]
    return {"unforced_judgment_rate": sum(not r.forced for r in rollouts) / len(rollouts)} if rollouts else {}
