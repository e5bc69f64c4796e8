"""Held-out metric assembly: per-problem aggregation, baselines, and parse failures."""
from pathlib import Path

import pytest

from core.records import SelectionTask
from driver.eval_metrics import selection_metrics
from driver.evaluate import format_table


def _task(pid, k, answers, labels):
    n = len(labels)
    return SelectionTask(prompt_id=f"{pid}/p{k}", problem_id=pid, domain="math", problem="?",
                         candidates=tuple(f"c{i}" for i in range(n)), candidate_answers=tuple(answers),
                         labels=tuple(labels), reference="1", prompt="...")


def test_table_of_choices():
    tasks = [
        _task("a", 0, ["5", "5", "1"], [0, 0, 1]),  # majority wrong, selector right
        _task("a", 1, ["5", "1"], [0, 1]),           # tie -> majority 0.5
        _task("b", 0, ["1", "2", "3", "1"], [1, 0, 0, 1]),
    ]
    result = selection_metrics(tasks, [2, None, 1])
    assert result["problems"] == 2 and result["prompts"] == 3
    assert result["genselect"] == pytest.approx(((1 + 0) / 2 + 0) / 2)
    assert result["majority"] == pytest.approx(((0 + 0.5) / 2 + 1) / 2)
    assert result["random"] == pytest.approx(((1 / 3 + 1 / 2) / 2 + 0.5) / 2)
    assert result["pass_at_n"] == 1.0
    assert result["parse_failure_rate"] == pytest.approx(1 / 3)
    assert result["genselect_lo"] <= result["genselect"] <= result["genselect_hi"]
    assert result["over_majority"] == pytest.approx(result["genselect"] - result["majority"])
    assert result["over_majority_lo"] <= result["over_majority"] <= result["over_majority_hi"]
    assert "GenSelect@N" in format_table(result) and "selector - majority@N" in format_table(result)


def test_by_size_reports_the_baselines_of_each_number_of_candidates():
    from driver.eval_metrics import by_size

    tasks = [_task("a", 0, ["1", "2"], [1, 0]), _task("b", 0, ["3", "3", "1"], [0, 0, 1]),
             _task("c", 0, ["2", "1"], [0, 1])]
    table = by_size(tasks, [0, 2, None])
    assert list(table) == [2, 3]
    assert table[2] == {"prompts": 2, "genselect": 0.5, "majority": 0.5, "random": 0.5, "pass_at_n": 1.0}
    assert table[3] == {"prompts": 1, "genselect": 1.0, "majority": 0.0, "random": pytest.approx(1 / 3),
                        "pass_at_n": 1.0}


def test_remote_evaluation_runs_greedy_before_sampling(monkeypatch):
    """The rollout actor derives each generate call's deadline from that call's own sequences, so the sampled
    call (samples x the prompts) must not share the engine with the greedy one: it is submitted only once the
    greedy choices are back (a step-0 evaluation timed out on a loaded machine when both ran at once)."""
    import ray

    from core.records import Rollout, RolloutGroup
    from driver.evaluate import choose_remote

    tasks = [_task("a", 0, ["5", "1"], [0, 1]), _task("b", 0, ["2", "3", "2"], [1, 0, 1])]
    events = []

    class Ref:
        def __init__(self, n, temperature):
            self.n, self.temperature = n, temperature

    def generate(call_tasks, n, temperature):
        events.append(("submit", n, temperature))
        return Ref(n, temperature)

    def get(ref, timeout):
        events.append(("done", ref.n, ref.temperature))
        text = "Judgment: 1"
        return [RolloutGroup(task=t, policy_version=0, rollouts=[Rollout(t.prompt_id, [], [], [], text, 0, "stop") for _ in range(ref.n)])
                for t in tasks]

    handle = type("Handle", (), {})()
    handle.generate = type("Method", (), {"remote": staticmethod(generate)})()
    monkeypatch.setattr(ray, "get", get)
    choices, sampled, breakdown, answers = choose_remote(handle, tasks, timeout_s=10.0, samples=4)
    assert events == [("submit", 1, 0.0), ("done", 1, 0.0), ("submit", 4, 1.0), ("done", 4, 1.0)]
    assert choices == [1, 1] and sampled == pytest.approx(0.5) and breakdown == {}  # no `Answer: X #k` lines
    events.clear()
    assert choose_remote(handle, tasks, timeout_s=10.0, samples=0) == ([1, 1], None, {}, [None, None])
    assert events == [("submit", 1, 0.0), ("done", 1, 0.0)]


def test_an_evaluation_that_times_out_is_run_again_then_gives_up():
    """A held-out evaluation past its deadline (the rollout actor's RolloutTimeout, as Ray re-raises it, or
    ray.get's GetTimeoutError) is run again up to EVAL_TIMEOUT_RETRIES times, with a warning each time; the last
    timeout and any other error propagate at once."""
    from ray.exceptions import GetTimeoutError, RayTaskError

    from actors.rollout.rollout_worker import RolloutTimeout
    from driver.evaluate import EVAL_TIMEOUT_RETRIES, retry_on_timeout

    remote = RayTaskError("RolloutWorker.generate", "traceback", RolloutTimeout("deadline of 101 s")).as_instanceof_cause()
    assert isinstance(remote, RolloutTimeout)
    outcomes, warnings = [remote, GetTimeoutError("get")], []

    def call():
        if outcomes:
            raise outcomes.pop(0)
        return "choices"

    assert retry_on_timeout(call, "evaluation at step 0", warnings.append) == "choices"
    assert len(warnings) == 2 and all("evaluation at step 0 ran past its deadline" in w for w in warnings)

    calls = []

    def always_late():
        calls.append(1)
        raise RolloutTimeout("late")

    with pytest.raises(RolloutTimeout):
        retry_on_timeout(always_late, "evaluation", lambda message: None)
    assert len(calls) == EVAL_TIMEOUT_RETRIES + 1

    def broken():
        calls.append(1)
        raise ValueError("not a timeout")

    calls.clear()
    with pytest.raises(ValueError):
        retry_on_timeout(broken, "evaluation", lambda message: None)
    assert calls == [1]


