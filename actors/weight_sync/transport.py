"""The weight-transport contract: what one way of moving the learner's weights into the rollout engines provides.

A transport (one file each: object_store.py, broadcast.py for gloo and nccl, ipc.py; the names are listed in
core/weight_transports.py, each with its parameters) is a class with three parts:

- `sender`: the learner side, a class built with the learner (`sender(learner)`; the learner holds one per transport
  it is asked to send through, actors/learner/learner.py). It reads `learner.rank`, `learner.device`,
  `learner.cfg.zero_stage` and `learner._full_state()`. None when the learner's own `export_weights` is all the
  transport needs.
- `receiver`: the rollout side, a class built with the worker's `EngineUpdate` (engine_update.py: the drain -> load
  -> resume protocol); its methods hand `EngineUpdate.run(version, load)` the transport's `load` coroutine. Engine-side
  code runs in the vLLM worker through `update.call_in_engine("module:function", ...)`, so a transport adds no method
  to the worker extension.
- `deliver(sync, version, start, deadline) -> Delivery`: the coordinator's part (coordinator.py), run once per sync;
  `sync` is the coordinator, whose `learners`, `rollouts`, `wait`, `wait_engines` and `abandon` it uses.

The built-in transports call the learner's and the worker's named methods (`broadcast_weights`, `update_weights_ipc`,
...), each a one-line hand-over to the sender or receiver. A transport of your own, named by its dotted path in
`weight_sync.transport.name` (`package.module:Class`, checked before any actor starts), needs no method on them: its
`deliver` calls `learner.weight_call.remote("package.module:Sender", "method", *args)` and
`rollout.weight_call.remote("package.module:Receiver", "method", *args)`, which build and hold that sender or
receiver as they do the built-in ones (tests/actors/helpers_transport.py is a small example).

The coordinator writes the rest once for every transport: the deadline, abandoning late engines, the stats and the
serving board's publish.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Optional

ABANDON_WAIT_S = 60.0  # how long the coordinator's `abandon` waits for each engine's state after a missed deadline


class WeightSyncTimeout(TimeoutError):
    """A sync missed its deadline; `pending` names the actors that had not answered; `engines` holds each
    engine's `update_state()` after the late calls were cancelled."""

    def __init__(self, message: str, pending: list):
        super().__init__(message)
        self.pending = pending
        self.engines: list = []


class WeightSyncFailed(RuntimeError):
    """A sync failed before its deadline (an engine outside a broadcast group, an error in a member); same fields
    as WeightSyncTimeout."""

    def __init__(self, message: str, pending: list):
        super().__init__(message)
        self.pending = pending
        self.engines: list = []


@dataclass
class Delivery:
    """What a transport's `deliver` reports to the coordinator: `workers`, each engine's stats (its update call's
    answer: "bytes", "drain_s", "load_s", ...); `export_s`, the learner's export; `transfer`, each engine's share of
    moving the weights (seconds); `load`, each engine's loading time; `board_source`, the weights as the serving
    board takes them ({"kind": "object_ref", "ref": [ObjectRef]}) when the transport put them in the object store
    anyway, else None (the coordinator exports them there when a board follows the run)."""
    workers: list
    export_s: float
    transfer: list
    load: list
    board_source: Optional[dict] = None


class Transport:
    """Base of the transports: `name` (its `weight_sync.transport.name`), `sender`, `receiver`, `deliver`."""

    name = ""
    sender = None
    receiver = None

    def __init__(self, cfg, **params):
        """cfg: WeightSyncConfig (its deadline keys); params: the `weight_sync.transport` section's other keys (a
        built-in transport's with their defaults filled in: core/weight_transports.py)."""
        self.cfg = cfg
        self.params = params

    def deliver(self, sync, version: int, start: float, deadline: float) -> Delivery:
        raise NotImplementedError


def transport_class(name: str) -> type:
    """The Transport class `weight_sync.transport.name=name` names (core/weight_transports.py); ValueError for an
    unknown name."""
    from core.weight_transports import transport_path

    module, _, attribute = transport_path(name).partition(":")
    return getattr(importlib.import_module(module), attribute)


def timed_transfer(workers: list, ends: list, sent: float) -> list:
    """Each engine's share of moving the weights when its update call carried them: the call's round trip (from
    `sent` to its answer at `ends[i]`) less the time the engine spent in it."""
    return [max(0.0, end - sent - w.get("seconds", 0.0)) for w, end in zip(workers, ends)]
