"""The advantage estimators a config can name: one section, `algorithm.advantage: {name, ...params}`.

    algorithm:
      advantage:
        name: maxk          # a registered name (ESTIMATORS), or `package.module:Attr` for your own
        k: 4                # that estimator's parameters; the ones left out keep their defaults
        baseline: loo

The parameters belong to the name: a config layer (a YAML file after its `base:`, or an override) that names another
estimator starts the section afresh, so a parameter of the previous estimator is not carried over.
`resolve_section` fills in every default, so a run's config.yaml shows each parameter the run used.

Registered: `grpo` (DAPO's group-normalised advantage), `loglik` ((r - mean) / mean, the gradient of log P(success)),
`maxk` (arXiv 2510.23393), `bon_rlb` and `bon_rlb_p` (arXiv 2412.15287); the math is core/algo/bon.py, whose
classes take exactly these parameters (a test keeps the defaults equal). A user estimator, named by its dotted path,
is a callable taking the section's parameters as keywords and returning an object with
`advantages(rewards, seq_log_ratio=None) -> advantages` (tensors (num_groups, G)) and, when it needs the learner's
sequence log-ratio, `needs_seq_log_ratio = True` (docs/algorithms.md).

Old flat keys (`algorithm.advantage_estimator`, `algorithm.maxk_k`, ...) are refused with the new key's name
(`refusal`), and a run folder's config written with them is read with them moved (`migrate`).

Pure: stdlib only (the estimator classes, which need torch, are imported only by `build_estimator`).
"""
from __future__ import annotations

from typing import Any

from core.plugins import PluginError, callable_check, load_object
from core.section_params import Param, with_defaults

KEY = "algorithm.advantage"




#: name -> {parameter: Param}; the names are what `algorithm.advantage.name` accepts besides a dotted path
ESTIMATORS = {
    "grpo": {
        "eps": Param(1e-6, "eps in (r - mean) / (std + eps)."),
        "scale_by_std": Param(True, "Divide by the group's std (false: centring only, as in Dr. GRPO)."),
    },
    "loglik": {
        "floor": Param(1e-6, "A group whose mean reward is at most this gives zero advantages (nothing solved)."),
    },
    "maxk": {
        "k": Param(4, "k of max@k = E[max reward of k samples] (docs/algorithms.md). Needs k < "
                      "rollout.samples_per_prompt (k <= it with baseline='none')."),
        "baseline": Param("loo", "'loo' (k times the leave-one-out max@k of the other samples: exactly unbiased, "
                                 "advantages sum to 0), 'mean' (GRPO-style centring: the gradient shrinks by 1 - k/G) "
                                 "or 'none'.", ("loo", "mean", "none")),
        "off_policy": Param(False, "Correct for stale samples with the paper's first-order off-policy weights w' "
                                   "(arXiv 2510.23393), from the sequence log-ratio log pi - log mu (the learner's "
                                   "current log-probs minus the engine's behaviour log-probs, summed over response "
                                   "tokens; one extra learner forward pass per step). Needs max_staleness >= 1."),
        "log_ratio_clip": Param(0.5, "With off_policy: the sequence log-ratio is clamped to [-clip, clip] (the "
                                     "correction is first order in rho - 1)."),
    },
}
_BON = {
    "n": Param(8, "N of the Best-of-N objective 1 - p^N (p = failure probability; arXiv 2412.15287). Binary rewards "
                  "only."),
    "p_estimate": Param("group", "How p is estimated per prompt. 'group': plug-in failure fraction of the group "
                                 "(biased for N >= 2, weight clipped to [p_min, p_max]); 'loo': leave-one-out, exactly "
                                 "unbiased, needs n <= rollout.samples_per_prompt.", ("group", "loo")),
    "p_min": Param(0.0, "With p_estimate='group': lower clip of the p in the weight N p^(N-1) (the baseline keeps "
                        "the unclipped p)."),
    "p_max": Param(1.0, "With p_estimate='group': upper clip of the p in the weight; must exceed p_min."),
}
ESTIMATORS["bon_rlb"] = dict(_BON)
ESTIMATORS["bon_rlb_p"] = dict(_BON)

#: where each old flat key of `algorithm` went: old name -> (estimator, parameter)
OLD_KEYS = {"grpo_eps": ("grpo", "eps"), "grpo_scale_by_std": ("grpo", "scale_by_std"),
            "maxk_k": ("maxk", "k"), "maxk_baseline": ("maxk", "baseline"), "maxk_off_policy": ("maxk", "off_policy"),
            "maxk_log_ratio_clip": ("maxk", "log_ratio_clip"), "bon_n": ("bon_", "n"),
            "bon_p_estimate": ("bon_", "p_estimate"), "bon_p_min": ("bon_", "p_min"), "bon_p_max": ("bon_", "p_max")}


def is_path(name: str) -> bool:
    """Whether `name` names user code (`package.module:Attr`) rather than a registered estimator."""
    return ":" in str(name)


