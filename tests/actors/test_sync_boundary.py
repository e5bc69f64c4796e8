"""The rollout side of a weight sync at its boundaries, on a FAKE engine (no vLLM process): a generate call the
driver gives up on is aborted in the engine (a timed-out generate call is cancelled, not left running into the
next sync), and a sync cancelled at its deadline leaves the engine in a defined state (old
version kept and reported while it was still draining; a started reload session runs to its end).

The fake engine stands at the actor boundary: `generate` is an async generator that runs until cancelled and
records the cancellation (vLLM's AsyncLLM.generate aborts the request in that case: `abort(request_id)`), and
`collective_rpc` answers the weight-receiver calls. The real-engine check is in test_rollout.py
(`test_timeout_leaves_the_engine_idle_before_an_update`); the Ray broadcaster path in test_weight_sync.py.
"""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest

from actors.rollout.engine_gate import WeightUpdateError
from actors.rollout.response_forms import FreeText
from actors.rollout.rollout_worker import RolloutAborted, RolloutWorker
from core.config import RolloutConfig, WeightSyncConfig
from core.records import SelectionTask


class FakeEngine:
    """Stands in for vLLM's AsyncLLM at the RolloutWorker's boundary."""

    errored = False

    def __init__(self, load_delay_s: float = 0.0):
        self.running: set = set()
        self.aborted: list = []
        self.rpcs: list = []
        self.load_delay_s = load_delay_s
        self.release = asyncio.Event()  # set: every running request finishes

    async def generate(self, prompt, params, request_id):
        self.running.add(request_id)
        try:
            await self.release.wait()
        except (asyncio.CancelledError, GeneratorExit):
            self.aborted.append(request_id)  # vLLM: `await self.abort(request_id)` here
            raise
        finally:
            self.running.discard(request_id)
        yield SimpleNamespace(outputs=[], num_cached_tokens=0, finished=True)

    async def collective_rpc(self, method, args=()):
        self.rpcs.append(method)
        if method == "load_weights_from_file":
            await asyncio.sleep(self.load_delay_s)
        if method == "genselect_finish_update":
            return [{"missing": []}]
        return [None]

    async def reset_prefix_cache(self):
        return True

    async def pause_generation(self, mode="abort", clear_cache=True):  # vLLM 0.32: mode "keep" freezes requests
        self.rpcs.append(f"pause_generation:{mode}")

    async def resume_generation(self):
        self.rpcs.append("resume_generation")

    async def check_health(self):
        return None

    def shutdown(self, timeout=None):
        return None


def fake_worker(engine: FakeEngine, timeout_s: float = 0.0, sync_mode: str = "drain") -> RolloutWorker:
    worker = object.__new__(RolloutWorker)
    worker.cfg = RolloutConfig(samples_per_prompt=2, max_response_tokens=8, constrain_index=False,
                               request_timeout_s=timeout_s, sync_mode=sync_mode)
    worker.sync_cfg, worker.worker_index, worker.tied_embeddings = WeightSyncConfig(), 0, False
    worker.engine, worker.start_seconds = engine, 0.0
    worker.encode_prompt = lambda prompt: [1, 2, 3]
    worker.tokenizer = None  # no chat template
    worker.response_form = FreeText()  # the one-request path, as a worker built without a form has
    worker._init_state()
    return worker


def task(i: int) -> SelectionTask:
    return SelectionTask(f"q{i}/p0", f"q{i}", "math", "?", ("a", "b"), ("1", "2"), (1.0, 0.0), "1", "prompt")


WEIGHTS = {"model.w": np.ones((4, 4), dtype=np.float32)}


