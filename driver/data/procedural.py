"""Procedural math problems and candidate worked solutions with realistic, *shared* mistakes.

Why it looks like this. The embedded default trains a tiny selector (docs/models.md) on 2 CPU cores, so the
selection task must be learnable by reading the candidates, and must not be solvable by counting answers:

* Every candidate is a short chain of steps, one arithmetic operation per line (`7 + 5 = 12`,
  `12 - 4 = 8`, `Answer: 8`). Operands stay small (single digits and low two-digit numbers; a product
  is always single digit x single digit), so checking one step is a small lookup a tiny model can learn.
* A wrong candidate contains one *slip* (`driver.data.worked`): a step whose written result is not what
  its operands give. Later steps compute correctly from the wrong value, so the error propagates to the
  final answer and the only local inconsistency is the slip itself.
* Per problem a few *common* slips are drawn, and most wrong candidates repeat one of them (as sampled
  LLM solutions repeat the same misconception); the rest make a fresh slip. Wrong answers therefore
  cluster, and majority voting is often wrong: the selector has to check the steps.
* Surface form varies (operand order of commutative steps), so duplicates are common but not universal;
  the builder keeps duplicate texts' indices and labels apart.

* Optional verbal-confidence cue (`hedge_wrong_rate`, `hedge_correct_rate`, off by default): a candidate
  may hedge before its answer line (`This might be wrong.` then `Answer: 8`), wrong candidates
  more often than correct ones, as sampled LLM solutions hedge more when they are wrong. It is *noisy*
  (correct candidates hedge too, wrong ones often do not), so it helps but never decides a selection; the
  embedded default turns it on so that a ~3M-parameter selector can learn something useful within minutes
  of RL on 2 cores (without it, even supervised training of that model barely beat majority voting).

Knobs (`ProceduralSpec`; `error_rate` comes from `DataConfig.candidate_error_rate`): `error_rate`
(probability that a candidate is wrong), `num_common_slips`, `common_slip_share` (fraction of wrong
candidates that repeat a common slip), `min_steps`/`max_steps`, `max_operand`, `ops`, `slip_kinds`.
Deterministic for a given seed.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Callable, Optional

from driver.data.worked import OPS, Plan, Ref, fmt, render_solution


@dataclass(frozen=True)
class ProceduralSpec:
    """Knobs of the procedural generator (see the module docstring)."""
    error_rate: float = 0.6
    num_common_slips: int = 2
    common_slip_share: float = 0.8
    min_steps: int = 2
    max_steps: int = 3
    max_operand: int = 9
    ops: tuple = ("+", "-", "*")
    slip_kinds: tuple = ("off_by_one", "dropped_carry", "wrong_operation", "sign_error", "table_slip",
                         "miscopy")
    hedge_wrong_rate: float = 0.0
    hedge_correct_rate: float = 0.0


# Bumped whenever the same spec and seed would produce other problems (it is part of the dataset hash):
# 2 = every problem computes a distinct expression.
GENERATOR_VERSION = 2

HEDGES = ("I am not sure about this.", "This might be wrong.", "Not fully confident here.")


TEMPLATES = (
    "Compute {expr}.",
    "What is the value of {expr}?",
    "Evaluate {expr} step by step.",
)


_TEMPLATE_PATTERNS = tuple(re.compile("^" + re.escape(t).replace(re.escape("{expr}"), "(?P<expr>.+)") + "$")
                           for t in TEMPLATES)


def problem_key(text: str) -> str:
    """What a problem computes: the expression of a procedural problem (the same under every template, so
    `Compute 3 + 4.` and `What is the value of 3 + 4?` share a key), else the text itself. Exclusions between
    training, pretraining and held-out sets compare these keys, not the texts."""
    for pattern in _TEMPLATE_PATTERNS:
        match = pattern.match(text)
        if match:
            return match["expr"]
    return text


def make_plan(rng: random.Random, spec: ProceduralSpec) -> Plan:
    """A chain of min_steps..max_steps operations on small numbers: step i applies (op, operand) to the
    previous result. A product only follows a single-digit running value (single digit x single digit)."""
    n = rng.randint(spec.min_steps, spec.max_steps)
    value = rng.randint(2, spec.max_operand)
    left, steps = value, []
    for i in range(n):
        op = rng.choice([op for op in spec.ops if op != "*" or 2 <= value <= spec.max_operand])
        operand = rng.randint(2, spec.max_operand)
        steps.append((op, left, operand))
        value, left = OPS[op](value, operand), Ref(i)
    return Plan(tuple(steps))


def expression(plan: Plan) -> str:
    """The chain as an expression, parenthesised where left-to-right order differs from precedence."""
    _, start, _ = plan.steps[0]
    expr = fmt(start)
    for i, (op, _, operand) in enumerate(plan.steps):
        expr = f"({expr}) {op} {fmt(operand)}" if i > 0 and op == "*" else f"{expr} {op} {fmt(operand)}"
    return expr


def render_problem(plan: Plan, rng: random.Random) -> str:
    return rng.choice(TEMPLATES).format(expr=expression(plan))


def make_candidates(plan: Plan, k: int, rng: random.Random, spec: ProceduralSpec) -> list:
    """K candidate texts: each wrong with probability spec.error_rate; most wrong ones share one of
    `spec.num_common_slips` common slips of this problem (the first twice as often as the second, ...)."""
    slips = [s for s in plan.possible_slips() if s.kind in spec.slip_kinds]
    common = _distinct_answers(plan, _kind_balanced_order(slips, rng), spec.num_common_slips)
    weights = [2.0 ** -i for i in range(len(common))]
    texts = []
    for _ in range(k):
        if not slips or rng.random() >= spec.error_rate:
            slip = None
        elif common and rng.random() < spec.common_slip_share:
            slip = rng.choices(common, weights=weights)[0]
        else:
            slip = _kind_balanced_order(slips, rng)[0]
        steps, answer = plan.write(slip)
        text = render_solution(steps, [rng.random() < 0.5 for _ in steps], answer)
        hedge_rate = spec.hedge_correct_rate if slip is None else spec.hedge_wrong_rate
        if hedge_rate and rng.random() < hedge_rate:
            text = hedge(text, rng)
        texts.append(text)
    return texts


def strip_hedges(text: str) -> str:
    """`text` without its hedging sentences (the inverse of `hedge`; other lines untouched)."""
    return "\n".join(line for line in text.split("\n") if line not in HEDGES)


def hedge(text: str, rng: random.Random) -> str:
    """Insert a hedging sentence (a verbal-confidence cue) before the final `Answer: X` line."""
    head, _, answer = text.rpartition("Answer: ")
    return f"{head}{rng.choice(HEDGES)}\nAnswer: {answer}"


def _kind_balanced_order(slips: list, rng: random.Random) -> list:
    """Slips in a random order in which every kind is equally likely to come first (off-by-one slips,
    possible at every step in two directions, would otherwise crowd out the rarer kinds)."""
    by_kind: dict = {}
    for s in slips:
        by_kind.setdefault(s.kind, []).append(s)
    for group in by_kind.values():
        rng.shuffle(group)
    kinds = sorted(by_kind)
    rng.shuffle(kinds)
    order = []
    while any(by_kind.values()):
        for kind in kinds:
            if by_kind[kind]:
                order.append(by_kind[kind].pop())
    return order


def _distinct_answers(plan: Plan, slips: list, n: int) -> list:
    chosen, answers = [], set()
    for slip in slips:
        ans = plan.answer(slip)
        if ans not in answers:
            chosen.append(slip)
            answers.add(ans)
        if len(chosen) == n:
            break
    return chosen


def generate(num_problems: int, k: int, seed: int, spec: ProceduralSpec,
             on_item: Optional[Callable] = None) -> list:
    """`num_problems` dicts {id, problem, answer, candidates}; deterministic for (seed, spec).

    Every problem computes a different expression: a repeated one would put the same problem on both sides
    of the train/held-out split (7.5% of held-out prompts did, before). Raises ValueError when the spec
    cannot make that many distinct expressions."""
    rng = random.Random(f"procedural-{seed}")
    out, seen = [], set()
    for i in range(num_problems):
        for _ in range(1000):
            plan = make_plan(rng, spec)
            if expression(plan) not in seen:
                break
        else:
            raise ValueError(f"the procedural spec yields fewer than {num_problems} distinct problems; "
                             f"lower data.num_problems or allow more steps or larger operands")
        seen.add(expression(plan))
        out.append({
            "id": f"pm-{i:05d}",
            "problem": render_problem(plan, rng),
            "answer": fmt(plan.answer()),
            "candidates": make_candidates(plan, k, rng, spec),
        })
        if on_item:
            on_item()
    return out
