"""A saved checkpoint of a run as a Hugging Face folder, without starting a run:

    python -m driver.export RUN_DIR [--step N] [--out DIR] [--model-dir FOLDER]

reads `RUN_DIR/checkpoints/step_NNNNNN/` (the latest by default; `--step N` another one still on disk), consolidates
the learner's DeepSpeed checkpoint (ZeRO-2 or ZeRO-3, any number of ranks) with DeepSpeed's zero_to_fp32, casts the
weights to the run's `learner.dtype` (what the learner holds) and writes, atomically, the folder `Run.finish` and
`export_every` write (default `RUN_DIR/exports/step_NNNNNN/`): config, generation config, model.safetensors and the
tokenizer files of the model folder the run started from, the prompt style serving renders prompts with
(genselect_prompt.json), and beside them the run's config.yaml and genselect_export.json (step, policy version).
transformers, `driver.serve` and `driver.evaluate` load it as they load `RUN_DIR/export`.

The model folder the run started from is recorded in each checkpoint (driver.json `model_dir`; a checkpoint written
before that was recorded falls back to summary.json's `start_model`); `--model-dir` names it when it has moved.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import sys
from pathlib import Path
from typing import Optional, Sequence

from driver import checkpoint as ckpt

log = logging.getLogger("genselect.export")
EXPORT_INFO = "genselect_export.json"
EXPORTS = "exports"


class ExportError(ValueError):
    """A checkpoint that cannot be exported as asked; the message says why and what to do."""


def exports_dir(run_dir: str | Path, step: int) -> Path:
    """Where the export of `step` goes by default: run_dir/exports/step_NNNNNN."""
    return Path(run_dir) / EXPORTS / ckpt.step_dir_name(step)


def saved_steps(run_dir: str | Path) -> list:
    """The steps whose complete checkpoint is on disk in `run_dir`, in order."""
    root = ckpt.checkpoint_root(run_dir)
    return sorted(int(p.name[len("step_"):]) for p in root.glob("step_*")
                  if p.name[len("step_"):].isdigit() and (p / ckpt.DRIVER_STATE).is_file())


def checkpoint_folder(run_dir: str | Path, step: Optional[int] = None) -> Path:
    """The checkpoint of `step` in `run_dir` (None: the latest); ExportError naming the steps on disk if absent."""
    steps = saved_steps(run_dir)
    if not steps:
        raise ExportError(f"{run_dir} holds no checkpoint (a run writes checkpoints/step_NNNNNN/ every "
                          f"checkpoint_every steps and after its last step)")
    if step is None:
        return ckpt.latest(run_dir) or ckpt.checkpoint_root(run_dir) / ckpt.step_dir_name(steps[-1])
    if step not in steps:
        raise ExportError(f"{run_dir} holds no checkpoint of step {step}; it holds steps "
                          f"{', '.join(map(str, steps))} (keep_checkpoints keeps the newest only)")
    return ckpt.checkpoint_root(run_dir) / ckpt.step_dir_name(step)


def start_model_dir(run_dir: str | Path, state: dict, model_dir: Optional[str] = None) -> Path:
    """The model folder the run started from (its config and tokenizer): `model_dir` when given, else the one the
    checkpoint recorded, else summary.json's `start_model`; ExportError when none is a model folder."""
    summary = Path(run_dir) / "summary.json"
    recorded = model_dir or state.get("model_dir") or (
        json.loads(summary.read_text()).get("start_model") if summary.is_file() else None)
    if not recorded:
        raise ExportError(f"the checkpoint does not say which model folder the run started from; name it with "
                          f"--model-dir FOLDER")
    if not (Path(recorded) / "config.json").is_file():
        raise ExportError(f"{recorded} is not a model folder (no config.json): the run started from it, but it has "
                          f"moved or been removed; name the folder with --model-dir FOLDER")
    return Path(recorded)


def run_config(run_dir: str | Path, folder: Path):
    """The TrainConfig the checkpoint in `folder` was written with (its config.yaml, else the run's)."""
    from core.config import from_yaml

    for path in (folder / ckpt.CONFIG, Path(run_dir) / ckpt.CONFIG):
        if path.is_file():
            return from_yaml(path.read_text())
    raise ExportError(f"neither {folder} nor {run_dir} holds the run's {ckpt.CONFIG}: is {run_dir} a run folder?")


