"""Learning-rate schedules (pure): the factor of the peak learning rate at an optimizer update.

One warm-up and decay shared by the DeepSpeed learner (`learner.lr_schedule`, per update of the run) and the tiny
model's pretraining (`tiny.pretrain.lr_decay`, per step of a stage). Cosine decay without restarts: Loshchilov &
Hutter, SGDR, arXiv 1608.03983, eq. 5.
"""
from __future__ import annotations

import math

SCHEDULES = ("constant", "linear", "cosine")


def lr_multiplier(step: int, schedule: str, warmup_steps: int, total_steps: int,
                  zero_at_last_step: bool = False) -> float:
    """Learning-rate factor for optimizer update `step` (0-based); the lr is `peak * factor`.

    Warm-up: `(step + 1) / warmup_steps` for `step < warmup_steps` (the first update is not wasted at 0).
    Then 'constant': 1; 'linear': `1 - p`; 'cosine': `0.5 * (1 + cos(pi * p))`, with the decay's progress
    `p = (step - warmup) / (total - warmup)`, capped at 1: the factor reaches 0 at `step = total`, one past the
    last update of `total`. `zero_at_last_step`: `p = (step - warmup + 1) / (total - warmup)`, so the last update
    (`step = total - 1`) runs at 0 (the pretraining's schedule).
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown lr_schedule {schedule!r}")
    if total_steps <= warmup_steps:
        raise ValueError(f"lr_schedule={schedule!r} needs total_steps > warmup_steps, got {total_steps}")
    progress = min(1.0, (step - warmup_steps + int(zero_at_last_step)) / (total_steps - warmup_steps))
    if schedule == "linear":
        return 1.0 - progress
    return 0.5 * (1.0 + math.cos(math.pi * progress))
