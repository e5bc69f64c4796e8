"""DAPO: group advantages, dynamic sampling, overlong shaping, clipped token-level loss.

DAPO (Yu et al., "DAPO: An Open-Source LLM Reinforcement Learning System at Scale", arXiv 2503.14476) is
GRPO without the KL term plus four changes, each a small pure function here:

* clip-higher: the importance ratio is clipped to ``[1 - eps_low, 1 + eps_high]`` with ``eps_high > eps_low``
  so that low-probability tokens with positive advantage can still grow (keeps entropy up);
* dynamic sampling: groups whose rewards are all equal carry no GRPO signal and are dropped
  (:func:`dynamic_sampling_filter`); the driver keeps generating until the batch is full;
* token-level loss: per-token losses are summed over the whole batch and divided by the number of response
  tokens in the whole batch (:func:`clipped_policy_loss` returns the *sum*, :func:`token_level_mean` divides
  by the *global* count, so micro-batches and data-parallel ranks add up to the exact global mean);
* overlong reward shaping / filtering (:func:`overlong_penalty`, :func:`overlong_filter_mask`).

The dual clip (Ye et al., "Mastering Complex Control in MOBA Games with Deep RL", arXiv 1912.09729) follows
verl's ``compute_policy_loss``. Asynchronous training adds a staleness rule (:func:`is_stale`) and truncated
importance sampling (:func:`truncated_is_weights`), see the docstrings for which log-probs go where.

Shapes: ``B`` sequences, ``T`` response tokens (right-padded), ``G`` responses per prompt (group).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

#: Reason labels returned by :func:`dynamic_sampling_filter` (usable as metric label values).
REASONS = ("kept", "all_correct", "all_wrong", "all_equal")

_LOG_RATIO_CLAMP = 20.0  # as verl: exp(+-20) keeps ratios finite in float32


def group_advantages(rewards: Tensor, eps: float = 1e-6, scale_by_std: bool = True) -> Tensor:
    """GRPO/DAPO group-normalised advantages (DAPO eq. 4; DeepSeekMath arXiv 2402.03300).

    ``A_i = (r_i - mean(r)) / (std(r) + eps)`` within each group. ``std`` is the *unbiased* (Bessel-corrected,
    ``torch.std`` default) standard deviation, as in verl's ``compute_grpo_outcome_advantage`` on which the
    GenSelect paper trained. ``scale_by_std=False`` gives the Dr. GRPO variant ``r_i - mean(r)``.

    Args:
        rewards: ``(num_groups, G)`` float rewards, ``G >= 2``.
    Returns:
        ``(num_groups, G)`` advantages in the dtype of ``rewards``; an all-equal group gives zeros.
    """
    if rewards.dim() != 2 or rewards.shape[1] < 2:
        raise ValueError(f"rewards must be (num_groups, G>=2), got {tuple(rewards.shape)}")
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    if not scale_by_std:
        return centred
    return centred / (rewards.std(dim=1, keepdim=True) + eps)


def _reason(group: Tensor) -> str:
    """Label for an all-equal group ``(G,)``: all 1 -> all_correct, all 0 -> all_wrong, else all_equal."""
    if bool((group == 1).all()):
        return "all_correct"
    if bool((group == 0).all()):
        return "all_wrong"
    return "all_equal"


def dynamic_sampling_filter(rewards: Tensor) -> tuple[Tensor, list[str]]:
    """DAPO dynamic sampling (arXiv 2503.14476 eq. 11): keep a group iff its rewards are not all equal.

    A group with std 0 has zero GRPO advantage for every sample, so it only dilutes the batch.

    Args:
        rewards: ``(num_groups, G)``.
    Returns:
        ``keep``: ``(num_groups,)`` bool; ``reasons``: one label of :data:`REASONS` per group.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be (num_groups, G), got {tuple(rewards.shape)}")
    keep = rewards.amax(dim=1) > rewards.amin(dim=1)
    reasons = ["kept" if k else _reason(g) for k, g in zip(keep.tolist(), rewards)]
    return keep, reasons


