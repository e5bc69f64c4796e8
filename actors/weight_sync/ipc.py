"""The colocated transport (`weight_sync.transport.name=ipc`): one GPU shared by learner rank 0 and one engine.

The learner flattens its weights into buckets on its GPU and exports one CUDA IPC handle per bucket (`export_ipc`;
the buckets' wire format and the ledger that keeps them alive: ipc_buckets.py); the engine opens them on its own
device index and loads them inside the same drain / load / resume path as every transport (`update_weights_ipc`,
engine_update.py), under the same deadline and missing-parameter check; the learner keeps the buckets until every
engine has released them and frees them when the sync ends either way. A CPU learner uses the `shm` channel (bucket
files on /dev/shm), which runs the whole path on CPU in the tests; the CUDA channel needs a GPU (not run here). The
object-store transport works colocated too, as the fallback.
"""
from __future__ import annotations

import time
import uuid

from actors.weight_sync.transport import ABANDON_WAIT_S, Delivery, Transport, timed_transfer


# ---- learner side -------------------------------------------------------------------------------------------------
class IpcSender:
    """The learner's exported buckets. `learner` gives `rank`, `cfg.zero_stage`, `device`, `_full_state()`."""

    def __init__(self, learner):
        self.learner = learner
        self.ledger = None

    def export_ipc(self, export_id: str, bucket_bytes: int, engines: list) -> list:
        """Flatten the full weights into buckets on this GPU and return one IPC handle per bucket
        ([{"channel", "handle", "entries"}]; on a CPU learner the `shm` channel, files on /dev/shm); the buckets
        stay alive until every engine in `engines` has called
        `release_ipc(export_id, engine)`, or `drop_ipc(export_id)`, or a newer export. Collective under ZeRO-3:
        every rank calls it; ranks > 0 take part in the gather and return []."""
        from actors.weight_sync import ipc_buckets

        learner = self.learner
        if learner.rank != 0:
            if learner.cfg.zero_stage == 3:
                learner._full_state()
            return []
        if self.ledger is None:
            self.ledger = ipc_buckets.ExportLedger(keep=1)
        channel = "cuda" if learner.device.type == "cuda" else "shm"  # shm: a CPU learner, the engine on its node
        buckets, exported = ipc_buckets.export(learner._full_state(), bucket_bytes, channel)
        free = (lambda: ipc_buckets.remove_shm(exported)) if channel == "shm" else None
        self.ledger.add(export_id, buckets, engines, free)
        return exported

    def release_ipc(self, export_id: str, engine: str) -> bool:
        """`engine` has copied every bucket of `export_id`; True when it was the last (the buckets are freed)."""
        return self.ledger is not None and self.ledger.release(export_id, engine)

    def drop_ipc(self, export_id: str) -> None:
        """Free the buckets of `export_id` now (the sync is over, whatever the engines said)."""
        if self.ledger is not None:
            self.ledger.drop(export_id)
            if self.learner.device.type == "cuda":
                import torch

                torch.cuda.ipc_collect()

    def held_ipc(self) -> dict:
        """{export_id: engines that have not released it yet}: the buckets still alive."""
        return self.ledger.held() if self.ledger is not None else {}


# ---- rollout side -------------------------------------------------------------------------------------------------
class IpcReceiver:
    """A RolloutWorker's load of the learner's buckets."""

    def __init__(self, update):
        """update: the worker's EngineUpdate (engine_update.py)."""
        self.update = update

    async def update_weights_ipc(self, exported: list, version: int) -> dict:
        """Load the learner's IPC buckets ([{"channel", "handle", "entries"}], ipc_buckets.py) inside the drain /
        load / resume path; the coordinator's deadline cancels it as it does an object-store update."""
        if not exported:
            raise ValueError("update_weights_ipc: no buckets (the learner exports every tensor)")
        received = {}

        async def load():
            received.update(await self.update.call_in_engine(f"{__name__}:worker_load", exported))

        stats = await self.update.run(version, load)
        return {**stats, "tensors": received.get("tensors", 0), "bytes": received.get("bytes", 0),
                "buckets": received.get("buckets", 0)}


# ---- engine side (in vLLM's worker, through the worker extension's genselect_call) -------------------------------
def worker_load(worker, exported: list) -> dict:
    """Open each bucket the learner exported on this worker's device index, load its tensors (the model's
    load_weights copies them) inside a session, drop it. Returns {"tensors", "bytes", "buckets", "seconds"}."""
    from vllm.config import set_current_vllm_config

    from actors.weight_sync.ipc_buckets import load_all

    if not getattr(worker, "_genselect_session", False):
        raise RuntimeError("an IPC load outside a weight-update session")
    start = time.perf_counter()
    model = worker.model_runner.get_model()

    def load(pairs):
        with set_current_vllm_config(worker.vllm_config):
            worker._genselect_loaded.update(model.load_weights(weights=pairs) or ())

    stats = load_all(exported, worker.device.index, load)
    return {**stats, "seconds": time.perf_counter() - start}


# ---- coordinator --------------------------------------------------------------------------------------------------
class IpcTransport(Transport):
    """Learner rank 0 exports one handle per bucket (every rank takes part in the ZeRO-3 gather), every engine loads
    them under the deadline; the learner keeps the buckets until each engine that answered has released them, and
    frees them when the sync ends either way."""

    name = "ipc"
    sender = IpcSender
    receiver = IpcReceiver

    def deliver(self, sync, version: int, start: float, deadline: float) -> Delivery:
        import ray

        export_id = f"v{version}-{uuid.uuid4().hex[:8]}"
        engines = [f"rollout[{i}]" for i in range(len(sync.rollouts))]
        bucket_bytes = self.params["bucket_mb"] << 20
        refs = [learner.export_ipc.remote(export_id, bucket_bytes, engines) for learner in sync.learners]
        exported = sync.wait(refs, [f"learner[{r}].export_ipc" for r in range(len(refs))], deadline)[0]
        export_s = time.perf_counter() - start
        sent = time.perf_counter()
        try:
            calls = [h.update_weights_ipc.remote(exported, version) for h in sync.rollouts]
            workers, ends = sync.wait_engines(calls, "update_weights_ipc", deadline, version)
            ray.get([sync.learner.release_ipc.remote(export_id, e) for e in engines], timeout=ABANDON_WAIT_S)
        finally:
            ray.get(sync.learner.drop_ipc.remote(export_id), timeout=ABANDON_WAIT_S)
        return Delivery(workers, export_s, timed_transfer(workers, ends, sent), [w.get("load_s", 0.0) for w in workers])
