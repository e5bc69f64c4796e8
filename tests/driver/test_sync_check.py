"""driver/sync_check.py: which response is checked after a sync, and when the engines' log-probs stop the run."""
import pytest

from core.records import TrainSequence
from driver.sync_check import agreement, checked_sequence, max_abs_diff


def seq(response, allowed=None):
    return TrainSequence(prompt_token_ids=[1, 2], response_token_ids=response,
                         behaviour_logprobs=[-1.0] * len(response), advantage=0.0, policy_version=0,
                         allowed_token_ids=allowed)


def test_the_checked_response_is_the_first_scored_over_the_whole_vocabulary():
    empty, constrained, free = seq([]), seq([5], allowed=[5, 6]), seq([7, 8])
    assert checked_sequence([empty, constrained, free]) is free
    assert checked_sequence([empty, constrained]) is None


def test_a_forced_judgment_is_checked_on_its_reasoning_and_prefix():
    """A forced judgment (free reasoning, a written prefix, a constrained index): where no sequence is free throughout,
    the start of one up to its first constrained token is checked."""
    forced = TrainSequence([1, 2], [7, 8, 9, 5], [-1.0, -1.0, 0.0, -0.7], 0.0, 0, loss_mask=[1, 1, 0, 1],
                           allowed_ids_by_token=[None, None, None, [5, 6]])
    index_only = TrainSequence([1, 2], [5], [-0.7], 0.0, 0, allowed_ids_by_token=[[5, 6]])
    start = checked_sequence([index_only, forced])
    assert start.response_token_ids == [7, 8, 9] and start.loss_mask == [1, 1, 0]
    assert start.allowed_ids_by_token is None and start.behaviour_logprobs == [-1.0, -1.0, 0.0]
    assert checked_sequence([index_only]) is None and checked_sequence([forced, seq([3])]).response_token_ids == [3]


def test_agreement_records_the_worst_engine_and_names_it_past_the_tolerance():
    learner = [-1.0, -2.0, -0.5]
    metrics, error = agreement(learner, [[-1.0, -2.0, -0.5], [-1.0, -2.00001, -0.5]], tolerance=1e-3)
    assert error is None and metrics["sync/logprob_max_abs_diff"] == pytest.approx(1e-5)
    assert metrics["sync/logprob_tokens"] == 3
    # an engine still on the old weights: the step moved its log-probs by more than the tolerance
    metrics, error = agreement(learner, [[-1.0, -2.0, -0.5], [-1.1, -2.0, -0.5]], tolerance=1e-3)
    assert metrics["sync/logprob_max_abs_diff"] == pytest.approx(0.1)
    assert error.startswith("rollout engine 1 does not serve the learner's weights")


def test_log_probs_of_different_lengths_are_an_error_not_a_pass():
    with pytest.raises(ValueError, match="different lengths"):
        max_abs_diff([0.0], [0.0, 0.0])
