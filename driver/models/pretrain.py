"""Language-model pretraining of the tiny selector on correct worked solutions, before the warm-start.

Why. The warm-start's `prompt_lm` term trains next-token prediction on the selection prompts, where most
candidates carry a slip; a model trained that way predicts only ~11% of the result tokens of a correct
solution's lines (`7 + 5 = ` -> `12`), so it cannot tell a slipped line from a correct one, and RL taught it
to read the hedging cue only (BENCHMARKS.md, issue 7, session 6). Next-token prediction on *correct* worked
solutions of fresh procedural problems teaches the arithmetic and the copying between lines (56% of line
results exact after 600 steps of 32), with no selection labels at all: every text is a correct solution, and no
candidate is ever compared with another.

Corpus: `steps x batch_size` procedural problems (`driver.data.procedural`, candidate error rate 0, seed
`model.pretrain.seed`), each written as `Problem:\\n{problem}\\n\\nSolution:\\n{solution}\\n` + EOS, every text
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

STATS_FILE = "pretrain.json"
# Part of the cache key: bumped whenever the same config would train a different model.
PRETRAIN_VERSION = 2  # 2: held-out problems excluded by expression, not by text


def _corpus_rows(cfg) -> list:
    """`cfg.steps * cfg.batch_size` procedural problems with one solution each, slipped with probability
    `cfg.slipped_share` (no hedging). Deterministic for cfg."""
    from driver.data import procedural

    spec = procedural.ProceduralSpec(error_rate=cfg.slipped_share)
    try:
        return procedural.generate(cfg.steps * cfg.batch_size, 1, cfg.seed, spec)
    except ValueError as e:  # the generator's own hint names data.num_problems; here the count is the corpus's
        raise ValueError(f"model.pretrain: a corpus of steps x batch_size = {cfg.steps * cfg.batch_size} distinct "
                         f"problems is more than the procedural generator can make; lower model.pretrain.steps "
                         f"or model.pretrain.batch_size") from e


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
    With `position` odd (model.pretrain.solution_check): the solution as a selection prompt writes a candidate
    (`Solution i:` ... `End of solution i.`, i = position % 8, lines unmarked), then ` Check: ok` when every line
    is consistent, else ` Check: wrong`: the per-solution check, predicted where a selection prompt ends a
    candidate (core.algo.genselect.build_prompt with end lines)."""
    from driver.data.slips import mark_inconsistent_lines, slip_kind

    if position is None or position % 2 == 0:
        return f"{worked_solution_head(problem)}{mark_inconsistent_lines(solution)}\n"
    i = position % 8
    verdict = "ok" if slip_kind(solution) == "none" else "wrong"
    return f"Problem:\n{problem}\n\nSolution {i}:\n{solution.strip()}\nEnd of solution {i}. Check: {verdict}\n"


def pretraining_problems(cfg) -> frozenset:
    """Problem texts the pretraining corpus may contain (before exclusion): held-out sets built later (the
    no-cue one) drop these. Empty when pretraining is off."""
    if cfg.steps <= 0:
        return frozenset()
    return frozenset(r["problem"] for r in _corpus_rows(cfg))


def problems_of_pretrained(model_dir) -> frozenset:
    """`pretraining_problems` of the model in `model_dir`, from the settings its STATS_FILE records (empty when
    the folder holds no pretrained model): what a benchmark of that model must not test on."""
    from core.config import PretrainConfig

    stats_file = Path(model_dir) / STATS_FILE
    if not stats_file.is_file():
        return frozenset()
    stats = json.loads(stats_file.read_text())
    fields = {f.name for f in dataclasses.fields(PretrainConfig)}
    return pretraining_problems(PretrainConfig(**{k: v for k, v in stats.items() if k in fields}))


def pretrain_dir(base_dir, cfg, exclude: frozenset) -> Path:
    """Cache folder of a pretrained model: beside the base model, keyed by everything that shapes it."""
    base_dir = Path(base_dir)
    settings = dataclasses.asdict(cfg)
    if not settings["pack_tokens"]:  # added later: unpacked corpora keep the cache key they had before
        del settings["pack_tokens"]
    blob = json.dumps({"pretrain": settings, "base": base_dir.name, "version": PRETRAIN_VERSION,
                       "exclude": hashlib.sha256("\n".join(sorted(exclude)).encode()).hexdigest()}, sort_keys=True)
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


def train_lm(model, tokenizer, texts: list, cfg, seed: int, progress: bool = True) -> list:
    """`cfg.steps` AdamW steps over the shuffled texts, each used once: `cfg.batch_size` texts a step, or with
    `cfg.pack_tokens` the packed rows spread evenly over the steps (about as many tokens a step); per-step losses."""
    import torch
    from tqdm import tqdm

    from driver.models.warmstart import clipped_step

    order = list(range(len(texts)))
    random.Random(f"pretrain-{seed}").shuffle(order)
    rows = text_rows(tokenizer, [texts[i] for i in order], cfg.pack_tokens)
    per_step = max(1, round(len(rows) / cfg.steps)) if cfg.pack_tokens else cfg.batch_size
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    warmup = max(1, cfg.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
    steps = min(cfg.steps, len(rows) // per_step)
    losses = []
    model.train()
    bar = tqdm(range(steps), desc="pretrain (worked solutions)", disable=not progress, leave=False)
    for step in bar:
        ids, mask = lm_batch(tokenizer, rows[step * per_step:(step + 1) * per_step])
        loss = lm_loss(model(input_ids=ids, attention_mask=mask).logits.float(), ids, mask)
        losses.append(clipped_step(loss, model, opt, sched))
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
    return losses


def pretrain(base_dir, cfg, exclude: frozenset, out_dir, seed: int = 0, threads: int = 2,
             progress: bool = True) -> tuple:
    """Pretrain the model in `base_dir` on worked solutions and save it to `out_dir` (atomic; reused if there).

    Returns (out_dir, stats) where stats is what `pretrain.json` holds.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from driver.models.induction import freeze_if_wired
    from driver.models.warmstart import save_model_folder, torch_threads

    out_dir = Path(out_dir)
    if (out_dir / STATS_FILE).exists():
        return out_dir, json.loads((out_dir / STATS_FILE).read_text())
    t0 = time.time()
    texts = solution_texts(cfg, exclude)
    with torch_threads(threads):
        torch.manual_seed(seed)
        tokenizer = AutoTokenizer.from_pretrained(base_dir)
        model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
        freeze_if_wired(model, base_dir)
        losses = train_lm(model, tokenizer, texts, cfg, seed, progress)
    stats = {**dataclasses.asdict(cfg), "texts": len(texts), "excluded": cfg.steps * cfg.batch_size - len(texts),
             "steps_run": len(losses), "seconds": round(time.time() - t0, 1),
             "loss_first": losses[0] if losses else None,
             "loss_last10": sum(losses[-10:]) / max(1, len(losses[-10:])), "base_model": str(base_dir)}
    save_model_folder(model, tokenizer, base_dir, out_dir, {STATS_FILE: stats})
    return out_dir, stats
