"""The serving benchmark's load generators (benchmarks/serve.py): the asyncio client keeps `concurrency` requests
in flight, answers every body once, and reports what the threaded one reports."""
import asyncio
import time

from benchmarks.serve import run_load, run_load_async


def test_the_async_load_keeps_concurrency_requests_in_flight_and_answers_each_body_once():
    in_flight, peak = 0, 0

    async def fn(body):
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        return (200, {"echo": body}) if body % 5 else (400, {"error": "bad"})

    closed = []

    async def aclose():
        closed.append(True)

    fn.aclose = aclose
    result = run_load_async(fn, list(range(40)), concurrency=8)
    assert closed == [True]  # what the client holds is released on the run's own loop
    assert peak == 8 and result["requests"] == 40 and result["ok"] == 32
    assert [r[1] for r in result["results"]] == [{"echo": i} if i % 5 else {"error": "bad"} for i in range(40)]
    assert 0.01 <= result["p50_s"] <= result["p99_s"] and result["rps"] <= 8 / 0.01 * 1.05
    threaded = run_load(lambda body: (time.sleep(0.01), (200, body))[1], list(range(16)), concurrency=4)
    assert set(threaded) == set(result) and threaded["ok"] == 16