def overlong_penalty(lengths: Tensor, max_len: int, buffer_len: int, factor: float = 1.0) -> Tensor:
    """DAPO soft overlong punishment (arXiv 2503.14476 eq. 13), added to the task reward.

    ``R(L) = min(0, -(L - (L_max - L_buf)) / L_buf) * factor``: 0 while ``L <= L_max - L_buf``, falling
    linearly to ``-factor`` at ``L = L_max`` (beyond ``L_max`` it keeps falling linearly, as verl does).

    Args:
        lengths: ``(B,)`` response lengths in tokens.
    Returns:
        ``(B,)`` float64 penalties ``<= 0``.
    """
    if not 0 < buffer_len <= max_len:
        raise ValueError(f"need 0 < buffer_len <= max_len, got {buffer_len}, {max_len}")
    exceed = lengths.to(torch.float64) - (max_len - buffer_len)
    return torch.clamp(-exceed / buffer_len, max=0.0) * factor


def overlong_filter_mask(truncated: Tensor, response_mask: Tensor | None = None) -> Tensor:
    """DAPO overlong filtering (arXiv 2503.14476 sec. 3.4): truncated responses are masked out of the loss.

    Args:
        truncated: ``(B,)`` bool, True where generation hit the length limit.
        response_mask: optional ``(B, T)`` loss mask to filter.
    Returns:
        ``(B,)`` bool keep-mask, or ``response_mask`` with truncated rows zeroed when it is given.
    """
    keep = ~truncated.to(torch.bool)
    if response_mask is None:
        return keep
    return response_mask * keep.unsqueeze(1).to(response_mask.dtype)


def _masked_mean(x: Tensor, mask: Tensor) -> float:
    """Mean of ``x`` over ``mask`` (same shape) as a float; 0.0 for an empty mask."""
    denom = float(mask.sum())
    return float(torch.where(mask > 0, x * mask, torch.zeros_like(x)).sum()) / denom if denom > 0 else 0.0


