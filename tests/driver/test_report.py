"""summary.json's held-out sets (`sets`): each selector at the start and the end, what RL adds over the best non-RL
selector with its paired CI, the console lines, and curves.png's level of the best non-RL selector."""
import pytest

from driver.report import MetricsLog, summarize


def test_each_set_reports_the_knockout_margin_over_majority(tmp_path):
    log = MetricsLog(tmp_path, tensorboard=False)
    for step, margin in ((0, 0.25), (100, 0.27)):
        log.log(step, "eval", {"genselect": 0.5, "nocue/genselect": 0.5, "nocue/majority": 0.378,
                               "nocue/random": 0.37, "nocue/knockout/genselect": 0.378 + margin,
                               "nocue/knockout/over_majority": margin, "nocue/knockout/over_majority_lo": margin - 0.1,
                               "nocue/knockout/over_majority_hi": margin + 0.1})
    summary = summarize(log, 1.0, 100)
    nocue = summary["sets"]["no_cue"]
    assert nocue["knockout_over_majority"] == {"start": 0.25, "final": 0.27, "final_ci": [0.17, 0.37]}
    assert nocue["policy_knockout"]["final"] == 0.648 and nocue["round_robin_over_majority"]["final"] is None
    assert "no_cue_heldout" not in summary and "rule_selectors" not in summary  # each only once, under `sets`


def test_the_rule_selectors_are_summarised_at_start_and_end_and_printed_in_the_console_lines(tmp_path):
    """summary.json's `sets` and the eval's console lines carry each rule read beside the policy
    (driver/baselines.py), whole prompt and knockout; a run that read none has none."""
    from driver.heldout import rule_lines

    log = MetricsLog(tmp_path, tensorboard=False)
    for step, cue in ((0, 0.62), (50, 0.64)):
        log.log(step, "eval", {"genselect": 0.5, "rule/cue/genselect": cue, "rule/cue/genselect_lo": cue - 0.1,
                               "rule/cue/genselect_hi": cue + 0.1, "rule/cue/knockout/genselect": cue + 0.01,
                               "rule/cue/knockout/genselect_lo": cue - 0.09, "rule/cue/knockout/genselect_hi": cue + 0.11})
    rules = summarize(log, 1.0, 50)["sets"]["validation"]["rules"]
    assert list(rules) == ["cue"] and rules["cue"]["whole"]["start"] == 0.62 and rules["cue"]["whole"]["final"] == 0.64
    assert rules["cue"]["knockout"]["final"] == 0.65 and rules["cue"]["whole"]["final_ci"] == [0.54, 0.74]
    [line] = rule_lines(log.records("eval")[-1], "eval step 50")
    assert "hedge-cue rule" in line and "whole prompt 0.640 [0.540, 0.740]" in line and "knockout 0.650" in line
    empty = MetricsLog(tmp_path / "none", tensorboard=False)
    empty.log(0, "eval", {"genselect": 0.5})
    assert summarize(empty, 1.0, 1)["sets"]["validation"]["rules"] == {}


def _reading(accuracy: float, prefix: str = "") -> dict:
    values = {"genselect": accuracy, "majority": 0.48, "random": 0.42, "pass_at_n": 1.0, "parse_failure_rate": 0.0,
              "prompts": 200, "by_size": {2: {"genselect": accuracy}}, "knockout/genselect": accuracy + 0.2,
              "knockout/by_size": {2: accuracy + 0.2}, "rule/own_answer/genselect": 0.74,
              "rule/own_answer/knockout/genselect": 0.765, "rule/cue/genselect": 0.69, "rule/cue/knockout/genselect": 0.7}
    for key in [k for k in values if k.endswith("genselect")]:
        values[key + "_lo"], values[key + "_hi"] = values[key] - 0.1, values[key] + 0.1
    return {prefix + k: v for k, v in values.items()}


def test_each_set_is_printed_and_summarised_with_what_rl_adds_over_the_best_non_rl_selector(tmp_path):
    """The validation, test and no-cue readings each get their console lines; summary.json's `sets` has each set's
    start and end and `best_non_rl`: the strongest of majority@N, random@N, the start policy and the rules at the
    start, against the policy's final knockout (here the own-answer rule's 0.765 on the test set, 0.75 - 0.765)."""
    from types import SimpleNamespace

    from driver.heldout import eval_lines
    from driver.report import set_summary_lines

    cfg = SimpleNamespace(eval_knockout_window=2, eval_knockout_both_orders=False, eval_round_robin="none")
    log = MetricsLog(tmp_path, tensorboard=False)
    log.log(0, "eval", {**_reading(0.45), **_reading(0.45, "test/"), **_reading(0.42, "nocue/")})
    log.log(25, "eval", _reading(0.5))  # a reading between: the validation set only
    log.log(50, "eval", {**_reading(0.5), **_reading(0.55, "test/"), **_reading(0.6, "nocue/")})
    lines = eval_lines(log.records("eval")[-1], cfg, 50)
    assert [line.split("]")[0] for line in lines if "knockout of 2" in line] == [
        "[eval step 50, knockout of 2", "[eval step 50, test set, knockout of 2", "[eval step 50, no-cue set, knockout of 2"]
    assert any(line.startswith("[eval step 50, test set, own-answer rule] whole prompt 0.740") for line in lines)
    sets = summarize(log, 1.0, 50)["sets"]
    test = sets["test"]
    assert (test["start_step"], test["final_step"]) == (0, 50) and test["policy_knockout"]["final"] == 0.75
    assert test["best_non_rl"] == {"name": "own-answer rule, knockout", "key": "rule/own_answer/knockout/genselect",
                                   "accuracy": 0.765, "rl_final": 0.75, "rl_over_it": -0.015,
                                   "rl_over_it_ci": None}  # these readings kept no per-prompt scores
    assert sets["no_cue"]["best_non_rl"]["name"] == "own-answer rule, knockout"
    assert abs(sets["no_cue"]["best_non_rl"]["rl_over_it"] - 0.035) < 1e-9
    assert "RL's final knockout 0.750 against the best non-RL selector (own-answer rule, knockout, 0.765): -0.015" in \
        "\n".join(set_summary_lines("test", test))
    only_start = MetricsLog(tmp_path / "start", tensorboard=False)
    only_start.log(0, "eval", _reading(0.45, "test/") | _reading(0.45))
    assert summarize(only_start, 1.0, 0)["sets"]["test"]["best_non_rl"] is None  # nothing trained yet
    assert summarize(only_start, 1.0, 0)["sets"]["no_cue"] is None  # never read


