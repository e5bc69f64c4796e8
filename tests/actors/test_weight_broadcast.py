"""The broadcast weight sync over gloo for real: learner rank 0's sender (actors/weight_sync/broadcast.py) in one Ray
actor, a real RolloutWorker (vLLM on CPU, tiny Qwen3, fp32) in another, the coordinator in the test process.

The learner side is the real `BroadcastSender` and `IpcSender` held by a transformers model (the DeepSpeed learner is
tested on its own in test_learner.py; its `_full_state` is what this host's returns: HF names, `lm_head.weight` included).
Proof the weights arrive: the engine's log-probs of a fixed completion equal the sender's after a sync (fp32,
< 1e-5) and differ before it. Then a member that joins the group and never receives makes the sync miss its
deadline (everyone answers, the learner is not left in the broadcast), and the next sync forms a new group; an
engine actor killed and restarted by Ray rejoins at the next sync. The colocated backend (ipc) over its CPU channel
(bucket files on /dev/shm, one per bucket): the engine gets the same weights through its drain / load / resume
path, and the learner frees the buckets once the engine has copied them, or when the deadline passes.
"""
from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.actors import helpers_weights as weights

pytestmark = pytest.mark.slow

REPO = str(Path(__file__).resolve().parents[2])


def _sender_host_class():
    from actors.weight_sync.broadcast import BroadcastSender
    from actors.weight_sync.ipc import IpcSender

    class SenderHost:
        """Learner rank 0 as the senders see it: a transformers model whose full state is sent, with the learner's
        Ray-callable weight methods handed to the senders it holds, as actors/learner/learner.py does."""

        def __init__(self, model_path: str):
            import types

            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            torch.set_num_threads(1)
            self.rank, self.world_size, self.device = 0, 1, torch.device("cpu")
            self.cfg = types.SimpleNamespace(zero_stage=2)
            self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
            self.tokenizer = AutoTokenizer.from_pretrained(model_path)
            self.broadcast, self.ipc = BroadcastSender(self), IpcSender(self)

        def weight_update_address(self):
            return self.broadcast.weight_update_address()

        def init_weight_update_group(self, *args):
            return self.broadcast.init_weight_update_group(*args)

        def weight_metadata(self):
            return self.broadcast.weight_metadata()

        def broadcast_weights(self, timeout_s):
            return self.broadcast.broadcast_weights(timeout_s)

        def export_ipc(self, *args):
            return self.ipc.export_ipc(*args)

        def release_ipc(self, *args):
            return self.ipc.release_ipc(*args)

        def drop_ipc(self, export_id):
            return self.ipc.drop_ipc(export_id)

        def held_ipc(self):
            return self.ipc.held_ipc()

        def export_weights(self, rank0_only: bool = False, widen: bool = True) -> dict:
            from actors.learner.checkpoint_io import to_numpy

            return to_numpy(self._full_state(), widen=widen)

        def _full_state(self) -> dict:
            return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

        def perturb(self, seed: int, scale: float = 0.02) -> None:
            weights.perturb(self.model, seed, scale)

        def has_group(self) -> bool:
            return self.broadcast.comm is not None

        def fixed_ids(self) -> tuple:
            return weights.fixed_ids(self.tokenizer)

        def logprobs(self, prompt_ids: list, response_ids: list) -> list:
            return weights.completion_logprobs(self.model, prompt_ids, response_ids)

    return SenderHost


class SilentMember:
    """A rollout actor that joins the gloo group for real and then never receives (an engine that fell behind)."""

    def __init__(self):
        self.comm, self.group = None, None

    async def init_weight_update_group(self, address, port, rank, world_size, backend, timeout_s, group_id):
        from actors.weight_sync.broadcast_comm import open_group

        self.comm = await asyncio.to_thread(open_group, backend, address, port, rank, world_size, timeout_s)
        self.group = group_id

    def weight_group(self):
        return self.group

    async def update_weights_broadcast(self, metadata, version, group_id, timeout_s):
        await asyncio.sleep(3600)

    def update_state(self) -> dict:
        return {"state": "silent", "engine_version": 0}


