"""Helpers of the supervised fine-tuning loops that write model folders (the generator's warm-start,
driver/models/generator_warmstart.py, and the embedded tiny recipe's pretraining and warm-start, tiny_recipe/):
length-bucketed batches, right-padded collation, one clipped optimizer step, a torch thread count for a block, and
an atomic model-folder write."""
from __future__ import annotations

import contextlib
import json
import random
import shutil
from pathlib import Path


def length_batches(lengths: list, batch_size: int, rng: random.Random):
    """Endless batches of indices of similar length (sorted with jitter, then shuffled batch order)."""
    if len(lengths) < batch_size:
        raise ValueError(f"{len(lengths)} training prompts < batch size {batch_size}")
    while True:
        order = sorted(range(len(lengths)), key=lambda i: lengths[i] + rng.random() * 32)
        batches = [order[i:i + batch_size] for i in range(0, len(order) - batch_size + 1, batch_size)]
        rng.shuffle(batches)
        yield from batches


def collate(pairs: list, pad_id: int):
    """Right-padded (input_ids, attention_mask, labels) for (prompt_ids, response_ids) pairs; labels are
    -100 except on response tokens. Shapes: (batch, max_len)."""
    import torch

    width = max(len(p) + len(r) for p, r in pairs)
    ids = torch.full((len(pairs), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for j, (p, r) in enumerate(pairs):
        n = len(p) + len(r)
        ids[j, :n] = torch.tensor(p + r)
        mask[j, :n] = 1
        labels[j, len(p):n] = torch.tensor(r)
    return ids, mask, labels


def clipped_step(loss, model, opt, sched) -> float:
    """Backward, clip the gradient norm to 1, step the optimizer and the schedule, zero the gradients;
    returns the loss value."""
    import torch

    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


@contextlib.contextmanager
def torch_threads(n: int):
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def save_model_folder(model, tokenizer, base_dir, out_dir, json_files: dict) -> None:
    """Write a trained model folder atomically: weights, tokenizer, the base model's `genselect_model.json`
    and `json_files` ({name: dict}), in `{out_dir}.tmp` renamed to `out_dir` once complete."""
    out_dir = Path(out_dir)
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    for extra in Path(base_dir).glob("genselect_model.json"):
        shutil.copy(extra, tmp / extra.name)
    for name, content in json_files.items():
        (tmp / name).write_text(json.dumps(content, indent=2))
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
