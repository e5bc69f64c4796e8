"""WeightSyncBroadcaster with real RolloutWorker Ray actors (vLLM, CPU, tiny Qwen3, fp32).

The learner here is a FAKE of another component (actors/learner/learner.py is another engineer's): a small Ray
actor holding a transformers model whose `export_weights()` returns the full HF state dict as numpy
arrays, `lm_head.weight` included, exactly the contract the real learner implements.

Proof the weights arrive: for a fixed prompt+completion, every engine's log-probs match the learner's
transformers log-probs with the NEW weights after a sync (fp32, < 1e-5) and differ clearly before it;
an engine started fresh from the saved new weights agrees with a synced one.
"""
from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from core.net import rendezvous_port
from tests.actors import helpers_weights as weights

pytestmark = pytest.mark.slow

REPO = str(Path(__file__).resolve().parents[2])


class FakeLearner:
    """Fake of the learner actor: export_weights() -> {HF name: np.ndarray} incl. lm_head.weight."""

    def __init__(self, model_path: str):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(1)
        self.path = model_path
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.version = 0

    def perturb(self, seed: int, scale: float = 0.02) -> int:
        weights.perturb(self.model, seed, scale)
        self.version += 1
        return self.version

    def export_weights(self, rank0_only: bool = False, widen: bool = True) -> dict:
        return {k: v.detach().numpy().copy() for k, v in self.model.state_dict().items()}

    def fixed_ids(self) -> tuple:
        return weights.fixed_ids(self.tokenizer)

    def logprobs(self, prompt_ids: list, response_ids: list) -> list:
        return weights.completion_logprobs(self.model, prompt_ids, response_ids)

    def save(self, out_dir: str) -> str:
        self.model.save_pretrained(out_dir, safe_serialization=True)
        self.tokenizer.save_pretrained(out_dir)
        return out_dir


class HungLearner:
    """A learner whose export never finishes in time."""

    def export_weights(self, rank0_only: bool = False, widen: bool = True) -> dict:
        time.sleep(60)
        return {}


class HungReceiver:
    """A rollout actor that never finishes its update (to exercise the sync deadline)."""

    async def update_weights_from_object_store(self, weights: dict, version: int) -> dict:
        await asyncio.sleep(3600)
        return {}


@pytest.fixture(scope="module")
def ray_cluster():
    import ray

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the fakes travel by value
    ray.cloudpickle.register_pickle_by_value(weights)
    owned = not ray.is_initialized()  # reuse a cluster another module left running
    if owned:
        ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=256 << 20,
                 runtime_env={"env_vars": {"PYTHONPATH": REPO}})
    yield ray
    if owned:
        ray.shutdown()


def _start_rollouts(ray, model_path: str, count: int, first_index: int = 0) -> list:
    from actors.rollout.rollout_worker import RolloutWorker
    from core.config import RolloutConfig

    cfg = RolloutConfig(samples_per_prompt=2, max_response_tokens=8, max_num_seqs=16)
    cls = ray.remote(num_cpus=0)(RolloutWorker)
    return [cls.remote(cfg, model_path, "float32", 0, first_index + i) for i in range(count)]


def _shutdown(ray, handles: list) -> None:
    """The launcher's rule: shutdown() (engine processes, /dev/shm) BEFORE ray.kill."""
    ray.get([h.shutdown.remote() for h in handles], timeout=120)
    for h in handles:
        ray.kill(h)


@pytest.fixture(scope="module")
def system(ray_cluster, rollout_model_path):
    ray = ray_cluster
    learner = ray.remote(num_cpus=0)(FakeLearner).remote(rollout_model_path)
    rollouts = _start_rollouts(ray, rollout_model_path, 1)  # a second engine joins in the fresh-engine test
    ray.get([h.health.remote() for h in rollouts], timeout=600)  # engine up
    yield ray, learner, rollouts
    _shutdown(ray, rollouts)


def _max_diff(a, b) -> float:
    return float(np.max(np.abs(np.subtract(a, b))))


