"""Everything the main job needs before training: the versioned dataset, the model folder, the warm-start.

`prepare(data_cfg, model_cfg, tiny_cfg=...)` is called at the start of `python -m driver.train` (and by
`python -m driver.synth`). Every stage is cached: an unchanged config reuses the dataset folder, the built
or converted model and the warm-started weights; a changed one builds new ones beside the old.

Order (the tokenizer/budget ordering problem): problems -> labels -> filter -> split -> prompts; the
tokenizer is then trained on the train prompts (tiny) or loaded (pretrained); prompts are budgeted in its
tokens; the dataset is written; the warm-start (tiny model only) trains on it.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from core.chat import format_prompt
from core.config import TinyRecipeConfig
from driver.data import dataset as ds
from driver.data.pipeline import build_dataset
from driver.models import registry


@dataclass
class Prepared:
    """What `prepare` made: dataset folder, model folder (warm-started when enabled), their stats."""
    dataset_dir: Path
    model_dir: Path
    manifest: dict
    warm_start_stats: Optional[dict] = None


class ModelTokenizerProvider:
    """The budget's tokenizer for a ModelConfig (and the tiny recipe's TinyRecipeConfig, for the tiny model; see
    driver.data.pipeline.TokenizerProvider)."""

    def __init__(self, model_cfg, tiny_cfg=None):
        self.model_cfg = model_cfg
        self.tiny_cfg = tiny_cfg or TinyRecipeConfig()
        self.key = registry.tokenizer_key(model_cfg, self.tiny_cfg)
        self.model_dir: Optional[Path] = None

    def context_length(self) -> Optional[int]:
        """Positions the model reads: the tiny model's configured length, else the folder's config.json
        (`max_position_embeddings`); None when it does not say."""
        if self.model_cfg.name == "tiny":
            return self.tiny_cfg.model.max_position_embeddings
        import json

        config = json.loads((registry.resolve_model(self.model_cfg) / "config.json").read_text())
        config = config.get("text_config", config)
        return config.get("max_position_embeddings")

    def load(self, corpus: list):
        from transformers import AutoTokenizer

        self.model_dir = registry.resolve_model(self.model_cfg, corpus, self.tiny_cfg)
        tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        return tokenizer, {"model": self.model_cfg.name, "folder": str(self.model_dir),
                           "vocab_size": len(tokenizer)}


def generator_sampler(data_cfg, model_cfg, rollout_cfg=None):
    """For `data.source=model`: a factory of the context manager that samples from the generator on rollout
    actors (`driver.data.generated.RaySampler`); None for the other sources."""
    if data_cfg.source != "model":
        return None
    from core.config import RolloutConfig
    from driver.data.generated import RaySampler

    cfg = rollout_cfg or RolloutConfig()
    return lambda: RaySampler(cfg, data_cfg.generator, dtype=model_cfg.dtype, seed=data_cfg.seed)


def with_generator_folder(data_cfg, model_cfg):
    """`data_cfg` with `data.generator` as a folder: a model name the registry converts (`smollm2-135m`, cached under
    `model.cache_dir`) becomes its folder, so a model can write the candidates it is then trained to select
    among; a path is kept as it is (checked with the rest of the source, driver/data/generated.py)."""
    if data_cfg.source != "model" or data_cfg.generator != "smollm2-135m":
        return data_cfg
    import dataclasses

    folder = registry.resolve_model(dataclasses.replace(model_cfg, name=data_cfg.generator))
    return dataclasses.replace(data_cfg, generator=str(folder))


def check_chat_template(model_cfg) -> None:
    """A selector other than a model built here must have a chat template: its prompt is the template with the
    generation prompt, after which it reasons and writes `Judgment: IDX` (core/chat.py). Without one the prompt
    would end in the tiny model's answer prefix, a format a pretrained model never learned. DataError (one line)
    naming the folder and the fix; checked before any candidate is sampled."""
    if model_cfg.name == "tiny":
        return
    import json

    from transformers import AutoTokenizer

    from core.chat import has_chat_template
    from driver.data.problem import DataError

    try:
        folder = registry.resolve_model(model_cfg)
    except registry.ModelFolderError as err:  # a missing folder, config, weights or tokenizer: one line too
        raise DataError(str(err)) from None
    try:
        kind = json.loads((folder / "genselect_model.json").read_text()).get("kind")
    except (OSError, ValueError, AttributeError):
        kind = None
    if kind == "tiny" or has_chat_template(AutoTokenizer.from_pretrained(folder)):
        return  # a tiny model trained here (and its exports) answers after the prefix; its tokenizer has no template
    raise DataError(f"model.name={model_cfg.name}: the tokenizer in {folder} has no chat template. A selector "
                    f"reasons after the model's chat template and ends with `Judgment: IDX`; give the folder one "
                    f"(`chat_template` in tokenizer_config.json, or chat_template.jinja, e.g. the instruct model's)")


def prepare(data_cfg, model_cfg, with_model: bool = True, sandbox_cfg=None, progress: bool = True,
            eval_prompts: int = 200, rollout_cfg=None, tiny_cfg=None) -> Prepared:
    """Build or reuse the dataset; resolve the model; warm-start it (tiny, when enabled and `with_model`).

    Args:
        data_cfg: core.config.DataConfig.
        model_cfg: core.config.ModelConfig.
        with_model: also run the warm-start (the base model is always resolved: its tokenizer budgets
            the prompts).
        sandbox_cfg: sandbox.config.SandboxConfig for labeling code candidates (default: its defaults).
        eval_prompts: held-out prompts the warm-start is evaluated on (HF greedy decoding; 0: not evaluated).
        rollout_cfg: core.config.RolloutConfig of the engines that sample candidates from the generator
            (`data.source=model`; default: its defaults). The generator's engines use `model_cfg.dtype`.
        tiny_cfg: core.config.TinyRecipeConfig, the embedded tiny recipe's keys (`tiny.*`; default: its
            defaults): the tiny model, its pretraining and warm-start, and the dataset settings it sets.
    """
    tiny_cfg = tiny_cfg or TinyRecipeConfig()
    check_chat_template(model_cfg)
    data_cfg = ds.settings(with_generator_folder(data_cfg, model_cfg), tiny_cfg)
    provider = ModelTokenizerProvider(model_cfg, tiny_cfg)
    built = build_dataset(data_cfg, provider, format_fn=format_prompt, sandbox_cfg=sandbox_cfg, progress=progress,
                          sampler_factory=generator_sampler(data_cfg, model_cfg, rollout_cfg))
    base = provider.model_dir or registry.resolve_model(model_cfg, ds.read_corpus(built.path), tiny_cfg)
    stats = None
    model_dir = base
    if with_model and model_cfg.name == "tiny" and tiny_cfg.pretrain.steps > 0:
        base = _pretrained(base, tiny_cfg, ds.load_dataset(built.path), progress)
        model_dir = base
    if with_model and model_cfg.name == "tiny" and tiny_cfg.warm_start.enabled:
        from tiny_recipe.warmstart import warm_start, warm_start_dir

        ws = tiny_cfg.warm_start
        out = warm_start_dir(base, ws, built.manifest["hash"], model_cfg.dtype, tiny_cfg.seed)
        if progress and not out.exists():
            print(f"[prepare] warm-start ({ws.target}, {ws.steps} steps) -> {out}", file=sys.stderr, flush=True)
        data = ds.load_dataset(built.path)
        validation = data.heldout[:eval_prompts] if eval_prompts else data.heldout  # the test set stays unread
        model_dir, stats = warm_start(base, data.train, validation, ws, out, dtype=model_cfg.dtype,
                                      seed=tiny_cfg.seed, eval_prompts=eval_prompts, progress=progress)
    return Prepared(built.path, model_dir, built.manifest, stats)


def _pretrained(base, tiny_cfg, data, progress: bool) -> Path:
    """The base model pretrained on worked solutions (cached), the held-out problems excluded."""
    from tiny_recipe.pretrain import pretrain, pretrain_dir

    exclude = frozenset(t.problem for t in data.heldout)
    out = pretrain_dir(base, tiny_cfg.pretrain, exclude, data.manifest["hash"])
    if progress and not out.exists():
        cfg = tiny_cfg.pretrain
        then = f", then {cfg.context_steps} steps after training prompts" if cfg.context_steps else ""
        pointers = f"; {cfg.pointer_share:.0%} pointer steps" if cfg.pointer_share else ""
        print(f"[prepare] pretraining on worked solutions ({cfg.steps} steps of {cfg.batch_size}{then}{pointers}) "
              f"-> {out}", file=sys.stderr, flush=True)
    out, stats = pretrain(base, tiny_cfg.pretrain, exclude, out, seed=tiny_cfg.seed, progress=progress,
                          train_tasks=data.train)
    if progress:
        print(f"[prepare] pretraining: {stats['steps_run']} steps, loss {stats['loss_first']:.2f} -> "
              f"{stats['loss_last10']:.2f}, {stats['seconds']:.0f} s", file=sys.stderr, flush=True)
    return out
