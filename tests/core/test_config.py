"""The config schema: YAML files load, overrides apply, bad keys and types are rejected by name."""
import re

import pytest

from core.config import CONFIG_DIR, ConfigError, describe, from_yaml, load_config, to_yaml


@pytest.mark.parametrize("name", sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))
def test_every_shipped_config_loads_and_round_trips(name):
    cfg = load_config(name)
    assert from_yaml(to_yaml(cfg)) == cfg


def test_override_applies_with_type():
    cfg = load_config("selector", ["rollout.temperature=1.5", "steps=3", "learner.zero_stage=3"])
    assert cfg.rollout.temperature == 1.5 and cfg.steps == 3 and cfg.learner.zero_stage == 3


@pytest.mark.parametrize("override, key", [
    (["rollout.bogus=1"], "rollout.bogus"),
    (["bogus=1"], "bogus"),
    (["steps=abc"], "steps"),
    (["learner.zero_stage=1"], "learner.zero_stage"),
    (["algorithm.advantage.name=ppo"], "algorithm.advantage.name"),
    (["data.max_candidates=17"], "data.max_candidates"),
    (["data.min_candidates=1"], "data.min_candidates"),
    (["algorithm.eps_low=1.5"], "algorithm.eps_low"),
    (["max_staleness=-1"], "max_staleness"),
    (["data.source=file"], "data.path"),
    (["algorithm.advantage.name=maxk", "algorithm.advantage.k=99"], "algorithm.advantage.k"),
    (["algorithm.advantage.name=maxk", "algorithm.advantage.k=8"], "algorithm.advantage.k"),
    (["algorithm.advantage.name=bon_rlb"], "algorithm.advantage.name"),
    (["weight_sync.transport.name=mpi"], "weight_sync.transport.name"),
    (["weight_sync.transport.name=nccl"], "weight_sync.transport.name"),
    (["eval_knockout_window=1"], "eval_knockout_window"),
    (["checkpoint_every=-1"], "checkpoint_every"),
    (["data.max_candidates=12"], "data.max_candidates"),
    (["tiny.pretrain.solution_check=true"], "tiny.pretrain.solution_check"),
    (["curriculum.max_candidates=1"], "curriculum.max_candidates"),
    (["curriculum.max_candidates=-2"], "curriculum.max_candidates"),
    (["data.train_max_candidates=1"], "data.train_max_candidates"),
    (["data.train_max_candidates=9"], "data.train_max_candidates"),
    (["tiny.sample_index_only=true"], "tiny.sample_index_only"),
])
def test_bad_values_are_rejected_naming_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config("selector", override)


def test_malformed_override_and_unknown_config():
    with pytest.raises(ConfigError, match="key=value"):
        load_config("selector", ["steps"])
    with pytest.raises(ConfigError, match="not found"):
        load_config("no-such-config")


def test_every_field_is_documented():
    rows = describe()
    undocumented = [key for key, _, help_text in rows if not help_text]
    assert rows and not undocumented


@pytest.mark.parametrize("name, group_size", [("paper_math", 16), ("paper_code", 8)])
def test_paper_scale_configs_carry_the_papers_settings(name, group_size):
    """GenSelect (arXiv 2602.02143) settings; they need GPUs, so here they are only validated and planned."""
    from cluster.placement import check_fits, plan

    cfg = load_config(name)
    assert (cfg.prompts_per_step, cfg.rollout.samples_per_prompt) == (128, group_size)
    assert (cfg.rollout.temperature, cfg.rollout.top_p, cfg.rollout.max_response_tokens) == (1.5, 1.0, 16384)
    assert (cfg.learner.lr, cfg.algorithm.eps_low, cfg.algorithm.eps_high) == (1e-6, 0.2, 0.28)
    assert cfg.algorithm.dynamic_sampling and cfg.algorithm.overlong_buffer_len > 0
    assert (cfg.data.min_candidates, cfg.data.max_candidates, cfg.data.prompts_per_problem) == (2, 16, 4)
    placement = plan(cfg.learner, cfg.rollout, cfg.verifier, cfg.cluster)
    pins = {"learner_node": 1.0, "rollout_node": 1.0, "verifier_node": 1.0}
    check_fits(placement, {"CPU": 200.0, "GPU": 16.0, **pins})
    with pytest.raises(Exception, match="GPU needed"):
        check_fits(placement, {"CPU": 200.0, "GPU": 8.0, **pins})
    with pytest.raises(Exception, match="no node offers learner_node"):
        check_fits(placement, {"CPU": 200.0, "GPU": 16.0})


