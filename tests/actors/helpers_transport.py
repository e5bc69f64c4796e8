"""A weight transport of the user's own, named by its dotted path (`weight_sync.transport.name:
tests.actors.helpers_transport:ArraysTransport`), for tests/actors/test_weight_transports.py and test_weight_sync.py.

It moves the learner's arrays through the object store like the built-in transport, but reaches the learner and the
engines only through their generic `weight_call`, as any transport outside the repository must: no method of the
learner or the rollout worker knows it.
"""
from __future__ import annotations

import time

from actors.weight_sync.object_store import ObjectStoreReceiver
from actors.weight_sync.transport import Delivery, Transport, timed_transfer

RECEIVER = f"{__name__}:ArraysReceiver"


class ArraysReceiver:
    """The rollout side: the object store's receiver under another name, counting its loads."""

    def __init__(self, update):
        self.inner, self.loads = ObjectStoreReceiver(update), 0

    async def load(self, weights: dict, version: int) -> dict:
        self.loads += 1
        stats = await self.inner.update_weights_from_object_store(weights, version)
        return {**stats, "loads": self.loads}


class ArraysTransport(Transport):
    """One export, one ref to every engine's `weight_call`. `note`: a parameter of its own (the section's other keys
    are its constructor's keyword arguments)."""

    name = "arrays"
    receiver = ArraysReceiver

    def __init__(self, cfg, note: str = ""):
        super().__init__(cfg, note=note)
        self.note = note

    def deliver(self, sync, version: int, start: float, deadline: float) -> Delivery:
        refs = [learner.export_weights.remote(rank0_only=True, widen=False) for learner in sync.learners]
        sync.wait(refs, [f"learner[{r}].export_weights" for r in range(len(refs))], deadline, fetch_local=False)
        export_s, sent = time.perf_counter() - start, time.perf_counter()
        calls = [h.weight_call.remote(RECEIVER, "load", refs[0], version) for h in sync.rollouts]
        workers, ends = sync.wait_engines(calls, "weight_call", deadline, version)
        return Delivery(workers, export_s, timed_transfer(workers, ends, sent), [w["load_s"] for w in workers])


NOT_A_TRANSPORT = "a string, not a class"