def clipped_policy_loss(
    logprobs: Tensor,
    behaviour_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    dual_clip_c: float | None = 10.0,
    is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Clip-higher PPO loss with dual clip, summed over tokens (DAPO eq. 10; dual clip arXiv 1912.09729).

    Per token, with ``r = exp(logprobs - behaviour_logprobs)``::

        l = max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high))        # PPO with clip-higher
        l = min(l, -A c)   where A < 0                               # dual clip (verl compute_policy_loss)
        l = l * is_weights                                           # truncated IS, when given

    ``behaviour_logprobs`` are the "old" log-probs of the ratio: the rollout engine's (behaviour policy) in the
    plain setting, or the learner's *proximal* recompute at the start of the step in the decoupled/TIS
    setting, where ``is_weights = truncated_is_weights(rollout_logprobs, proximal_logprobs)``.

    Args:
        logprobs: ``(B, T)`` log-probs of the response tokens under the current policy (with grad).
        behaviour_logprobs: ``(B, T)`` old log-probs (no grad needed; detached here).
        advantages: ``(B,)`` or ``(B, T)``.
        mask: ``(B, T)`` bool/float, 1 on response tokens that count.
        dual_clip_c: ``c > 1``, or None to disable the dual clip.
        is_weights: optional ``(B, T)`` per-token weights (detached here).
    Returns:
        ``loss_token_sum``: scalar, the SUM of per-token losses over unmasked tokens (feed it to
        :func:`token_level_mean`); ``stats``: floats (masked means over this call's tokens, and ``num_tokens``).
    """
    if dual_clip_c is not None and dual_clip_c <= 1.0:
        raise ValueError(f"dual_clip_c must be > 1, got {dual_clip_c}")
    mask = mask.to(logprobs.dtype)
    adv = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
    adv = adv.detach().to(logprobs.dtype).expand_as(logprobs)
    log_ratio = torch.where(mask > 0, logprobs - behaviour_logprobs.detach(), 0.0)  # padding may hold inf/nan
    log_ratio = torch.clamp(log_ratio, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    loss_unclipped = -adv * ratio
    loss_clipped = -adv * torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    loss = torch.maximum(loss_unclipped, loss_clipped)
    dual = torch.zeros_like(mask, dtype=torch.bool)
    if dual_clip_c is not None:
        dual_bound = -adv * dual_clip_c
        dual = (adv < 0) & (loss > dual_bound)
        loss = torch.where(adv < 0, torch.minimum(loss, dual_bound), loss)
    if is_weights is not None:
        loss = loss * is_weights.detach().to(loss.dtype)
    loss_token_sum = torch.where(mask > 0, loss * mask, 0.0).sum()
    with torch.no_grad():
        stats = {
            "clip_frac": _masked_mean((loss_clipped > loss_unclipped).to(mask.dtype), mask),
            "clip_frac_high": _masked_mean(((adv > 0) & (ratio > 1 + eps_high)).to(mask.dtype), mask),
            "clip_frac_low": _masked_mean(((adv < 0) & (ratio < 1 - eps_low)).to(mask.dtype), mask),
            "dual_clip_frac": _masked_mean(dual.to(mask.dtype), mask),
            "approx_kl": _masked_mean(-log_ratio, mask),
            "ratio_mean": _masked_mean(ratio, mask),
            "num_tokens": float(mask.sum()),
        }
    return loss_token_sum, stats


def token_level_mean(loss_token_sum: Tensor, global_num_tokens: int | float | Tensor, grad_divisor: int = 1) -> Tensor:
    """DAPO token-level aggregation (arXiv 2503.14476 eq. 12), exact under any sharding.

    ``loss = loss_token_sum * grad_divisor / global_num_tokens``. ``global_num_tokens`` is the number of loss
    tokens in the WHOLE optimizer-step batch: all micro-batches on all data-parallel ranks (all-reduce the
    local counts once before the step). Then ``sum over micro-batches and ranks of the returned losses`` (and
    of their gradients) equals the global token mean, whatever the split. ``grad_divisor`` undoes a divide the
    framework applies later: the DP world size when gradients are *averaged* across ranks (DDP / DeepSpeed),
    times the accumulation steps when the engine divides the loss by them (DeepSpeed ``backward``).

    Args:
        loss_token_sum: scalar tensor from :func:`clipped_policy_loss`.
        global_num_tokens: positive token count of the whole step.
    Returns:
        scalar tensor.
    """
    if float(global_num_tokens) <= 0:
        raise ValueError(f"global_num_tokens must be positive, got {global_num_tokens}")
    return loss_token_sum * (grad_divisor / global_num_tokens)


def truncated_is_weights(behaviour_logprobs: Tensor, proximal_logprobs: Tensor, cap: float = 2.0) -> Tensor:
    """Truncated importance-sampling weights for stale or engine-mismatched samples (TIS, as in verl).

    ``w = min(pi_prox / pi_behav, cap)`` per token, detached, where

    * ``behaviour_logprobs``: ``(B, T)`` log-probs reported by the rollout engine that generated the tokens
      (policy version ``v``, the behaviour policy ``pi_behav``);
    * ``proximal_logprobs``: ``(B, T)`` log-probs the learner recomputes for the same tokens with its weights
      at the START of the step (version ``t >= v``, no grad), ``pi_prox``.

    The PPO ratio is then taken against ``pi_prox`` (pass ``proximal_logprobs`` as ``behaviour_logprobs`` to
    :func:`clipped_policy_loss`) and ``w`` multiplies each token's loss: the decoupled objective of AReaL
    (arXiv 2505.24298) with verl's truncation (Yao et al. 2025, "Your efficient RL framework secretly brings
    you off-policy RL training"), which corrects both staleness and vLLM-vs-learner numerics.

    Returns:
        ``(B, T)`` weights in ``(0, cap]``.
    """
    if cap <= 0:
        raise ValueError(f"cap must be positive, got {cap}")
    log_w = (proximal_logprobs - behaviour_logprobs).detach()
    return torch.exp(torch.clamp(log_w, -_LOG_RATIO_CLAMP, math.log(cap)))


def is_stale(sample_version: int, current_version: int, max_staleness: int) -> bool:
    """Bounded-staleness rule (prime-rl ``max_off_policy_steps``, AReaL ``max_head_offpolicyness``).

    Versions count optimizer steps: weights of version ``v`` are the result of ``v`` updates. A sample generated
    by policy version ``v`` may be trained on by the learner at version ``t`` (the step that turns ``t`` into
    ``t + 1``) iff ``t - v <= max_staleness``; it is stale (drop and count it) otherwise. ``max_staleness = 0``
    is synchronous on-policy training, ``1`` is one-step-off-policy. A sample from the future (``v > t``) is a
    bug and raises.
    """
    if max_staleness < 0 or sample_version > current_version:
        raise ValueError(f"bad versions: sample {sample_version}, learner {current_version}, s={max_staleness}")
    return current_version - sample_version > max_staleness
