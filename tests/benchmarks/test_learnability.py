"""benchmarks/learnability.py: the one-token losses it trains with."""
import importlib.util
from pathlib import Path

import pytest
import torch

from core.records import SelectionTask

SPEC = importlib.util.spec_from_file_location(
    "learnability", Path(__file__).resolve().parent.parent.parent / "benchmarks" / "learnability.py")
learnability = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(learnability)


def _task(labels):
    n = len(labels)
    return SelectionTask(prompt_id="p/0", problem_id="p", domain="math", problem="x", candidates=("a",) * n,
                         candidate_answers=("1",) * n, labels=tuple(labels), reference="1", prompt="x")


def test_sft_loss_is_minus_log_probability_of_a_correct_index():
    index_ids = [5, 6, 7]
    log_probs = torch.log_softmax(torch.tensor([[0.0] * 5 + [1.0, 2.0, 0.5] + [0.0] * 2]), -1)
    loss, _ = learnability.policy_loss(log_probs, [_task([1.0, 0.0, 1.0])], index_ids, "sft", 4)
    expected = -torch.log(log_probs[0, 5].exp() + log_probs[0, 7].exp())
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


def test_rl_skips_groups_with_equal_rewards_and_pushes_towards_correct_indices():
    torch.manual_seed(0)
    index_ids = [0, 1]
    always_right = torch.log(torch.tensor([[1.0 - 1e-9, 1e-9]]))
    loss, reward = learnability.policy_loss(always_right, [_task([1.0, 0.0])], index_ids, "rl", 8)
    assert loss is None and reward == 1.0
    logits = torch.zeros(1, 2, requires_grad=True)
    loss, _ = learnability.policy_loss(torch.log_softmax(logits, -1), [_task([0.0, 1.0])], index_ids, "rl", 64)
    loss.backward()
    assert logits.grad[0, 1] < 0 < logits.grad[0, 0]  # gradient descent raises the correct index's logit


def test_curriculum_probe_runs_and_reports_every_evaluation(tmp_path, monkeypatch):
    """benchmarks/curriculum_probe.py end to end on the smoke config (its tiny model, a few steps)."""
    import json

    spec = importlib.util.spec_from_file_location(
        "curriculum_probe", Path(__file__).resolve().parent.parent.parent / "benchmarks" / "curriculum_probe.py")
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    monkeypatch.setattr(probe, "ROOT", tmp_path)
    assert probe.main(["smoke", "--steps", "26", "--margin", "-1", "--window", "1"]) == 0
    out = json.loads((tmp_path / "benchmarks" / "results" / "curriculum-probe.json").read_text())
    assert [e["step"] for e in out["evals"]] == [0, 25]
    assert out["admitted"] and all(0 <= e["greedy"] <= 1 and 0 <= e["sampled"] <= 1 for e in out["evals"])


def test_the_probe_writes_where_out_says_and_nothing_else(tmp_path, monkeypatch):
    """benchmarks/learnability.py end to end on the smoke config; `--out` keeps a committed result intact."""
    import json

    monkeypatch.setattr(learnability, "ROOT", tmp_path)
    out = tmp_path / "probe.json"
    saved = tmp_path / "selector"
    assert learnability.main(["smoke", "--mode", "sft", "--steps", "2", "--eval-every", "1", "--out", str(out),
                              "--save", str(saved), "--ema", "0.9", "--both-orders"]) == 0
    result = json.loads(out.read_text())
    assert result["mode"] == "sft" and result["steps"] == 2
    assert all(0 <= e["both_orders"] <= 1 for e in result["curve"])
    assert result["both_orders_by_slip"] == result["curve"][-1]["both_orders_by_slip"]
    assert not (tmp_path / "benchmarks").exists()
    # --save: a selector folder driver.evaluate can read, holding the trained weights' average (not the start's)
    from safetensors.torch import load_file

    from core.algo.genselect import PROMPT_STYLE_FILE

    assert {"config.json", "model.safetensors", "tokenizer.json", "genselect_model.json",
            PROMPT_STYLE_FILE} <= {f.name for f in saved.iterdir()}
    start = load_file(Path(result["model"]) / "model.safetensors")
    trained = load_file(saved / "model.safetensors")
    assert trained.keys() == start.keys()
    assert any(not torch.equal(trained[k], start[k]) for k in trained)


def test_line_labels_is_the_data_line_labels_override_after_the_given_ones(monkeypatch):
    """`--line-labels` (what check_probes.py's `lines` variant passes) loads the config with data.line_labels=true
    after the overrides given, as the override written out on the command line still does."""
    import core.config

    load_config = core.config.load_config

    class Loaded(Exception):
        pass

    def loaded(name, overrides):
        raise Loaded(name, list(overrides))

    monkeypatch.setattr(core.config, "load_config", loaded)
    labelled = ("selector", ["data.seed=3", "data.line_labels=true"])
    for argv, want in ((["selector", "data.seed=3", "--mode", "sft", "--line-labels"], labelled),
                       (["selector", "data.seed=3", "data.line_labels=true", "--mode", "sft"], labelled),
                       (["--line-labels", "--steps", "5"], ("selector", ["data.line_labels=true"])),
                       (["smoke", "--mode", "sft"], ("smoke", []))):
        with pytest.raises(Loaded) as got:
            learnability.main(argv)
        assert got.value.args == want, argv
    assert load_config(*labelled).data.line_labels is True


def test_ema_update_moves_each_parameter_by_one_minus_decay_towards_the_model():
    average, model = torch.nn.Linear(2, 1), torch.nn.Linear(2, 1)
    with torch.no_grad():
        for p in average.parameters():
            p.fill_(1.0)
        for p in model.parameters():
            p.fill_(3.0)
    learnability.ema_update(average, model, 0.75)
    assert all(torch.allclose(p, torch.full_like(p, 1.5)) for p in average.parameters())
    assert all(torch.equal(p, torch.full_like(p, 3.0)) for p in model.parameters())


def test_accuracy_by_slip_groups_correct_vs_wrong_pairs_by_the_wrong_candidates_mistake():
    def pair(wrong_text, won):
        task = SelectionTask(prompt_id="p/0", problem_id="p", domain="math", problem="Compute 7 + 5.",
                             candidates=("7 + 5 = 12\nAnswer: 12", wrong_text), candidate_answers=("12", "x"),
                             labels=(1.0, 0.0), reference="12", prompt="x")
        return task, won

    hits = [pair("7 + 5 = 13\nAnswer: 13", True), pair("7 + 5 = 11\nAnswer: 11", False),
            pair("7 + 5 = 12\nAnswer: 21", True)]
    both_wrong = SelectionTask(prompt_id="q/0", problem_id="q", domain="math", problem="x", candidates=("a", "b"),
                               candidate_answers=("1", "2"), labels=(0.0, 0.0), reference="3", prompt="x")
    by_kind = learnability.accuracy_by_slip(hits + [(both_wrong, False)])
    assert by_kind["off_by_one"] == {"pairs": 2, "accuracy": 0.5}
    assert sum(v["pairs"] for v in by_kind.values()) == 3
