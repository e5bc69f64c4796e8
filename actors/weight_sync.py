"""Weight sync: learner rank 0 -> every rollout engine, one version at a time, under one deadline.

Every learner rank takes part in each export (under ZeRO-3 the parameter gather is collective: a gather on
rank 0 alone waits forever for the others); only rank 0's copy travels.

object_store backend (the CPU default). The learner exports its full HF-named state dict as numpy
arrays in its training dtype (`export_weights(rank0_only=True, widen=False) -> dict[str, np.ndarray]`; bf16 as
marked uint16 bit patterns, never widened to float32, `lm_head.weight` included for tied models) into
Ray's object store once; the broadcaster hands the same ObjectRef to every rollout actor's
`update_weights_from_object_store(ref, version)`. Ray resolves a top-level ObjectRef argument before
the call, and numpy arrays are read zero-copy from shared memory on the same node, so the driver never
touches the weights and there is no per-parameter `ray.get`. Each rollout actor then pushes the arrays
into its engine through /dev/shm safetensors buckets (actors/rollout.py, actors/vllm_extension.py).

nccl backend (GPU clusters; UNTESTED on the CPU development machines). Protocol, following vLLM's RLHF
example: the learner (rank 0) and every engine worker join one NCCL group
(`learner.init_weight_update_group(addr, port, world_size)`,
`rollout.init_weight_update_group(addr, port, rank_offset, world_size)`); per sync the rollouts enter
`update_weights_nccl(metadata, version)` while the learner runs `broadcast_weights()`, which
broadcasts every tensor of `weight_metadata()` in order (learner side: actors/learner_nccl.py).

Every sync has one deadline (`WeightSyncConfig.timeout_s`, derived from the generation limits unless set:
core/deadlines.py); a miss raises WeightSyncTimeout naming the actors that did not answer, after cancelling their
late update calls: an engine still draining (waiting for its in-flight requests) keeps its old weights and
version and serves again; one inside its reload session finishes it (new version) or is marked failed. Each
engine's outcome is in `WeightSyncTimeout.engines`, so the next sync starts from a known state. The learner holds
no sync state on this backend (an export is a read of its weights). Every sync's stats split drain, transfer and
load time (`sync`).
"""
from __future__ import annotations

import time

import ray

from actors.calls import answer_times

ABANDON_WAIT_S = 60.0  # how long `_abandon` waits for each engine's state after a missed deadline


class WeightSyncTimeout(TimeoutError):
    """A sync missed its deadline; `pending` names the actors that had not answered; `engines` holds each
    engine's `update_state()` after the late calls were cancelled (object_store backend)."""

    def __init__(self, message: str, pending: list):
        super().__init__(message)
        self.pending = pending
        self.engines: list = []


