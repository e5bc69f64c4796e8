"""driver/run.py:unseen_tasks: the no-cue held-out set drops every problem seen in training or pretraining, by the
expression it computes (the procedural templates write one expression several ways)."""
from types import SimpleNamespace

from driver.run import unseen_tasks


def test_a_problem_seen_under_another_template_is_dropped():
    tasks = [SimpleNamespace(problem=p) for p in ("Compute 3 + 4.", "Evaluate 5 * 2 step by step.",
                                                  "What is the value of 9 - 1?")]
    kept = unseen_tasks(tasks, {"What is the value of 3 + 4?", "Evaluate 9 - 1 step by step."})
    assert [t.problem for t in kept] == ["Evaluate 5 * 2 step by step."]
    assert unseen_tasks(tasks, set()) == tasks
