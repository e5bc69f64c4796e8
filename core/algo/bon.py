"""Best-of-N-aware advantage estimators: GRPO, log-likelihood of success, max@k, BoN-RLB, BoN-RLB(P), as small
pluggable objects.

Every estimator maps a group's rewards ``(num_groups, G)`` to advantages of the same shape, with one
convention: ``E[(1/G) sum_i A_i grad log pi(y_i)]`` is the gradient of the estimator's objective for the
prompt (exactly, or up to the factor stated). ``make_estimator(name, **params)`` builds one from config.

max@k (Bagirov et al., arXiv 2510.23393; binary case = PKPO, Walder & Karkhanis, arXiv 2505.15201)
    ``M = E[max(r(y_1..y_k))]``. Averaging ``max_S * sum_{j in S} grad log pi(y_j)`` over all k-subsets S of
    the n samples gives ``sum_i rt_i grad log pi(y_i)`` with, on rewards sorted ascending (1-based),
    ``rt_i = [C(i-1,k-1) r_(i) + sum_{j>i} C(j-2,k-2) r_(j)] / C(n,k)``: exactly unbiased for grad M.
    Baselines: ``"loo"`` subtracts ``k U_{-i}`` (``U_{-i}`` = unbiased max@k of the other n-1 samples): still
    exactly unbiased (it does not depend on y_i) and the advantages sum to exactly zero (needs n > k);
    ``"mean"`` (GRPO-style centring) gives ``(1 - k/n) grad M`` (zero for k = n); ``"none"``.
    Off-policy (samples from mu, ``rho_i = pi/mu = 1 + delta_i``): the IS-weighted subset average expanded to
    first order in delta gives the paper's off-policy weights ``w'`` (verified: bias O(delta^2)).

BoN-aware RL for binary rewards (Chow et al., arXiv 2412.15287), derived here
    With ``p = P_pi(fail)``, ``J = 1 - p^N`` and ``grad J = N p^(N-1) grad(1-p) = N p^(N-1) E_pi[1{succ} grad
    log pi]``. As ``E_pi[grad log pi] = 0``, weights ``a`` on successes and ``b`` on failures give
    ``E[(a 1{succ} + b 1{fail}) grad log pi] = (a - b) grad(1-p)``: unbiased iff ``a - b = N p^(N-1)``.
    Implemented: ``bon_rlb``  ``A = N p^(N-1) (r - (1-p))`` (centred, a = N p^N, b = -N p^(N-1)(1-p));
    ``bon_rlb_p``  ``A = N p^(N-1) r`` (positives only). The only change from pass@1 REINFORCE is the
    per-prompt weight ``N p^(N-1) <= N``: hard prompts count more, solved ones not at all. No singularity, so
    no clipping is needed (``p_min``/``p_max`` clip the weight only, to smooth a small-G estimate).
    p is unknown: ``p_estimate="group"`` plugs in ``p_hat = fails/G`` (biased for N >= 2: ``E[p_hat^(N-1)] !=
    p^(N-1)``, and p_hat depends on y_i; consistent as G grows). ``p_estimate="loo"`` uses
    ``q_i = C(F_{-i}, N-1) / C(G-1, N-1)`` (unbiased for p^(N-1), independent of y_i) and the others' mean
    as baseline: exactly unbiased, needs G >= N.
    The weights quoted for the paper, ``g+ = N p^(N-1)/(1-p^N)``, ``g- = N p/(1-p)``,
    ``g_P = N p^(N-1)(1-p)/(1-p^N)``, are right for a different sampling distribution: the sample that BoN
    SELECTS out of N draws (``pi_bon = pi (1-p^N)/(1-p)`` on successes, ``pi p^(N-1)`` on failures). There
    ``E_bon[g_P 1{succ} grad log pi] = grad J`` and ``E_bon[(g+ 1{succ} + g- 1{fail}) grad log pi] = grad J``,
    with ``g-`` entering with a PLUS sign (with a minus sign it is biased). On i.i.d. samples of pi, which is what
    our groups are, none of the three is unbiased, and the trainer never samples from pi_bon: a group of G >= N
    i.i.d. draws already contains BoN's choice, and ``p_estimate="loo"`` turns ALL of its samples into an exactly
    unbiased estimate of the same gradient, where the selected-sample form would keep one draw in N. So the quoted
    weights are not implemented here; tests/core/algo/test_bon.py keeps them as a test helper and proves every claim
    above by exact enumeration.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from core.algo.dapo import group_advantages


class AdvantageEstimator(Protocol):
    """One scoring method: group rewards ``(num_groups, G)`` -> advantages ``(num_groups, G)``."""

    def advantages(self, rewards: Tensor, seq_log_ratio: Tensor | None = None) -> Tensor:
        """``seq_log_ratio``: optional ``(num_groups, G)`` sum over response tokens of log pi - log mu."""
        ...

    @property
    def needs_seq_log_ratio(self) -> bool:
        """True when :meth:`advantages` must be given ``seq_log_ratio`` (off-policy max@k)."""
        ...


def _comb(a: int, b: int) -> int:
    """Binomial C(a, b), zero outside ``0 <= b <= a``."""
    return math.comb(a, b) if 0 <= b <= a else 0


def _coef(n: int, shift: int, kk: int, denom: int) -> Tensor:
    """``(n,)`` float64 ``[C(b - shift, kk) / denom for b in 0..n-1]`` (exact-int ratio, then rounded)."""
    return torch.tensor([_comb(b - shift, kk) / denom for b in range(n)], dtype=torch.float64)


def _suffix(x: Tensor) -> Tensor:
    """Exclusive suffix sum along the last dim: ``out[a] = sum_{b > a} x[b]``."""
    return torch.flip(torch.cumsum(torch.flip(x, [-1]), -1), [-1]) - x


def _prefix(x: Tensor) -> Tensor:
    """Exclusive prefix sum along the last dim: ``out[a] = sum_{b < a} x[b]``."""
    return torch.cumsum(x, -1) - x


def _in_sorted_order(rewards: Tensor, fn, *others: Tensor) -> Tensor:
    """Sort ``rewards (..., n)`` ascending (stable), apply ``fn(sorted, *others_permuted)``, undo the sort."""
    sorted_r, idx = torch.sort(rewards.to(torch.float64), dim=-1, stable=True)
    permuted = [torch.gather(o.to(torch.float64), -1, idx) for o in others]
    return torch.empty_like(sorted_r).scatter_(-1, idx, fn(sorted_r, *permuted))


def _check_k(n: int, k: int) -> None:
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")


def maxk_transformed_rewards(rewards: Tensor, k: int) -> Tensor:
    """On-policy max@k transformed rewards (arXiv 2510.23393, eq. for rt_i; PKPO arXiv 2505.15201).

    ``sum_i rt_i grad log pi(y_i)`` is an unbiased estimate of ``grad E[max of k samples]``; continuous rewards
    are fine and ties may be broken in any order. Args: ``rewards (..., n)`` with ``n >= k``.
    Returns: ``(..., n)`` float64, in the original sample order.
    """
    n = rewards.shape[-1]
    _check_k(n, k)
    total = math.comb(n, k)
    c_diag, c_up = _coef(n, 0, k - 1, total), _coef(n, 1, k - 2, total)
    return _in_sorted_order(rewards, lambda s: c_diag * s + _suffix(c_up * s))


def maxk_offpolicy_transformed_rewards(rewards: Tensor, deltas: Tensor, k: int) -> Tensor:
    """First-order off-policy max@k coefficients (arXiv 2510.23393, w'_ii and w'_ij).

    Samples come from mu, ``rho_i = pi(y_i)/mu(y_i) = 1 + delta_i``. With sorted positions (1-based)::

        w'_ii = C(i-1,k-1)(1+d_i) + C(i-2,k-2) sum_{l<i} d_l
        w'_ij = C(j-2,k-2)(1+d_i+d_j) + C(j-3,k-3) sum_{l<j, l!=i} d_l      (j > i)

    and ``out_i = sum_j w'_ij r_(j) / C(n,k)`` is the coefficient of ``grad log pi(y_i)`` (REINFORCE form):
    ``E_mu[sum_i out_i grad log pi(y_i)] = grad max@k(pi) + O(delta^2)``. ``deltas = 0`` gives
    :func:`maxk_transformed_rewards`. Args: ``rewards``, ``deltas`` ``(..., n)``. Returns ``(..., n)`` float64.
    """
    n = rewards.shape[-1]
    _check_k(n, k)
    total = math.comb(n, k)
    c_diag, c_up, c3 = _coef(n, 0, k - 1, total), _coef(n, 1, k - 2, total), _coef(n, 2, k - 3, total)

    def sorted_fn(s: Tensor, d: Tensor) -> Tensor:
        before = _prefix(d)  # sum_{l < a} d_l
        diag = s * (c_diag * (1 + d) + c_up * before)
        upper = _suffix(s * (c_up * (1 + d) + c3 * before)) + d * _suffix(s * (c_up - c3))
        return diag + upper

    return _in_sorted_order(rewards, sorted_fn, deltas)


def maxk_loo_estimate(rewards: Tensor, k: int) -> Tensor:
    """Leave-one-out unbiased max@k: ``out_i`` = U-statistic of E[max of k] over the OTHER n-1 samples.

    Sorted (1-based): ``U_{-i} = [sum_{j<i} C(j-1,k-1) r_(j) + sum_{j>i} C(j-2,k-1) r_(j)] / C(n-1,k)``
    (order statistics of the remaining sample). Args: ``rewards (..., n)``, ``n > k``. Returns ``(..., n)``.
    """
    n = rewards.shape[-1]
    _check_k(n - 1, k)
    total = math.comb(n - 1, k)
    c_low, c_high = _coef(n, 0, k - 1, total), _coef(n, 1, k - 1, total)
    return _in_sorted_order(rewards, lambda s: _prefix(c_low * s) + _suffix(c_high * s))


def _baseline_none(rewards: Tensor, k: int) -> Tensor:
    return torch.zeros_like(rewards, dtype=torch.float64)


def _baseline_mean(rewards: Tensor, k: int) -> Tensor:
    n = rewards.shape[-1]
    return (n * maxk_transformed_rewards(rewards, k)).mean(dim=-1, keepdim=True).expand(rewards.shape)


def _baseline_loo(rewards: Tensor, k: int) -> Tensor:
    return k * maxk_loo_estimate(rewards, k)


MAXK_BASELINES = {"none": _baseline_none, "mean": _baseline_mean, "loo": _baseline_loo}


@dataclass(frozen=True)
class GRPOEstimator:
    """DAPO's default: group-normalised rewards (:func:`core.algo.dapo.group_advantages`)."""

    eps: float = 1e-6
    scale_by_std: bool = True
    needs_seq_log_ratio = False

    def advantages(self, rewards: Tensor, seq_log_ratio: Tensor | None = None) -> Tensor:
        """``(num_groups, G) -> (num_groups, G)``; on-policy, ``seq_log_ratio`` is ignored."""
        return group_advantages(rewards, self.eps, self.scale_by_std)


