"""benchmarks/line_check.py: the AUC it reports."""
import pytest

from benchmarks.line_check import auc


def test_auc_is_the_probability_a_positive_outscores_a_negative_with_ties_half():
    assert auc([3, 4], [1, 2]) == 1.0
    assert auc([1, 2], [3, 4]) == 0.0
    assert auc([1, 3], [2, 2]) == 0.5
    assert auc([2], [2]) == 0.5
    assert auc([0.9, 0.8, 0.1], [0.85, 0.2]) == pytest.approx(3 / 6)  # 0.9 > both, 0.8 > 0.2 only
