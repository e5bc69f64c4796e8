"""The broadcast transports (`weight_sync.transport.name` gloo or nccl): learner rank 0 broadcasts to every engine
worker.

Protocol, following vLLM's RLHF example: the learner (rank 0) and every engine worker join one weight group
(broadcast_comm.py: gloo over TCP on CPU, vLLM's PyNccl on GPUs; `learner.init_weight_update_group(addr, port,
world_size, backend, timeout_s)`, `rollout.init_weight_update_group(addr, port, rank_offset, world_size, backend,
timeout_s, group_id)`); per sync the rollouts enter `update_weights_broadcast(metadata, version, group_id, timeout_s)`
while the learner runs `broadcast_weights(timeout_s)`, which broadcasts every tensor of `weight_metadata()` in order;
each engine worker loads every tensor as it arrives, inside its reload session (engine_update.py).

The weights sent are the learner's `_full_state()` (HF names, `lm_head.weight` included when tied), a collective under
ZeRO-3: the coordinator calls `weight_metadata()` on every learner rank (each takes part in the gather; ranks > 0
drop their copy), then `broadcast_weights(timeout_s)` on rank 0 only.

Every member stops at the sync's deadline by itself and closes its group (`BroadcastTimeout`), so a missed deadline
leaves no one inside a half-finished broadcast; the coordinator's transport then forgets the group, and the next sync
forms a new one, as it does when an engine is not in the current group (a restarted actor). gloo runs on CPU
(tests/actors/test_weight_broadcast.py); nccl is the same protocol on GPUs (not run here: it needs two GPUs).
"""
from __future__ import annotations

import time
import uuid

from actors.calls import answer_times
from actors.rollout.engine_gate import WeightUpdateError
from actors.weight_sync.transport import Delivery, Transport, WeightSyncFailed, WeightSyncTimeout

ANSWER_GRACE_S = 15.0  # members stop at the deadline themselves; time for their answer to arrive


# ---- learner side -------------------------------------------------------------------------------------------------
class BroadcastSender:
    """Learner rank 0 as the group's rank 0. `learner` gives `rank`, `cfg.zero_stage`, `device`, `_full_state()`.

    Every broadcast has a deadline (`timeout_s`, the seconds the sync has left). Past it the group is closed and
    `BroadcastTimeout` raised: the learner's call returns by the deadline, never stays inside a half-finished
    collective, and answers the next call (a train step, a new group). `init_weight_update_group` closes any group it
    held first, so a group is rebuilt by calling it again on every member."""

    def __init__(self, learner):
        self.learner = learner
        self.comm = None
        self._state_to_send = None

    def weight_update_address(self) -> tuple:
        """(host, port) where rank 0 will host the weight-update group: this node's IP and a free port."""
        import ray

        from core.net import rendezvous_port

        return ray.util.get_node_ip_address(), rendezvous_port("")

    def init_weight_update_group(self, host: str, port: int, world_size: int, backend: str = "nccl",
                                 timeout_s: float = 300.0) -> None:
        """Join the group as rank 0 (the sender); `world_size` = 1 + number of engine workers. Closes the group
        this rank held before (a rebuilt group: an engine restarted, or the last sync missed its deadline)."""
        from actors.weight_sync.broadcast_comm import open_group

        if self.learner.rank != 0:
            raise RuntimeError("only learner rank 0 sends weights")
        if backend == "nccl" and self.learner.device.type != "cuda":
            raise RuntimeError("weight_sync.transport.name=nccl needs the learner on a GPU; use gloo or object_store "
                               "on CPU")
        self.close_weight_update_group()
        self.comm = open_group(backend, host, port, 0, world_size, timeout_s, self.learner.device)

    def close_weight_update_group(self) -> None:
        """Abort and forget the weight group (nothing when there is none)."""
        comm, self.comm = self.comm, None
        if comm is not None:
            comm.close()

    def weight_metadata(self) -> list:
        """[(name, dtype name, shape)] of the tensors the next `broadcast_weights` sends, in sending order.
        The weights are gathered once here and kept for that broadcast (one copy per sync, not two).
        Collective under ZeRO-3: every rank calls it; ranks > 0 take part in the gather and return []."""
        learner = self.learner
        if learner.rank != 0:
            if learner.cfg.zero_stage == 3:
                learner._full_state()
            return []
        self._state_to_send = learner._full_state()
        return [(name, str(t.dtype).removeprefix("torch."), list(t.shape))
                for name, t in self._state_to_send.items()]

    def broadcast_weights(self, timeout_s: float = 300.0) -> dict:
        """Broadcast the tensors described by the last `weight_metadata()` (same order; gathered afresh if there
        was none) within `timeout_s`; {"tensors", "bytes", "seconds"}. Raises BroadcastTimeout (group closed)
        past the deadline, RuntimeError without a group."""
        from actors.weight_sync.broadcast_comm import send_tensors

        if self.comm is None:
            raise RuntimeError("init_weight_update_group was not called (or the last broadcast missed its deadline "
                               "and closed the group)")
        device = self.learner.device
        start = time.monotonic()
        state, self._state_to_send = self._state_to_send or self.learner._full_state(), None
        try:
            stats = send_tensors(self.comm, (t.to(device) for t in state.values()), start + timeout_s)
        except BaseException:
            self.close_weight_update_group()  # a group that failed mid-broadcast is never reused
            raise
        if device.type == "cuda":
            import torch

            torch.cuda.synchronize()
        return {**stats, "seconds": time.monotonic() - start}


