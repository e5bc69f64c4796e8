"""Run._read_on_engine: every evaluation procedure (whole prompts, knockout, round robin) survives one engine death."""
import pytest
from ray.exceptions import RayActorError

from driver.run import Run, RunFailed


def bare_run(restores: list) -> Run:
    run = Run.__new__(Run)  # no Ray, no config: only what the helper touches
    run._warn = lambda message: None
    run._restore_worker = restores.append
    return run


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
