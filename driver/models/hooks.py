"""A model's hooks, named by dotted path (`package.module:attribute`, core/plugins.py) and loaded by name.

A model that needs more than the general path (its own response form, parameters it keeps frozen, extra training
rows a step, its own preparation) names the functions that supply it; the system imports them by path, so it
imports no recipe and a model that names no hooks needs none. The names come from, first to last:

1. the model folder's `genselect_model.json`, its `"hooks"` object ({hook name: path}): a folder built by a recipe
   writes its own (the embedded tiny recipe's `build` does);
2. the hooks of the run config's `model.name` when it is a model kind built here (`KIND_HOOKS`: `tiny`);
3. the hooks of the kind the folder's `genselect_model.json` records (`"kind"`), for folders written before they
   named their hooks, and their exports and warm-starts, which copy that file.

The hooks and how they are called (every one optional):

* `build(recipe_cfg, corpus_texts, out_dir)`: builds model.name=KIND's folder (kind hooks only);
* `prepare(base_dir, recipe_cfg, model_cfg, dataset_dir, eval_prompts, progress) -> (model_dir, stats or None)`:
  the kind's own training before RL (pretraining, warm-start; driver/prepare.py);
* `response_form(model_dir, cfg) -> ResponseForm or None`: the form a rollout worker samples a selection task's
  group with (actors/rollout/response_forms.py; `cfg`: the run's TrainConfig, or None when unknown); None: the general
  one;
* `frozen_entries(model_dir) -> {parameter name: bool array} or None`: entries that never train (core/frozen.py);
* `extra_rows(cfg, model_dir, heldout_problems) -> fn(sequences, groups, step) or None`: a step's extra training
  sequences (driver/train.py, stage 3b);
* `problems_seen(folder) -> frozenset or None`: problem texts the model in `folder` trained on outside its dataset
  (driver/bon.py's `--exclude`); None: it records none.

A path that does not import or is not callable with those arguments is a PluginError naming
`genselect_model.json hooks.NAME` (or `model kind KIND hooks.NAME`) and the path.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Optional

from core.plugins import load_object, takes_positional

MODEL_INFO_FILE = "genselect_model.json"

#: each hook's positional arguments (the names label a refused path's message)
HOOK_ARGUMENTS = {
    "build": ("recipe_cfg", "corpus_texts", "out_dir"),
    "prepare": ("base_dir", "recipe_cfg", "model_cfg", "dataset_dir", "eval_prompts", "progress"),
    "response_form": ("model_dir", "cfg"),
    "frozen_entries": ("model_dir",),
    "extra_rows": ("cfg", "model_dir", "heldout_problems"),
    "problems_seen": ("folder",),
}

#: the hooks of the model kinds built here, by path (strings: nothing is imported until a hook is called)
KIND_HOOKS = {
    "tiny": {
        "build": "tiny_recipe.model:build",
        "prepare": "tiny_recipe.preparation:prepare",
        "response_form": "tiny_recipe.forms:response_form",
        "frozen_entries": "tiny_recipe.model:frozen_entries",
        "extra_rows": "tiny_recipe.anchor_rows:extra_rows",
        "problems_seen": "tiny_recipe.pretrain:problems_seen",
    },
}


def model_info(folder) -> dict:
    """The folder's `genselect_model.json` ({} when it has none or it does not read as an object)."""
    try:
        info = json.loads((Path(folder) / MODEL_INFO_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def hook_paths(folder=None, kind: Optional[str] = None) -> tuple:
    """(where the paths come from, {hook name: path}) for the model in `folder` run as model.name=`kind` (the
    order of the module docstring); ("", {}) for a model that names none."""
    info = model_info(folder) if folder is not None else {}
    own = info.get("hooks")
    if isinstance(own, dict) and own:
        return f"{MODEL_INFO_FILE} hooks", own
    for name in (kind, info.get("kind")):
        if name in KIND_HOOKS:
            return f"model kind {name} hooks", KIND_HOOKS[name]
    return "", {}


def model_hook(name: str, folder=None, kind: Optional[str] = None) -> Optional[Callable]:
    """The hook `name` of the model in `folder` (run as model.name=`kind`), loaded by path and checked to take its
    arguments (`HOOK_ARGUMENTS`); None when the model names no such hook."""
    if name not in HOOK_ARGUMENTS:
        raise KeyError(f"unknown model hook {name!r}; expected one of {sorted(HOOK_ARGUMENTS)}")
    source, paths = hook_paths(folder, kind)
    path = paths.get(name)
    if not path:
        return None
    arguments = HOOK_ARGUMENTS[name]
    return load_object(path, f"{source}.{name}", takes_positional(len(arguments), arguments))


def kind_hook(kind: str, name: str) -> Optional[Callable]:
    """The hook `name` of model kind `kind` (`KIND_HOOKS`) before any folder exists; None when it names none."""
    return model_hook(name, None, kind)
