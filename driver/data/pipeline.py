"""From a DataConfig to a versioned dataset folder: read -> label -> filter -> split -> prompts -> budget.

The ordering problem: the token budget needs the tokenizer, and the tiny model's tokenizer is trained on
the task text. So prompts are built first (they do not need a tokenizer), the tokenizer is obtained from
their text (`TokenizerProvider.load(corpus)`: trains the tiny tokenizer, or loads a pretrained one), and
only then are prompts counted and the over-budget ones dropped. The dataset hash includes the provider's
`key`, so a dataset budgeted with one tokenizer is never reused for another.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Protocol

from core.algo.genselect import render_judgment
from core.label_functions import label_name, label_params
from driver.data import builder, dataset, generated, sources
from driver.data.labeling import label_problems
from driver.data.problem import DataError


class TokenizerProvider(Protocol):
    """Where the budget's tokenizer comes from. `key` identifies it (it goes into the dataset hash);
    `load(corpus)` returns (tokenizer, description dict); `corpus` is the train prompts' text. An optional
    `context_length()` gives the positions the model reads (None: unknown); a budget above it is refused."""
    key: str

    def load(self, corpus: list): ...


def check_budget(cfg, provider) -> None:
    """Refuse a token budget the model cannot read, before anything is built (DataError, one line)."""
    context = getattr(provider, "context_length", None)
    positions = context() if callable(context) else None
    if positions and cfg.max_prompt_tokens > positions:
        raise DataError(f"data.max_prompt_tokens={cfg.max_prompt_tokens} exceeds the model's context of "
                        f"{positions} positions: prompts that long could not be read; lower the budget")


@dataclass
class BuildResult:
    path: Path
    manifest: dict
    cached: bool


def _say(progress: bool, message: str) -> None:
    if progress:
        print(f"[synth] {message}", file=sys.stderr, flush=True)


def tokenizer_corpus(train_tasks: list) -> list:
    """Text a locally trained tokenizer (and model) learns from: every train prompt as a model without a
    chat template reads it, and the judgment for every index."""
    from core.chat import SEPARATOR

    return [t.prompt + SEPARATOR for t in train_tasks] + [render_judgment(i) for i in range(16)]


def build_dataset(cfg, provider: TokenizerProvider, format_fn: Optional[Callable] = None, sandbox_cfg=None,
                  progress: bool = True, sampler_factory: Optional[Callable] = None) -> BuildResult:
    """Build (or reuse) the dataset of `cfg` (a DataConfig, or `driver.data.dataset.settings(data_cfg, recipe)`: with
    the recipe's dataset settings); prompts are counted as `format_fn(tokenizer, text)`
    (the chat formatting the model will see; default: the text itself). `sampler_factory()`: a context
    manager giving the generator's sampler (`data.source=model` only; entered only when something is left to
    sample, e.g. `driver.data.generated.RaySampler`); its samples are appended, chunk by chunk, to
    `{dataset folder}.samples.jsonl` beside the dataset, so an interrupted build resumes, and the file is
    removed once the dataset is written."""
    cfg = dataset.settings(cfg)  # a DataConfig alone: the recipe's dataset settings at their defaults
    from_model = cfg.source == "model"  # candidates sampled by a generator (driver.data.generated)
    if from_model:
        generated.check_model_source(cfg)
    check_budget(cfg, provider)
    versions = generated.model_source_versions(cfg) if from_model else sources.source_versions(cfg)
    key = dataset.dataset_key(cfg, versions, provider.key)
    path = dataset.dataset_dir(cfg, key)
    if dataset.is_complete(path):
        _say(progress, f"dataset {path} is up to date (cached)")
        return BuildResult(path, dataset.load_dataset(path).manifest, True)
    t0 = time.time()
    _say(progress, f"reading problems from source {cfg.source!r}")
    samples_cache = path.with_name(path.name + ".samples.jsonl")  # the model source's resumable samples
    src = (generated.load_model_source(cfg, sampler_factory, progress, samples_cache) if from_model
           else sources.load_problems(cfg))
    _say(progress, f"{src.rows_read} rows: {len(src.problems)} problems, {src.bad_rows.count} bad rows, "
                   f"{src.rows_over_cap} over data.max_rows; labeling candidates")
    labeled, label_stats = label_problems(src.problems, sandbox_cfg=sandbox_cfg,
                                          label_function=label_name(cfg.label_function),
                                          label_params=label_params(cfg.label_function))
    if "generator" in src.info:
        src.info["generator"]["pass_rates"] = generated.pass_rates(labeled, cfg.candidates_per_problem)
    stats = builder.BuildStats()
    kept = builder.filter_problems(labeled, cfg.max_correct_fraction, cfg.min_candidates,
                                   cfg.max_candidate_chars, stats)
    train_p, held_p = builder.split_by_problem(kept, cfg.heldout_fraction, cfg.seed)
    train_p = builder.without_cue(train_p, cfg.train_no_cue_share, cfg.seed)  # training side only
    train = builder.build_all(train_p, cfg, "train", stats, max_candidates=cfg.train_max_candidates)
    held = builder.build_all(held_p, cfg, "heldout", stats)
    _say(progress, f"{len(kept)} problems kept, {len(train) + len(held)} prompts; loading tokenizer")
    fmt = format_fn or (lambda tok, text: text)
    corpus = tokenizer_corpus(train)
    tokenizer, tok_info = provider.load(corpus)

    def count(text: str) -> int:
        return len(tokenizer(fmt(tokenizer, text), add_special_tokens=False)["input_ids"])

    lengths: dict = {}
    drawn = {t.problem_id for t in train + held}
    train = builder.apply_budget(train, lambda s: lengths.setdefault(s, count(s)), cfg.max_prompt_tokens, stats)
    held = builder.apply_budget(held, lambda s: lengths.setdefault(s, count(s)), cfg.max_prompt_tokens, stats)
    fates = {"without_prompts": sorted({p.id for p in kept} - drawn),
             "over_token_budget": sorted(drawn - {t.problem_id for t in train + held})}
    if fates["over_token_budget"]:
        _say(progress, f"{len(fates['over_token_budget'])} problems lost every prompt to the token budget "
                       f"(data.max_prompt_tokens={cfg.max_prompt_tokens}): {_ids(fates['over_token_budget'])}")
    manifest = _manifest(cfg, key, versions, provider.key, tok_info, src, label_stats, stats, train, held,
                         train_p, held_p, [lengths[t.prompt] for t in train + held], time.time() - t0, fates)
    dataset.write_dataset(path, train, held, manifest, corpus)
    samples_cache.unlink(missing_ok=True)  # the dataset holds them now
    _say(progress, f"wrote {path} ({len(train)} train / {len(held)} held-out prompts) in {time.time() - t0:.1f}s")
    return BuildResult(path, manifest, False)


def _ids(ids: list, n: int = 10) -> str:
    return ", ".join(ids[:n]) + (f", ... ({len(ids) - n} more)" if len(ids) > n else "")


def _manifest(cfg, key, versions, tok_key, tok_info, src, label_stats, stats, train, held, train_p, held_p,
              token_lengths, seconds, fates) -> dict:
    """The dataset's record. Its counts account for every row and candidate: rows_read = problems_read +
    bad_rows + rows_over_cap; candidates_read = correct + wrong + unverified; problems_read = the four
    filter outcomes; problems_kept = problems with prompts + without prompts + over the token budget."""
    hs, ts = builder.summarize(held), builder.summarize(train)
    return {
        "schema_version": dataset.SCHEMA_VERSION,
        "name": dataset.dataset_name(cfg),
        "hash": key,
        "created": dataset.now_iso(),
        "build_seconds": round(seconds, 2),
        "seed": cfg.seed,
        "config": dataset.config_dict(cfg),
        "source_versions": versions,
        "tokenizer": {"key": tok_key, **tok_info},
        "counts": {
            "rows_read": src.rows_read,
            "bad_rows": src.bad_rows.count,
            "rows_over_cap": src.rows_over_cap,
            "problems_read": len(src.problems),
            "candidates_read": sum(len(p.candidates) for p in src.problems),
            "candidates_labeled": label_stats.checked,
            "candidates_correct": label_stats.count("correct"),
            "candidates_wrong": label_stats.count("wrong"),
            "candidates_unverified": label_stats.timeouts + label_stats.errors,
            **stats.to_dict(),
            "train_problems": len(train_p),
            "heldout_problems": len(held_p),
            "problems_without_prompts": len(fates["without_prompts"]),
            "problems_over_token_budget": len(fates["over_token_budget"]),
            "train_prompts": len(train),
            "heldout_prompts": len(held),
        },
        "bad_rows": src.bad_rows.to_dict(),
        "labeling": label_stats.to_dict(),
        "dropped_for_budget": stats.prompts_over_token_budget,
        "problems_without_prompts": fates["without_prompts"],
        "problems_over_token_budget": fates["over_token_budget"],
        "prompt_tokens": {"mean": sum(token_lengths) / max(1, len(token_lengths)),
                          "max": max(token_lengths, default=0)},
        "train": vars(ts),
        "heldout": vars(hs),
        **src.info,
    }
