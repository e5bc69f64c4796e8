"""Tests for core.algo.metrics: unbiased estimators against brute force over subsets, tables, bootstrap."""

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.algo import metrics


def brute_force_max_at_k(values, k):
    subsets = list(itertools.combinations(values, k))
    return sum(max(s) for s in subsets) / len(subsets)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=8), st.data())
def test_pass_at_k_equals_subset_enumeration(correct, data):
    n, c = len(correct), sum(correct)
    k = data.draw(st.integers(1, n))
    expected = brute_force_max_at_k([float(x) for x in correct], k)
    assert metrics.pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)
    assert metrics.pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 200), st.data())
def test_pass_at_k_bounded_and_monotone(n, data):
    c = data.draw(st.integers(0, n))
    values = [metrics.pass_at_k(n, c, k) for k in range(1, n + 1)]
    assert all(0.0 <= v <= 1.0 for v in values)
    assert all(a <= b + 1e-12 for a, b in zip(values, values[1:]))
    assert values[0] == pytest.approx(c / n)
    assert values[-1] == (1.0 if c else 0.0)


def test_pass_at_k_large_n_is_stable():
    assert metrics.pass_at_k(10_000, 1, 1) == pytest.approx(1e-4)
    assert metrics.pass_at_k(10_000, 1, 5_000) == pytest.approx(0.5)


@pytest.mark.parametrize("n,c,k", [(3, 4, 1), (3, -1, 1), (3, 1, 0), (3, 1, 4)])
def test_pass_at_k_rejects_bad_arguments(n, c, k):
    with pytest.raises(ValueError):
        metrics.pass_at_k(n, c, k)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=7), st.data())
def test_max_at_k_equals_subset_enumeration(values, data):
    k = data.draw(st.integers(1, len(values)))
    assert metrics.max_at_k(values, k) == pytest.approx(brute_force_max_at_k(values, k), abs=1e-12)


def test_max_at_k_special_cases():
    values = [0.1, 0.7, 0.4, 0.7]
    assert metrics.max_at_k(values, 1) == pytest.approx(sum(values) / 4)
    assert metrics.max_at_k(values, 4) == pytest.approx(0.7)
    assert metrics.max_at_k([1, 0, 0, 1, 0], 2) == pytest.approx(metrics.pass_at_k(5, 2, 2))
    with pytest.raises(ValueError):
        metrics.max_at_k(values, 5)


MAJORITY_TABLE = [  # (answers, correct, expected)
    (["4", "4", "5"], [True, True, False], 1.0),
    (["4", "5", "5"], [True, False, False], 0.0),
    (["4", "5"], [True, False], 0.5),  # tie: average of the tied answers
    (["4", "5", "6", "6", "4"], [True, False, False, False, True], 0.5),
    ([None, None, "5"], [False, False, False], 0.0),  # unparsed answers do not vote
    ([None, "4", None, None], [False, True, False, False], 1.0),
    ([None, None], [False, False], 0.0),
    (["a", "b", "c"], [True, False, False], 1 / 3),
]


@pytest.mark.parametrize("answers,correct,expected", MAJORITY_TABLE)
def test_majority_at_k_table(answers, correct, expected):
    assert metrics.majority_at_k(answers, correct) == pytest.approx(expected)


def test_majority_at_k_rejects_length_mismatch():
    with pytest.raises(ValueError):
        metrics.majority_at_k(["1"], [True, False])


def test_selection_metrics():
    assert metrics.genselect_accuracy([True, False, True, True]) == 0.75
    assert metrics.random_at_n([True, False, False, False]) == 0.25
    assert metrics.pass_at_n([False, False, True]) == 1.0
    assert metrics.pass_at_n([False, False]) == 0.0
    with pytest.raises(ValueError):
        metrics.random_at_n([])


def test_bootstrap_ci_brackets_the_mean_and_is_deterministic():
    values = [float(i % 3 == 0) for i in range(60)]
    mean, lo, hi = metrics.bootstrap_ci(values, n_boot=500, seed=1)
    assert mean == pytest.approx(sum(values) / 60)
    assert lo < mean < hi
    assert metrics.bootstrap_ci(values, n_boot=500, seed=1) == (mean, lo, hi)
    assert metrics.bootstrap_ci([0.5] * 10) == (0.5, 0.5, 0.5)
    wide = metrics.bootstrap_ci(values[:15], n_boot=500)
    assert wide[2] - wide[1] > hi - lo  # fewer problems, wider interval


def test_bootstrap_ci_width_matches_normal_theory():
    values = [float(i % 2) for i in range(400)]  # std 0.5 -> standard error 0.025
    _, lo, hi = metrics.bootstrap_ci(values, n_boot=2000)
    assert (hi - lo) == pytest.approx(2 * 1.96 * 0.025, rel=0.15)
