"""Rule selectors read beside the policy, on the same held-out prompts and by the same procedures (the whole prompt,
and the knockout tournament of `core.algo.selection`), so that a selector's accuracy is stated against the strongest
selector that needs no RL:

* `cue`: the hedge-cue rule, which reads nothing but the verbal-confidence cue: a candidate that does not hedge
  (driver.data.slips.is_hedged), at random among them; all hedged, at random among all;
* `own_answer`: the model's own-answer rule: a candidate that states the answer X of the model's own worked solution
  (its greedy response's `Answer: X #k` line on the whole prompt; string equality), at random among them; where none
  states X, or the model wrote no X, the cue rule. On a model that solves then points, this is what its pointer
  would score if it always followed its own solution; it needs no training beyond the model's solving;
* `solve_alone`: the solve-alone rule: the model solves the problem without seeing any candidate (greedy, the
  generator prompt of `core.chat.format_generator_prompt`; driver/heldout.py asks the engine), the answer its solution
  states is read as a generator's is (`actors.verifier.solutions.stated_answer`), and the rule names a candidate whose
  answer equals it (math-verify equivalence, `answers_agree`), at random among them; where none does, or the solution
  states no answer, the cue rule. Any model can be read so, with or without a chat template; one that cannot solve
  scores the cue rule.

Each rule draws its ties from a generator seeded by the run's seed, the rule and the prompt's id, so a rule's choice
on a prompt is the same at every reading; on a prompt where no candidate states the answer a rule follows, it draws
the cue rule's ties and so picks what the cue rule picks. Pure apart from `answers_agree`'s math-verify worker
processes: the knockout's judge reads candidates, not an engine.
"""
from __future__ import annotations

import asyncio
import random
import re
from fractions import Fraction
from typing import Optional, Sequence

RULES = ("cue", "own_answer", "solve_alone")
RULE_NAMES = {"cue": "hedge-cue rule", "own_answer": "own-answer rule",  # as the console and summaries name them
              "solve_alone": "solve-alone rule"}
_NUMBER_RE = re.compile(r"^[+-]?\d+(?:\.\d+)?(?:/\d+)?$")
_POINTER_RE = re.compile(r"\s*#\s*\d+\s*$")  # a trailing ` #k` (a solve-then-point model's habit): not the answer


def cue_choice(candidates: Sequence[str], members: Sequence[int], rng: random.Random) -> int:
    """Among `members` (indices into `candidates`), one whose text does not hedge, at random; all hedge: any."""
    from driver.data.slips import is_hedged

    plain = [i for i in members if not is_hedged(candidates[i])]
    return rng.choice(plain or list(members))


def stating_choice(task, members: Sequence[int], stating: Optional[Sequence[int]], rng: random.Random) -> int:
    """Among `members`, one of the candidates in `stating` (those stating the answer a rule follows), at random; where
    none of them is a member (or `stating` is None): `cue_choice`."""
    named = [i for i in members if stating and i in stating]
    return rng.choice(named) if named else cue_choice(task.candidates, members, rng)


def own_answer_stating(task, own: Optional[str]) -> tuple:
    """The candidates of `task` whose answer is `own` (string equality after stripping); () when `own` is None."""
    return tuple(i for i, a in enumerate(task.candidate_answers) if own is not None and str(a).strip() == own.strip())


def own_answer_choice(task, members: Sequence[int], own: Optional[str], rng: random.Random) -> int:
    """Among `members`, one stating the model's own answer `own`, at random; where none does: `cue_choice`."""
    return stating_choice(task, members, own_answer_stating(task, own), rng)


def rule_choice(rule: str, task, members: Sequence[int], stating: Optional[Sequence[int]],
                rng: random.Random) -> int:
    """The candidate (an index of `task`) that `rule` (one of RULES) picks among `members`; `stating`: the candidates
    stating the answer the rule follows (own_answer, solve_alone; ignored by cue)."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    if rule == "cue":
        return cue_choice(task.candidates, members, rng)
    return stating_choice(task, members, stating, rng)


def _rng(seed: int, rule: str, task) -> random.Random:
    return random.Random(f"{rule}|{seed}|{task.prompt_id}")


def _task_rng(seed: int, rule: str, task, stating: Optional[Sequence[int]]) -> random.Random:
    """The generator `rule` draws its ties from on `task`: where no candidate states the answer it follows, the cue
    rule's own, so the rule picks exactly what the cue rule picks there (a rule that answers nothing is the cue rule,
    not a second draw of it that a maximum over rules would favour)."""
    return _rng(seed, rule if stating else "cue", task)


def whole_prompt_choices(rule: str, tasks: Sequence, stating: Sequence, seed: int) -> list:
    """P choices of `rule` reading each task's N candidates at once. stating: P tuples of candidate indices
    (`rule_choice`)."""
    return [rule_choice(rule, t, range(t.num_candidates), s, _task_rng(seed, rule, t, s))
            for t, s in zip(tasks, stating)]


def knockout_choices(rule: str, tasks: Sequence, stating: Sequence, window: int, seed: int) -> list:
    """P choices of `rule` judging the groups of `core.algo.selection.knockout` (at most `window` candidates a
    group), as the policy's knockout reading does."""
    from core.algo.selection import knockout

    rngs = [_task_rng(seed, rule, t, s) for t, s in zip(tasks, stating)]

    async def judge(groups: list) -> list:
        verdicts = []
        for i, members in groups:
            picked = rule_choice(rule, tasks[i], members, stating[i], rngs[i])
            verdicts.append({"local": list(members).index(picked)})
        return verdicts

    choices, _ = asyncio.run(knockout([t.num_candidates for t in tasks], window, judge))
    return choices