def section_errors(section: dict, user_code: bool = True) -> list:
    """(key, message) of what is wrong with `section` ({name, ...params}): an unknown name, a parameter the estimator
    does not take, a value of the wrong type or outside its choices; with `user_code`, a dotted path that does not
    import or whose object does not build into an estimator with these parameters."""
    name = section.get("name")
    params = {k: v for k, v in section.items() if k != "name"}
    if not isinstance(name, str) or not name:
        return [(f"{KEY}.name", f"must name an estimator: one of {sorted(ESTIMATORS)} or 'package.module:Attr'")]
    if is_path(name):
        return _user_errors(name, params) if user_code else []
    if name not in ESTIMATORS:
        return [(f"{KEY}.name", f"is not an estimator: one of {sorted(ESTIMATORS)}, or 'package.module:Attr' for "
                                f"your own")]
    errors = []
    for param, value in params.items():
        spec = ESTIMATORS[name].get(param)
        where = f"{KEY}.{param}"
        if spec is None:
            errors.append((where, f"is not a parameter of estimator {name!r} (its parameters: "
                                  f"{', '.join(ESTIMATORS[name]) or 'none'})"))
        elif not _fits(value, spec.default):
            kind = {bool: "a bool", int: "an int", float: "a number", str: "a string"}[type(spec.default)]
            errors.append((where, f"must be {kind} (estimator {name!r})"))
        elif spec.choices and value not in spec.choices:
            errors.append((where, f"must be one of {list(spec.choices)} (estimator {name!r})"))
    return errors


def _fits(value: Any, default: Any) -> bool:
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, type(default)) and not (isinstance(value, bool) and not isinstance(default, bool))


def _user_errors(path: str, params: dict) -> list:
    """Errors of a user estimator: the path must import, build with `params`, and give `advantages`."""
    where = f"{KEY}.name"
    try:
        factory = load_object(path, where, callable_check)
    except PluginError as err:
        return [(where, err.reason)]
    try:
        estimator = factory(**params)
    except Exception as err:  # noqa: BLE001 -- the user's constructor refused the parameters: one line, the cause
        return [(where, f"{path} did not build with the parameters {params}: {type(err).__name__}: {err}")]
    if not callable(getattr(estimator, "advantages", None)):
        return [(where, f"{path}(**params) gave a {type(estimator).__name__} without an advantages(rewards, "
                        f"seq_log_ratio=None) method")]
    return []


def resolve_section(section: dict) -> dict:
    """`section` with every default of a registered estimator filled in (a user estimator's is kept as it is)."""
    name = section["name"]
    if is_path(name):
        return dict(section)
    return with_defaults(section, name, ESTIMATORS[name])


def params(section: dict) -> dict:
    """The estimator's keyword parameters: the resolved section without its name."""
    return {k: v for k, v in resolve_section(section).items() if k != "name"}


def build_estimator(section: dict):
    """The estimator object the section names (core/algo/bon.py's `make_estimator`, or the user's factory)."""
    name = section["name"]
    if is_path(name):
        return load_object(name, f"{KEY}.name", callable_check)(**params(section))
    from core.algo.bon import make_estimator

    return make_estimator(name, **params(section))


def describe() -> list:
    """(dotted key, default, help) of every registered estimator's parameters, for `--help`."""
    rows = []
    for name, table in ESTIMATORS.items():
        sharing = [other for other, its in ESTIMATORS.items() if its == table]  # bon_rlb and bon_rlb_p
        if sharing[0] == name:
            label = "Estimator" + ("s " if len(sharing) > 1 else " ") + ", ".join(repr(n) for n in sharing)
            rows += [(f"{KEY}.{param}", spec.default, f"{label}: {spec.help}") for param, spec in table.items()]
    return rows


def refusal(old: str) -> str:
    """The one-line message for a config that sets the old flat key `algorithm.<old>`, naming its new place."""
    if old == "advantage_estimator":
        return f"algorithm.advantage_estimator moved to {KEY}.name (the estimator's parameters sit beside it)"
    estimator, param = OLD_KEYS[old]
    names = "bon_rlb or bon_rlb_p" if estimator == "bon_" else estimator
    return f"algorithm.{old} moved to {KEY}.{param} (with {KEY}.name={names})"


def old_keys_in(algorithm: Any) -> list:
    """The old flat keys a config's `algorithm` section (a dict) sets."""
    if not isinstance(algorithm, dict):
        return []
    return [k for k in algorithm if k == "advantage_estimator" or k in OLD_KEYS]


def migrate(tree: dict) -> dict:
    """A config tree (nested dicts) written with the old flat keys, with them moved into `algorithm.advantage`:
    the chosen estimator's keys become its parameters, the other estimators' keys (written at their defaults) go."""
    algorithm = tree.get("algorithm") if isinstance(tree, dict) else None
    if not old_keys_in(algorithm):
        return tree
    algorithm = dict(algorithm)
    name = algorithm.pop("advantage_estimator", "grpo")
    section = {"name": name}
    for old in [k for k in algorithm if k in OLD_KEYS]:
        estimator, param = OLD_KEYS[old]
        value = algorithm.pop(old)
        if name == estimator or (estimator == "bon_" and name.startswith("bon_")):
            section[param] = value
    algorithm["advantage"] = section
    return {**tree, "algorithm": algorithm}


__all__ = ["KEY", "Param", "ESTIMATORS", "OLD_KEYS", "is_path", "section_errors", "resolve_section", "params",
           "build_estimator", "describe", "refusal", "old_keys_in", "migrate"]
