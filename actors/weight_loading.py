"""Weight receiving (a mixin of actors/rollout.py's RolloutWorker): new weights into the running engine.

`update_weights_from_object_store`: the arrays are written, bucket by bucket (`WeightSyncConfig.bucket_mb`), as
safetensors files on /dev/shm and loaded by the worker extension (actors/vllm_extension.py) inside one
layerwise-reload session; files are deleted on every path. `update_weights_broadcast` receives a broadcast from the
learner instead (`weight_sync.backend` gloo or nccl: actors/weight_comm.py), `update_weights_ipc` the learner's
IPC buckets (`ipc`: actors/ipc_buckets.py). All go through `_update`: drain the engine (or freeze its requests),
load, set the version, resume; each phase timed and its outcome kept (`update_state`).
"""
from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path

from actors.engine_gate import WeightUpdateError
from actors.faults import maybe_stall


def with_output_layer(weights: dict, tied: bool) -> dict:
    """`weights` plus `lm_head.weight` = `model.embed_tokens.weight` for a tied model that lacks it.

    vLLM's reload un-ties the two (each layer is reloaded on its own), so an update without
    `lm_head.weight` leaves the output layer on the OLD weights (measured: logprob error 0.77).
    """
    if tied and "lm_head.weight" not in weights and "model.embed_tokens.weight" in weights:
        return {**weights, "lm_head.weight": weights["model.embed_tokens.weight"]}
    return weights


