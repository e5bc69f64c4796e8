"""Which response form a rollout worker of the embedded tiny model samples (the response-form hook of
tiny_recipe/__init__.py): pick-then-point for a model folder whose tokenizer carries `PICK_POINT_TEMPLATE`,
solve-then-point with `tiny.sample_index_only`, else None (the general free text or direct index)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional


def response_form(model_path, sample_index_only: bool = False) -> Optional[object]:
    """The recipe's `ResponseForm` for the model at `model_path` (a local folder), solve-then-point with
    `sample_index_only` (`tiny.sample_index_only`), or None when the model needs none of the recipe's forms."""
    if sample_index_only:
        from tiny_recipe.solve_point import SolveThenPoint

        return SolveThenPoint()
    if Path(model_path).is_dir() and _is_pick_point_folder(model_path):
        from tiny_recipe.pick_point import PickThenPoint

        return PickThenPoint()
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
