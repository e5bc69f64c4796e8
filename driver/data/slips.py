"""Which mistake a worked solution makes, read back from its text (for the evaluation by slip kind).

The procedural source (`driver.data.worked`) writes one operation per line (`a op b = r`) and ends with
`Answer: X`, optionally after a hedging sentence. `slip_kind(text)` re-checks the lines in order and names
the first inconsistency the way `worked.SLIP_KINDS` produces it: the arithmetic kinds by how the written
result relates to the true one, `miscopy` when a line (or the answer) does not carry the previous line's
result. Texts in any other shape are `other`; a consistent solution is `none`. Pure Python.
"""
from __future__ import annotations

import re
from fractions import Fraction

from driver.data.procedural import HEDGES
from driver.data.worked import OPS

_LINE_RE = re.compile(r"^(-?\d+(?:/\d+)?) ([-+*/]) \(?(-?\d+(?:/\d+)?)\)? = (-?\d+(?:/\d+)?)$")
_ANSWER_RE = re.compile(r"^Answer: (-?\d+(?:/\d+)?)$")
HEDGE_PREFIXES = HEDGES  # the generator's hedging sentences, each on a line of its own


def is_hedged(text: str) -> bool:
    """True when the solution carries a hedging sentence (the verbal-confidence cue)."""
    return any(line.startswith(HEDGE_PREFIXES) for line in text.splitlines())


def _walk(lines: list):
    """The consistency of each line of a one-operation-per-line solution, in order: yields (index, kind),
    kind None for a consistent line, else 'miscopy' or an arithmetic kind; the last line (`Answer: X`) is
    'miscopy' unless it carries the last result. Yields (index, 'other') and stops at a line of another shape.
    `lines` excludes hedging sentences; a text in another shape overall is caught by the caller."""
    previous = None
    for i, line in enumerate(lines[:-1]):
        m = _LINE_RE.match(line)
        if not m:
            yield i, "other"
            return
        a, op, b, written = Fraction(m[1]), m[2], Fraction(m[3]), Fraction(m[4])
        true = OPS[op](a, b)
        if previous is not None and previous not in (a, b):
            yield i, "miscopy"
        elif true is not None and written != true:
            yield i, _arithmetic_kind(a, op, b, true, written)
        else:
            yield i, None
        previous = written
    yield len(lines) - 1, None if Fraction(_ANSWER_RE.match(lines[-1])[1]) == previous else "miscopy"


def _is_solution(lines: list) -> bool:
    return len(lines) >= 2 and bool(_ANSWER_RE.match(lines[-1]))


def slip_kind(text: str) -> str:
    """'none', one of off_by_one / dropped_carry / wrong_operation / sign_error / table_slip / miscopy,
    'arithmetic' (a wrong result of no named kind), or 'other' (not a one-operation-per-line solution)."""
    lines = [l for l in text.strip().splitlines() if not l.startswith(HEDGE_PREFIXES)]
    if not _is_solution(lines):
        return "other"
    return next((kind for _, kind in _walk(lines) if kind is not None), "none")


def _arithmetic_kind(a, op, b, true, written) -> str:
    if abs(written - true) == 1:
        return "off_by_one"
    if true < 0 and written == -true:
        return "sign_error"
    if op == "*" and abs(written - true) in (abs(a), abs(b)):
        return "table_slip"
    if op in "+-" and abs(written - true) in (10, 100, 1000):
        return "dropped_carry"
    others = {"+": "*-", "-": "+", "*": "+", "/": "*"}[op]
    if any(OPS[o](a, b) == written for o in others):
        return "wrong_operation"
    return "arithmetic"


def mark_inconsistent_lines(text: str, mark: str = "?") -> str:
    """`text` with `mark` written right after the result of every line that is inconsistent as read (a wrong
    result, an operand that is not the previous line's result, or an `Answer:` that is not the last result):
    `7 + 5 = 13` -> `7 + 5 = 13?`. Used by the marked-slip pretraining corpus (tiny_recipe/pretrain.py), never
    in a selection prompt. Texts that are not one-operation-per-line solutions come back unchanged."""
    lines = text.split("\n")
    body = [i for i, l in enumerate(lines) if l and not l.startswith(HEDGE_PREFIXES)]
    if not _is_solution([lines[i] for i in body]):
        return text
    marked = list(lines)
    for j, kind in _walk([lines[i] for i in body]):
        if kind == "other":
            return text
        if kind is not None:
            marked[body[j]] += mark
    return "\n".join(marked)
