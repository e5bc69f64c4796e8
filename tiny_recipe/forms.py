"""Which response form a rollout worker of the embedded tiny model samples (the `response_form` hook a tiny model
names, driver/models/hooks.py): pick-then-point for a model folder whose tokenizer carries `PICK_POINT_TEMPLATE`
(its pick credited by `tiny.pick_reward`), solve-then-point with `tiny.sample_index_only`, else None (the general
free text or direct index)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional


def response_form(model_path, cfg=None) -> Optional[object]:
    """The recipe's `ResponseForm` for the model at `model_path` (a local folder) in the run config `cfg` (a
    TrainConfig; None: the recipe's defaults): solve-then-point with `tiny.sample_index_only`, pick-then-point
    for a pick-then-point folder, or None when the model needs none of the recipe's forms."""
    tiny = cfg.tiny if cfg is not None else None
    if tiny is not None and tiny.sample_index_only:
        from tiny_recipe.solve_point import SolveThenPoint

        return SolveThenPoint()
    if Path(model_path).is_dir() and _is_pick_point_folder(model_path):
        from tiny_recipe.pick_point import PickThenPoint

        return PickThenPoint(pick_reward=tiny.pick_reward if tiny is not None else 0.0)
    return None


def _is_pick_point_folder(model_path) -> bool:
    """Whether the folder's saved chat template (`chat_template.jinja`, or `tokenizer_config.json`'s
    `chat_template`) is `PICK_POINT_TEMPLATE`; read from the files, so no tokenizer is built."""
    import json

    from tiny_recipe.chat import PICK_POINT_TEMPLATE

    folder = Path(model_path)
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text() == PICK_POINT_TEMPLATE
    try:
        template = json.loads((folder / "tokenizer_config.json").read_text()).get("chat_template")
    except (OSError, ValueError):
        return False
    return template == PICK_POINT_TEMPLATE
