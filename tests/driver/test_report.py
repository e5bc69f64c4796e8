"""summary.json: the no-cue held-out block carries the knockout's margin over majority@N (the no-cue bar)."""
from driver.report import MetricsLog, summarize


def test_the_no_cue_block_reports_the_knockout_margin_over_majority(tmp_path):
    log = MetricsLog(tmp_path, tensorboard=False)
    for step, margin in ((0, 0.25), (100, 0.27)):
        log.log(step, "eval", {"genselect": 0.5, "nocue/genselect": 0.5, "nocue/majority": 0.378,
                               "nocue/random": 0.37, "nocue/knockout/genselect": 0.378 + margin,
                               "nocue/knockout/over_majority": margin, "nocue/knockout/over_majority_lo": margin - 0.1,
                               "nocue/knockout/over_majority_hi": margin + 0.1})
    nocue = summarize(log, 1.0, 100)["no_cue_heldout"]
    assert nocue["knockout_over_majority_start"] == 0.25 and nocue["knockout_over_majority_final"] == 0.27
    assert nocue["knockout_over_majority_lo_final"] == 0.17 and nocue["knockout_genselect_final"] == 0.648
    assert nocue["round_robin_over_majority_final"] is None


def test_the_rule_selectors_are_summarised_at_start_and_end_and_printed_in_the_console_lines(tmp_path):
    """summary.json's `rule_selectors` and the eval's console lines carry each rule read beside the policy
    (driver/baselines.py), whole prompt and knockout; a run that read none has None."""
    from driver.heldout import rule_lines

    log = MetricsLog(tmp_path, tensorboard=False)
    for step, cue in ((0, 0.62), (50, 0.64)):
        log.log(step, "eval", {"genselect": 0.5, "rule/cue/genselect": cue, "rule/cue/genselect_lo": cue - 0.1,
                               "rule/cue/genselect_hi": cue + 0.1, "rule/cue/knockout/genselect": cue + 0.01,
                               "rule/cue/knockout/genselect_lo": cue - 0.09, "rule/cue/knockout/genselect_hi": cue + 0.11})
    rules = summarize(log, 1.0, 50)["rule_selectors"]
    assert list(rules) == ["cue"] and rules["cue"]["start"] == 0.62 and rules["cue"]["final"] == 0.64
    assert rules["cue"]["final_knockout"] == 0.65 and rules["cue"]["final_ci"] == [0.54, 0.74]
    [line] = rule_lines(log.records("eval")[-1], "eval step 50")
    assert "hedge-cue rule" in line and "whole prompt 0.640 [0.540, 0.740]" in line and "knockout 0.650" in line
    empty = MetricsLog(tmp_path / "none", tensorboard=False)
    empty.log(0, "eval", {"genselect": 0.5})
    assert summarize(empty, 1.0, 1)["rule_selectors"] is None


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
    assert test["best_non_rl"] == {"name": "own-answer rule, knockout", "accuracy": 0.765, "rl_final": 0.75,
                                   "rl_over_it": -0.015}
    assert sets["no_cue"]["best_non_rl"]["name"] == "own-answer rule, knockout"
    assert abs(sets["no_cue"]["best_non_rl"]["rl_over_it"] - 0.035) < 1e-9
    assert "RL's final knockout 0.750 against the best non-RL selector (own-answer rule, knockout, 0.765): -0.015" in \
        "\n".join(set_summary_lines("test", test))
    only_start = MetricsLog(tmp_path / "start", tensorboard=False)
    only_start.log(0, "eval", _reading(0.45, "test/") | _reading(0.45))
    assert summarize(only_start, 1.0, 0)["sets"]["test"]["best_non_rl"] is None  # nothing trained yet
    assert summarize(only_start, 1.0, 0)["sets"]["no_cue"] is None  # never read
