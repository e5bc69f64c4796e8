"""Worked solutions as chains of one-operation steps, and the realistic slips that corrupt them.

A `Plan` is a computation as a list of binary steps (`a op b`), each operand either a number or the
result of an earlier step. `Plan.run(slip)` writes the steps out; a `Slip` replaces the result of one step
with a plausible wrong one (off by one, a dropped carry or borrow, the wrong operation, a sign error, a
times-table slip), or a `miscopy` slip carries an earlier line's value into a later line wrongly (64 read
as 46, 7 as 1; also the final `Answer:` line); every later step computes correctly from the written (wrong) value, so the error
propagates to the final answer while the only local inconsistency is the slipped step itself.

Used by the procedural source (`driver.data.procedural`) and by reasoning-gym tasks whose metadata carries
an arithmetic `expression` (`plan_from_expression`). Pure Python.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional, Union

OPS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: Fraction(a) / b if b != 0 else None,
    "neg": lambda a, b: -a,
}


@dataclass(frozen=True)
class Ref:
    """An operand that is the (written) result of step `index`."""
    index: int


Operand = Union[int, Fraction, Ref]


def fmt(x) -> str:
    """A number as a solution writes it: integers plainly, other rationals as `p/q`."""
    x = Fraction(x)
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"


@dataclass(frozen=True)
class Step:
    """One written step `a op b = result` (result as written, possibly wrong)."""
    a: object
    op: str
    b: object
    result: object

    def render(self, swap: bool = False) -> str:
        if self.op == "neg":
            return f"-({fmt(self.a)}) = {fmt(self.result)}"
        a, b = (self.b, self.a) if swap and self.op in "+*" else (self.a, self.b)
        b_text = f"({fmt(b)})" if Fraction(b) < 0 else fmt(b)
        return f"{fmt(a)} {self.op} {b_text} = {fmt(self.result)}"


class SlipNotApplicable(ValueError):
    """The slip's kind makes no sense for the step it targets (e.g. a dropped carry without a carry)."""


@dataclass(frozen=True)
class Slip:
    """A realistic mistake at step `step`; `kind` names one of SLIP_KINDS; `delta` picks its direction."""
    step: int
    kind: str
    delta: int = 1

    def apply(self, a, op: str, b, true):
        return SLIP_KINDS[self.kind](a, op, b, true, self.delta)


def _is_int(*xs) -> bool:
    return all(Fraction(x).denominator == 1 for x in xs)


def _off_by_one(a, op, b, true, delta):
    return true + (1 if delta > 0 else -1) if _is_int(true) else None


def _dropped_carry(a, op, b, true, delta):
    """Forgot to carry (addition) or to borrow (subtraction) in the lowest column that needs it."""
    if op not in "+-" or not _is_int(a, b) or a < 0 or b < 0 or (op == "-" and b > a):
        return None
    x, y, place = int(a), int(b), 1
    while x or y:
        dx, dy = x % 10, y % 10
        if op == "+" and dx + dy >= 10:
            return true - 10 * place
        if op == "-" and dx < dy:
            return true + 10 * place
        x, y, place = x // 10, y // 10, place * 10
    return None


def _wrong_operation(a, op, b, true, delta):
    """Computed another operation than the one written (3 + 4 = 12, 9 - 4 = 13, 3 * 4 = 7)."""
    other = {"+": "*" if abs(a) <= 9 and abs(b) <= 9 else "-", "-": "+", "*": "+", "/": "*"}.get(op)
    return OPS[other](a, b) if other else None


def _sign_error(a, op, b, true, delta):
    """Lost the minus sign of a negative result (3 - 7 = 4)."""
    return -true if op in ("-", "+", "neg") and true < 0 else None


def _table_slip(a, op, b, true, delta):
    """One row off in the times table (7 * 8 = 48)."""
    if op != "*" or not _is_int(a, b) or abs(a) < 2 or abs(b) < 2:
        return None
    return true + (b if delta > 0 else -b)


_CONFUSABLE = {0: 6, 1: 7, 2: 7, 3: 8, 4: 9, 5: 6, 6: 5, 7: 1, 8: 3, 9: 4}


def miscopy(x):
    """A value copied wrongly from an earlier line: digits transposed (64 -> 46), else the last digit
    misread (7 -> 1, 3 -> 8). Returns None when that leaves the value unchanged."""
    if not _is_int(x):
        return None
    x = int(x)
    digits = str(abs(x))
    if len(digits) > 1 and digits[-1] != digits[-2] and digits[-1] != "0":
        digits = digits[:-2] + digits[-1] + digits[-2]
    else:
        digits = digits[:-1] + str(_CONFUSABLE[int(digits[-1])])
    y = int(digits) * (-1 if x < 0 else 1)
    return y if y != x else None


