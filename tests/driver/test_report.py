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
