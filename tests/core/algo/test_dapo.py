"""Tests for core.algo.dapo: advantages, dynamic sampling, overlong shaping, clipped loss, aggregation."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from core.algo import dapo

F64 = torch.float64


# ---------------------------------------------------------------- group advantages


def test_group_advantages_uses_unbiased_std():
    rewards = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.2, 0.4, 0.6, 0.8]], dtype=F64)
    for row, adv in zip(rewards, dapo.group_advantages(rewards, eps=0.0)):
        mean = sum(row.tolist()) / 4
        std = math.sqrt(sum((x - mean) ** 2 for x in row.tolist()) / 3)
        torch.testing.assert_close(adv, (row - mean) / std)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.floats(-5, 5), min_size=4, max_size=4), min_size=1, max_size=5))
def test_group_advantages_properties(rows):
    rewards = torch.tensor(rows, dtype=F64)
    adv = dapo.group_advantages(rewards)
    assert adv.shape == rewards.shape and torch.isfinite(adv).all()
    torch.testing.assert_close(adv.sum(1), torch.zeros(len(rows), dtype=F64), atol=1e-6, rtol=0)
    torch.testing.assert_close(dapo.group_advantages(rewards[:, [2, 0, 3, 1]]), adv[:, [2, 0, 3, 1]])
    torch.testing.assert_close(dapo.group_advantages(rewards, scale_by_std=False), rewards - rewards.mean(1, True))


def test_group_advantages_all_equal_is_zero_and_needs_two_samples():
    assert torch.equal(dapo.group_advantages(torch.ones(3, 5)), torch.zeros(3, 5))
    with pytest.raises(ValueError):
        dapo.group_advantages(torch.ones(3, 1))


# ---------------------------------------------------------------- dynamic sampling

DYNAMIC_SAMPLING_TABLE = [
    ([1.0, 1.0, 1.0], False, "all_correct"),
    ([0.0, 0.0, 0.0], False, "all_wrong"),
    ([0.5, 0.5, 0.5], False, "all_equal"),
    ([-0.2, -0.2, -0.2], False, "all_equal"),
    ([1.0, 0.0, 1.0], True, "kept"),
    ([0.2, 0.3, 0.2], True, "kept"),
    ([1.0, 1.0, 0.9], True, "kept"),
]


def test_dynamic_sampling_filter_table():
    rewards = torch.tensor([row for row, _, _ in DYNAMIC_SAMPLING_TABLE])
    keep, reasons = dapo.dynamic_sampling_filter(rewards)
    assert keep.tolist() == [k for _, k, _ in DYNAMIC_SAMPLING_TABLE]
    assert reasons == [r for _, _, r in DYNAMIC_SAMPLING_TABLE]
    assert set(reasons) <= set(dapo.REASONS)


# ---------------------------------------------------------------- overlong shaping

OVERLONG_TABLE = [  # (length, max_len, buffer_len, factor, expected)
    (10, 100, 20, 1.0, 0.0),
    (80, 100, 20, 1.0, 0.0),
    (81, 100, 20, 1.0, -0.05),
    (90, 100, 20, 1.0, -0.5),
    (100, 100, 20, 1.0, -1.0),
    (100, 100, 20, 0.5, -0.5),
    (110, 100, 20, 1.0, -1.5),
    (5, 10, 10, 2.0, -1.0),
]


@pytest.mark.parametrize("length,max_len,buffer_len,factor,expected", OVERLONG_TABLE)
def test_overlong_penalty_table(length, max_len, buffer_len, factor, expected):
    got = dapo.overlong_penalty(torch.tensor([length]), max_len, buffer_len, factor)
    assert got.item() == pytest.approx(expected)


@pytest.mark.parametrize("max_len,buffer_len", [(100, 0), (100, 101), (100, -1)])
def test_overlong_penalty_rejects_bad_buffer(max_len, buffer_len):
    with pytest.raises(ValueError):
        dapo.overlong_penalty(torch.tensor([1]), max_len, buffer_len, 1.0)


def test_overlong_filter_mask():
    truncated = torch.tensor([False, True, False])
    assert dapo.overlong_filter_mask(truncated).tolist() == [True, False, True]
    response_mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    expected = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    assert torch.equal(dapo.overlong_filter_mask(truncated, response_mask), expected)


# ---------------------------------------------------------------- clipped policy loss: every branch

# (advantage, ratio, branch, stat that must be 1): branch "ratio" -> loss = -A r (gradient flows),
# "clip" -> loss = -A clip(r) (no gradient), "dual" -> loss = -A c (no gradient). eps 0.2 / 0.28, c 10.
CLIP_TABLE = [
    (1.0, 1.1, "ratio", None),
    (1.0, 1.5, "clip", "clip_frac_high"),  # clip-higher: A > 0 capped at 1 + eps_high
    (1.0, 1.25, "ratio", None),  # inside the raised upper bound (would be clipped at 1.2)
    (1.0, 0.5, "ratio", None),  # A > 0 and small ratio: pessimistic max keeps the unclipped term
    (-1.0, 0.9, "ratio", None),
    (-1.0, 0.5, "clip", "clip_frac_low"),  # A < 0 floored at 1 - eps_low
    (-1.0, 1.5, "ratio", None),  # A < 0, above 1 + eps_high but below c: unclipped term is larger
    (-2.0, 20.0, "dual", "dual_clip_frac"),  # dual clip bounds the loss at -A c
    (0.0, 3.0, "ratio", None),
]


@pytest.mark.parametrize("adv,ratio,branch,stat", CLIP_TABLE)
def test_clipped_policy_loss_branches(adv, ratio, branch, stat):
    old = torch.tensor([[-1.0]], dtype=F64)
    logp = (old + math.log(ratio)).clone().requires_grad_(True)
    loss, stats = dapo.clipped_policy_loss(logp, old, torch.tensor([adv], dtype=F64), torch.ones(1, 1))
    used = {"ratio": ratio, "clip": min(max(ratio, 0.8), 1.28), "dual": 10.0}[branch]
    assert loss.item() == pytest.approx(-adv * used)
    (grad,) = torch.autograd.grad(loss, logp)
    expected_grad = -adv * ratio if branch == "ratio" else 0.0  # d(-A r)/d logp = -A r
    assert grad.item() == pytest.approx(expected_grad)
    for name in ("clip_frac_high", "clip_frac_low", "dual_clip_frac"):
        assert stats[name] == (1.0 if name == stat else 0.0)


def test_dual_clip_can_be_disabled():
    old = torch.zeros(1, 1, dtype=F64)
    loss, _ = dapo.clipped_policy_loss(old + math.log(20.0), old, torch.tensor([-2.0], dtype=F64),
                                       torch.ones(1, 1), dual_clip_c=None)
    assert loss.item() == pytest.approx(40.0)
    with pytest.raises(ValueError):
        dapo.clipped_policy_loss(old, old, torch.tensor([1.0]), torch.ones(1, 1), dual_clip_c=0.5)


def test_loss_is_a_masked_sum_robust_to_padding_and_broadcasts_advantages():
    logp = torch.tensor([[-1.0, -2.0, float("-inf")], [-0.5, float("nan"), 0.0]], dtype=F64, requires_grad=True)
    old = torch.tensor([[-1.1, -2.1, -1.0], [-0.4, -1.0, 0.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    adv = torch.tensor([1.0, -1.0], dtype=F64)
    loss, stats = dapo.clipped_policy_loss(logp, old, adv, mask)
    expected = -math.exp(0.1) - math.exp(0.1) + math.exp(-0.1)
    assert loss.item() == pytest.approx(expected)
    assert stats["num_tokens"] == 3.0
    (grad,) = torch.autograd.grad(loss, logp)
    assert torch.isfinite(grad).all() and grad[0, 2] == 0 and grad[1, 1] == 0
    loss_2d, _ = dapo.clipped_policy_loss(logp, old, adv[:, None].expand(2, 3), mask)
    assert loss_2d.item() == pytest.approx(expected)
    weighted, _ = dapo.clipped_policy_loss(logp, old, adv, mask, is_weights=torch.full((2, 3), 0.5, dtype=F64))
    assert weighted.item() == pytest.approx(0.5 * expected)


def test_loss_stats_are_floats():
    logp = torch.randn(3, 4, dtype=F64)
    _, stats = dapo.clipped_policy_loss(logp, logp + 0.1, torch.randn(3, dtype=F64), torch.ones(3, 4))
    assert all(isinstance(v, float) for v in stats.values())
    assert stats["approx_kl"] == pytest.approx(0.1) and stats["ratio_mean"] == pytest.approx(math.exp(-0.1))


# ---------------------------------------------------------------- token-level aggregation (OpenRLHF-style)


def _split(indices, parts, gen):
    """Random split of a list of indices into ``parts`` (possibly empty) contiguous chunks after shuffling."""
    order = [indices[i] for i in torch.randperm(len(indices), generator=gen).tolist()]
    cuts = sorted(torch.randint(0, len(order) + 1, (parts - 1,), generator=gen).tolist())
    return [order[a:b] for a, b in zip([0, *cuts], [*cuts, len(order)])]


@pytest.mark.parametrize("seed", range(6))
def test_token_level_mean_is_exact_under_any_sharding(seed):
    gen = torch.Generator().manual_seed(seed)
    batch, length, ranks = 12, 7, 3
    params = torch.randn(batch, length, dtype=F64, generator=gen, requires_grad=True)  # stands in for weights
    old = torch.randn(batch, length, dtype=F64, generator=gen)
    adv = torch.randn(batch, dtype=F64, generator=gen)
    lengths = torch.randint(1, length + 1, (batch,), generator=gen)
    mask = (torch.arange(length)[None] < lengths[:, None]).to(F64)

    full_sum, _ = dapo.clipped_policy_loss(params, old, adv, mask)
    global_mean = full_sum / mask.sum()
    (global_grad,) = torch.autograd.grad(global_mean, params)

    global_tokens = int(mask.sum())  # one all-reduce of local counts in a real learner
    rank_grads, total = [], 0.0
    for shard in _split(list(range(batch)), ranks, gen):
        grad = torch.zeros_like(params)
        for micro in _split(shard, 2, gen):
            if not micro:
                continue
            part, _ = dapo.clipped_policy_loss(params[micro], old[micro], adv[micro], mask[micro])
            loss = dapo.token_level_mean(part, global_tokens, grad_divisor=ranks)
            grad += torch.autograd.grad(loss, params)[0]  # gradient accumulation
            total += loss.item() / ranks
        rank_grads.append(grad)
    averaged = torch.stack(rank_grads).mean(0)  # DDP / DeepSpeed all-reduce averages over ranks
    assert total == pytest.approx(global_mean.item(), rel=1e-12)
    torch.testing.assert_close(averaged, global_grad, rtol=1e-10, atol=1e-12)


def test_token_level_mean_rejects_empty_batch():
    with pytest.raises(ValueError):
        dapo.token_level_mean(torch.tensor(1.0), 0)


# ---------------------------------------------------------------- async: truncated IS and staleness


def test_truncated_is_weights():
    behaviour = torch.log(torch.tensor([[0.5, 0.2, 0.1]], dtype=F64))
    proximal = torch.log(torch.tensor([[0.25, 0.3, 0.9]], dtype=F64)).requires_grad_(True)
    weights = dapo.truncated_is_weights(behaviour, proximal, cap=2.0)
    torch.testing.assert_close(weights, torch.tensor([[0.5, 1.5, 2.0]], dtype=F64))
    assert not weights.requires_grad
    with pytest.raises(ValueError):
        dapo.truncated_is_weights(behaviour, proximal, cap=0.0)


STALENESS_TABLE = [  # (sample_version, learner_version, max_staleness, stale)
    (5, 5, 0, False),
    (4, 5, 0, True),
    (4, 5, 1, False),
    (3, 5, 1, True),
    (0, 4, 4, False),
    (0, 5, 4, True),
]


@pytest.mark.parametrize("sample,learner,bound,stale", STALENESS_TABLE)
def test_is_stale_table(sample, learner, bound, stale):
    assert dapo.is_stale(sample, learner, bound) is stale


@pytest.mark.parametrize("sample,learner,bound", [(6, 5, 1), (1, 5, -1)])
def test_is_stale_rejects_impossible_inputs(sample, learner, bound):
    with pytest.raises(ValueError):
        dapo.is_stale(sample, learner, bound)