def _shm_dir() -> str:
    """tmpfs for the weight files: /dev/shm when present (Linux), else the temp dir."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


class WeightLoading:
    """Weight updates of a RolloutWorker: needs `self.engine`, `self.cfg` (RolloutConfig), `self.sync_cfg`
    (WeightSyncConfig), `self.tied_embeddings`, `self.worker_index`, the gate (actors/engine_gate.py) and the
    bookkeeping `RolloutWorker._init_state` sets."""

    async def update_weights_from_object_store(self, weights: dict, version: int) -> dict:
        """Load a full HF-named state dict (name -> numpy array) and set the policy version.

        Pauses generation (waits for in-flight requests), loads the weights bucket by bucket
        (WeightSyncConfig.bucket_mb) through safetensors files on /dev/shm, resets the prefix cache,
        sets `version`, resumes. Returns {"version", "bytes", "tensors", "buckets", "seconds", "pause_s",
        "load_s", "write_s", "engine_load_s", "worker_index"}. Raises WeightUpdateError (weights left
        inconsistent: generate refuses until a later update succeeds).
        """
        from actors.weight_buckets import plan_buckets

        weights = with_output_layer(weights, self.tied_embeddings)
        buckets = plan_buckets({k: int(v.nbytes) for k, v in weights.items()}, self.sync_cfg.bucket_mb << 20)
        parts = {"write_s": 0.0, "engine_load_s": 0.0}

        async def load():
            workdir = Path(tempfile.mkdtemp(prefix=f"genselect-w{self.worker_index}-", dir=_shm_dir()))
            try:
                for i, names in enumerate(buckets):
                    await self._load_bucket(workdir / f"bucket{i}.safetensors", {k: weights[k] for k in names},
                                            parts)
            finally:
                shutil.rmtree(workdir, ignore_errors=True)

        stats = await self._update(version, load)
        return {**stats, **parts, "bytes": sum(int(v.nbytes) for v in weights.values()), "tensors": len(weights),
                "buckets": len(buckets)}

    async def _load_bucket(self, path: Path, arrays: dict, parts: dict) -> None:
        """Write one bucket file, have the engine load it, delete it (on every path)."""
        from actors.vllm_extension import write_safetensors

        try:
            start = time.perf_counter()
            await asyncio.to_thread(write_safetensors, path, arrays)
            written = time.perf_counter()
            await self._rpc("load_weights_from_file", str(path), list(arrays))
            parts["write_s"] += written - start
            parts["engine_load_s"] += time.perf_counter() - written
        finally:
            path.unlink(missing_ok=True)

    async def init_weight_update_group(self, master_address: str, master_port: int, rank_offset: int,
                                       world_size: int, backend: str = "nccl", timeout_s: float = 300.0,
                                       group_id: str = "") -> None:
        """Join the learner's weight group (actors/weight_comm.py) as rank `rank_offset`; `group_id` names it
        (`weight_group()` answers it afterwards, so the broadcaster knows which engines must join a new one)."""
        self._weight_group = None
        await self.engine.collective_rpc("init_weight_update_group",
                                         args=(master_address, master_port, rank_offset, world_size, backend,
                                               timeout_s))
        self._weight_group = group_id

    def weight_group(self) -> str | None:
        """The id of the weight group this engine belongs to; None before one is formed, after a broadcast that
        failed (its group is closed) and in a restarted actor."""
        return getattr(self, "_weight_group", None)

    async def update_weights_broadcast(self, metadata: list, version: int, group_id: str, timeout_s: float) -> dict:
        """Receive [(name, dtype, shape), ...] broadcast by the learner in group `group_id`, inside the drain /
        load / resume path (`_update`), the receive under `timeout_s`. Raises WeightUpdateError at once when this
        engine is not in that group (restarted, or its last broadcast failed)."""
        if not metadata:
            raise ValueError("update_weights_broadcast: empty metadata (the learner sends every tensor)")
        if self.weight_group() != group_id:
            raise WeightUpdateError(f"rollout[{self.worker_index}] is not in weight group {group_id!r} "
                                    f"(it is in {self.weight_group()!r}); form the group again")
        names, dtypes, shapes = (list(x) for x in zip(*metadata))
        deadline = time.monotonic() + timeout_s  # the drain counts against it too

        received = {}

        async def load():
            try:
                received.update(await self._rpc("genselect_receive_broadcast", names, dtypes, shapes,
                                                deadline - time.monotonic()))
            except BaseException:
                self._weight_group = None  # the worker closed its group
                raise

        stats = await self._update(version, load)
        return {**stats, "tensors": len(names), "bytes": received.get("bytes", 0),
                "receive_s": received.get("seconds", 0.0)}

    async def update_weights_ipc(self, exported: list, version: int) -> dict:
        """Colocated: load the learner's CUDA IPC buckets ([{"handle", "entries"}], actors/ipc_buckets.py) inside the
        drain / load / resume path (`_update`); the broadcaster's deadline cancels it as it does an object-store
        update."""
        if not exported:
            raise ValueError("update_weights_ipc: no buckets (the learner exports every tensor)")
        received = {}

        async def load():
            received.update(await self._rpc("genselect_load_ipc", exported))

        stats = await self._update(version, load)
        return {**stats, "tensors": received.get("tensors", 0), "bytes": received.get("bytes", 0),
                "buckets": received.get("buckets", 0)}

    async def _update(self, version: int, load) -> dict:
        """drain -> load session -> version -> resume, each phase timed and its outcome kept (`update_state`).

        drain: `pause()`, wait until every admitted request has finished (`rollout.sync_mode: keep`: `_freeze`
        them instead, and `_thaw` where this resumes). Cancelling the update here (the sync's
        deadline passed: the broadcaster cancels the call) touches nothing: the engine keeps its version, says so
        (state "aborted", phase "drain") and serves again. load: begin the reload session, `await load()`,
        finish it, reset the prefix cache. Not interruptible: stopped half-way the engine would hold a mix of
        old and new layers, so a cancel waits for the session's end and the outcome stands (state "done" with
        the new version, or "failed": `health()["ok"]` false and generate refuses until an update succeeds).
        """
        self._condition()
        async with self._update_lock:
            start = time.perf_counter()
            old = self.version
            self._last_update = {"state": "draining", "version": version, "engine_version": old}
            keep = self.cfg.sync_mode == "keep"
            pause, resume = (self._freeze, self._thaw) if keep else (self.pause, self.resume)
            paused_here = False
            try:
                await pause()
                paused_here = True
                await maybe_stall("rollout_update_drain")  # tests: an in-flight request that does not finish
            except BaseException as e:
                if paused_here:
                    await resume()
                self._counters["updates_aborted"] += 1
                self._last_update = {"state": "aborted", "phase": "drain", "version": version,
                                     "engine_version": old, "error": repr(e)}
                raise
            paused = time.perf_counter()
            self._last_update = {"state": "loading", "version": version, "engine_version": old}
            session = asyncio.ensure_future(self._load_session(version, load))
            try:
                await asyncio.shield(session)
            except asyncio.CancelledError:
                await asyncio.wait([session])  # let the engine leave its reload session; its outcome stands
                raise
            finally:
                await resume()
            done = time.perf_counter()
            return {"version": version, "seconds": done - start, "pause_s": paused - start, "drain_s": paused - start,
                    "load_s": done - paused, "worker_index": self.worker_index}

    async def _load_session(self, version: int, load) -> None:
        """One reload session in the engine: begin, load(), finish, reset the prefix cache; then the version."""
        try:
            await self._rpc("genselect_begin_update")
            try:
                await maybe_stall("rollout_update_load")  # tests: a transfer that stalls inside the session
                await load()
            finally:
                finish = await self._rpc("genselect_finish_update")
            if finish["missing"]:
                raise WeightUpdateError(f"engine parameters not updated: {finish['missing']}")
            await self._reset_prefix_cache()
            self.version, self._broken = version, None
            self._counters["updates"] += 1
            self._last_update = {"state": "done", "version": version, "engine_version": version}
        except BaseException as e:
            self._counters["update_failures"] += 1
            self._broken = f"weight update to version {version} failed: {e!r}"
            self._last_update = {"state": "failed", "phase": "load", "version": version, "engine_version": None,
                                 "error": repr(e)}
            raise

    def update_state(self) -> dict:
        """The last weight update's outcome: {"state": "none" | "draining" | "aborted" | "loading" | "done" |
        "failed", "version" (the one asked for), "engine_version" (the version the engine's weights are at;
        None when a failed load left them inconsistent), "phase", "error"}, plus "policy_version"."""
        return {**self._last_update, "policy_version": self.version}

    async def _rpc(self, method: str, *args):
        """collective_rpc on the (single) worker; returns that worker's result."""
        results = await self.engine.collective_rpc(method, args=args)
        return results[0]

    async def weights_checksum(self) -> dict:
        """The engine's parameter checksum (debugging: do two engines hold the same weights?)."""
        return await self._rpc("weights_checksum")

    async def _reset_prefix_cache(self) -> None:
        """Drop every cached KV block: they were computed with the old weights. vLLM refuses (returns False)
        while blocks are still referenced, which would silently serve stale KV for repeated prompts, so
        retry briefly and then fail the update loudly."""
        for attempt in range(50):
            if await self.engine.reset_prefix_cache():
                return
            await asyncio.sleep(0.1)
        raise WeightUpdateError("vLLM refused to reset the prefix cache after the weight update")
