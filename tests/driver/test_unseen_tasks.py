"""driver/heldout.py: the no-cue held-out set. `unseen_tasks` drops every problem seen in training or pretraining, by
the expression it computes (the procedural templates write one expression several ways); `nocue_due` says which
evaluations read it."""
from types import SimpleNamespace

from driver.heldout import unseen_tasks


def test_a_problem_seen_under_another_template_is_dropped():
    tasks = [SimpleNamespace(problem=p) for p in ("Compute 3 + 4.", "Evaluate 5 * 2 step by step.",
                                                  "What is the value of 9 - 1?")]
    kept = unseen_tasks(tasks, {"What is the value of 3 + 4?", "Evaluate 9 - 1 step by step."})
    assert [t.problem for t in kept] == ["Evaluate 5 * 2 step by step."]
    assert unseen_tasks(tasks, set()) == tasks


def test_the_nocue_set_is_read_at_the_start_the_end_and_every_eval_without_cue_every_steps():
    from driver.heldout import nocue_due

    assert [s for s in range(0, 101, 25) if nocue_due(s, 100, 0)] == [0, 100]
    assert [s for s in range(0, 101, 25) if nocue_due(s, 100, 50)] == [0, 50, 100]
    assert [s for s in range(0, 121, 10) if nocue_due(s, 120, 50)] == [0, 50, 100, 120]
    assert [s for s in range(0, 101, 25) if nocue_due(s, 100, 0, at_start=False)] == [100]
