"""The parameters of a registered plug-in (an advantage estimator, a response form, a weight transport): each one's
default (its type is the default's), help text and choices, and the rules the parameters a config section gives such
a name must obey (core/estimators.py, core/response_forms.py, core/weight_transports.py).

Pure: stdlib only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Param:
    """One parameter of a registered plug-in: its default (its type is the default's) and its help text."""
    default: Any
    help: str
    choices: tuple = ()


def param_rules(key: str, name: str, kind: str, table: dict, params: dict, user_code: str = "function") -> list:
    """(key, ok, message) rules of the parameters `params` ({parameter: value}) that section `key` gives the
    registered `kind` `name`, whose parameters are `table` ({parameter: Param}): each must be one it takes, of its
    default's type. `user_code` says what a dotted path names instead (a function, a class), for the message."""
    takes = ", ".join(table) or "none"
    rules = []
    for param, value in params.items():
        spec = table.get(param)
        rules.append((f"{key}.{param}", spec is not None,
                      f"is a parameter, but {key}.name={name!r} takes {takes} (parameters go to a {kind} that takes "
                      f"them, or to a {user_code} named by its path)"))
        if spec is not None:
            rules.append((f"{key}.{param}", isinstance(value, type(spec.default)) and not isinstance(value, bool),
                          f"must be {type(spec.default).__name__} ({kind} {name!r})"))
    return rules


def with_defaults(section: Any, name: str, table: dict) -> dict:
    """`section` ({name, ...params}) as a plain dict, `name` first, with the default of every parameter of `table`
    ({parameter: Param}) that the section does not set."""
    given = {key: value for key, value in dict(section).items() if key != "name"}
    return {"name": name, **{param: spec.default for param, spec in table.items()}, **given}
