"""One structured configuration for every entry point: loading and writing it.

The schema is a tree of dataclasses (core/config_schema.py, with the model and data sections in
core/config_model.py); OmegaConf turns it into a typed config, merges a YAML file from `configs/` (after the config it
names as `base:`) and `key=value` overrides from the command line, and rejects unknown keys and wrong types with a
message that names the key; core/config_rules.py then checks what types alone cannot express and fills in derived
values. Import the config classes and functions from here.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from core import overrides as overrides_grammar
from core.config_model import DataConfig, ModelConfig
from core import estimators, label_functions, response_forms, rewards, weight_transports
from core.config_rules import ConfigError, check, resolve, resolve_ratio_reference
from core.config_schema import (AlgorithmConfig, ClusterConfig, CurriculumConfig, LearnerConfig, LoggingConfig,
                                RolloutConfig, ServeConfig, TrainConfig, VerifierConfig, WeightSyncConfig)
from core.recipe_sections import (RECIPE_KEY_PREFIXES, RECIPE_SECTIONS, as_root, is_recipe_key, migrate_moved_keys,
                                  moved_key, moved_keys_in, typed_schema)

#: configs/ beside the packages: the checkout's, or the installed one (pyproject.toml packages it beside `core`)
CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"


def resolve_config_path(name_or_path: str) -> Path:
    """`default` -> configs/default.yaml; a path is taken as it is."""
    from core.named_yaml import find_named_yaml

    try:
        return find_named_yaml(name_or_path, CONFIG_DIR, "config")
    except LookupError as err:
        raise ConfigError(str(err)) from None


def load_config(name_or_path: str = "default", overrides: Optional[list] = None) -> TrainConfig:
    """Schema <- YAML file (after the configs it names as `base:`) <- overrides (`key=value`, `key=`, `+key=value`,
    `++key=value`, `~key`: core/overrides.py), in order; validated. Returns a typed TrainConfig object."""
    schema = OmegaConf.structured(typed_schema(TrainConfig))
    try:
        layers = _yaml_layers(name_or_path)
        merged = schema
        for layer in layers:
            _refuse_moved_keys(OmegaConf.to_container(layer), f"config {name_or_path!r}")
            _refuse_old_section_keys(OmegaConf.to_container(layer), f"config {name_or_path!r}")
            merged = OmegaConf.merge(_restart_sections(merged, _sections_named(layer)), layer)
        parsed = [overrides_grammar.parse(item) for item in overrides or []]
        for item in parsed:
            _refuse_moved_keys(overrides_grammar.dotlist_tree(item), f"override {item.text!r}", item.key)
            _refuse_old_section_keys(overrides_grammar.dotlist_tree(item), f"override {item.text!r}")
        file_keys = overrides_grammar.set_keys(layers)
        for item in parsed:
            named = _sections_named(overrides_grammar.dotlist_tree(item)) if item.op != "remove" else {}
            merged = overrides_grammar.apply(_restart_sections(merged, named), schema, file_keys, item)
        cfg = as_root(OmegaConf.to_object(merged), TrainConfig)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or getattr(e, "key", None)
        raise ConfigError(f"invalid config key {key!r}: {_first_line(e)}") from None
    check(cfg)
    return resolve(cfg)


def _yaml_layers(name_or_path: str, seen: tuple = ()) -> list:
    """The YAML file's contents, preceded by those of its `base:` config (a config name or path, itself maybe with a
    base): [base's layers..., this file without the `base` key]."""
    path = resolve_config_path(name_or_path)
    if path.resolve() in seen:
        raise ConfigError(f"config {name_or_path!r}: `base:` loops back to itself ({' -> '.join(map(str, seen))})")
    layer = OmegaConf.load(path)
    base = layer.pop("base", None) if isinstance(layer, DictConfig) else None
    if base is None:
        return [layer]
    if not isinstance(base, str):
        raise ConfigError(f"config {name_or_path!r}: `base:` must name one config, got {base!r}")
    return _yaml_layers(base, seen + (path.resolve(),)) + [layer]


def _refuse_moved_keys(tree, where: str, key: str = "") -> None:
    """ConfigError (one line, naming the new path) if `tree` (a YAML layer as nested dicts) or the override `key`
    (dotted) sets a key that moved into a recipe's section (the embedded tiny recipe's `tiny:`: tiny_recipe/config.py
    MOVED_KEYS, registered in core/recipe_sections.py)."""
    found = moved_key(key) if key else None
    suffix = key[len(found[0]):] if found else ""  # the key below the moved path, kept under the new one
    if found is None and isinstance(tree, dict) and moved_keys_in(tree):
        found = moved_key(moved_keys_in(tree)[0])
    if found:
        old, new = found
        raise ConfigError(f"{where}: {old} moved to {new} (the embedded tiny recipe's keys are under `tiny:`); "
                          f"set {new}{suffix} instead")


def _refuse_old_section_keys(tree, where: str) -> None:
    """ConfigError (one line, naming the new key) if `tree` (a YAML layer or an override as nested dicts) sets one of
    the old keys that moved into a section: the flat estimator keys (core/estimators.py), `verifier.reward` as a
    string or `verifier.reward_function` (core/rewards.py), `rollout.judgment`, `rollout.reasoning_budget` or
    `rollout.response_form` as a string (core/response_forms.py), `data.label_function` as a string
    (core/label_functions.py), `weight_sync.backend` or `weight_sync.bucket_mb` (core/weight_transports.py)."""
    tree = tree if isinstance(tree, dict) else {}
    for module, part in ((estimators, "algorithm"), (rewards, "verifier"), (response_forms, "rollout"),
                         (label_functions, "data"), (weight_transports, "weight_sync")):
        old = module.old_keys_in(tree.get(part))
        if old:
            raise ConfigError(f"{where}: {module.refusal(old[0])}")


#: the sections `{name, ...params}` whose parameters belong to the name, as (section, key)
SECTIONS = (("algorithm", "advantage"), ("verifier", "reward"), ("rollout", "response_form"),
            ("data", "label_function"), ("weight_sync", "transport"))


def _sections_named(tree) -> dict:
    """{(section, key): name} of the SECTIONS whose `name` a layer (or an override, as a tree) sets."""
    tree = OmegaConf.to_container(tree) if isinstance(tree, DictConfig) else tree
    named = {}
    for path in SECTIONS:
        section = tree
        for part in path:
            section = section.get(part) if isinstance(section, dict) else None
        if isinstance(section, dict) and section.get("name") is not None:
            named[path] = str(section["name"])
    return named


def _restart_sections(merged: DictConfig, named: dict) -> DictConfig:
    """`merged` with each section of `named` emptied to `{name}` when the name differs from the one it holds: the
    parameters belong to the name (core/estimators.py, core/rewards.py, core/response_forms.py,
    core/label_functions.py, core/weight_transports.py)."""
    for (part, key), name in named.items():
        if merged[part][key].get("name") != name:
            merged = merged.copy()
            merged[part][key] = {"name": name}
    return merged


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def to_yaml(cfg: Any) -> str:
    """The fully resolved config as YAML (written into every run folder)."""
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


def from_yaml(text: str) -> TrainConfig:
    """Inverse of to_yaml (a run folder's config.yaml, read by evaluation and serving), validated like load_config
    except that the user functions it names are not imported: they were checked when the run started, and reading its
    settings does not need them. A config written before the tiny recipe's keys moved under `tiny:` is read with
    them moved, and one written before a key became a section `{name, ...params}` with it moved into the section."""
    tree = migrate_moved_keys(OmegaConf.to_container(OmegaConf.create(text)))
    for module in (estimators, rewards, response_forms, label_functions, weight_transports):
        tree = module.migrate(tree)
    merged = OmegaConf.merge(OmegaConf.structured(typed_schema(TrainConfig)), OmegaConf.create(tree))
    cfg = as_root(OmegaConf.to_object(merged), TrainConfig)
    check(cfg, user_code=False)
    return resolve(cfg)


def describe(cls: type = TrainConfig, prefix: str = "") -> list:
    """(dotted key, default, help) for every field: what `--help` prints; the advantage section is followed by the
    parameters of every registered estimator (core/estimators.py), the reward section by the registered rewards
    (core/rewards.py), the response form section by the forms and their parameters (core/response_forms.py), the
    label function section by its choices (core/label_functions.py), the transport section by the transports and
    their parameters (core/weight_transports.py); a recipe's section (core/recipe_sections.py) by
    its keys, or nothing when the recipe does not import."""
    rows = []
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if key in RECIPE_SECTIONS and not dataclasses.is_dataclass(default):
            continue
        if dataclasses.is_dataclass(default):
            rows.extend(describe(type(default), key + "."))
        else:
            rows.append((key, default, f.metadata.get("help", "")))
        if key == estimators.KEY:
            rows.extend(estimators.describe())
        for section in (rewards, response_forms, label_functions, weight_transports):
            if key == section.KEY:
                rows.extend(section.describe())
    return rows


def cache_key_settings(section, added_later: dict) -> dict:
    """`section` (a config dataclass, or a dict) as a plain dict for a cache key, without each key of `added_later`
    ({key: default}) that holds its default there: a key added after folders were cached, at the default that builds
    what was built before it, leaves their keys (and the folders) as they were."""
    settings = dataclasses.asdict(section) if dataclasses.is_dataclass(section) else dict(section)
    return {k: v for k, v in settings.items() if not (k in added_later and v == added_later[k])}


__all__ = ["TrainConfig", "ModelConfig", "DataConfig", "RolloutConfig", "VerifierConfig", "LearnerConfig",
           "AlgorithmConfig", "WeightSyncConfig", "ClusterConfig", "CurriculumConfig", "ServeConfig", "ConfigError",
           "CONFIG_DIR", "load_config", "resolve_config_path", "resolve_ratio_reference", "to_yaml", "from_yaml",
           "describe", "is_recipe_key", "RECIPE_KEY_PREFIXES", "cache_key_settings"]
