"""Best-of-N evaluation metrics: pass@k, max@k, majority@k, GenSelect@N, random@N, pass@N, bootstrap CIs.

Per-problem functions return one float; average them over problems and put :func:`bootstrap_ci` around the
average (resampling problems, the unit that is i.i.d.). The unbiased estimators follow Chen et al.,
"Evaluating Large Language Models Trained on Code" (arXiv 2107.03374) for pass@k and its order-statistics
generalisation to continuous rewards (max@k, arXiv 2510.23393).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Sequence

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples with ``c`` correct: ``1 - C(n-c, k) / C(n, k)`` (arXiv 2107.03374).

    Computed in the stable product form ``1 - prod_{i=n-c+1}^{n} (1 - k/i)``. Requires ``0 <= c <= n``,
    ``1 <= k <= n``.
    """
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def max_at_k(rewards: Sequence[float], k: int) -> float:
    """Unbiased max@k: expected max of ``k`` rewards drawn without replacement from the ``n >= k`` given ones.

    With rewards sorted ascending (1-based), ``r_(i)`` is the max of a random k-subset with probability
    ``C(i-1, k-1) / C(n, k)`` (arXiv 2510.23393; binary rewards reduce to :func:`pass_at_k`).
    """
    values = np.sort(np.asarray(rewards, dtype=np.float64))
    n = values.size
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    total = math.comb(n, k)
    probs = np.array([math.comb(i, k - 1) / total for i in range(n)], dtype=np.float64)
    return float(probs @ values)


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
