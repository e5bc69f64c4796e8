"""SelectionTask rows round-trip and malformed rows are rejected with the field named; the per-token loss mask
of Rollout and TrainSequence (validated, counted, carried through pickling as Ray does)."""
import pickle

import pytest

from core.records import Rollout, SelectionTask, TrainSequence


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


def _masked(mask, response=(3, 50, 51, 4), allowed=(3, 4), weight=1.0):
    """A pick-solve-point response: two sampled index tokens around a written solution (outside the allowed set)."""
    return TrainSequence([1, 2], list(response), [-0.3, 0.0, 0.0, -0.2][:len(response)], 1.0, 0, loss_weight=weight,
                         allowed_token_ids=list(allowed), loss_mask=mask)


def test_loss_mask_is_validated():
    with pytest.raises(ValueError, match="loss_mask has 3 values for 4 response tokens"):
        _masked([1, 0, 1])
    with pytest.raises(ValueError, match="must be 0 or 1"):
        _masked([1, 0, 0.5, 1])
    with pytest.raises(ValueError, match="outside the allowed set"):  # the allowed set binds trained tokens only
        _masked([1, 1, 0, 1])
    with pytest.raises(ValueError, match="outside the allowed set"):
        _masked(None)
    assert _masked([1, 0, 0, 1]).token_mask == [1, 0, 0, 1]


def test_num_loss_tokens_counts_mask_one_tokens():
    assert _masked([1, 0, 0, 1]).num_loss_tokens == 2
    assert _masked([1, 0, 0, 1], weight=0.0).num_loss_tokens == 0
    assert _masked([0, 0, 0, 0], response=(50, 51, 52, 53)).num_loss_tokens == 0
    plain = TrainSequence([1], [3, 4, 3], [-0.1] * 3, 1.0, 0)
    assert plain.loss_mask is None and plain.token_mask == [1, 1, 1] and plain.num_loss_tokens == 3


def test_masked_rollouts_and_sequences_survive_pickling():
    """Rollouts and sequences travel between actors pickled (Ray); a mask, or none, arrives as it left."""
    masked = Rollout("p/0", [1, 2], [3, 50, 51, 4], [-0.3, 0.0, 0.0, -0.2], "", 0, "stop", loss_mask=[1, 0, 0, 1])
    plain = Rollout("p/0", [1, 2], [3], [-0.3], "", 0, "stop")
    assert plain.loss_mask is None
    for obj in (masked, plain, _masked([1, 0, 0, 1])):
        assert pickle.loads(pickle.dumps(obj)) == obj
