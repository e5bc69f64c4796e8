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
