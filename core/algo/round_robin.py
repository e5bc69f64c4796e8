"""Best-of-N from a pairwise selector by a round robin of pairs, scored by final answer.

Why. A knockout tournament of pairs (core/algo/knockout.py) never sees the candidates' agreement, which is what
majority voting reads: on the default's no-cue held-out set a pair check that wins 66% of random
correct-vs-wrong pairs reads 0.40 by knockout where majority voting reads 0.445 (BENCHMARKS.md), because one lost
match eliminates a correct candidate and the knockout promotes exactly the wrong candidates whose slip the check
cannot see. A round robin plays every pair, so one bad match costs a little, not everything; scoring *answers*
rather than candidates keeps the agreement:

    P(i beats j)  = softmax over the pair of the both-orders scores (core.algo.knockout.both_orders_scores),
    wins(i)       = sum over j != i of P(i beats j),
    score(a)      = sum over the candidates i whose final answer is a of wins(i),

and the answer with the highest score is selected (its candidate with the most wins; ties go to the lowest
index). The property that makes it honest to compare with majority voting: for a selector at chance (every
P = 1/2), score(a) = n_a (N - 1) / 2 is proportional to the number of candidates that give answer a, so the
pick is majority voting's; every point the round robin scores above majority@N comes from the selector's
pairwise judgments. With `answers=None` every candidate is its own answer (a plain round robin, Borda count).

Cost: N (N - 1) / 2 pairs, each read in both orders (N (N - 1) one-token prompts, each ~2/N of the full prompt).

Pure: stdlib only.
"""
from __future__ import annotations

import math
from itertools import combinations
from typing import Hashable, Mapping, Optional, Sequence

from core.algo.knockout import both_orders_scores


def all_pairs(n: int) -> list:
    """Every pair (i, j) with i < j of n candidates, in lexicographic order."""
    return list(combinations(range(n), 2))


def pair_win_prob(forward: Sequence[float], backward: Sequence[float]) -> float:
    """P(the first candidate of a pair beats the second) from its index log-probs read as given (`forward`,
    2 floats) and reversed (`backward`): the softmax of the two both-orders scores, so a position preference
    cancels and a pair read the same way in both orders gives 1/2."""
    first, second = both_orders_scores(forward, backward)
    if first == second:  # also both -inf
        return 0.5
    top = max(first, second)
    a, b = math.exp(first - top), math.exp(second - top)
    return a / (a + b)


def read_in_both_orders(pairs: Sequence[tuple]) -> list:
    """The groups to judge for `pairs`: each pair as given, then reversed ((i, j), (j, i), ...)."""
    return [order for pair in pairs for order in (tuple(pair), tuple(pair[::-1]))]


def win_probs(pairs: Sequence[tuple], readings: Sequence[Sequence[float]]) -> dict:
    """{pair: P(first beats second)} from the index log-probs of `read_in_both_orders(pairs)`, in that order
    (2 readings per pair, each 2 floats)."""
    if len(readings) != 2 * len(pairs):
        raise ValueError(f"{len(readings)} readings for {len(pairs)} pairs read in both orders")
    return {tuple(pair): pair_win_prob(readings[2 * k], readings[2 * k + 1]) for k, pair in enumerate(pairs)}


def candidate_wins(n: int, win_prob: Mapping[tuple, float]) -> list:
    """wins(i) = sum over j != i of P(i beats j), from `win_prob[(i, j)]` = P(i beats j) for every pair i < j."""
    wins = [0.0] * n
    for (i, j) in all_pairs(n):
        p = win_prob[(i, j)]
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"P({i} beats {j}) = {p} is not a probability")
        wins[i] += p
        wins[j] += 1.0 - p
    return wins


def answer_keys(answers: Optional[Sequence[Optional[Hashable]]], n: int) -> list:
    """The key each candidate's wins are pooled under: its final answer; a candidate without one (None), or
    every candidate when `answers` is None, is a group of its own."""
    if answers is None:
        return [("candidate", i) for i in range(n)]
    if len(answers) != n:
        raise ValueError(f"{len(answers)} answers for {n} candidates")
    return [("candidate", i) if a is None else ("answer", a) for i, a in enumerate(answers)]


def round_robin_pick(n: int, win_prob: Mapping[tuple, float],
                     answers: Optional[Sequence[Optional[Hashable]]] = None) -> tuple:
    """(selected candidate index, wins per candidate) of a round robin over n candidates (module docstring).

    Args:
        n: number of candidates (>= 1).
        win_prob: {(i, j): P(i beats j)} for every pair i < j (`all_pairs(n)`).
        answers: n final answers (None for a candidate without one) whose wins are pooled, or None to score
            candidates alone.
    """
    if n < 1:
        raise ValueError("a round robin needs at least one candidate")
    wins = candidate_wins(n, win_prob)
    keys = answer_keys(answers, n)
    pooled: dict = {}
    for key, w in zip(keys, wins):
        pooled[key] = pooled.get(key, 0.0) + w
    # the best answer: highest pooled score, ties to the answer of the lowest index; then its best candidate
    best_key = max(pooled, key=lambda k: (pooled[k], -keys.index(k)))
    members = [i for i in range(n) if keys[i] == best_key]
    return max(members, key=lambda i: (wins[i], -i)), wins