def test_sync_reaches_the_engine(system):
    from actors.weight_sync.coordinator import WeightSyncBroadcaster
    from core.config import WeightSyncConfig

    ray, learner, rollouts = system
    prompt, response = ray.get(learner.fixed_ids.remote())
    engine_lp = lambda: ray.get([h.compute_logprobs.remote(prompt, response) for h in rollouts])  # noqa: E731
    before = engine_lp()
    old = ray.get(learner.logprobs.remote(prompt, response))
    assert max(_max_diff(lp, old) for lp in before) < 1e-5

    broadcaster = WeightSyncBroadcaster(WeightSyncConfig(timeout_s=120), learner, rollouts)
    for version, seed in ((1, 1), (2, 2)):  # twice: the second update follows an un-tied reload
        ray.get(learner.perturb.remote(seed))
        new = ray.get(learner.logprobs.remote(prompt, response))
        stale = engine_lp()
        before_diff = max(_max_diff(lp, new) for lp in stale)
        stats = broadcaster.sync(version)
        after_diff = max(_max_diff(lp, new) for lp in engine_lp())
        print(f"\nsync v{version}: max |logprob diff| vs learner before={before_diff:.4f} after={after_diff:.2e}; "
              f"{stats['seconds']:.3f} s, {stats['bytes'] / 1e6:.1f} MB, {stats['gbps']:.3f} GB/s")
        assert before_diff > 0.05 and after_diff < 1e-5
        assert stats["version"] == version and stats["bytes"] > 10e6 and stats["gbps"] > 0
        assert [w["version"] for w in stats["workers"]] == [version]
        assert ray.get(rollouts[0].policy_version.remote()) == version
    assert len(broadcaster.history) == 2


def test_fresh_engine_agrees_and_both_follow_a_sync(system, tmp_path):
    """An engine started from the learner's saved weights == the engine that received them by sync;
    then one sync reaches both engines (one ObjectRef fanned out to two actors)."""
    from actors.weight_sync.coordinator import WeightSyncBroadcaster
    from core.config import WeightSyncConfig

    ray, learner, rollouts = system
    prompt, response = ray.get(learner.fixed_ids.remote())
    saved = ray.get(learner.save.remote(str(tmp_path / "new")))
    rollouts.extend(_start_rollouts(ray, saved, 1, first_index=1))  # shut down by the fixture
    synced_lp, fresh_lp = ray.get([h.compute_logprobs.remote(prompt, response) for h in rollouts], timeout=600)
    print(f"\nfresh vs synced engine: max |logprob diff| = {_max_diff(synced_lp, fresh_lp):.2e}")
    assert _max_diff(synced_lp, fresh_lp) < 1e-5
    assert _max_diff(fresh_lp, ray.get(learner.logprobs.remote(prompt, response))) < 1e-5

    ray.get(learner.perturb.remote(3))
    stats = WeightSyncBroadcaster(WeightSyncConfig(timeout_s=120), learner, rollouts).sync(3)
    new = ray.get(learner.logprobs.remote(prompt, response))
    after = ray.get([h.compute_logprobs.remote(prompt, response) for h in rollouts])
    assert max(_max_diff(lp, new) for lp in after) < 1e-5
    assert [w["version"] for w in stats["workers"]] == [3, 3]
    assert ray.get([h.policy_version.remote() for h in rollouts]) == [3, 3]


def test_hung_receiver_raises_timeout_naming_it(system):
    from actors.weight_sync.coordinator import WeightSyncBroadcaster
    from actors.weight_sync.transport import WeightSyncTimeout
    from core.config import WeightSyncConfig

    ray, learner, rollouts = system
    hung = ray.remote(num_cpus=0)(HungReceiver).remote()
    try:
        broadcaster = WeightSyncBroadcaster(WeightSyncConfig(timeout_s=3), learner, [rollouts[0], hung])
        start = time.perf_counter()
        with pytest.raises(WeightSyncTimeout, match=r"rollout\[1\]") as info:
            broadcaster.sync(7)
        assert time.perf_counter() - start < 30
        assert len(info.value.pending) == 1 and "update_weights_from_object_store" in info.value.pending[0]
        assert ray.get(rollouts[0].policy_version.remote()) == 7  # the healthy engine was updated
    finally:
        ray.kill(hung)


