"""Stages 2-4 of one training step (driver/train.py calls them in this order): from scored rollout groups to
the learner's sharded batch, DAPO's data path between the verifier and the learner (arXiv 2503.14476,
section 3):

    2. `filter_groups`: drop groups older than the staleness bound (`core.algo.dapo.is_stale`), then dynamic
       sampling: keep groups whose raw rewards are not all equal (std > 0); a group with a failed
       verification (timeout or crash: reward 0 that is no wrong answer) is always dropped and counted.
       The collector (stage 1) refills the batch with fresh generation rounds against this filter.
    3. `shape_and_advantage`: overlong shaping (soft penalty added to the reward, or truncated responses
       masked out), advantages from the configured estimator (GRPO/DAPO, max@k, BoN-RLB), and one
       TrainSequence per response.
    4. `shard`: the sequences over learner ranks (a group's responses stay on one rank, so the learner
       computes their shared prompt once) with balanced token counts.

The token-level loss divides by the number of response tokens in the whole batch (all ranks), which is
computed here once and passed to every rank (`global_num_tokens`).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch

from actors.packing import count_loss_tokens, merge_identical, shard_sequences
from core.algo import dapo
from core.algo.bon import make_estimator
from core.config import estimator_params
from core.records import TrainSequence


def estimator_from_config(algo):
    """The advantage estimator named by `algo.advantage_estimator`, with every parameter from the config
    (`core.config.estimator_params`; validated when the config was loaded)."""
    return make_estimator(algo.advantage_estimator, **estimator_params(algo))


def dynamic_sampling(groups: list, enabled: bool) -> tuple:
    """Split groups into (kept, filtered) and count the reasons (metric labels such as 'all_wrong').

    A group with a failed verification (a rollout whose check timed out or crashed, `Rollout.verifier_failed`)
    is always filtered, reason 'verifier_failure', even with dynamic sampling off: its reward 0 is not a wrong
    answer, and training on it would push the policy away from a possibly correct choice. Otherwise, with
    `enabled`, groups whose rewards are all equal are filtered (DAPO dynamic sampling).
    """
    if not groups:
        return [], [], Counter()
    rewards = torch.tensor([g.rewards for g in groups], dtype=torch.float64)
    keep, reasons = dapo.dynamic_sampling_filter(rewards)
    keep = keep.tolist() if enabled else [True] * len(groups)
    for i, g in enumerate(groups):
        if g.verifier_failures:
            keep[i], reasons[i] = False, "verifier_failure"
    kept = [g for g, k in zip(groups, keep) if k]
    filtered = [g for g, k in zip(groups, keep) if not k]
    return kept, filtered, Counter(reasons)


@dataclass
class Filtered:
    """Stage 2's verdict on a list of groups: each one is kept, filtered (dynamic sampling or a failed
    verification; `reasons` counts the labels of kept and filtered groups) or stale."""
    kept: list
    filtered: list
    stale: list
    reasons: Counter


def filter_groups(groups: list, version: int, max_staleness: int, dynamic: bool) -> Filtered:
    """Stage 2: staleness first (`is_stale` against the learner's `version`), then `dynamic_sampling` on the
    groups that are fresh enough."""
    fresh = [g for g in groups if not dapo.is_stale(g.policy_version, version, max_staleness)]
    stale = [g for g in groups if dapo.is_stale(g.policy_version, version, max_staleness)]
    kept, filtered, reasons = dynamic_sampling(fresh, dynamic)
    return Filtered(kept, filtered, stale, reasons)


@dataclass
class Sequences:
    """Stage 3's output: one TrainSequence per response (groups in order, G each) and the batch's metrics."""
    sequences: list
    stats: dict = field(default_factory=dict)


@dataclass
class Batch:
    """What one learner step trains on. `shards[r]` goes to rank r; `global_num_tokens` is shared."""
    shards: list
    global_num_tokens: int
    stats: dict = field(default_factory=dict)


def _sampled_sum(values: list, sequence: TrainSequence) -> float:
    """Sum of per-token `values` (R,) over the tokens `sequence` trains (mask 1); written tokens are skipped."""
    return sum(v for v, m in zip(values, sequence.token_mask) if m)


def shape_and_advantage(groups: list, algo, max_response_tokens: int, policy_logprobs=None) -> Sequences:
    """Stage 3: overlong shaping, advantages and one TrainSequence per response of `groups` (each with G
    scored rollouts).

    `policy_logprobs(sequences) -> per-token log-probs` under the policy being trained (the learner's current
    weights; `Run.policy_logprobs`) is needed only by an off-policy estimator (`algorithm.maxk_off_policy`):
    its sequence log-ratio is `sum(policy log-probs) - sum(behaviour log-probs)` per response, over the tokens
    the policy sampled (`loss_mask` 1)."""
    if not groups:
        raise ValueError("shape_and_advantage needs at least one group")
    rollouts = [r for g in groups for r in g.rollouts]
    sizes = {len(g.rollouts) for g in groups}
    if len(sizes) != 1:
        raise ValueError(f"groups have different sizes {sorted(sizes)}; every group needs G rollouts")
    G = sizes.pop()
    raw = torch.tensor([g.rewards for g in groups], dtype=torch.float64)              # (num_groups, G)
    lengths = torch.tensor([r.response_length for r in rollouts], dtype=torch.float64)
    truncated = torch.tensor([r.truncated for r in rollouts], dtype=torch.bool)
    shaped = raw.clone()
    if not algo.overlong_filtering:
        penalty = dapo.overlong_penalty(lengths, max_response_tokens, algo.overlong_buffer_len,
                                        algo.overlong_penalty_factor)
        shaped = shaped + penalty.view(len(groups), G)
    estimator = estimator_from_config(algo)
    weights = (~truncated).double() if algo.overlong_filtering else torch.ones(len(rollouts), dtype=torch.float64)
    # a failed verification (timeout, crash) is no wrong answer: out of the loss (filter_groups drops such
    # groups before they get here; this guards callers that skip it)
    failed = torch.tensor([r.verifier_failed for r in rollouts], dtype=torch.bool)
    weights = weights.masked_fill(failed, 0.0)
    # one prompt list per group, shared by its G sequences: pickling (Ray) sends a shared object once, so each
    # prompt travels to the learner once per group, not G times (shards keep a group together)
    prompts = []
    for g in groups:
        shared = list(g.rollouts[0].prompt_token_ids)
        if any(r.prompt_token_ids != shared for r in g.rollouts[1:]):
            raise ValueError(f"group {g.task.prompt_id}: its rollouts have different prompt tokens")
        prompts += [shared] * len(g.rollouts)
    sequences = [
        TrainSequence(prompt_token_ids=p, response_token_ids=list(r.response_token_ids),
                     behaviour_logprobs=list(r.behaviour_logprobs), advantage=0.0, loss_weight=float(w),
                     policy_version=r.policy_version, allowed_token_ids=r.allowed_token_ids, loss_mask=r.loss_mask,
                     anchor_mask=r.anchor_mask)
        for r, p, w in zip(rollouts, prompts, weights.tolist())
    ]
    log_ratio = None
    if estimator.needs_seq_log_ratio:
        if policy_logprobs is None:
            raise ValueError(f"estimator {algo.advantage_estimator!r} is off-policy: shape_and_advantage needs "
                             f"policy_logprobs")
        current = policy_logprobs(sequences)
        log_ratio = torch.tensor([_sampled_sum(lp, s) - _sampled_sum(s.behaviour_logprobs, s)
                                  for lp, s in zip(current, sequences)], dtype=torch.float64).view(len(groups), G)
    advantages = estimator.advantages(shaped, seq_log_ratio=log_ratio)                 # (num_groups, G)
    for s, a in zip(sequences, advantages.reshape(-1).tolist()):
        s.advantage = float(a)
    stats = {
        "reward/mean": raw.mean().item(),
        "reward/shaped_mean": shaped.mean().item(),
        "advantage/abs_mean": advantages.abs().mean().item(),
        "response/mean_length": lengths.mean().item(),
        "response/truncated_fraction": truncated.double().mean().item(),
        "batch/groups": len(groups),
        "batch/sequences": len(sequences),
        "batch/response_tokens": count_loss_tokens(sequences),
        "batch/verifier_failures_masked": int(failed.sum()),
    }
    if log_ratio is not None:
        stats["offpolicy/seq_log_ratio_abs_mean"] = log_ratio.abs().mean().item()
        stats["offpolicy/clipped_fraction"] = (log_ratio.abs() > algo.maxk_log_ratio_clip).double().mean().item()
    return Sequences(sequences, stats)


def shard(sequences: Sequences, num_ranks: int) -> Batch:
    """Stage 4: the sequences over `num_ranks` learner ranks, identical ones merged (computed once, counted as
    often as they were sampled: `merge_identical`), and the token count every rank divides by."""
    merged = merge_identical(sequences.sequences)
    stats = {**sequences.stats, "batch/distinct_sequences": len(merged)}
    return Batch(shard_sequences(merged, num_ranks), count_loss_tokens(merged), stats)

