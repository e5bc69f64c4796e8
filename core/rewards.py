"""The reward a config names: one section, `verifier.reward: {name, ...params}`.

    verifier:
      reward:
        name: binary                  # a registered name (REWARDS), or `package.module:function` for your own

    verifier:
      reward:
        name: my_rewards:hedged       # your function, on the Python path of every verifier actor
        hedge_penalty: 0.5            # any other key: a keyword argument your function is called with

Registered: `binary` (1 when the named candidate is correct, else 0: GenSelect's reward, arXiv 2602.02143),
`partial` (the named candidate's unit-test pass fraction; code problems), and `stored_label` (the dataset's own label
of the named candidate, for data labelled by your judge: actors/verifier/user_reward.py). A function's score is the
reward as it returns it: `fn(problem, candidate, response, label, **extra, **params) -> bool | float in [0, 1]`
(core/user_functions.py REWARD_FUNCTION lists `extra`), run in the verifier's worker processes under
`verifier.timeout_s`; the parameters of the section are checked against its signature before any actor starts.

The parameters belong to the name: a config layer (a YAML file after its `base:`, or an override) that names another
reward starts the section afresh, as `algorithm.advantage` does (core/config.py).

Old keys: `verifier.reward: partial` (a string) and `verifier.reward_function: path` are refused with the new key's
name (`refusal`), and a run folder's config written with them is read with them moved (`migrate`).

Pure: stdlib only.
"""
from __future__ import annotations

from typing import Any, Optional

KEY = "verifier.reward"

#: the rewards `verifier.reward.name` accepts besides a dotted path: name -> (the function's path, or "" for a rule
#: of the verifiers themselves; what it gives)
REWARDS = {
    "binary": ("", "1 when the named candidate is correct (math-verify, or every unit test passes), else 0"),
    "partial": ("", "the named candidate's unit-test pass fraction (code problems)"),
    "stored_label": ("actors.verifier.user_reward:stored_label",
                     "the dataset's own label of the named candidate (candidate_labels or data.label_function)"),
}


def reward_name(section: Any) -> str:
    """The name a `verifier.reward` section holds (a registered name or a dotted path)."""
    return str(section.get("name", "binary"))


def reward_params(section: Any) -> dict:
    """The section's parameters: every key but `name` (a function's keyword arguments)."""
    return {key: value for key, value in dict(section).items() if key != "name"}


def function_path(section: Any) -> str:
    """The dotted path of the function that scores a named candidate; "" for `binary` and `partial`, which the
    verifiers compute themselves."""
    name = reward_name(section)
    return REWARDS[name][0] if name in REWARDS else name


def selection_mode(section: Any) -> str:
    """How a named candidate's score becomes its reward (core/algo/genselect.py `selection_reward`): 'binary' (1 iff
    correct) for the `binary` rule, the score itself ('partial') for `partial` and for every function."""
    return "binary" if reward_name(section) == "binary" else "partial"


def section_rules(section: Any) -> list:
    """(key, ok, message) rules of the section itself: a known name or a dotted path; the verifiers' own rules take
    no parameters. Whether a function imports and takes its parameters is core/config_rules.py's check."""
    name, params = reward_name(section), reward_params(section)
    builtin = name in REWARDS and not REWARDS[name][0]
    return [
        (f"{KEY}.name", name in REWARDS or ":" in name,
         f"is neither one of {sorted(REWARDS)} nor a dotted path 'package.module:function'"),
        (f"{KEY}.{next(iter(params), 'name')}", not (builtin and params),
         f"is a parameter, but verifier.reward.name={name!r} takes none (parameters go to a function named by "
         f"its path)"),
    ]


def describe() -> list:
    """(dotted key, default, help) rows for `--help`: one per registered reward."""
    return [(f"{KEY}.name={name}", "", what) for name, (_, what) in REWARDS.items()]


def old_keys_in(verifier: Optional[dict]) -> list:
    """The old keys a `verifier` subtree (nested dicts) sets: `reward` as a string, `reward_function`."""
    if not isinstance(verifier, dict):
        return []
    return ([f"verifier.reward={verifier['reward']}"] if isinstance(verifier.get("reward"), str) else []) + \
        (["verifier.reward_function"] if "reward_function" in verifier else [])


def refusal(old: str) -> str:
    """One line: what the old key `old` is now."""
    if old.startswith("verifier.reward="):
        return f"{old}: verifier.reward is a section now; set verifier.reward.name={old.split('=', 1)[1]}"
    return f"{old} moved to verifier.reward.name: set verifier.reward.name=package.module:function"


def migrate(tree: dict) -> dict:
    """A config tree (nested dicts, a run folder's config.yaml) with the old keys moved into the section: a string
    `reward` becomes `{name: it}`; a non-empty `reward_function` becomes the name."""
    verifier = tree.get("verifier")
    if not old_keys_in(verifier):
        return tree
    verifier = dict(verifier)
    function = verifier.pop("reward_function", "")
    if isinstance(verifier.get("reward"), str):
        verifier["reward"] = {"name": verifier["reward"]}
    if function:
        verifier["reward"] = {"name": function}
    return {**tree, "verifier": verifier}


__all__ = ["KEY", "REWARDS", "reward_name", "reward_params", "function_path", "selection_mode", "section_rules",
           "describe", "old_keys_in", "refusal", "migrate"]
