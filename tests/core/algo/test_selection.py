"""core.algo.selection: the knockout and the round robin that serving and evaluation share, driven by fake judges."""
import asyncio
import math

import pytest

from core.algo.knockout import DoesNotFit
from core.algo.round_robin import round_robin_pick, win_probs
from core.algo.selection import knockout, round_robin


def run(coro):
    return asyncio.run(coro)


def test_knockout_judges_every_task_of_a_round_in_one_call_and_the_best_candidate_wins():
    calls = []

    async def judge(judged):  # picks the highest candidate index of each group
        calls.append(judged)
        return [{"local": max(range(len(g)), key=lambda k: g[k]), "seen": tuple(g)} for _, g in judged]

    choices, brackets = run(knockout([5, 1, 2], 2, judge))
    assert choices == [4, 0, 1]
    assert len(calls) == 3  # 5 candidates by pairs: 3 rounds; the pair task is judged in the first
    assert {i for i, _ in calls[0]} == {0, 2} and all(i == 0 for c in calls[1:] for i, _ in c)
    assert brackets[1] == [] and brackets[2] == [{"groups": [[0, 1]], "winners": [1],
                                                 "verdicts": [{"local": 1, "seen": (0, 1)}]}]
    assert brackets[0][-1]["winners"] == [4] and brackets[0][0]["groups"] == [[0, 1], [2, 3], [4]]
    assert brackets[0][0]["verdicts"][2] is None  # a group of one is not judged


def test_an_unparsed_judgment_advances_the_first_member_except_in_the_final():
    async def never_parses(judged):
        return [{"local": None} for _ in judged]

    choices, brackets = run(knockout([4], 2, never_parses))
    assert brackets[0][0]["winners"] == [0, 2] and choices == [None]


def test_a_pair_that_does_not_fit_the_budget_is_refused():
    async def judge(judged):
        raise AssertionError("nothing is judged when a pair cannot fit")

    with pytest.raises(DoesNotFit):
        run(knockout([3], 2, judge, fits=lambda task, g: g != [0, 1]))


def test_round_robin_pools_wins_by_answer_as_round_robin_pick_does():
    reads = []

    def logprobs(order):  # the candidate with the higher index is preferred, in either order
        first, second = order
        p = 0.8 if first > second else 0.2
        return [math.log(p), math.log(1 - p)]

    async def read(orders):
        reads.append(orders)
        return [logprobs(order) for _, order in orders]

    answers = [["7", "7", "9"], None]
    out = run(round_robin([3, 2], read, answers))
    assert len(reads) == 1 and len(reads[0]) == 2 * 3 + 2 * 1  # every pair of every task, both orders, one call
    first = [logprobs(o) for i, o in reads[0] if i == 0]
    assert out[0] == round_robin_pick(3, win_probs([(0, 1), (0, 2), (1, 2)], first), answers[0])
    assert out[1][0] == 1 and out[1][1][1] > out[1][1][0]  # the preferred candidate of the pair wins it
