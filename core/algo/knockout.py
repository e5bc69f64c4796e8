"""Serving-time selection: majority over k sampled judgments, and a knockout tournament for large N.

A selector is trained on prompts of at most `window` candidates (data.max_candidates) that fit a prompt
token budget (data.max_prompt_tokens). At Best-of-N time N may be larger. Knockout (NeMo-Skills' GenSelect
for large N): split the candidates into the fewest groups that each fit, select within every group, and
repeat over the winners until one remains. Groups are balanced (sizes differ by at most one) and keep the
caller's order, so a round is a pure function of the candidates still in play.

Rules kept here (documented in docs/serving.md):
* majority: the index with the most parsed votes wins; ties go to the lowest candidate index (the
  order the caller gave), so the answer is deterministic; unparseable judgments are counted, not dropped;
* both orders (`both_orders_pick`): a group may be judged twice, as given and reversed, from the log-probs of
  every index; a candidate's score is the sum of its two log-probs, so a preference for a position cancels
  (the position swap of pairwise LLM judges); ties go to the lowest index;
* a group in which no judgment parsed advances its first candidate and is counted as a fallback
  (a tournament needs a winner from every group); in the final round no parsed judgment means no answer
  (`index` None), never a made-up one.

Pure: stdlib only.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence


class DoesNotFit(ValueError):
    """Even two candidates do not fit the prompt budget; `members` are the candidate indices concerned."""

    def __init__(self, message: str, members: Sequence[int]):
        super().__init__(message)
        self.members = list(members)


def balanced_split(items: Sequence[int], groups: int) -> list:
    """`items` in order, cut into `groups` consecutive runs whose lengths differ by at most one."""
    size, extra = divmod(len(items), groups)
    out, start = [], 0
    for g in range(groups):
        end = start + size + (1 if g < extra else 0)
        out.append(list(items[start:end]))
        start = end
    return out


def plan_round(members: Sequence[int], window: int, fits: Callable[[list], bool]) -> list:
    """The groups of one round over `members` (candidate indices): the fewest balanced groups of at most
    `window` candidates such that `fits(group)` holds for each (the prompt-token budget). A single member
    is its own group (it advances). Raises DoesNotFit when some pair of candidates does not fit.
    """
    members = list(members)
    if window < 2:
        raise ValueError(f"window must be >= 2, got {window}")
    if len(members) <= 1:
        return [members]
    groups = -(-len(members) // window)
    while True:
        split = balanced_split(members, groups)
        bad = [g for g in split if len(g) > 1 and not fits(g)]
        if not bad:
            return split
        if all(len(g) <= 2 for g in bad):
            raise DoesNotFit(f"candidates {bad[0]} do not fit the prompt budget even as a pair", bad[0])
        groups += 1


def majority(parsed: Sequence[Optional[int]], num_candidates: int) -> tuple:
    """(winner or None, votes per candidate) from parsed judgments (None = unparseable).

    Ties go to the lowest index; no parsed judgment gives (None, all zeros).
    """
    votes = [0] * num_candidates
    for index in parsed:
        if index is not None:
            votes[index] += 1
    if not any(votes):
        return None, votes
    best = max(votes)
    return votes.index(best), votes


def both_orders_scores(forward: Sequence[float], backward: Sequence[float]) -> list:
    """Scores of a group judged in both orders, indexed as the group is given.

    forward[i]: log p(answer i) with the group as given; backward[j]: log p(answer j) with the group reversed,
    where given candidate i sits at position n-1-i. Score of i: forward[i] + backward[n-1-i].
    """
    n = len(forward)
    if len(backward) != n or n < 1:
        raise ValueError(f"need two readings of the same group, got {len(forward)} and {len(backward)} log-probs")
    return [forward[i] + backward[n - 1 - i] for i in range(n)]


def both_orders_pick(forward: Sequence[float], backward: Sequence[float]) -> int:
    """The winner (an index into the group as given) of a group judged in both orders: the highest
    `both_orders_scores`; ties go to the lowest index."""
    scores = both_orders_scores(forward, backward)
    return max(range(len(scores)), key=lambda i: (scores[i], -i))


def advance(group: Sequence[int], pick: Optional[int], final: bool) -> Optional[int]:
    """The candidate a judged group sends on: `group[pick]` (pick: the judgment's index within the group);
    when no judgment parsed (pick None), the group's first member, except in the final round, which then has
    no answer (None)."""
    if pick is not None:
        return group[pick]
    return None if final else group[0]


def rounds_needed(n: int, window: int) -> int:
    """Rounds a knockout over n candidates takes when only the window binds (the token budget may add more)."""
    rounds = 0
    while n > 1:
        n, rounds = -(-n // window), rounds + 1
    return rounds
