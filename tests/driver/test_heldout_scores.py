"""HeldOutReader.read with the engine faked: every set's record keeps each selector's per-prompt scores with their
problem ids, and the solve-alone rule solves each distinct problem once a reading (the no-cue set reuses the test
set's solutions)."""
from types import SimpleNamespace

import pytest

from core.records import SelectionTask
from driver import evaluate
from driver.heldout import HeldOutReader, eval_lines, solve_budget


def _task(pid, k, answers, labels, hedged=(), suffix=""):
    candidates = tuple(("This might be wrong.\n" if i in hedged else "") + f"Answer: {a}"
                       for i, a in enumerate(answers))
    return SelectionTask(prompt_id=f"{pid}/p{k}{suffix}", problem_id=pid, domain="math", problem=f"What is {pid}?",
                         candidates=candidates, candidate_answers=tuple(answers), labels=tuple(labels), reference="1",
                         prompt="...")


def _cfg():
    rollout = SimpleNamespace(max_response_tokens=32, request_timeout_s=0, max_num_seqs=8, min_decode_tokens_per_s=4.0)
    return SimpleNamespace(seed=0, steps=10, eval_samples=0, eval_knockout_window=2, eval_knockout_both_orders=False,
                           eval_round_robin="none", eval_without_cue_every=0, eval_without_cue_at_start=True,
                           data=SimpleNamespace(source="procedural_math", max_prompt_tokens=256, max_candidates=3),
                           rollout=rollout)


@pytest.fixture
def reader(monkeypatch):
    """A reader over 3 validation prompts (2 problems), 2 test prompts and their no-cue twins; the policy picks
    candidate 0 everywhere; the engine's solutions answer 2 on problem `a`, 9 on `t` and nothing elsewhere."""
    solved = []

    def solve_remote(handle, problems, max_tokens, timeout_s):
        solved.append(([p[0] for p in problems], max_tokens))
        return [{"a": "1 + 1 = 2\nAnswer: 2", "t": "Answer: 9"}.get(pid, "no idea") for pid, _, _ in problems]

    monkeypatch.setattr(evaluate, "solve_remote", solve_remote)
    validation = [_task("a", 0, ["1", "2", "3"], [0, 1, 0], hedged=(0, 2)),
                  _task("a", 1, ["2", "1"], [1, 0], hedged=(1,)), _task("b", 0, ["5", "6"], [1, 0], hedged=(1,))]
    test = [_task("t", 0, ["9", "8"], [0, 1]), _task("u", 0, ["4", "3"], [1, 0], hedged=(1,))]
    nocue = [_task(t.problem_id, 0, t.candidate_answers, t.labels, hedged=(1,), suffix="/nocue") for t in test]
    fleet = SimpleNamespace(handles=SimpleNamespace(rollouts=["engine 0"]))
    out = HeldOutReader(_cfg(), fleet, validation, nocue, warn=lambda message: None, test_tasks=test)
    out._choose_whole_prompts = lambda tasks, samples, step: ([0] * len(tasks), None, {}, [None] * len(tasks))
    out._knockout_choices = lambda tasks, step: [len(t.candidates) - 1 for t in tasks]
    out.solved = solved
    return out


def test_each_set_keeps_every_selectors_per_prompt_scores_with_problem_ids(reader):
    result = reader.read(0)
    scores = result["scores"]
    assert scores["problem_id"] == ["a", "a", "b"]
    assert scores["genselect"] == [0, 1, 1] and scores["knockout/genselect"] == [0, 0, 0]
    assert scores["rule/cue/genselect"] == [1, 1, 1]  # the candidate that does not hedge
    assert scores["rule/solve_alone/genselect"] == [1, 1, 1] == scores["rule/solve_alone/knockout/genselect"]
    assert scores["majority"] == pytest.approx([1 / 3, 0.5, 0.5], abs=1e-6) == scores["random"]
    assert set(scores) == {"problem_id", "genselect", "knockout/genselect", "majority", "random",
                           "rule/cue/genselect", "rule/cue/knockout/genselect", "rule/solve_alone/genselect",
                           "rule/solve_alone/knockout/genselect"}  # no own answers written: no own-answer rule
    assert result["test/scores"]["problem_id"] == ["t", "u"] and result["nocue/scores"]["problem_id"] == ["t", "u"]
    assert result["test/scores"]["rule/solve_alone/genselect"] == [0, 1]  # follows its wrong 9 on t; the cue on u
    # the accuracies are the scores' problem means, averaged
    assert result["rule/solve_alone/genselect"] == pytest.approx(1.0) and result["genselect"] == pytest.approx(0.75)


