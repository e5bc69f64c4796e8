"""The rules a loaded config must obey beyond its types (`check`: ConfigError naming the key), the values derived
after them (`resolve`)."""
from __future__ import annotations

from typing import Any

from core import recipe_sections
from core.config_schema import TrainConfig
from core import label_functions, response_forms, rewards
from core.rewards import reward_name
from core import weight_transports


class ConfigError(ValueError):
    """A config that cannot be used; the message names the offending key."""


_CHOICES = {
    "task": ("selector", "generator"),
    "model.dtype": ("float32", "bfloat16"),
    "learner.dtype": ("float32", "bfloat16"),
    "data.source": ("procedural_math", "reasoning_gym", "humaneval", "file", "model"),
    "data.generator_problems": ("procedural_math", "reasoning_gym", "humaneval", "file"),
    "data.bad_rows": ("skip", "error"),
    "verifier.sandbox_backend": ("bubblewrap", "docker"),
    "learner.zero_stage": (2, 3),
    "learner.lr_schedule": ("constant", "linear", "cosine"),
    "algorithm.ratio_reference": ("auto", "behaviour", "proximal"),
    "rollout.sync_mode": ("drain", "keep"),
    "cluster.placement_strategy": ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"),
}


def _response_form_rules(cfg: TrainConfig) -> list:
    """(key, ok, message) rules of `rollout.response_form` (core/response_forms.py): its name and a built-in form's
    parameters; the forced judgment's budget (actors/rollout/forced_judgment.py) fits the response, and the form is
    for a selector of a chat model."""
    from core.chat import FORCED_TOKENS_RESERVE

    r, key = cfg.rollout, response_forms.KEY
    rules = response_forms.section_rules(r.response_form)
    if not all(ok for _, ok, _ in rules) or response_forms.form_name(r.response_form) != "forced_judgment":
        return rules
    budget = response_forms.form_params(r.response_form)["reasoning_budget"]
    return rules + [
        (f"{key}.reasoning_budget", budget >= 0, "must be >= 0 (0: the index right after the prompt)"),
        (f"{key}.reasoning_budget", budget + FORCED_TOKENS_RESERVE <= r.max_response_tokens,
         f"plus {FORCED_TOKENS_RESERVE} tokens for the forced judgment must fit in rollout.max_response_tokens="
         f"{r.max_response_tokens}"),
        (f"{key}.name", cfg.model.name != "tiny",
         "'forced_judgment' is for models that reason in free text (a chat template); the tiny model answers with "
         "the index alone or through its own response forms"),
        (f"{key}.name", cfg.task == "selector", "'forced_judgment' applies to a selector (task=selector)"),
    ]


