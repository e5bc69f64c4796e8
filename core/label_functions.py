"""The label function a config names: one section, `data.label_function: {name, ...params}`.

    data:
      label_function:
        name: my_labels:judge         # '' (default: math-verify, or the sandbox for code), or your function's path
        threshold: 0.8                # any other key: a keyword argument your function is called with

A function labels each candidate without a label in its file while a dataset is built:
`fn(problem, candidate, answer, **extra, **params) -> bool | float in [0, 1]` (core/user_functions.py LABEL_FUNCTION
lists `extra`), run in worker processes (driver/data/user_labels.py); the parameters of the section are checked
against its signature before anything starts. The built-in verifiers ('') take no parameters.

The parameters belong to the name: a config layer (a YAML file after its `base:`, or an override) that names another
function starts the section afresh, as `algorithm.advantage` does (core/config.py).

A dataset's cache key holds `cache_value`: '' with no function and the path alone for a function without
parameters (as when the key was a plain string, so datasets cached then are reused), the section with parameters.

Old key: `data.label_function: path` (a string) is refused with the new key's name (`refusal`), and a run folder's
config written with it is read with it moved (`migrate`).

Pure: stdlib only.
"""
from __future__ import annotations

from typing import Any, Optional

KEY = "data.label_function"


def label_name(section: Any) -> str:
    """The path a `data.label_function` section names; '' for the built-in verifiers."""
    return str(section.get("name") or "")


def label_params(section: Any) -> dict:
    """The section's parameters: every key but `name` (the function's keyword arguments)."""
    return {key: value for key, value in dict(section).items() if key != "name"}


def section_rules(section: Any) -> list:
    """(key, ok, message) rules of the section itself: '' or a dotted path; the built-in verifiers take no
    parameters. Whether a function imports and takes its parameters is core/config_rules.py's check."""
    name, params = label_name(section), label_params(section)
    return [
        (f"{KEY}.name", not name or ":" in name,
         "is neither '' (math-verify, the sandbox) nor a dotted path 'package.module:function'"),
        (f"{KEY}.{next(iter(params), 'name')}", bool(name) or not params,
         f"is a parameter, but {KEY}.name='' (the built-in verifiers) takes none (parameters go to a function "
         f"named by its path)"),
    ]


def cache_value(section: Any) -> Any:
    """What a dataset's cache key and manifest hold for the section: '' with no function, the path for a function
    without parameters (both as the plain-string key was written), else the section itself."""
    name, params = label_name(section), label_params(section)
    return {"name": name, **params} if name and params else name


def describe() -> list:
    """(dotted key, default, help) rows for `--help`: the built-in labels and a function's parameters."""
    return [(f"{KEY}.name=''", "", "math-verify for math answers, the sandbox's unit tests for code (default)"),
            (f"{KEY}.<param>", "", "with a function's path as the name: a keyword argument it is called with")]


def old_keys_in(data: Optional[dict]) -> list:
    """The old key a `data` subtree (nested dicts) sets: `label_function` as a string."""
    if not isinstance(data, dict) or not isinstance(data.get("label_function"), str):
        return []
    return [f"data.label_function={data['label_function']}"]


def refusal(old: str) -> str:
    """One line: what the old key `old` is now."""
    return f"{old}: {KEY} is a section now; set {KEY}.name={old.split('=', 1)[1]}"


def migrate(tree: dict) -> dict:
    """A config tree (nested dicts, a run folder's config.yaml) with a string `label_function` made the section's
    name."""
    data = tree.get("data") if isinstance(tree, dict) else None
    if not old_keys_in(data):
        return tree
    return {**tree, "data": {**data, "label_function": {"name": data["label_function"]}}}


__all__ = ["KEY", "label_name", "label_params", "section_rules", "cache_value", "describe", "old_keys_in", "refusal",
           "migrate"]
