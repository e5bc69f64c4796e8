"""Waiting on Ray calls one at a time, to know when each answered (start-up per actor, sync per engine).

Ray is imported by the call that waits: the learner imports this file through its weight senders and runs
without Ray in the learner benchmarks (benchmarks/learner_gpu.py)."""
from __future__ import annotations

import time


def answer_times(refs: list, deadline: float, clock=time.perf_counter) -> tuple:
    """Wait for `refs` until `deadline` (a `clock()` value); return ({ref: clock() when it answered}, the refs
    still pending at the deadline). Answered means finished, with a value or an error (`ray.get` tells which).
    The dict is in the order the calls answered."""
    import ray

    answered, pending = {}, list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - clock()))
        if not ready:
            break
        now = clock()
        answered.update({ref: now for ref in ready})
    return answered, pending