async def until(predicate, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


def test_abort_ends_a_generate_call_and_its_engine_requests():
    """The driver's deadline for a call passed: `abort(call_id)` aborts every engine request of that call and
    answers only once they are gone, so the next sync's drain does not wait for an abandoned call."""
    async def main():
        engine = FakeEngine()
        worker = fake_worker(engine)
        call = asyncio.ensure_future(worker.generate([task(0), task(1)], call_id="c1"))
        other = asyncio.ensure_future(worker.generate([task(2)], call_id="c2"))
        await until(lambda: len(engine.running) == 3)
        answer = await worker.abort("c1")
        assert answer == {"aborted": 1, "in_flight": 1}  # c2's request is untouched
        with pytest.raises(RolloutAborted, match="c1"):
            await call
        assert len(engine.aborted) == 2 and len(engine.running) == 1
        assert (await worker.abort("no-such-call"))["aborted"] == 0
        assert (await worker.abort())["aborted"] == 1  # every call
        with pytest.raises(RolloutAborted):
            await other
        assert not engine.running and (await worker.health())["in_flight"] == 0
        assert (await worker.health())["aborted_calls"] == 2
    asyncio.run(main())


def test_sync_cancelled_while_draining_keeps_the_old_version_and_says_so():
    """A request in flight does not finish before the sync's deadline: the broadcaster cancels the update while
    the engine drains. Nothing was loaded, so the engine keeps version 0, reports it, admits requests again and
    is healthy; the next sync starts clean and loads. (Before: the engine was marked broken, generate refused.)"""
    async def main():
        engine = FakeEngine()
        worker = fake_worker(engine)
        stuck = asyncio.ensure_future(worker.generate([task(0)], call_id="long"))
        await until(lambda: engine.running)
        update = asyncio.ensure_future(worker.update_weights_from_object_store(WEIGHTS, 1))
        await until(lambda: worker.update_state()["state"] == "draining")
        update.cancel()  # what ray.cancel does to the async actor's call
        with pytest.raises(asyncio.CancelledError):
            await update
        state = worker.update_state()
        assert state["state"] == "aborted" and state["phase"] == "drain"
        assert state["engine_version"] == 0 and state["policy_version"] == 0 and state["version"] == 1
        health = await worker.health()
        assert health["ok"] and not health["paused"] and health["updates_aborted"] == 1
        assert "genselect_begin_update" not in engine.rpcs  # the engine's weights were never touched
        # the gate is open: a new request is admitted while the long one still runs
        fresh = asyncio.ensure_future(worker.generate([task(1)], call_id="fresh"))
        await until(lambda: len(engine.running) == 2)
        engine.release.set()
        await asyncio.gather(stuck, fresh)
        stats = await worker.update_weights_from_object_store(WEIGHTS, 1)
        assert worker.update_state()["state"] == "done" and worker.policy_version() == 1
        assert {"drain_s", "load_s", "write_s", "engine_load_s"} <= set(stats)
    asyncio.run(main())


def test_keep_mode_loads_while_requests_are_in_flight_and_thaws_after():
    """`rollout.sync_mode: keep`: the update does not wait for the request in flight. It freezes it in the
    engine (pause_generation(mode="keep")), loads inside the reload session, thaws (resume_generation) and only
    then opens the gate; the request finishes afterwards. Cancelled while freezing, the engine is thawed and the
    gate opened again. (Drain mode waits: test above.)"""
    async def main():
        engine = FakeEngine()
        worker = fake_worker(engine, sync_mode="keep")
        running = asyncio.ensure_future(worker.generate([task(0)], call_id="long"))
        await until(lambda: engine.running)
        stats = await asyncio.wait_for(worker.update_weights_from_object_store(WEIGHTS, 1), 5.0)
        assert not running.done() and worker.policy_version() == 1 and stats["drain_s"] < 1.0
        calls = [c for c in engine.rpcs if c in ("pause_generation:keep", "genselect_begin_update",
                                                  "genselect_finish_update", "resume_generation")]
        assert calls == ["pause_generation:keep", "genselect_begin_update", "genselect_finish_update",
                         "resume_generation"]
        health = await worker.health()
        assert health["kept_requests"] == 1 and not health["paused"] and health["in_flight"] == 1
        engine.release.set()
        assert (await running)[0].policy_version == 0  # admitted under version 0: staleness counts from there

        async def never(mode="abort", clear_cache=True):
            await asyncio.sleep(60)
        engine.pause_generation, engine.rpcs = never, []
        update = asyncio.ensure_future(worker.update_weights_from_object_store(WEIGHTS, 2))
        await asyncio.sleep(0.05)
        update.cancel()
        with pytest.raises(asyncio.CancelledError):
            await update
        assert engine.rpcs == ["resume_generation"] and not (await worker.health())["paused"]
        assert worker.policy_version() == 1
    asyncio.run(main())


def test_sync_cancelled_inside_the_reload_session_finishes_it():
    """Cancelled once the engine is inside its reload session, the update does not stop half-way (old and new
    layers mixed): the session ends, the engine holds the new version consistently and says so."""
    async def main():
        engine = FakeEngine(load_delay_s=0.5)
        worker = fake_worker(engine)
        update = asyncio.ensure_future(worker.update_weights_from_object_store(WEIGHTS, 3))
        await until(lambda: "load_weights_from_file" in engine.rpcs)
        update.cancel()
        with pytest.raises(asyncio.CancelledError):
            await update
        assert engine.rpcs[-1] == "genselect_finish_update"
        assert worker.update_state()["state"] == "done" and worker.policy_version() == 3
        assert (await worker.health())["ok"]
    asyncio.run(main())


def test_stall_injected_at_the_sync_boundary(monkeypatch, tmp_path):
    """GENSELECT_FAULT with the hang action stalls the drain once (as an in-flight request that never finishes
    would); the update is cancelled at the deadline, the engine stays on its version, and the retry loads."""
    monkeypatch.setenv("GENSELECT_FAULT", f"rollout_update_drain:1:{tmp_path / 'stalled'}")
    monkeypatch.setenv("GENSELECT_FAULT_ACTION", "hang:3600")

    async def main():
        worker = fake_worker(FakeEngine())
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(worker.update_weights_from_object_store(WEIGHTS, 1), 0.5)
        assert worker.update_state()["state"] == "aborted" and worker.policy_version() == 0
        assert (tmp_path / "stalled").exists()
        await worker.update_weights_from_object_store(WEIGHTS, 1)
        assert worker.policy_version() == 1 and (await worker.health())["ok"]
    asyncio.run(main())


def test_failed_load_is_reported_as_inconsistent():
    async def main():
        engine = FakeEngine()
        worker = fake_worker(engine)

        async def broken(method, args=()):
            if method == "genselect_finish_update":
                return [{"missing": ["model.w"]}]
            return [None]
        engine.collective_rpc = broken
        with pytest.raises(WeightUpdateError):
            await worker.update_weights_from_object_store(WEIGHTS, 1)
        state = worker.update_state()
        assert state["state"] == "failed" and state["engine_version"] is None
        assert not (await worker.health())["ok"]
    asyncio.run(main())
