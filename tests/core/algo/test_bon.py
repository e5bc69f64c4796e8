"""Brute-force unbiasedness proofs and properties of the advantage estimators in core.algo.bon.

A tiny categorical policy pi = softmax(theta) over 4 outcomes with fixed rewards; every sequence of n samples
is enumerated with its exact probability, so E[sum_i A_i grad log pi(y_i)] is computed exactly and compared
with the autograd gradient of the objective (max@k = E[max of k samples], BoN = 1 - p^N).
"""

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from core.algo import bon

F64 = torch.float64
THETA = torch.tensor([0.3, -0.5, 0.8, 0.1], dtype=F64)
DIRECTION = torch.tensor([0.7, -1.1, 0.4, 0.2], dtype=F64)
CONTINUOUS = torch.tensor([0.0, 0.3, 0.3, 1.0], dtype=F64)  # tie across outcomes on purpose
BINARY = torch.tensor([0.0, 1.0, 0.0, 1.0], dtype=F64)  # outcomes 0 and 2 fail


def sequences(n: int) -> torch.Tensor:
    """All 4**n outcome sequences, ``(4**n, n)`` long."""
    return torch.tensor(list(itertools.product(range(4), repeat=n)), dtype=torch.long)


def expected_pg(adv_fn, n, values, theta_sample=THETA, theta_score=THETA):
    """Exact ``E_{y ~ softmax(theta_sample)}[sum_i A_i grad log softmax(theta_score)(y_i)]``, shape (4,).

    ``adv_fn(rewards (S, n), seqs (S, n)) -> (S, n)``: every sequence is one group.
    """
    seqs = sequences(n)
    probs = torch.softmax(theta_sample, 0)[seqs].prod(-1)
    score = torch.eye(4, dtype=F64) - torch.softmax(theta_score, 0)  # row y: grad log pi(y)
    adv = adv_fn(values[seqs], seqs)
    return torch.einsum("s,si,sid->d", probs, adv, score[seqs])


def maxk_objective_grad(k, values, theta=THETA):
    """Autograd gradient of E[max of k i.i.d. samples] under softmax(theta)."""
    th = theta.clone().requires_grad_(True)
    seqs = sequences(k)
    obj = (torch.softmax(th, 0)[seqs].prod(-1) * values[seqs].amax(-1)).sum()
    (grad,) = torch.autograd.grad(obj, th)
    return grad


def bon_objective_grad(n_bon, theta=THETA):
    """Autograd gradient of 1 - p^N, p = P(fail) under softmax(theta) with rewards BINARY."""
    th = theta.clone().requires_grad_(True)
    p = (torch.softmax(th, 0) * (1 - BINARY)).sum()
    (grad,) = torch.autograd.grad(1 - p**n_bon, th)
    return grad


def fail_prob(theta=THETA):
    return float((torch.softmax(theta, 0) * (1 - BINARY)).sum())


# ---------------------------------------------------------------- max@k: on-policy


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.2, 0.5, 0.7, 1.0]), min_size=1, max_size=6), st.data())
def test_maxk_transformed_rewards_equal_subset_average(values, data):
    n = len(values)
    k = data.draw(st.integers(1, n))
    rewards = torch.tensor(values, dtype=F64)
    expected = torch.zeros(n, dtype=F64)
    for subset in itertools.combinations(range(n), k):
        expected[list(subset)] += max(values[i] for i in subset)
    torch.testing.assert_close(bon.maxk_transformed_rewards(rewards, k), expected / math.comb(n, k))


@pytest.mark.parametrize("values", [CONTINUOUS, BINARY], ids=["continuous", "binary"])
@pytest.mark.parametrize("n,k", [(3, 1), (3, 2), (3, 3), (4, 2), (4, 3), (4, 4)])
def test_maxk_transformed_rewards_unbiased(values, n, k):
    got = expected_pg(lambda r, s: bon.maxk_transformed_rewards(r, k), n, values)
    torch.testing.assert_close(got, maxk_objective_grad(k, values), atol=1e-10, rtol=1e-8)


