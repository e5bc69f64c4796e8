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
