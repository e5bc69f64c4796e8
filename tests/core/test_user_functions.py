"""The user functions a config names (verifier.reward.name, data.label_function): checked with the config, before
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
    cfg = load_config("selector", ["verifier.reward.name=team_rewards:score",
                                   "data.label_function.name=team_rewards:judge"])
    assert cfg.verifier.reward == {"name": "team_rewards:score"}
    assert cfg.data.label_function == {"name": "team_rewards:judge"}
    assert load_config("selector").verifier.reward == {"name": "binary"}  # the built-in verifiers by default


@pytest.mark.parametrize("override, message", [
    ("verifier.reward.name=team_rewards:missing",
     "verifier.reward.name='team_rewards:missing' module 'team_rewards' has no attribute 'missing'"),
    ("verifier.reward.name=no_such_team.rewards:score",
     "verifier.reward.name='no_such_team.rewards:score' module 'no_such_team.rewards' does not import"),
    ("verifier.reward.name=team_rewards.score", "is neither one of ['binary', 'partial', 'stored_label'] nor a "
                                                "dotted path 'package.module:function'"),
    ("verifier.reward.name=team_rewards:judge", "cannot be called as fn(problem, candidate, response, label)"),
    ("data.label_function.name=team_rewards:score", "data.label_function.name='team_rewards:score' cannot be called "
                                                    "as fn(problem, candidate, answer)"),
    ("data.label_function.name=team_rewards.judge", "is neither '' (math-verify, the sandbox) nor a dotted path"),
])
def test_a_config_naming_a_function_that_does_not_fit_is_refused_in_one_line(user_module, override, message):
    with pytest.raises(ConfigError) as err:
        load_config("selector", [override])
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_reward_function_does_not_combine_with_a_pick_reward_or_a_generator(user_module):
    with pytest.raises(ConfigError, match=r"verifier\.reward\.name.*tiny\.pick_reward=0"):
        load_config("default", ["verifier.reward.name=team_rewards:score", "tiny.pick_reward=0.5"])
    with pytest.raises(ConfigError, match=r"verifier\.reward\.name.*task=generator"):
        load_config("generator", ["verifier.reward.name=team_rewards:score"])


def test_the_interfaces_name_their_keys_and_arguments():
    assert REWARD_FUNCTION.positional == ("problem", "candidate", "response", "label")
    assert LABEL_FUNCTION.positional == ("problem", "candidate", "answer")
    assert REWARD_FUNCTION.key == "verifier.reward.name" and LABEL_FUNCTION.key == "data.label_function.name"


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

    text = to_yaml(load_config("selector", ["verifier.reward.name=team_rewards:score"]))
    gone = text.replace("team_rewards:score", "team_rewards_elsewhere:score")
    assert from_yaml(gone).verifier.reward == {"name": "team_rewards_elsewhere:score"}


FORM_EXAMPLE = '''
    from actors.rollout.response_forms import FreeText

    class Shouted(FreeText):
        name = "shouted"

        def __init__(self, volume=1):
            self.volume = volume

    def shouted(model_dir, cfg, volume=1):
        return Shouted(volume)

    def wrong(model_dir):
        return Shouted()
'''


@pytest.fixture()
def form_module(tmp_path, monkeypatch):
    (tmp_path / "team_forms.py").write_text(textwrap.dedent(FORM_EXAMPLE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "team_forms"
    sys.modules.pop("team_forms", None)


def test_the_response_form_is_one_section_a_name_or_a_path_with_its_parameters(form_module, tmp_path):
    """rollout.response_form: {name, ...params}: '' the model's own form (its hook); a registered name (free_text,
    forced_judgment) or a user's `fn(model_dir, cfg, **params)`, checked with the config and built by the registry
    with the section's parameters."""
    from actors.rollout.forced_judgment import ForcedJudgment
    from actors.rollout.response_forms import FreeText
    from driver.models.registry import response_form

    folder = str(tmp_path / "model")  # no genselect_model.json: no form of its own
    user = load_config("selector", ["rollout.response_form.name=team_forms:shouted",
                                    "rollout.response_form.volume=11"])
    assert user.rollout.response_form == {"name": "team_forms:shouted", "volume": 11}
    assert response_form(folder, user).name == "shouted" and response_form(folder, user).volume == 11
    forced = load_config("selector", ["rollout.response_form.name=forced_judgment",
                                      "rollout.response_form.reasoning_budget=8", "rollout.max_response_tokens=64",
                                      f"model.name={folder}"])
    assert isinstance(response_form(folder, forced), ForcedJudgment)
    assert response_form(folder, forced).reasoning_budget == 8  # the forced form reads its budget from the section
    assert type(response_form(folder, load_config("selector", ["rollout.response_form.name=free_text"]))) is FreeText
    assert type(response_form(folder, load_config("selector"))) is FreeText  # '': the model's own, here none
    for override, message in (
            ("rollout.response_form.name=team_forms:wrong", "cannot be called as fn(model_dir, cfg)"),
            ("rollout.response_form.name=shouted", "must be '' (the model's own form), one of"),
            ("rollout.response_form.name=team_forms:missing", "has no attribute 'missing'")):
        with pytest.raises(ConfigError, match=r"rollout\.response_form\.name") as err:
            load_config("selector", [override])
        assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("overrides, message", [
    # a function's parameters are checked against its signature
    (["rollout.response_form.name=team_forms:shouted", "rollout.response_form.loud=true"],
     r"rollout\.response_form\.name='team_forms:shouted' cannot be called as fn\(model_dir, cfg, loud=\.\.\.\)"),
    # a built-in form's against its table
    (["rollout.response_form.name=forced_judgment", "rollout.response_form.budget=8", "model.name=smollm2-135m"],
     r"rollout\.response_form\.budget=.* is a parameter, but rollout\.response_form\.name='forced_judgment' takes "
     r"reasoning_budget"),
    (["rollout.response_form.name=forced_judgment", "rollout.response_form.reasoning_budget=many",
      "model.name=smollm2-135m"], r"rollout\.response_form\.reasoning_budget='many' must be int"),
    (["rollout.response_form.name=free_text", "rollout.response_form.reasoning_budget=8"],
     r"rollout\.response_form\.reasoning_budget=8 is a parameter, but rollout\.response_form\.name='free_text' "
     r"takes none"),
])
def test_a_response_forms_parameters_are_checked_before_anything_starts(form_module, overrides, message):
    with pytest.raises(ConfigError, match=message) as err:
        load_config("selector", overrides)
    assert "\n" not in str(err.value)