def check(cfg: TrainConfig, user_code: bool = True) -> None:
    """Semantic checks that types alone cannot express; raise ConfigError naming the key. `user_code`: import the
    user functions the config names and check their interfaces (False for a run's own config read back). The recipes'
    sections (core/recipe_sections.py) are checked after the system's keys, by their own choices and rules."""
    for key, ok, message in recipe_sections.availability_rules(cfg, user_code):
        if not ok:
            raise ConfigError(f"{key}={_get(cfg, key)!r} {message}")
    for key, choices in {**_CHOICES, **recipe_sections.choices()}.items():
        value = _get(cfg, key)
        if value not in choices:
            raise ConfigError(f"{key}={value!r} is not one of {list(choices)}")
    d, r, a = cfg.data, cfg.rollout, cfg.algorithm
    rules = [
        *_transport_rules(cfg, user_code),
        ("data.generator", d.source != "model" or bool(d.generator),
         "is required when data.source=model (a local model folder)"),
        ("data.candidates_per_problem", d.source != "model" or d.candidates_per_problem >= 2,
         "is K, the solutions sampled per problem with data.source=model: must be >= 2"),
        ("data.min_candidates", 2 <= d.min_candidates <= d.max_candidates, "must be >= 2 and <= max_candidates"),
        ("data.max_candidates", d.max_candidates <= 16, "must be <= 16 (the paper's window)"),
        ("data.train_max_candidates", d.train_max_candidates == 0
         or d.min_candidates <= d.train_max_candidates <= d.max_candidates,
         "must be 0 (max_candidates) or between min_candidates and max_candidates"),
        ("eval_test_prompts", cfg.eval_test_prompts >= 0 and (cfg.eval_test_prompts == 0 or cfg.eval_prompts > 0),
         "must be >= 0, and 0 when eval_prompts is 0 (the validation set then takes every held-out prompt)"),
        ("eval_knockout_window", cfg.eval_knockout_window == 0 or cfg.eval_knockout_window >= 2,
         "must be 0 (off) or at least 2 (candidates per knockout group)"),
        ("serve.orders", cfg.serve.orders in (0, 1, 2), "must be 0 (the run decides), 1 or 2"),
        ("serve.selection", cfg.serve.selection in ("", "knockout", "round_robin"),
         "must be '' (the run decides), 'knockout' or 'round_robin'"),
        ("serve.max_round_robin_candidates", cfg.serve.max_round_robin_candidates >= 2, "must be >= 2"),
        ("eval_knockout_both_orders", not cfg.eval_knockout_both_orders or
         (cfg.eval_knockout_window >= 2 and cfg.rollout.constrain_index),
         "needs eval_knockout_window >= 2 and rollout.constrain_index=true (it reads the log-prob of every index)"),
        ("eval_round_robin", cfg.eval_round_robin in ("none", "answer", "candidate")
         and (cfg.eval_round_robin == "none" or cfg.rollout.constrain_index),
         "must be 'none', 'answer' or 'candidate', and anything but 'none' needs rollout.constrain_index=true (it "
         "reads the log-prob of every index)"),
        ("data.candidates_per_problem", d.candidates_per_problem >= d.min_candidates,
         "must be >= data.min_candidates"),
        ("data.max_correct_fraction", 0 < d.max_correct_fraction <= 1, "must be in (0, 1]"),
        ("data.heldout_fraction", 0 < d.heldout_fraction < 1, "must be in (0, 1)"),
        ("data.candidate_error_rate", 0 <= d.candidate_error_rate <= 1, "must be in [0, 1]"),
        ("data.hedge_wrong_rate", 0 <= d.hedge_wrong_rate <= 1, "must be in [0, 1]"),
        ("data.hedge_correct_rate", 0 <= d.hedge_correct_rate <= 1, "must be in [0, 1]"),
        ("data.path", d.source != "file" or bool(d.path), "is required when data.source=file"),
        ("data.path", d.source != "model" or d.generator_problems != "file" or bool(d.path),
         "is required when data.generator_problems=file"),
        ("data.generator_temperature", d.generator_temperature > 0, "must be > 0"),
        ("data.generator_max_tokens", d.generator_max_tokens >= 1, "must be >= 1"),
        ("data.max_rows", d.max_rows >= 0, "must be >= 0 (0: every row of the file)"),
        ("data.max_prompt_tokens", d.max_prompt_tokens >= 1, "must be >= 1"),
        ("rollout.samples_per_prompt", r.samples_per_prompt >= 2, "must be >= 2 (group advantages)"),
        ("rollout.max_response_tokens", r.max_response_tokens > a.overlong_buffer_len,
         "must exceed algorithm.overlong_buffer_len"),
        ("rollout.num_workers", r.num_workers >= 1, "must be >= 1"),
        *_response_form_rules(cfg),
        ("rollout.min_decode_tokens_per_s", r.min_decode_tokens_per_s > 0, "must be > 0"),
        ("rollout.request_timeout_s", r.request_timeout_s >= 0, "must be >= 0 (0: derived)"),
        ("rollout.max_num_batched_tokens", r.max_num_batched_tokens >= 0, "must be >= 0 (0: vLLM's default)"),
        ("weight_sync.check_every", cfg.weight_sync.check_every >= 0, "must be >= 0 (0: off)"),
        ("weight_sync.check_tolerance", cfg.weight_sync.check_tolerance > 0, "must be > 0"),
        ("weight_sync.timeout_s", cfg.weight_sync.timeout_s >= 0, "must be >= 0 (0: derived)"),
        ("weight_sync.transfer_timeout_s", cfg.weight_sync.transfer_timeout_s > 0, "must be > 0"),
        ("learner.num_ranks", cfg.learner.num_ranks >= 1, "must be >= 1"),
        ("weight_sync.transport.name", _transport(cfg) != "nccl"
         or (cfg.learner.num_gpus >= 1 and r.num_gpus >= 1),
         "nccl needs learner.num_gpus >= 1 and rollout.num_gpus >= 1 (use object_store on CPU)"),
        *_engine_backend_rules(cfg),
        *_colocated_rules(cfg),
        ("algorithm.eps_low", 0 < a.eps_low < 1, "must be in (0, 1)"),
        ("algorithm.eps_high", a.eps_high > 0, "must be > 0"),
        ("algorithm.solution_anchor", a.solution_anchor >= 0, "must be >= 0 (0 = off)"),
        ("algorithm.dual_clip_c", a.dual_clip_c > 1, "must be > 1"),
        *_estimator_rules(cfg, user_code),
        *_generator_rules(cfg),
        *_user_function_rules(cfg, user_code),
        ("algorithm.max_num_gen_batches", a.max_num_gen_batches >= 1, "must be >= 1"),
        ("rollout.top_p", r.top_p == 1.0, "must be 1.0: the learner scores the full distribution "
         "(logits / temperature), so a nucleus-renormalised behaviour policy makes the ratio wrong"),
        ("rollout.temperature", r.temperature > 0, "must be > 0 (the learner scores logits / temperature)"),
        ("algorithm.ratio_reference", a.ratio_reference != "behaviour" or cfg.model.dtype == cfg.learner.dtype,
         f"with model.dtype={cfg.model.dtype!r} != learner.dtype={cfg.learner.dtype!r}: the engine's and the "
         f"learner's numerics differ, use 'proximal' (or 'auto') or make the dtypes equal"),
        ("max_staleness", cfg.max_staleness >= 0, "must be >= 0"),
        ("rollout.sync_mode", r.sync_mode != "keep" or a.ratio_reference != "behaviour",
         "'keep' lets a response span two policy versions: the ratio must be taken against the proximal policy "
         "(algorithm.ratio_reference 'auto' or 'proximal'), not 'behaviour'"),
        ("curriculum.start_candidates", d.min_candidates <= cfg.curriculum.start_candidates <= d.max_candidates,
         "must be between data.min_candidates and data.max_candidates"),
        ("curriculum.window", cfg.curriculum.window >= 1, "must be >= 1"),
        ("curriculum.max_candidates", cfg.curriculum.max_candidates == 0 or
         cfg.curriculum.start_candidates <= cfg.curriculum.max_candidates,
         "must be 0 (the data's largest) or at least curriculum.start_candidates"),
        ("steps", cfg.steps >= 1, "must be >= 1"),
        ("serve.max_replicas", 1 <= cfg.serve.min_replicas <= cfg.serve.max_replicas or
         (cfg.serve.min_replicas == 0 and cfg.serve.max_replicas >= 1), "must be >= serve.min_replicas and >= 1"),
        ("prompts_per_step", cfg.prompts_per_step >= 1, "must be >= 1"),
        ("checkpoint_every", cfg.checkpoint_every >= 0, "must be >= 0 (0: only after the last step)"),
        ("export_every", cfg.export_every >= 0, "must be >= 0 (0: only run_dir/export at the end)"),
        *_logging_rules(cfg, user_code),
        *recipe_sections.rules(cfg),
    ]
    for key, ok, message in rules:
        if not ok:
            raise ConfigError(f"{key}={_get(cfg, key)!r} {message}")


