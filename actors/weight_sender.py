"""Learner side of the broadcast weight sync (`weight_sync.backend` gloo or nccl): rank 0 of the weight group.

Protocol (vLLM's RLHF example; the coordinator is actors/weight_sync.py, the receiving side
actors/vllm_extension.py): learner rank 0 is rank 0 of a weight group (actors/weight_comm.py) whose other ranks are
the engines' workers; per sync the engines receive in `update_weights_broadcast(metadata, ...)` while rank 0
broadcasts every tensor of `weight_metadata()`, in that order.

The weights sent are `_full_state()` (HF names, `lm_head.weight` included when tied), which is a collective under
ZeRO-3: the coordinator calls `weight_metadata()` on every learner rank (each takes part in the gather; ranks > 0
drop their copy), then `broadcast_weights(timeout_s)` on rank 0 only.

Every broadcast has a deadline (`timeout_s`, the seconds the sync has left). Past it the group is closed and
`BroadcastTimeout` raised: the learner's call returns by the deadline, never stays inside a half-finished
collective, and answers the next call (a train step, a new group). `init_weight_update_group` closes any group it
held first, so a group is rebuilt by calling it again on every member.
"""
from __future__ import annotations

import time


class BroadcastWeightSender:
    """Mixin for `Learner`: expects `self.rank`, `self.world_size`, `self.cfg.zero_stage`, `self.device`
    and `self._full_state()`."""

    _weight_comm = None
    _state_to_send = None

    def weight_update_address(self) -> tuple:
        """(host, port) where rank 0 will host the weight-update group: this node's IP and a free port."""
        import ray

        from core.net import rendezvous_port

        return ray.util.get_node_ip_address(), rendezvous_port("")

    def init_weight_update_group(self, host: str, port: int, world_size: int, backend: str = "nccl",
                                 timeout_s: float = 300.0) -> None:
        """Join the group as rank 0 (the sender); `world_size` = 1 + number of engine workers. Closes the group
        this rank held before (a rebuilt group: an engine restarted, or the last sync missed its deadline)."""
        from actors.weight_comm import open_group

        if self.rank != 0:
            raise RuntimeError("only learner rank 0 sends weights")
        if backend == "nccl" and self.device.type != "cuda":
            raise RuntimeError("weight_sync.backend=nccl needs the learner on a GPU; use gloo or object_store on CPU")
        self.close_weight_update_group()
        self._weight_comm = open_group(backend, host, port, 0, world_size, timeout_s, self.device)

    def close_weight_update_group(self) -> None:
        """Abort and forget the weight group (nothing when there is none)."""
        comm, self._weight_comm = self._weight_comm, None
        if comm is not None:
            comm.close()

    def weight_metadata(self) -> list:
        """[(name, dtype name, shape)] of the tensors the next `broadcast_weights` sends, in sending order.
        The weights are gathered once here and kept for that broadcast (one copy per sync, not two).
        Collective under ZeRO-3: every rank calls it; ranks > 0 take part in the gather and return []."""
        if self.rank != 0:
            if self.cfg.zero_stage == 3:
                self._full_state()
            return []
        self._state_to_send = self._full_state()
        return [(name, str(t.dtype).removeprefix("torch."), list(t.shape))
                for name, t in self._state_to_send.items()]

    def broadcast_weights(self, timeout_s: float = 300.0) -> dict:
        """Broadcast the tensors described by the last `weight_metadata()` (same order; gathered afresh if there
        was none) within `timeout_s`; {"tensors", "bytes", "seconds"}. Raises BroadcastTimeout (group closed)
        past the deadline, RuntimeError without a group."""
        from actors.weight_comm import send_tensors

        if self._weight_comm is None:
            raise RuntimeError("init_weight_update_group was not called (or the last broadcast missed its deadline "
                               "and closed the group)")
        start = time.monotonic()
        state, self._state_to_send = self._state_to_send or self._full_state(), None
        try:
            stats = send_tensors(self._weight_comm, (t.to(self.device) for t in state.values()),
                                 start + timeout_s)
        except BaseException:
            self.close_weight_update_group()  # a group that failed mid-broadcast is never reused
            raise
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize()
        return {**stats, "seconds": time.monotonic() - start}

    # ---- colocated (weight_sync.backend=ipc): one CUDA IPC handle per bucket (actors/ipc_buckets.py) ------------
    _ipc_ledger = None

    def export_ipc(self, export_id: str, bucket_bytes: int, engines: list) -> list:
        """Flatten the full weights into buckets on this GPU and return one IPC handle per bucket
        ([{"channel", "handle", "entries"}]; on a CPU learner the `shm` channel, files on /dev/shm); the buckets
        stay alive until every engine in `engines` has called
        `release_ipc(export_id, engine)`, or `drop_ipc(export_id)`, or a newer export. Collective under ZeRO-3:
        every rank calls it; ranks > 0 take part in the gather and return []."""
        from actors import ipc_buckets

        if self.rank != 0:
            if self.cfg.zero_stage == 3:
                self._full_state()
            return []
        if self._ipc_ledger is None:
            self._ipc_ledger = ipc_buckets.ExportLedger(keep=1)
        channel = "cuda" if self.device.type == "cuda" else "shm"  # shm: a CPU learner, the engine on its node
        buckets, exported = ipc_buckets.export(self._full_state(), bucket_bytes, channel)
        free = (lambda: ipc_buckets.remove_shm(exported)) if channel == "shm" else None
        self._ipc_ledger.add(export_id, buckets, engines, free)
        return exported

    def release_ipc(self, export_id: str, engine: str) -> bool:
        """`engine` has copied every bucket of `export_id`; True when it was the last (the buckets are freed)."""
        return self._ipc_ledger is not None and self._ipc_ledger.release(export_id, engine)

    def drop_ipc(self, export_id: str) -> None:
        """Free the buckets of `export_id` now (the sync is over, whatever the engines said)."""
        if self._ipc_ledger is not None:
            self._ipc_ledger.drop(export_id)
            if self.device.type == "cuda":
                import torch

                torch.cuda.ipc_collect()

    def held_ipc(self) -> dict:
        """{export_id: engines that have not released it yet}: the buckets still alive."""
        return self._ipc_ledger.held() if self._ipc_ledger is not None else {}
