"""The engine's policy version and its admission gate (a mixin of actors/rollout/rollout_worker.py's RolloutWorker).

`self.version` is the version of the weights in the engine. Every request passes an admission gate; `pause()` closes
the gate and waits until no admitted request is left in the engine, so a weight update never happens while a request
runs: each request runs entirely on one version, the one it was admitted under, and its rollouts carry that version.
A `generate` call made while paused waits at the gate and runs (with the new version) after `resume()`. With
`rollout.sync_mode: keep`, `_freeze` closes the gate without waiting and freezes the admitted requests in the engine
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


class VersionGate:
    """Admission gate of a RolloutWorker: needs `self.engine`, `self.version`, `self._broken`, `self._counters` and
    the gate's fields that `RolloutWorker._init_state` sets (`_cond`, `_pause_depth`, `_in_flight`, `_update_lock`)."""

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:  # created lazily: must belong to the loop the methods run on
            self._cond, self._update_lock = asyncio.Condition(), asyncio.Lock()
        return self._cond

    async def _admit(self) -> int:
        """Wait until not paused; count the request in flight; return the version it runs under."""
        if self.engine is None:
            raise RuntimeError("rollout worker is shut down")
        cond = self._condition()
        async with cond:
            await cond.wait_for(lambda: self._pause_depth == 0)
            if self._broken:
                raise WeightUpdateError(self._broken)
            self._in_flight += 1
            return self.version

    async def _release(self) -> None:
        cond = self._condition()
        async with cond:
            self._in_flight -= 1
            cond.notify_all()

    async def pause(self) -> None:
        """Stop admitting requests and wait until every admitted request has finished. Nests."""
        cond = self._condition()
        async with cond:
            self._pause_depth += 1
            try:
                await cond.wait_for(lambda: self._in_flight == 0)
            except BaseException:
                self._pause_depth -= 1
                cond.notify_all()
                raise

    async def resume(self) -> None:
        """Undo one pause(); requests waiting at the gate run when no pause is left."""
        cond = self._condition()
        async with cond:
            self._pause_depth = max(0, self._pause_depth - 1)
            cond.notify_all()

    async def _freeze(self) -> None:
        """`rollout.sync_mode: keep`: stop admitting requests (like pause) without waiting for the admitted
        ones, and freeze those in the engine: vLLM's pause_generation(mode="keep", clear_cache=True) stops
        scheduling and drops their KV cache, so that after `_thaw` they continue (their prefix recomputed) under
        whatever weights were loaded meanwhile."""
        cond = self._condition()
        async with cond:
            self._pause_depth += 1
            self._counters["kept_requests"] += self._in_flight
        try:
            await self.engine.pause_generation(mode="keep", clear_cache=True)
        except BaseException:
            await self._thaw()
            raise

    async def _thaw(self) -> None:
        """Undo `_freeze`: the engine schedules again (the frozen requests first), then the gate opens."""
        try:
            await asyncio.shield(self.engine.resume_generation())
        finally:
            await self.resume()
