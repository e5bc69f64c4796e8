"""benchmarks/pick_point_rl_probe.py: the warm-start targets, the group advantages, the exact sampled accuracy and
the per-pick contexts of a response that picks, then solves and points."""
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "benchmarks"))

import pick_point_rl_probe as probe  # noqa: E402


def _task(answers, correct=None):
    return SimpleNamespace(candidate_answers=answers, num_candidates=len(answers),
                           correct=correct or [False] * len(answers))


def test_the_warm_pointer_copies_the_pick_where_the_answer_is_unstated():
    assert probe.warm_pointer_target(_task(["4", "5", "6"]), "7", 2, "uniform", str.strip) == [2]
    assert probe.warm_pointer_target(_task(["4", "5", "6"]), None, 1, "rule", str.strip) == [1]


def test_where_the_answer_is_stated_the_warm_pointer_is_uniform_or_follows_the_rule():
    task = _task(["4", " 5", "4"])
    assert probe.warm_pointer_target(task, "4", 1, "uniform", str.strip) == [0, 1, 2]
    assert probe.warm_pointer_target(task, "4", 1, "rule", str.strip) == [0, 2]
    assert probe.warm_pointer_target(task, "5", 0, "rule", str.strip) == [1]   # compared after normalising


def test_group_advantages_drop_uniform_groups_and_standardise_the_rest():
    torch = pytest.importorskip("torch")
    rewards = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    keep, adv = probe.group_advantages(rewards)   # point_rl_probe.group_advantages, as the probe calls it
    assert keep.tolist() == [False, True, False]
    assert adv.shape == (1, 4)
    assert adv[0, 0] > 0 > adv[0, 1] and abs(float(adv.sum())) < 1e-5


def test_the_sampled_accuracy_sums_over_both_indices():
    # pick 0 with 0.25, then k=1 (correct) with 0.5; pick 1 with 0.75, then k=1 with 1.0
    assert probe.sampled_accuracy([0.25, 0.75], [[0.5, 0.5], [0.0, 1.0]], [False, True]) == pytest.approx(0.875)
    assert probe.sampled_accuracy([1.0, 0.0], [[1.0, 0.0], [0.0, 1.0]], [False, True]) == 0.0


def test_pointer_contexts_hold_one_context_per_pick_in_index_order(monkeypatch):
    calls = []

    def fake_contexts(model, tokenizer, tasks, decision="after_solution", picks=None):
        calls.append(list(picks))
        return [([t.name, g], f"{t.name}{g}") for t, g in zip(tasks, picks)]

    monkeypatch.setattr(probe, "decision_contexts", fake_contexts)
    tasks = [SimpleNamespace(name="a", num_candidates=2), SimpleNamespace(name="b", num_candidates=3)]
    out = probe.pointer_contexts(None, None, tasks)
    assert calls == [[0, 0], [1, 1], [2]]      # one batch per pick, only the tasks that have that index
    assert [own for _, own in out[0]] == ["a0", "a1"]
    assert [own for _, own in out[1]] == ["b0", "b1", "b2"]
