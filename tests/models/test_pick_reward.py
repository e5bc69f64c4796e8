"""The tiny recipe's pick reward (tiny_recipe/pick_reward.py) and its pick-then-point form's credit interface."""
import pytest


def test_the_pick_is_read_from_the_start_of_a_pick_then_point_response_only():
    from tiny_recipe.pick_reward import parse_pick

    assert parse_pick("Pick: #1\n3 + 4 = 7\nAnswer: 7 #0", 2) == 1
    assert parse_pick("Pick: #12 text", 16) == 12
    assert parse_pick("Pick: #2 text", 2) is None  # out of range
    assert parse_pick("Pick: #01 text", 4) is None  # not canonical
    assert parse_pick("Judgment: 1", 2) is None and parse_pick("x Pick: #1", 2) is None


def test_the_pick_reward_blends_the_final_and_the_pick_and_zero_weight_is_the_selection_reward():
    from tiny_recipe.pick_reward import blend_pick_reward

    assert blend_pick_reward(1.0, 0.0, 0.5) == 0.5 and blend_pick_reward(0.0, 1.0, 0.25) == 0.25
    assert blend_pick_reward(1.0, None, 0.5) == 0.5  # no pick: scored 0
    assert blend_pick_reward(0.0, 1.0, 0.0) == 0.0 and blend_pick_reward(1.0, 1.0, 1.0) == 1.0
    with pytest.raises(ValueError, match="pick reward"):
        blend_pick_reward(1.0, 1.0, 1.5)


def test_the_pick_then_point_form_credits_its_pick_only_with_a_weight():
    from actors.rollout.response_forms import FreeText
    from tiny_recipe.pick_point import PickThenPoint

    text = "Pick: #1\n3 + 4 = 7\nAnswer: 7 #0"
    off, on = PickThenPoint(), PickThenPoint(pick_reward=0.5)
    assert not off.credits_candidates and off.credited_candidates(text, 2) == () and off.credit(1.0, ()) == 1.0
    assert on.credits_candidates and on.credited_candidates(text, 2) == (1,)
    assert on.credited_candidates("Judgment: 1", 2) == ()
    assert on.credit(1.0, (0.0,)) == 0.5 and on.credit(1.0, ()) == 0.5  # no pick: scored 0
    assert not FreeText().credits_candidates and FreeText().credit(0.25, ()) == 0.25  # the general form: as is
    with pytest.raises(ValueError, match="tiny.pick_reward"):
        PickThenPoint(pick_reward=1.5)
