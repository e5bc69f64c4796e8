"""`algorithm.advantage: {name, ...params}` (core/estimators.py): a layer naming another estimator starts the section
afresh, the old flat keys are refused by name and migrated when a run's config is read back, `--help` lists every
estimator's parameters, and a user estimator named by its dotted path is checked at load and used by stage 3."""
import textwrap

import pytest
import torch

from core import estimators
from core.config import ConfigError, describe, from_yaml, load_config, to_yaml
from driver.step import shape_and_advantage
from tests.driver.test_batching import _group

USER_ESTIMATORS = '''
import torch


class Centred:
    """r - mean(r), times `scale`."""
    needs_seq_log_ratio = False

    def __init__(self, scale=1.0):
        self.scale = scale

    def advantages(self, rewards, seq_log_ratio=None):
        return self.scale * (rewards - rewards.mean(dim=1, keepdim=True))


def no_advantages(**params):
    return object()
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_estimators.py").write_text(USER_ESTIMATORS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "my_estimators"


def test_a_layer_naming_another_estimator_starts_the_section_afresh(tmp_path):
    child = tmp_path / "child.yaml"
    child.write_text(textwrap.dedent("""\
        base: generator
        algorithm:
          advantage:
            name: bon_rlb
            n: 4
          overlong_filtering: true
        """))
    # generator.yaml names maxk with k: 4; the child's bon_rlb does not inherit k
    assert load_config(str(child)).algorithm.advantage == {"name": "bon_rlb", "n": 4, "p_estimate": "group",
                                                           "p_min": 0.0, "p_max": 1.0}
    # the same estimator named again keeps the parameters set before it
    same = load_config("generator", ["algorithm.advantage.k=2", "algorithm.advantage.name=maxk"])
    assert same.algorithm.advantage["k"] == 2
    # an override naming another estimator drops them
    assert load_config("generator", ["algorithm.advantage.name=grpo"]).algorithm.advantage == {
        "name": "grpo", "eps": 1e-6, "scale_by_std": True}


@pytest.mark.parametrize("where", ["override", "file"])
def test_the_old_flat_keys_are_refused_naming_the_new_one(tmp_path, where):
    if where == "override":
        args = ("generator", ["algorithm.bon_n=4"])
    else:
        path = tmp_path / "old.yaml"
        path.write_text("base: generator\nalgorithm:\n  maxk_k: 2\n")
        args = (str(path), [])
    with pytest.raises(ConfigError) as err:
        load_config(*args)
    new = "algorithm.advantage.n" if where == "override" else "algorithm.advantage.k"
    assert new in str(err.value) and len(str(err.value).splitlines()) == 1


def test_a_run_config_written_with_the_old_flat_keys_reads_back_with_them_moved():
    text = to_yaml(load_config("generator"))
    section = ("  advantage:\n    name: maxk\n    k: 4\n    baseline: loo\n    off_policy: false\n"
               "    log_ratio_clip: 0.5\n")
    assert section in text
    old = ("  advantage_estimator: maxk\n  grpo_eps: 1.0e-06\n  grpo_scale_by_std: true\n  maxk_k: 3\n"
           "  maxk_baseline: mean\n  maxk_off_policy: false\n  maxk_log_ratio_clip: 0.5\n  bon_n: 8\n"
           "  bon_p_estimate: group\n  bon_p_min: 0.0\n  bon_p_max: 1.0\n")
    cfg = from_yaml(text.replace(section, old))
    assert cfg.algorithm.advantage == {"name": "maxk", "k": 3, "baseline": "mean", "off_policy": False,
                                       "log_ratio_clip": 0.5}


def test_help_lists_every_estimators_parameters_after_the_section():
    keys = [row[0] for row in describe()]
    at = keys.index("algorithm.advantage")
    params = {p for table in estimators.ESTIMATORS.values() for p in table}
    assert {k.rsplit(".", 1)[1] for k in keys[at + 1:at + 1 + len(params)]} == params


def test_a_user_estimator_is_checked_at_load_and_used_by_stage_three(user_module):
    cfg = load_config("selector", [f"algorithm.advantage.name={user_module}:Centred", "algorithm.advantage.scale=2"])
    assert cfg.algorithm.advantage == {"name": f"{user_module}:Centred", "scale": 2}
    groups = [_group([1, 0, 0, 0]), _group([1, 1, 0, 0])]
    batch = shape_and_advantage(groups, cfg.algorithm, 32)
    want = 2 * (torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0]], dtype=torch.float64) - torch.tensor([[0.25], [0.5]]))
    got = torch.tensor([s.advantage for s in batch.sequences], dtype=torch.float64).view(2, 4)
    # the shaped reward adds the same overlong penalty to every response of these short groups: centring removes it
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("override, words", [
    ("algorithm.advantage.name={m}:Missing", "has no attribute 'Missing'"),
    ("algorithm.advantage.name=no_such_module_here:Centred", "does not import"),
    ("algorithm.advantage.name={m}:no_advantages", "without an advantages"),
])
def test_a_user_estimator_that_does_not_fit_is_refused_in_one_line(user_module, override, words):
    with pytest.raises(ConfigError) as err:
        load_config("selector", [override.format(m=user_module)])
    assert str(err.value).startswith("algorithm.advantage.name=") and words in str(err.value)
    assert len(str(err.value).splitlines()) == 1


def test_a_user_estimator_refusing_its_parameters_is_refused(user_module):
    with pytest.raises(ConfigError, match="did not build with the parameters"):
        load_config("selector", [f"algorithm.advantage.name={user_module}:Centred", "algorithm.advantage.width=3"])
