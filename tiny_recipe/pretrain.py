"""Language-model pretraining of the tiny selector on correct worked solutions, before the warm-start.

Why. The warm-start's `prompt_lm` term trains next-token prediction on the selection prompts, where most
candidates carry a slip; a model trained that way predicts only ~11% of the result tokens of a correct
solution's lines (`7 + 5 = ` -> `12`), so it cannot tell a slipped line from a correct one, and RL taught it
to read the hedging cue only (BENCHMARKS.md). Next-token prediction on *correct* worked
solutions of fresh procedural problems teaches the arithmetic and the copying between lines (56% of line
results exact after 600 steps of 32), with no selection labels at all: every text is a correct solution, and no
candidate is ever compared with another.

Corpus: `steps x batch_size` procedural problems (`driver.data.procedural`, candidate error rate 0, seed
`tiny.pretrain.seed`), each written as `Problem:\\n{problem}\\n\\nSolution:\\n{solution}\\n` + EOS, every text
used once. Problems whose text is in `exclude` (the held-out sets) are dropped, so held-out problems are never
seen in any training stage; `pretraining_problems` regenerates the same set for other held-out sets to
exclude. Plain torch AdamW on CPU with a linear warm-up; the result is cached beside the base model (folder keyed
by the config, the base model and the excluded set) with `pretrain.json` (loss, seconds, texts).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import time
from pathlib import Path

from core.algo.schedules import lr_multiplier
from core.config import cache_key_settings

STATS_FILE = "pretrain.json"
# Part of the cache key: bumped whenever the same config would train a different model.
PRETRAIN_VERSION = 2  # 2: held-out problems excluded by expression, not by text
# PretrainConfig keys added after models were cached, with the default that trains what was trained before them
KEYS_ADDED_LATER = {"pack_tokens": 0, "pointer_share": 0.0, "context_steps": 0, "context_batch": 4,
                    "context_lr": 1e-3, "pick_line": False, "lr_decay": "constant"}


def _corpus_rows(cfg) -> list:
    """`cfg.steps * cfg.batch_size` procedural problems with one solution each, slipped with probability
    `cfg.slipped_share` (no hedging). Deterministic for cfg."""
    from driver.data import procedural

    spec = procedural.ProceduralSpec(error_rate=cfg.slipped_share)
    try:
        return procedural.generate(cfg.steps * cfg.batch_size, 1, cfg.seed, spec)
    except ValueError as e:  # the generator's own hint names data.num_problems; here the count is the corpus's
        raise ValueError(f"tiny.pretrain: a corpus of steps x batch_size = {cfg.steps * cfg.batch_size} distinct "
                         f"problems is more than the procedural generator can make; lower tiny.pretrain.steps "
                         f"or tiny.pretrain.batch_size") from e


def solution_texts(cfg, exclude: frozenset = frozenset()) -> list:
    """The pretraining corpus: `cfg.steps * cfg.batch_size` worked solutions of procedural problems (correct,
    or with `cfg.slipped_share` of them slipped and every inconsistent line marked `?` right after its result),
    minus those that compute a problem in `exclude` (compared by `procedural.problem_key`: the same expression
    under another template is excluded too). Deterministic for (cfg, exclude)."""
    from driver.data.procedural import problem_key

    excluded = {problem_key(p) for p in exclude}
    return [corpus_text(r["problem"], r["candidates"][0], i if cfg.solution_check else None)
            for i, r in enumerate(_corpus_rows(cfg)) if problem_key(r["problem"]) not in excluded]


def worked_solution_head(problem: str) -> str:
    """What precedes a solution in the corpus's usual texts (`Problem:` ... `Solution:`): benchmarks that score
    a solution as the pretrained model read them render it after this."""
    return f"Problem:\n{problem}\n\nSolution:\n"


def corpus_text(problem: str, solution: str, position: int | None = None) -> str:
    """One pretraining text. Usually `Problem:` ... `Solution:` ... with every inconsistent line marked `?`.
    With `position` odd (tiny.pretrain.solution_check): the solution as a selection prompt writes a candidate
    (`Solution i:` ... `End of solution i.`, i = position % 8, lines unmarked), then ` Check: ok` when every line
    is consistent, else ` Check: wrong`: the per-solution check, predicted where a selection prompt ends a
    candidate (core.algo.genselect.build_prompt with end lines)."""
    from driver.data.slips import mark_inconsistent_lines, slip_kind

    if position is None or position % 2 == 0:
        return f"{worked_solution_head(problem)}{mark_inconsistent_lines(solution)}\n"
    i = position % 8
    verdict = "ok" if slip_kind(solution) == "none" else "wrong"
    return f"Problem:\n{problem}\n\nSolution {i}:\n{solution.strip()}\nEnd of solution {i}. Check: {verdict}\n"


def context_corpus_cfg(cfg):
    """The settings of the second stage's worked solutions (`cfg.context_steps` x `cfg.context_batch` fresh correct
    solutions, seed `cfg.seed + 1`), in the form `solution_texts` reads; None when the stage is off."""
    if cfg.context_steps <= 0:
        return None
    return dataclasses.replace(cfg, steps=cfg.context_steps, batch_size=cfg.context_batch, seed=cfg.seed + 1,
                               slipped_share=0.0, solution_check=False, pack_tokens=0)


def pretraining_problems(cfg) -> frozenset:
    """Problem texts the pretraining corpus may contain (before exclusion), both stages: held-out sets built later
    (the no-cue one) drop these. Empty when pretraining is off."""
    if cfg.steps <= 0:
        return frozenset()
    stages = [cfg] + ([context_corpus_cfg(cfg)] if cfg.context_steps > 0 else [])
    return frozenset(r["problem"] for stage in stages for r in _corpus_rows(stage))


def problems_of_pretrained(model_dir) -> frozenset:
    """`pretraining_problems` of the model in `model_dir`, from the settings its STATS_FILE records (empty when
    the folder holds no pretrained model): what a benchmark of that model must not test on."""
    from tiny_recipe.config import PretrainConfig

    stats_file = Path(model_dir) / STATS_FILE
    if not stats_file.is_file():
        return frozenset()
    stats = json.loads(stats_file.read_text())
    fields = {f.name for f in dataclasses.fields(PretrainConfig)}
    return pretraining_problems(PretrainConfig(**{k: v for k, v in stats.items() if k in fields}))


def problems_seen(folder):
    """The `problems_seen` hook a tiny model names (driver/models/hooks.py): `problems_of_pretrained` of a
    pretrained model's folder; None for a folder without STATS_FILE (it records no pretraining corpus)."""
    return problems_of_pretrained(folder) if (Path(folder) / STATS_FILE).is_file() else None