def test_naming_another_response_form_starts_the_section_afresh(tmp_path):
    forced = ["model.name=smollm2-135m", "rollout.response_form.name=forced_judgment",
              "rollout.response_form.reasoning_budget=8", "rollout.max_response_tokens=64"]
    cfg = load_config("selector", forced + ["rollout.response_form.name=free_text"])
    assert cfg.rollout.response_form == {"name": "free_text"}  # the budget belonged to forced_judgment
    layer = tmp_path / "free.yaml"
    layer.write_text("base: smollm2\nrollout:\n  response_form:\n    name: free_text\n")
    assert load_config(str(layer)).rollout.response_form == {"name": "free_text"}
    assert load_config("smollm2").rollout.response_form == {"name": "forced_judgment", "reasoning_budget": 176}


@pytest.mark.parametrize("override, new", [
    ("rollout.judgment=forced", "set rollout.response_form.name=forced_judgment"),
    ("rollout.judgment=free", "rollout.response_form.name=''"),
    ("rollout.reasoning_budget=8", "rollout.reasoning_budget moved to rollout.response_form.reasoning_budget"),
    ("rollout.response_form=free_text", "set rollout.response_form.name=free_text"),
])
def test_the_old_response_form_keys_are_refused_by_name(override, new):
    with pytest.raises(ConfigError) as err:
        load_config("selector", [override])
    assert f"override {override!r}: " in str(err.value) and new in str(err.value) and "\n" not in str(err.value)


def test_a_run_config_written_with_the_old_response_form_keys_is_read_moved():
    from core.config import from_yaml, to_yaml

    cfg = load_config("smollm2")
    text = to_yaml(cfg).replace("  response_form:\n    name: forced_judgment\n    reasoning_budget: 176\n",
                                "  judgment: forced\n  reasoning_budget: 176\n  response_form: ''\n")
    assert "judgment: forced" in text
    assert from_yaml(text) == cfg
    plain = to_yaml(load_config("selector")).replace("  response_form:\n    name: ''\n",
                                                     "  judgment: free\n  reasoning_budget: 0\n  response_form: ''\n")
    assert "judgment: free" in plain and from_yaml(plain).rollout.response_form == {"name": ""}
    named = plain.replace("response_form: ''", "response_form: free_text")
    assert from_yaml(named).rollout.response_form == {"name": "free_text"}


