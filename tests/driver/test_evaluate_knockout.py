"""Knockout evaluation (`python -m driver.evaluate --knockout-window W`): rounds over sub-prompts, one batch
per round, winners mapped back to the full task's indices, unparseable judgments handled as serving does."""
import asyncio
import re
from types import SimpleNamespace

import pytest

from core.algo.genselect import PLAIN, PromptStyle, render_judgment
from core.records import SelectionTask
from driver.evaluate import (choose_knockout, choose_knockout_remote, choose_remote, choose_round_robin,
                             choose_round_robin_remote, sub_task)


def _task(texts, pid="p"):
    return SelectionTask(prompt_id=pid, problem_id=pid, domain="math", problem="Compute 1 + 1.",
                         candidates=tuple(texts), candidate_answers=tuple(str(i) for i in range(len(texts))),
                         labels=tuple(float("good" in t) for t in texts), reference="2", prompt="full prompt")


class Judge:
    """A fake engine: names the first candidate of the sub-prompt whose text says `good`, else the last one;
    answers garbage when the sub-prompt holds a `mute` candidate. Records the batch of every call."""

    def __init__(self):
        self.batches = []

    async def generate(self, tasks, n, temperature, max_tokens=None):
        self.batches.append(list(tasks))
        out = []
        for t in tasks:
            shown = re.findall(r"Solution \d+:\n(\S+)", t.prompt)
            assert list(shown) == list(t.candidates)  # the prompt was rendered for the sub-task
            pick = next((i for i, c in enumerate(shown) if "good" in c), len(shown) - 1)
            text = "no idea" if any("mute" in c for c in shown) else render_judgment(pick)
            out.append(SimpleNamespace(rollouts=[SimpleNamespace(response_text=text, truncated=False)]))
        return out


def test_pairs_knockout_finds_the_good_candidate_in_log2_rounds_batched_across_tasks():
    tasks = [_task(["a", "b", "c", "d", "e", "good-f", "g"], "x"), _task(["good-a", "b"], "y"),
             _task(["a", "b", "c"], "z")]
    judge = Judge()
    choices = asyncio.run(choose_knockout(judge, tasks, window=2, style=PromptStyle(end_lines=True)))
    assert choices == [5, 0, 2]
    assert len(judge.batches) == 3  # rounds for 7 candidates in pairs; the others ride along in round 1
    assert len(judge.batches[0]) == 3 + 1 + 1  # task x: 4 groups of which 3 pairs; y: 1 pair; z: 1 pair + 1 bye
    assert "End of solution 0." in judge.batches[0][0].prompt


def test_unparseable_group_advances_its_first_member_and_an_unparseable_final_is_none():
    judge = Judge()
    early = _task(["b", "mute-a", "good-c", "d"], "early")  # round 1 group (0, 1) cannot be judged: 0 goes on
    final = _task(["mute-a", "good-b"], "final")            # the only round cannot be judged
    assert asyncio.run(choose_knockout(judge, [early, final], window=2, style=PLAIN)) == [2, None]


def test_window_at_least_n_is_one_direct_judgment_and_sub_task_keeps_labels_aligned():
    judge = Judge()
    task = _task(["a", "good-b", "c"])
    assert asyncio.run(choose_knockout(judge, [task], window=8, style=PLAIN)) == [1]
    assert len(judge.batches) == 1 and len(judge.batches[0]) == 1
    sub = sub_task(task, [2, 1], style=PLAIN)
    assert sub.candidates == ("c", "good-b") and sub.labels == (0.0, 1.0) and sub.candidate_answers == ("2", "1")
    assert sub.prompt.index("Solution 0:\nc") < sub.prompt.index("Solution 1:\ngood-b")


class SlowJudge:
    """Judge as an async Ray actor that waits `delay_s` before each answer and counts the calls cancelled."""

    def __init__(self, delay_s: float):
        self.judge, self.delay_s, self.cancelled = Judge(), delay_s, 0

    async def generate(self, tasks, **kwargs):
        try:
            await asyncio.sleep(self.delay_s)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return await self.judge.generate(tasks, **kwargs)

    async def cancelled_calls(self) -> int:
        return self.cancelled


@pytest.fixture(scope="module")
def local_ray():
    import sys

    import ray

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the fakes travel by value
    owned = not ray.is_initialized()
    if owned:
        ray.init(address="local", num_cpus=1, include_dashboard=False, logging_level="ERROR")
    yield ray
    if owned:
        ray.shutdown()


@pytest.mark.slow
def test_remote_evaluations_past_their_deadline_cancel_the_engine_call(local_ray):
    """Through a real Ray actor: the tournament's answer; past its deadline, asyncio.TimeoutError and the call in
    flight cancelled in the actor (a retried evaluation must not share the engine with it); the same for the
    one-prompt evaluation's call (GetTimeoutError)."""
    import time

    tasks = [_task(["a", "b", "good-c", "d"])]
    judge = local_ray.remote(num_cpus=0)(SlowJudge)
    assert choose_knockout_remote(judge.remote(0.0), tasks, 2, PLAIN, timeout_s=60) == [2]
    slow = judge.remote(30.0)
    local_ray.get(slow.cancelled_calls.remote(), timeout=60)  # the actor is up before the deadline runs
    with pytest.raises(asyncio.TimeoutError):
        choose_knockout_remote(slow, tasks, 2, PLAIN, timeout_s=1.0)
    with pytest.raises(local_ray.exceptions.GetTimeoutError):  # the one-prompt evaluation's call, the same way
        choose_remote(slow, tasks, timeout_s=1.0)
    deadline = time.time() + 20
    while local_ray.get(slow.cancelled_calls.remote()) < 2 and time.time() < deadline:
        time.sleep(0.2)
    assert local_ray.get(slow.cancelled_calls.remote()) == 2


