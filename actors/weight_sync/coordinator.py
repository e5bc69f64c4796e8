"""Weight sync: learner rank 0 -> every rollout engine, one version at a time, under one deadline.

`WeightSyncBroadcaster.sync(version)` runs the configured transport (`weight_sync.transport`; the contract in
transport.py, one file per transport: object_store.py, broadcast.py for gloo and nccl, ipc.py) and writes, once for
all of them, what every sync needs:

- one deadline (`WeightSyncConfig.timeout_s`, derived from the generation limits unless set: core/deadlines.py); a
  miss raises WeightSyncTimeout naming the actors that did not answer, after cancelling their late update calls
  (`abandon`): an engine still draining (waiting for its in-flight requests) keeps its old weights and version and
  serves again; one inside its reload session finishes it (new version) or is marked failed. Each engine's outcome
  is in `WeightSyncTimeout.engines`, so the next sync starts from a known state;
- the stats, which split drain, transfer and load time;
- the serving board's publish (`serve.live`): every synced version goes to the board (actors/serving/weight_board.py) as
  an object-store reference; a transport that does not move the weights through the object store has the learner export
  them there once more for the board.

Every learner rank takes part in each export (under ZeRO-3 the parameter gather is collective: a gather on rank 0
alone waits forever for the others); only rank 0's copy travels.
"""
from __future__ import annotations

import time

import ray

from actors.calls import answer_times
from actors.weight_sync.transport import ABANDON_WAIT_S, WeightSyncTimeout, transport_class
from core.weight_transports import transport_params


