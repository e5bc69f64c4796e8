"""benchmarks/pooled_margin.py: runs on the same prompts pooled by problem, paired against majority voting."""
import sys
from pathlib import Path

import pytest

from core.records import SelectionTask

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from pooled_margin import pooled  # noqa: E402


def _task(pid, problem, answers, labels):
    return SelectionTask(prompt_id=pid, problem_id=problem, domain="math", problem="?", candidates=tuple(answers),
                         candidate_answers=tuple(answers), labels=tuple(labels), reference="", prompt="p")


def test_pooled_margin_averages_runs_within_a_problem():
    # problem a: majority picks the wrong "7" (score 0); problem b: majority is right (score 1)
    tasks = [_task("a/0", "a", ["7", "7", "2"], [0, 0, 1]), _task("b/0", "b", ["5", "5", "3"], [1, 1, 0])]
    right_on_a = {"a/0": 2, "b/0": 0}   # margin +1 on a, 0 on b
    wrong_on_b = {"a/0": 0, "b/0": 2}   # margin 0 on a, -1 on b
    one = pooled(tasks, [right_on_a])
    assert one["over_majority"] == pytest.approx(0.5) and one["majority"] == pytest.approx(0.5)
    both = pooled(tasks, [right_on_a, wrong_on_b])
    assert both["problems"] == 2 and both["prompts"] == 4
    assert both["over_majority"] == pytest.approx(0.0)  # (+1 + 0) / 2 on a, (0 - 1) / 2 on b
    assert both["genselect"] == pytest.approx(0.5)


def test_a_run_that_missed_prompts_is_refused():
    tasks = [_task("a/0", "a", ["1", "2"], [1, 0])]
    with pytest.raises(ValueError, match="lack choices"):
        pooled(tasks, [{"a/0": 0}, {}])