# ---- rollout side -------------------------------------------------------------------------------------------------
class BroadcastReceiver:
    """A RolloutWorker's membership of the weight group and its receiving update."""

    def __init__(self, update):
        """update: the worker's EngineUpdate (engine_update.py)."""
        self.update = update
        self.group = None  # the id of the group this engine belongs to

    async def init_weight_update_group(self, master_address: str, master_port: int, rank_offset: int,
                                       world_size: int, backend: str = "nccl", timeout_s: float = 300.0,
                                       group_id: str = "") -> None:
        """Join the learner's weight group (broadcast_comm.py) as rank `rank_offset`; `group_id` names it
        (`weight_group()` answers it afterwards, so the coordinator knows which engines must join a new one)."""
        self.group = None
        await self.update.call_in_engine(f"{__name__}:worker_join", master_address, master_port, rank_offset,
                                         world_size, backend, timeout_s)
        self.group = group_id

    def weight_group(self) -> str | None:
        """The id of the weight group this engine belongs to; None before one is formed, after a broadcast that
        failed (its group is closed) and in a restarted actor."""
        return self.group

    async def update_weights_broadcast(self, metadata: list, version: int, group_id: str, timeout_s: float) -> dict:
        """Receive [(name, dtype, shape), ...] broadcast by the learner in group `group_id`, inside the drain /
        load / resume path (`EngineUpdate.run`), the receive under `timeout_s`. Raises WeightUpdateError at once when
        this engine is not in that group (restarted, or its last broadcast failed)."""
        if not metadata:
            raise ValueError("update_weights_broadcast: empty metadata (the learner sends every tensor)")
        if self.weight_group() != group_id:
            raise WeightUpdateError(f"rollout[{self.update.worker.worker_index}] is not in weight group "
                                    f"{group_id!r} (it is in {self.weight_group()!r}); form the group again")
        names, dtypes, shapes = (list(x) for x in zip(*metadata))
        deadline = time.monotonic() + timeout_s  # the drain counts against it too

        received = {}

        async def load():
            try:
                received.update(await self.update.call_in_engine(f"{__name__}:worker_receive", names, dtypes, shapes,
                                                                 deadline - time.monotonic()))
            except BaseException:
                self.group = None  # the worker closed its group
                raise

        stats = await self.update.run(version, load)
        return {**stats, "tensors": len(names), "bytes": received.get("bytes", 0),
                "receive_s": received.get("seconds", 0.0)}


# ---- engine side (in vLLM's worker, through the worker extension's genselect_call) -------------------------------
def worker_join(worker, master_address: str, master_port: int, rank_offset: int, world_size: int,
                backend: str = "nccl", timeout_s: float = 300.0) -> None:
    """Join the trainer's weight group: trainer rank 0 broadcasts, this worker is rank offset+local. Closes the group
    this worker held before. `world_size` = 1 + total number of vLLM workers across engines; `timeout_s`: how long
    the other members may take to join."""
    from vllm.distributed.parallel_state import get_world_group

    from actors.weight_sync.broadcast_comm import open_group

    worker_close(worker)
    rank = get_world_group().rank + rank_offset
    worker._genselect_comm = open_group(backend, master_address, master_port, rank, world_size, timeout_s,
                                        worker.device)


def worker_close(worker) -> None:
    """Abort and forget this worker's weight group (nothing when there is none)."""
    comm, worker._genselect_comm = getattr(worker, "_genselect_comm", None), None
    if comm is not None:
        comm.close()


def worker_receive(worker, names: list, dtypes: list, shapes: list, timeout_s: float) -> dict:
    """Receive the tensors the trainer broadcasts (src 0), in this order, loading each as it arrives, inside a
    session (`genselect_begin_update` ... `genselect_finish_update`). Past `timeout_s` the group is closed and
    BroadcastTimeout raised (the session then reports what is missing); a new group is needed after that."""
    from vllm.config import set_current_vllm_config

    from actors.weight_sync.broadcast_comm import receive_tensors

    comm = getattr(worker, "_genselect_comm", None)
    if comm is None:
        raise RuntimeError("no weight group: init_weight_update_group was not called, or the last broadcast "
                           "missed its deadline and closed it")
    if not getattr(worker, "_genselect_session", False):
        raise RuntimeError("a broadcast received outside a weight-update session")
    start, count, nbytes = time.perf_counter(), 0, 0
    model = worker.model_runner.get_model()
    try:
        for name, weight in receive_tensors(comm, list(zip(names, dtypes, shapes)), worker.device,
                                            time.monotonic() + timeout_s):
            with set_current_vllm_config(worker.vllm_config):
                worker._genselect_loaded.update(model.load_weights(weights=[(name, weight)]) or ())
            count += 1
            nbytes += weight.numel() * weight.element_size()
            del weight
    except BaseException:
        worker_close(worker)
        raise
    return {"tensors": count, "bytes": nbytes, "seconds": time.perf_counter() - start}


