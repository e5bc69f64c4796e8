"""The config sections that recipes own, registered by dotted path (`package.module:attribute`, core/plugins.py).

A recipe (a client of the system, like the embedded tiny recipe in tiny_recipe/) may own one section of the config,
`tiny:` for the tiny recipe. The schema (core/config_schema.py) names the section only by the paths below, so it
imports nothing of the recipe; they are resolved when a config is loaded:

* `schema`: the section's dataclass, whose instance is the section's default (typed validation, `--help`, the YAML
  written into every run folder: the section is then like any of the system's);
* `choices` ({dotted key: allowed values}) and `rules` (`fn(cfg) -> [(key, ok, message)]`): checked by
  core/config_rules.py after the system's;
* `moved_keys` ({old dotted path: new one}): keys that moved into the section from the system's; a config that
  still sets an old path is refused naming the new one (core/config.py), a run's config written before is read with
  them moved (`migrate_moved_keys`).

A section whose recipe does not import is empty (`{}`): a config that sets none of its keys and runs none of the
models the recipe builds (`models`) loads and runs without it; one that does is a ConfigError saying the package is
needed (`availability_rules`). A run's own config read back keeps the section it recorded as plain data.

Pure: stdlib only; the recipe is imported by path, the first time a config needs its section.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RecipeSection:
    """Where a recipe's section lives (dotted paths) and which `model.name` values its recipe builds."""
    package: str
    schema: str
    rules: str
    choices: str
    moved_keys: str
    models: tuple = ()


#: config section -> the recipe that owns it
RECIPE_SECTIONS = {
    "tiny": RecipeSection(package="tiny_recipe", schema="tiny_recipe.config:TinyRecipeConfig",
                          rules="tiny_recipe.config_rules:tiny_rules", choices="tiny_recipe.config_rules:TINY_CHOICES",
                          moved_keys="tiny_recipe.config:MOVED_KEYS", models=("tiny",)),
}

#: the dotted prefixes of the recipes' keys: `--help` lists them after the system's keys
RECIPE_KEY_PREFIXES = tuple(f"{name}." for name in RECIPE_SECTIONS)

_LOADED: dict = {}  # (section, part) -> (object or None, reason it did not load)


def _load(name: str, part: str) -> tuple:
    """(the object section `name`'s `part` path names, "") or (None, why it does not import); once per process."""
    if (name, part) not in _LOADED:
        from core.plugins import PluginError, load_object

        try:
            _LOADED[name, part] = (load_object(getattr(RECIPE_SECTIONS[name], part), f"{name}: section",
                                               lambda obj: ""), "")
        except PluginError as err:
            _LOADED[name, part] = (None, err.reason)
    return _LOADED[name, part]


def unavailable(name: str) -> str:
    """"" when section `name`'s recipe imports, else why it does not."""
    return _load(name, "schema")[1]


def default(name: str) -> Any:
    """Section `name` at its defaults (an instance of its dataclass), or `{}` when its recipe does not import."""
    cls = _load(name, "schema")[0]
    return cls() if cls is not None else {}


def factory(name: str):
    """The default factory of section `name`'s field in the schema (`default`, called when a config is built)."""
    return lambda: default(name)


_TYPED: dict = {}


def typed_schema(root: type) -> type:
    """`root` (the config's dataclass) with each of its recipe sections whose recipe imports typed as the section's
    dataclass (a subclass, built once): what a config is merged into, so that a section is validated as a field of its
    own type (`tiny=null` or `tiny=3` refused like any section's); `root` itself when none imports."""
    names = tuple(f.name for f in dataclasses.fields(root) if f.name in RECIPE_SECTIONS and not unavailable(f.name))
    if not names:
        return root
    if (root, names) not in _TYPED:
        own = [(name, _load(name, "schema")[0], dataclasses.field(default_factory=factory(name),
                                                                  metadata=root.__dataclass_fields__[name].metadata))
               for name in names]
        _TYPED[root, names] = dataclasses.make_dataclass(root.__name__, own, bases=(root,))
    return _TYPED[root, names]


def as_root(obj: Any, root: type) -> Any:
    """`obj` (an instance of `typed_schema(root)`) as an instance of `root` itself, holding the same values."""
    return obj if type(obj) is root else root(**{f.name: getattr(obj, f.name) for f in dataclasses.fields(root)})