def test_hung_learner_raises_timeout_naming_it(ray_cluster):
    from actors.weight_sync.coordinator import WeightSyncBroadcaster
    from actors.weight_sync.transport import WeightSyncTimeout
    from core.config import WeightSyncConfig

    ray = ray_cluster
    slow = ray.remote(num_cpus=0)(HungLearner).remote()
    hung = ray.remote(num_cpus=0)(HungReceiver).remote()
    try:
        broadcaster = WeightSyncBroadcaster(WeightSyncConfig(timeout_s=2), slow, [hung])
        with pytest.raises(WeightSyncTimeout, match=r"learner\[0\]\.export_weights"):
            broadcaster.sync(1)
    finally:
        ray.kill(slow)
        ray.kill(hung)


class SmallLearner:
    """A learner whose export is one small tensor (the sync-boundary test needs no model)."""

    def __init__(self):
        self.exports = 0

    def export_weights(self, rank0_only: bool = False, widen: bool = True) -> dict:
        self.exports += 1
        return {"model.w": np.full((8, 8), float(self.exports), dtype=np.float32)}

    def export_count(self) -> int:
        return self.exports


class _FakeAsyncLLM:
    """The engine at the RolloutWorker's boundary: answers the weight receiver's calls, generates nothing."""

    errored = False

    async def collective_rpc(self, method, args=()):
        return [{"missing": []} if method == "genselect_finish_update" else None]

    async def reset_prefix_cache(self):
        return True

    async def check_health(self):
        return None

    def shutdown(self, timeout=None):
        return None


def fake_engine_worker(index: int, stall_marker=None):
    """The real RolloutWorker (gate, update phases, update_state) around a fake engine; with `stall_marker`,
    its first update's drain stalls through the GENSELECT_FAULT hang injection (actors/faults.py), as an
    in-flight request that never finishes would."""
    import os

    from actors.rollout.rollout_worker import RolloutWorker
    from core.config import RolloutConfig, WeightSyncConfig

    if stall_marker:
        os.environ.update(GENSELECT_FAULT=f"rollout_update_drain:1:{stall_marker}", GENSELECT_FAULT_ACTION="hang:3600")
    worker = object.__new__(RolloutWorker)
    worker.cfg, worker.sync_cfg = RolloutConfig(), WeightSyncConfig(transport={"name": "object_store", "bucket_mb": 1})
    worker.worker_index, worker.tied_embeddings = index, False
    worker.engine, worker.start_seconds = _FakeAsyncLLM(), 0.0
    worker._init_state()
    return worker


def test_sync_timeout_leaves_engines_on_a_known_version(ray_cluster, tmp_path):
    """A fault at the sync boundary (one engine's drain never ends) makes the sync miss its
    deadline. The late update is cancelled, so that engine keeps version 0 and says so, the healthy one holds
    version 1, the learner is not left inside anything (it answers at once), and the next sync starts clean and
    brings both to version 1. The stats split drain, transfer and load."""
    from actors.weight_sync.coordinator import WeightSyncBroadcaster
    from actors.weight_sync.transport import WeightSyncTimeout
    from core.config import WeightSyncConfig

    ray = ray_cluster
    learner = ray.remote(num_cpus=0)(SmallLearner).remote()
    engines = [ray.remote(num_cpus=0)(_FakeEngineActor).remote(index, marker)
               for index, marker in ((0, None), (1, str(tmp_path / "stalled")))]
    try:
        # every actor up first (start-up under CI load can take longer than the sync deadline under test)
        ray.get([h.policy_version.remote() for h in engines] + [learner.export_count.remote()], timeout=180)
        broadcaster = WeightSyncBroadcaster(WeightSyncConfig(timeout_s=8), learner, engines)
        start = time.perf_counter()
        with pytest.raises(WeightSyncTimeout, match=r"rollout\[1\]") as info:
            broadcaster.sync(1)
        assert time.perf_counter() - start < 60
        healthy, stalled = info.value.engines
        assert healthy["state"] == "done" and healthy["engine_version"] == 1
        assert stalled["state"] == "aborted" and stalled["phase"] == "drain" and stalled["engine_version"] == 0
        assert "rollout[1]: aborted, serving version 0" in str(info.value)
        health = ray.get(engines[1].health.remote(), timeout=30)
        assert health["ok"] and not health["paused"] and health["version"] == 0
        assert ray.get(learner.export_count.remote(), timeout=5) == 1
        stats = broadcaster.sync(1)  # clean: the stall fired once (its marker exists)
        assert ray.get([h.policy_version.remote() for h in engines]) == [1, 1]
        assert {"drain_s", "transfer_s", "load_s"} <= set(stats)
        assert stats["transfer_s"] >= stats["export_seconds"] and stats["seconds"] > 0
        # drain and load are timed in the engines (slowest of each), transfer in the broadcaster: their sum may
        # pass the whole by the clocks' jitter, not by a phase counted twice
        assert stats["drain_s"] + stats["transfer_s"] + stats["load_s"] <= stats["seconds"] + 0.01
    finally:
        for h in engines + [learner]:
            ray.kill(h)