def reads_selection_prompts(cfg) -> bool:
    """Whether the pretraining reads training selection prompts (context or pointer steps)."""
    return cfg.context_steps > 0 or cfg.pointer_share > 0


def pretrain_dir(base_dir, cfg, exclude: frozenset, dataset_hash: str = "") -> Path:
    """Cache folder of a pretrained model: beside the base model, keyed by everything that shapes it (the dataset
    whose training prompts it reads, when it reads any)."""
    base_dir = Path(base_dir)
    settings = cache_key_settings(cfg, KEYS_ADDED_LATER)  # at their defaults, models keep the key they had before
    key = {"pretrain": settings, "base": base_dir.name, "version": PRETRAIN_VERSION,
           "exclude": hashlib.sha256("\n".join(sorted(exclude)).encode()).hexdigest()}
    if reads_selection_prompts(cfg):
        key["dataset"] = dataset_hash
    blob = json.dumps(key, sort_keys=True)
    return base_dir.with_name(f"{base_dir.name}-pt-{hashlib.sha256(blob.encode()).hexdigest()[:12]}")


def text_rows(tokenizer, texts: list, pack_tokens: int = 0) -> list:
    """Token rows of `texts`, each text followed by EOS: one text per row, or with `pack_tokens` > 0 consecutive
    texts packed into rows of at most that many tokens (`pack`)."""
    rows = [tokenizer(t)["input_ids"] + [tokenizer.eos_token_id] for t in texts]
    return pack(rows, pack_tokens) if pack_tokens else rows


def pack(token_lists: list, width: int) -> list:
    """Greedy packing: consecutive token lists joined into rows of at most `width` tokens; a new row starts when
    the next list would not fit (a list longer than `width` becomes a row of its own, cut to `width`)."""
    rows, row = [], []
    for tokens in token_lists:
        if row and len(row) + len(tokens) > width:
            rows.append(row)
            row = []
        row = row + list(tokens)
    if row:
        rows.append(row)
    return [r[:width] for r in rows]


