"""The rule selectors read beside the policy (driver/baselines.py): what each picks, the same pick at every reading,
their whole-prompt and knockout accuracies with CIs, and how the solve-alone rule reads the model's own solutions."""
import pytest

from core.records import SelectionTask
from driver import baselines
from driver.data.slips import HEDGE_PREFIXES

HEDGE = HEDGE_PREFIXES[0]


def _task(pid, answers, labels, hedged=()):
    candidates = tuple((f"{HEDGE}\n" if i in hedged else "") + f"x = {a}\nAnswer: {a}" for i, a in enumerate(answers))
    return SelectionTask(prompt_id=f"{pid}/p0", problem_id=pid, domain="math", problem="?", candidates=candidates,
                         candidate_answers=tuple(answers), labels=tuple(labels), reference="1", prompt="...")


def test_the_cue_rule_names_a_candidate_that_does_not_hedge_and_any_when_all_do():
    task = _task("a", ["1", "2", "3", "4"], [0, 1, 0, 0], hedged=(0, 2, 3))
    rng = baselines._rng(0, "cue", task)
    assert {baselines.cue_choice(task.candidates, range(4), rng) for _ in range(20)} == {1}
    assert {baselines.cue_choice(task.candidates, [0, 2, 3], rng) for _ in range(60)} == {0, 2, 3}


def test_the_own_answer_rule_follows_the_models_answer_and_falls_back_to_the_cue():
    task = _task("a", ["7", "5", "7"], [1, 0, 1], hedged=(0,))
    rng = baselines._rng(0, "own_answer", task)
    assert {baselines.own_answer_choice(task, range(3), " 5 ", rng) for _ in range(20)} == {1}
    assert {baselines.own_answer_choice(task, range(3), "7", rng) for _ in range(40)} == {0, 2}
    assert {baselines.own_answer_choice(task, range(3), "9", rng) for _ in range(40)} == {1, 2}  # unstated: the cue
    assert {baselines.own_answer_choice(task, range(3), None, rng) for _ in range(40)} == {1, 2}
    with pytest.raises(ValueError, match="rule must be one of"):
        baselines.rule_choice("oracle", task, range(3), None, rng)


def test_a_rule_picks_the_same_candidate_at_every_reading_and_by_knockout_as_by_the_whole_prompt():
    """Ties are drawn from a generator seeded by the run's seed and the prompt: two readings agree. With pairs, a
    knockout by the cue rule keeps a candidate that does not hedge whenever one exists."""
    tasks = [_task(f"p{i}", [str(j) for j in range(6)], [int(j == i % 6) for j in range(6)],
                   hedged=tuple(j for j in range(6) if j != i % 6)) for i in range(12)]
    answers = [None] * len(tasks)
    first = baselines.whole_prompt_choices("cue", tasks, answers, seed=3)
    assert first == baselines.whole_prompt_choices("cue", tasks, answers, seed=3) == [i % 6 for i in range(12)]
    assert baselines.knockout_choices("cue", tasks, answers, window=2, seed=3) == first


def test_rule_metrics_read_the_rules_with_their_cis_and_leave_out_the_own_answer_rule_without_answers():
    tasks = [_task("a", ["1", "2"], [1, 0], hedged=(1,)), _task("b", ["3", "4"], [0, 1], hedged=(1,)),
             _task("c", ["5", "6"], [0, 1], hedged=(0,))]
    out = baselines.rule_metrics(tasks, ["2", "4", None], window=2, seed=0)
    assert out["rule/cue/genselect"] == pytest.approx(2 / 3)  # the cue is right on a and c, wrong on b
    assert out["rule/own_answer/genselect"] == pytest.approx(2 / 3)  # follows 2 (wrong), 4 (right), cue on c
    assert out["rule/cue/knockout/genselect"] == pytest.approx(2 / 3)
    assert out["rule/cue/genselect_lo"] <= out["rule/cue/genselect"] <= out["rule/cue/genselect_hi"]
    assert not any(k.startswith("rule/own_answer") for k in baselines.rule_metrics(tasks, [None] * 3, 0, 0))
    assert not any("knockout" in k for k in baselines.rule_metrics(tasks, [None] * 3, 0, 0))


def test_the_solve_alone_rule_follows_the_candidates_stating_its_answer_and_falls_back_to_the_cue():
    task = _task("a", ["7", "5", "7"], [1, 0, 1], hedged=(0,))
    rng = baselines._rng(0, "solve_alone", task)
    assert {baselines.rule_choice("solve_alone", task, range(3), (0, 2), rng) for _ in range(40)} == {0, 2}
    assert {baselines.rule_choice("solve_alone", task, [0, 1], (0, 2), rng) for _ in range(20)} == {0}  # a group
    assert {baselines.rule_choice("solve_alone", task, [1, 2], (0,), rng) for _ in range(40)} == {1, 2}  # the cue
    assert {baselines.rule_choice("solve_alone", task, range(3), (), rng) for _ in range(40)} == {1, 2}


