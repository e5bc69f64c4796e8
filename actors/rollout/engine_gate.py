"""The engine's policy version and its admission gate (`EngineGate`, held by actors/rollout/rollout_worker.py's
RolloutWorker).

`gate.version` is the version of the weights in the engine. Every request passes an admission gate; `pause()` closes
the gate and waits until no admitted request is left in the engine, so a weight update never happens while a request
runs: each request runs entirely on one version, the one it was admitted under, and its rollouts carry that version.
A `generate` call made while paused waits at the gate and runs (with the new version) after `resume()`. With
`rollout.sync_mode: keep`, `freeze` closes the gate without waiting and freezes the admitted requests in the engine
instead. `TokenGate` bounds the prompt tokens in flight for seeded sampling on CPU.
"""
from __future__ import annotations

import asyncio
import contextlib
from typing import Optional


class WeightUpdateError(RuntimeError):
    """A weight update failed part-way; the engine's weights are inconsistent until the next update."""


class TokenGate:
    """Admits requests while the prompt tokens in flight fit one engine step's budget (`budget` tokens; None:
    no limit). vLLM on CPU cannot rewind a seeded request's random generator when it splits that request's
    prefill over two steps (`CPU Generator does not use offset`: the engine dies), so seeded sampling keeps
    every prefill within one step: a request of n samples of a p-token prompt costs n * (p + 1) tokens (its
    prefills plus the decode token of each sample); one that alone exceeds the budget waits until nothing else
    is in flight."""

    def __init__(self, budget: Optional[int]):
        self.budget, self.used = budget, 0
        self._cond = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def hold(self, cost: int):
        if self.budget is None:
            yield
            return
        async with self._cond:
            await self._cond.wait_for(lambda: self.used == 0 or self.used + cost <= self.budget)
            self.used += cost
        try:
            yield
        finally:
            async with self._cond:
                self.used -= cost
                self._cond.notify_all()


class EngineGate:
    """The policy version of one engine's weights and the admission gate every request of that engine passes.

    A RolloutWorker holds one (`worker.gate`); so does its weight update (actors/weight_sync/engine_update.py),
    which pauses (or freezes) the gate, loads, sets `version` and resumes. `counters` is the worker's counter dict
    (`kept_requests` is counted here). `broken` holds why the last weight update failed (None: the weights are
    whole); while it is set, no request is admitted."""

    def __init__(self, engine, counters: dict, version: int = 0):
        self.engine, self.counters, self.version = engine, counters, version
        self.broken: Optional[str] = None
        self.closed = False
        self.pause_depth = 0
        self.in_flight = 0
        self._cond: Optional[asyncio.Condition] = None
        self._update_lock: Optional[asyncio.Lock] = None

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:  # created lazily: must belong to the loop the methods run on
            self._cond, self._update_lock = asyncio.Condition(), asyncio.Lock()
        return self._cond

    @property
    def update_lock(self) -> asyncio.Lock:
        """Held for the whole of one weight update: updates run one at a time."""
        self._condition()
        return self._update_lock

    @property
    def paused(self) -> bool:
        return self.pause_depth > 0

    def close(self) -> None:
        """The engine is shut down: every later request is refused."""
        self.closed = True

    @contextlib.asynccontextmanager
    async def admitted(self):
        """`async with gate.admitted() as version:` one request in flight, under the version it runs on."""
        version = await self._admit()
        try:
            yield version
        finally:
            await self._release()

    async def _admit(self) -> int:
        """Wait until not paused; count the request in flight; return the version it runs under."""
        if self.closed:
            raise RuntimeError("rollout worker is shut down")
        cond = self._condition()
        async with cond:
            await cond.wait_for(lambda: self.pause_depth == 0)
            if self.broken:
                raise WeightUpdateError(self.broken)
            self.in_flight += 1
            return self.version

    async def _release(self) -> None:
        cond = self._condition()
        async with cond:
            self.in_flight -= 1
            cond.notify_all()

    async def pause(self) -> None:
        """Stop admitting requests and wait until every admitted request has finished. Nests."""
        cond = self._condition()
        async with cond:
            self.pause_depth += 1
            try:
                await cond.wait_for(lambda: self.in_flight == 0)
            except BaseException:
                self.pause_depth -= 1
                cond.notify_all()
                raise

    async def resume(self) -> None:
        """Undo one pause(); requests waiting at the gate run when no pause is left."""
        cond = self._condition()
        async with cond:
            self.pause_depth = max(0, self.pause_depth - 1)
            cond.notify_all()

    async def freeze(self) -> None:
        """`rollout.sync_mode: keep`: stop admitting requests (like pause) without waiting for the admitted
        ones, and freeze those in the engine: vLLM's pause_generation(mode="keep", clear_cache=True) stops
        scheduling and drops their KV cache, so that after `thaw` they continue (their prefix recomputed) under
        whatever weights were loaded meanwhile."""
        cond = self._condition()
        async with cond:
            self.pause_depth += 1
            self.counters["kept_requests"] += self.in_flight
        try:
            await self.engine.pause_generation(mode="keep", clear_cache=True)
        except BaseException:
            await self.thaw()
            raise

    async def thaw(self) -> None:
        """Undo `freeze`: the engine schedules again (the frozen requests first), then the gate opens."""
        try:
            await asyncio.shield(self.engine.resume_generation())
        finally:
            await self.resume()
