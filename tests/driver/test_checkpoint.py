"""Checkpoints are published atomically; resume=auto finds only complete ones."""
import random

import numpy as np
import pytest

from driver import checkpoint as ckpt


def test_commit_publish_prune_and_latest(tmp_path):
    assert ckpt.latest(tmp_path) is None and ckpt.resolve_resume("auto", tmp_path) is None
    for step in (1, 2, 3):
        tmp = ckpt.begin(tmp_path, step)
        (tmp / "learner").mkdir()
        ckpt.commit(tmp_path, tmp, {"step": step}, keep=2)
    latest = ckpt.latest(tmp_path)
    assert latest.name == "step_000003" and ckpt.load_driver_state(latest) == {"step": 3}
    assert sorted(p.name for p in ckpt.checkpoint_root(tmp_path).glob("step_*")) == ["step_000002", "step_000003"]


def test_half_written_checkpoint_is_invisible(tmp_path):
    tmp = ckpt.begin(tmp_path, 1)
    ckpt.commit(tmp_path, tmp, {"step": 1}, keep=2)
    crashed = ckpt.begin(tmp_path, 2)  # a crash before commit leaves only the .tmp folder
    (crashed / "learner").mkdir()
    assert ckpt.latest(tmp_path).name == "step_000001"
    assert ckpt.resolve_resume("never", tmp_path) is None
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        ckpt.resolve_resume(str(tmp_path / "nowhere"), tmp_path)


def test_rng_state_round_trips_through_json():
    import json

    random.seed(5)
    np.random.seed(5)
    state = json.loads(json.dumps(ckpt.rng_state()))
    expected = (random.random(), np.random.rand())
    ckpt.set_rng_state(state)
    assert (random.random(), np.random.rand()) == expected


# ---- resume from another dataset or an incompatible config stops with a message --------------------------------
# the stub tasks all have 4 candidates: the default's curriculum (first stage: 2) is turned off here
FLAT = ["curriculum.enabled=false"]


def _checkpoint_with(tmp_path, overrides: list, reissue: list):
    from core.config import load_config, to_yaml

    run_dir = tmp_path / "old_run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(to_yaml(load_config("selector", FLAT + overrides)))
    state = {"step": 3, "version": 3, "rng": ckpt.rng_state(),
             "stream": {"stage": 0, "gains": [], "streams": {"0": {"seed": 0, "position": 8, "reissue": reissue}}}}
    return ckpt.commit(run_dir, ckpt.begin(run_dir, 3), state, keep=2)


def _stub_run(cfg, prompt_ids: list, run_dir):
    """A driver.run.Run with its Ray-facing parts stubbed out: enough to drive `_resume`."""
    from types import SimpleNamespace

    from core.algo.genselect import MIRROR_SUFFIX
    from driver.run import Run

    run = Run.__new__(Run)
    run.cfg, run.run_dir = cfg, run_dir
    run.train_tasks = [SimpleNamespace(prompt_id=i, num_candidates=4) for i in prompt_ids]
    run.handles = SimpleNamespace(learners=[])
    run.fleet = SimpleNamespace(version=0, call=lambda refs, timeout, what: [],
                                broadcaster=SimpleNamespace(sync=lambda version: {"seconds": 0.0}))
    run.metrics = SimpleNamespace(resume_at=lambda step: None)
    twins = [i + MIRROR_SUFFIX for i in prompt_ids] if cfg.curriculum.mirror else []
    run.collector = SimpleNamespace(stream=None, tasks=dict.fromkeys(prompt_ids + twins))  # as Run._tasks_by_id
    return run


def test_resume_refuses_another_dataset_naming_it(tmp_path):
    from core.config import load_config

    folder = _checkpoint_with(tmp_path, [], reissue=["q1/p0", "q7/p2"])
    run = _stub_run(load_config("selector", FLAT), ["q1/p0", "q2/p0"], tmp_path)  # q7/p2: not a prompt of this dataset
    with pytest.raises(ckpt.IncompatibleCheckpoint, match=r"another dataset.*'q7/p2'"):
        run._resume(folder)  # refused here, not a KeyError: 'q7/p2' steps later


def test_compatible_resume_restores_the_stream(tmp_path):
    from core.config import load_config

    folder = _checkpoint_with(tmp_path, [], reissue=["q2/p0"])
    run = _stub_run(load_config("selector", FLAT), ["q1/p0", "q2/p0", "q3/p0"], tmp_path)
    assert run._resume(folder) == 3  # the curriculum's nested state ('reissue') is read, not a KeyError
    assert run.stream.take(1) == ["q2/p0"] and run.collector.stream is run.stream