SLIP_KINDS: dict = {
    "off_by_one": _off_by_one,
    "dropped_carry": _dropped_carry,
    "wrong_operation": _wrong_operation,
    "sign_error": _sign_error,
    "table_slip": _table_slip,
}
TWO_WAY = ("off_by_one", "table_slip")
COPY_KINDS = ("miscopy",)  # corrupt a value carried from an earlier line (or the final answer line)


@dataclass(frozen=True)
class Plan:
    """A computation: steps `(op, left, right)` whose operands are numbers or `Ref`s to earlier steps."""
    steps: tuple

    def run(self, slip: Optional[Slip] = None) -> list:
        """The written steps; `slip` corrupts one step's result and later steps use the corrupted value."""
        return self.write(slip)[0]

    def write(self, slip: Optional[Slip] = None) -> tuple:
        """(steps, answer) as written under `slip`.

        An arithmetic slip corrupts the result of step `slip.step`; a `miscopy` slip corrupts the value
        carried into step `slip.step` from an earlier line (step == len(steps): the final `Answer:` line).
        """
        written, out = [], []
        for i, (op, left, right) in enumerate(self.steps):
            a = written[left.index] if isinstance(left, Ref) else left
            b = written[right.index] if isinstance(right, Ref) else right
            if slip is not None and slip.step == i and slip.kind in COPY_KINDS:
                a, b = self._miscopy_operand(i, left, right, a, b)
            true = OPS[op](a, b)
            if true is None:
                raise SlipNotApplicable(f"step {i} divides by zero")
            value = slip.apply(a, op, b, true) if slip is not None and slip.step == i \
                and slip.kind not in COPY_KINDS else true
            if value is None:
                raise SlipNotApplicable(f"{slip} does not apply to step {i}: {fmt(a)} {op} {fmt(b)}")
            written.append(value)
            out.append(Step(a, op, b, value))
        answer = written[-1]
        if slip is not None and slip.kind in COPY_KINDS and slip.step == len(self.steps):
            answer = miscopy(answer)
            if answer is None:
                raise SlipNotApplicable("the final answer reads the same when miscopied")
        return out, answer

    @staticmethod
    def _miscopy_operand(i, left, right, a, b):
        if isinstance(left, Ref) and miscopy(a) is not None:
            return miscopy(a), b
        if isinstance(right, Ref) and miscopy(b) is not None:
            return a, miscopy(b)
        raise SlipNotApplicable(f"step {i} carries no value that can be miscopied")

    def answer(self, slip: Optional[Slip] = None):
        return self.write(slip)[1]

    def possible_slips(self) -> list:
        """Every slip that applies and changes the final answer (a slip that cancels out is 'correct')."""
        correct = self.answer()
        slips = []
        for step in range(len(self.steps) + 1):
            for kind in (SLIP_KINDS if step < len(self.steps) else {}) | dict.fromkeys(COPY_KINDS):
                for delta in (1, -1) if kind in TWO_WAY else (1,):
                    slip = Slip(step, kind, delta)
                    try:
                        if self.answer(slip) != correct:
                            slips.append(slip)
                    except SlipNotApplicable:
                        continue
        return slips


def render_solution(steps: list, swaps: list, answer=None) -> str:
    """The worked solution text: one step per line, then `Answer: X` (X: the last result unless given)."""
    lines = [s.render(swap=sw) for s, sw in zip(steps, swaps)]
    return "\n".join(lines + [f"Answer: {fmt(steps[-1].result if answer is None else answer)}"])


_AST_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


def plan_from_expression(expr: str) -> Plan:
    """A Plan evaluating an arithmetic expression (+, -, *, /, unary minus, parentheses) left to right.

    Raises ValueError for anything else (names, calls, powers, ...) or a single number (nothing to do).
    """
    steps: list = []

    def visit(node) -> Operand:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return Fraction(node.value).limit_denominator() if isinstance(node.value, float) else node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = visit(node.operand)
            if isinstance(node.op, ast.UAdd):
                return inner
            if not isinstance(inner, Ref):
                return -inner
            steps.append(("neg", inner, 0))
            return Ref(len(steps) - 1)
        if isinstance(node, ast.BinOp) and type(node.op) in _AST_OPS:
            left, right = visit(node.left), visit(node.right)
            steps.append((_AST_OPS[type(node.op)], left, right))
            return Ref(len(steps) - 1)
        raise ValueError(f"unsupported expression element {type(node).__name__} in {expr!r}")

    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except SyntaxError as e:
        raise ValueError(f"not an arithmetic expression: {expr!r}") from e
    visit(tree.body)
    if not steps:
        raise ValueError(f"nothing to compute in {expr!r}")
    return Plan(tuple(steps))
