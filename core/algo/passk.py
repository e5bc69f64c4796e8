"""Evaluation of a generator the way the Best-of-N papers report it: curves over k of pass@k, max@k,
majority@k and BoN@k (a given selector), each estimated from ``n >= k`` samples per problem, with percentile
bootstrap confidence intervals over problems.

Every estimator here is an average over the ``C(n, k)`` k-subsets of one problem's ``n`` i.i.d. samples (a
U-statistic): each k-subset is itself k i.i.d. samples, so the average is an UNBIASED estimate of the metric
of k fresh samples. pass@k and max@k (and BoN@k with a score-based selector) have closed forms over the
subsets; majority@k and BoN@k with an arbitrary choice function average over the subsets themselves: all of
them when there are at most ``max_exact``, else ``draws`` uniformly random k-subsets (without replacement
inside a subset; a seeded Monte Carlo estimate of the same average, still unbiased). Nothing here
resamples WITH replacement except the bootstrap over problems.

Shapes: one problem is ``(n,)``; a set of problems is ``(P, n)`` (the same n for every problem); a curve is
``(P, len(ks))``. Pure: numpy and the standard library.

Papers:
  pass@k   Chen et al., "Evaluating Large Language Models Trained on Code", arXiv 2107.03374 (eq. 1).
  max@k    Bagirov et al., arXiv 2510.23393: E[max of k rewards]; continuous rewards; binary = pass@k.
  maj@k    Wang et al., "Self-Consistency", arXiv 2203.11171 (majority vote over sampled answers).
  BoN@k    Chow et al., arXiv 2412.15287 (Best-of-N with a verifier/selector); GenSelect arXiv 2602.02143.
  CIs      Efron & Tibshirani, "An Introduction to the Bootstrap" (1993): percentile bootstrap.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Hashable, Sequence

import numpy as np


def _check_k(n: int, k: int) -> None:
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")


def _ks(ks: Sequence[int] | int, n: int) -> list[int]:
    ks = list(range(1, ks + 1)) if isinstance(ks, int) else [int(k) for k in ks]
    for k in ks:
        _check_k(n, k)
    return ks


# ------------------------------------------------------------------------------------------ pass@k, max@k
def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with ``c`` correct out of ``n`` samples (Chen et al. 2021, eq. 1):
    ``1 - C(n-c, k) / C(n, k)``, in the stable product form ``1 - prod_{i=n-c+1}^{n} (1 - k/i)``."""
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    _check_k(n, k)
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def pass_at_k_curve(correct: np.ndarray, ks: Sequence[int] | int) -> np.ndarray:
    """pass@k for every problem and every k: ``correct (P, n)`` booleans (or 0/1) -> ``(P, len(ks))``.

    ``ks``: the k values, or an int K for 1..K (each ``<= n``)."""
    correct = np.asarray(correct)
    if correct.ndim != 2:
        raise ValueError(f"correct must be (P, n), got shape {correct.shape}")
    n = correct.shape[1]
    ks = _ks(ks, n)
    counts = (correct != 0).sum(axis=1)
    return np.array([[pass_at_k(n, int(c), k) for k in ks] for c in counts], dtype=np.float64).reshape(-1, len(ks))


def max_at_k_weights(n: int, k: int) -> np.ndarray:
    """``(n,)`` float64: ``w_i = C(i-1, k-1) / C(n, k)`` for sorted positions i = 1..n (arXiv 2510.23393).

    ``w_i`` is the probability that the i-th smallest of n values is the maximum of a uniformly random
    k-subset; the weights sum to 1. Computed as exact integer ratios (no overflow for any n)."""
    _check_k(n, k)
    total = math.comb(n, k)
    return np.array([math.comb(i, k - 1) / total for i in range(n)], dtype=np.float64)


def max_at_k(rewards: Sequence[float], k: int) -> float:
    """Unbiased max@k of one problem (arXiv 2510.23393): ``sum_i w_i r_(i)`` over the rewards ``(n,)`` sorted
    ascending, ``w`` from :func:`max_at_k_weights`. Binary rewards give :func:`pass_at_k`."""
    values = np.sort(np.asarray(rewards, dtype=np.float64))
    return float(max_at_k_weights(values.size, k) @ values)