# ---- coordinator --------------------------------------------------------------------------------------------------
class BroadcastTransport(Transport):
    """One broadcast from learner rank 0 to every engine worker, in the group `group` names (None: form one at the
    next sync)."""

    sender = BroadcastSender
    receiver = BroadcastReceiver

    def __init__(self, cfg):
        super().__init__(cfg)
        self.group = None

    def deliver(self, sync, version: int, start: float, deadline: float) -> Delivery:
        """The group is formed again when there is none (first sync, or the last one failed) or when an engine is not
        in it (a restarted actor answers `weight_group()` None). Learner and engines each stop at the deadline on
        their own (broadcast_comm.py closes their group), so every call answers by `deadline` plus
        `ANSWER_GRACE_S`; any failure forgets the group, leaves every engine in a known state (`sync.abandon`) and
        raises WeightSyncTimeout (a missed deadline) or WeightSyncFailed. The broadcast happens inside the engines'
        load session, so its time is the transfer and no load time is counted apart."""
        import ray

        joined = sync.wait([h.weight_group.remote() for h in sync.rollouts], sync.names("weight_group"), deadline)
        if self.group is None or any(g != self.group for g in joined):
            self._form_group(sync, deadline)
        metas = sync.wait([learner.weight_metadata.remote() for learner in sync.learners],  # ZeRO-3: collective
                          [f"learner[{r}].weight_metadata" for r in range(len(sync.learners))], deadline)
        left = max(0.0, deadline - time.perf_counter())
        receives = [h.update_weights_broadcast.remote(metas[0], version, self.group, left) for h in sync.rollouts]
        refs = receives + [sync.learner.broadcast_weights.remote(left)]
        names = sync.names("update_weights_broadcast") + ["learner[0].broadcast_weights"]
        self._check_all(sync, refs, names, deadline, f"weight sync to version {version}")
        workers = ray.get(receives)
        return Delivery(workers, 0.0, [w.get("load_s", 0.0) for w in workers], [0.0 for _ in workers])

    def _form_group(self, sync, deadline: float) -> None:
        """Every engine worker and learner rank 0 leave the group they held and join a new one."""
        self.group = None
        address, port = sync.wait([sync.learner.weight_update_address.remote()],
                                  ["learner[0].weight_update_address"], deadline)[0]
        group, left = uuid.uuid4().hex[:12], max(0.0, deadline - time.perf_counter())
        world_size = 1 + len(sync.rollouts)  # one worker per engine (no tensor parallelism)
        calls = [h.init_weight_update_group.remote(address, port, 1 + i, world_size, self.name, left, group)
                 for i, h in enumerate(sync.rollouts)]
        calls.append(sync.learner.init_weight_update_group.remote(address, port, world_size, self.name, left))
        self._check_all(sync, calls, sync.names("init_weight_update_group") + ["learner[0].init_weight_update_group"],
                        deadline, f"forming the {self.name} weight group")
        self.group = group

    def _check_all(self, sync, refs: list, names: list, deadline: float, what: str) -> None:
        """Wait for calls that stop at `deadline` by themselves; any error or late answer forgets the group,
        abandons the engines' calls and raises (WeightSyncTimeout when a deadline was missed)."""
        import ray

        _, pending = answer_times(refs, deadline + ANSWER_GRACE_S)
        failures, timed_out = [], bool(pending)
        for ref, name in zip(refs, names):
            if ref in pending:
                failures.append(f"{name}: no answer")
                continue
            try:
                ray.get(ref)
            except Exception as e:
                timed_out |= isinstance(e, TimeoutError) or "BroadcastTimeout" in str(e)
                failures.append(f"{name}: {_last_line(e)}")
        if not failures:
            return
        self.group = None
        cls = WeightSyncTimeout if timed_out else WeightSyncFailed
        err = cls(f"{what} failed (timeout_s={self.cfg.timeout_s:g}; the weight group is closed and formed again "
                  f"at the next sync): {'; '.join(failures)}", [n for r, n in zip(refs, names) if r in pending])
        sync.abandon(refs, pending, err)
        raise err


class GlooTransport(BroadcastTransport):
    """The broadcast over gloo (TCP; CPU tensors, a CUDA tensor staged through host memory)."""

    name = "gloo"


class NcclTransport(BroadcastTransport):
    """The broadcast over NCCL (vLLM's PyNccl; GPU learner and engines)."""

    name = "nccl"


def _last_line(err: Exception) -> str:
    """The last line of an error's message (a RayTaskError carries the remote traceback before it)."""
    lines = [line for line in str(err).strip().splitlines() if line.strip()]
    return (lines[-1] if lines else type(err).__name__)[:300]
