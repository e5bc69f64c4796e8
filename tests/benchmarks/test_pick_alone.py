"""benchmarks/pick_alone.py: the pick's greedy hit, exact sampled accuracy and entropy, and the solver table."""
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "benchmarks"))

import pick_alone  # noqa: E402


def test_pick_scores_read_the_greedy_index_the_mass_on_correct_candidates_and_the_entropy():
    logps = [math.log(0.2), math.log(0.5), math.log(0.3)]
    greedy, sampled, entropy = pick_alone.pick_scores(logps, [False, True, True])
    assert greedy == 1.0 and sampled == pytest.approx(0.8)
    assert entropy == pytest.approx(-(0.2 * math.log(0.2) + 0.5 * math.log(0.5) + 0.3 * math.log(0.3)))
    assert pick_alone.pick_scores([math.log(0.9), math.log(0.1)], [False, True])[:2] == (0.0, pytest.approx(0.1))
    uniform = pick_alone.pick_scores([math.log(0.5)] * 2, [True, False])
    assert uniform[1] == pytest.approx(0.5) and uniform[2] == pytest.approx(math.log(2))


def test_mean_scores_and_the_solver_table():
    assert pick_alone.mean_scores([(1.0, 0.6, 0.5), (0.0, 0.4, 0.7)]) == pytest.approx(
        {"greedy": 0.5, "sampled": 0.5, "entropy": 0.6})
    table = pick_alone.solver_effect([(True, True, True), (True, False, False), (False, True, False)])
    assert table == {True: {"n": 2, "solved": 0.5, "stated": 0.5}, False: {"n": 1, "solved": 0.0, "stated": 1.0}}