def _estimator_rules(cfg: TrainConfig, user_code: bool = True) -> list:
    """(key, ok, message) rules of `algorithm.advantage` (core/estimators.py: its name and parameters; the math in
    core/algo/bon.py), checked before any actor starts, with the rest of the config (the group size G, the rewards,
    the staleness). A user estimator's parameters are its own to check (with `user_code`: it must build with them)."""
    from core import estimators

    section, G = cfg.algorithm.advantage, cfg.rollout.samples_per_prompt
    errors = estimators.section_errors(section, user_code)
    if errors or estimators.is_path(section["name"]):
        return [(key, False, message) for key, message in errors]
    name, p, a, key = section["name"], estimators.params(section), cfg.algorithm, estimators.KEY
    rules = []
    if name == "grpo":
        rules.append((f"{key}.eps", p["eps"] > 0, "must be > 0"))
    if name == "maxk":
        top = G if p["baseline"] == "none" else G - 1
        why = ("k samples out of G" if p["baseline"] == "none" else
               f"{key}.baseline={p['baseline']!r} needs G > k: "
               + ("the leave-one-out max@k of the other G-1 samples" if p["baseline"] == "loo"
                  else "at k = G the centred gradient is exactly zero"))
        rules += [
            (f"{key}.k", 1 <= p["k"] <= top, f"must be in [1, {top}] with rollout.samples_per_prompt={G} ({why})"),
            (f"{key}.log_ratio_clip", p["log_ratio_clip"] > 0, "must be > 0"),
            (f"{key}.off_policy", not p["off_policy"] or cfg.max_staleness >= 1,
             f"needs max_staleness >= 1 (with max_staleness={cfg.max_staleness} every sample is on-policy: "
             f"there is nothing to correct)"),
        ]
    if name == "loglik":
        rules.append((f"{key}.name", a.overlong_filtering or a.overlong_penalty_factor == 0,
                      "'loglik' needs rewards >= 0: set algorithm.overlong_filtering=true or "
                      "overlong_penalty_factor=0 (the overlong penalty is negative)"))
    if name.startswith("bon_"):
        rules += [
            (f"{key}.name", reward_name(cfg.verifier.reward) != "partial",
             f"needs binary rewards, but verifier.reward.name='partial' gives fractional ones "
             f"(use {key}.name=maxk for continuous rewards, or verifier.reward.name=binary)"),
            (f"{key}.name", a.overlong_filtering or a.overlong_penalty_factor == 0,
             "needs binary rewards: set algorithm.overlong_filtering=true or overlong_penalty_factor=0"),
            (f"{key}.n", p["n"] >= 1, "must be >= 1"),
            (f"{key}.n", p["p_estimate"] != "loo" or p["n"] <= G,
             f"must be <= rollout.samples_per_prompt={G} with {key}.p_estimate='loo' (the leave-one-out "
             f"estimate of p^(N-1) draws N-1 of the other G-1 samples)"),
            (f"{key}.p_min", 0 <= p["p_min"] < p["p_max"] <= 1,
             f"must be >= 0 and < {key}.p_max={p['p_max']} (<= 1)"),
            (f"{key}.p_estimate", p["p_estimate"] != "loo" or (p["p_min"], p["p_max"]) == (0.0, 1.0),
             f"'loo' uses no clipping: {key}.p_min={p['p_min']} / p_max={p['p_max']} would be "
             f"ignored (leave them at 0 and 1, or use p_estimate=group)"),
        ]
    return rules


