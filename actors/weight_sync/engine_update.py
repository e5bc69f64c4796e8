"""The engine's side of every weight update, whatever the transport: drain -> load session -> version -> resume.

A RolloutWorker (actors/rollout/rollout_worker.py) holds one `EngineUpdate` and one receiver per transport it is asked
to load from (transport.py); a receiver prepares its transport's `load` coroutine and hands it to
`EngineUpdate.run(version, load)`, which drains the engine (or freezes its requests), opens the engine's reload session
(the worker extension, worker_extension.py), awaits `load()`, closes the session with its missing-parameter check,
resets the prefix cache, sets the version and resumes; each phase timed and its outcome kept (`state`).
"""
from __future__ import annotations

import asyncio
import time

from actors.rollout.engine_gate import WeightUpdateError
from actors.faults import maybe_stall


class EngineUpdate:
    """The update protocol of one RolloutWorker: needs the worker's `engine`, `cfg` (RolloutConfig),
    `worker_index`, `_counters`, its `gate` (the version, `broken`, `update_lock`, `pause`/`resume`,
    `freeze`/`thaw`: actors/rollout/engine_gate.py) and `_rpc`."""

    def __init__(self, worker):
        self.worker = worker
        self.last: dict = {"state": "none"}

    async def run(self, version: int, load) -> dict:
        """drain -> load session -> version -> resume, each phase timed and its outcome kept (`state`).

        drain: `gate.pause()`, wait until every admitted request has finished (`rollout.sync_mode: keep`:
        `gate.freeze()` them instead, and `gate.thaw()` where this resumes). Cancelling the update here (the sync's
        deadline passed: the coordinator cancels the call) touches nothing: the engine keeps its version, says so
        (state "aborted", phase "drain") and serves again. load: begin the reload session, `await load()`,
        finish it, reset the prefix cache. Not interruptible: stopped half-way the engine would hold a mix of
        old and new layers, so a cancel waits for the session's end and the outcome stands (state "done" with
        the new version, or "failed": `health()["ok"]` false and generate refuses until an update succeeds).
        """
        w, gate = self.worker, self.worker.gate
        async with gate.update_lock:
            start = time.perf_counter()
            old = gate.version
            self.last = {"state": "draining", "version": version, "engine_version": old}
            keep = w.cfg.sync_mode == "keep"
            pause, resume = (gate.freeze, gate.thaw) if keep else (gate.pause, gate.resume)
            paused_here = False
            try:
                await pause()
                paused_here = True
                await maybe_stall("rollout_update_drain")  # tests: an in-flight request that does not finish
            except BaseException as e:
                if paused_here:
                    await resume()
                w._counters["updates_aborted"] += 1
                self.last = {"state": "aborted", "phase": "drain", "version": version,
                             "engine_version": old, "error": repr(e)}
                raise
            paused = time.perf_counter()
            self.last = {"state": "loading", "version": version, "engine_version": old}
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
                    "load_s": done - paused, "worker_index": w.worker_index}

    async def _load_session(self, version: int, load) -> None:
        """One reload session in the engine: begin, load(), finish, reset the prefix cache; then the version."""
        w = self.worker
        try:
            await w._rpc("genselect_begin_update")
            try:
                await maybe_stall("rollout_update_load")  # tests: a transfer that stalls inside the session
                await load()
            finally:
                finish = await w._rpc("genselect_finish_update")
            if finish["missing"]:
                raise WeightUpdateError(f"engine parameters not updated: {finish['missing']}")
            await self._reset_prefix_cache()
            w.gate.version, w.gate.broken = version, None
            w._counters["updates"] += 1
            self.last = {"state": "done", "version": version, "engine_version": version}
        except BaseException as e:
            w._counters["update_failures"] += 1
            w.gate.broken = f"weight update to version {version} failed: {e!r}"
            self.last = {"state": "failed", "phase": "load", "version": version, "engine_version": None,
                         "error": repr(e)}
            raise

    def state(self) -> dict:
        """The last weight update's outcome: {"state": "none" | "draining" | "aborted" | "loading" | "done" |
        "failed", "version" (the one asked for), "engine_version" (the version the engine's weights are at;
        None when a failed load left them inconsistent), "phase", "error"}, plus "policy_version"."""
        return {**self.last, "policy_version": self.worker.gate.version}

    async def call_in_engine(self, function: str, *args):
        """Run a transport's engine-side `function` ("package.module:function", called as function(vLLM worker,
        *args)) in the engine's worker (worker_extension.py's `genselect_call`); that worker's result."""
        return await self.worker._rpc("genselect_call", function, *args)

    async def _reset_prefix_cache(self) -> None:
        """Drop every cached KV block: they were computed with the old weights. vLLM refuses (returns False)
        while blocks are still referenced, which would silently serve stale KV for repeated prompts, so
        retry briefly and then fail the update loudly."""
        for attempt in range(50):
            if await self.worker.engine.reset_prefix_cache():
                return
            await asyncio.sleep(0.1)
        raise WeightUpdateError("vLLM refused to reset the prefix cache after the weight update")