@pytest.fixture(scope="module")
def system(rollout_model_path):
    import ray

    from actors.rollout.rollout_worker import RolloutWorker
    from core.config import RolloutConfig

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the test actors travel by value
    ray.cloudpickle.register_pickle_by_value(weights)
    owned = not ray.is_initialized()
    if owned:
        ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=256 << 20,
                 runtime_env={"env_vars": {"PYTHONPATH": REPO}})
    host = ray.remote(num_cpus=0)(_sender_host_class()).remote(rollout_model_path)
    cfg = RolloutConfig(samples_per_prompt=2, max_response_tokens=8, max_num_seqs=16)
    engine = ray.remote(num_cpus=0, max_restarts=1)(RolloutWorker).remote(cfg, rollout_model_path, "float32", 0, 0)
    ray.get(engine.health.remote(), timeout=600)
    yield ray, host, engine
    ray.get(engine.shutdown.remote(), timeout=120)
    ray.kill(engine)
    ray.kill(host)
    if owned:
        ray.shutdown()


class HungIpcEngine:
    """A rollout actor that never finishes loading an ipc export."""

    async def update_weights_ipc(self, exported, version):
        await asyncio.sleep(3600)

    def update_state(self) -> dict:
        return {"state": "hung", "engine_version": 0}


def _bucket_files() -> set:
    import glob
    import tempfile

    return set(glob.glob("/dev/shm/genselect-ipc-*") + glob.glob(f"{tempfile.gettempdir()}/genselect-ipc-*"))


def _gap(ray, host, engine) -> float:
    prompt, response = ray.get(host.fixed_ids.remote())
    ours = ray.get(host.logprobs.remote(prompt, response))
    theirs = ray.get(engine.compute_logprobs.remote(prompt, response), timeout=120)
    return float(np.max(np.abs(np.subtract(ours, theirs))))


def test_gloo_sync_reaches_the_engine_and_reuses_its_group(system):
    """...and the serving board (`serve.live`) gets every synced version: the coordinator exports the weights into
    the object store for it, since the broadcast does not pass through there."""
    from actors.serving.weight_board import WeightBoard
    from actors.weight_sync.coordinator import WeightSyncBroadcaster
    from core.config import WeightSyncConfig

    ray, host, engine = system
    board = ray.remote(num_cpus=0)(WeightBoard).remote()
    broadcaster = WeightSyncBroadcaster(WeightSyncConfig(transport={"name": "gloo"}, timeout_s=120), host, [engine],
                                        board=board)
    ray.get(host.perturb.remote(1))
    assert _gap(ray, host, engine) > 1e-3  # the engine still holds the folder's weights
    stats = broadcaster.sync(1)
    assert _gap(ray, host, engine) < 1e-5
    assert ray.get(engine.policy_version.remote()) == 1
    group = broadcaster.transport.group
    assert group and ray.get(engine.weight_group.remote()) == group
    assert stats["bytes"] > 0 and stats["workers"][0]["tensors"] > 0
    version, source = ray.get(board.latest.remote())
    published, sent = ray.get(source["ref"][0]), ray.get(host.export_weights.remote())
    assert version == 1 and source["kind"] == "object_ref" and published.keys() == sent.keys()
    assert all(np.array_equal(published[k], sent[k]) for k in sent)
    ray.get(host.perturb.remote(2))
    broadcaster.sync(2)
    assert broadcaster.transport.group == group  # the same group carried the second sync
    assert _gap(ray, host, engine) < 1e-5 and ray.get(engine.policy_version.remote()) == 2


def test_missed_deadline_returns_every_member_and_the_next_sync_forms_a_new_group(system):
    from actors.weight_sync.broadcast import ANSWER_GRACE_S
    from actors.weight_sync.coordinator import WeightSyncBroadcaster
    from actors.weight_sync.transport import WeightSyncTimeout
    from core.config import WeightSyncConfig

    ray, host, engine = system
    silent = ray.remote(num_cpus=0)(SilentMember).remote()
    try:
        timeout_s = 25.0
        stuck = WeightSyncBroadcaster(WeightSyncConfig(transport={"name": "gloo"}, timeout_s=timeout_s), host,
                                      [engine, silent])
        ray.get(host.perturb.remote(3))
        start = time.perf_counter()
        with pytest.raises(WeightSyncTimeout) as info:
            stuck.sync(3)
        assert time.perf_counter() - start < timeout_s + ANSWER_GRACE_S + 30
        message = str(info.value)
        assert "rollout[1]" in message and "update_weights_broadcast: no answer" in message
        assert "learner[0].broadcast_weights: no answer" not in message  # the learner returned by the deadline
        assert stuck.transport.group is None
        assert ray.get(host.has_group.remote(), timeout=5) is False  # its group closed, nothing left running
        state = info.value.engines[0]
        assert state["state"] in ("done", "failed"), state  # the real engine's outcome is known
    finally:
        ray.kill(silent)
    broadcaster = WeightSyncBroadcaster(WeightSyncConfig(transport={"name": "gloo"}, timeout_s=120), host, [engine])
    broadcaster.sync(4)
    assert _gap(ray, host, engine) < 1e-5 and ray.get(engine.policy_version.remote()) == 4
    assert ray.get(engine.health.remote())["ok"]


