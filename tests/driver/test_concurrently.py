"""driver.run.concurrently: the evaluation's readings run at once on threads, results in order, errors after all end."""
import threading
import time

import pytest

from driver.run import concurrently


def test_calls_run_at_once_and_results_come_in_order():
    barrier = threading.Barrier(3, timeout=10)  # passes only if all three calls are running together

    def call(value):
        def run():
            barrier.wait()
            return value
        return run

    assert concurrently([call("cued"), call("no cue"), call("knockout")]) == ["cued", "no cue", "knockout"]
    assert concurrently([lambda: 7]) == [7]


def test_an_error_propagates_once_every_call_has_ended():
    finished = []

    def slow():
        time.sleep(0.3)
        finished.append("slow")
        return 1

    def failing():
        raise RuntimeError("engine died")

    with pytest.raises(RuntimeError, match="engine died"):
        concurrently([failing, slow])
    assert finished == ["slow"]