@pytest.mark.parametrize("baseline,factor", [("none", None), ("loo", None), ("mean", "1-k/n")])
@pytest.mark.parametrize("n,k", [(3, 1), (3, 2), (4, 2), (4, 3)])
def test_maxk_estimator_gradient(baseline, factor, n, k):
    est = bon.make_estimator("maxk", k=k, baseline=baseline)
    got = expected_pg(lambda r, s: est.advantages(r), n, CONTINUOUS) / n
    scale = 1 - k / n if factor else 1.0
    torch.testing.assert_close(got, scale * maxk_objective_grad(k, CONTINUOUS), atol=1e-10, rtol=1e-8)


def test_maxk_loo_needs_more_samples_than_k():
    with pytest.raises(ValueError):
        bon.MaxKEstimator(k=4, baseline="loo").advantages(torch.rand(2, 4))


# ---------------------------------------------------------------- max@k: off-policy (first order)


def offpolicy_error(t, n, k, fn):
    """|E_mu[sum_i c_i grad log pi(y_i)] - grad M(pi)| with pi = softmax(THETA + t DIRECTION), mu = softmax(THETA)."""
    theta_pi = THETA + t * DIRECTION
    ratio = torch.softmax(theta_pi, 0) / torch.softmax(THETA, 0)  # per outcome

    def adv_fn(rewards, seqs):
        return fn(rewards, ratio[seqs])

    got = expected_pg(adv_fn, n, CONTINUOUS, theta_sample=THETA, theta_score=theta_pi)
    return float((got - maxk_objective_grad(k, CONTINUOUS, theta_pi)).norm())


@pytest.mark.parametrize("n,k", [(3, 2), (4, 2), (4, 3)])
def test_maxk_offpolicy_is_first_order_correct(n, k):
    def reference_w(rewards, rho):
        return bon.maxk_offpolicy_transformed_rewards(rewards, rho - 1, k)

    def on_policy_only(rewards, rho):
        return bon.maxk_transformed_rewards(rewards, k)

    est = bon.MaxKEstimator(k=k, baseline="loo" if k < n else "none", off_policy=True, log_ratio_clip=50.0)

    def estimator(rewards, rho):  # the loss multiplies A by rho; average over the group
        return rho * est.advantages(rewards, seq_log_ratio=torch.log(rho)) / n

    t = 0.02
    for fn in (reference_w, estimator):
        assert offpolicy_error(0.0, n, k, fn) < 1e-12
        e1, e2 = offpolicy_error(t, n, k, fn), offpolicy_error(t / 2, n, k, fn)
        assert 3.0 < e1 / e2 < 5.0, "error must shrink quadratically in the policy mismatch"
    e1, e2 = offpolicy_error(t, n, k, on_policy_only), offpolicy_error(t / 2, n, k, on_policy_only)
    assert 1.5 < e1 / e2 < 2.5, "ignoring the mismatch leaves a first-order error"


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=2, max_size=6), st.data())
def test_maxk_offpolicy_reduces_to_on_policy_at_zero_delta(values, data):
    k = data.draw(st.integers(1, len(values)))
    rewards = torch.tensor(values, dtype=F64)
    torch.testing.assert_close(
        bon.maxk_offpolicy_transformed_rewards(rewards, torch.zeros_like(rewards), k),
        bon.maxk_transformed_rewards(rewards, k),
    )


# ---------------------------------------------------------------- BoN-RLB


@pytest.mark.parametrize("positive_only", [False, True])
@pytest.mark.parametrize("n_bon", [1, 2, 3, 5])
def test_bon_rlb_unbiased_with_known_p(positive_only, n_bon):
    g = 3
    p = torch.tensor(fail_prob(), dtype=F64)

    def adv_fn(rewards, seqs):
        return bon.bon_rlb_advantages(rewards, n_bon, p.expand(rewards.shape[0]), positive_only)

    got = expected_pg(adv_fn, g, BINARY) / g
    torch.testing.assert_close(got, bon_objective_grad(n_bon), atol=1e-10, rtol=1e-8)


@pytest.mark.parametrize("name", ["bon_rlb", "bon_rlb_p"])
@pytest.mark.parametrize("n_bon", [1, 2, 3, 4])
def test_bon_rlb_loo_is_exactly_unbiased_from_the_group(name, n_bon):
    g = 4
    est = bon.make_estimator(name, n=n_bon, p_estimate="loo")
    got = expected_pg(lambda r, s: est.advantages(r), g, BINARY) / g
    torch.testing.assert_close(got, bon_objective_grad(n_bon), atol=1e-10, rtol=1e-8)


