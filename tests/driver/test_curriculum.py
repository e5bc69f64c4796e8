"""The candidate-count curriculum: stages, the reward-driven advance, and an exact resume."""
from types import SimpleNamespace

import pytest
from hypothesis import given, strategies as st

from driver.curriculum import CurriculumStream, curriculum_caps, mean_gain, stage_caps
from driver.stream import PromptStream

SIZES = {f"p{i}": 2 + i % 4 for i in range(24)}  # 2..5 candidates
IDS = list(SIZES)


def test_stage_caps():
    assert stage_caps(2, 5) == [2, 3, 4, 5]
    assert stage_caps(8, 8) == [8] and stage_caps(9, 8) == [8]


def test_one_stage_is_the_plain_prompt_stream():
    plain, single = PromptStream(IDS, seed=4), CurriculumStream(IDS, SIZES, [5], seed=4)
    assert [single.take(5) for _ in range(9)] == [plain.take(5) for _ in range(9)]


def test_a_stage_draws_only_prompts_within_its_cap_and_advances_on_the_recent_gain():
    c = CurriculumStream(IDS, SIZES, stage_caps(2, 5), advance_gain=0.2, window=3)
    assert all(SIZES[i] <= 2 for i in c.take(30))
    assert not any(c.observe(g) for g in (0.5, None, 0.0, 0.0))  # last 3: 0.5, 0, 0 -> 0.17: not yet...
    assert c.cap == 2 and c.observe(0.6)                           # ...0, 0, 0.6 -> 0.2: advance
    assert c.cap == 3 and c.gains == []
    drawn = c.take(40)
    assert {SIZES[i] for i in drawn} == {2, 3}
    for _ in range(2):
        for _ in range(3):
            c.observe(1.0)
    assert c.cap == 5 and not c.observe(1.0)  # the last stage admits everything and stays


def test_a_stage_without_prompts_is_refused():
    with pytest.raises(ValueError, match="no training prompt has at most 1"):
        CurriculumStream(IDS, SIZES, [1, 2])


def test_mean_gain_is_sampled_reward_over_random_at_the_given_size():
    def group(correct, rewards):
        return SimpleNamespace(task=SimpleNamespace(num_candidates=len(correct), correct=correct),
                               rollouts=[SimpleNamespace(reward=r) for r in rewards])
    groups = [group((1.0, 0.0), (1, 1, 0, 1)), group((0.0, 1.0), (0, 0, 0, 0)), group((1.0, 0.0, 0.0), (1, 1))]
    assert mean_gain(groups, 2) == pytest.approx(((0.75 - 0.5) + (0.0 - 0.5)) / 2)
    assert mean_gain(groups, 3) == pytest.approx(1 - 1 / 3) and mean_gain(groups, 4) is None


@pytest.mark.parametrize("mirror", [False, True])
@given(st.lists(st.tuples(st.integers(1, 6), st.booleans()), min_size=1, max_size=10), st.integers(0, 10),
       st.integers(0, 4))
def test_restore_continues_exactly_across_stages(mirror, plan, cut, unfinished_count):
    """As for PromptStream: kill after `cut` steps (some drawn ids unfinished, twins among them when mirrored);
    the resumed curriculum is in the same stage, re-issues the unfinished ids, then draws what an uninterrupted
    run draws."""
    def run(stream, steps):
        out = []
        for take, good in steps:
            out += stream.take(take)
            stream.observe(1.0 if good else 0.0)
        return out

    kwargs = dict(advance_gain=0.5, window=2, seed=7, mirror=mirror)
    flat = run(CurriculumStream(IDS, SIZES, [2, 3, 5], **kwargs), plan)
    killed = CurriculumStream(IDS, SIZES, [2, 3, 5], **kwargs)
    drawn = run(killed, plan[:cut])
    unfinished = drawn[len(drawn) - min(unfinished_count, len(drawn)):]
    finished = drawn[: len(drawn) - len(unfinished)]
    resumed = CurriculumStream.restore(IDS, SIZES, [2, 3, 5], killed.state(unfinished), **kwargs)
    assert resumed.stage == killed.stage and resumed.gains == killed.gains
    rest = resumed.take(len(unfinished)) + run(resumed, plan[cut:])
    assert finished + rest == flat


def test_restore_refuses_a_changed_curriculum():
    state = CurriculumStream(IDS, SIZES, [2, 3, 5], stage=2).state([])
    with pytest.raises(ValueError, match="stage 2 but this config has 1 stages"):
        CurriculumStream.restore(IDS, SIZES, [5], state)
    with pytest.raises(ValueError, match="no curriculum state"):
        CurriculumStream.restore(IDS, SIZES, [5], PromptStream(IDS).state([]))


def test_mirror_draws_each_prompt_beside_its_twin():
    """curriculum.mirror: every new draw is followed by `{id}/mirror`; an odd count rounds up so that twins stay
    in one batch; the stream's position counts originals only (the same originals as unmirrored, in order)."""
    plain = CurriculumStream(IDS, SIZES, [5], seed=3)
    mirrored = CurriculumStream(IDS, SIZES, [5], seed=3, mirror=True)
    first, second = mirrored.take(4), mirrored.take(3)
    assert len(first) == 4 and len(second) == 4
    drawn = first + second
    assert drawn[1::2] == [i + "/mirror" for i in drawn[0::2]]
    assert drawn[0::2] == plain.take(4)
    state = mirrored.state(unfinished=second)
    resumed = CurriculumStream.restore(IDS, SIZES, [5], state, seed=3, mirror=True)
    assert resumed.take(4) == second  # re-issued as drawn, twins included


def test_curriculum_caps_follow_the_config():
    from core.config import CurriculumConfig

    assert curriculum_caps(CurriculumConfig(enabled=False, max_candidates=2), 8) == [8]
    assert curriculum_caps(CurriculumConfig(enabled=True), 8) == [2, 3, 4, 5, 6, 7, 8]
    assert curriculum_caps(CurriculumConfig(enabled=True, max_candidates=2), 8) == [2]  # pairs only
    assert curriculum_caps(CurriculumConfig(enabled=True, start_candidates=3, max_candidates=5), 8) == [3, 4, 5]
    assert curriculum_caps(CurriculumConfig(enabled=True, max_candidates=12), 8)[-1] == 8