def test_restarted_engine_rejoins_at_the_next_sync(system):
    from actors.weight_sync.coordinator import WeightSyncBroadcaster
    from core.config import WeightSyncConfig

    ray, host, engine = system
    broadcaster = WeightSyncBroadcaster(WeightSyncConfig(transport={"name": "gloo"}, timeout_s=120), host, [engine])
    broadcaster.sync(5)
    old = broadcaster.transport.group
    ray.kill(engine, no_restart=False)  # the actor dies; Ray restarts it (max_restarts=1) from the model folder
    deadline = time.monotonic() + 600
    while True:  # the old actor may still answer a call or two before the kill lands: wait for the fresh one
        try:
            if ray.get(engine.policy_version.remote(), timeout=60) == 0:
                break
        except Exception:
            if time.monotonic() > deadline:
                raise
        time.sleep(2)
    ray.get(engine.health.remote(), timeout=120)
    assert ray.get(engine.weight_group.remote()) is None
    ray.get(host.perturb.remote(6))
    broadcaster.sync(6)
    assert broadcaster.transport.group not in (None, old)
    assert _gap(ray, host, engine) < 1e-5 and ray.get(engine.policy_version.remote()) == 6


def test_ipc_sync_on_one_node_loads_the_buckets_and_frees_them(system):
    from actors.weight_sync.coordinator import WeightSyncBroadcaster
    from core.config import WeightSyncConfig

    ray, host, engine = system
    before = _bucket_files()
    sync_cfg = WeightSyncConfig(transport={"name": "ipc", "bucket_mb": 1}, timeout_s=120)
    broadcaster = WeightSyncBroadcaster(sync_cfg, host, [engine])
    ray.get(host.perturb.remote(7))
    assert _gap(ray, host, engine) > 1e-3
    stats = broadcaster.sync(7)
    assert _gap(ray, host, engine) < 1e-5 and ray.get(engine.policy_version.remote()) == 7
    assert stats["workers"][0]["buckets"] > 1 and stats["bytes"] > 0  # several 1-MB buckets, one handle each
    assert ray.get(host.held_ipc.remote()) == {} and _bucket_files() == before  # freed once the engine copied them


def test_ipc_sync_past_its_deadline_frees_the_buckets_and_the_next_one_loads(system):
    from actors.weight_sync.coordinator import WeightSyncBroadcaster
    from actors.weight_sync.transport import WeightSyncTimeout
    from core.config import WeightSyncConfig

    ray, host, engine = system
    before = _bucket_files()
    hung = ray.remote(num_cpus=0)(HungIpcEngine).remote()
    try:
        stuck = WeightSyncBroadcaster(WeightSyncConfig(transport={"name": "ipc"}, timeout_s=15), host, [engine, hung])
        ray.get(host.perturb.remote(8))
        with pytest.raises(WeightSyncTimeout, match=r"rollout\[1\]") as info:
            stuck.sync(8)
        assert info.value.engines[0]["state"] == "done"  # the real engine copied its buckets in time
        assert ray.get(host.held_ipc.remote()) == {} and _bucket_files() == before
    finally:
        ray.kill(hung)
    WeightSyncBroadcaster(WeightSyncConfig(transport={"name": "ipc"}, timeout_s=120), host, [engine]).sync(9)
    assert _gap(ray, host, engine) < 1e-5 and ray.get(engine.policy_version.remote()) == 9
