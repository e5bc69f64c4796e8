"""The override grammar (core/overrides.py): `key=` is the empty value, `+key=value` adds a key the file does not
set, `++key=value` sets it either way, `~key` puts it back at the schema's default; each malformed or impossible form
is refused in one line naming the override."""
import pytest

from core.config import ConfigError, load_config
from core.config_schema import ClusterConfig, LearnerConfig, TrainConfig


def test_an_empty_value_empties_a_text_key_and_nulls_an_optional_one():
    assert load_config("paper_math", ["cluster.topology="]).cluster.topology == ""
    assert load_config("paper_math", ["cluster.topology=''"]).cluster.topology == ""
    assert load_config("paper_math", ['cluster.learner_node_resource=""']).cluster.learner_node_resource == ""
    assert load_config("smoke", ["cluster.num_cpus=4", "cluster.num_cpus="]).cluster.num_cpus is None


@pytest.mark.parametrize("override, message", [
    ("steps=", "steps is an integer key and has no empty value; give one .* or ~steps"),
    ("rollout.temperature=", "rollout.temperature is a float key"),
    ("learner.betas=", r"learner.betas is a list .*learner.betas=\[\]"),
    ("rollout=", "rollout is a section"),
    ("cluster.bogus=", "the schema has no key 'bogus' in section 'cluster'"),
])
def test_an_empty_value_for_a_key_without_one_is_refused(override, message):
    with pytest.raises(ConfigError, match=f"^override '{override}': {message}"):
        load_config("smoke", [override])


def test_plus_adds_a_key_the_file_does_not_set_and_refuses_one_it_does():
    assert load_config("paper_math", ["+cluster.num_cpus=4"]).cluster.num_cpus == 4
    assert load_config("paper_math", ["+eval_samples=2"]).eval_samples == 2
    with pytest.raises(ConfigError, match=r"the config file sets cluster.topology already; change it with "
                                          r"cluster.topology=local3 \(or \+\+cluster.topology=local3\)"):
        load_config("paper_math", ["+cluster.topology=local3"])
    with pytest.raises(ConfigError, match="the schema has no key 'bogus' in section 'cluster'"):
        load_config("paper_math", ["+cluster.bogus=1"])
    with pytest.raises(ConfigError, match="the schema has no key 'bogus' in the top level"):
        load_config("paper_math", ["++bogus=1"])


def test_plus_plus_sets_a_key_whether_the_file_sets_it_or_not():
    assert load_config("paper_math", ["++cluster.topology=local3"]).cluster.topology == "local3"
    assert load_config("paper_math", ["++cluster.num_cpus=3"]).cluster.num_cpus == 3


def test_tilde_puts_a_key_or_a_section_back_at_the_schemas_default():
    assert load_config("paper_math", ["~cluster.topology"]).cluster.topology == ClusterConfig().topology
    assert load_config("paper_math", ["~steps"]).steps == TrainConfig().steps
    assert load_config("paper_math", ["~cluster"]).cluster == ClusterConfig()
    # in order: an override before `~key` is undone, one after it applies
    assert load_config("paper_math", ["learner.betas=[0.8,0.9]", "~learner.betas"]).learner.betas == \
        LearnerConfig().betas
    after = load_config("paper_math", ["~cluster", "cluster.address=auto"]).cluster
    assert after.address == "auto" and after.topology == "" and after.learner_node_resource == ""
    assert load_config("paper_math", ["~steps=500"]).steps == TrainConfig().steps  # only when it holds that value
    with pytest.raises(ConfigError, match=r"^override '~steps=7': steps is 500, not 7; nothing removed"):
        load_config("paper_math", ["~steps=7"])
    with pytest.raises(ConfigError, match="the schema has no key 'bogus' in section 'cluster'"):
        load_config("paper_math", ["~cluster.bogus"])


@pytest.mark.parametrize("override", ["steps", "=3", "~", "+=1", "~.steps", "cluster..topology=x"])
def test_malformed_overrides_are_refused_naming_the_forms(override):
    with pytest.raises(ConfigError, match=r"key=value, key=, \+key=value, \+\+key=value, ~key"):
        load_config("smoke", [override])


def test_a_moved_key_is_refused_in_every_form():
    for override in ("~model.seed", "+model.seed=3", "++model.seed=3", "model.seed="):
        with pytest.raises(ConfigError, match="model.seed moved to tiny.seed"):
            load_config("default", [override])