class WeightSyncBroadcaster:
    """Driver-side coordinator: `sync(version)` pushes the learner's current weights to every engine."""

    def __init__(self, cfg, learners, rollout_handles: list, board=None):
        """cfg: WeightSyncConfig; learners: every learner rank's actor, in rank order (or a single handle when
        there is one rank): gathering ZeRO-3 weights is collective, so every rank takes part in an export and
        rank 0's copy is sent; rollout_handles: RolloutWorker actors (update_weights_from_object_store);
        board: an optional WeightBoard actor (actors/weight_board.py): every synced version is published there
        too, and the serving replicas that follow it load the same weights (`serve.live`)."""
        if cfg.backend not in ("object_store", "nccl"):
            raise ValueError(f"weight_sync.backend={cfg.backend!r}: this broadcaster implements "
                             f"'object_store' (CPU) and 'nccl' (GPU, untested here)")
        self.cfg = cfg
        self.learners = list(learners) if isinstance(learners, (list, tuple)) else [learners]
        self.learner = self.learners[0]
        self.rollouts = list(rollout_handles)
        self.board = board
        self.history: list = []
        self._nccl_ready = False

    def sync(self, version: int) -> dict:
        """Push the learner's weights to every rollout engine and set their policy version.

        Returns {"version", "seconds", "bytes" (per engine), "gbps" (GB/s = bytes / seconds / 1e9, per engine),
        "export_seconds", "drain_s", "transfer_s", "load_s", "workers": per-engine stats}, where the three phases
        of a sync are split (slowest engine each; they add up to about `seconds`):
        - drain_s: waiting for the generation requests in flight in the engine to finish (the engine's pause);
        - transfer_s: moving the weights: the learner's export into the object store plus their delivery to the
          engine's actor (the call's round trip less the time the engine spent in it); with nccl, the broadcast;
        - load_s: loading them into the engine (bucket files, the engine's reload, the prefix-cache reset).
        Raises WeightSyncTimeout past the deadline, after leaving every engine in a defined state (see `_abandon`).
        """
        start = time.perf_counter()
        deadline = start + self.cfg.timeout_s
        if self.cfg.backend == "nccl":
            workers, export_s = self._sync_nccl(version, deadline), 0.0
            rtts = [w.get("seconds", 0.0) for w in workers]
        else:
            refs = [learner.export_weights.remote(rank0_only=True, widen=False) for learner in self.learners]
            self._wait(refs, [f"learner[{r}].export_weights" for r in range(len(refs))], deadline,
                       fetch_local=False)
            ref = refs[0]
            export_s = time.perf_counter() - start
            sent = time.perf_counter()
            calls = [h.update_weights_from_object_store.remote(ref, version) for h in self.rollouts]
            workers, ends = self._wait_timed(calls, self._names("update_weights_from_object_store"), deadline,
                                             version)
            rtts = [end - sent for end in ends]
            if self.board is not None:  # the ref travels inside a list, so Ray passes it on unresolved
                self._wait([self.board.publish.remote(version, {"kind": "object_ref", "ref": [ref]})],
                           ["weight board publish"], deadline)
        seconds = time.perf_counter() - start
        nbytes = max((w.get("bytes", 0) for w in workers), default=0)
        drain = [w.get("drain_s", w.get("pause_s", 0.0)) for w in workers]
        load = [w.get("load_s", 0.0) for w in workers]
        delivery = [max(0.0, rtt - w.get("seconds", 0.0)) for rtt, w in zip(rtts, workers)]
        if self.cfg.backend == "nccl":  # the broadcast happens inside the engine's load session
            delivery = [w.get("load_s", 0.0) for w in workers]
        stats = {"version": version, "seconds": seconds, "bytes": nbytes,
                 "gbps": nbytes / seconds / 1e9 if seconds > 0 else 0.0, "export_seconds": export_s,
                 "drain_s": max(drain, default=0.0), "transfer_s": export_s + max(delivery, default=0.0),
                 "load_s": max(load, default=0.0) if self.cfg.backend != "nccl" else 0.0, "workers": workers}
        self.history.append({k: v for k, v in stats.items() if k != "workers"})
        return stats

    def _names(self, method: str) -> list:
        return [f"rollout[{i}] ({_actor_id(h)}).{method}" for i, h in enumerate(self.rollouts)]

    def _wait(self, refs: list, names: list, deadline: float, fetch_local: bool = True) -> list:
        """ray.wait for all refs until `deadline`; WeightSyncTimeout naming the late ones; else results."""
        timeout = max(0.0, deadline - time.perf_counter())
        ready, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout, fetch_local=fetch_local)
        if pending:
            late = [name for ref, name in zip(refs, names) if ref in pending]
            raise WeightSyncTimeout(f"weight sync exceeded timeout_s={self.cfg.timeout_s:g}: no answer "
                                    f"from {', '.join(late)}", late)
        return ray.get(refs) if fetch_local else []

    def _wait_timed(self, refs: list, names: list, deadline: float, version: int) -> tuple:
        """Like `_wait` for the engines' update calls, also returning when each answered; past the deadline
        the late calls are abandoned (`_abandon`) before WeightSyncTimeout is raised."""
        ends, pending = answer_times(refs, deadline)
        if pending:
            late = [name for ref, name in zip(refs, names) if ref in pending]
            err = WeightSyncTimeout(f"weight sync to version {version} exceeded timeout_s="
                                    f"{self.cfg.timeout_s:g}: no answer from {', '.join(late)}", late)
            self._abandon(refs, pending, err)
            raise err
        return ray.get(refs), [ends[r] for r in refs]

    def _abandon(self, refs: list, pending: list, err: WeightSyncTimeout) -> None:
        """Leave every engine in a defined state after a missed deadline: cancel the late update calls (an
        engine still draining resumes on its old weights and version; one inside its reload session finishes
        it first, so it holds either the new weights or is marked failed), then ask each engine where it
        stands. `err.engines` gets one `update_state()` per engine ({"error": ...} where it did not answer)
        and the message says which version each engine serves."""
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

    def _sync_nccl(self, version: int, deadline: float) -> list:
        """GPU path (UNTESTED here): one NCCL broadcast from learner rank 0 to every engine worker."""
        if not self._nccl_ready:
            self._init_nccl(deadline)
        metas = ray.get([learner.weight_metadata.remote() for learner in self.learners],  # ZeRO-3: collective
                        timeout=max(0.0, deadline - time.perf_counter()))
        meta = metas[0]
        receives = [h.update_weights_nccl.remote(meta, version) for h in self.rollouts]
        send = self.learner.broadcast_weights.remote()
        try:
            results = self._wait(receives + [send], self._names("update_weights_nccl")
                                 + ["learner.broadcast_weights"], deadline)
        except WeightSyncTimeout:
            # a broadcast may have stopped half-way: never reuse that group, the next sync forms a new one.
            # (UNTESTED: the learner's thread stays inside NCCL until NCCL's own timeout ends the collective.)
            self._nccl_ready = False
            for ref in receives:
                ray.cancel(ref)
            raise
        return results[:-1]

    def _init_nccl(self, deadline: float) -> None:
        address, port = ray.get(self.learner.weight_update_address.remote(),
                                timeout=max(0.0, deadline - time.perf_counter()))
        world_size = 1 + len(self.rollouts)  # one worker per engine (no tensor parallelism)
        calls = [h.init_weight_update_group.remote(address, port, 1 + i, world_size)
                 for i, h in enumerate(self.rollouts)]
        calls.append(self.learner.init_weight_update_group.remote(address, port, world_size))
        self._wait(calls, self._names("init_weight_update_group") + ["learner.init_weight_update_group"],
                   deadline)
        self._nccl_ready = True


def _actor_id(handle) -> str:
    try:
        return handle._actor_id.hex()[:12]
    except AttributeError:
        return type(handle).__name__
