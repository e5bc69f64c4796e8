"""The user functions a config names (verifier.reward_function, data.label_function): checked with the config, before
anything is built or started, one line naming the key; their results read as scores in [0, 1]."""
import math
import sys
import textwrap

import pytest

from core.config import ConfigError, load_config
from core.user_functions import LABEL_FUNCTION, REWARD_FUNCTION, as_score

EXAMPLE = '''
    def score(problem, candidate, response, label, **extra):
        return float(label)

    def judge(problem, candidate, answer):
        return candidate.strip().endswith(answer)
'''


@pytest.fixture()
def user_module(tmp_path, monkeypatch):
    (tmp_path / "team_rewards.py").write_text(textwrap.dedent(EXAMPLE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "team_rewards"
    sys.modules.pop("team_rewards", None)


def test_a_config_naming_user_functions_that_fit_loads(user_module):
    cfg = load_config("selector", ["verifier.reward_function=team_rewards:score",
                                   "data.label_function=team_rewards:judge"])
    assert cfg.verifier.reward_function == "team_rewards:score" and cfg.data.label_function == "team_rewards:judge"
    assert load_config("selector").verifier.reward_function == ""  # the built-in verifiers by default


@pytest.mark.parametrize("override, message", [
    ("verifier.reward_function=team_rewards:missing",
     "verifier.reward_function='team_rewards:missing' module 'team_rewards' has no attribute 'missing'"),
    ("verifier.reward_function=no_such_team.rewards:score",
     "verifier.reward_function='no_such_team.rewards:score' module 'no_such_team.rewards' does not import"),
    ("verifier.reward_function=team_rewards.score", "expected 'package.module:attribute'"),
    ("verifier.reward_function=team_rewards:judge", "cannot be called as fn(problem, candidate, response, label)"),
    ("data.label_function=team_rewards:score", "data.label_function='team_rewards:score' cannot be called as "
                                               "fn(problem, candidate, answer)"),
])
def test_a_config_naming_a_function_that_does_not_fit_is_refused_in_one_line(user_module, override, message):
    with pytest.raises(ConfigError) as err:
        load_config("selector", [override])
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_reward_function_does_not_combine_with_a_pick_reward_or_a_generator(user_module):
    with pytest.raises(ConfigError, match=r"verifier\.reward_function.*tiny\.pick_reward=0"):
        load_config("default", ["verifier.reward_function=team_rewards:score", "tiny.pick_reward=0.5"])
    with pytest.raises(ConfigError, match=r"verifier\.reward_function.*task=generator"):
        load_config("generator", ["verifier.reward_function=team_rewards:score"])


def test_the_interfaces_name_their_keys_and_arguments():
    assert REWARD_FUNCTION.positional == ("problem", "candidate", "response", "label")
    assert LABEL_FUNCTION.positional == ("problem", "candidate", "answer")
    assert REWARD_FUNCTION.key == "verifier.reward_function" and LABEL_FUNCTION.key == "data.label_function"


@pytest.mark.parametrize("value, score", [(True, 1.0), (False, 0.0), (1, 1.0), (0, 0.0), (0.25, 0.25)])
def test_a_bool_or_a_number_in_the_unit_interval_is_a_score(value, score):
    assert as_score(value) == score


@pytest.mark.parametrize("value", [None, "yes", 1.5, -0.1, math.nan, [1.0]])
def test_anything_else_is_refused(value):
    with pytest.raises(ValueError, match="expected a bool or a number in"):
        as_score(value)


def test_a_runs_config_read_back_does_not_import_its_user_functions(user_module):
    """Evaluation and serving read a run's config.yaml for its settings: the reward function it trained with need
    not be importable there."""
    from core.config import from_yaml, to_yaml

    text = to_yaml(load_config("selector", ["verifier.reward_function=team_rewards:score"]))
    gone = text.replace("team_rewards:score", "team_rewards_elsewhere:score")
    assert from_yaml(gone).verifier.reward_function == "team_rewards_elsewhere:score"