@dataclass(frozen=True)
class LogLikEstimator:
    """Advantages for the gradient of ``log J`` (J = P(success), the per-prompt mean reward), not of ``J``:
    ``A_i = (r_i - mean(r)) / mean(r)`` within each group; a group with ``mean(r) <= floor`` gives zeros.

    Derivation: ``grad log J = grad J / J``; ``(1/G) sum_i (r_i - mean) grad log pi(y_i)`` estimates ``grad J``
    (the GRPO centring), and ``mean`` estimates ``J``. For binary rewards a success gets ``(1 - m)/m`` and a
    failure ``-1`` (m = the group's success rate): the gradient on a prompt is ``G (1 - m)`` times the
    cross-entropy gradient towards the successes' choice, so a prompt the policy mostly gets wrong (m small)
    pulls as hard as a supervised label would. GRPO's ``/ std`` weighs it by ``sqrt(m (1 - m))`` instead, which
    fades as the policy grows confident and leaves a confidently wrong policy in place (the absorbing state
    measured on the selector's one-token decision: on hedge-free pairs GRPO collapsed onto one index, held-out pair
    accuracy 0.40-0.49, where this estimator reached 0.63-0.65 in three seeds; BENCHMARKS.md). Maximising ``E[log J]``
    over prompts is maximum likelihood of success; rejection-sampling fine-tuning (supervised steps on the
    successful samples only) follows the same gradient without the centring. Rewards must be ``>= 0``.
    """

    floor: float = 1e-6
    needs_seq_log_ratio = False

    def advantages(self, rewards: Tensor, seq_log_ratio: Tensor | None = None) -> Tensor:
        """``(num_groups, G) -> (num_groups, G)``; on-policy, ``seq_log_ratio`` is ignored."""
        if rewards.dim() != 2 or rewards.shape[1] < 2:
            raise ValueError(f"rewards must be (num_groups, G>=2), got {tuple(rewards.shape)}")
        if bool((rewards < 0).any()):
            raise ValueError("the loglik estimator needs rewards >= 0 (J is a probability of success)")
        mean = rewards.mean(dim=1, keepdim=True)
        solved = mean > self.floor
        return torch.where(solved, (rewards - mean) / torch.where(solved, mean, torch.ones_like(mean)),
                           torch.zeros_like(rewards))


