"""Versioned selection datasets on disk: build once, reuse while nothing that shapes them changed.

Layout of `{data.out_dir}/{name}-{hash}/`:

* `train.jsonl`, `heldout.jsonl`: one `SelectionTask.to_dict()` per line; the split is by problem.
* `manifest.json`: counts at every stage (problems read, bad rows, labeled, filtered, prompts built,
  dropped for the token budget), candidates-per-prompt histogram, fraction correct, majority@N and
  random@N per split, seed, the data config, source package versions, the tokenizer the budget was counted
  with, creation time, schema version.
* `tokenizer_corpus.txt`: the text a locally trained tokenizer (tiny model) learns from, so the model can
  be rebuilt from the dataset alone.

`hash` = sha256 of (data config with the recipe's dataset settings, source versions, tokenizer identity, schema
version): a changed config
makes a new folder, an unchanged one is reused. The folder is written to a temporary sibling and renamed,
so it appears complete or not at all.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from core.algo.genselect import PromptStyle
from core import label_functions
from core.config import DataConfig, cache_key_settings
from core.recipe_sections import section_value
from core.records import SelectionTask

SCHEMA_VERSION = 1
FILES = ("train.jsonl", "heldout.jsonl", "manifest.json")


class BadDatasetRow(ValueError):
    """A dataset row that does not validate; the message is `path:line: reason`."""


# DataConfig keys added after datasets were cached, with the default that leaves a dataset as it was: left out
# of the hash at that value, so that adding them did not rename every cached dataset (and its warm-start)
KEYS_ADDED_LATER = {"train_max_candidates": 0, "side_by_side": False, "answer_labels": False, "label_function": ""}

#: the dataset settings the embedded tiny recipe sets (`tiny.*`, tiny_recipe/config.py: the training side's cue-free
#: share and the prompt layout its response forms read), with their defaults. They were DataConfig keys when
#: datasets were first cached: the hash (and the manifest's `config`) holds them beside the DataConfig's keys as it
#: did then, so a config keeps its dataset folder.
RECIPE_SETTINGS = {"train_no_cue_share": 0.0, "solution_end_line": False, "line_labels": False, "answer_labels": False}


@dataclass
class DatasetSettings(DataConfig):
    """What a dataset is built with: a DataConfig's keys and the recipe's dataset settings (RECIPE_SETTINGS). Build
    one with `settings(data_cfg, recipe)`; a plain DataConfig is read as if the recipe left them at their defaults."""
    train_no_cue_share: float = 0.0
    solution_end_line: bool = False
    line_labels: bool = False
    answer_labels: bool = False


def settings(data_cfg, recipe=None) -> DatasetSettings:
    """`data_cfg` (a DataConfig) with the RECIPE_SETTINGS of `recipe` (the config's `tiny:` section, its dataclass or
    plain data; None: their defaults)."""
    own = {f.name: getattr(data_cfg, f.name) for f in dataclasses.fields(DataConfig)}
    return DatasetSettings(**own, **{k: section_value(recipe, k, v) if recipe is not None else getattr(data_cfg, k, v)
                                     for k, v in RECIPE_SETTINGS.items()})


def prompt_style(cfg) -> PromptStyle:
    """The prompt layout of a run's TrainConfig `cfg`: `data.side_by_side` and the recipe's layout keys
    (`tiny.solution_end_line`, `tiny.line_labels`, `tiny.answer_labels`)."""
    recipe = getattr(cfg, "tiny", None)
    return PromptStyle(end_lines=bool(section_value(recipe, "solution_end_line", False)),
                       line_labels=bool(section_value(recipe, "line_labels", False)),
                       side_by_side=bool(getattr(cfg.data, "side_by_side", False)),
                       answer_labels=bool(section_value(recipe, "answer_labels", False)))


def config_dict(cfg) -> dict:
    """A DataConfig or DatasetSettings (dataclass) as a plain dict, with the recipe's settings (their defaults where
    `cfg` has none) and without `out_dir` (where a dataset lives is not what it is)."""
    d = {**RECIPE_SETTINGS, **dataclasses.asdict(cfg)}
    d["label_function"] = label_functions.cache_value(d.get("label_function") or {})  # as the plain key was written
    d = cache_key_settings(d, KEYS_ADDED_LATER)  # at their default they build what was built before them
    d.pop("out_dir", None)
    return d


def dataset_key(cfg, versions: dict, tokenizer_id: str) -> str:
    """12 hex digits identifying the dataset a config would produce."""
    blob = json.dumps({"config": config_dict(cfg), "versions": versions, "tokenizer": tokenizer_id,
                       "schema": SCHEMA_VERSION}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def dataset_name(cfg) -> str:
    return Path(cfg.path).stem if cfg.source == "file" else cfg.source


def dataset_dir(cfg, key: str) -> Path:
    return Path(cfg.out_dir) / f"{dataset_name(cfg)}-{key}"


def is_complete(path: Path) -> bool:
    return all((Path(path) / f).exists() for f in FILES)


def write_dataset(path: Path, train: list, heldout: list, manifest: dict, corpus: Optional[list] = None) -> Path:
    """Write the dataset folder atomically (temp dir + rename). Returns `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for name, tasks in (("train.jsonl", train), ("heldout.jsonl", heldout)):
        with (tmp / name).open("w", encoding="utf-8") as f:
            for t in tasks:
                f.write(json.dumps(t.to_dict(), ensure_ascii=False) + "\n")
    if corpus is not None:
        (tmp / "tokenizer_corpus.txt").write_text("\n\x1e\n".join(corpus), encoding="utf-8")
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str), encoding="utf-8")
    if is_complete(path):  # someone else finished the same dataset first: theirs is identical
        shutil.rmtree(tmp)
        return path
    shutil.rmtree(path, ignore_errors=True)  # a partial folder cannot exist (rename), but be safe
    os.rename(tmp, path)
    return path


def read_corpus(path: Path) -> list:
    f = Path(path) / "tokenizer_corpus.txt"
    return f.read_text(encoding="utf-8").split("\n\x1e\n") if f.exists() else []


def validate_row(row) -> SelectionTask:
    """A SelectionTask from a dataset row, with the checks the loaders rely on; ValueError with the reason."""
    if not isinstance(row, dict):
        raise ValueError(f"row must be a JSON object, got {type(row).__name__}")
    task = SelectionTask.from_dict(row)
    if task.num_candidates < 2:
        raise ValueError(f"{task.num_candidates} candidates (need >= 2)")
    if task.domain not in ("math", "code"):
        raise ValueError(f"domain {task.domain!r} is not 'math' or 'code'")
    if not all(isinstance(x, (int, float)) and 0.0 <= x <= 1.0 for x in task.labels):
        raise ValueError("labels must be numbers in [0, 1]")
    if not all(isinstance(c, str) for c in task.candidates):
        raise ValueError("candidates must be strings")
    return task


def load_tasks(path, bad_rows: str = "error", on_bad: Optional[Callable[[str], None]] = None) -> list:
    """SelectionTasks from a dataset JSONL file; a bad row is reported as `path:line: reason` and then
    raised as BadDatasetRow (bad_rows='error') or skipped (bad_rows='skip', reported to `on_bad`)."""
    path = Path(path)
    tasks = []
    with path.open("r", encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                tasks.append(validate_row(json.loads(line)))
            except (ValueError, TypeError) as e:  # JSONDecodeError is a ValueError
                message = f"{path}:{lineno}: {e}"
                if bad_rows == "error":
                    raise BadDatasetRow(message) from None
                if on_bad:
                    on_bad(message)
    return tasks


@dataclass
class Dataset:
    """A loaded dataset folder."""
    path: Path
    train: list
    heldout: list
    manifest: dict


def load_dataset(path, bad_rows: str = "error") -> Dataset:
    """Load and validate a dataset folder written by `write_dataset`."""
    path = Path(path)
    if not is_complete(path):
        missing = [f for f in FILES if not (path / f).exists()]
        raise FileNotFoundError(f"{path} is not a complete dataset folder (missing {missing})")
    manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    if manifest.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{path}: schema version {manifest.get('schema_version')} != {SCHEMA_VERSION}")
    return Dataset(path, load_tasks(path / "train.jsonl", bad_rows), load_tasks(path / "heldout.jsonl", bad_rows),
                   manifest)


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
