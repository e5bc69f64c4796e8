"""The response form a config names: one section, `rollout.response_form: {name, ...params}`.

    rollout:
      response_form:
        name: forced_judgment         # '' (the model's own form), a registered name (FORMS), or your own path
        reasoning_budget: 176         # that form's parameters; the ones left out keep their defaults

    rollout:
      response_form:
        name: my_forms:shouted        # your fn(model_dir, cfg, **params) -> ResponseForm
        volume: 11                    # any other key: a keyword argument your function is called with

A form is how a selector's G rollouts are sampled (actors/rollout/response_forms.py), in training, evaluation,
driver.bon and /v1/select. '' (default): the model's own form (the `response_form` hook its folder names,
driver/models/hooks.py), else free text; it takes no parameters. Registered: `free_text` (the general form, whatever
the model's own) and `forced_judgment` (s1's budget forcing, arXiv 2501.19393: reasoning up to `reasoning_budget`
tokens, then the model's own judgment or an appended `Judgment: ` and a sampled index;
actors/rollout/forced_judgment.py). A built-in form's parameters are checked against its table here, a function's
against its signature (core/user_functions.py RESPONSE_FORM), before any actor starts.

The parameters belong to the name: a config layer (a YAML file after its `base:`, or an override) that names another
form starts the section afresh, as `algorithm.advantage` does (core/config.py). `resolve_section` fills in a built-in
form's defaults, so a run's config.yaml shows each parameter the run used.

Old keys: `rollout.judgment` (free | forced), `rollout.reasoning_budget` and `rollout.response_form` as a string are
refused with the new key's name (`refusal`), and a run folder's config written with them is read with them moved
(`migrate`).

Pure: stdlib only.
"""
from __future__ import annotations

from typing import Any, Optional

from core.section_params import Param, param_rules, with_defaults

KEY = "rollout.response_form"

#: the forms `rollout.response_form.name` accepts besides '' and a dotted path: name -> (the path of its
#: `fn(model_dir, cfg, **params)`: strings, so the config check imports nothing of actors/; {parameter: Param})
FORMS = {
    "free_text": ("actors.rollout.response_forms:free_text", {}),
    "forced_judgment": ("actors.rollout.forced_judgment:ForcedJudgment.of", {
        "reasoning_budget": Param(0, "B, the most reasoning tokens before the judgment is forced (0: the index right "
                                     "after the prompt). B plus 8 tokens for the forced judgment must fit in "
                                     "rollout.max_response_tokens."),
    }),
}

#: what each registered form is, for `--help`
WHAT = {
    "": "the model's own form (the `response_form` hook its folder names), else free text",
    "free_text": "free text (the model writes its reasoning and `Judgment: IDX`), whatever the model's own form",
    "forced_judgment": "s1's budget forcing (arXiv 2501.19393): the model reasons up to reasoning_budget tokens, "
                       "stopping early at its own judgment or end token; where it wrote none, the system appends "
                       "`Judgment: ` and samples one index among the valid ones (no loss on the appended tokens). "
                       "For models with a chat template",
}


def form_name(section: Any) -> str:
    """The name a `rollout.response_form` section holds: '', a registered name or a dotted path."""
    return str(section.get("name") or "")


def is_path(name: str) -> bool:
    """Whether `name` names user code (`package.module:function`) rather than a registered form."""
    return ":" in str(name)


def form_params(section: Any) -> dict:
    """The form's keyword parameters: a built-in form's with its defaults filled in, a function's as given."""
    return {key: value for key, value in resolve_section(section).items() if key != "name"}


def function_path(section: Any) -> str:
    """The path of the function that builds the form the section names; "" for the model's own form."""
    name = form_name(section)
    return FORMS[name][0] if name in FORMS else name


def resolve_section(section: Any) -> dict:
    """`section` with every default of a registered form filled in (a function's parameters are kept as they are)."""
    name = form_name(section)
    return with_defaults(section, name, FORMS[name][1] if name in FORMS else {})


def section_rules(section: Any) -> list:
    """(key, ok, message) rules of the section itself: a known name or a dotted path, and a built-in form's
    parameters (each one it takes, of its type). Whether a function imports and takes its parameters is
    core/config_rules.py's check."""
    name = form_name(section)
    params = {k: v for k, v in dict(section).items() if k != "name"}
    rules = [(f"{KEY}.name", not name or name in FORMS or is_path(name),
              f"must be '' (the model's own form), one of {list(FORMS)} or a dotted path 'package.module:function'")]
    if is_path(name) or not rules[0][1]:
        return rules
    return rules + param_rules(KEY, name, "form", FORMS[name][1] if name else {}, params)


def describe() -> list:
    """(dotted key, default, help) rows for `--help`: one per form, then each built-in form's parameters."""
    rows = [(f"{KEY}.name={name or repr('')}", "", what) for name, what in WHAT.items()]
    for name, (_, table) in FORMS.items():
        rows += [(f"{KEY}.{param}", spec.default, f"Form {name!r}: {spec.help}") for param, spec in table.items()]
    return rows


def old_keys_in(rollout: Optional[dict]) -> list:
    """The old keys a `rollout` subtree (nested dicts) sets: `judgment`, `reasoning_budget`, `response_form` as a
    string."""
    if not isinstance(rollout, dict):
        return []
    return ([f"rollout.judgment={rollout['judgment']}"] if "judgment" in rollout else []) + \
        (["rollout.reasoning_budget"] if "reasoning_budget" in rollout else []) + \
        ([f"rollout.response_form={rollout['response_form']}"] if isinstance(rollout.get("response_form"), str)
         else [])


def refusal(old: str) -> str:
    """One line: what the old key `old` is now."""
    if old.startswith("rollout.judgment="):
        value = old.split("=", 1)[1]
        if value == "forced":
            return f"{old}: rollout.judgment moved to {KEY}.name; set {KEY}.name=forced_judgment"
        return (f"{old}: rollout.judgment moved to {KEY}.name; leave it out ({KEY}.name='', the model's own form) "
                f"or set {KEY}.name=free_text")
    if old == "rollout.reasoning_budget":
        return f"rollout.reasoning_budget moved to {KEY}.reasoning_budget (with {KEY}.name=forced_judgment)"
    return f"{old}: {KEY} is a section now; set {KEY}.name={old.split('=', 1)[1]}"


def migrate(tree: dict) -> dict:
    """A config tree (nested dicts, a run folder's config.yaml) with the old keys moved into the section: the name is
    the string `response_form`, else `forced_judgment` with `judgment: forced`, else '' (the model's own); a forced
    judgment keeps its `reasoning_budget` as the form's parameter (another form had none: it goes)."""
    rollout = tree.get("rollout") if isinstance(tree, dict) else None
    if not old_keys_in(rollout):
        return tree
    rollout = dict(rollout)
    judgment = rollout.pop("judgment", "free")
    budget = rollout.pop("reasoning_budget", None)
    form = rollout.get("response_form")
    name = form if isinstance(form, str) and form else ("forced_judgment" if judgment == "forced" else "")
    section = dict(form) if isinstance(form, dict) else {"name": name}
    if form_name(section) == "forced_judgment" and budget is not None:
        section.setdefault("reasoning_budget", budget)
    rollout["response_form"] = section
    return {**tree, "rollout": rollout}


__all__ = ["KEY", "FORMS", "WHAT", "form_name", "is_path", "form_params", "function_path", "resolve_section",
           "section_rules", "describe", "old_keys_in", "refusal", "migrate"]