class _FakeEngineActor:
    """Ray actor wrapper: the fake-engine RolloutWorker's async methods, as the real actor exposes them."""

    def __init__(self, index: int, stall_marker=None):
        self.w = fake_engine_worker(index, stall_marker)

    async def update_weights_from_object_store(self, weights: dict, version: int) -> dict:
        return await self.w.update_weights_from_object_store(weights, version)

    async def weight_call(self, receiver: str, method: str, *args):
        return await self.w.weight_call(receiver, method, *args)

    def update_state(self) -> dict:
        return self.w.update_state()

    def policy_version(self) -> int:
        return self.w.policy_version()

    async def health(self) -> dict:
        return await self.w.health()


def test_a_transport_named_by_its_dotted_path_reaches_the_engines_through_weight_call(ray_cluster):
    """A user transport (tests/actors/helpers_transport.py) runs under the same coordinator: its receiver is built and
    held by the rollout worker on its first `weight_call`, the engines load through the usual update protocol."""
    from actors.weight_sync.coordinator import WeightSyncBroadcaster
    from core.config import WeightSyncConfig

    ray = ray_cluster
    learner = ray.remote(num_cpus=0)(SmallLearner).remote()
    engines = [ray.remote(num_cpus=0)(_FakeEngineActor).remote(index) for index in (0, 1)]
    try:
        ray.get([h.policy_version.remote() for h in engines] + [learner.export_count.remote()], timeout=180)
        cfg = WeightSyncConfig(transport={"name": "tests.actors.helpers_transport:ArraysTransport"}, timeout_s=60)
        broadcaster = WeightSyncBroadcaster(cfg, learner, engines)
        broadcaster.sync(1)
        stats = broadcaster.sync(2)
        assert ray.get([h.policy_version.remote() for h in engines]) == [2, 2]
        assert [w["loads"] for w in stats["workers"]] == [2, 2]  # one receiver held per worker
        assert stats["bytes"] > 0 and {"drain_s", "transfer_s", "load_s"} <= set(stats)
    finally:
        for h in engines + [learner]:
            ray.kill(h)


def test_answer_times_records_each_answer_and_stops_at_the_deadline(ray_cluster):
    """The waiting helper behind the start-up log and the sync's per-engine times: a call that answers (with a
    value or an error) is timed in the order of answering; one still running at the deadline is left pending."""
    import time

    from actors.calls import answer_times

    @ray_cluster.remote(num_cpus=0)
    def after(seconds: float, fail: bool = False):
        time.sleep(seconds)
        if fail:
            raise ValueError("bad")
        return seconds

    ray_cluster.get([after.remote(0.0) for _ in range(3)], timeout=120)  # worker processes up before the clock runs
    slow, failing, fast = after.remote(60.0), after.remote(0.5, fail=True), after.remote(0.0)
    started = time.perf_counter()
    answered, pending = answer_times([slow, failing, fast], started + 5.0)
    assert pending == [slow] and set(answered) == {fast, failing}
    times = list(answered.values())
    assert times == sorted(times) and all(started < at < started + 5.0 for at in times)  # in answering order
    assert time.perf_counter() - started >= 4.9  # it waited for the slow call up to the deadline
    ray_cluster.cancel(slow, force=True)


