"""core.algo.schedules: the learning-rate factor of the learner and of the pretraining."""
import math

import pytest

from core.algo.schedules import lr_multiplier


@pytest.mark.parametrize("schedule,warmup,total,step,expected", [
    ("constant", 0, 0, 0, 1.0), ("constant", 0, 0, 99, 1.0),
    ("constant", 4, 0, 0, 0.25), ("constant", 4, 0, 3, 1.0), ("constant", 4, 0, 10, 1.0),
    ("linear", 0, 10, 0, 1.0), ("linear", 0, 10, 5, 0.5), ("linear", 0, 10, 10, 0.0), ("linear", 0, 10, 20, 0.0),
    ("linear", 2, 12, 1, 1.0), ("linear", 2, 12, 7, 0.5),
    ("cosine", 0, 10, 0, 1.0), ("cosine", 0, 10, 5, 0.5), ("cosine", 0, 10, 10, 0.0),
    ("cosine", 2, 6, 3, 0.5 * (1 + math.cos(math.pi / 4))), ("cosine", 2, 6, 0, 0.5),
])
def test_lr_multiplier_table(schedule, warmup, total, step, expected):
    assert lr_multiplier(step, schedule, warmup, total) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("schedule,total", [("linear", 0), ("cosine", 3), ("nope", 10)])
def test_lr_multiplier_rejects(schedule, total):
    with pytest.raises(ValueError):
        lr_multiplier(5, schedule, 3, total)


def test_zero_at_last_step_moves_the_decay_one_update_earlier():
    """The pretraining's schedule: the last of `total` updates runs at 0; the warm-up is the same."""
    assert [lr_multiplier(s, "cosine", 2, 6, zero_at_last_step=True) for s in range(2)] == [0.5, 1.0]
    assert lr_multiplier(2, "cosine", 2, 6, zero_at_last_step=True) == pytest.approx(lr_multiplier(3, "cosine", 2, 6))
    assert lr_multiplier(5, "cosine", 2, 6, zero_at_last_step=True) == pytest.approx(0.0, abs=1e-12)
    assert lr_multiplier(5, "cosine", 2, 6) > 0.0
    assert lr_multiplier(4, "linear", 2, 6, zero_at_last_step=True) == pytest.approx(0.25)