def require(name: str) -> Any:
    """Section `name` at its defaults; ValueError saying the package is needed when its recipe does not import."""
    reason = unavailable(name)
    if reason:
        raise ValueError(f"the config's `{name}:` section {_needed(name, reason)}")
    return default(name)


def _needed(name: str, reason: str) -> str:
    return f"needs the recipe package {RECIPE_SECTIONS[name].package}, which does not import here ({reason})"


def _first_key(tree: Any, prefix: str) -> str:
    """The dotted path of the first leaf of `tree` (a section as nested dicts)."""
    while isinstance(tree, dict) and tree:
        key = next(iter(tree))
        prefix, tree = f"{prefix}.{key}", tree[key]
    return prefix


def availability_rules(cfg: Any, user_code: bool = True) -> list:
    """(key, ok, message) rules of the sections whose recipe does not import: the config may set none of their keys
    (`user_code`: a config being loaded; a run's own config read back keeps what it recorded) and may not run a model
    the recipe builds."""
    rules = []
    for name, section in RECIPE_SECTIONS.items():
        reason = unavailable(name)
        if not reason:
            continue
        values = getattr(cfg, name, {})
        rules += [
            (_first_key(values, name), not (user_code and values),
             f"{_needed(name, reason)}: install it beside the system, or leave `{name}:` unset (`~{name}` on the "
             f"command line)"),
            ("model.name", cfg.model.name not in section.models,
             f"{_needed(name, reason)}: install it beside the system, or name a model folder"),
        ]
    return rules


def _merged(part: str) -> dict:
    """The dicts that `part` ("choices", "moved_keys") names in every section whose recipe imports, merged."""
    found = {}
    for name in RECIPE_SECTIONS:
        if not unavailable(name):
            found.update(_load(name, part)[0] or {})
    return found


def choices() -> dict:
    """{dotted key: allowed values} of every section whose recipe imports."""
    return _merged("choices")


def rules(cfg: Any) -> list:
    """(key, ok, message) rules of every section whose recipe imports (its `rules` function's)."""
    found = []
    for name in RECIPE_SECTIONS:
        fn = None if unavailable(name) else _load(name, "rules")[0]
        found += fn(cfg) if fn is not None else []
    return found


def moved_keys() -> dict:
    """{old dotted path: new one} of every section whose recipe imports."""
    return _merged("moved_keys")


def moved_key(key: str):
    """(old path, new path) of the moved key `key` (dotted) is or lies under, else None."""
    for old, new in moved_keys().items():
        if key == old or key.startswith(old + "."):
            return old, new
    return None


def moved_keys_in(tree: dict, prefix: str = "") -> list:
    """The moved (old) dotted paths set in `tree` (a config as nested dicts), in order."""
    table, found = moved_keys(), []
    for key, value in (tree.items() if isinstance(tree, dict) else ()):
        dotted = f"{prefix}{key}"
        if dotted in table:
            found.append(dotted)
        elif isinstance(value, dict):
            found += moved_keys_in(value, dotted + ".")
    return found


def migrate_moved_keys(tree: dict) -> dict:
    """`tree` (a config as nested dicts, e.g. a run folder's config.yaml written before the keys moved) with every
    old path's value moved to its new path (a value already at the new path wins). Changes `tree` in place."""
    table = moved_keys()
    for old in moved_keys_in(tree):
        section, _, name = old.rpartition(".")
        value = tree[section].pop(name)
        parent, _, leaf = table[old].rpartition(".")
        tree.setdefault(parent, {}).setdefault(leaf, value)
    return tree


def is_recipe_key(key: str) -> bool:
    """Whether `key` (dotted) belongs to a recipe's section."""
    return key.startswith(RECIPE_KEY_PREFIXES)


def section_value(section: Any, key: str, default: Any) -> Any:
    """`section`'s `key` whether the section is its recipe's dataclass or plain data (a dict: the recipe does not
    import, or a run's recorded config); `default` where it has none (or `section` is None)."""
    if isinstance(section, dict):
        return section.get(key, default)
    return getattr(section, key, default)


__all__ = ["RecipeSection", "RECIPE_SECTIONS", "RECIPE_KEY_PREFIXES", "unavailable", "default", "factory",
           "typed_schema", "as_root", "require",
           "availability_rules", "choices", "rules", "moved_keys", "moved_key", "moved_keys_in", "migrate_moved_keys",
           "is_recipe_key", "section_value"]
