"""Atomic run checkpoints and their discovery for `resume=auto`.

Layout of a run folder:
    checkpoints/step_000010/learner/      the learner's own DeepSpeed checkpoint (model, optimizer, scheduler)
    checkpoints/step_000010/driver.json   step, policy version, prompt-stream state, RNG states, counters
    checkpoints/step_000010/config.yaml   the run's config when the checkpoint was written (resume checks it)
    checkpoints/latest                    name of the newest complete checkpoint (replaced atomically)

A checkpoint is written into `step_XXXXXX.tmp/` and renamed once complete; `latest` is written to a temp
file and `os.replace`d. A run killed at any moment therefore leaves either the previous checkpoint or the
new one, never a half-written one that resume would pick up.
"""
from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Optional

import numpy as np

DRIVER_STATE = "driver.json"
CONFIG = "config.yaml"
#: Config keys (dotted prefixes) a resumed run must share with the checkpoint: they fix the dataset and its prompt
#: ids, the model (with the tiny recipe's model, seed, pretraining, warm-start and dataset settings), the learner's
#: partitioning of its optimizer state, and the curriculum's stages.
RESUME_KEYS = ("data.", "model.", "tiny.model.", "tiny.seed", "tiny.pretrain.", "tiny.warm_start.",
               "tiny.train_no_cue_share", "tiny.solution_end_line", "tiny.line_labels", "tiny.answer_labels",
               "learner.num_ranks", "learner.zero_stage", "learner.dtype", "curriculum.")
_RESUME_IGNORED = ("data.out_dir", "model.cache_dir")  # where things are cached, not what they are


class IncompatibleCheckpoint(ValueError):
    """resume= names a checkpoint written for another dataset or an incompatible config."""


def checkpoint_root(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def step_dir_name(step: int) -> str:
    return f"step_{step:06d}"


def begin(run_dir: str | Path, step: int) -> Path:
    """A fresh temporary folder for the checkpoint of `step` (a leftover one from a crash is removed)."""
    tmp = checkpoint_root(run_dir) / (step_dir_name(step) + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


def commit(run_dir: str | Path, tmp: Path, driver_state: dict, keep: int) -> Path:
    """Write the driver state (and a copy of run_dir/config.yaml), publish the folder atomically, point
    `latest` at it, prune old ones."""
    config = Path(run_dir) / CONFIG
    if config.exists():
        shutil.copyfile(config, tmp / CONFIG)
    _write_json_atomic(tmp / DRIVER_STATE, driver_state)
    final = tmp.with_name(tmp.name[: -len(".tmp")])
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _write_text_atomic(checkpoint_root(run_dir) / "latest", final.name)
    _prune(checkpoint_root(run_dir), keep)
    return final


def latest(run_dir: str | Path) -> Optional[Path]:
    """The newest complete checkpoint folder, or None."""
    pointer = checkpoint_root(run_dir) / "latest"
    if not pointer.exists():
        return None
    folder = checkpoint_root(run_dir) / pointer.read_text().strip()
    return folder if (folder / DRIVER_STATE).exists() else None


def resolve_resume(resume: str, run_dir: str | Path) -> Optional[Path]:
    """`auto`: the run folder's latest checkpoint (None for a new run); `never`: None; else a path."""
    if resume == "never":
        return None
    if resume == "auto":
        return latest(run_dir)
    path = Path(resume)
    if not (path / DRIVER_STATE).exists():
        raise FileNotFoundError(f"resume={resume!r}: no checkpoint there (missing {DRIVER_STATE})")
    return path


def check_compatible(folder: Path, cfg, train_prompt_ids) -> None:
    """Raise IncompatibleCheckpoint, naming the mismatch, unless the checkpoint in `folder` can continue with
    `cfg` and this training set: the config it recorded (config.yaml, when the checkpoint has one) agrees on
    RESUME_KEYS, and every prompt id its stream will re-issue is a training prompt of the current dataset."""
    from omegaconf import OmegaConf

    from core.config import TrainConfig, to_yaml
    from core import estimators, rewards
    from core.recipe_sections import migrate_moved_keys

    where = f"cannot resume from {folder}"
    hint = "start a new run (another run_dir, or resume=never) or restore the checkpoint's settings"
    if (Path(folder) / CONFIG).exists():
        new = flatten(OmegaConf.to_container(OmegaConf.create(to_yaml(cfg))))
        # a key the checkpoint's config lacks was added since it was written: it ran with that key's default
        old = {**flatten(OmegaConf.to_container(OmegaConf.create(to_yaml(TrainConfig())))),
               **flatten(rewards.migrate(estimators.migrate(migrate_moved_keys(OmegaConf.to_container(
                   OmegaConf.load(Path(folder) / CONFIG))))))}
        for key in sorted(set(old) | set(new)):
            if key.startswith(RESUME_KEYS) and key not in _RESUME_IGNORED and old.get(key) != new.get(key):
                raise IncompatibleCheckpoint(f"{where}: it was written with {key}={old.get(key)!r}, this run has "
                                             f"{key}={new.get(key)!r}; {hint}")
    known = set(train_prompt_ids)
    streams = load_driver_state(folder).get("stream", {}).get("streams", {})
    unknown = sorted({i for st in streams.values() for i in st.get("reissue", [])} - known)
    if unknown:
        raise IncompatibleCheckpoint(f"{where}: it was written for another dataset ({len(unknown)} of its prompts, "
                                     f"e.g. {unknown[0]!r}, are not in this run's training set); {hint}")


def flatten(tree, prefix: str = "") -> dict:
    """A nested dict as {dotted key: leaf value}."""
    if not isinstance(tree, dict):
        return {prefix[:-1]: tree}
    out = {}
    for key, value in tree.items():
        out.update(flatten(value, f"{prefix}{key}."))
    return out


def load_driver_state(folder: Path) -> dict:
    return json.loads((folder / DRIVER_STATE).read_text())


def rng_state() -> dict:
    """The driver process's Python and NumPy RNG states, JSON-serialisable."""
    np_state = np.random.get_state()
    return {"python": _listify(random.getstate()),
            "numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]]}


def set_rng_state(state: dict) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))


def _listify(value):
    return [_listify(v) for v in value] if isinstance(value, tuple) else value


def _prune(root: Path, keep: int) -> None:
    done = sorted(p for p in root.glob("step_*") if p.is_dir() and not p.name.endswith(".tmp"))
    for old in done[: max(0, len(done) - keep)]:
        shutil.rmtree(old, ignore_errors=True)


def _write_json_atomic(path: Path, data: dict) -> None:
    _write_text_atomic(path, json.dumps(data, indent=1))


def _write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
