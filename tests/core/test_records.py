"""SelectionTask rows round-trip and malformed rows are rejected with the field named."""
import pytest

from core.records import SelectionTask


def _row(**changes):
    row = dict(prompt_id="p/0", problem_id="p", domain="math", problem="1+1", candidates=["a", "b"],
               candidate_answers=["2", "3"], labels=[1.0, 0.0], reference="2", prompt="...")
    row.update(changes)
    return row


def test_round_trip():
    task = SelectionTask.from_dict(_row())
    assert SelectionTask.from_dict(task.to_dict()) == task
    assert task.num_candidates == 2 and task.correct == (True, False)


def test_missing_field_named():
    row = _row()
    del row["labels"]
    with pytest.raises(ValueError, match="labels"):
        SelectionTask.from_dict(row)


def test_length_mismatch_named():
    with pytest.raises(ValueError, match="candidate_answers"):
        SelectionTask.from_dict(_row(candidate_answers=["2"]))