def max_at_k_curve(rewards: np.ndarray, ks: Sequence[int] | int) -> np.ndarray:
    """max@k for every problem and k: ``rewards (P, n)`` -> ``(P, len(ks))`` (one sort per problem)."""
    rewards = np.asarray(rewards, dtype=np.float64)
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be (P, n), got shape {rewards.shape}")
    n = rewards.shape[1]
    weights = np.stack([max_at_k_weights(n, k) for k in _ks(ks, n)])  # (K, n)
    return np.sort(rewards, axis=1) @ weights.T


# ---------------------------------------------------------------------------------------- subsets of n
def k_subsets(n: int, k: int, max_exact: int = 20_000, draws: int = 4_000, seed: int = 0) -> tuple[np.ndarray, bool]:
    """The k-subsets of ``range(n)`` that the subset averages run over: ``(S, k)`` int indices and whether they
    are ALL ``C(n, k)`` subsets (``exact``) or ``draws`` uniformly random ones (each without repeated
    indices; seeded, so the estimate is reproducible)."""
    _check_k(n, k)
    if math.comb(n, k) <= max_exact:
        return np.array(list(itertools.combinations(range(n), k)), dtype=np.int64).reshape(-1, k), True
    rng = np.random.default_rng(seed)
    return np.argsort(rng.random((draws, n)), axis=1)[:, :k], False


def _encode(answers: Sequence[Hashable | None]) -> np.ndarray:
    """Answers -> class ids (first occurrence order); None (unparsed) -> -1."""
    ids: dict[Hashable, int] = {}
    return np.array([-1 if a is None else ids.setdefault(a, len(ids)) for a in answers], dtype=np.int64)


def majority_scores(answers: Sequence[Hashable | None], correct: Sequence[bool], subsets: np.ndarray) -> np.ndarray:
    """Majority vote on each subset: ``subsets (S, k)`` indices into the ``(n,)`` answers -> ``(S,)`` scores.

    An unparsed answer (None) does not vote; a tie scores the mean correctness of the tied answers (the
    expected score of a uniform tie-break); no vote at all scores 0. Same rules as
    ``core.algo.metrics.majority_at_k`` (which scores one list of answers)."""
    if len(answers) != len(correct):
        raise ValueError(f"{len(answers)} answers but {len(correct)} correctness flags")
    ids = _encode(answers)
    num_classes = int(ids.max()) + 1 if ids.size and ids.max() >= 0 else 0
    if num_classes == 0:
        return np.zeros(len(subsets), dtype=np.float64)
    onehot = np.zeros((ids.size, num_classes), dtype=np.float64)
    voted = ids >= 0
    onehot[np.nonzero(voted)[0], ids[voted]] = 1.0
    # correctness of a class: samples with the same answer should agree; take their mean to be safe
    ok = np.asarray(correct, dtype=np.float64)
    class_ok = (onehot * ok[:, None]).sum(0) / np.maximum(onehot.sum(0), 1.0)
    votes = onehot[subsets].sum(axis=1)                                  # (S, classes)
    top = votes.max(axis=1, keepdims=True)
    tied = (votes == top) & (top > 0)
    return np.where(top[:, 0] > 0, (tied * class_ok).sum(1) / np.maximum(tied.sum(1), 1), 0.0)


def majority_at_k(answers: Sequence[Hashable | None], correct: Sequence[bool], k: int, max_exact: int = 20_000,
                  draws: int = 4_000, seed: int = 0) -> float:
    """majority@k of one problem (self-consistency, arXiv 2203.11171): the expected majority-vote score of k
    samples, averaged over the k-subsets of the ``n`` given samples (``answers``, ``correct``: ``(n,)``).

    EXPECTED OVER SUBSETS, not bootstrap: exact over all ``C(n, k)`` subsets when there are at most
    ``max_exact``, else over ``draws`` random k-subsets (:func:`k_subsets`). Either way unbiased for the
    majority@k of k fresh samples (a with-replacement bootstrap would not be: it repeats samples)."""
    subsets, _ = k_subsets(len(answers), k, max_exact, draws, seed)
    return float(majority_scores(answers, correct, subsets).mean())


def majority_at_k_curve(answers: Sequence[Sequence[Hashable | None]], correct: np.ndarray, ks: Sequence[int] | int,
                        max_exact: int = 20_000, draws: int = 4_000, seed: int = 0) -> np.ndarray:
    """:func:`majority_at_k` for every problem and k: ``answers`` P lists of n, ``correct (P, n)`` ->
    ``(P, len(ks))``. The same subsets (same seed) serve every problem of one k."""
    correct = np.asarray(correct)
    n = correct.shape[1]
    ks = _ks(ks, n)
    out = np.empty((len(answers), len(ks)), dtype=np.float64)
    for j, k in enumerate(ks):
        subsets, _ = k_subsets(n, k, max_exact, draws, seed + k)
        for p, (ans, ok) in enumerate(zip(answers, correct)):
            out[p, j] = majority_scores(ans, ok, subsets).mean()
    return out


