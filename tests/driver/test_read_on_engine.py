"""HeldOutReader._read_on_engine: every evaluation procedure (whole prompts, knockout, round robin) survives one
engine death."""
from types import SimpleNamespace

import pytest
from ray.exceptions import RayActorError

from driver.failure import RunFailed
from driver.heldout import HeldOutReader


def bare_run(restores: list) -> HeldOutReader:
    """A reader with no Ray and no config: only what the helper touches (the fleet's restart of engine 0)."""
    return HeldOutReader(None, SimpleNamespace(restore_worker=restores.append), [], [], warn=lambda message: None)


def test_a_reading_is_taken_again_after_the_engine_restarted():
    restores, calls = [], []

    def reading():
        calls.append(1)
        if len(calls) == 1:
            raise RayActorError()
        return "choices"

    assert bare_run(restores)._read_on_engine(reading, "knockout evaluation at step 0") == "choices"
    assert restores == [0] and len(calls) == 2


def test_a_second_death_or_another_error_fails_the_run_naming_the_reading():
    def dies():
        raise RayActorError()

    with pytest.raises(RunFailed, match="round-robin evaluation at step 5 failed"):
        bare_run([])._read_on_engine(dies, "round-robin evaluation at step 5")

    def broken():
        raise ValueError("bad tokens")

    with pytest.raises(RunFailed, match="evaluation at step 5 failed .ValueError: bad tokens"):
        bare_run([])._read_on_engine(broken, "evaluation at step 5")