PROBLEM_SOURCES = ("procedural_math", "reasoning_gym", "humaneval", "file")


def _generator_rules(cfg: TrainConfig) -> list:
    """(key, ok, message) rules of `task=generator` (the policy writes solutions; driver/generator_run.py),
    checked before any actor starts. What needs the file system (the model folder, every code problem having
    tests) is checked by `driver.generator_run.preflight`, also before any actor starts."""
    if cfg.task != "generator":
        return []
    d = cfg.data
    return [
        ("data.source", d.source in PROBLEM_SOURCES,
         f"cannot feed task=generator: the policy samples its own solutions; name where the problems come from "
         f"({', '.join(PROBLEM_SOURCES)})"),
        ("data.generator", not d.generator,
         "is the sampler of data.source=model; with task=generator the generator trained is model.name ('tiny' or "
         "a local model folder)"),
        ("model.name", cfg.model.name != "tiny" or d.source == "procedural_math",
         "with task=generator builds the embedded generator, warm-started on the worked solutions of "
         "data.source=procedural_math (give a local model folder for other problem sources)"),
        ("verifier.reward.name", reward_name(cfg.verifier.reward) != "partial" or d.source in ("humaneval", "file"),
         f"'partial' is a unit-test pass fraction, but data.source={d.source!r} has math problems (use binary)"),
        ("eval_samples", cfg.eval_samples >= 2,
         "is K, the solutions sampled per held-out problem for pass@1..pass@K with task=generator: must be >= 2"),
        ("curriculum.enabled", not cfg.curriculum.enabled,
         "must be false with task=generator (the curriculum grows the number of candidates of selection prompts)"),
        ("serve.live", not cfg.serve.live, "must be false with task=generator (the service serves a selector)"),
    ]