PARAMS_EXAMPLE = '''
    def hedged(problem, candidate, response, label, *, hedge_penalty=0.0, **extra):
        return 1.0 - hedge_penalty if "maybe" in response else float(label)

    def plain(problem, candidate, response, label):
        return float(label)
'''


def test_the_reward_section_takes_a_functions_parameters_and_checks_them(user_module, tmp_path):
    (tmp_path / "team_rewards.py").write_text(textwrap.dedent(EXAMPLE + PARAMS_EXAMPLE))
    cfg = load_config("selector", ["verifier.reward.name=team_rewards:hedged", "verifier.reward.hedge_penalty=0.5"])
    assert cfg.verifier.reward == {"name": "team_rewards:hedged", "hedge_penalty": 0.5}
    with pytest.raises(ConfigError, match=r"cannot be called as fn\(problem, candidate, response, label, "
                                          r"strict=\.\.\.\)"):
        load_config("selector", ["verifier.reward.name=team_rewards:plain", "verifier.reward.strict=true"])
    with pytest.raises(ConfigError, match=r"verifier\.reward\.k.*takes none"):
        load_config("selector", ["verifier.reward.k=2"])
    # naming another reward starts the section afresh: the function's parameter is not carried over
    cfg = load_config("selector", ["verifier.reward.name=team_rewards:hedged", "verifier.reward.hedge_penalty=0.5",
                                   "verifier.reward.name=stored_label"])
    assert cfg.verifier.reward == {"name": "stored_label"}


@pytest.mark.parametrize("override, new", [("verifier.reward=partial", "verifier.reward.name=partial"),
                                           ("verifier.reward_function=team_rewards:score", "verifier.reward.name")])
def test_the_old_reward_keys_are_refused_by_name_and_read_back_moved(user_module, override, new):
    from core.config import from_yaml, to_yaml

    with pytest.raises(ConfigError, match=new.replace(".", r"\.")):
        load_config("selector", [override])
    text = to_yaml(load_config("selector")).replace("  reward:\n    name: binary\n",
                                                    "  reward: partial\n  reward_function: team_rewards:score\n")
    assert from_yaml(text).verifier.reward == {"name": "team_rewards:score"}


LABEL_EXAMPLE = '''
    def graded(problem, candidate, answer, *, threshold=0.5, **extra):
        return float(len(candidate) > threshold)
'''


def test_the_label_section_takes_a_functions_parameters_and_checks_them(user_module, tmp_path):
    (tmp_path / "team_rewards.py").write_text(textwrap.dedent(EXAMPLE + LABEL_EXAMPLE))
    cfg = load_config("selector", ["data.label_function.name=team_rewards:graded",
                                   "data.label_function.threshold=3"])
    assert cfg.data.label_function == {"name": "team_rewards:graded", "threshold": 3}
    with pytest.raises(ConfigError, match=r"data\.label_function\.name='team_rewards:judge' cannot be called as "
                                          r"fn\(problem, candidate, answer, threshold=\.\.\.\)"):
        load_config("selector", ["data.label_function.name=team_rewards:judge", "data.label_function.threshold=3"])
    with pytest.raises(ConfigError, match=r"data\.label_function\.threshold=3 is a parameter, but "
                                          r"data\.label_function\.name='' \(the built-in verifiers\) takes none"):
        load_config("selector", ["data.label_function.threshold=3"])
    cfg = load_config("selector", ["data.label_function.name=team_rewards:graded", "data.label_function.threshold=3",
                                   "data.label_function.name=team_rewards:judge"])
    assert cfg.data.label_function == {"name": "team_rewards:judge"}  # another function: the section starts afresh


def test_the_old_label_key_is_refused_by_name_and_read_back_moved(user_module):
    from core.config import from_yaml, to_yaml

    with pytest.raises(ConfigError) as err:
        load_config("selector", ["data.label_function=team_rewards:judge"])
    assert str(err.value) == ("override 'data.label_function=team_rewards:judge': data.label_function="
                              "team_rewards:judge: data.label_function is a section now; set "
                              "data.label_function.name=team_rewards:judge")
    cfg = load_config("selector", ["data.label_function.name=team_rewards:judge"])
    text = to_yaml(cfg).replace("  label_function:\n    name: team_rewards:judge\n",
                                "  label_function: team_rewards:judge\n")
    assert "label_function: team_rewards:judge" in text and from_yaml(text) == cfg
