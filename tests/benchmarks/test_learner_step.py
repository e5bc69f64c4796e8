"""benchmarks/learner_step.py on recorded batches (benchmarks/record_batches.py's pickle): every mode trains the same
batches to the same loss and gradient, and the merged mode reads fewer tokens."""
import pickle
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "benchmarks"))

import learner_step  # noqa: E402


def pick_point(prompt: list, pick: int, solution: list, point: int, advantage: float) -> "TrainSequence":  # noqa: F821
    """A pick-then-point sequence as the rollout gives it (two sampled indices around a written, anchored solution)."""
    from core.records import TrainSequence

    n = len(solution)
    return TrainSequence(prompt, [pick] + solution + [point], [-0.7] + [0.0] * n + [-0.6], advantage, 0,
                         allowed_token_ids=[3, 4], loss_mask=[1] + [0] * n + [1], anchor_mask=[0] + [1] * n + [0])


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Two recorded batches of a tiny model: groups of 4 whose samples repeat (as a pick-then-point group on a pair)."""
    from tiny_recipe.config import TinyModelConfig
    from tiny_recipe.model import build_tiny_model

    root = tmp_path_factory.mktemp("learner_step")
    texts = [f"Problem {i}: {i} + {3 * i} = ? Answer: {4 * i} #{i % 2}" for i in range(200)]
    model = build_tiny_model(TinyModelConfig(), texts, root / "tiny", seed=0)
    up, down = pick_point([5, 6, 7, 8], 3, [20, 21, 22], 4, 1.0), pick_point([5, 6, 7, 8], 4, [30, 31], 3, -1.0)
    other_up, other_down = pick_point([9, 6, 2], 4, [23, 24], 4, 0.5), pick_point([9, 6, 2], 3, [25], 3, -1.5)
    batches = [[up, down, up, down, other_up, other_up, other_up, other_down], [other_down, up, up, up]]
    path = root / "batches.pkl"
    path.write_bytes(pickle.dumps({"config": "default", "overrides": [], "model_dir": str(model),
                                   "batches": batches}))
    return path


@pytest.mark.slow
def test_every_mode_trains_the_recorded_batches_to_the_same_loss_and_gradient(recorded):
    result = learner_step.main(["--batches", str(recorded), "--attention", "dense,blocks,merged", "--repeats", "2",
                                "--warmup", "0"])
    modes = result["modes"]
    assert set(modes) == {"dense", "blocks", "merged"}
    assert modes["dense"]["first_batch_loss"] != 0.0
    for mode in ("blocks", "merged"):
        assert modes[mode]["first_batch_loss_diff_vs_dense"] <= 1e-5 * abs(modes["dense"]["first_batch_loss"])
        assert modes[mode]["first_batch_grad_max_abs_diff_vs_dense"] <= 1e-5
    assert result["logprob_max_abs_diff"] <= 1e-5
    # the first batch: 8 samples, 3 distinct; merged, the learner reads each once
    assert modes["merged"]["rows_x_width_first"][0][1] < modes["blocks"]["rows_x_width_first"][0][1]
    assert all(modes[m]["step_s"]["n"] == 2 for m in modes)


def test_recorded_batches_keeps_an_even_spread(recorded, tmp_path):
    data = pickle.loads(recorded.read_bytes())
    data["batches"] = [[s] for s in data["batches"][0]]  # 8 batches of one sequence
    path = tmp_path / "eight.pkl"
    path.write_bytes(pickle.dumps(data))
    model_dir, cfg, batches = learner_step.recorded_batches(str(path), limit=3)
    assert model_dir == data["model_dir"] and cfg.steps == 50
    assert batches == [data["batches"][0], data["batches"][4], data["batches"][7]]
    assert len(learner_step.recorded_batches(str(path))[2]) == 8


def test_record_batches_keeps_what_stage_4_receives_and_writes_nothing_for_a_failed_run(tmp_path, monkeypatch):
    """benchmarks/record_batches.py around a stand-in for the main job (the recording, not the run, is under test)."""
    import json

    import driver.step
    import driver.train
    import record_batches
    from driver.step import Sequences

    seqs = [pick_point([5, 6], 3, [20], 4, 1.0), pick_point([5, 6], 3, [20], 4, 1.0)]
    real_shard = driver.step.shard
    seen = []

    def job(args):
        run_dir = Path(args[args.index("default") + 1].split("=", 1)[1])
        for step in range(2):
            seen.append(driver.step.shard(Sequences(seqs[:step + 1]), 1))
        run_dir.mkdir(parents=True)
        (run_dir / "summary.json").write_text(json.dumps({"start_model": "models/start"}))
        return 0

    monkeypatch.setattr(driver.train, "main", job)
    out = tmp_path / "b.pkl"
    assert record_batches.main(["--out", str(out), "--", "default", f"run_dir={tmp_path / 'run'}"]) == 0
    data = pickle.loads(out.read_bytes())
    assert data["model_dir"] == "models/start" and data["config"] == "default"
    assert data["batches"] == [seqs[:1], seqs]  # before the merge
    assert [len(b.shards[0]) for b in seen] == [1, 1]  # the run itself still merged them
    assert driver.step.shard is real_shard  # put back after the run
    monkeypatch.setattr(driver.train, "main", lambda args: 1)
    assert record_batches.main(["--out", str(tmp_path / "none.pkl"), "--", "default"]) == 1
    assert not (tmp_path / "none.pkl").exists()