@pytest.mark.parametrize("overrides, key", [
    (["data.num_problems=300"], "data.num_problems"),
    (["data.seed=5"], "data.seed"),
    (["learner.zero_stage=3"], "learner.zero_stage"),
    (["model.dtype=bfloat16", "learner.dtype=bfloat16"], "learner.dtype"),
    (["curriculum.enabled=true"], "curriculum.enabled"),  # on top of FLAT
    (["curriculum.mirror=true"], "curriculum.mirror"),
    (["tiny.seed=3"], "tiny.seed"),  # the recipe's model, pretraining, warm-start and dataset settings fix them too
    (["tiny.warm_start.steps=7"], "tiny.warm_start.steps"),
    (["tiny.solution_end_line=false"], "tiny.solution_end_line"),
])
def test_resume_refuses_an_incompatible_config_naming_the_key(tmp_path, overrides, key):
    from core.config import load_config

    folder = _checkpoint_with(tmp_path, [], reissue=["q1/p0"])
    with pytest.raises(ckpt.IncompatibleCheckpoint, match=key.replace(".", r"\.")):
        ckpt.check_compatible(folder, load_config("selector", FLAT + overrides), ["q1/p0"])


def test_resume_accepts_settings_that_may_change(tmp_path):
    from core.config import load_config

    folder = _checkpoint_with(tmp_path, [], reissue=["q1/p0"])
    changed = load_config("selector", FLAT + ["steps=500", "learner.lr=1e-5", "eval_every=3", "rollout.num_workers=2",
                                      "data.out_dir=/elsewhere"])
    ckpt.check_compatible(folder, changed, ["q1/p0", "q2/p0"])


def test_a_key_added_since_the_checkpoint_compares_as_its_default(tmp_path):
    """A checkpoint written before `curriculum.mirror` existed ran unmirrored: it resumes under the default and
    is refused with the key named when the new run mirrors (the first version compared None with False)."""
    from core.config import load_config

    folder = _checkpoint_with(tmp_path, [], reissue=["q1/p0"])
    path = folder / "config.yaml"  # the copy the checkpoint carries
    path.write_text(path.read_text().replace("  mirror: false\n", ""))
    assert "mirror" not in path.read_text()
    ckpt.check_compatible(folder, load_config("selector", FLAT), ["q1/p0"])
    with pytest.raises(ckpt.IncompatibleCheckpoint, match=r"curriculum\.mirror=False, this run has curriculum\.mirror=True"):
        ckpt.check_compatible(folder, load_config("selector", FLAT + ["curriculum.mirror=true"]), ["q1/p0"])


def test_mirrored_resume_reissues_unfinished_twins(tmp_path):
    from core.config import load_config

    mirror = FLAT + ["curriculum.mirror=true"]
    folder = _checkpoint_with(tmp_path, ["curriculum.mirror=true"], reissue=["q2/p0/mirror", "q3/p0"])
    run = _stub_run(load_config("selector", mirror), ["q1/p0", "q2/p0", "q3/p0"], tmp_path)
    assert run._resume(folder) == 3
    taken = run.stream.take(4)
    assert taken[:2] == ["q2/p0/mirror", "q3/p0"] and taken[3] == taken[2] + "/mirror", taken


def test_a_checkpoint_written_before_the_recipe_keys_moved_resumes_under_tiny(tmp_path):
    """A checkpoint's config.yaml that still has `model.tiny`, `model.seed`, `data.solution_end_line`, ... (written
    before the tiny recipe's keys moved under `tiny:`) is compared with its keys moved, so the same run resumes."""
    from omegaconf import OmegaConf

    from core.config import load_config

    folder = _checkpoint_with(tmp_path, [], reissue=["q1/p0"])
    path = folder / "config.yaml"
    tree = OmegaConf.to_container(OmegaConf.load(path))
    recipe = tree.pop("tiny")
    tree["model"].update(tiny=recipe["model"], seed=recipe["seed"], pretrain=recipe["pretrain"],
                         warm_start=recipe["warm_start"])
    tree["data"]["solution_end_line"] = recipe["solution_end_line"]
    path.write_text(OmegaConf.to_yaml(OmegaConf.create(tree)))
    ckpt.check_compatible(folder, load_config("selector", FLAT), ["q1/p0"])
    with pytest.raises(ckpt.IncompatibleCheckpoint, match=r"tiny\.seed=0, this run has tiny\.seed=3"):
        ckpt.check_compatible(folder, load_config("selector", FLAT + ["tiny.seed=3"]), ["q1/p0"])