def test_bon_rlb_loo_needs_group_at_least_n():
    with pytest.raises(ValueError):
        bon.make_estimator("bon_rlb", n=5, p_estimate="loo").advantages(torch.ones(1, 4))


@pytest.mark.parametrize("name", ["bon_rlb", "bon_rlb_p"])
def test_bon_rlb_plugin_p_is_biased_but_aligned(name):
    """Honest statement: with p estimated from the same group the estimate is biased for N >= 2."""
    g, n_bon = 4, 3
    est = bon.make_estimator(name, n=n_bon)
    got = expected_pg(lambda r, s: est.advantages(r), g, BINARY) / g
    true = bon_objective_grad(n_bon)
    assert (got - true).norm() > 1e-3 * true.norm()
    assert torch.dot(got, true) / (got.norm() * true.norm()) > 0.99  # binary rewards: one direction per prompt


@pytest.mark.parametrize("name", ["bon_rlb", "bon_rlb_p"])
def test_bon_rlb_plugin_bias_shrinks_with_group_size(name):
    est = bon.make_estimator(name, n=3)
    true = bon_objective_grad(3)
    errors = [float((expected_pg(lambda r, s: est.advantages(r), g, BINARY) / g - true).norm()) for g in (3, 4, 6)]
    assert errors[0] > errors[1] > errors[2]


def test_bon_rlb_p_plugin_exact_for_n1():
    est = bon.make_estimator("bon_rlb_p", n=1)
    got = expected_pg(lambda r, s: est.advantages(r), 3, BINARY) / 3
    torch.testing.assert_close(got, bon_objective_grad(1), atol=1e-10, rtol=1e-8)


def chow_bon_sample_weights(fail_prob, n, positive_only=False, p_max=0.99):
    """REFERENCE.md's weights (Chow et al. arXiv 2412.15287), valid for samples SELECTED by BoN, not i.i.d. pi.

    Not in core.algo.bon: the trainer's groups are i.i.d. samples of pi (module docstring there). Returns
    ``(w_succ, w_fail)`` with ``p`` clipped to ``[0, p_max]``: ``(N p^(N-1)/(1-p^N), +N p/(1-p))``, or
    ``(N p^(N-1)(1-p)/(1-p^N), 0)`` when ``positive_only``.
    """
    p = fail_prob.to(F64).clamp(0.0, p_max)
    success_bon = 1 - p**n
    if positive_only:
        return n * p ** (n - 1) * (1 - p) / success_bon, torch.zeros_like(p)
    return n * p ** (n - 1) / success_bon, n * p / (1 - p)


def bon_selected_distribution(n_bon):
    """Exact distribution (4,) of the sample Best-of-N selects: first success among N draws, else the first."""
    seqs = sequences(n_bon)
    probs = torch.softmax(THETA, 0)[seqs].prod(-1)
    out = torch.zeros(4, dtype=F64)
    for seq, prob in zip(seqs.tolist(), probs):
        chosen = next((y for y in seq if BINARY[y] == 1), seq[0])
        out[chosen] += prob
    return out


def weighted_score(dist, w_succ, w_fail):
    """``E_{y ~ dist}[(w_succ 1{succ} + w_fail 1{fail}) grad log pi(y)]``."""
    score = torch.eye(4, dtype=F64) - torch.softmax(THETA, 0)
    weights = BINARY * w_succ + (1 - BINARY) * w_fail
    return torch.einsum("y,y,yd->d", dist, weights, score)


