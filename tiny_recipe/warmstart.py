"""Short supervised warm-start of the selector, so RL starts from a model that emits `Judgment: IDX`.

Targets (`WarmStartConfig.target`):

* `format`: the response's format tokens are learned as usual, and the index token is trained towards the
  *uniform* distribution over the prompt's valid indices 0..N-1 (cross-entropy against that soft target,
  exact rather than one sampled index per prompt). It teaches the output format only, so RL starts near
  random@N and every gain above that is RL's; and RL explores every candidate from the start (a sampled
  random target left the tiny model putting half its mass on indices >= N, which score 0). Indices that
  are more than one token (N > 10 with per-digit tokenizers) fall back to one sampled index.
* `oracle`: the response names a correct candidate (one drawn uniformly among the correct ones). A stronger
  start; also the learnability check of a dataset: a tiny model trained this way must beat majority@N.
* `pointer` (the solve-then-point tiny model, `tiny.model.response=solve_point`): the target is the model's own
  greedy solution of each prompt, cut after its first `Answer: X` line, then ` #k`, a newline and EOS, the index
  token trained towards uniform: the format only (write the pointer, then stop), not which candidate to name, so
  RL starts near random@N (`pointer_pairs`).
* `pick_point` (`tiny.model.response=pick_point`): the pick towards uniform, then the problem's head and the model's
  own greedy solution after it, and the pointer towards a label-free rule (a candidate stating the model's answer,
  else the pick): tiny_recipe/pick_point_start.py.

Loss: next-token cross-entropy on the response tokens (`Judgment: IDX` + EOS), plus `prompt_lm` x the mean
next-token loss over the prompt's own tokens (`prompt_lm_loss`; 0 = response only), the prompt formatted
by `core.chat.format_prompt` exactly as rollout and learner format it. Plain torch AdamW on CPU,
fp32 weights with bf16 autocast when `dtype == "bfloat16"`; batches are grouped by length to waste little
compute on padding. The result is cached (folder keyed by warm-start config + dataset hash + base model)
and `warm_start.json` beside the weights records the held-out parse rate and selection accuracy under
greedy decoding (transformers `generate`), next to majority@N and random@N on the same prompts (`heldout: null` when
a training run made it: its step-0 evaluation measures the same weights through vLLM).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import random
import time
from pathlib import Path

from core.algo.genselect import parse_judgment, render_judgment
from core.chat import full_response, index_token_ids, prompt_token_ids, response_token_ids
from core.config import cache_key_settings
from driver.models.sft import clipped_step, collate, length_batches, save_model_folder, torch_threads
from tiny_recipe.greedy import first_answer, greedy_continuations, with_pointer

STATS_FILE = "warm_start.json"
# Part of the cache key: bumped whenever the same config would train a different model (2 = uniform index, 3 = answer prefix).
WARM_START_VERSION = 3


def warm_start_dir(base_dir, ws_cfg, dataset_hash: str, dtype: str, seed: int) -> Path:
    """Cache folder of a warm-started model: beside the base model, keyed by everything that shapes it."""
    base_dir = Path(base_dir)
    ws = cache_key_settings(ws_cfg, {"pool": 0})  # `pool` at its default stays out of the key
    blob = json.dumps({"ws": ws, "data": dataset_hash, "base": base_dir.name,
                       "dtype": dtype, "seed": seed, "version": WARM_START_VERSION}, sort_keys=True)
    return base_dir.with_name(f"{base_dir.name}-ws-{hashlib.sha256(blob.encode()).hexdigest()[:12]}")


def pick_target(task, target: str, rng: random.Random) -> int:
    """The index the response names: uniform over candidates ('format') or over correct ones ('oracle')."""
    if target == "format":
        return rng.randrange(task.num_candidates)
    if target == "oracle":
        return rng.choice([i for i, ok in enumerate(task.correct) if ok])
    raise ValueError(f"warm-start target must be 'format' or 'oracle', got {target!r}")


POINTER_TOKENS = 96  # new tokens a solve-then-point response may take (a worked solution and its pointer)
# new tokens the held-out evaluation of a warm-started model may generate: a pick-then-point response also writes its
# pick and restates the problem before the solution
EVAL_TOKENS = {"pointer": POINTER_TOKENS, "pick_point": POINTER_TOKENS + 64}


def pointer_pairs(model, tokenizer, tasks: list, rng: random.Random, dtype: str = "float32") -> list:
    """[(task index, prompt ids, target ids)] of the `pointer` warm-start. Target: the model's own greedy solution of
    the task's prompt, cut after its first `Answer: X` line, then ` #k`, a newline and EOS, k drawn uniformly (the
    loss trains the index towards uniform anyway). Two measured choices: the model's own solution is part of the
    target (loss near 0, an anchor: with the solution as context only, the uniform index target raised single digits
    everywhere and the model's arithmetic fell apart within 100 steps, even at lr 1e-4 with the embedding frozen); and
    the newline before EOS, as the pretraining's answer lines end (an EOS straight after the index started at ~17 nats
    and taught the model to stop two tokens into its solution). Tasks whose solution has no answer line are left
    out."""
    prompts = [prompt_token_ids(tokenizer, t.prompt) for t in tasks]
    pairs = []
    for i, text in enumerate(greedy_continuations(model, tokenizer, prompts, POINTER_TOKENS, dtype=dtype)):
        answered = first_answer(text)
        pointed = answered and with_pointer(tokenizer, answered[0], rng.randrange(tasks[i].num_candidates))
        if pointed:
            pairs.append((i, prompts[i], pointed[1] + [tokenizer.eos_token_id]))
    return pairs


def train_steps(model, tokenizer, tasks: list, ws_cfg, dtype: str, seed: int, progress: bool = True) -> list:
    """Run `ws_cfg.steps` AdamW steps on `tasks`; returns the per-step losses."""
    import torch
    from tqdm import tqdm

    rng = random.Random(f"warm-start-{seed}")
    if ws_cfg.target == "pick_point":
        return pick_point_steps(model, tokenizer, tasks, ws_cfg, dtype, rng, progress)
    fixed = None
    if ws_cfg.target == "pointer":  # fixed pairs: the prompt, then the model's own solution and its pointer
        pool = rng.sample(tasks, pool_size(ws_cfg, len(tasks)))
        fixed = pointer_pairs(model, tokenizer, pool, rng, dtype)
        if len(fixed) < ws_cfg.batch_size:
            raise ValueError(f"tiny.warm_start.target=pointer: only {len(fixed)} of {len(pool)} greedy solutions "
                             "wrote an `Answer:` line; pretrain the model on worked solutions first (tiny.pretrain)")
        tasks = [pool[i] for i, _, _ in fixed]
    prompts = [c for _, c, _ in fixed] if fixed else [prompt_token_ids(tokenizer, t.prompt) for t in tasks]
    responses = {}
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    opt = torch.optim.AdamW(model.parameters(), lr=ws_cfg.lr, weight_decay=0.0)
    warmup = max(1, ws_cfg.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
    autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "bfloat16" else contextlib.nullcontext())
    batches = length_batches([len(p) for p in prompts], ws_cfg.batch_size, rng)
    losses = []
    model.train()
    bar = tqdm(range(ws_cfg.steps), desc=f"warm-start ({ws_cfg.target})", disable=not progress, leave=False)
    index_ids = index_token_ids(tokenizer, 10)
    for _ in bar:
        pairs, uniform_over = [], []
        for i in next(batches):
            if fixed:
                pairs.append((prompts[i], fixed[i][2]))
            else:
                idx = pick_target(tasks[i], ws_cfg.target, rng)
                if idx not in responses:
                    responses[idx] = response_token_ids(tokenizer, render_judgment(idx))
                pairs.append((prompts[i], responses[idx]))
            soft = ws_cfg.target != "oracle" and index_ids is not None and tasks[i].num_candidates <= 10
            uniform_over.append(tasks[i].num_candidates if soft else 0)
        ids, mask, labels = collate(pairs, pad)
        with autocast:
            logits = model(input_ids=ids, attention_mask=mask).logits
            loss = response_loss(logits.float(), labels, uniform_over, index_ids)
            if ws_cfg.prompt_lm > 0:
                loss = loss + ws_cfg.prompt_lm * prompt_lm_loss(logits.float(), ids, [len(p) for p, _ in pairs])
        losses.append(clipped_step(loss, model, opt, sched))
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
    return losses


def pick_point_steps(model, tokenizer, tasks: list, ws_cfg, dtype: str, rng: random.Random,
                     progress: bool = True) -> list:
    """`train_steps` of the `pick_point` target (tiny_recipe/pick_point_start.py): fixed rows of the prompt, a
    random pick, the model's own solution after it and the pointer, with the pick and the pointer trained towards
    their label-free soft targets. Returns the per-step losses."""
    import torch
    from tqdm import tqdm

    from tiny_recipe.pick_point_start import pick_point_rows

    pool = rng.sample(tasks, pool_size(ws_cfg, len(tasks)))
    rows = pick_point_rows(model, tokenizer, pool, rng, dtype, pointer=ws_cfg.pointer)
    if len(rows) < ws_cfg.batch_size:
        raise ValueError(f"tiny.warm_start.target=pick_point: only {len(rows)} of {len(pool)} greedy solutions wrote "
                         "an `Answer:` line; pretrain the model on worked solutions first (tiny.pretrain)")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    opt = torch.optim.AdamW(model.parameters(), lr=ws_cfg.lr, weight_decay=0.0)
    warmup = max(1, ws_cfg.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
    autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "bfloat16" else contextlib.nullcontext())
    batches = length_batches([len(p) + len(r) for _, p, r, _ in rows], ws_cfg.batch_size, rng)
    losses = []
    model.train()
    for _ in tqdm(range(ws_cfg.steps), desc="warm-start (pick_point)", disable=not progress, leave=False):
        chosen = [rows[i] for i in next(batches)]
        ids, mask, labels = collate([(p, r) for _, p, r, _ in chosen], pad)
        with autocast:
            logits = model(input_ids=ids, attention_mask=mask).logits
            # a row's soft targets name response offsets; the position predicting offset o is len(prompt) + o - 1
            loss = soft_target_loss(logits.float(), labels, [[(len(p) + o - 1, spread) for o, spread in soft]
                                                             for _, p, _, soft in chosen])
        losses.append(clipped_step(loss, model, opt, sched))
    return losses


def pool_size(ws_cfg, available: int) -> int:
    """Training prompts whose rows the pointer and pick_point targets build: `ws_cfg.pool`, or steps x batch_size
    when 0; at most `available`."""
    return min(available, ws_cfg.pool or ws_cfg.steps * ws_cfg.batch_size)


def prompt_lm_loss(logits, ids, prompt_lengths: list):
    """Mean next-token cross-entropy over the prompt tokens (position t predicts token t+1 while t+1 is
    still inside the prompt). Shapes: logits (B, T, V), ids (B, T); prompt_lengths[j] tokens of row j."""
    import torch

    width = ids.shape[1]
    inside = torch.arange(width - 1).unsqueeze(0) + 1 < torch.tensor(prompt_lengths).unsqueeze(1)
    nll = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
    return (nll * inside).sum() / inside.sum().clamp(min=1)


def response_loss(logits, labels, uniform_over: list, index_ids):
    """Mean next-token cross-entropy over response tokens, where row j with `uniform_over[j] = N > 0` has
    its index token (the last index token of its response) trained towards uniform over `index_ids[:N]`.

    Shapes: logits (B, T, V), labels (B, T) with -100 outside the response.
    """
    import torch

    target = labels[:, 1:]
    soft = [[] for _ in uniform_over]
    for j, n in enumerate(uniform_over):
        if n > 0:
            positions = (target[j] != -100).nonzero().flatten()
            is_index = torch.isin(target[j, positions], torch.tensor(index_ids))
            soft[j] = [(int(positions[is_index.nonzero().flatten()[-1]]), index_ids[:n])]  # the last index written
    return soft_target_loss(logits, labels, soft)


def soft_target_loss(logits, labels, soft: list):
    """Mean next-token cross-entropy over the response tokens, where each (position t, token ids) of `soft[j]`
    trains row j's next token at t (the token at t + 1) towards uniform over those ids instead of the token written.

    Shapes: logits (B, T, V), labels (B, T) with -100 outside the response; t indexes positions 0..T-2.
    """
    logp = logits[:, :-1].log_softmax(-1)
    target = labels[:, 1:]
    mask = target != -100
    token_nll = -logp.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    total, count = logp.new_zeros(()), 0
    for j, row_soft in enumerate(soft):
        positions = mask[j].nonzero().flatten()
        for at, spread in row_soft:
            total = total - logp[j, at, spread].mean()
            positions = positions[positions != at]
        total = total + token_nll[j, positions].sum()
        count += len(positions) + len(row_soft)
    return total / max(count, 1)


def evaluate_selector(model, tokenizer, tasks: list, batch_size: int = 16, max_new_tokens: int = 8,
                      dtype: str = "float32") -> dict:
    """Greedy-decode a judgment for each task; parse rate, selection accuracy, majority@N, random@N."""
    from driver.data.builder import summarize

    prompts = [prompt_token_ids(tokenizer, t.prompt) for t in tasks]
    texts = greedy_continuations(model, tokenizer, prompts, max_new_tokens, batch_size, dtype)
    parsed = correct = 0
    for t, text in zip(tasks, texts):
        judgment = parse_judgment(full_response(tokenizer, text), t.num_candidates)
        parsed += judgment.ok
        correct += judgment.ok and t.correct[judgment.index]
    s = summarize(tasks)
    n = max(1, len(tasks))
    return {"prompts": len(tasks), "parse_rate": parsed / n, "accuracy": correct / n,
            "majority_at_n": s.majority_at_n, "random_at_n": s.random_at_n}


def warm_start_tasks(train_tasks: list, ws_cfg) -> list:
    """The training prompts the warm-start reads: those with at most `ws_cfg.max_candidates` candidates (0: all)."""
    cap = ws_cfg.max_candidates
    kept = [t for t in train_tasks if not cap or t.num_candidates <= cap]
    if not kept:
        raise ValueError(f"tiny.warm_start.max_candidates={cap}: no training prompt has that few candidates")
    return kept


def warm_start(base_dir, train_tasks: list, heldout_tasks: list, ws_cfg, out_dir, dtype: str = "float32",
               seed: int = 0, eval_prompts: int = 200, threads: int = 2, progress: bool = True) -> tuple:
    """Warm-start the model in `base_dir` and save it to `out_dir` (atomic; reused if already there).

    Returns (out_dir, stats) where stats is what `warm_start.json` holds.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tiny_recipe.induction import freeze_if_wired

    out_dir = Path(out_dir)
    if (out_dir / STATS_FILE).exists():
        return out_dir, json.loads((out_dir / STATS_FILE).read_text())
    t0 = time.time()
    with torch_threads(threads):
        torch.manual_seed(seed)
        tokenizer = AutoTokenizer.from_pretrained(base_dir)
        model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
        freeze_if_wired(model, base_dir)
        losses = train_steps(model, tokenizer, warm_start_tasks(train_tasks, ws_cfg), ws_cfg, dtype, seed, progress)
        train_seconds = time.time() - t0
        heldout = None  # eval_prompts=0: not evaluated here (the training run's step-0 evaluation measures it)
        if eval_prompts > 0:
            held = random.Random(f"ws-eval-{seed}").sample(heldout_tasks, min(eval_prompts, len(heldout_tasks)))
            heldout = evaluate_selector(model, tokenizer, held, dtype=dtype,
                                        max_new_tokens=EVAL_TOKENS.get(ws_cfg.target, 8))
    stats = {"target": ws_cfg.target, "steps": ws_cfg.steps, "batch_size": ws_cfg.batch_size, "lr": ws_cfg.lr,
             "dtype": dtype, "seed": seed, "threads": threads, "train_seconds": round(train_seconds, 1),
             "seconds": round(time.time() - t0, 1), "loss_first": losses[0] if losses else None,
             "loss_last10": sum(losses[-10:]) / max(1, len(losses[-10:])), "heldout": heldout,
             "base_model": str(base_dir)}
    save_model_folder(model, tokenizer, base_dir, out_dir, {STATS_FILE: stats})
    return out_dir, stats