def test_unknown_backend_is_rejected():
    from actors.weight_sync.coordinator import WeightSyncBroadcaster
    from core.config import WeightSyncConfig

    with pytest.raises(ValueError, match="'mpi'"):
        WeightSyncBroadcaster(WeightSyncConfig(transport={"name": "mpi"}), None, [])


@pytest.mark.gpu
def test_nccl_weight_update_on_gpu(rollout_model_path, loop_thread):
    """GPU path, after vLLM's RLHF example: the test process plays the trainer (NCCL rank 0, a
    StatelessProcessGroup + PyNcclCommunicator), the engine's worker joins as rank 1 and receives
    every tensor by broadcast; then the engine's log-probs must match the new weights. NCCL needs the
    two ranks on different GPUs. UNTESTED on the development machines (no GPU)."""
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("NCCL between trainer and engine needs 2 GPUs")
    from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
    from vllm.distributed.utils import StatelessProcessGroup

    from actors.rollout.rollout_worker import RolloutWorker
    from core.config import RolloutConfig

    learner = FakeLearner(rollout_model_path)
    prompt, response = learner.fixed_ids()
    worker = RolloutWorker(RolloutConfig(samples_per_prompt=2, gpu_memory_utilization=0.3), rollout_model_path)
    try:
        port = rendezvous_port()
        joined = loop_thread.submit(worker.init_weight_update_group("127.0.0.1", port, 1, 2, "nccl", 120, "g"))
        group = StatelessProcessGroup.create(host="127.0.0.1", port=port, rank=0, world_size=2)
        comm = PyNcclCommunicator(group, device="cuda:1")
        joined.result(120)
        learner.perturb(seed=3)
        state = {k: v.detach().to("cuda:1").contiguous() for k, v in learner.model.state_dict().items()}
        meta = [(k, str(v.dtype).removeprefix("torch."), list(v.shape)) for k, v in state.items()]
        received = loop_thread.submit(worker.update_weights_broadcast(meta, 1, "g", 300))
        for tensor in state.values():
            comm.broadcast(tensor, src=0, stream=torch.cuda.current_stream(torch.device("cuda:1")))
        torch.cuda.synchronize(torch.device("cuda:1"))
        received.result(300)
        engine = loop_thread.run(worker.compute_logprobs(prompt, response))
        assert _max_diff(engine, learner.logprobs(prompt, response)) < 1e-3
        assert worker.policy_version() == 1
    finally:
        loop_thread.run(worker.shutdown())


def test_learner_broadcast_sender_refuses_what_it_cannot_do():
    """The learner side of the broadcast path (actors/weight_sync/broadcast.py) fails clearly, before touching NCCL,
    on a CPU learner and on a rank other than 0; under ZeRO-3 every rank takes part in the weight gather of
    `weight_metadata` (collective) and only rank 0 keeps the weights."""
    import types

    import torch

    from actors.weight_sync.broadcast import BroadcastSender

    def sender(rank=0, device="cpu", zero_stage=2, world_size=1):
        return BroadcastSender(types.SimpleNamespace(rank=rank, world_size=world_size, device=torch.device(device),
                                                     cfg=types.SimpleNamespace(zero_stage=zero_stage)))

    with pytest.raises(RuntimeError, match="needs the learner on a GPU"):
        sender().init_weight_update_group("127.0.0.1", 1, 2)
    with pytest.raises(RuntimeError, match="only learner rank 0"):
        sender(rank=1).init_weight_update_group("127.0.0.1", 1, 2)
    gathers = []
    for rank, zero_stage in ((1, 3), (1, 2), (0, 3)):
        s = sender(rank=rank, device="cuda", zero_stage=zero_stage, world_size=2)
        s.learner._full_state = lambda: gathers.append(1) or {"w": torch.zeros(2)}
        s.weight_metadata()
    assert len(gathers) == 2  # rank 1 under ZeRO-3 and rank 0; rank 1 under ZeRO-2 needs no gather
    with pytest.raises(RuntimeError, match="init_weight_update_group was not called"):
        sender().broadcast_weights()
