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