def rule_stating(tasks: Sequence, own_answers: Sequence[Optional[str]],
                 solve_alone: Optional[Sequence[tuple]] = None) -> dict:
    """The rules to read and, for each, the P tuples of candidates stating the answer it follows: {cue: P Nones,
    own_answer: (only where some response wrote an answer X), solve_alone: `solve_alone` as given (only when
    given: `solve_alone_stating`)}."""
    out = {"cue": [None] * len(tasks)}
    if any(a is not None for a in own_answers):
        out["own_answer"] = [own_answer_stating(t, a) for t, a in zip(tasks, own_answers)]
    if solve_alone is not None:
        out["solve_alone"] = list(solve_alone)
    return out


def rule_choices(tasks: Sequence, stating_by_rule: dict, window: int, seed: int) -> dict:
    """{`rule/{rule}/genselect`: P whole-prompt choices, and with `window` > 0 `rule/{rule}/knockout/genselect`: P
    choices by a knockout of that window} for each rule of `stating_by_rule` (`rule_stating`)."""
    out = {}
    for rule, stating in stating_by_rule.items():
        out[f"rule/{rule}/genselect"] = whole_prompt_choices(rule, tasks, stating, seed)
        if window:
            out[f"rule/{rule}/knockout/genselect"] = knockout_choices(rule, tasks, stating, window, seed)
    return out


def choice_metrics(tasks: Sequence, choices_by_key: dict, seed: int) -> dict:
    """`{key}`, `{key}_lo`, `{key}_hi` for each `key: P choices` of `choices_by_key` (keys ending in `genselect`):
    the accuracy with its 95% bootstrap CI over problems (driver.eval_metrics.selection_metrics)."""
    from driver.eval_metrics import selection_metrics

    out = {}
    for key, choices in choices_by_key.items():
        m = selection_metrics(tasks, choices, seed=seed)
        stem = key[:-len("genselect")]
        out.update({f"{stem}{k}": m[k] for k in ("genselect", "genselect_lo", "genselect_hi")})
    return out


def rule_metrics(tasks: Sequence, own_answers: Sequence[Optional[str]], window: int, seed: int,
                 solve_alone: Optional[Sequence[tuple]] = None) -> dict:
    """`rule/{rule}/{genselect,_lo,_hi}` on the whole prompts and, with `window` > 0, `rule/{rule}/knockout/...` by a
    knockout of that window, each with its 95% bootstrap CI over problems, for the rules `rule_stating` reads."""
    return choice_metrics(tasks, rule_choices(tasks, rule_stating(tasks, own_answers, solve_alone), window, seed),
                          seed)


# ---- the solve-alone rule's reading of the model's solutions -----------------------------------------------------
def solved_answer(solution: Optional[str]) -> Optional[str]:
    """The final answer a solution states (`actors.verifier.solutions.stated_answer`: the last `\\boxed{}`, else the
    last `Answer: X` line), a trailing pointer ` #k` dropped; None when it states none (or there is no solution)."""
    from actors.verifier.solutions import stated_answer

    answer = stated_answer(solution) if solution else None
    answer = _POINTER_RE.sub("", answer).strip() if answer else answer
    return answer or None


def _plain_number(text: str) -> Optional[Fraction]:
    """`text` as an exact number when it is a plain integer, decimal or fraction `p/q`, else None."""
    if not _NUMBER_RE.match(text):
        return None
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def answers_agree(pairs: Sequence[tuple]) -> list:
    """Whether each (answer, candidate answer) pair states the same answer: identical text (spaces collapsed) or equal
    plain numbers (integers, decimals, `p/q`) here; the rest by math-verify (`driver.data.verify.label_math`, worker
    processes under a deadline; a timeout or an error is not an agreement). P pairs -> P bools."""
    from driver.data.verify import label_math

    keyed = [(" ".join(str(a).split()), " ".join(str(c).split())) for a, c in pairs]
    verdicts: dict = {}
    for a, c in set(keyed):
        x, y = _plain_number(a), _plain_number(c)
        if a == c or (x is not None and y is not None):
            verdicts[(a, c)] = a == c or x == y
    rest = sorted(p for p in set(keyed) if p not in verdicts)
    if rest:
        verdicts.update(zip(rest, (label == 1.0 for label in label_math(rest))))
    return [verdicts[p] for p in keyed]


def solve_alone_stating(tasks: Sequence, solutions: Sequence[Optional[str]], agree=answers_agree) -> list:
    """P tuples: the candidates of each task whose answer equals the answer stated by `solutions[i]` (the model's own
    solution of the task's problem, read without the candidates; `solved_answer`), compared by `agree` (P pairs ->
    P bools; `answers_agree`); () where the solution states no answer."""
    answers = [solved_answer(s) for s in solutions]
    pairs = [(a, str(c)) for t, a in zip(tasks, answers) if a is not None for c in t.candidate_answers]
    verdicts = iter(agree(pairs) if pairs else [])
    out = []
    for task, answer in zip(tasks, answers):
        same = [next(verdicts) for _ in task.candidate_answers] if answer is not None else []
        out.append(tuple(i for i, ok in enumerate(same) if ok))
    return out


def solve_alone_breakdown(tasks: Sequence, solutions: Sequence[Optional[str]], stating: Sequence[tuple]) -> dict:
    """What the solve-alone rule read, as shares of the P prompts: {answered: its problem's solution states an answer,
    stated: some candidate states that answer, solved: a correct candidate does (the answer is right)}."""
    prompts = max(1, len(tasks))
    return {"answered": sum(solved_answer(s) is not None for s in solutions) / prompts,
            "stated": sum(bool(s) for s in stating) / prompts,
            "solved": sum(any(t.correct[i] for i in s) for t, s in zip(tasks, stating)) / prompts}