def test_own_answer_breakdown_separates_solving_from_pointing():
    """A solve-then-point response `... Answer: X #k`: solved = X is a correct candidate's answer, follows = k
    names a candidate stating X, and the ceiling scores each prompt as if k always followed X."""
    from driver.eval_metrics import own_answer_breakdown

    tasks = [_task("a", 0, ["5", "1", "5"], [0, 1, 0]),   # solves (1), points at it
             _task("a", 1, ["5", "1"], [0, 1]),           # solves (1), points elsewhere: the ceiling counts it right
             _task("b", 0, ["2", "3", "2"], [1, 0, 1]),   # answers 7, stated by none: the choice (0) is right
             _task("b", 1, ["2", "3"], [1, 0])]           # wrong answer 3, follows it
    responses = ["2+3=1\nAnswer: 1 #1\n", "Answer: 1 #0", "1+6=7\nAnswer: 7 #0", "Answer: 3 #1"]
    out = own_answer_breakdown(tasks, responses, [1, 0, 0, 1])
    assert out == {"answered": 1.0, "solved": 0.5, "stated": 0.75, "follows": pytest.approx(2 / 3),
                   "follow_ceiling": 0.75, "unstated_accuracy": 1.0}
    # selectors that write `Judgment: k` get no breakdown; a response without an answer line counts as unanswered
    assert own_answer_breakdown(tasks[:1], ["Judgment: 1"], [1]) == {}
    mixed = own_answer_breakdown(tasks[:2], ["Answer: 1 #1", "no line"], [1, None])
    assert mixed["answered"] == 0.5 and mixed["solved"] == 0.5 and mixed["follow_ceiling"] == 0.5
    assert mixed["unstated_accuracy"] == 0.0  # the unanswered prompt, whose choice is None


def test_a_run_export_is_read_with_its_runs_rollout_settings(tmp_path):
    """driver.evaluate and driver.bon read RUN/export with RUN/config.yaml's rollout settings (the default selector's
    96-token response would be cut at the schema's 48 and never reach its pointer), a given --config wins, and any
    other folder gets the schema's."""
    from core.config import load_config, to_yaml
    from driver.evaluate import rollout_settings

    run = tmp_path / "run"
    (run / "export").mkdir(parents=True)
    (run / "config.yaml").write_text(to_yaml(load_config("default")))
    assert rollout_settings(str(run / "export")).max_response_tokens == 96
    assert rollout_settings(str(run / "export")).samples_per_prompt == 1
    assert rollout_settings(str(run / "export"), "smoke").max_response_tokens == load_config("smoke").rollout.max_response_tokens
    assert rollout_settings(str(tmp_path / "elsewhere")).max_response_tokens == 48
    # the response form follows the run's config (tiny.sample_index_only: the solve-then-point rollout), else the
    # config's: the registry hands the run config to the model's own response-form hook
    from driver.evaluate import run_config
    from driver.models.registry import response_form

    def form(model, config=None) -> str:
        return response_form(model, run_config(model, config)).name

    solve = ["tiny.model.response=solve_point", "tiny.answer_labels=true", "tiny.warm_start.target=pointer",
             "tiny.sample_index_only=true"]
    export = str(run / "export")
    assert form(export) == "free text" and form(str(tmp_path / "elsewhere")) == "free text"
    (run / "config.yaml").write_text(to_yaml(load_config("selector", solve)))
    assert form(export) == "solve-then-point" and form(export, "selector") == "free text"


def test_driver_evaluate_reads_the_validation_set_unless_asked_and_writes_outside_the_model_folder(tmp_path):
    """`--split validation` (the default) is a run's validation set, `test` its test set (sizes from the config),
    `heldout` every held-out prompt; the output goes beside RUN/export in the run folder, else under runs/evaluate/."""
    from types import SimpleNamespace

    from core.config import load_config
    from driver.evaluate import _parse_args, default_output, split_tasks

    heldout = [_task(f"q{i // 2}", i % 2, ["1", "2"], [1, 0]) for i in range(10)]
    data = SimpleNamespace(heldout=heldout, train=heldout[:1])
    cfg = load_config("selector", ["eval_prompts=4", "eval_test_prompts=3"])
    assert split_tasks(data, "validation", cfg) == heldout[:4]
    assert [t.problem_id for t in split_tasks(data, "test", cfg)] == ["q2", "q2", "q3"]
    assert split_tasks(data, "heldout", cfg) == heldout and split_tasks(data, "train") == heldout[:1]
    assert split_tasks(data, "test") == []  # the schema reads no test set
    assert _parse_args(["--model", "m", "--dataset", "d"]).split == "validation"
    assert default_output(str(tmp_path / "run" / "export"), "eval_test.json") == tmp_path / "run" / "eval_test.json"
    assert default_output(str(tmp_path / "my-model"), "e.json") == Path("runs") / "evaluate" / "my-model" / "e.json"
