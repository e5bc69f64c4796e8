"""`python -m driver.export RUN_DIR [--step N] [--out DIR]`: a run folder's checkpoint as a Hugging Face folder,
without starting a run, equal to what the learner holds and to the end-of-run export; clear errors for a folder
without checkpoints and a step that is not on disk."""
from pathlib import Path

import pytest

from driver import checkpoint as ckpt
from driver.export import main


def _texts() -> list:
    return [f"Problem {i}: {i} + {3 * i} = ? Solution {i % 4}: {4 * i}. Judgment: {i % 4}" for i in range(300)]


def _train_and_checkpoint(learner, run_dir: Path, step: int, model_dir: Path, vocab: int) -> dict:
    """One learner step on a random batch, then the run's checkpoint of `step` (as driver.run writes it); returns
    the learner's weights (float32 numpy) after it."""
    import random

    from core.packing import count_loss_tokens
    from core.records import TrainSequence

    rng = random.Random(step)
    batch = [TrainSequence([rng.randrange(2, vocab) for _ in range(20)], [rng.randrange(2, vocab) for _ in range(6)],
                           [-2.0] * 6, advantage=1.0 if i % 2 else -1.0, policy_version=step - 1) for i in range(4)]
    learner.train_step(batch, count_loss_tokens(batch), step=step - 1)
    tmp = ckpt.begin(run_dir, step)
    learner.save_checkpoint(str(tmp / "learner"), {"step": step, "version": step})
    ckpt.commit(run_dir, tmp, {"step": step, "version": step, "model_dir": str(model_dir)}, keep=2)
    return learner.export_weights()


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A run folder with the checkpoints of steps 1 and 2 of a real learner (the tiny Qwen3, ZeRO-2, fp32) and
    its end-of-run export; with the learner's weights after each step."""
    from actors.learner.learner import Learner
    from core.config import AlgorithmConfig, LearnerConfig, load_config, to_yaml
    from tiny_recipe.config import TinyModelConfig
    from core.net import free_port
    from driver.export import export_files
    from tiny_recipe.model import build_tiny_model

    base = tmp_path_factory.mktemp("export")
    model_dir = build_tiny_model(TinyModelConfig(), _texts(), base / "model", seed=0)
    run_dir = base / "run"
    run_dir.mkdir()
    cfg = load_config("default", [f"run_dir={run_dir}", "steps=2"])
    (run_dir / "config.yaml").write_text(to_yaml(cfg))
    learner = Learner(LearnerConfig(lr=1e-3, micro_batch_tokens=256, step_timeout_s=120.0),
                      AlgorithmConfig(ratio_reference="behaviour"), str(model_dir), master_port=free_port())
    try:
        vocab = learner.hf.config.vocab_size
        weights = {step: _train_and_checkpoint(learner, run_dir, step, Path(model_dir), vocab) for step in (1, 2)}
        learner.export_hf(str(run_dir / "export"), files=export_files(cfg, 2, 2))  # as Run.finish and export_every
    finally:
        learner.shutdown()
    return run_dir, weights


def _state(folder: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    return {k: v.detach() for k, v in
            AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).state_dict().items()}


@pytest.mark.slow
def test_the_latest_checkpoint_exports_what_the_learner_exported_at_the_end(trained_run, capsys):
    import json

    import torch
    from transformers import AutoTokenizer

    from driver.evaluate import run_config
    from driver.serve import exported_version

    run_dir, _ = trained_run
    assert main([str(run_dir)]) == 0
    out = run_dir / "exports" / "step_000002"
    assert capsys.readouterr().out.strip() == str(out)
    exported, final = _state(out), _state(run_dir / "export")
    assert exported.keys() == final.keys() and all(torch.equal(exported[k], final[k]) for k in final)
    assert json.loads((out / "config.json").read_text()) == json.loads((run_dir / "export" / "config.json").read_text())
    AutoTokenizer.from_pretrained(str(out))
    for name in ("genselect_prompt.json", "config.yaml", "genselect_export.json"):
        assert (out / name).read_text() == (run_dir / "export" / name).read_text(), name
    assert exported_version(str(out)) == 2 and run_config(str(out)).steps == 2  # serving and evaluation read it
    assert not (run_dir / "exports" / "step_000002.tmp").exists()


@pytest.mark.slow
def test_step_exports_an_older_checkpoint_where_asked(trained_run, tmp_path):
    import numpy as np

    run_dir, weights = trained_run
    assert main([str(run_dir), "--step", "1", "--out", str(tmp_path / "one")]) == 0
    exported = {k: v.numpy() for k, v in _state(tmp_path / "one").items()}
    assert all(np.array_equal(exported[k], weights[1][k]) for k in exported)
    assert any(not np.array_equal(exported[k], weights[2][k]) for k in exported)


def test_a_folder_without_checkpoints_or_a_step_not_on_disk_is_a_clear_error(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    assert main([str(run_dir)]) == 2
    assert f"{run_dir} holds no checkpoint" in capsys.readouterr().err
    for step in (1, 2):
        ckpt.commit(run_dir, ckpt.begin(run_dir, step), {"step": step, "version": step}, keep=2)
    assert main([str(run_dir), "--step", "7"]) == 2
    assert "holds no checkpoint of step 7; it holds steps 1, 2" in capsys.readouterr().err
    assert main([str(run_dir)]) == 2  # no model folder recorded, none named
    assert "--model-dir" in capsys.readouterr().err
    assert main([str(run_dir), "--model-dir", str(tmp_path)]) == 2
    assert f"{tmp_path} is not a model folder" in capsys.readouterr().err
    assert main([str(tmp_path / "nowhere")]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_export_every_is_a_step_count():
    from core.config import ConfigError, load_config

    assert load_config("default").export_every == 0  # the default: only run_dir/export at the end
    assert load_config("default", ["export_every=5"]).export_every == 5
    with pytest.raises(ConfigError, match=r"export_every=-1 must be >= 0"):
        load_config("default", ["export_every=-1"])
