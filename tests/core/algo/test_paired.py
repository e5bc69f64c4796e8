"""core.algo.paired: the paired bootstrap over problems of one selector's accuracy minus another's, alone and pooled
over runs."""
import numpy as np
import pytest

from core.algo import metrics, paired


def _prompts(problem_scores: list, per_problem: int = 4) -> tuple:
    """(problem ids, a, b) of `per_problem` prompts a problem, each prompt scored as its problem's (a, b) pair."""
    ids, a, b = [], [], []
    for q, (x, y) in enumerate(problem_scores):
        ids += [f"q{q}"] * per_problem
        a += [x] * per_problem
        b += [y] * per_problem
    return ids, a, b


def test_a_selector_that_wins_on_most_problems_has_a_ci_that_excludes_zero():
    # A right on 45 of 50 problems, B on 20 of them (all of which A also gets): +0.5, clear of zero
    ids, a, b = _prompts([(float(q < 45), float(q < 20)) for q in range(50)])
    mean, lo, hi = paired.paired_bootstrap_ci(ids, a, b, seed=3)
    assert mean == pytest.approx(0.5)
    assert 0 < lo < mean < hi


def test_two_selectors_that_trade_wins_have_a_ci_that_includes_zero():
    # each wins on 10 problems the other loses, and they agree on the other 30: a difference of 0
    ids, a, b = _prompts([(1.0, 0.0)] * 10 + [(0.0, 1.0)] * 10 + [(1.0, 1.0)] * 15 + [(0.0, 0.0)] * 15)
    mean, lo, hi = paired.paired_bootstrap_ci(ids, a, b, seed=3)
    assert mean == pytest.approx(0.0)
    assert lo < 0 < hi


def test_prompts_of_one_problem_move_together():
    """Repeating each problem's prompt four times changes nothing (the problem is the unit); treating the 200 prompts
    as independent would halve the width."""
    scores = [(float(q % 3 != 0), float(q % 2 == 0)) for q in range(50)]
    once = paired.paired_bootstrap_ci(*_prompts(scores, per_problem=1), seed=0)
    four = paired.paired_bootstrap_ci(*_prompts(scores, per_problem=4), seed=0)
    assert once == pytest.approx(four)
    ids, a, b = _prompts(scores, per_problem=4)
    as_prompts = paired.paired_bootstrap_ci(list(range(len(ids))), a, b, seed=0)
    assert as_prompts[2] - as_prompts[1] < 0.7 * (four[2] - four[1])


def test_the_difference_is_of_problem_means_and_matches_the_unpaired_means():
    """Problems with different numbers of prompts: the estimate is A's accuracy by problem minus B's, as
    driver.eval_metrics computes each accuracy (mean over problems of the problem's prompt mean)."""
    ids = ["x", "x", "x", "y", "z", "z"]
    a, b = [1, 1, 0, 0, 1, 0], [0, 0, 0, 1, 1, 1]
    d = paired.problem_differences(ids, a, b)
    assert d.tolist() == pytest.approx([2 / 3, -1.0, -0.5])
    mean = paired.paired_bootstrap_ci(ids, a, b)[0]
    by_problem = lambda s: np.mean([np.mean([v for i, v in zip(ids, s) if i == q]) for q in "xyz"])  # noqa: E731
    assert mean == pytest.approx(by_problem(a) - by_problem(b))


def test_a_constant_difference_has_a_zero_width_ci_and_the_same_seed_gives_the_same_ci():
    ids, a, b = _prompts([(1.0, 0.75)] * 20)
    assert paired.paired_bootstrap_ci(ids, a, b) == pytest.approx((0.25, 0.25, 0.25))
    ids, a, b = _prompts([(float(q % 2), float(q % 3 == 0)) for q in range(30)])
    assert paired.paired_bootstrap_ci(ids, a, b, seed=7) == paired.paired_bootstrap_ci(ids, a, b, seed=7)


def test_pairing_is_tighter_than_the_unpaired_cis_when_problems_differ_in_difficulty():
    # both right on the easy half, both wrong on the hard half, A also right on 5 hard ones
    scores = [(1.0, 1.0)] * 20 + [(1.0, 0.0)] * 5 + [(0.0, 0.0)] * 15
    ids, a, b = _prompts(scores, per_problem=1)
    _, lo, hi = paired.paired_bootstrap_ci(ids, a, b)
    (_, a_lo, a_hi), (_, b_lo, b_hi) = metrics.bootstrap_ci(a), metrics.bootstrap_ci(b)
    unpaired = ((a_hi - a_lo) ** 2 + (b_hi - b_lo) ** 2) ** 0.5  # the width of A - B read from the two CIs
    assert hi - lo < 0.6 * unpaired


def test_mismatched_or_empty_inputs_are_refused():
    with pytest.raises(ValueError, match="3 problem ids for 2 and 3 scores"):
        paired.paired_bootstrap_ci(["a", "b", "c"], [1, 0], [0, 0, 1])
    with pytest.raises(ValueError, match="zero prompts"):
        paired.paired_bootstrap_ci([], [], [])
    with pytest.raises(ValueError, match="zero runs"):
        paired.pooled_paired_bootstrap_ci([])


def test_the_pooled_ci_averages_the_runs_and_is_narrower_than_one_run_when_they_agree():
    first = _prompts([(float(q < 30), float(q < 24)) for q in range(50)])     # +0.12
    second = _prompts([(float(q < 32), float(q < 24)) for q in range(50)])    # +0.16
    mean, lo, hi = paired.pooled_paired_bootstrap_ci([first, second], seed=1)
    assert mean == pytest.approx(0.14)
    alone = paired.paired_bootstrap_ci(*first, seed=1)
    assert lo < mean < hi and hi - lo < alone[2] - alone[1]
    assert paired.pooled_paired_bootstrap_ci([first], seed=1) == paired.paired_bootstrap_ci(*first, seed=1)


def test_runs_that_disagree_pool_to_a_ci_that_includes_zero():
    up = _prompts([(float(q < 40), float(q < 25)) for q in range(50)])      # +0.30
    down = _prompts([(float(q < 25), float(q < 40)) for q in range(50)])    # -0.30
    mean, lo, hi = paired.pooled_paired_bootstrap_ci([up, down], seed=2)
    assert mean == pytest.approx(0.0) and lo < 0 < hi
    assert paired.paired_bootstrap_ci(*up, seed=2)[1] > 0  # each run alone excludes 0