@dataclass(frozen=True)
class MaxKEstimator:
    """max@k advantages (arXiv 2510.23393): ``A_i = n rt_i - b_i`` so that ``E[(1/n) sum A grad log pi]``
    is ``grad max@k`` (``"loo"``/``"none"``) or ``(1 - k/n)`` of it (``"mean"``).

    ``off_policy``: the samples come from a behaviour policy mu that differs from the policy pi being trained
    (stale samples); ``advantages`` then needs ``seq_log_ratio`` (log pi/mu per sample, summed over tokens;
    clamped to ``|log rho| <= log_ratio_clip``), uses the paper's first-order ``w'`` and divides the result by
    ``rho_i``: the loss's own ratio multiplies it back, so the gradient coefficient of ``grad log pi(y_i)`` is
    ``n w'_i - rho_i b_i`` (the baseline stays exact). Without ``off_policy`` a given ratio is ignored.
    """

    k: int = 4
    baseline: str = "loo"
    off_policy: bool = False
    log_ratio_clip: float = 0.5

    def __post_init__(self) -> None:
        if self.baseline not in MAXK_BASELINES:
            raise ValueError(f"unknown max@k baseline {self.baseline!r}; valid: {sorted(MAXK_BASELINES)}")
        if self.k < 1 or not self.log_ratio_clip > 0:
            raise ValueError(f"need k >= 1 and log_ratio_clip > 0, got k={self.k}, "
                             f"log_ratio_clip={self.log_ratio_clip}")

    @property
    def needs_seq_log_ratio(self) -> bool:
        """Whether :meth:`advantages` must be given ``seq_log_ratio`` (the caller computes log pi - log mu)."""
        return self.off_policy

    def advantages(self, rewards: Tensor, seq_log_ratio: Tensor | None = None) -> Tensor:
        """``(num_groups, G) -> (num_groups, G)`` float64; ``seq_log_ratio`` ``(num_groups, G)`` when
        ``off_policy``."""
        n = rewards.shape[-1]
        base = MAXK_BASELINES[self.baseline](rewards, self.k)
        if not self.off_policy:
            return n * maxk_transformed_rewards(rewards, self.k) - base
        if seq_log_ratio is None or seq_log_ratio.shape != rewards.shape:
            got = None if seq_log_ratio is None else tuple(seq_log_ratio.shape)
            raise ValueError(f"off-policy max@k needs seq_log_ratio of shape {tuple(rewards.shape)}, got {got}")
        clip = self.log_ratio_clip
        rho = torch.exp(seq_log_ratio.to(torch.float64).clamp(-clip, clip))
        coef = maxk_offpolicy_transformed_rewards(rewards, rho - 1, self.k)
        return (n * coef - rho * base) / rho