# ---- off-policy correction by default, sampling and dtype consistency ----------------------------------------
@pytest.mark.parametrize("overrides, expected", [
    (["max_staleness=1"], "proximal"),                                              # one-step-off-policy
    (["max_staleness=0"], "behaviour"),                                             # on-policy, same dtype
    (["max_staleness=0", "model.dtype=bfloat16"], "proximal"),                      # engine != learner numerics
    (["max_staleness=0", "model.dtype=bfloat16", "learner.dtype=bfloat16"], "behaviour"),
    (["max_staleness=1", "algorithm.ratio_reference=behaviour"], "behaviour"),      # explicit choice kept
    (["max_staleness=0", "algorithm.ratio_reference=proximal"], "proximal"),
])
def test_ratio_reference_defaults_to_proximal_when_off_policy(overrides, expected):
    cfg = load_config("selector", overrides)
    assert cfg.algorithm.ratio_reference == expected
    assert from_yaml(to_yaml(cfg)) == cfg  # the run folder records the resolved objective


@pytest.mark.parametrize("name", ["paper_math", "paper_code"])
def test_paper_configs_train_with_the_decoupled_objective(name):
    cfg = load_config(name)
    assert cfg.max_staleness >= 1 and cfg.algorithm.ratio_reference == "proximal"
    assert cfg.rollout.sync_mode == "keep"  # 16K-token responses: a sync must not wait for them
    assert cfg.rollout.temperature == 1.5 and cfg.rollout.top_p == 1.0 and cfg.model.dtype == cfg.learner.dtype