def _user_function_rules(cfg: TrainConfig, user_code: bool = True) -> list:
    """(key, ok, message) rules of the user functions a config names (core/user_functions.py): each must import
    and fit its interface (with `user_code`), checked here, before anything is built or started; the reward function
    scores a selector's named candidate, so it does not combine with a pick's reward or with task=generator."""
    from core.plugins import PluginError
    from core.user_functions import LABEL_FUNCTION, RESPONSE_FORM, REWARD_FUNCTION

    reward, label, form = cfg.verifier.reward, cfg.data.label_function, cfg.rollout.response_form
    rules = rewards.section_rules(reward) + label_functions.section_rules(label)
    if not all(ok for _, ok, _ in rules):
        return rules
    own_form = response_forms.form_name(form) if response_forms.is_path(response_forms.form_name(form)) else ""
    reward_function = rewards.function_path(reward)
    for interface, path, params in (
            (REWARD_FUNCTION, reward_function, tuple(rewards.reward_params(reward))),
            (LABEL_FUNCTION, label_functions.label_name(label), tuple(label_functions.label_params(label))),
            (RESPONSE_FORM, own_form, tuple(response_forms.form_params(form)) if own_form else ())):
        if path and user_code:
            try:
                interface.load(path, params)
            except PluginError as err:
                rules.append((interface.key, False, err.reason))
    if reward_function:
        rules += [
            ("verifier.reward.name", cfg.task == "selector",
             "a function scores a selector's named candidate; task=generator's solutions are scored by the built-in "
             "verifiers (binary or partial)"),
        ]
    return rules


#: The metric backends of `logging.backends` (driver/trackers.py), each with the module it imports and the package
#: that brings it (None: always installed).
LOGGING_BACKENDS = {"tensorboard": (None, None), "wandb": ("wandb", "wandb"), "mlflow": ("mlflow", "mlflow-skinny")}


def _logging_rules(cfg: TrainConfig, user_code: bool = True) -> list:
    """(key, ok, message) rules of `logging.*`: known backends, each once, W&B's mode, and (with `user_code`: a run
    about to start, not a run's config read back) the packages of the chosen backends, so a missing one stops the
    run before any actor starts."""
    import importlib.util

    backends, known = list(cfg.logging.backends), list(LOGGING_BACKENDS)
    unknown = [b for b in backends if b not in LOGGING_BACKENDS]
    rules = [("logging.backends", not unknown, f"names {unknown[0] if unknown else ''!r}, which is not one of {known}"),
             ("logging.backends", len(set(backends)) == len(backends), "names a backend twice"),
             ("logging.wandb_mode", cfg.logging.wandb_mode in ("", "online", "offline"),
              "must be '' (W&B's own setting), 'online' or 'offline'")]
    for backend in backends if user_code and not unknown else ():
        module, package = LOGGING_BACKENDS[backend]
        if module and importlib.util.find_spec(module) is None:
            rules.append(("logging.backends", False, f"names {backend!r}, but the {module} package is not installed "
                                                     f"(pip install -r requirements/cpu.txt, or gpu.txt, brings "
                                                     f"{package})"))
    return rules


def resolve_ratio_reference(requested: str, max_staleness: int, engine_dtype: str, learner_dtype: str) -> str:
    """The PPO ratio reference actually used. 'auto': 'proximal' (decoupled objective with truncated IS) when
    samples may be off-policy (`max_staleness >= 1`) or the engine's numerics differ from the learner's
    (different dtypes), else 'behaviour'. An explicit choice is kept."""
    if requested != "auto":
        return requested
    return "proximal" if max_staleness >= 1 or engine_dtype != learner_dtype else "behaviour"


def resolve(cfg: TrainConfig) -> TrainConfig:
    """Fill in derived values ('auto' settings) after `check`; the resolved config is what runs and what
    is written into the run folder."""
    cfg.algorithm.ratio_reference = resolve_ratio_reference(cfg.algorithm.ratio_reference, cfg.max_staleness,
                                                            cfg.model.dtype, cfg.learner.dtype)
    from core.deadlines import sync_deadline_s

    from core.estimators import resolve_section

    cfg.algorithm.advantage = resolve_section(cfg.algorithm.advantage)
    cfg.rollout.response_form = response_forms.resolve_section(cfg.rollout.response_form)
    cfg.weight_sync.transport = weight_transports.resolve_section(cfg.weight_sync.transport)
    cfg.weight_sync.timeout_s = sync_deadline_s(cfg)  # 0: derived from the generation limits; else kept
    return cfg