def _check_binary(rewards: Tensor) -> None:
    if not bool(((rewards == 0) | (rewards == 1)).all()):
        raise ValueError("BoN-RLB needs binary 0/1 rewards; use 'maxk' for continuous or shaped rewards")


def bon_rlb_advantages(rewards: Tensor, n: int, fail_prob: Tensor, positive_only: bool = False) -> Tensor:
    """BoN-RLB advantages for i.i.d. samples of pi with a given failure probability (derived in the docstring).

    ``A = N p^(N-1) (r - (1 - p))``, or ``N p^(N-1) r`` when ``positive_only`` (BoN-RLB(P)); each sample's
    ``A_i grad log pi(y_i)`` is unbiased for ``grad (1 - p^N)`` when ``p`` is the true failure probability.
    Args: ``rewards (num_groups, G)`` in {0, 1}; ``fail_prob`` ``(num_groups,)`` or ``(num_groups, G)``.
    Returns: ``(num_groups, G)`` float64.
    """
    _check_binary(rewards)
    r = rewards.to(torch.float64)
    p = fail_prob.to(torch.float64)
    p = p.unsqueeze(-1) if p.dim() == 1 else p
    weight = n * p ** (n - 1)
    return weight * r if positive_only else weight * (r - (1 - p))


def bon_rlb_loo_advantages(rewards: Tensor, n: int, positive_only: bool = False) -> Tensor:
    """Exactly unbiased group version of :func:`bon_rlb_advantages` (needs ``G >= N``).

    ``A_i = N q_i (r_i - b_i)`` with ``q_i = C(F_{-i}, N-1) / C(G-1, N-1)`` (``F_{-i}`` failures among the
    other samples: unbiased for p^(N-1)) and ``b_i`` the others' success rate (0 when ``positive_only``).
    Args: ``rewards (num_groups, G)`` in {0, 1}. Returns ``(num_groups, G)`` float64.
    """
    _check_binary(rewards)
    g = rewards.shape[-1]
    if not 1 <= n <= g or g < 2:
        raise ValueError(f"p_estimate='loo' needs 1 <= N <= G and G >= 2, got N={n}, G={g}")
    r = rewards.to(torch.float64)
    fails_others = ((1 - r).sum(-1, keepdim=True) - (1 - r)).long()
    table = _coef(g, 0, n - 1, math.comb(g - 1, n - 1))  # table[f] = C(f, N-1) / C(G-1, N-1)
    q = table[fails_others]
    base = torch.zeros_like(r) if positive_only else (r.sum(-1, keepdim=True) - r) / (g - 1)
    return n * q * (r - base)