@pytest.mark.parametrize("override, key", [
    (["rollout.top_p=0.9"], "rollout.top_p"),          # nucleus sampling vs a full-support learner ratio
    (["rollout.top_k=20"], "rollout.top_k"),           # no such knob: sampling is full-support
    (["rollout.temperature=0"], "rollout.temperature"),
    (["algorithm.ratio_reference=behaviour", "model.dtype=bfloat16"], "algorithm.ratio_reference"),
    (["algorithm.ratio_reference=bogus"], "algorithm.ratio_reference"),
    (["rollout.sync_mode=keep", "algorithm.ratio_reference=behaviour"], "rollout.sync_mode"),  # spans 2 versions
    (["rollout.sync_mode=abort"], "rollout.sync_mode"),
    (["rollout.response_form.name=always"], "rollout.response_form.name"),
    (["rollout.response_form.name=forced_judgment", "model.name=tiny"],
     "rollout.response_form.name"),  # the tiny model answers with the index
    (["rollout.response_form.name=forced_judgment", "rollout.response_form.reasoning_budget=-1"],
     "rollout.response_form.reasoning_budget"),
])
def test_sampling_and_dtype_mismatches_are_refused(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config("selector", override)


# ---- every estimator parameter in the config, validated before any actor starts -------------------------------
BON_BINARY = ["algorithm.overlong_filtering=true"]


@pytest.mark.parametrize("overrides, keys", [
    (["algorithm.advantage.name=bon_rlb", "verifier.reward.name=partial", *BON_BINARY],
     ["algorithm.advantage.name", "verifier.reward.name"]),
    (["algorithm.advantage.name=bon_rlb_p", "verifier.reward.name=partial", *BON_BINARY],
     ["algorithm.advantage.name", "verifier.reward.name"]),
    (["algorithm.advantage.name=maxk", "rollout.samples_per_prompt=4", "algorithm.advantage.k=4"],
     ["algorithm.advantage.k", "rollout.samples_per_prompt", "algorithm.advantage.baseline"]),
    (["algorithm.advantage.name=maxk", "rollout.samples_per_prompt=4", "algorithm.advantage.k=4",
      "algorithm.advantage.baseline=mean"], ["algorithm.advantage.k", "zero"]),
    (["algorithm.advantage.name=maxk", "rollout.samples_per_prompt=4", "algorithm.advantage.k=5",
      "algorithm.advantage.baseline=none"], ["algorithm.advantage.k", "rollout.samples_per_prompt"]),
    (["algorithm.advantage.name=maxk", "algorithm.advantage.k=0"], ["algorithm.advantage.k"]),
    (["algorithm.advantage.name=maxk", "algorithm.advantage.baseline=median"], ["algorithm.advantage.baseline"]),
    (["algorithm.advantage.name=maxk", "algorithm.advantage.log_ratio_clip=0"], ["algorithm.advantage.log_ratio_clip"]),
    (["algorithm.advantage.name=maxk", "algorithm.advantage.off_policy=true", "max_staleness=0"],
     ["algorithm.advantage.off_policy", "max_staleness"]),
    (["algorithm.advantage.off_policy=true", "max_staleness=1"],
     ["algorithm.advantage.off_policy", "not a parameter of estimator 'grpo'"]),
    (["algorithm.advantage.name=maxk", "algorithm.advantage.k=two"], ["algorithm.advantage.k", "an int"]),
    (["algorithm.advantage.name=median"], ["algorithm.advantage.name", "package.module:Attr"]),
    (["algorithm.advantage.name=bon_rlb", *BON_BINARY, "algorithm.advantage.p_min=0.5",
      "algorithm.advantage.p_max=0.5"],
     ["algorithm.advantage.p_min", "algorithm.advantage.p_max"]),
    (["algorithm.advantage.name=bon_rlb", *BON_BINARY, "algorithm.advantage.p_max=1.5"], ["algorithm.advantage.p_min"]),
    (["algorithm.advantage.name=bon_rlb", *BON_BINARY, "algorithm.advantage.p_estimate=oracle"],
     ["algorithm.advantage.p_estimate"]),
    (["algorithm.advantage.name=bon_rlb", *BON_BINARY, "algorithm.advantage.p_estimate=loo", "algorithm.advantage.n=9",
      "rollout.samples_per_prompt=8"],
     ["algorithm.advantage.n", "rollout.samples_per_prompt", "algorithm.advantage.p_estimate"]),
    (["algorithm.advantage.name=bon_rlb_p", *BON_BINARY, "algorithm.advantage.p_estimate=loo",
      "algorithm.advantage.p_max=0.9"], ["algorithm.advantage.p_estimate", "p_max"]),
    (["algorithm.advantage.name=bon_rlb", *BON_BINARY, "algorithm.advantage.n=0"], ["algorithm.advantage.n"]),
    (["algorithm.advantage.eps=0"], ["algorithm.advantage.eps"]),
])
def test_incompatible_estimator_settings_are_refused_naming_the_keys(overrides, keys):
    with pytest.raises(ConfigError) as err:
        load_config("selector", overrides)
    for key in keys:
        assert key in str(err.value), (key, str(err.value))


@pytest.mark.parametrize("overrides, name, fields", [
    ([], "grpo", {"eps": 1e-6, "scale_by_std": True}),
    (["algorithm.advantage.scale_by_std=false", "algorithm.advantage.eps=1e-4"], "grpo",
     {"eps": 1e-4, "scale_by_std": False}),
    (["algorithm.advantage.name=maxk", "algorithm.advantage.k=3", "algorithm.advantage.baseline=mean",
      "algorithm.advantage.off_policy=true", "algorithm.advantage.log_ratio_clip=0.3", "max_staleness=1"], "maxk",
     {"k": 3, "baseline": "mean", "off_policy": True, "log_ratio_clip": 0.3}),
    (["algorithm.advantage.name=maxk", "rollout.samples_per_prompt=4", "algorithm.advantage.k=4",
      "algorithm.advantage.baseline=none"], "maxk", {"k": 4, "baseline": "none", "off_policy": False}),
    (["algorithm.advantage.name=bon_rlb", *BON_BINARY, "algorithm.advantage.n=4", "algorithm.advantage.p_min=0.1",
      "algorithm.advantage.p_max=0.9"], "bon_rlb", {"n": 4, "p_estimate": "group", "p_min": 0.1, "p_max": 0.9,
                                             "positive_only": False}),
    (["algorithm.advantage.name=bon_rlb_p", *BON_BINARY, "algorithm.advantage.n=8",
      "algorithm.advantage.p_estimate=loo"],
     "bon_rlb_p", {"n": 8, "p_estimate": "loo", "positive_only": True}),
])
def test_every_estimator_parameter_reaches_the_estimator(overrides, name, fields):
    """load_config -> core.estimators.build: each key of the section lands on the estimator's field."""
    from core import estimators

    section = load_config("selector", overrides).algorithm.advantage
    est = estimators.build_estimator(section)
    assert section["name"] == name
    assert {f: getattr(est, f) for f in fields} == fields


def test_every_estimator_field_has_a_config_parameter_with_its_default():
    """No estimator parameter is left unreachable, and the config's defaults are the classes' own: each dataclass
    field of every registered estimator is a parameter of its section, at the same default (bon_rlb_p's
    positive_only is fixed by its name)."""
    import dataclasses

    from core import estimators
    from core.algo import bon

    classes = {"grpo": bon.GRPOEstimator, "loglik": bon.LogLikEstimator, "maxk": bon.MaxKEstimator,
               "bon_rlb": bon.BoNRLBEstimator, "bon_rlb_p": bon.BoNRLBEstimator}
    assert set(classes) == set(estimators.ESTIMATORS) == set(bon.ESTIMATORS)
    for name, cls in classes.items():
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        defaults.pop("positive_only", None)
        table = {p: spec.default for p, spec in estimators.ESTIMATORS[name].items()}
        assert table == defaults, name


def test_more_than_ten_candidates_need_unconstrained_answers_with_the_tiny_model():
    cfg = load_config("selector", ["data.max_candidates=16", "rollout.constrain_index=false", "eval_round_robin=none"])
    assert cfg.data.max_candidates == 16
    # the default's round-robin evaluation reads index log-probs: without the constraint it is refused by name
    with pytest.raises(ConfigError, match="eval_round_robin"):
        load_config("selector", ["data.max_candidates=16", "rollout.constrain_index=false"])
    assert load_config("selector", ["data.max_candidates=10"]).data.max_candidates == 10


def test_sample_index_only_loads_with_the_solve_then_point_model():
    solve_point = ["tiny.model.response=solve_point", "tiny.answer_labels=true", "tiny.warm_start.target=pointer"]
    cfg = load_config("selector", [*solve_point, "tiny.sample_index_only=true"])
    assert cfg.tiny.sample_index_only and cfg.tiny.model.response == "solve_point"
    # the index model writes no solution before its index: sampling the index alone is refused by name
    with pytest.raises(ConfigError, match="tiny.sample_index_only"):
        load_config("selector", ["tiny.sample_index_only=true"])


def test_the_pick_reward_weight_is_a_share():
    from core.config import ConfigError, load_config

    assert load_config("default", ["tiny.pick_reward=0.5"]).tiny.pick_reward == 0.5
    with pytest.raises(ConfigError, match="tiny.pick_reward"):
        load_config("default", ["tiny.pick_reward=1.5"])


def test_a_config_builds_on_its_base_and_a_loop_is_refused(tmp_path):
    """`base: NAME` merges NAME's file first, then the file's own keys (nested sections merge key by key), then the
    overrides; a base that names the file again, or more than one config, is refused by name."""
    variant = tmp_path / "variant.yaml"
    variant.write_text("base: default\nrun_dir: runs/variant\ntiny:\n  train_no_cue_share: 0.5\n"
                       "  warm_start: {pointer: uniform}\n  pick_reward: 0.0\n"
                       "learner:\n  lr: 2.0e-4\n")
    point, default = load_config(str(variant), ["run_dir=x"]), load_config("default", ["run_dir=x"])
    assert load_config(str(variant)).run_dir == "runs/variant"
    assert point.tiny.warm_start.pointer == "uniform" and point.learner.lr == 2.0e-4
    assert point.tiny.train_no_cue_share == 0.5 and point.tiny.pick_reward == 0.0
    assert point.tiny.pretrain == default.tiny.pretrain and point.algorithm == default.algorithm
    assert point.tiny.warm_start.steps == default.tiny.warm_start.steps  # the base's other keys of that section
    assert point != default
    again = [f"tiny.warm_start.pointer={default.tiny.warm_start.pointer}", f"learner.lr={default.learner.lr}",
             f"tiny.pick_reward={default.tiny.pick_reward}",
             f"tiny.train_no_cue_share={default.tiny.train_no_cue_share}"]
    assert load_config(str(variant), ["run_dir=x", *again]) == default
    child = tmp_path / "child.yaml"
    child.write_text(f"base: {tmp_path / 'parent.yaml'}\nsteps: 7\n")
    (tmp_path / "parent.yaml").write_text(f"base: {child}\nsteps: 5\n")
    with pytest.raises(ConfigError, match="loops back"):
        load_config(str(child))
    (tmp_path / "parent.yaml").write_text("base: [default, smoke]\n")
    with pytest.raises(ConfigError, match="must name one config"):
        load_config(str(child))
    (tmp_path / "parent.yaml").write_text("base: smoke\nsteps: 5\n")
    assert load_config(str(child)).steps == 7 and load_config(str(child)).model == load_config("smoke").model


def test_cache_key_settings_leave_out_later_keys_only_at_their_defaults():
    from core.config import cache_key_settings
    from tiny_recipe.config import WarmStartConfig

    plain = cache_key_settings(WarmStartConfig(), {"pool": 0})
    assert "pool" not in plain and plain["steps"] == WarmStartConfig().steps
    assert cache_key_settings(WarmStartConfig(pool=800), {"pool": 0})["pool"] == 800
    assert cache_key_settings({"a": 1, "b": 2}, {"a": 1, "c": 3}) == {"b": 2}


def test_help_lists_the_system_keys_apart_from_the_tiny_recipe_keys(capsys):
    """`--help` prints every key once, the embedded tiny recipe's (the `tiny:` section) after the system's, and each
    named recipe key exists."""
    from core.config import RECIPE_KEY_PREFIXES, is_recipe_key
    from driver.train import main

    keys = [key for key, _, _ in describe()]
    assert all(any(k.startswith(p) for k in keys) for p in RECIPE_KEY_PREFIXES)
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    system, recipe = out.split("The embedded tiny recipe's keys")
    printed = lambda text: re.findall(r"^  (\S+) = ", text, flags=re.MULTILINE)  # noqa: E731
    assert sorted(printed(system) + printed(recipe)) == sorted(keys)
    assert printed(recipe) and all(is_recipe_key(k) for k in printed(recipe))
    assert not any(is_recipe_key(k) for k in printed(system)) and "algorithm.eps_high" in printed(system)
    assert RECIPE_KEY_PREFIXES == ("tiny.",) and all(k.startswith("tiny.") for k in printed(recipe))
    assert keys.index(printed(recipe)[0]) > keys.index(printed(system)[-1])  # the recipe's section comes last


@pytest.mark.parametrize("override,moved,set_key", [
    ("model.pretrain.steps=40", "model.pretrain moved to tiny.pretrain", "tiny.pretrain.steps"),
    ("model.seed=3", "model.seed moved to tiny.seed", "tiny.seed"),
    ("model.tiny.response=pick_point", "model.tiny moved to tiny.model", "tiny.model.response"),
    ("model.warm_start={steps: 5}", "model.warm_start moved to tiny.warm_start", "tiny.warm_start"),
    ("data.answer_labels=true", "data.answer_labels moved to tiny.answer_labels", "tiny.answer_labels"),
    ("data.train_no_cue_share=0.5", "data.train_no_cue_share moved to tiny.train_no_cue_share",
     "tiny.train_no_cue_share"),
    ("rollout.sample_index_only=true", "rollout.sample_index_only moved to tiny.sample_index_only",
     "tiny.sample_index_only"),
    ("verifier.pick_reward=0.5", "verifier.pick_reward moved to tiny.pick_reward", "tiny.pick_reward"),
    ("algorithm.anchor_corpus_rows=4", "algorithm.anchor_corpus_rows moved to tiny.anchor_corpus_rows",
     "tiny.anchor_corpus_rows"),
    ("model={seed: 3}", "model.seed moved to tiny.seed", "tiny.seed"),
])
def test_a_key_that_moved_under_tiny_is_refused_naming_its_new_path(override, moved, set_key):
    """The tiny recipe's keys live under `tiny:` (tiny_recipe/config.py MOVED_KEYS); an old path, as an override or in a
    YAML file, is a one-line error naming where it went, not a generic unknown key."""
    with pytest.raises(ConfigError, match=f"^override {re.escape(repr(override))}: {re.escape(moved)} ") as err:
        load_config("default", [override])
    assert "\n" not in str(err.value) and f"set {set_key} " in str(err.value)


def test_a_config_file_with_a_moved_key_is_refused_and_an_old_run_config_is_read_moved(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text("base: selector\nmodel:\n  pretrain: {steps: 40}\n")
    with pytest.raises(ConfigError, match=r"model\.pretrain moved to tiny\.pretrain"):
        load_config(str(old))
    old.write_text("data:\n  solution_end_line: true\n")
    with pytest.raises(ConfigError, match=r"data\.solution_end_line moved to tiny\.solution_end_line"):
        load_config(str(old))
    # a run folder's config.yaml written before the move (resume, serving) is read with its keys moved
    from omegaconf import OmegaConf

    cfg = load_config("default")
    tree = OmegaConf.to_container(OmegaConf.create(to_yaml(cfg)))
    recipe = tree.pop("tiny")
    tree["model"].update(tiny=recipe["model"], seed=recipe["seed"], pretrain=recipe["pretrain"],
                         warm_start=recipe["warm_start"])
    tree["data"].update({k: recipe[k] for k in ("train_no_cue_share", "answer_labels", "line_labels",
                                                "solution_end_line")})
    tree["rollout"]["sample_index_only"] = recipe["sample_index_only"]
    tree["verifier"]["pick_reward"] = recipe["pick_reward"]
    tree["algorithm"]["anchor_corpus_rows"] = recipe["anchor_corpus_rows"]
    assert from_yaml(OmegaConf.to_yaml(OmegaConf.create(tree))) == cfg


def test_a_forced_judgment_must_fit_its_reasoning_budget_in_the_response():
    """rollout.response_form.reasoning_budget plus the forced judgment's tokens fits rollout.max_response_tokens, or
    the key is named before any actor starts."""
    smollm2 = ["model.name=smollm2-135m", "rollout.response_form.name=forced_judgment",
               "rollout.max_response_tokens=72"]
    cfg = load_config("selector", smollm2 + ["rollout.response_form.reasoning_budget=64"])
    assert cfg.rollout.response_form == {"name": "forced_judgment", "reasoning_budget": 64}
    with pytest.raises(ConfigError, match=r"rollout\.response_form\.reasoning_budget=65 .*max_response_tokens=72"):
        load_config("selector", smollm2 + ["rollout.response_form.reasoning_budget=65"])
    # a budget left out reads the form's default (the resolved config shows it)
    assert load_config("selector", smollm2).rollout.response_form == {"name": "forced_judgment", "reasoning_budget": 0}
