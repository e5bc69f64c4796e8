"""Learner side of the NCCL weight sync (GPU clusters; `weight_metadata` ran on one H100, the broadcast needs 2 GPUs).

Protocol (vLLM's RLHF example; the broadcaster is actors/weight_sync.py, the receiving side
actors/vllm_extension.py): learner rank 0 is rank 0 of a `StatelessProcessGroup` whose other ranks are
the engines' workers; per sync the engines wait in `update_weights_nccl(metadata)` while rank 0
broadcasts every tensor of `weight_metadata()`, in that order, from its GPU.

The weights sent are `_full_state()` (HF names, `lm_head.weight` included when tied), which is a
collective under ZeRO-3: the broadcaster calls `weight_metadata()` on every learner rank (each takes part in
the gather; ranks > 0 drop their copy), then `broadcast_weights()` on rank 0 only.
"""
from __future__ import annotations


class NcclWeightSender:
    """Mixin for `Learner`: expects `self.rank`, `self.world_size`, `self.cfg.zero_stage`, `self.device`
    and `self._full_state()`."""

    _weight_comm = None
    _state_to_send = None

    def weight_update_address(self) -> tuple:
        """(host, port) where rank 0 will host the weight-update group: this node's IP and a free port."""
        import ray

        from core.net import rendezvous_port

        return ray.util.get_node_ip_address(), rendezvous_port("")

    def init_weight_update_group(self, host: str, port: int, world_size: int) -> None:
        """Join the group as rank 0 (the sender); `world_size` = 1 + number of engine workers."""
        if self.rank != 0:
            raise RuntimeError("only learner rank 0 sends weights")
        if self.device.type != "cuda":
            raise RuntimeError("weight_sync.backend=nccl needs the learner on a GPU; use object_store on CPU")
        import torch
        from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
        from vllm.distributed.utils import StatelessProcessGroup

        group = StatelessProcessGroup.create(host=host, port=port, rank=0, world_size=world_size)
        self._weight_comm = PyNcclCommunicator(group, device=torch.cuda.current_device())

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

    def broadcast_weights(self) -> dict:
        """Broadcast the tensors described by the last `weight_metadata()` (same order; gathered afresh if
        there was none) to the group; {"tensors", "bytes"}."""
        import torch

        if self._weight_comm is None:
            raise RuntimeError("init_weight_update_group was not called")
        nbytes = 0
        stream = torch.cuda.current_stream()
        state, self._state_to_send = self._state_to_send or self._full_state(), None
        for tensor in state.values():
            tensor = tensor.to(self.device).contiguous()
            self._weight_comm.broadcast(tensor, src=0, stream=stream)
            nbytes += tensor.numel() * tensor.element_size()
        torch.cuda.synchronize()
        return {"tensors": len(state), "bytes": nbytes}
