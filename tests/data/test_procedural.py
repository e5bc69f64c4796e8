"""The procedural generator: worked steps are right unless slipped, slips propagate, wrong answers cluster."""
import random
import re
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st

from driver.data import procedural
from driver.data.worked import OPS, SLIP_KINDS, Plan, Ref, Slip, SlipNotApplicable, miscopy, plan_from_expression

STEP_RE = re.compile(r"^(-?\d+) ([-+*]) \(?(-?\d+)\)? = (-?\d+)$")


def _bad_steps(text: str) -> list:
    """Lines whose written result is not what their operands give."""
    bad = []
    for line in text.splitlines()[:-1]:
        m = STEP_RE.match(line)
        assert m, f"unexpected step line {line!r}"
        a, op, b, r = int(m[1]), m[2], int(m[3]), int(m[4])
        if OPS[op](a, b) != r:
            bad.append(line)
    return bad


def _carried_mismatch(problem: str, text: str) -> int:
    """Lines whose operands are not {previous result, the problem's next number} (a miscopy), plus 1 if
    the answer line is not the last result."""
    constants = [int(x) for x in re.findall(r"\d+", problem)]
    lines = text.splitlines()
    results = [int(STEP_RE.match(line)[4]) for line in lines[:-1]]
    bad = int(int(lines[-1].split(":")[1]) != results[-1])
    carried = [constants[0]] + results[:-1]
    for prev, const, line in zip(carried, constants[1:], lines[:-1]):
        m = STEP_RE.match(line)
        bad += sorted((int(m[1]), int(m[3]))) != sorted((prev, const))
    return bad


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_wrong_candidate_has_one_local_inconsistency(seed):
    rows = procedural.generate(40, 8, seed, procedural.ProceduralSpec())
    wrong = 0
    for row in rows:
        for text in row["candidates"]:
            answer = text.rsplit("Answer: ", 1)[1]
            bad = len(_bad_steps(text)) + _carried_mismatch(row["problem"], text)
            if answer == row["answer"]:
                assert bad == 0, text
            else:
                wrong += 1
                assert bad == 1, f"{row['problem']}: {text!r}"
    assert wrong > 0


def test_error_rate_controls_fraction_wrong():
    for rate, lo, hi in [(0.0, 0.0, 0.0), (0.3, 0.2, 0.4), (0.6, 0.5, 0.7), (1.0, 0.97, 1.0)]:
        rows = procedural.generate(200, 8, 0, procedural.ProceduralSpec(error_rate=rate))
        frac = sum(c.rsplit("Answer: ", 1)[1] != r["answer"] for r in rows for c in r["candidates"]) / 1600
        assert lo <= frac <= hi, (rate, frac)


def test_wrong_answers_cluster_so_majority_is_often_wrong():
    rows = procedural.generate(300, 8, 0, procedural.ProceduralSpec())
    shared = majority_wrong = 0
    for r in rows:
        answers = Counter(c.rsplit("Answer: ", 1)[1] for c in r["candidates"])
        wrong = {a: n for a, n in answers.items() if a != r["answer"]}
        shared += any(n >= 2 for n in wrong.values())
        majority_wrong += max(answers.values()) > answers.get(r["answer"], 0) and \
            answers.most_common(1)[0][0] != r["answer"]
    assert shared / len(rows) > 0.5
    assert majority_wrong / len(rows) > 0.2


def test_generation_is_deterministic_and_seed_dependent():
    spec = procedural.ProceduralSpec()
    assert procedural.generate(20, 8, 3, spec) == procedural.generate(20, 8, 3, spec)
    assert procedural.generate(20, 8, 3, spec) != procedural.generate(20, 8, 4, spec)


def test_operands_stay_small():
    rows = procedural.generate(200, 8, 0, procedural.ProceduralSpec())
    for r in rows:
        for line in r["candidates"][0].splitlines()[:-1]:
            m = STEP_RE.match(line)
            if m[2] == "*":
                assert min(abs(int(m[1])), abs(int(m[3]))) <= 9 and max(abs(int(m[1])), abs(int(m[3]))) <= 90