def test_a_rule_that_states_nothing_picks_exactly_what_the_cue_rule_picks():
    """Where no candidate states the answer a rule follows, the rule draws the cue rule's ties: a model that answers
    nothing reads as the cue rule itself, not as a second draw of it (the best of two draws would flatter the
    baseline RL is measured against). Where a candidate states it, the rule follows it."""
    tasks = [_task(f"p{i}", [str(j) for j in range(8)], [int(j == i % 8) for j in range(8)], hedged=(0, 1))
             for i in range(40)]
    for rule in ("own_answer", "solve_alone"):
        assert baselines.whole_prompt_choices(rule, tasks, [()] * 40, seed=5) \
            == baselines.whole_prompt_choices("cue", tasks, [None] * 40, seed=5)
        assert baselines.knockout_choices(rule, tasks, [()] * 40, window=3, seed=5) \
            == baselines.knockout_choices("cue", tasks, [None] * 40, window=3, seed=5)
    stating = [(i % 8,) for i in range(40)]
    assert baselines.knockout_choices("solve_alone", tasks, stating, window=3, seed=5) == [i % 8 for i in range(40)]


@pytest.mark.parametrize("solution, answer", [
    ("2 + 3 = 5\n5 * 4 = 20\nAnswer: 20", "20"),
    ("Answer: 20 #3", "20"),                        # a solve-then-point model's pointer is not its answer
    ("So the answer is $\\boxed{7/2}$.", "7/2"),
    ("Answer: 3\nAnswer: 4.", "4"),                 # the last one stated
    ("2 + 3 = 5", None),                            # no final answer: nothing to follow
    ("", None), (None, None),
])
def test_a_solution_is_read_as_its_stated_final_answer(solution, answer):
    assert baselines.solved_answer(solution) == answer


def test_answers_agree_by_math_verify_past_the_plain_cases(monkeypatch):
    """Identical text and plain numbers are compared here; only the rest goes to math-verify's worker processes."""
    from driver.data import verify

    sent = []
    real = verify.label_math
    monkeypatch.setattr(verify, "label_math", lambda pairs: sent.extend(pairs) or real(pairs))
    pairs = [("12", " 12"), ("0.5", "1/2"), ("3", "4"), ("7/2", "3.5"), ("\\frac{1}{2}", "1/2"), ("x = 3", "3"),
             ("2x+1", "1+2x"), ("4", "x")]
    assert baselines.answers_agree(pairs) == [True, True, False, True, True, True, True, False]
    assert sorted(sent) == sorted([("\\frac{1}{2}", "1/2"), ("x = 3", "3"), ("2x+1", "1+2x"), ("4", "x")])


def test_solve_alone_stating_names_every_candidate_with_the_models_answer():
    tasks = [_task("a", ["20", "21", "20"], [1, 0, 1]), _task("b", ["6", "1/2"], [0, 1]),
             _task("c", ["1", "2"], [1, 0])]
    solutions = ["5 * 4 = 20\nAnswer: 20", "Answer: 0.5", "I do not know."]
    stating = baselines.solve_alone_stating(tasks, solutions)
    assert stating == [(0, 2), (1,), ()]
    calls = []
    fake = baselines.solve_alone_stating(tasks, solutions,
                                         agree=lambda pairs: calls.append(pairs) or [False] * len(pairs))
    assert fake == [(), (), ()] and len(calls[0]) == 5  # one pair per candidate of the answered prompts
    assert baselines.solve_alone_breakdown(tasks, solutions, stating) == pytest.approx(
        {"answered": 2 / 3, "stated": 2 / 3, "solved": 2 / 3})


def test_rule_metrics_read_the_solve_alone_rule_when_given_its_solutions():
    tasks = [_task("a", ["1", "2"], [1, 0], hedged=(1,)), _task("b", ["3", "4"], [0, 1], hedged=(1,)),
             _task("c", ["5", "6"], [0, 1], hedged=(0,))]
    stating = baselines.solve_alone_stating(tasks, ["Answer: 1", "Answer: 4", None])
    out = baselines.rule_metrics(tasks, [None] * 3, window=2, seed=0, solve_alone=stating)
    assert out["rule/solve_alone/genselect"] == pytest.approx(1.0)  # right on a and b, the cue right on c
    assert out["rule/solve_alone/knockout/genselect"] == pytest.approx(1.0)
    assert out["rule/cue/genselect"] == pytest.approx(2 / 3) and "rule/own_answer/genselect" not in out
    assert "rule/solve_alone/genselect" not in baselines.rule_metrics(tasks, [None] * 3, window=2, seed=0)
    assert baselines.RULES == ("cue", "own_answer", "solve_alone")
    assert baselines.RULE_NAMES["solve_alone"] == "solve-alone rule"
