"""The command line's overrides, in Hydra's grammar, applied in order on top of the config file:

    key=value     set a key of the schema (the value is read as YAML: 1.5, true, [a, b], null, '')
    key=          the empty value: '' for a text key, null for an optional one; a key of another type has none
    +key=value    add a key the config file does not set (any key of the schema); refused when the file sets it
    ++key=value   set the key whether the file sets it or not
    ~key          remove the key: back to the schema's default (a section: every key of it), whatever the file or
                  an earlier override set
    ~key=value    the same, only when the key holds that value now

Every key must be one of the schema's (core/config_schema.py): its sections are fixed, so `+` adds only keys the
schema has. Errors are ConfigError, one line naming the override and what to write instead.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Optional

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.nodes import StringNode

from core.config_rules import ConfigError

FORMS = "key=value, key=, +key=value, ++key=value, ~key"
_ABSENT = object()


@dataclass(frozen=True)
class Override:
    """One parsed override: `op` is 'set', 'add' (+), 'force' (++) or 'remove' (~); `value` is the text after '='
    (None for a bare `~key`)."""
    text: str
    op: str
    key: str
    value: Optional[str]


def is_override(arg: str) -> bool:
    """Whether a command-line argument is an override rather than a config name (`~key` has no '=')."""
    return "=" in arg or arg.startswith("~")


def parse(text: str) -> Override:
    """`text` as an Override; ConfigError for a malformed one."""
    if text.startswith("~"):
        key, eq, value = text[1:].partition("=")
        op, value = "remove", (value if eq else None)
    elif "=" in text:
        key, _, value = text.partition("=")
        op = "force" if key.startswith("++") else "add" if key.startswith("+") else "set"
        key = key.lstrip("+")
    else:
        raise ConfigError(f"override {text!r} is not of the form key=value (the forms: {FORMS})")
    key = key.strip()
    if not key or key.startswith(("+", "~", ".")) or key.endswith(".") or ".." in key:
        raise ConfigError(f"override {text!r}: no key before '=' or after '~'/'+' (the forms: {FORMS})")
    return Override(text, op, key, value)


def apply(merged: DictConfig, schema: DictConfig, file_keys: set, override: Override) -> DictConfig:
    """`merged` (the schema with the config file merged in) with `override` applied; `file_keys`: the dotted keys
    the config file sets (`set_keys`)."""
    if override.op == "remove":
        return _remove(merged, schema, override)
    if override.op in ("add", "force"):
        _require_schema_key(schema, override)
    if override.op == "add" and override.key in file_keys:
        raise ConfigError(f"override {override.text!r}: the config file sets {override.key} already; change it "
                          f"with {override.key}={override.value} (or ++{override.key}={override.value})")
    value = override.value
    if value.strip() == "":
        value = _empty_value(schema, override)
    return OmegaConf.merge(merged, OmegaConf.from_dotlist([f"{override.key}={value}"]))


def set_keys(layers: list) -> set:
    """The dotted keys (sections and leaves) that the YAML layers set."""
    keys = set()

    def walk(tree, prefix: str) -> None:
        for name, value in tree.items():
            keys.add(prefix + str(name))
            if isinstance(value, dict):
                walk(value, f"{prefix}{name}.")

    for layer in layers:
        tree = OmegaConf.to_container(layer)
        if isinstance(tree, dict):
            walk(tree, "")
    return keys


def dotlist_tree(override: Override):
    """The override as a nested dict ({} for `~key`): what the moved-key check reads."""
    if override.op == "remove" or not override.value or not override.value.strip():
        return {}
    return OmegaConf.to_container(OmegaConf.from_dotlist([f"{override.key}={override.value}"]))


def _remove(merged: DictConfig, schema: DictConfig, override: Override) -> DictConfig:
    """`~key` / `~key=value`: the key back at the schema's default."""
    default = _require_schema_key(schema, override)
    if override.value is not None:
        now = OmegaConf.select(merged, override.key)
        expected = OmegaConf.from_dotlist([f"{override.key}={override.value}"])
        wanted = OmegaConf.select(expected, override.key)
        plain = OmegaConf.to_container(now) if isinstance(now, (DictConfig, ListConfig)) else now
        if plain != wanted:
            raise ConfigError(f"override {override.text!r}: {override.key} is {plain!r}, not {wanted!r}; nothing "
                              f"removed (~{override.key} removes it whatever it holds)")
    if isinstance(default, ListConfig):
        default = OmegaConf.to_container(default)
    elif isinstance(default, DictConfig):  # a section: the schema's own node, which keeps its dataclass type
        default = copy.deepcopy(default)
    OmegaConf.update(merged, override.key, default, merge=False)
    return merged


def _require_schema_key(schema: DictConfig, override: Override):
    """The schema's default of `override.key`; ConfigError when the schema has no such key."""
    default = OmegaConf.select(schema, override.key, default=_ABSENT)
    if default is _ABSENT:
        parent, _, leaf = override.key.rpartition(".")
        where = f"section {parent!r}" if parent else "the top level"
        raise ConfigError(f"override {override.text!r}: the schema has no key {leaf!r} in {where} (keys can only be "
                          f"set, not added: `python -m driver.train --help` lists them)")
    return default


def _empty_value(schema: DictConfig, override: Override) -> str:
    """What `key=` means for the key's type: '' (text), null (optional); ConfigError for the others."""
    _require_schema_key(schema, override)
    parent, _, leaf = override.key.rpartition(".")
    node = (OmegaConf.select(schema, parent) if parent else schema)._get_node(leaf)
    if isinstance(node, StringNode):
        return "''"
    if node._is_optional():
        return "null"
    kind = "a section" if isinstance(node, DictConfig) else "a list" if isinstance(node, ListConfig) else \
        f"{type(node).__name__.replace('Node', '').lower()} key"  # IntegerNode -> integer key
    kind = kind if kind.startswith("a ") else ("an " if kind[0] in "aeiou" else "a ") + kind
    example = "[]" if isinstance(node, ListConfig) else "VALUE"
    raise ConfigError(f"override {override.text!r}: {override.key} is {kind} and has no empty value; give one "
                      f"({override.key}={example}) or ~{override.key} for the schema's default")
