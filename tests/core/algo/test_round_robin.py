"""Round robin of pairs scored by answer (core/algo/round_robin.py): pure, no engine."""
import math
import random

import pytest

from core.algo.metrics import majority_at_k
from core.algo.round_robin import (all_pairs, candidate_wins, pair_win_prob, read_in_both_orders, round_robin_pick,
                                   win_probs)


def test_all_pairs_lists_each_pair_once():
    assert all_pairs(1) == []
    assert all_pairs(3) == [(0, 1), (0, 2), (1, 2)]
    assert len(all_pairs(8)) == 28


def test_pair_win_prob_cancels_a_position_preference():
    # the model prefers position 0 by the same margin in both orders: no preference between the candidates
    first = [math.log(0.8), math.log(0.2)]
    assert pair_win_prob(first, first) == pytest.approx(0.5)
    # candidate 0 is preferred as given (0.9) and, reversed, at position 1 (0.7)
    p = pair_win_prob([math.log(0.9), math.log(0.1)], [math.log(0.3), math.log(0.7)])
    assert p == pytest.approx(0.9 * 0.7 / (0.9 * 0.7 + 0.1 * 0.3))
    assert pair_win_prob([0.0, float("-inf")], [float("-inf"), 0.0]) == 1.0
    assert pair_win_prob([float("-inf")] * 2, [float("-inf")] * 2) == 0.5


def test_candidate_wins_add_up_to_the_number_of_pairs():
    rng = random.Random(0)
    probs = {pair: rng.random() for pair in all_pairs(6)}
    wins = candidate_wins(6, probs)
    assert sum(wins) == pytest.approx(15)
    with pytest.raises(ValueError, match="not a probability"):
        candidate_wins(2, {(0, 1): 1.5})


@pytest.mark.parametrize("seed", range(20))
def test_a_selector_at_chance_picks_majority_votings_answer(seed):
    """Every P = 1/2: the pooled score is proportional to an answer's count, so the pick has the plurality answer
    (ties: the answer of the lowest index)."""
    rng = random.Random(seed)
    n = rng.randint(2, 8)
    answers = [rng.choice("abc") for _ in range(n)]
    pick, _ = round_robin_pick(n, {pair: 0.5 for pair in all_pairs(n)}, answers)
    counts = {a: answers.count(a) for a in answers}
    top = max(counts.values())
    assert counts[answers[pick]] == top
    assert answers[pick] == next(a for a in answers if counts[a] == top)


def test_pooling_by_answer_keeps_agreement_that_a_plain_round_robin_loses():
    """Three candidates say 5 and each loses narrowly to the lone 7; pooled, 5 wins; alone, the 7 wins."""
    answers = ["5", "5", "5", "7"]
    probs = {pair: 0.5 for pair in all_pairs(4)}
    probs.update({(0, 3): 0.4, (1, 3): 0.4, (2, 3): 0.4})
    assert round_robin_pick(4, probs, answers)[0] in (0, 1, 2)
    assert round_robin_pick(4, probs, None)[0] == 3


def test_a_check_above_chance_beats_majority_voting_on_average():
    """Correct-vs-wrong pairs go to the correct candidate with P = 0.6, the rest are coin flips: over random
    problems where the wrong answers cluster, the round robin by answer beats majority@N."""
    rng = random.Random(1)
    hits, majority = [], []
    for _ in range(3000):
        n = rng.randint(2, 8)
        correct = [rng.random() < 0.35 for _ in range(n)]
        correct[rng.randrange(n)] = True
        answers = ["42" if ok else rng.choice(["41", "40", "24"]) for ok in correct]
        probs = {}
        for i, j in all_pairs(n):
            if correct[i] == correct[j]:
                probs[(i, j)] = 0.5
            else:
                probs[(i, j)] = 0.6 if correct[i] else 0.4
        pick, _ = round_robin_pick(n, probs, answers)
        hits.append(correct[pick])
        majority.append(majority_at_k(answers, correct))
    assert sum(hits) / len(hits) > sum(majority) / len(majority) + 0.03


def test_candidates_without_an_answer_stand_alone_and_bad_input_is_refused():
    answers = [None, None, "3"]
    probs = {(0, 1): 0.5, (0, 2): 0.6, (1, 2): 0.6}
    assert round_robin_pick(3, probs, answers)[0] == 0  # two None answers are not pooled together
    with pytest.raises(ValueError, match="answers for"):
        round_robin_pick(3, probs, ["1"])
    with pytest.raises(ValueError, match="at least one"):
        round_robin_pick(0, {})
    assert round_robin_pick(1, {}, ["x"]) == (0, [0.0])


def test_win_probs_read_each_pair_from_its_two_readings_in_order():
    pairs = all_pairs(3)
    assert read_in_both_orders(pairs) == [(0, 1), (1, 0), (0, 2), (2, 0), (1, 2), (2, 1)]
    even, first_wins = [math.log(0.5)] * 2, [0.0, float("-inf")]
    readings = [even, even, first_wins, [float("-inf"), 0.0], even, even]
    assert win_probs(pairs, readings) == {(0, 1): 0.5, (0, 2): 1.0, (1, 2): 0.5}
    with pytest.raises(ValueError, match="readings for 3 pairs"):
        win_probs(pairs, readings[:5])
