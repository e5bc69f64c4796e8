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

Every sync has one deadline (`WeightSyncConfig.timeout_s`); a miss raises WeightSyncTimeout naming the
actors that did not answer. A timed-out rollout keeps running its update: the driver should treat that
actor as failed (shut it down, relaunch), not retry blindly.
"""
from __future__ import annotations

import time

import ray


class WeightSyncTimeout(TimeoutError):
    """A sync missed its deadline; `pending` names the actors that had not answered."""

    def __init__(self, message: str, pending: list):
        super().__init__(message)
        self.pending = pending


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

        Returns {"version", "seconds", "bytes" (per engine), "gbps" (GB/s = bytes / seconds / 1e9,
        per engine), "export_seconds", "workers": per-engine stats}. Raises WeightSyncTimeout.
        """
        start = time.perf_counter()
        deadline = start + self.cfg.timeout_s
        if self.cfg.backend == "nccl":
            workers, export_s = self._sync_nccl(version, deadline), 0.0
        else:
            refs = [learner.export_weights.remote(rank0_only=True, widen=False) for learner in self.learners]
            self._wait(refs, [f"learner[{r}].export_weights" for r in range(len(refs))], deadline,
                       fetch_local=False)
            ref = refs[0]
            export_s = time.perf_counter() - start
            calls = [h.update_weights_from_object_store.remote(ref, version) for h in self.rollouts]
            workers = self._wait(calls, self._names("update_weights_from_object_store"), deadline)
            if self.board is not None:  # the ref travels inside a list, so Ray passes it on unresolved
                self._wait([self.board.publish.remote(version, {"kind": "object_ref", "ref": [ref]})],
                           ["weight board publish"], deadline)
        seconds = time.perf_counter() - start
        nbytes = max((w.get("bytes", 0) for w in workers), default=0)
        stats = {"version": version, "seconds": seconds, "bytes": nbytes,
                 "gbps": nbytes / seconds / 1e9 if seconds > 0 else 0.0,
                 "export_seconds": export_s, "workers": workers}
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
            raise WeightSyncTimeout(f"weight sync exceeded timeout_s={self.cfg.timeout_s}: no answer "
                                    f"from {', '.join(late)}", late)
        return ray.get(refs) if fetch_local else []

    def _sync_nccl(self, version: int, deadline: float) -> list:
        """GPU path (UNTESTED here): one NCCL broadcast from learner rank 0 to every engine worker."""
        if not self._nccl_ready:
            self._init_nccl(deadline)
        metas = ray.get([learner.weight_metadata.remote() for learner in self.learners],  # ZeRO-3: collective
                        timeout=max(0.0, deadline - time.perf_counter()))
        meta = metas[0]
        receives = [h.update_weights_nccl.remote(meta, version) for h in self.rollouts]
        send = self.learner.broadcast_weights.remote()
        results = self._wait(receives + [send], self._names("update_weights_nccl")
                             + ["learner.broadcast_weights"], deadline)
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