# ------------------------------------------------------------------------------------------------ BoN@k
def bon_at_k_scores(scores: Sequence[float], rewards: Sequence[float], k: int) -> float:
    """BoN@k of one problem with a SCORING selector (a reward model or verifier score): the expected reward
    of the highest-scored of k samples, over the k-subsets of the ``n`` given ones (closed form).

    Sorting by score ascending, the i-th lowest is chosen with probability ``C(i-1,k-1)/C(n,k)`` (as in
    max@k); equal scores are a uniform tie-break, which in expectation gives each member of a block of tied
    scores the block's mean reward. Args: ``scores``, ``rewards`` ``(n,)``. With ``scores = rewards`` it is
    :func:`max_at_k` (the oracle selector)."""
    s = np.asarray(scores, dtype=np.float64)
    r = np.asarray(rewards, dtype=np.float64)
    if s.shape != r.shape or s.ndim != 1:
        raise ValueError(f"scores {s.shape} and rewards {r.shape} must both be (n,)")
    order = np.argsort(s, kind="stable")
    s, r = s[order], r[order]
    _, block, counts = np.unique(s, return_inverse=True, return_counts=True)
    block_mean = np.bincount(block, weights=r) / counts
    return float(max_at_k_weights(r.size, k) @ block_mean[block])


Chooser = Callable[[tuple], "int | None"]


def bon_at_k(rewards: Sequence[float], k: int, choose: Chooser, max_exact: int = 20_000, draws: int = 4_000,
             seed: int = 0) -> float:
    """BoN@k of one problem with ANY selector: ``choose(indices)`` gets a k-tuple of sample indices (into the
    ``(n,)`` rewards, in increasing order) and returns the chosen index (one of them), or None for no choice
    (a parse failure: scores 0). The score is the chosen sample's reward, averaged over the k-subsets: all
    of them up to ``max_exact``, else ``draws`` random ones (:func:`k_subsets`), so ``choose`` is called
    once per subset (a GenSelect selector: one prompt per subset, candidates shuffled by the caller).

    Special cases: ``choose = argmax reward`` is :func:`max_at_k` (the oracle, pass@k for binary rewards);
    a uniform random choice is the mean reward (random@k); a scoring selector is :func:`bon_at_k_scores`."""
    r = np.asarray(rewards, dtype=np.float64)
    subsets, _ = k_subsets(r.size, k, max_exact, draws, seed)
    total = 0.0
    for subset in subsets:
        picked = tuple(int(i) for i in subset)
        chosen = choose(picked)
        if chosen is None:
            continue
        if chosen not in picked:
            raise ValueError(f"choose({picked}) returned {chosen!r}, not one of the indices it was given")
        total += r[chosen]
    return total / len(subsets)


# ------------------------------------------------------------------------------------- bootstrap over P
def bootstrap_curve_ci(per_problem: np.ndarray, n_boot: int = 1000, alpha: float = 0.05,
                       seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Percentile bootstrap over problems (Efron & Tibshirani 1993) for a whole curve: ``per_problem (P, K)``
    (one row per problem, e.g. from :func:`pass_at_k_curve`) -> ``(mean, lo, hi)``, each ``(K,)``.

    Problems are the i.i.d. unit, so they are resampled with replacement, ``n_boot`` times, the SAME rows for
    every column: a curve that is monotone in k for every problem stays monotone in ``lo`` and ``hi``.
    ``lo``/``hi`` are the ``alpha/2`` and ``1 - alpha/2`` quantiles of the resampled means; seeded."""
    values = np.asarray(per_problem, dtype=np.float64)
    if values.ndim == 1:
        values = values[:, None]
    if values.ndim != 2 or values.shape[0] == 0:
        raise ValueError(f"per_problem must be (P, K) with P >= 1, got shape {values.shape}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, values.shape[0], size=(n_boot, values.shape[0]))
    means = values[rows].mean(axis=1)                                    # (n_boot, K)
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2], axis=0)
    return values.mean(axis=0), lo, hi