PROBLEMS = [f"q{i // 2}" for i in range(40)]  # 20 problems, 2 prompts each


def _scored(step_scores: dict, prefix: str = "") -> dict:
    """An eval record's keys for one set from per-prompt scores (each key's accuracy: the mean over problems of the
    problem's prompt mean, with a CI of +-0.05) and the scores themselves, as driver/heldout.py writes them."""
    from core.algo.paired import problem_differences

    values = {"prompts": len(PROBLEMS), "pass_at_n": 1.0, "scores": {"problem_id": PROBLEMS, **step_scores}}
    for key, scores in step_scores.items():
        accuracy = float(problem_differences(PROBLEMS, scores, [0] * len(scores)).mean())
        values.update({key: accuracy, f"{key}_lo": accuracy - 0.05, f"{key}_hi": accuracy + 0.05})
    return {prefix + k: v for k, v in values.items()}


def right(k: int, first: int = 0) -> list:
    """Per-prompt scores of 40 prompts: right on prompts first .. first + k - 1."""
    return [int(first <= i < first + k) for i in range(40)]


def _start_and_end(log, prefix: str = "", final_knockout: list = right(38)) -> None:
    """A start reading where the solve-alone rule's knockout (the first 30 of 40 prompts right) beats the cue rule
    (24), the start policy (20), majority@N (0.5) and random@N (0.4); then RL's final knockout scores
    `final_knockout`."""
    common = {"majority": [0.5] * 40, "random": [0.4] * 40, "genselect": right(16), "rule/cue/genselect": right(22),
              "rule/cue/knockout/genselect": right(24), "rule/solve_alone/genselect": right(28),
              "rule/solve_alone/knockout/genselect": right(30)}
    log.log(0, "eval", _scored({**common, "knockout/genselect": right(20)}, prefix))
    log.log(50, "eval", _scored({**common, "knockout/genselect": final_knockout}, prefix))


def test_the_best_non_rl_selector_may_be_the_solve_alone_rule_and_rl_over_it_has_a_paired_ci(tmp_path):
    from core.algo.paired import paired_bootstrap_ci
    from driver.report import set_summary_lines

    log = MetricsLog(tmp_path, tensorboard=False)
    _start_and_end(log)
    s = summarize(log, 1.0, 50)["sets"]["validation"]
    best = s["best_non_rl"]
    assert (best["name"], best["key"], best["accuracy"]) == ("solve-alone rule, knockout",
                                                             "rule/solve_alone/knockout/genselect", 0.75)
    assert best["rl_over_it"] == pytest.approx(0.2)
    _, lo, hi = paired_bootstrap_ci(PROBLEMS, right(38), right(30))
    assert best["rl_over_it_ci"] == [round(lo, 4), round(hi, 4)] and 0 < lo < 0.2 < hi
    assert s["rules"]["solve_alone"]["knockout"]["start"] == 0.75
    assert "solve-alone rule: knockout 0.750 -> 0.750" in "\n".join(set_summary_lines("validation", s))
    assert (f"against the best non-RL selector (solve-alone rule, knockout, 0.750): +0.200 [{lo:+.3f}, {hi:+.3f}] "
            f"(paired 95% CI over problems)") in "\n".join(set_summary_lines("validation", s))


def test_a_reading_that_does_not_beat_the_best_non_rl_selector_reports_it_with_its_ci(tmp_path):
    log = MetricsLog(tmp_path, tensorboard=False)
    _start_and_end(log, "test/", final_knockout=right(29, first=11))  # wins 11 prompts, loses 12
    best = summarize(log, 1.0, 50)["sets"]["test"]["best_non_rl"]
    assert best["rl_over_it"] == pytest.approx(-0.025)
    lo, hi = best["rl_over_it_ci"]
    assert lo < -0.025 < hi and lo < 0 < hi


def test_curves_png_draws_the_best_non_rl_selector_as_a_labelled_level(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from driver.report import heldout_panel, plot_curves

    log = MetricsLog(tmp_path, tensorboard=False)
    _start_and_end(log)
    fig, ax = plt.subplots()
    heldout_panel(ax, log.records("eval"))
    labels = ax.get_legend().get_texts()
    assert "best non-RL selector: solve-alone rule, knockout (0.750)" in [t.get_text() for t in labels]
    level = [line for line in ax.get_lines() if line.get_label().startswith("best non-RL selector")]
    assert len(level) == 1 and set(level[0].get_ydata()) == {0.75}
    plt.close(fig)
    assert plot_curves(log, tmp_path / "curves.png").stat().st_size > 10_000
    empty = MetricsLog(tmp_path / "empty", tensorboard=False)
    assert plot_curves(empty, tmp_path / "empty.png").exists()  # no reading yet: no level, still a figure