@pytest.mark.parametrize("n_bon", [2, 3, 4])
def test_reference_md_weights_hold_for_bon_selected_samples_only(n_bon):
    p = torch.tensor(fail_prob(), dtype=F64)
    true = bon_objective_grad(n_bon)
    selected = bon_selected_distribution(n_bon)
    iid = torch.softmax(THETA, 0)
    g_plus, g_minus = chow_bon_sample_weights(p, n_bon)
    g_pos_only, _ = chow_bon_sample_weights(p, n_bon, positive_only=True)
    # Right on BoN-selected samples: positive-only, and two-sided with g- entering with a PLUS sign.
    torch.testing.assert_close(weighted_score(selected, g_pos_only, 0.0), true, atol=1e-10, rtol=1e-8)
    torch.testing.assert_close(weighted_score(selected, g_plus, g_minus), true, atol=1e-10, rtol=1e-8)
    # Wrong: g- with a minus sign; and any of them on i.i.d. samples of pi (our groups).
    for dist, w_succ, w_fail in [(selected, g_plus, -g_minus), (iid, g_plus, -g_minus), (iid, g_plus, g_minus),
                                 (iid, g_pos_only, 0.0)]:
        assert (weighted_score(dist, w_succ, w_fail) - true).norm() > 1e-3 * true.norm()


# ---------------------------------------------------------------- properties and registry

ALL_ZERO_ON_EQUAL = [("grpo", {}), ("loglik", {}), ("maxk", {"k": 2}), ("maxk", {"k": 2, "baseline": "mean"}),
                     ("bon_rlb", {"n": 4}), ("bon_rlb_p", {"n": 4}), ("bon_rlb", {"n": 2, "p_estimate": "loo"})]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(ALL_ZERO_ON_EQUAL), st.integers(3, 6), st.integers(1, 3), st.data())
def test_estimators_shape_finite_and_permutation_equivariant(spec, g, groups, data):
    name, params = spec
    values = st.sampled_from([0.0, 1.0]) if name.startswith("bon") else st.sampled_from([0.0, 0.3, 0.8, 1.0])
    row = st.lists(values, min_size=g, max_size=g)
    rewards = torch.tensor(data.draw(st.lists(row, min_size=groups, max_size=groups)), dtype=F64)
    est = bon.make_estimator(name, **params)
    adv = est.advantages(rewards)
    assert adv.shape == rewards.shape and torch.isfinite(adv).all()
    perm = torch.tensor(data.draw(st.permutations(list(range(g)))))
    torch.testing.assert_close(est.advantages(rewards[:, perm]), adv[:, perm])


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(ALL_ZERO_ON_EQUAL), st.sampled_from([0.0, 1.0]), st.integers(3, 6))
def test_all_equal_rewards_give_zero_advantages(spec, value, g):
    name, params = spec
    adv = bon.make_estimator(name, **params).advantages(torch.full((2, g), value, dtype=F64))
    torch.testing.assert_close(adv, torch.zeros_like(adv))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=3, max_size=8), st.data())
def test_maxk_loo_advantages_are_exactly_centred(values, data):
    k = data.draw(st.integers(1, len(values) - 1))
    adv = bon.MaxKEstimator(k=k).advantages(torch.tensor([values], dtype=F64))
    assert abs(float(adv.sum())) < 1e-9


def test_maxk_k1_loo_is_rloo():
    rewards = torch.tensor([[0.1, 0.9, 0.4, 0.4]], dtype=F64)
    rloo = rewards - (rewards.sum(-1, keepdim=True) - rewards) / 3
    torch.testing.assert_close(bon.MaxKEstimator(k=1).advantages(rewards), rloo)


def test_make_estimator_errors_list_valid_names():
    with pytest.raises(ValueError, match="bon_rlb_p.*grpo.*maxk"):
        bon.make_estimator("ppo")
    with pytest.raises(ValueError, match="maxk"):
        bon.make_estimator("maxk", kk=3)
    with pytest.raises(ValueError, match="baseline"):
        bon.make_estimator("maxk", baseline="median")
    with pytest.raises(ValueError, match="group.*loo"):
        bon.make_estimator("bon_rlb", p_estimate="oracle")


def test_bon_group_clips_only_the_weight():
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]], dtype=F64)
    adv = bon.make_estimator("bon_rlb", n=3, p_min=0.1, p_max=0.5).advantages(rewards)
    torch.testing.assert_close(adv[0], 3 * 0.5**2 * (rewards[0] - 0.25))  # p_hat = 0.75 clipped to 0.5
    torch.testing.assert_close(adv[1], torch.zeros(4, dtype=F64))  # p_min does not leak into the baseline


def test_bon_rejects_non_binary_rewards():
    with pytest.raises(ValueError, match="binary"):
        bon.make_estimator("bon_rlb").advantages(torch.tensor([[0.5, 1.0, 0.0]]))


