"""Reading a procedural solution's mistake back from its text agrees with the slip that wrote it."""
import random

import pytest

from driver.data.procedural import ProceduralSpec, hedge, make_plan
from driver.data.slips import is_hedged, slip_kind
from driver.data.worked import render_solution


def test_every_written_slip_is_read_back_as_its_kind():
    rng, seen, total = random.Random(0), 0, 0
    for _ in range(300):
        plan = make_plan(rng, ProceduralSpec(max_steps=4))
        steps, answer = plan.write(None)
        assert slip_kind(render_solution(steps, [rng.random() < 0.5 for _ in steps], answer)) == "none"
        for slip in plan.possible_slips():
            steps, answer = plan.write(slip)
            text = render_solution(steps, [rng.random() < 0.5 for _ in steps], answer)
            kind = slip_kind(hedge(text, rng) if rng.random() < 0.5 else text)
            # a few texts fit two descriptions (a wrong product that is also a wrong sum), and a miscopied
            # operand can leave a self-consistent text (7 * 7 = 49 miscopied as 1 * 7 = 7): the reader,
            # which sees no problem statement, names the first kind that fits
            assert kind != "other", (slip, text)
            seen, total = seen + (kind == slip.kind), total + 1
    assert seen / total > 0.9, (seen, total)


@pytest.mark.parametrize("text, kind", [
    ("3 + 4 = 7\n7 * 2 = 14\nAnswer: 14", "none"),
    ("3 + 4 = 8\n8 * 2 = 16\nAnswer: 16", "off_by_one"),
    ("3 + 4 = 12\n12 - 2 = 10\nAnswer: 10", "wrong_operation"),
    ("3 - 7 = 4\n4 + 1 = 5\nAnswer: 5", "sign_error"),
    ("8 + 7 = 5\n5 + 1 = 6\nAnswer: 6", "dropped_carry"),
    ("7 * 8 = 48\n48 - 1 = 47\nAnswer: 47", "table_slip"),
    ("3 + 4 = 7\n1 * 2 = 2\nAnswer: 2", "miscopy"),
    ("6 * 8 = 48\nAnswer: 84", "miscopy"),
    ("3 + 4 = 9\n9 + 0 = 9\nAnswer: 9", "arithmetic"),
    ("The answer is 7.", "other"),
])
def test_table(text, kind):
    assert slip_kind(text) == kind


def test_hedge_detection():
    assert is_hedged("1 + 1 = 2\nThis might be wrong.\nAnswer: 2") and not is_hedged("1 + 1 = 2\nAnswer: 2")


def test_marks_go_right_after_the_result_of_each_inconsistent_line_only():
    from driver.data.slips import mark_inconsistent_lines

    assert mark_inconsistent_lines("7 + 5 = 12\n12 * 2 = 24\nAnswer: 24") == "7 + 5 = 12\n12 * 2 = 24\nAnswer: 24"
    assert mark_inconsistent_lines("7 + 5 = 13\n13 * 2 = 26\nAnswer: 26") == "7 + 5 = 13?\n13 * 2 = 26\nAnswer: 26"
    assert mark_inconsistent_lines("7 + 5 = 12\n21 * 2 = 42\nAnswer: 42") == "7 + 5 = 12\n21 * 2 = 42?\nAnswer: 42"
    assert mark_inconsistent_lines("7 + 5 = 12\nThis might be wrong.\nAnswer: 21") == \
        "7 + 5 = 12\nThis might be wrong.\nAnswer: 21?"
    assert mark_inconsistent_lines("some prose\nAnswer: 3") == "some prose\nAnswer: 3"


def test_every_slipped_procedural_solution_gets_at_least_one_mark_and_correct_ones_none():
    from driver.data import procedural
    from driver.data.slips import mark_inconsistent_lines

    rows = procedural.generate(200, 4, 3, procedural.ProceduralSpec())
    for r in rows:
        for text in r["candidates"]:
            marked = mark_inconsistent_lines(text)
            assert marked.replace("?", "") == text
            assert ("?" in marked) == (slip_kind(text) != "none")

