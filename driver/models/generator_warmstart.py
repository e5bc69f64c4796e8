"""The embedded generator (`task=generator`, `model.name=tiny`): the tiny Qwen3 model, its tokenizer trained on
procedural problems and their worked solutions, warm-started briefly (supervised) on those worked solutions, so
that RL starts from a generator that is weak but not hopeless: it writes the format (one operation per line,
then `Answer: X`) and gets some problems right some of the time, so pass@1 is well below pass@16 (measured
figures: docs/generator.md).

The prompt is `core.chat.format_generator_prompt` (the problem, then `Solution:`), exactly what the rollout
engines sample from; the target is one correct worked solution (drawn among the problem's distinct ones) and
EOS. Loss: next-token cross-entropy on the solution tokens (`driver.models.sft.collate` labels), plain torch AdamW on
CPU, batches grouped by length. `tiny.warm_start.steps`, `batch_size` and `lr` apply; `target` and
`prompt_lm` are the selector's and unused here. Cached beside the base model, keyed by the warm-start config,
the problems and the base model; `generator_warm_start.json` records the losses and the time.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import random
import sys
import time
from pathlib import Path

from core.chat import generator_prompt_token_ids, format_generator_prompt

STATS_FILE = "generator_warm_start.json"
VERSION = 1  # bumped whenever the same config would train a different model


def corpus(data) -> list:
    """The text the tiny generator's tokenizer is trained on: each training problem's prompt and its worked
    solutions (the held-out problems are written the same way, so nothing they need is missing)."""
    return [f"{t.problem}\n\nSolution:\n" + "\n".join(data.worked.get(t.problem_id, ())) for t in data.train]


def data_hash(data) -> str:
    h = hashlib.sha256()
    for t in data.train:
        h.update(json.dumps([t.problem_id, t.problem, data.worked.get(t.problem_id, [])]).encode())
    return h.hexdigest()[:12]


def prepare_generator(data, model_cfg, tiny_cfg=None, progress: bool = True) -> tuple:
    """(model folder, warm-start stats or None) of the policy for `task=generator`: `model.name=tiny` builds the
    embedded generator as `tiny_cfg` (the config's `tiny:` section; None: its defaults) says, and warm-starts it
    when `tiny.warm_start.enabled`; a folder is used as it is."""
    from driver.models import registry

    if model_cfg.name != "tiny":
        return registry.resolve_model(model_cfg), None
    tiny_cfg = registry.tiny_section(tiny_cfg)
    base = registry.resolve_model(model_cfg, corpus(data), tiny_cfg)
    if not tiny_cfg.warm_start.enabled:
        return base, None
    ws = tiny_cfg.warm_start
    blob = json.dumps({"ws": dataclasses.asdict(ws), "data": data_hash(data), "base": base.name,
                       "dtype": model_cfg.dtype, "seed": tiny_cfg.seed, "version": VERSION}, sort_keys=True)
    out = base.with_name(f"{base.name}-gen-{hashlib.sha256(blob.encode()).hexdigest()[:12]}")
    if (out / STATS_FILE).exists():
        return out, json.loads((out / STATS_FILE).read_text())
    if progress:
        print(f"[prepare] generator warm-start ({ws.steps} steps on worked solutions) -> {out}", file=sys.stderr,
              flush=True)
    return out, warm_start_generator(base, data, ws, out, dtype=model_cfg.dtype, seed=tiny_cfg.seed,
                                     progress=progress)


def training_pairs(tokenizer, data) -> list:
    """(prompt ids, [solution ids + EOS for each distinct worked solution]) per training problem that has one."""
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    pairs = []
    for t in data.train:
        solutions = data.worked.get(t.problem_id)
        if solutions:
            prompt = list(generator_prompt_token_ids(tokenizer, t.problem, t.domain))
            pairs.append((prompt, [tokenizer(s, add_special_tokens=False)["input_ids"] + eos for s in solutions]))
    return pairs


def warm_start_generator(base_dir, data, ws_cfg, out_dir, dtype: str = "float32", seed: int = 0,
                         threads: int = 2, progress: bool = True) -> dict:
    """Supervised training of the model in `base_dir` on worked solutions; saved atomically to `out_dir`.
    Returns the stats written to `generator_warm_start.json`."""
    import torch
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from driver.models.sft import clipped_step, collate, length_batches, save_model_folder, torch_threads

    started = time.time()
    out_dir = Path(out_dir)
    with torch_threads(threads):
        torch.manual_seed(seed)
        tokenizer = AutoTokenizer.from_pretrained(base_dir)
        model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
        pairs = training_pairs(tokenizer, data)
        if len(pairs) < ws_cfg.batch_size:
            raise ValueError(f"{len(pairs)} training problems with worked solutions < warm-start batch size "
                             f"{ws_cfg.batch_size}")
        rng = random.Random(f"generator-warm-start-{seed}")
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        opt = torch.optim.AdamW(model.parameters(), lr=ws_cfg.lr, weight_decay=0.0)
        warmup = max(1, ws_cfg.steps // 20)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
        autocast = torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "bfloat16" else contextlib.nullcontext()
        batches = length_batches([len(p) for p, _ in pairs], ws_cfg.batch_size, rng)
        losses = []
        model.train()
        for _ in tqdm(range(ws_cfg.steps), desc="generator warm-start", disable=not progress, leave=False):
            batch = [(pairs[i][0], rng.choice(pairs[i][1])) for i in next(batches)]
            ids, mask, labels = collate(batch, pad)
            with autocast:
                loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            losses.append(clipped_step(loss, model, opt, sched))
    stats = {"steps": ws_cfg.steps, "batch_size": ws_cfg.batch_size, "lr": ws_cfg.lr, "dtype": dtype, "seed": seed,
             "problems": len(pairs), "seconds": round(time.time() - started, 1), "loss_first": losses[0],
             "loss_last10": sum(losses[-10:]) / len(losses[-10:]), "base_model": str(base_dir),
             "prompt_example": format_generator_prompt(tokenizer, data.train[0].problem, data.train[0].domain)}
    save_model_folder(model, tokenizer, base_dir, out_dir, {STATS_FILE: stats})
    return stats
