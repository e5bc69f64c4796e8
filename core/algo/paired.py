"""Paired bootstrap CIs over problems: how much selector A beats selector B on the same prompts.

Two selectors read on the same P prompts give two per-prompt scores, `a[i]` and `b[i]` (1/0 for a chosen candidate's
correctness, or an expected accuracy such as majority@N's). The prompts of one problem are not independent (they
share its candidates' mistakes), so the unit resampled is the problem, as in `core.algo.metrics.bootstrap_ci`:

    d_p      = mean over the prompts i of problem p of (a[i] - b[i])     (= A's problem mean minus B's)
    estimate = mean over problems of d_p                                 (= A's accuracy minus B's, both by problem)
    CI       = percentile bootstrap of that mean, problems drawn with replacement (Efron & Tibshirani 1993)

Pairing is what makes it tighter than comparing two separate CIs: the problems both selectors find easy or hard
cancel in d_p. Over several runs (seeds) on their own prompts, `pooled_paired_bootstrap_ci` resamples problems within
each run and averages the runs' differences in each replicate: the CI of the mean difference over those runs, with
the runs taken as given. Pure: numpy only.
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np


def problem_differences(problem_ids: Sequence[Hashable], a: Sequence[float], b: Sequence[float]) -> np.ndarray:
    """The per-problem differences d_p (module docstring), in the order each problem first appears.

    Args:
        problem_ids: P problem ids, one per prompt; a, b: the P prompts' scores of the two selectors.
    Returns: float64 array of shape (Q,), Q = the number of distinct problems.
    """
    if not len(problem_ids) == len(a) == len(b):
        raise ValueError(f"{len(problem_ids)} problem ids for {len(a)} and {len(b)} scores")
    if not len(problem_ids):
        raise ValueError("a paired comparison of zero prompts")
    sums: dict = {}
    for pid, x, y in zip(problem_ids, a, b):
        total, count = sums.get(pid, (0.0, 0))
        sums[pid] = (total + float(x) - float(y), count + 1)
    return np.array([total / count for total, count in sums.values()], dtype=np.float64)


def paired_bootstrap_ci(problem_ids: Sequence[Hashable], a: Sequence[float], b: Sequence[float],
                        n_boot: int = 2000, alpha: float = 0.05, seed: int = 0) -> tuple[float, float, float]:
    """``(mean, lo, hi)`` of A's accuracy minus B's on the same prompts, resampling problems (prompts of one problem
    move together). ``lo``/``hi``: the ``alpha/2`` and ``1 - alpha/2`` quantiles of ``n_boot`` resampled means.
    Deterministic for a given ``seed``. Shapes: problem_ids, a, b of length P."""
    return pooled_paired_bootstrap_ci([(problem_ids, a, b)], n_boot, alpha, seed)


def pooled_paired_bootstrap_ci(runs: Sequence[tuple], n_boot: int = 2000, alpha: float = 0.05,
                               seed: int = 0) -> tuple[float, float, float]:
    """``(mean, lo, hi)`` of A minus B averaged over R runs, each run a ``(problem_ids, a, b)`` of its own P_r
    prompts. Each of the ``n_boot`` replicates resamples every run's problems with replacement (within that run)
    and averages the R runs' mean differences; the estimate is the mean of the R runs' own differences."""
    if not runs:
        raise ValueError("a pooled paired comparison of zero runs")
    rng = np.random.default_rng(seed)
    diffs = [problem_differences(*run) for run in runs]
    replicates = np.zeros(n_boot, dtype=np.float64)
    for d in diffs:
        replicates += d[rng.integers(0, d.size, size=(n_boot, d.size))].mean(axis=1)
    replicates /= len(diffs)
    lo, hi = np.quantile(replicates, [alpha / 2, 1 - alpha / 2])
    return float(np.mean([d.mean() for d in diffs])), float(lo), float(hi)