def test_the_solve_alone_rule_solves_each_problem_once_a_reading_and_says_what_it_read(reader):
    result = reader.read(0)
    assert reader.solved == [(["a", "b"], 32), (["t", "u"], 32)]  # the no-cue set reuses the test set's solutions
    assert solve_budget(reader.cfg) == 32  # rollout.max_response_tokens
    assert result["rule/solve_alone/answered"] == pytest.approx(2 / 3)
    assert result["rule/solve_alone/stated"] == pytest.approx(2 / 3)
    assert result["rule/solve_alone/solved"] == pytest.approx(2 / 3)
    assert result["test/rule/solve_alone/solved"] == 0.0 and result["nocue/rule/solve_alone/solve_s"] == 0.0
    reader.read(10)  # a new reading solves again (the policy's weights changed)
    assert [problems for problems, _ in reader.solved[2:]] == [["a", "b"], ["t", "u"]]
    line = next(l for l in eval_lines(result, reader.cfg, 0) if l.startswith("[eval step 0, solve-alone rule]"))
    assert "whole prompt 1.000" in line and "answered 0.667" in line and "solving took" in line


def test_a_model_that_cannot_be_asked_to_solve_alone_reads_the_cue_rule_and_a_timeout_still_fails(reader, monkeypatch):
    """A chat template that does not render the generator prompt (the engine's call fails) warns once; the rule then
    reads as the cue rule at every reading, without asking again. A timeout is a reading's timeout: retried, then the
    run fails."""
    from driver.failure import RunFailed

    calls, warnings = [], []

    def refuses(handle, problems, max_tokens, timeout_s):
        calls.append(problems)
        raise ValueError("jinja2.exceptions.UndefinedError: 'list object' has no attribute '1'")

    monkeypatch.setattr(evaluate, "solve_remote", refuses)
    reader.warn = warnings.append
    for step in (0, 10):
        result = reader.read(step)
        assert result["rule/solve_alone/genselect"] == result["rule/cue/genselect"]
        assert result["rule/solve_alone/answered"] == 0.0
    assert len(calls) == 1 and len(warnings) == 1 and "could not be asked to solve" in warnings[0]
    assert "UndefinedError" in warnings[0]

    def times_out(handle, problems, max_tokens, timeout_s):
        raise TimeoutError("past its deadline")

    monkeypatch.setattr(evaluate, "solve_remote", times_out)
    reader._unsolvable = None
    with pytest.raises(RunFailed, match="solve-alone solving at step 20 failed"):
        reader.read(20)


def test_the_rules_are_read_on_any_math_data_and_not_on_code(reader):
    """Model-sampled math candidates (data.source=model, a chat model's own) get the rules too: the solve-alone rule
    compares final answers, whatever wrote the candidates; code candidates (programs) get none."""
    from dataclasses import replace

    reader.cfg.data.source = "model"
    result = reader.read(0)
    assert "rule/solve_alone/genselect" in result and "by_slip_kind" not in result
    reader.eval_tasks = [replace(t, domain="code") for t in reader.eval_tasks]
    result = reader.read(10)
    assert not any(k.startswith("rule/") for k in result["scores"]) and "rule/cue/genselect" not in result