SLIP_TABLE = [  # (a, op, b, kind, delta, written)
    (8, "+", 6, "off_by_one", 1, 15),
    (8, "+", 6, "dropped_carry", 1, 4),
    (14, "-", 8, "dropped_carry", 1, 16),
    (3, "+", 4, "wrong_operation", 1, 12),
    (9, "-", 4, "wrong_operation", 1, 13),
    (3, "-", 7, "sign_error", 1, 4),
    (7, "*", 8, "table_slip", -1, 48),
]


@pytest.mark.parametrize("a,op,b,kind,delta,written", SLIP_TABLE)
def test_slip_kinds(a, op, b, kind, delta, written):
    plan = Plan(((op, a, b),))
    assert plan.answer(Slip(0, kind, delta)) == written


@pytest.mark.parametrize("a,op,b,kind", [(3, "+", 4, "dropped_carry"), (9, "-", 4, "sign_error"),
                                         (2, "+", 3, "table_slip")])
def test_slip_that_does_not_apply_is_refused(a, op, b, kind):
    with pytest.raises(SlipNotApplicable):
        Plan(((op, a, b),)).answer(Slip(0, kind))


def test_slip_propagates_and_miscopy_corrupts_the_carried_value():
    plan = Plan((("*", 8, 8), ("-", Ref(0), 5)))  # 64 - 5 = 59
    steps = plan.run(Slip(0, "table_slip", -1))
    assert [s.result for s in steps] == [56, 51]
    steps, answer = plan.write(Slip(1, "miscopy"))
    assert [(s.a, s.result) for s in steps] == [(8, 64), (46, 41)] and answer == 41
    assert plan.write(Slip(2, "miscopy"))[1] == 95  # the final answer line miscopied


@given(st.integers(-999, 999))
def test_miscopy_changes_the_value_or_refuses(x):
    y = miscopy(x)
    assert y is None or (y != x and len(str(abs(y))) <= len(str(abs(x))))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("+-*"), st.integers(1, 20)), min_size=1, max_size=4),
       st.integers(1, 20))
def test_plan_from_expression_matches_python(moves, start):
    expr = str(start)
    for op, x in moves:
        expr = f"({expr}) {op} {x}"
    plan = plan_from_expression(expr)
    assert plan.answer() == eval(expr)  # noqa: S307 - digits and operators only
    for slip in plan.possible_slips():
        assert plan.answer(slip) != plan.answer()


def test_plan_from_expression_refuses_non_arithmetic():
    for expr in ["x + 1", "2 ** 3", "f(1)", "7", "1 +"]:
        with pytest.raises(ValueError):
            plan_from_expression(expr)


def test_every_slip_kind_occurs():
    seen = Counter()
    for i in range(200):
        seen.update(s.kind for s in procedural.make_plan(random.Random(i), procedural.ProceduralSpec()).possible_slips())
    assert set(SLIP_KINDS) | {"miscopy"} <= set(seen)


def test_problems_are_distinct_so_no_problem_sits_on_both_sides_of_the_split():
    import re

    from driver.data.procedural import ProceduralSpec, generate

    rows = generate(3000, 4, seed=0, spec=ProceduralSpec())
    pattern = re.compile(r"^(?:Compute|What is the value of|Evaluate) (.*?)(?: step by step)?[.?]$")
    assert len({pattern.match(r["problem"])[1] for r in rows}) == 3000


def test_problem_key_is_the_expression_under_every_template_and_the_text_otherwise():
    from driver.data.procedural import TEMPLATES, problem_key

    keys = {problem_key(t.format(expr="(3 + 4) * 2")) for t in TEMPLATES}
    assert keys == {"(3 + 4) * 2"}
    assert problem_key("Write a function that adds two numbers.") == "Write a function that adds two numbers."