class LogprobJudge:
    """A fake engine that reads content weakly and position strongly: log-probs favour the first solution shown
    (0.9 of the mass, shared with the rest), shifted towards every `good` candidate by a small margin."""

    def __init__(self):
        self.batches = []

    async def index_logprobs(self, tasks):
        import math
        self.batches.append(list(tasks))
        out = []
        for t in tasks:
            shown = re.findall(r"Solution \d+:\n(\S+)", t.prompt)
            weights = [(9.0 if i == 0 else 1.0) * (1.2 if "good" in c else 1.0) for i, c in enumerate(shown)]
            out.append(([math.log(w / sum(weights)) for w in weights], 0))
        return out


def test_both_orders_knockout_finds_what_a_position_biased_judge_prefers_weakly():
    tasks = [_task(["a", "b", "good-c", "d", "e"], "x"), _task(["a", "good-b"], "y")]
    judge = LogprobJudge()
    assert asyncio.run(choose_knockout(judge, tasks, window=2, style=PLAIN, both_orders=True)) == [2, 1]
    first = judge.batches[0]  # every group twice, as given then reversed
    assert [t.candidates for t in first[:2]] == [("a", "b"), ("b", "a")]
    assert len(first) == 2 * (2 + 1)  # x: 2 pairs and a bye; y: 1 pair


def _answered(texts, answers, pid="r"):
    return SelectionTask(prompt_id=pid, problem_id=pid, domain="math", problem="Compute 1 + 1.",
                         candidates=tuple(texts), candidate_answers=tuple(answers),
                         labels=tuple(float("good" in t) for t in texts), reference="2", prompt="full prompt")


def test_round_robin_judges_every_pair_in_both_orders_in_one_batch():
    tasks = [_task(["a", "b", "good-c", "d", "e"], "x"), _task(["a", "good-b"], "y"), _task(["only"], "z")]
    judge = LogprobJudge()
    assert asyncio.run(choose_round_robin(judge, tasks, PLAIN, by_answer=False)) == [2, 1, 0]
    assert len(judge.batches) == 1 and len(judge.batches[0]) == 2 * (10 + 1)  # C(5,2) + C(2,2) pairs, both orders
    assert [t.candidates for t in judge.batches[0][:2]] == [("a", "b"), ("b", "a")]


def test_round_robin_by_answer_keeps_agreement_a_weak_judge_cannot_overturn():
    """Three candidates agree on 7 against one `good` candidate the judge prefers only weakly: pooled by answer
    the agreeing answer wins, scored alone the preferred candidate does."""
    task = _answered(["a", "b", "c", "good-d"], ["7", "7", "7", "2"])
    assert asyncio.run(choose_round_robin(LogprobJudge(), [task], PLAIN, by_answer=True)) == [0]
    assert asyncio.run(choose_round_robin(LogprobJudge(), [task], PLAIN, by_answer=False)) == [3]


def test_remote_round_robin_from_sync_code():
    class _LpHandle:
        def __init__(self, judge):
            async def remote(tasks):
                return await judge.index_logprobs(tasks)
            self.index_logprobs = SimpleNamespace(remote=remote)

    tasks = [_task(["a", "good-b", "c"])]
    assert choose_round_robin_remote(_LpHandle(LogprobJudge()), tasks, PLAIN, timeout_s=30, by_answer=False) == [1]


def test_command_line_evaluates_in_chunks_and_keeps_each_choice(tmp_path, monkeypatch, capsys):
    """`python -m driver.evaluate --round-robin answer`: prompts go to the engine in chunks of CHUNK_PROMPTS (a
    progress bar on stderr), the choices equal one batch's, and the JSON keeps each prompt's choice by id."""
    import json

    import actors.rollout.rollout_worker
    import driver.evaluate as evaluate
    from driver.data.dataset import SCHEMA_VERSION, write_dataset

    tasks = [_answered(["a", "good-b", "c"][: 2 + i % 2], ["1", "2", "3"][: 2 + i % 2], pid=f"q{i}")
             for i in range(7)]
    write_dataset(tmp_path / "data", train=[], heldout=tasks, manifest={"config": {}, "schema_version": SCHEMA_VERSION})
    judges = []

    class FakeWorker(LogprobJudge):
        def __init__(self, cfg, model, dtype="float32", response_form=None):
            super().__init__()
            judges.append(self)

        async def shutdown(self):
            pass

    monkeypatch.setattr(actors.rollout.rollout_worker, "RolloutWorker", FakeWorker)
    monkeypatch.setattr(evaluate, "CHUNK_PROMPTS", 3)
    out = tmp_path / "eval.json"
    assert evaluate.main(["--model", "m", "--dataset", str(tmp_path / "data"), "--round-robin", "answer",
                          "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    one_batch = asyncio.run(choose_round_robin(LogprobJudge(), tasks, PLAIN, by_answer=True))
    assert result["choices"] == {t.prompt_id: c for t, c in zip(tasks, one_batch)}
    assert list(result["choices"].values()) == [1] * 7 and result["genselect"] == 1.0
    assert [len({t.prompt_id.split("/")[0] for t in b}) for b in judges[0].batches] == [3, 3, 1]
    assert "evaluate" in capsys.readouterr().err  # the progress bar
