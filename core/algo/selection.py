"""The selection procedures that the HTTP service (actors/serving/selector_server.py) and the held-out evaluation
(driver/evaluate.py) both run, so that what a user is served and what the reported figures measure are the same code:

* `knockout`: tournaments of several tasks at once, round by round (core/algo/knockout.py's rules: balanced groups
  that fit the prompt budget, a group whose judgment did not parse advances its first member, the final's unparsed
  judgment is no answer);
* `round_robin`: every pair of every task read as given and reversed, wins pooled by final answer
  (core/algo/round_robin.py).

The caller supplies the judge (how a group is read: sampled judgments, greedy, or index log-probs in both orders)
as an async function; everything else is here. Pure: stdlib only (the judges await the engine).
"""
from __future__ import annotations

from typing import Awaitable, Callable, Optional, Sequence

from core.algo.knockout import advance, plan_round
from core.algo.round_robin import all_pairs, read_in_both_orders, round_robin_pick, win_probs

#: judge([(task index, group), ...]) -> one verdict per group: a dict whose "local" is the index within the group it
#: picks (None: the judgment did not parse); other keys are the caller's and come back in the bracket
Judge = Callable[[list], Awaitable[list]]


async def knockout(sizes: Sequence[int], window: int, judge: Judge,
                   fits: Optional[Callable[[int, list], bool]] = None) -> tuple:
    """Knockout tournaments over tasks of `sizes` candidates, at most `window` a group; every round's groups of every
    task are judged in one `judge` call. `fits(task index, group)`: whether a group fits the prompt budget (default:
    always; plan_round raises DoesNotFit when a pair does not).

    Returns (choices, brackets): per task the selected candidate (None when the final judgment did not parse; 0 for a
    single candidate), and its rounds [{"groups": [[...]], "winners": [...], "verdicts": [verdict or None per
    group]}] (a group of one is not judged).
    """
    members = [list(range(n)) for n in sizes]
    brackets: list = [[] for _ in sizes]
    while True:
        plans = {i: plan_round(m, window, (lambda g, i=i: fits(i, g)) if fits else (lambda g: True))
                 for i, m in enumerate(members) if len(m) > 1}
        if not plans:
            break
        judged = [(i, g) for i, plan in plans.items() for g in plan if len(g) > 1]
        verdicts = dict(zip(((i, tuple(g)) for i, g in judged), await judge(judged)))
        for i, plan in plans.items():
            final = len(plan) == 1
            by_group = [verdicts.get((i, tuple(g))) for g in plan]
            winners = [g[0] if v is None else advance(g, v["local"], final) for g, v in zip(plan, by_group)]
            brackets[i].append({"groups": plan, "winners": winners, "verdicts": by_group})
            members[i] = winners
    return [m[0] if m else None for m in members], brackets


async def round_robin(sizes: Sequence[int], read: Callable[[list], Awaitable[list]],
                      answers: Optional[Sequence[Optional[Sequence]]] = None) -> list:
    """Round robins over tasks of `sizes` candidates: every pair of every task read as given and reversed in one
    `read` call (`read([(task index, order), ...]) -> the log-probs of each order's indices`, one list per order), its
    wins pooled by `answers[task]` (final answers per candidate; None: each candidate alone). Returns per task
    (selected candidate, wins per candidate)."""
    pairs = [all_pairs(n) for n in sizes]
    orders = [(i, order) for i, p in enumerate(pairs) for order in read_in_both_orders(p)]
    readings = await read(orders) if orders else []
    out, start = [], 0
    for i, (n, p) in enumerate(zip(sizes, pairs)):
        probs = win_probs(p, readings[start:start + 2 * len(p)])
        start += 2 * len(p)
        out.append(round_robin_pick(n, probs, answers[i] if answers is not None else None))
    return out