def consolidated_weights(learner_dir: Path) -> dict:
    """The learner checkpoint's full weights, HF-named, fp32 (DeepSpeed's zero_to_fp32: the fp32 master weights,
    gathered over every rank's partition). Its prints and progress bars go to the log."""
    from actors.learner.learner import CKPT_TAG
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    chatter = io.StringIO()
    with contextlib.redirect_stdout(chatter), contextlib.redirect_stderr(chatter):
        state = get_fp32_state_dict_from_zero_checkpoint(str(learner_dir), tag=CKPT_TAG)
    log.info("zero_to_fp32: %s", chatter.getvalue().strip())
    prefix = "model."  # the learner's module holds the HF model as `model` (actors/learner/policy_forward.py)
    return {k[len(prefix):]: v.detach() for k, v in state.items() if k.startswith(prefix)}


def check_names(weights: dict, config, source: Path) -> None:
    """ExportError unless `weights` has exactly the tensors of the model `config` describes."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        expected = set(AutoModelForCausalLM.from_config(config).state_dict())
    missing, unexpected = sorted(expected - set(weights)), sorted(set(weights) - expected)
    if missing or unexpected:
        raise ExportError(f"the checkpoint's weights do not fit the model in {source} (missing: {missing[:3]}, "
                          f"unexpected: {unexpected[:3]}); name the folder the run started from with --model-dir")


def export_files(cfg, step: int, version: int) -> dict:
    """The files an export holds beside the model's ({name: text}): the run's config.yaml (serving and evaluation
    read the selector with its settings), genselect_export.json (step, policy version) and, for a selector, the
    prompt style its prompts were rendered with."""
    from dataclasses import asdict

    from core.algo.genselect import PROMPT_STYLE_FILE
    from core.config import to_yaml

    files = {ckpt.CONFIG: to_yaml(cfg), EXPORT_INFO: json.dumps({"step": step, "policy_version": version})}
    if cfg.task == "selector":
        from driver.data.dataset import prompt_style

        files[PROMPT_STYLE_FILE] = json.dumps(asdict(prompt_style(cfg)))
    return files


def write_files(folder: Path, files: dict) -> None:
    """Write `files` ({name: text}) into `folder`."""
    for name, text in files.items():
        (Path(folder) / name).write_text(text)


def export_checkpoint(run_dir: str | Path, step: Optional[int] = None, out: Optional[str | Path] = None,
                      model_dir: Optional[str] = None) -> Path:
    """Write the checkpoint of `step` (None: the latest) of `run_dir` as a Hugging Face folder at `out` (default
    run_dir/exports/step_NNNNNN), atomically; returns it."""
    import torch
    from transformers import AutoConfig, GenerationConfig

    from actors.learner import checkpoint_io as cio

    folder = checkpoint_folder(run_dir, step)
    state = ckpt.load_driver_state(folder)
    source = start_model_dir(run_dir, state, model_dir)
    cfg = run_config(run_dir, folder)
    dtype = torch.bfloat16 if cfg.learner.dtype == "bfloat16" else torch.float32
    config = AutoConfig.from_pretrained(source, dtype=dtype)
    generation = GenerationConfig.from_pretrained(source) if (source / "generation_config.json").is_file() \
        else GenerationConfig.from_model_config(config)
    weights = {k: v.to(dtype) for k, v in consolidated_weights(folder / "learner").items()}
    check_names(weights, config, source)
    out = Path(out) if out else exports_dir(run_dir, state["step"])
    cio.remove(cio.tmp_path(out))
    cio.write_hf_folder(cio.tmp_path(out), source, config, generation, weights,
                        tied=bool(getattr(config, "tie_word_embeddings", False)))
    write_files(cio.tmp_path(out), export_files(cfg, state["step"], state["version"]))
    cio.publish_dir(out)
    return out


def _parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m driver.export", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="a run folder (with checkpoints/)")
    parser.add_argument("--step", type=int, default=None, help="the checkpoint's step (default: the latest)")
    parser.add_argument("--out", default=None, help="the folder to write (default: RUN_DIR/exports/step_NNNNNN)")
    parser.add_argument("--model-dir", default=None, help="the model folder the run started from (default: the one "
                                                          "the checkpoint recorded)")
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    from core.env import apply_defaults

    apply_defaults()
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    if not Path(args.run_dir).is_dir():
        print(f"error: {args.run_dir} is not a folder", file=sys.stderr)
        return 2
    try:
        out = export_checkpoint(args.run_dir, args.step, args.out, args.model_dir)
    except ExportError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
