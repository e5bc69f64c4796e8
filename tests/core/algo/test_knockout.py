"""Knockout planning and majority voting (core/algo/knockout.py): pure, no engine."""
import random

import pytest

from core.algo.knockout import DoesNotFit, advance, balanced_split, both_orders_pick, both_orders_scores, majority, plan_round, rounds_needed


@pytest.mark.parametrize("n,groups,sizes", [(64, 8, [8] * 8), (9, 2, [5, 4]), (10, 3, [4, 3, 3]), (3, 2, [2, 1])])
def test_balanced_split_keeps_order_and_balance(n, groups, sizes):
    split = balanced_split(list(range(n)), groups)
    assert [len(g) for g in split] == sizes
    assert [i for g in split for i in g] == list(range(n))


@pytest.mark.parametrize("n,window,expected_groups", [(2, 8, 1), (8, 8, 1), (9, 8, 2), (64, 8, 8), (64, 16, 4),
                                                      (65, 16, 5)])
def test_plan_round_uses_the_fewest_groups_that_fit_the_window(n, window, expected_groups):
    groups = plan_round(list(range(n)), window, lambda g: True)
    assert len(groups) == expected_groups
    assert all(1 <= len(g) <= window for g in groups)
    assert sorted(i for g in groups for i in g) == list(range(n))


def test_plan_round_splits_further_when_the_token_budget_binds():
    """Candidates of different lengths: a group fits when its total length is <= 100."""
    rng = random.Random(0)
    lengths = {i: rng.randint(5, 40) for i in range(20)}
    fits = lambda g: sum(lengths[i] for i in g) <= 100  # noqa: E731
    groups = plan_round(list(range(20)), 8, fits)
    assert len(groups) > 3  # the window alone would need 3
    assert all(fits(g) or len(g) == 1 for g in groups)
    assert [i for g in groups for i in g] == list(range(20))
    with pytest.raises(DoesNotFit) as err:
        plan_round([0, 1, 2], 8, lambda g: len(g) < 2)
    assert len(err.value.members) == 2


def test_full_tournament_reaches_one_winner():
    members, rounds = list(range(64)), 0
    while len(members) > 1:
        groups = plan_round(members, 4, lambda g: True)
        members, rounds = [g[-1] for g in groups], rounds + 1  # any winner per group
    assert rounds == rounds_needed(64, 4) == 3 and members == [63]
    assert rounds_needed(8, 8) == 1 and rounds_needed(9, 8) == 2 and rounds_needed(1, 8) == 0


@pytest.mark.parametrize("parsed,n,winner,votes", [
    ([2, 2, 1], 3, 2, [0, 1, 2]),
    ([1, 0], 3, 0, [1, 1, 0]),               # tie: the lowest index
    ([None, None], 2, None, [0, 0]),         # nothing parsed: no winner, not a made-up one
    ([None, 1, None], 2, 1, [0, 1]),         # unparsed judgments do not vote
])
def test_majority(parsed, n, winner, votes):
    assert majority(parsed, n) == (winner, votes)


def test_advance_sends_the_pick_on_and_falls_back_to_the_first_member_except_in_the_final():
    assert advance([4, 7, 9], 1, final=False) == 7
    assert advance([4, 7, 9], 2, final=True) == 9
    assert advance([4, 7, 9], None, final=False) == 4
    assert advance([4, 7, 9], None, final=True) is None



def test_both_orders_pick_cancels_a_position_preference_and_breaks_ties_low():
    import math
    first = math.log(0.7), math.log(0.3)  # a judge that says "the first one" 70/30, whatever it reads
    assert both_orders_pick(first, first) == 0  # a pure position preference: the two readings tie
    # a weak content preference for given candidate 1, under the same position preference:
    # as given it says 0 at 0.6; reversed (candidate 1 first) it says 0 (= candidate 1) at 0.8
    assert both_orders_pick((math.log(0.6), math.log(0.4)), (math.log(0.8), math.log(0.2))) == 1
    # three candidates: given i sits at position n-1-i when reversed
    assert both_orders_pick((-1.0, -2.0, -3.0), (-0.5, -4.0, -4.0)) == 2  # -3-0.5 > -1-4, -2-4
    assert both_orders_scores((-1.0, -2.0, -3.0), (-0.5, -4.0, -4.0)) == [-5.0, -6.0, -3.5]
    with pytest.raises(ValueError, match="two readings"):
        both_orders_pick((-1.0, -2.0), (-1.0,))
