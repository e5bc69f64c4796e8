"""python -m driver.compare: RL's final knockout minus the best non-RL selector, paired by problem, per run and pooled
over runs, from the run folders' metrics.jsonl alone."""
import pytest

from core.algo.paired import paired_bootstrap_ci, pooled_paired_bootstrap_ci
from driver import compare
from driver.report import MetricsLog

PROBLEMS = [f"q{i // 4}" for i in range(80)]  # 20 problems, 4 prompts each


def right(k: int, first: int = 0) -> list:
    return [int(first <= i < first + k) for i in range(80)]


def _reading(scores: dict, prefix: str) -> dict:
    """One set's keys of an eval record: each key's accuracy (a prompt mean: every problem has 4 prompts) and the
    per-prompt scores."""
    values = {"scores": {"problem_id": PROBLEMS, **scores}, "prompts": 80, "pass_at_n": 1.0}
    values.update({key: sum(v) / len(v) for key, v in scores.items()})
    return {prefix + k: v for k, v in values.items()}


def _run(tmp_path, name: str, final: list, solve_alone: list = right(48)) -> str:
    """A run folder whose validation and test sets read the same: start policy knockout 0.4, cue rule 0.5, the
    solve-alone rule `solve_alone`, majority@N 0.45; RL's final knockout `final`."""
    log = MetricsLog(tmp_path / name, tensorboard=False)
    start = {"majority": [0.45] * 80, "random": [0.4] * 80, "genselect": right(30), "knockout/genselect": right(32),
             "rule/cue/genselect": right(38), "rule/cue/knockout/genselect": right(40),
             "rule/solve_alone/genselect": right(44), "rule/solve_alone/knockout/genselect": solve_alone}
    for step, knockout in ((0, right(32)), (50, final)):
        scores = {**start, "knockout/genselect": knockout}
        log.log(step, "eval", {**_reading(scores, ""), **_reading(scores, "test/")})
    return str(tmp_path / name)


def test_each_run_and_the_pool_get_a_paired_ci_against_their_best_non_rl_selector(tmp_path, capsys):
    runs = [_run(tmp_path, "seed0", right(60)), _run(tmp_path, "seed3", right(56, first=8))]
    assert compare.main([*runs, "--set", "test"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("test set") and len(out) == 4
    mean, lo, hi = paired_bootstrap_ci(PROBLEMS, right(60), right(48))
    assert out[1] == (f"  {runs[0]}: {mean:+.3f} [{lo:+.3f}, {hi:+.3f}] against solve-alone rule, knockout "
                      f"(20 problems, 80 prompts)")
    pooled = pooled_paired_bootstrap_ci([(PROBLEMS, right(60), right(48)), (PROBLEMS, right(56, first=8), right(48))])
    assert out[3] == f"  pooled over 2 runs: {pooled[0]:+.3f} [{pooled[1]:+.3f}, {pooled[2]:+.3f}]"
    assert pooled[0] == pytest.approx((0.15 + 0.1) / 2)


def test_every_set_is_compared_by_default_and_a_fixed_selector_can_be_named(tmp_path, capsys):
    runs = [_run(tmp_path, "a", right(60)), _run(tmp_path, "b", right(50))]
    assert compare.main(runs) == 0
    out = capsys.readouterr().out
    assert out.count("pooled over 2 runs") == 2 and "validation set" in out and "test set" in out
    assert compare.main([*runs, "--against", "rule/cue/knockout/genselect", "--set", "validation"]) == 0
    out = capsys.readouterr().out.splitlines()
    mean, lo, hi = paired_bootstrap_ci(PROBLEMS, right(60), right(40))
    assert out[1] == (f"  {runs[0]}: {mean:+.3f} [{lo:+.3f}, {hi:+.3f}] against hedge-cue rule, knockout "
                      f"(20 problems, 80 prompts)")
    with pytest.raises(SystemExit, match="--against oracle: not a selector the readings kept"):
        compare.main([*runs, "--against", "oracle"])


def test_a_folder_without_metrics_or_without_scores_is_reported(tmp_path, capsys):
    with pytest.raises(SystemExit, match="no metrics.jsonl"):
        compare.main([str(tmp_path / "missing")])
    log = MetricsLog(tmp_path / "old", tensorboard=False)  # readings from before per-prompt scores were kept
    for step in (0, 50):
        log.log(step, "eval", {"genselect": 0.5, "knockout/genselect": 0.6, "majority": 0.45, "random": 0.4})
    assert compare.main([str(tmp_path / "old")]) == 2
    assert "per-prompt scores" in capsys.readouterr().err