def _get(cfg: Any, dotted: str) -> Any:
    """The value at `dotted`; inside a `{name, ...params}` section (a dict) a parameter left out reads its default."""
    from core.estimators import ESTIMATORS, resolve_section

    for part in dotted.split("."):
        if isinstance(cfg, dict):
            name = cfg.get("name")
            cfg = (resolve_section(cfg) if name in ESTIMATORS else
                   response_forms.resolve_section(cfg) if name in response_forms.FORMS else
                   weight_transports.resolve_section(cfg) if name in weight_transports.TRANSPORTS else cfg).get(part)
        else:
            cfg = getattr(cfg, part)
    return cfg


def _transport(cfg: TrainConfig) -> str:
    """The name `weight_sync.transport` holds."""
    return weight_transports.transport_name(cfg.weight_sync.transport)


def _transport_rules(cfg: TrainConfig, user_code: bool = True) -> list:
    """(key, ok, message) rules of `weight_sync.transport` (core/weight_transports.py): its name and a built-in
    transport's parameters, or (with `user_code`) a class named by its path that imports and takes
    `cls(cfg, **params)`."""
    rules = weight_transports.section_rules(cfg.weight_sync.transport)
    if all(ok for _, ok, _ in rules):
        reason = weight_transports.check_transport(cfg.weight_sync.transport, user_code)
        rules.append((f"{weight_transports.KEY}.name", not reason, reason))
    return rules


def _engine_backend_rules(cfg: TrainConfig) -> list:
    """rollout.attention_backend / model_runner: a choice the engine can run with model.dtype, on a GPU when
    rollout.num_gpus > 0 (core/engine_backends.py)."""
    from core.engine_backends import choose

    try:
        choose(cfg.rollout.attention_backend, cfg.rollout.model_runner, cfg.model.dtype, cfg.rollout.num_gpus > 0)
    except ValueError as err:  # "rollout.KEY='VALUE' reason": the rule prints the key and value itself
        key, _, rest = str(err).partition("=")
        return [(key, False, rest.split(" ", 1)[1])]
    return []


# Colocated (weight_sync.transport.name=ipc): the most of one GPU's memory vLLM may take when the learner shares it
# and no explicit KV-cache size is given (vLLM sizes its cache as a fraction of the whole GPU, measured at its
# start).
COLOCATED_MAX_GPU_UTILIZATION = 0.5


def _colocated_rules(cfg: TrainConfig) -> list:
    """weight_sync.transport.name=ipc: one learner rank and one engine sharing one GPU, with the memory split explicit
    (or both on CPU, on one node)."""
    if _transport(cfg) != "ipc":
        return []
    r, lr = cfg.rollout, cfg.learner
    on_cpu = lr.num_gpus == 0 and r.num_gpus == 0  # the shm channel: bucket files on the node's /dev/shm
    return [
        ("weight_sync.transport.name", on_cpu or (lr.num_gpus > 0 and r.num_gpus > 0 and lr.num_gpus + r.num_gpus <= 1),
         f"'ipc' shares one GPU: learner.num_gpus + rollout.num_gpus must be > 0 each and at most 1 together, or "
         f"both 0 on CPU (got {lr.num_gpus:g} + {r.num_gpus:g})"),
        ("weight_sync.transport.name", lr.num_ranks == 1 and r.num_workers == 1,
         f"'ipc' colocates one learner rank with one engine (got learner.num_ranks={lr.num_ranks}, "
         f"rollout.num_workers={r.num_workers})"),
        ("rollout.gpu_memory_utilization", on_cpu or r.kv_cache_memory_bytes > 0
         or r.gpu_memory_utilization <= COLOCATED_MAX_GPU_UTILIZATION,
         f"with weight_sync.transport.name=ipc the learner shares the GPU: set rollout.kv_cache_memory_bytes, or "
         f"rollout.gpu_memory_utilization at most {COLOCATED_MAX_GPU_UTILIZATION}"),
        ("cluster.placement_strategy", cfg.cluster.placement_strategy == "STRICT_PACK",
         "must be STRICT_PACK with weight_sync.transport.name=ipc: the learner and the engine share one node (and its "
         "GPU)"),
        ("rollout.kv_cache_memory_bytes", r.kv_cache_memory_bytes >= 0, "must be >= 0 (0: from "
         "gpu_memory_utilization)"),
    ]
