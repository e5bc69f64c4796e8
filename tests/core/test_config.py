"""The config schema: YAML files load, overrides apply, bad keys and types are rejected by name."""
import pytest

from core.config import CONFIG_DIR, ConfigError, describe, from_yaml, load_config, to_yaml


@pytest.mark.parametrize("name", sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))
def test_every_shipped_config_loads_and_round_trips(name):
    cfg = load_config(name)
    assert from_yaml(to_yaml(cfg)) == cfg


def test_override_applies_with_type():
    cfg = load_config("default", ["rollout.temperature=1.5", "steps=3", "learner.zero_stage=3"])
    assert cfg.rollout.temperature == 1.5 and cfg.steps == 3 and cfg.learner.zero_stage == 3


@pytest.mark.parametrize("override, key", [
    (["rollout.bogus=1"], "rollout.bogus"),
    (["bogus=1"], "bogus"),
    (["steps=abc"], "steps"),
    (["learner.zero_stage=1"], "learner.zero_stage"),
    (["algorithm.advantage_estimator=ppo"], "algorithm.advantage_estimator"),
    (["data.max_candidates=17"], "data.max_candidates"),
    (["data.min_candidates=1"], "data.min_candidates"),
    (["algorithm.eps_low=1.5"], "algorithm.eps_low"),
    (["max_staleness=-1"], "max_staleness"),
    (["data.source=file"], "data.path"),
    (["algorithm.advantage_estimator=maxk", "algorithm.maxk_k=99"], "algorithm.maxk_k"),
    (["algorithm.advantage_estimator=maxk", "algorithm.maxk_k=8"], "algorithm.maxk_k"),
    (["algorithm.advantage_estimator=bon_rlb"], "algorithm.advantage_estimator"),
    (["weight_sync.backend=gloo"], "weight_sync.backend"),
    (["weight_sync.backend=nccl"], "weight_sync.backend"),
])
def test_bad_values_are_rejected_naming_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config("default", override)


def test_malformed_override_and_unknown_config():
    with pytest.raises(ConfigError, match="key=value"):
        load_config("default", ["steps"])
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


# ---- issue #10: off-policy correction by default (item 3), sampling and dtype consistency (item 4) ---------
@pytest.mark.parametrize("overrides, expected", [
    (["max_staleness=1"], "proximal"),                                              # one-step-off-policy
    (["max_staleness=0"], "behaviour"),                                             # on-policy, same dtype
    (["max_staleness=0", "model.dtype=bfloat16"], "proximal"),                      # engine != learner numerics
    (["max_staleness=0", "model.dtype=bfloat16", "learner.dtype=bfloat16"], "behaviour"),
    (["max_staleness=1", "algorithm.ratio_reference=behaviour"], "behaviour"),      # explicit choice kept
    (["max_staleness=0", "algorithm.ratio_reference=proximal"], "proximal"),
])
def test_ratio_reference_defaults_to_proximal_when_off_policy(overrides, expected):
    cfg = load_config("default", overrides)
    assert cfg.algorithm.ratio_reference == expected
    assert from_yaml(to_yaml(cfg)) == cfg  # the run folder records the resolved objective


@pytest.mark.parametrize("name", ["paper_math", "paper_code"])
def test_paper_configs_train_with_the_decoupled_objective(name):
    cfg = load_config(name)
    assert cfg.max_staleness >= 1 and cfg.algorithm.ratio_reference == "proximal"
    assert cfg.rollout.temperature == 1.5 and cfg.rollout.top_p == 1.0 and cfg.model.dtype == cfg.learner.dtype


@pytest.mark.parametrize("override, key", [
    (["rollout.top_p=0.9"], "rollout.top_p"),          # nucleus sampling vs a full-support learner ratio
    (["rollout.top_k=20"], "rollout.top_k"),           # no such knob: sampling is full-support
    (["rollout.temperature=0"], "rollout.temperature"),
    (["algorithm.ratio_reference=behaviour", "model.dtype=bfloat16"], "algorithm.ratio_reference"),
    (["algorithm.ratio_reference=bogus"], "algorithm.ratio_reference"),
])
def test_sampling_and_dtype_mismatches_are_refused(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config("default", override)
