"""Everything the main job needs before training: the versioned dataset, the model folder, the warm-start.

`prepare(data_cfg, model_cfg, tiny_cfg=...)` is called at the start of `python -m driver.train` (and by
`python -m driver.synth`). Every stage is cached: an unchanged config reuses the dataset folder, the built
or converted model and the warm-started weights; a changed one builds new ones beside the old.

Order (the tokenizer/budget ordering problem): problems -> labels -> filter -> split -> prompts; the
tokenizer is then trained on the train prompts (tiny) or loaded (pretrained); prompts are budgeted in its
tokens; the dataset is written; the model kind's own preparation, if it names one (driver/models/hooks.py: the tiny
recipe's pretraining and warm-start), trains on it.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from core.chat import format_prompt
from driver.data import dataset as ds
from driver.data.pipeline import build_dataset
from driver.models import registry
from driver.models.hooks import kind_hook


@dataclass
class Prepared:
    """What `prepare` made: dataset folder, model folder (warm-started when enabled), their stats."""
    dataset_dir: Path
    model_dir: Path
    manifest: dict
    warm_start_stats: Optional[dict] = None


class ModelTokenizerProvider:
    """The budget's tokenizer for a ModelConfig (and the config's `tiny:` section, for the tiny model; see
    driver.data.pipeline.TokenizerProvider)."""

    def __init__(self, model_cfg, tiny_cfg=None):
        self.model_cfg = model_cfg
        self.tiny_cfg = tiny_cfg
        self.key = registry.tokenizer_key(model_cfg, self.tiny_cfg)
        self.model_dir: Optional[Path] = None

    def context_length(self) -> Optional[int]:
        """Positions the model reads: the tiny model's configured length, else the folder's config.json
        (`max_position_embeddings`); None when it does not say."""
        if self.model_cfg.name == "tiny":
            return registry.tiny_section(self.tiny_cfg).model.max_position_embeddings
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
    """Build or reuse the dataset; resolve the model; run its kind's `prepare` hook when `with_model` (the tiny
    recipe's pretraining and warm-start, when enabled).

    Args:
        data_cfg: core.config.DataConfig.
        model_cfg: core.config.ModelConfig.
        with_model: also run the warm-start (the base model is always resolved: its tokenizer budgets
            the prompts).
        sandbox_cfg: sandbox.config.SandboxConfig for labeling code candidates (default: its defaults).
        eval_prompts: held-out prompts the warm-start is evaluated on (HF greedy decoding; 0: not evaluated).
        rollout_cfg: core.config.RolloutConfig of the engines that sample candidates from the generator
            (`data.source=model`; default: its defaults). The generator's engines use `model_cfg.dtype`.
        tiny_cfg: the config's `tiny:` section, the embedded tiny recipe's keys (`tiny.*`; None: its defaults):
            the tiny model, its pretraining and warm-start, and the dataset settings it sets.
    """
    check_chat_template(model_cfg)
    data_cfg = ds.settings(with_generator_folder(data_cfg, model_cfg), tiny_cfg)
    provider = ModelTokenizerProvider(model_cfg, tiny_cfg)
    built = build_dataset(data_cfg, provider, format_fn=format_prompt, sandbox_cfg=sandbox_cfg, progress=progress,
                          sampler_factory=generator_sampler(data_cfg, model_cfg, rollout_cfg))
    base = provider.model_dir or registry.resolve_model(model_cfg, ds.read_corpus(built.path), tiny_cfg)
    model_dir, stats = base, None
    own_preparation = kind_hook(model_cfg.name, "prepare") if with_model else None
    if own_preparation is not None:  # the kind's own training before RL (the tiny recipe's pretraining, warm-start)
        model_dir, stats = own_preparation(base, registry.tiny_section(tiny_cfg), model_cfg, built.path, eval_prompts,
                                           progress)
    return Prepared(built.path, model_dir, built.manifest, stats)

