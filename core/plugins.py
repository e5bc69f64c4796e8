"""User code named by a dotted path in the config: `package.module:attribute`.

`load_object(path, kind, check)` imports the module, takes the attribute (dots after the colon walk into it:
`module:Class.method`) and checks that it fits the interface its config key expects; every failure is one
`PluginError` line that names the key (`kind`), the path and the reason. The checks are small functions of the
object that return a reason, or "" when it fits: `callable_check`, or `takes_positional(n)` for a function that is
called with n positional arguments. `extra_kwargs` picks the keyword arguments a function accepts, so an interface
can offer more than a user function asks for. `call_by_path` loads (once per process) and calls: what a worker
process runs when the caller hands it the path instead of the function itself.

Stdlib only.
"""
from __future__ import annotations

import importlib
import inspect
import sys
from typing import Any, Callable, Optional

Check = Callable[[Any], str]


class PluginError(ValueError):
    """A dotted path that does not import, has no such attribute, or does not fit its interface. `key` is the
    config key, `path` what it names, `reason` why it was refused; the message is `key='path': reason`."""

    def __init__(self, key: str, path: str, reason: str):
        super().__init__(f"{key}={path!r}: {reason}")
        self.key, self.path, self.reason = key, path, reason


def callable_check(obj: Any) -> str:
    """"" when `obj` is callable, else the reason."""
    return "" if callable(obj) else f"is a {type(obj).__name__}, not a callable"


def takes_positional(n: int, names: tuple = (), keywords: tuple = ()) -> Check:
    """A check: the object is callable with n positional arguments and the keyword arguments `keywords` (a config
    section's parameters); `names` only label the message, e.g. ("problem", "candidate", "answer"). A callable whose
    signature cannot be read (some builtins) passes."""
    shown = f"({', '.join(names)})" if names else f"{n} positional arguments"

    def check(obj: Any) -> str:
        reason = callable_check(obj)
        if reason:
            return reason
        try:
            signature = inspect.signature(obj)
        except (TypeError, ValueError):
            return ""
        try:
            signature.bind(*range(n), **dict.fromkeys(keywords))
        except TypeError as err:
            given = f"{shown[:-1]}, {', '.join(f'{k}=...' for k in keywords)})" if keywords else shown
            return f"cannot be called as fn{given}: its signature is {signature} ({err})"
        return ""

    return check


def split_path(path: str, kind: str) -> tuple:
    """("package.module", "attribute") of `package.module:attribute`; PluginError for another shape."""
    module, sep, attribute = str(path).strip().partition(":")
    if not sep or not module or not attribute or " " in path.strip():
        raise PluginError(kind, path, "expected 'package.module:attribute' (a module path, a colon, a name in it)")
    return module, attribute


def load_object(path: str, kind: str, check: Check = callable_check) -> Any:
    """The object `path` (`package.module:attribute`) names, after `check` accepted it; PluginError (naming `kind`,
    the config key) when the module does not import, has no such attribute, or `check` gives a reason."""
    module_name, attribute = split_path(path, kind)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as err:
        raise PluginError(kind, path, f"module {module_name!r} does not import ({type(err).__name__}: {err}); "
                                      f"is its folder on the Python path?") from None
    except Exception as err:  # noqa: BLE001 -- the user's module raised while importing: one line, the cause
        raise PluginError(kind, path, f"importing module {module_name!r} raised {type(err).__name__}: {err}") from None
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise PluginError(kind, path, f"module {module_name!r} has no attribute {attribute!r}")
        obj = getattr(obj, part)
    reason = check(obj)
    if reason:
        raise PluginError(kind, path, reason)
    return obj


def extra_kwargs(fn: Callable, args: tuple, extras: dict) -> dict:
    """The entries of `extras` that `fn` accepts as keywords after the positional `args`: all of them when it takes
    `**kwargs`, else those naming one of its parameters that `args` leave unbound."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return {}
    params = signature.parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return dict(extras)
    bound = signature.bind_partial(*args).arguments
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {k: v for k, v in extras.items() if k in names and k not in bound}


_LOADED: dict = {}


def load_cached(path: str, kind: str, positional: int, search_path: tuple = ()) -> Callable:
    """The function `path` names, loaded once per process and checked to take `positional` arguments.
    `search_path`: folders appended to `sys.path` first (the caller's, so that a worker process started before the
    caller's path changed still finds the module)."""
    for folder in search_path:
        if folder not in sys.path:
            sys.path.append(folder)
    fn = _LOADED.get(path)
    if fn is None:
        fn = _LOADED[path] = load_object(path, kind, takes_positional(positional))
    return fn


def call_by_path(path: str, kind: str, positional: int, args: tuple, extras: dict, search_path: tuple = (),
                 params: Optional[dict] = None) -> Any:
    """`fn(*args, **the extras it accepts, **params)` for the function `path` names (`load_cached`): what a worker
    process runs when the caller hands it the path instead of the function. `params` (a config section's
    parameters) are always passed; they win over an extra of the same name."""
    fn = load_cached(path, kind, positional, search_path)
    return fn(*args, **{**extra_kwargs(fn, args, extras), **(params or {})})


__all__ = ["PluginError", "load_object", "callable_check", "takes_positional", "extra_kwargs", "load_cached",
           "call_by_path", "split_path"]
