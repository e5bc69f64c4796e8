"""The `prepare` hook of model.name=tiny (driver/models/hooks.py; called by driver/prepare.py once the dataset and
the built model exist): label-free pretraining on worked solutions (`tiny.pretrain`, pretrain.py), then the
warm-start (`tiny.warm_start`, warmstart.py), each cached in a folder of its own beside the base model."""
from __future__ import annotations

import sys
from pathlib import Path


def prepare(base_dir, tiny_cfg, model_cfg, dataset_dir, eval_prompts: int, progress: bool) -> tuple:
    """(the model folder RL starts from, the warm-start's stats or None): `base_dir` (the built tiny model)
    pretrained when `tiny.pretrain.steps` > 0, then warm-started when `tiny.warm_start.enabled`, on the dataset at
    `dataset_dir` in `model_cfg.dtype`; the warm-start is evaluated on `eval_prompts` held-out prompts (HF greedy
    decoding; 0: not evaluated)."""
    from driver.data import dataset as ds

    model_dir, stats = Path(base_dir), None
    data = ds.load_dataset(dataset_dir) if tiny_cfg.pretrain.steps > 0 or tiny_cfg.warm_start.enabled else None
    if tiny_cfg.pretrain.steps > 0:
        model_dir = _pretrained(model_dir, tiny_cfg, data, progress)
    if tiny_cfg.warm_start.enabled:
        from tiny_recipe.warmstart import warm_start, warm_start_dir

        ws = tiny_cfg.warm_start
        out = warm_start_dir(model_dir, ws, data.manifest["hash"], model_cfg.dtype, tiny_cfg.seed)
        if progress and not out.exists():
            print(f"[prepare] warm-start ({ws.target}, {ws.steps} steps) -> {out}", file=sys.stderr, flush=True)
        validation = data.heldout[:eval_prompts] if eval_prompts else data.heldout  # the test set stays unread
        model_dir, stats = warm_start(model_dir, data.train, validation, ws, out, dtype=model_cfg.dtype,
                                      seed=tiny_cfg.seed, eval_prompts=eval_prompts, progress=progress)
    return model_dir, stats


def _pretrained(base, tiny_cfg, data, progress: bool) -> Path:
    """The base model pretrained on worked solutions (cached), the held-out problems excluded."""
    from tiny_recipe.pretrain import pretrain, pretrain_dir

    exclude = frozenset(t.problem for t in data.heldout)
    out = pretrain_dir(base, tiny_cfg.pretrain, exclude, data.manifest["hash"])
    if progress and not out.exists():
        cfg = tiny_cfg.pretrain
        then = f", then {cfg.context_steps} steps after training prompts" if cfg.context_steps else ""
        pointers = f"; {cfg.pointer_share:.0%} pointer steps" if cfg.pointer_share else ""
        print(f"[prepare] pretraining on worked solutions ({cfg.steps} steps of {cfg.batch_size}{then}{pointers}) "
              f"-> {out}", file=sys.stderr, flush=True)
    out, stats = pretrain(base, tiny_cfg.pretrain, exclude, out, seed=tiny_cfg.seed, progress=progress,
                          train_tasks=data.train)
    if progress:
        print(f"[prepare] pretraining: {stats['steps_run']} steps, loss {stats['loss_first']:.2f} -> "
              f"{stats['loss_last10']:.2f}, {stats['seconds']:.0f} s", file=sys.stderr, flush=True)
    return out
