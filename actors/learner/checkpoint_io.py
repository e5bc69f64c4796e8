"""File-level helpers of the learner: atomic directories, RNG state, Hugging Face export (no DeepSpeed here).

Atomicity: a checkpoint or export is written into `<path>.tmp` and moved to `<path>` in one `rename` on
rank 0 after every rank has finished writing (the caller puts barriers around `publish_dir`). A crash
leaves either the previous complete folder or a stale `.tmp` that the next save removes; never a
half-written `<path>`. A previous `<path>` is replaced via `<path>.old` (two renames, then a delete).
"""
from __future__ import annotations

import random
import shutil
from pathlib import Path

import numpy as np
import torch

#: Files of a model folder that an export rewrites; everything else (tokenizer files, chat template,
#: genselect_model.json) is copied from the source folder unchanged.
_MODEL_FILE_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".safetensors.index.json", ".bin.index.json")
_MODEL_FILE_NAMES = ("config.json", "generation_config.json")


def tmp_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + ".tmp")


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def publish_dir(path: str | Path) -> None:
    """Move the finished `<path>.tmp` to `<path>`, replacing an existing `<path>` (rank 0 only)."""
    path = Path(path)
    old = path.with_name(path.name + ".old")
    remove(old)
    if path.exists():
        path.rename(old)
    tmp_path(path).rename(path)
    remove(old)


def rng_state() -> dict:
    """Every RNG a training step may touch (torch CPU and CUDA, numpy, random)."""
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "random": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["random"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def to_numpy(state: dict, widen: bool = True) -> dict:
    """name -> numpy array. `widen`: float tensors as float32 (bf16 widens exactly; numpy has no bfloat16).
    Else each tensor keeps its dtype and bf16 ones travel as uint16 bit patterns marked with
    `actors.weight_sync.object_store.BF16_METADATA` (half the bytes; the rollout writes them as BF16)."""
    if widen:
        return {name: t.detach().to("cpu", torch.float32).numpy() for name, t in state.items()}
    from actors.weight_sync.object_store import BF16_METADATA

    bf16 = np.dtype(np.uint16, metadata=BF16_METADATA)
    return {name: t.detach().cpu().view(torch.uint16).numpy().view(bf16) if t.dtype == torch.bfloat16
            else t.detach().cpu().numpy() for name, t in state.items()}


def write_hf_folder(out: Path, source: Path, config, generation_config, state: dict, tied: bool) -> None:
    """Write a standard HF model folder: config, one model.safetensors, and the source's other files.

    With tied embeddings `lm_head.weight` is left out (the HF convention; transformers and vLLM re-tie).
    """
    from safetensors.torch import save_file

    out.mkdir(parents=True)
    for f in Path(source).iterdir():
        if f.is_file() and f.name not in _MODEL_FILE_NAMES and not f.name.endswith(_MODEL_FILE_SUFFIXES):
            shutil.copy2(f, out / f.name)
    config.save_pretrained(out)
    if generation_config is not None:
        generation_config.save_pretrained(out)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in state.items() if not (tied and k == "lm_head.weight")}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