def test_registry_names_build_their_classes():
    assert isinstance(bon.make_estimator("grpo"), bon.GRPOEstimator)
    assert bon.make_estimator("bon_rlb_p").positive_only and not bon.make_estimator("bon_rlb").positive_only
    assert isinstance(bon.make_estimator("loglik"), bon.LogLikEstimator)
    assert set(bon.ESTIMATORS) == {"grpo", "loglik", "maxk", "bon_rlb", "bon_rlb_p"}


def test_maxk_off_policy_needs_the_ratio_and_ignores_it_when_off():
    rewards = torch.tensor([[0.1, 0.9, 0.4, 0.0]], dtype=F64)
    ratio = torch.tensor([[0.2, -0.1, 0.05, 0.3]], dtype=F64)
    on = bon.make_estimator("maxk", k=2)
    off = bon.make_estimator("maxk", k=2, off_policy=True)
    assert off.needs_seq_log_ratio and not on.needs_seq_log_ratio
    assert not bon.make_estimator("grpo").needs_seq_log_ratio and not bon.make_estimator("bon_rlb").needs_seq_log_ratio
    torch.testing.assert_close(on.advantages(rewards, seq_log_ratio=ratio), on.advantages(rewards))
    torch.testing.assert_close(off.advantages(rewards, torch.zeros_like(rewards)), on.advantages(rewards))
    assert not torch.allclose(off.advantages(rewards, ratio), on.advantages(rewards))
    with pytest.raises(ValueError, match="seq_log_ratio"):
        off.advantages(rewards)
    with pytest.raises(ValueError, match="log_ratio_clip"):
        bon.make_estimator("maxk", k=2, off_policy=True, log_ratio_clip=0.0)


def test_bon_refuses_an_empty_weight_range():
    with pytest.raises(ValueError, match="p_min < p_max"):
        bon.make_estimator("bon_rlb", p_min=0.5, p_max=0.5)


# ---------------------------------------------------------------- loglik: the gradient of log P(success)

def test_loglik_gives_successes_one_minus_m_over_m_and_failures_minus_one():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]], dtype=F64)
    adv = bon.make_estimator("loglik").advantages(rewards)
    torch.testing.assert_close(adv[0], torch.tensor([3.0, -1.0, -1.0, -1.0], dtype=F64))
    torch.testing.assert_close(adv[1], torch.tensor([1 / 3, 1 / 3, 1 / 3, -1.0], dtype=F64))
    torch.testing.assert_close(adv[2], torch.zeros(4, dtype=F64))  # unsolved: no signal, no division by 0
    torch.testing.assert_close(adv.sum(-1), torch.zeros(3, dtype=F64))


@pytest.mark.parametrize("theta", [THETA, torch.tensor([2.5, -1.0, -0.5, -2.0], dtype=F64)])
def test_loglik_follows_grad_log_success_and_keeps_weight_on_a_mostly_wrong_prompt(theta):
    """Exact expectation over every group of n = 6: aligned with grad log J; on a prompt the policy mostly
    gets wrong (theta favours failing outcome 0), it keeps a larger share of grad log J than GRPO's std
    scaling keeps of it (the absorbing state the estimator is for)."""
    n = 6
    est = bon.make_estimator("loglik")
    got = expected_pg(lambda r, _: est.advantages(r), n, BINARY, theta)
    t = theta.clone().requires_grad_(True)
    torch.log(torch.softmax(t, 0) @ BINARY).backward()
    want = t.grad
    assert torch.nn.functional.cosine_similarity(got, want, dim=0) > 0.99
    grpo = expected_pg(lambda r, _: bon.make_estimator("grpo").advantages(r), n, BINARY, theta)
    share = lambda g: float(g @ want / want.norm() ** 2)  # noqa: E731
    if float(torch.softmax(theta, 0) @ BINARY) < 0.2:
        assert share(got) > 2 * share(grpo) > 0


def test_loglik_refuses_negative_rewards():
    with pytest.raises(ValueError, match=">= 0"):
        bon.make_estimator("loglik").advantages(torch.tensor([[-0.5, 1.0, 0.0]], dtype=F64))