def lm_batch(tokenizer, rows: list):
    """Right-padded (input_ids, attention_mask) of token `rows`. Shapes: (len(rows), longest)."""
    import torch

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids = torch.full((len(rows), max(map(len, rows))), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for j, s in enumerate(rows):
        ids[j, :len(s)] = torch.tensor(s)
        mask[j, :len(s)] = 1
    return ids, mask


def lm_loss(logits, ids, mask):
    """Mean next-token cross-entropy over the real (unpadded) tokens. Shapes: logits (B, T, V), ids/mask (B, T)."""
    import torch

    nll = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
    inside = mask[:, 1:].float()
    return (nll * inside).sum() / inside.sum().clamp(min=1)


def solution_batches(tokenizer, texts: list, cfg, seed: int) -> list:
    """The first stage's worked-solution batches, each a list of `selection_rows` rows: the shuffled texts, each
    used once, `cfg.batch_size` a step, or with `cfg.pack_tokens` the packed rows spread evenly over the steps
    (about as many tokens a step); at most `cfg.steps` batches."""
    from tiny_recipe.selection_rows import solution_row

    order = list(range(len(texts)))
    random.Random(f"pretrain-{seed}").shuffle(order)
    rows = [solution_row(r) for r in text_rows(tokenizer, [texts[i] for i in order], cfg.pack_tokens)]
    per_step = max(1, round(len(rows) / cfg.steps)) if cfg.pack_tokens else cfg.batch_size
    return [rows[k * per_step:(k + 1) * per_step] for k in range(min(cfg.steps, len(rows) // per_step))]


def with_pointer_steps(tokenizer, batches: list, kind: str, train_tasks: list, cfg, seed: int) -> list:
    """[(kind, rows)]: `batches` in order, each step replaced by a pointer step (`cfg.context_batch` pointer rows of
    random training tasks) with probability `cfg.pointer_share` (drawn from `seed`); as many steps as batches."""
    from tiny_recipe.selection_rows import pointer_row

    rng = random.Random(f"pointer-{seed}")
    steps = []
    for rows in batches:
        if cfg.pointer_share > 0 and rng.random() < cfg.pointer_share:
            rows, kind_here = [pointer_row(tokenizer, rng.choice(train_tasks), rng)
                               for _ in range(cfg.context_batch)], "pointer"
        else:
            kind_here = kind
        steps.append((kind_here, rows))
    return steps


def context_batches(tokenizer, texts: list, train_tasks: list, cfg, seed: int) -> list:
    """The second stage's batches: `cfg.context_batch` rows a step, each a random training task's prompt (with
    `cfg.pick_line`, then a blank line and `Pick: #g`, g uniform over its indices) and then a worked solution of
    `texts` (each used once); at most `cfg.context_steps` batches."""
    from tiny_recipe.selection_rows import context_row, with_pick_line

    rng = random.Random(f"context-{seed}")
    tasks = [rng.choice(train_tasks) for _ in texts]
    befores = [with_pick_line(t, rng) if cfg.pick_line else t.prompt for t in tasks]
    rows = [context_row(tokenizer, before, text) for before, text in zip(befores, texts)]
    k = cfg.context_batch
    return [rows[i * k:(i + 1) * k] for i in range(min(cfg.context_steps, len(rows) // k))]


def lr_factor(step: int, total: int, decay: str = "constant") -> float:
    """The multiplier of the base learning rate at optimizer step `step` (0-based) of `total`: a linear warm-up over
    the first 5% of the steps, then 1 ('constant') or a cosine from 1 down to 0 at the last step ('cosine'),
    `core.algo.schedules.lr_multiplier` with `zero_at_last_step`."""
    if decay not in ("constant", "cosine"):
        raise ValueError(f"tiny.pretrain.lr_decay must be 'constant' or 'cosine', not {decay!r}")
    return lr_multiplier(step, decay, max(1, total // 20), total, zero_at_last_step=True)


def train_steps(model, tokenizer, steps: list, lr: float, desc: str, progress: bool = True,
                decay: str = "constant") -> dict:
    """AdamW (the schedule of `lr_factor`: warm-up, then constant or cosine-decayed `lr`) over `steps`
    [(kind, rows)], the loss on each row's target tokens; returns {kind: per-step losses}."""
    import torch
    from tqdm import tqdm

    from driver.models.sft import clipped_step, collate

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    total = len(steps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, total, decay))
    losses: dict = {}
    model.train()
    bar = tqdm(steps, desc=desc, disable=not progress, leave=False)
    for kind, rows in bar:
        ids, attention, labels = collate(rows, pad)
        loss = lm_loss(model(input_ids=ids, attention_mask=attention).logits.float(), ids, labels != -100)
        losses.setdefault(kind, []).append(clipped_step(loss, model, opt, sched))
        bar.set_postfix(loss=f"{losses[kind][-1]:.3f}", kind=kind)
    return losses


def train_lm(model, tokenizer, texts: list, cfg, seed: int, progress: bool = True, train_tasks: list = (),
             exclude: frozenset = frozenset()) -> dict:
    """Both stages: `cfg.steps` steps of worked solutions at `cfg.lr` (`cfg.pointer_share` of them pointer steps),
    then `cfg.context_steps` steps of worked solutions after training prompts at `cfg.context_lr` (pointer steps
    mixed in alike); `texts`: the first stage's corpus; `exclude`: problems the second stage's corpus leaves out.
    Returns {stage: {kind: per-step losses}}."""
    first = with_pointer_steps(tokenizer, solution_batches(tokenizer, texts, cfg, seed), "solution", train_tasks,
                               cfg, seed)
    out = {"solutions": train_steps(model, tokenizer, first, cfg.lr, "pretrain (worked solutions)", progress,
                                    cfg.lr_decay)}
    if cfg.context_steps > 0:
        more = solution_texts(context_corpus_cfg(cfg), exclude)
        second = with_pointer_steps(tokenizer, context_batches(tokenizer, more, train_tasks, cfg, seed), "context",
                                    train_tasks, cfg, seed + 1)
        out["context"] = train_steps(model, tokenizer, second, cfg.context_lr,
                                     "pretrain (solutions after prompts)", progress, cfg.lr_decay)
    return out


def pretrain(base_dir, cfg, exclude: frozenset, out_dir, seed: int = 0, threads: int = 2,
             progress: bool = True, train_tasks: list = ()) -> tuple:
    """Pretrain the model in `base_dir` on worked solutions and save it to `out_dir` (atomic; reused if there).
    `train_tasks`: the training SelectionTasks whose prompts context and pointer rows read (needed when the config
    asks for either). A wired induction circuit stays frozen (`induction.freeze_if_wired`).

    Returns (out_dir, stats) where stats is what `pretrain.json` holds.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tiny_recipe.induction import freeze_if_wired
    from driver.models.sft import save_model_folder, torch_threads

    out_dir = Path(out_dir)
    if (out_dir / STATS_FILE).exists():
        return out_dir, json.loads((out_dir / STATS_FILE).read_text())
    if reads_selection_prompts(cfg) and not train_tasks:
        raise ValueError("tiny.pretrain: context and pointer steps read training selection prompts; none were given")
    t0 = time.time()
    texts = solution_texts(cfg, exclude)
    with torch_threads(threads):
        torch.manual_seed(seed)
        tokenizer = AutoTokenizer.from_pretrained(base_dir)
        model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
        freeze_if_wired(model, base_dir)
        stages = train_lm(model, tokenizer, texts, cfg, seed, progress, list(train_tasks), exclude)
    solutions = stages["solutions"].get("solution", [])
    stats = {**dataclasses.asdict(cfg), "texts": len(texts), "excluded": cfg.steps * cfg.batch_size - len(texts),
             "steps_run": sum(map(len, stages["solutions"].values())), "seconds": round(time.time() - t0, 1),
             "loss_first": solutions[0] if solutions else None,
             "loss_last10": sum(solutions[-10:]) / max(1, len(solutions[-10:])), "base_model": str(base_dir),
             "steps_by_kind": {f"{stage}/{kind}": len(v) for stage, kinds in stages.items() for kind, v in kinds.items()},
             "loss_last20_by_kind": {f"{stage}/{kind}": sum(v[-20:]) / len(v[-20:])
                                     for stage, kinds in stages.items() for kind, v in kinds.items() if v}}
    save_model_folder(model, tokenizer, base_dir, out_dir, {STATS_FILE: stats})
    return out_dir, stats
