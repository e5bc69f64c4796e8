"""benchmarks/knockout_needs.py: the knockout's accuracy for a given per-match accuracy p."""
import random

from benchmarks.knockout_needs import knockout_correct


def test_a_perfect_check_always_wins_and_a_reversed_one_never_does():
    rng = random.Random(0)
    for labels in ([1, 0], [0, 0, 1, 0, 0], [0, 1, 0, 1, 0, 0, 0, 0]):
        assert knockout_correct(labels, 1.0, rng) == 1.0
    assert knockout_correct([0, 0, 0, 1, 0, 0, 0, 0], 0.0, rng) == 0.0  # one correct: it loses its first match


def test_a_coin_flip_check_picks_a_correct_candidate_at_its_share():
    rng = random.Random(0)
    labels = [1, 0, 0, 0]  # a balanced bracket: each candidate wins with probability 1/4
    mean = sum(knockout_correct(labels, 0.5, rng) for _ in range(4000)) / 4000
    assert abs(mean - 0.25) < 0.03


def test_round_robin_by_answer_is_majority_voting_for_a_coin_flip_check_and_perfect_for_a_perfect_one():
    from benchmarks.knockout_needs import round_robin_correct

    rng = random.Random(0)
    labels, answers = [1, 0, 0, 1, 0], ["7", "5", "5", "7", "5"]  # majority voting says 5: wrong
    assert round_robin_correct(labels, answers, 1.0, rng) == 1.0
    assert round_robin_correct(labels, None, 1.0, rng) == 1.0
    # a coin-flip check: the pooled wins follow the answers' counts, so the pick is usually majority's (wrong) answer
    mean = sum(round_robin_correct(labels, answers, 0.5, rng) for _ in range(2000)) / 2000
    assert mean < 0.3
