"""`task=generator`: incompatible settings are refused with a message naming the key before
anything is built or started; a policy path that is not a model folder and a code problem without tests are
refused by `python -m driver.train` with one error line, no actor started."""
import json

import pytest

from core import estimators
from core.config import ConfigError, load_config
from driver import train
from driver.data.problem import DataError
from driver.run import Run


def test_the_generator_config_loads_with_every_estimator():
    base = load_config("generator")
    assert base.task == "generator" and base.algorithm.advantage["name"] == "maxk"
    for overrides in (["algorithm.advantage.name=grpo"],
                      ["algorithm.advantage.name=maxk", "algorithm.advantage.off_policy=true"],
                      ["algorithm.advantage.name=bon_rlb", "algorithm.overlong_penalty_factor=0"],
                      ["algorithm.advantage.name=bon_rlb_p", "algorithm.overlong_filtering=true",
                       "algorithm.advantage.p_estimate=loo", "algorithm.advantage.n=8"]):
        cfg = load_config("generator", overrides)
        assert estimators.build_estimator(cfg.algorithm.advantage)


@pytest.mark.parametrize("overrides, key, words", [
    (["data.source=model", "data.generator=/x"], "data.source", "samples its own solutions"),
    (["data.source=humaneval"], "model.name", "procedural_math"),
    (["data.generator=/some/folder"], "data.generator", "model.name"),
    (["verifier.reward.name=partial"], "verifier.reward.name", "math problems"),
    (["eval_samples=1"], "eval_samples", "K"),
    (["rollout.samples_per_prompt=1"], "rollout.samples_per_prompt", ">= 2"),
    (["curriculum.enabled=true"], "curriculum.enabled", "task=generator"),
    (["serve.live=true"], "serve.live", "task=generator"),
    (["algorithm.advantage.k=8"], "algorithm.advantage.k", "G > k"),
    (["algorithm.advantage.off_policy=true", "max_staleness=0"], "algorithm.advantage.off_policy", "max_staleness"),
    (["algorithm.advantage.name=bon_rlb"], "algorithm.advantage.name", "binary"),
    (["algorithm.advantage.name=bon_rlb", "algorithm.overlong_filtering=true", "algorithm.advantage.n=9",
      "algorithm.advantage.p_estimate=loo"], "algorithm.advantage.n", "samples_per_prompt"),
    (["task=writer"], "task", "generator"),
])
def test_incompatible_generator_settings_are_refused(overrides, key, words):
    with pytest.raises(ConfigError) as err:
        load_config("generator", overrides)
    assert str(err.value).startswith(key) and words in str(err.value), str(err.value)


def test_bon_rlb_on_partial_code_rewards_is_refused(tmp_path):
    folder = _model_folder(tmp_path / "gen")
    with pytest.raises(ConfigError, match=r"algorithm\.advantage\.name.*binary rewards.*partial"):
        load_config("generator", ["data.source=humaneval", f"model.name={folder}", "verifier.reward.name=partial",
                                  "algorithm.advantage.name=bon_rlb", "algorithm.overlong_filtering=true"])
    # max@k takes the pass fraction as it is
    load_config("generator", ["data.source=humaneval", f"model.name={folder}", "verifier.reward.name=partial"])


def _model_folder(path, model_type="qwen3"):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"model_type": model_type} if model_type else {}))
    (path / "tokenizer.json").write_text("{}")
    (path / "model.safetensors").write_bytes(b"")
    return path


@pytest.fixture
def no_actors(monkeypatch):
    """Fails the test if a run tries to start Ray or any actor."""
    def refuse(self):
        raise AssertionError("Ray was started")
    monkeypatch.setattr(Run, "_start_ray", refuse)


@pytest.mark.parametrize("kind, reason", [("missing", "neither"), ("no_weights", "weights"),
                                          ("no_model_type", "model_type")])
def test_a_policy_path_that_is_not_a_model_folder_is_one_error_line(tmp_path, capsys, no_actors, kind, reason):
    path = tmp_path / "missing"
    if kind == "no_weights":
        path = _model_folder(tmp_path / kind)
        (path / "model.safetensors").unlink()
    elif kind == "no_model_type":
        path = _model_folder(tmp_path / kind, model_type=None)
    code = train.main(["generator", f"model.name={path}", "data.source=humaneval", f"run_dir={tmp_path}/run",
                       "progress=false"])
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line.startswith("error")]
    assert code == 2 and len(err) == 1 and f"model.name={path}" in err[0] and reason in err[0], err


def test_a_code_problem_without_tests_is_refused(tmp_path, capsys, no_actors):
    rows = [{"id": f"c{i}", "domain": "code", "problem": "def f(x):\n", "entry_point": "f",
             "tests": "def check(c):\n    assert c(1) == 2\n" if i else "", "candidates": ["a", "b"]}
            for i in range(4)]
    path = tmp_path / "code.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    folder = _model_folder(tmp_path / "gen")
    code = train.main(["generator", f"model.name={folder}", "data.source=file", f"data.path={path}",
                       f"run_dir={tmp_path}/run", "progress=false"])
    err = capsys.readouterr().err
    assert code == 2 and "without tests" in err and "code.jsonl:1" in err, err


def test_a_code_problem_with_empty_tests_is_refused_by_the_loader(monkeypatch):
    from dataclasses import replace

    from core.config import DataConfig
    from driver.data import solve, sources
    from driver.data.problem import RawProblem

    problems = [RawProblem(f"c{i}", "code", "def f(x):\n", "" if i == 1 else "def check(c): pass", ("a",), ("a",),
                           entry_point="f") for i in range(3)]
    monkeypatch.setitem(sources.SOURCES, "humaneval", lambda cfg: sources.SourceResult(problems))
    with pytest.raises(DataError, match="code problem c1 .*no tests"):
        solve.load_solve_data(replace(DataConfig(), source="humaneval"))


def test_a_problems_only_file_feeds_generator_training(tmp_path):
    from core.config import DataConfig
    from driver.data import solve

    path = tmp_path / "problems.jsonl"
    path.write_text("".join(json.dumps({"id": f"q{i}", "problem": f"{i} + 1?", "answer": i + 1}) + "\n"
                            for i in range(10)))
    data = solve.load_solve_data(DataConfig(source="file", path=str(path)))
    tasks = data.train + data.heldout
    assert len(tasks) == 10 and {t.reference for t in tasks} == {str(i + 1) for i in range(10)}
