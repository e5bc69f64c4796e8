"""benchmarks/combine_rule_probe.py: the label-free format rule of a pick-then-point response."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "benchmarks"))

from combine_rule_probe import rule_targets  # noqa: E402


def test_the_rule_names_every_candidate_stating_the_answer_else_the_pick():
    assert rule_targets(["4", "5", "4"], "4", 1, str.strip) == [0, 2]   # stated: the pick does not matter
    assert rule_targets(["4", " 5"], "5", 0, str.strip) == [1]          # compared after normalising
    assert rule_targets(["4", "5"], "6", 1, str.strip) == [1]           # unstated: the pick
    assert rule_targets(["4", "5"], None, 0, str.strip) == [0]          # no answer line: the pick