def _bon_group(est: "BoNRLBEstimator", rewards: Tensor) -> Tensor:
    """Plug-in ``p_hat = fails / G`` (Chow et al.); the weight's p is clipped to ``[p_min, p_max]``."""
    _check_binary(rewards)
    r = rewards.to(torch.float64)
    p_hat = 1 - r.mean(-1, keepdim=True)
    weight = est.n * p_hat.clamp(est.p_min, est.p_max) ** (est.n - 1)
    return weight * r if est.positive_only else weight * (r - (1 - p_hat))


def _bon_loo(est: "BoNRLBEstimator", rewards: Tensor) -> Tensor:
    return bon_rlb_loo_advantages(rewards, est.n, est.positive_only)


BON_P_ESTIMATES = {"group": _bon_group, "loo": _bon_loo}


@dataclass(frozen=True)
class BoNRLBEstimator:
    """BoN-aware RL, binary rewards: ``bon_rlb`` (two-sided) and ``bon_rlb_p`` (``positive_only``).

    ``n``: the N of the Best-of-N objective ``1 - p^N``. ``p_estimate``: ``"group"`` (plug-in failure
    fraction, weight clipped to ``[p_min, p_max]``) or ``"loo"`` (exactly unbiased, ``G >= n``).
    """

    n: int = 8
    positive_only: bool = False
    p_estimate: str = "group"
    p_min: float = 0.0
    p_max: float = 1.0
    needs_seq_log_ratio = False

    def __post_init__(self) -> None:
        if self.p_estimate not in BON_P_ESTIMATES:
            raise ValueError(f"unknown p_estimate {self.p_estimate!r}; valid: {sorted(BON_P_ESTIMATES)}")
        if self.n < 1 or not 0 <= self.p_min < self.p_max <= 1:
            raise ValueError(f"need n >= 1 and 0 <= p_min < p_max <= 1, got {self}")

    def advantages(self, rewards: Tensor, seq_log_ratio: Tensor | None = None) -> Tensor:
        """``(num_groups, G) -> (num_groups, G)`` float64; on-policy, ``seq_log_ratio`` is ignored."""
        return BON_P_ESTIMATES[self.p_estimate](self, rewards)


ESTIMATORS = {
    "grpo": GRPOEstimator,
    "loglik": LogLikEstimator,
    "maxk": MaxKEstimator,
    "bon_rlb": BoNRLBEstimator,
    "bon_rlb_p": functools.partial(BoNRLBEstimator, positive_only=True),
}


def make_estimator(name: str, **params) -> AdvantageEstimator:
    """Build the estimator registered as ``name`` in :data:`ESTIMATORS` with keyword ``params``."""
    if name not in ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {name!r}; valid names: {sorted(ESTIMATORS)}")
    try:
        return ESTIMATORS[name](**params)
    except TypeError as err:
        raise ValueError(f"bad parameters for estimator {name!r}: {err}") from None
