"""core.algo.passk against brute force: every estimator equals the average over ALL k-subsets of the n samples,
and that average is unbiased for the metric of k fresh i.i.d. samples (exact enumeration of every n-sequence
of a small categorical distribution)."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.algo import metrics, passk


def subsets(n, k):
    return list(itertools.combinations(range(n), k))


def brute(values, k, score):
    """Mean of ``score(subset of values)`` over all k-subsets."""
    return np.mean([score([values[i] for i in s]) for s in subsets(len(values), k)])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=8), st.data())
def test_pass_at_k_is_the_subset_average_of_any_correct(correct, data):
    n, k = len(correct), data.draw(st.integers(1, len(correct)))
    want = brute(correct, k, any)
    assert passk.pass_at_k(n, sum(correct), k) == pytest.approx(want, abs=1e-12)
    assert passk.pass_at_k(n, sum(correct), k) == pytest.approx(1 - math.comb(n - sum(correct), k) / math.comb(n, k))
    curve = passk.pass_at_k_curve(np.array([correct]), n)
    assert curve.shape == (1, n) and curve[0, k - 1] == pytest.approx(want, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.25, 0.5, 0.7, 1.0]), min_size=1, max_size=8), st.data())
def test_max_at_k_is_the_subset_average_of_the_max(rewards, data):
    n, k = len(rewards), data.draw(st.integers(1, len(rewards)))
    want = brute(rewards, k, max)
    assert passk.max_at_k(rewards, k) == pytest.approx(want, abs=1e-12)
    assert passk.max_at_k_weights(n, k).sum() == pytest.approx(1.0)
    curve = passk.max_at_k_curve(np.array([rewards, rewards[::-1]]), [k])
    np.testing.assert_allclose(curve, [[want], [want]], atol=1e-12)


def test_max_at_k_of_binary_rewards_is_pass_at_k_and_large_n_is_stable():
    correct = np.array([[1, 0, 0, 1, 0, 0, 0, 0, 1, 0]])
    np.testing.assert_allclose(passk.max_at_k_curve(correct, 10), passk.pass_at_k_curve(correct, 10), atol=1e-12)
    big = np.linspace(0, 1, 128)[None]
    curve = passk.max_at_k_curve(big, [1, 64, 128])
    np.testing.assert_allclose(curve[0], [big.mean(), passk.max_at_k(big[0], 64), 1.0], atol=1e-12)
    assert np.isfinite(curve).all()


CATEGORIES = np.array([0.2, 0.5, 0.3])        # a 3-outcome "generator"
REWARD = np.array([0.0, 0.4, 1.0])
ANSWER = ["7", "8", None]                    # outcome 2 is unparsed: no vote
CORRECT = np.array([True, False, False])


def sequences(n):
    for seq in itertools.product(range(3), repeat=n):
        yield np.array(seq), float(np.prod(CATEGORIES[list(seq)]))


@pytest.mark.parametrize("n,k", [(3, 1), (3, 2), (4, 2), (5, 3)])
def test_subset_averages_are_unbiased_for_k_fresh_samples(n, k):
    """E over n-sample draws of each estimator == the metric of k i.i.d. samples, both enumerated exactly."""
    def expect(fn, m):
        return sum(p * fn(seq) for seq, p in sequences(m))

    true_max = expect(lambda s: REWARD[s].max(), k)
    true_pass = expect(lambda s: float(CORRECT[s].any()), k)
    true_maj = expect(lambda s: metrics.majority_at_k([ANSWER[i] for i in s], CORRECT[s]), k)
    assert expect(lambda s: passk.max_at_k(REWARD[s], k), n) == pytest.approx(true_max, abs=1e-12)
    assert expect(lambda s: passk.pass_at_k(n, int(CORRECT[s].sum()), k), n) == pytest.approx(true_pass, abs=1e-12)
    assert expect(lambda s: passk.majority_at_k([ANSWER[i] for i in s], CORRECT[s], k), n) == pytest.approx(
        true_maj, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c", None]), min_size=1, max_size=7), st.data())
def test_majority_at_k_exact_equals_enumeration_of_every_subset(answers, data):
    k = data.draw(st.integers(1, len(answers)))
    correct = [a == "b" for a in answers]
    want = np.mean([metrics.majority_at_k([answers[i] for i in s], [correct[i] for i in s])
                    for s in subsets(len(answers), k)])
    assert passk.majority_at_k(answers, correct, k) == pytest.approx(want, abs=1e-12)
    curve = passk.majority_at_k_curve([answers], np.array([correct]), [k])
    assert curve[0, 0] == pytest.approx(want, abs=1e-12)


def test_majority_at_k_monte_carlo_beyond_max_exact():
    rng = np.random.default_rng(3)
    answers = list(rng.choice(["1", "2", "3"], size=12, p=[0.45, 0.35, 0.2]))
    correct = [a == "1" for a in answers]
    exact = passk.majority_at_k(answers, correct, 5)                       # C(12, 5) = 792 subsets
    subs, is_exact = passk.k_subsets(12, 5, max_exact=100, draws=20_000)
    assert not is_exact and subs.shape == (20_000, 5)
    assert all(len(set(row)) == 5 for row in subs[:200].tolist())          # no repeated sample in a subset
    sampled = passk.majority_at_k(answers, correct, 5, max_exact=100, draws=20_000)
    assert sampled == pytest.approx(exact, abs=0.01)
    assert sampled == passk.majority_at_k(answers, correct, 5, max_exact=100, draws=20_000)  # seeded


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 1.0, 2.0]), st.sampled_from([0.0, 0.5, 1.0])), min_size=1,
                max_size=7), st.data())
def test_bon_at_k_with_scores_matches_argmax_with_uniform_tie_break(pairs, data):
    scores, rewards = [p[0] for p in pairs], [p[1] for p in pairs]
    k = data.draw(st.integers(1, len(pairs)))

    def best(subset):  # uniform tie-break among the top-scored: their mean reward
        top = max(scores[i] for i in subset)
        return np.mean([rewards[i] for i in subset if scores[i] == top])

    want = np.mean([best(s) for s in subsets(len(pairs), k)])
    assert passk.bon_at_k_scores(scores, rewards, k) == pytest.approx(want, abs=1e-12)


def test_bon_at_k_with_a_choice_function():
    rewards = [0.0, 1.0, 0.3, 1.0, 0.0, 0.6]
    oracle = lambda idx: max(idx, key=lambda i: rewards[i])                       # noqa: E731
    first = lambda idx: idx[0]                                                     # noqa: E731
    for k in range(1, 7):
        assert passk.bon_at_k(rewards, k, oracle) == pytest.approx(passk.max_at_k(rewards, k), abs=1e-12)
        assert passk.bon_at_k(rewards, k, first) == pytest.approx(brute(rewards, k, lambda s: s[0]), abs=1e-12)
    scores = [0.1, 0.9, 0.5, 0.2, 0.3, 0.8]
    by_score = lambda idx: max(idx, key=lambda i: scores[i])                       # noqa: E731
    assert passk.bon_at_k(rewards, 3, by_score) == pytest.approx(passk.bon_at_k_scores(scores, rewards, 3))
    # a selector that fails to parse on subsets containing sample 0 scores 0 there
    flaky = lambda idx: None if 0 in idx else oracle(idx)                          # noqa: E731
    want = brute(list(range(6)), 2, lambda s: 0.0 if 0 in s else max(rewards[i] for i in s))
    assert passk.bon_at_k(rewards, 2, flaky) == pytest.approx(want)
    with pytest.raises(ValueError, match="not one of"):
        passk.bon_at_k(rewards, 2, lambda idx: 99)


def test_bootstrap_curve_ci_is_seeded_coupled_and_matches_scalar_bootstrap():
    rng = np.random.default_rng(0)
    correct = rng.random((40, 16)) < rng.random((40, 1))
    curve = passk.pass_at_k_curve(correct, 16)
    mean, lo, hi = passk.bootstrap_curve_ci(curve, n_boot=500, seed=1)
    assert mean.shape == lo.shape == hi.shape == (16,)
    assert (lo <= mean + 1e-12).all() and (mean <= hi + 1e-12).all()
    assert (np.diff(lo) >= -1e-12).all() and (np.diff(hi) >= -1e-12).all()  # same resamples for every k
    again = passk.bootstrap_curve_ci(curve, n_boot=500, seed=1)
    for a, b in zip((mean, lo, hi), again):
        np.testing.assert_array_equal(a, b)
    scalar = metrics.bootstrap_ci(curve[:, 0], n_boot=500, seed=1)
    assert (mean[0], lo[0], hi[0]) == pytest.approx(scalar)
    m, lo1, hi1 = passk.bootstrap_curve_ci(np.full((5, 3), 0.5))
    np.testing.assert_allclose([m, lo1, hi1], 0.5)


@pytest.mark.parametrize("call", [
    lambda: passk.pass_at_k(3, 1, 4), lambda: passk.pass_at_k(3, 4, 1), lambda: passk.max_at_k([1.0], 0),
    lambda: passk.pass_at_k_curve(np.ones((2, 3)), [4]), lambda: passk.max_at_k_curve(np.ones(3), 1),
    lambda: passk.bootstrap_curve_ci(np.ones((0, 2))), lambda: passk.bon_at_k_scores([1.0], [1.0, 0.0], 1),
])
def test_bad_arguments_are_refused(call):
    with pytest.raises(ValueError):
        call()
