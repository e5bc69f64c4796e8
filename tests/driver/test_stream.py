"""The prompt stream: deterministic epochs, and a checkpoint/restore that neither replays nor skips."""
from hypothesis import given, strategies as st

from driver.stream import PromptStream

IDS = [f"p{i}" for i in range(7)]


def test_each_epoch_is_a_permutation_and_epochs_differ():
    stream = PromptStream(IDS, seed=3)
    first, second = stream.take(7), stream.take(7)
    assert sorted(first) == sorted(IDS) == sorted(second) and first != second
    assert stream.epoch == 2


@given(st.lists(st.integers(1, 5), min_size=1, max_size=8), st.integers(0, 8), st.integers(0, 4))
def test_restore_continues_exactly(takes, cut, unfinished_count):
    """Kill after `cut` takes with some drawn ids unfinished: the resumed stream re-issues those, then
    continues, so the finished prefix + everything after equals an uninterrupted run's draws."""
    reference = PromptStream(IDS, seed=1)
    uninterrupted = [reference.take(k) for k in takes]
    flat = [i for batch in uninterrupted for i in batch]

    killed = PromptStream(IDS, seed=1)
    drawn = [i for k in takes[:cut] for i in killed.take(k)]
    unfinished = drawn[len(drawn) - min(unfinished_count, len(drawn)):]
    finished = drawn[: len(drawn) - len(unfinished)]
    state = killed.state(unfinished)
    killed.position = killed.position + 100  # the dead process's state is gone; only `state` survives
    resumed = PromptStream.restore(IDS, state)
    rest = resumed.take(len(flat) - len(finished))
    assert finished + rest == flat