class WeightSyncBroadcaster:
    """Driver-side coordinator: `sync(version)` pushes the learner's current weights to every engine."""

    def __init__(self, cfg, learners, rollout_handles: list, board=None):
        """cfg: WeightSyncConfig; learners: every learner rank's actor, in rank order (or a single handle when
        there is one rank): gathering ZeRO-3 weights is collective, so every rank takes part in an export and
        rank 0's copy is sent; rollout_handles: RolloutWorker actors; board: an optional WeightBoard actor
        (actors/serving/weight_board.py): every synced version is published there too, and the serving replicas that
        follow it load the same weights (`serve.live`)."""
        self.cfg = cfg
        self.transport = transport_class(cfg.transport.get("name"))(cfg, **transport_params(cfg.transport))
        self.learners = list(learners) if isinstance(learners, (list, tuple)) else [learners]
        self.learner = self.learners[0]
        self.rollouts = list(rollout_handles)
        self.board = board
        self.history: list = []

    def sync(self, version: int) -> dict:
        """Push the learner's weights to every rollout engine and set their policy version.

        Returns {"version", "seconds", "bytes" (per engine), "gbps" (GB/s = bytes / seconds / 1e9, per engine),
        "export_seconds", "drain_s", "transfer_s", "load_s", "workers": per-engine stats}, where the three phases
        of a sync are split (slowest engine each; they add up to about `seconds`):
        - drain_s: waiting for the generation requests in flight in the engine to finish (the engine's pause);
        - transfer_s: moving the weights: the learner's export plus their delivery to the engine (the call's round
          trip less the time the engine spent in it); with gloo/nccl, the broadcast;
        - load_s: loading them into the engine (bucket files, the engine's reload, the prefix-cache reset).
        Raises WeightSyncTimeout past the deadline, after leaving every engine in a defined state (see `abandon`).
        """
        start = time.perf_counter()
        deadline = start + self.cfg.timeout_s
        delivery = self.transport.deliver(self, version, start, deadline)
        if self.board is not None:
            self._publish(version, delivery.board_source, deadline)
        workers = delivery.workers
        seconds = time.perf_counter() - start
        nbytes = max((w.get("bytes", 0) for w in workers), default=0)
        drain = [w.get("drain_s", w.get("pause_s", 0.0)) for w in workers]
        stats = {"version": version, "seconds": seconds, "bytes": nbytes,
                 "gbps": nbytes / seconds / 1e9 if seconds > 0 else 0.0, "export_seconds": delivery.export_s,
                 "drain_s": max(drain, default=0.0), "transfer_s": delivery.export_s + max(delivery.transfer,
                                                                                          default=0.0),
                 "load_s": max(delivery.load, default=0.0), "workers": workers}
        self.history.append({k: v for k, v in stats.items() if k != "workers"})
        return stats

    def _publish(self, version: int, source, deadline: float) -> None:
        """The synced version to the serving board. A transport that did not pass the weights through the object
        store gets them exported there (every learner rank takes part, as in any export). The ref travels inside a
        list, so Ray passes it on unresolved."""
        if source is None:
            refs = [learner.export_weights.remote(rank0_only=True, widen=False) for learner in self.learners]
            self.wait(refs, [f"learner[{r}].export_weights" for r in range(len(refs))], deadline, fetch_local=False)
            source = {"kind": "object_ref", "ref": [refs[0]]}
        self.wait([self.board.publish.remote(version, source)], ["weight board publish"], deadline)

    def names(self, method: str) -> list:
        """"rollout[i] (actor id).method" for every engine: how errors name a call."""
        return [f"rollout[{i}] ({_actor_id(h)}).{method}" for i, h in enumerate(self.rollouts)]

    def wait(self, refs: list, names: list, deadline: float, fetch_local: bool = True) -> list:
        """ray.wait for all refs until `deadline`; WeightSyncTimeout naming the late ones; else results."""
        timeout = max(0.0, deadline - time.perf_counter())
        ready, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout, fetch_local=fetch_local)
        if pending:
            late = [name for ref, name in zip(refs, names) if ref in pending]
            raise WeightSyncTimeout(f"weight sync exceeded timeout_s={self.cfg.timeout_s:g}: no answer "
                                    f"from {', '.join(late)}", late)
        return ray.get(refs) if fetch_local else []

    def wait_engines(self, refs: list, method: str, deadline: float, version: int) -> tuple:
        """Like `wait` for the engines' update calls (`method` on each engine, in order), also returning when each
        answered: (answers, answer times). Past the deadline the late calls are abandoned (`abandon`) before
        WeightSyncTimeout is raised."""
        names = self.names(method)
        ends, pending = answer_times(refs, deadline)
        if pending:
            late = [name for ref, name in zip(refs, names) if ref in pending]
            err = WeightSyncTimeout(f"weight sync to version {version} exceeded timeout_s="
                                    f"{self.cfg.timeout_s:g}: no answer from {', '.join(late)}", late)
            self.abandon(refs, pending, err)
            raise err
        return ray.get(refs), [ends[r] for r in refs]

    def abandon(self, refs: list, pending: list, err: Exception) -> None:
        """Leave every engine in a defined state after a missed deadline or a failure: cancel the late update calls
        (an engine still draining resumes on its old weights and version; one inside its reload session finishes
        it first, so it holds either the new weights or is marked failed), then ask each engine where it stands.
        `err.engines` gets one `update_state()` per engine ({"error": ...} where it did not answer) and the message
        says which version each engine serves."""
        for ref in pending:
            ray.cancel(ref)
        states = []
        for i, h in enumerate(self.rollouts):
            try:
                states.append(ray.get(h.update_state.remote(), timeout=ABANDON_WAIT_S))
            except Exception as e:  # a dead or hung actor: the driver restarts it
                states.append({"state": "unknown", "error": f"{type(e).__name__}: {str(e)[:200]}"})
        err.engines = states
        said = "; ".join(f"rollout[{i}]: {s.get('state')}, serving version {s.get('engine_version', '?')}"
                         for i, s in enumerate(states))
        err.args = (f"{err.args[0]} ({said})",)


def _actor_id(handle) -> str:
    try:
        return handle._actor_id.hex()[:12]
    except AttributeError:
        return type(handle).__name__
