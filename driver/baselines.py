"""Rule selectors read beside the policy, on the same held-out prompts and by the same procedures (the whole prompt,
and the knockout tournament of `core.algo.selection`), so that a selector's accuracy is stated against the strongest
selector that needs no RL:

* `cue`: the hedge-cue rule, which reads nothing but the verbal-confidence cue: a candidate that does not hedge
  (driver.data.slips.is_hedged), at random among them; all hedged, at random among all;
* `own_answer`: the model's own-answer rule: a candidate that states the answer X of the model's own worked solution
  (its greedy response's `Answer: X #k` line on the whole prompt), at random among them; where none states X, or the
  model wrote no X, the cue rule. On a model that solves then points, this is what its pointer would score if it
  always followed its own solution; it needs no training beyond the model's solving.

Each rule draws its ties from a generator seeded by the run's seed and the prompt's id, so a rule's choice on a prompt
is the same at every reading. Pure: the knockout's judge reads candidates, not an engine.
"""
from __future__ import annotations

import asyncio
import random
from typing import Optional, Sequence

RULES = ("cue", "own_answer")
RULE_NAMES = {"cue": "hedge-cue rule", "own_answer": "own-answer rule"}  # as the console and summaries name them


def cue_choice(candidates: Sequence[str], members: Sequence[int], rng: random.Random) -> int:
    """Among `members` (indices into `candidates`), one whose text does not hedge, at random; all hedge: any."""
    from driver.data.slips import is_hedged

    plain = [i for i in members if not is_hedged(candidates[i])]
    return rng.choice(plain or list(members))


def own_answer_choice(task, members: Sequence[int], own: Optional[str], rng: random.Random) -> int:
    """Among `members`, one stating the model's own answer `own` (string equality after stripping), at random;
    where none does (or `own` is None): `cue_choice`."""
    stating = [i for i in members if own is not None and str(task.candidate_answers[i]).strip() == own.strip()]
    return rng.choice(stating) if stating else cue_choice(task.candidates, members, rng)


def rule_choice(rule: str, task, members: Sequence[int], own: Optional[str], rng: random.Random) -> int:
    """The candidate (an index of `task`) that `rule` (one of RULES) picks among `members`."""
    if rule == "cue":
        return cue_choice(task.candidates, members, rng)
    if rule == "own_answer":
        return own_answer_choice(task, members, own, rng)
    raise ValueError(f"rule must be one of {RULES}, got {rule!r}")


def _rng(seed: int, rule: str, task) -> random.Random:
    return random.Random(f"{rule}|{seed}|{task.prompt_id}")


def whole_prompt_choices(rule: str, tasks: Sequence, own_answers: Sequence[Optional[str]], seed: int) -> list:
    """P choices of `rule` reading each task's N candidates at once. own_answers: P answers X (None: none)."""
    return [rule_choice(rule, t, range(t.num_candidates), own, _rng(seed, rule, t))
            for t, own in zip(tasks, own_answers)]


def knockout_choices(rule: str, tasks: Sequence, own_answers: Sequence[Optional[str]], window: int,
                     seed: int) -> list:
    """P choices of `rule` judging the groups of `core.algo.selection.knockout` (at most `window` candidates a
    group), as the policy's knockout reading does."""
    from core.algo.selection import knockout

    rngs = [_rng(seed, rule, t) for t in tasks]

    async def judge(groups: list) -> list:
        verdicts = []
        for i, members in groups:
            picked = rule_choice(rule, tasks[i], members, own_answers[i], rngs[i])
            verdicts.append({"local": list(members).index(picked)})
        return verdicts

    choices, _ = asyncio.run(knockout([t.num_candidates for t in tasks], window, judge))
    return choices


def rule_metrics(tasks: Sequence, own_answers: Sequence[Optional[str]], window: int, seed: int) -> dict:
    """`rule/{rule}/{genselect,_lo,_hi}` on the whole prompts and, with `window` > 0, `rule/{rule}/knockout/...` by a
    knockout of that window, each with its 95% bootstrap CI over problems (driver.eval_metrics.selection_metrics). The
    own-answer rule is read only where some response wrote an answer X."""
    from driver.eval_metrics import selection_metrics

    out = {}
    rules = [r for r in RULES if r != "own_answer" or any(a is not None for a in own_answers)]
    for rule in rules:
        procedures = {"": whole_prompt_choices(rule, tasks, own_answers, seed)}
        if window:
            procedures["knockout/"] = knockout_choices(rule, tasks, own_answers, window, seed)
        for procedure, choices in procedures.items():
            m = selection_metrics(tasks, choices, seed=seed)
            out.update({f"rule/{rule}/{procedure}{k}": m[k] for k in ("genselect", "genselect_lo", "genselect_hi")})
    return out
