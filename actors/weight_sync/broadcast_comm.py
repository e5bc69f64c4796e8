"""The weight-broadcast communicator: one group (learner rank 0 + every engine worker), one tensor at a time,
every operation under a deadline.

`open_group(backend, host, port, rank, world_size, timeout_s, device)` returns a `WeightComm`:

- `broadcast(tensor, src, deadline)`: in place; `tensor` [any shape] on the caller's device, the same shape and
  dtype on every rank. Returns once this rank's part is complete, or raises `BroadcastTimeout` at `deadline`
  (a `time.monotonic()` value) after closing the group: a group that missed a deadline may hold a half-finished
  collective, so it is never used again and the next sync forms a new one.
- `close()`: abort and forget the group (idempotent). A member that is left (a restarted engine, a learner that
  timed out) is never waited for: a peer still inside the old group fails at its own deadline.

Backends:

- `gloo`: torch's `ProcessGroupGloo` over a `TCPStore`, outside `torch.distributed`'s global state (the learner's
  DeepSpeed group stays untouched). CPU tensors; a CUDA tensor is staged through host memory. Runs in CI on CPU:
  set-up, order, per-tensor load, a missed deadline and a rebuilt group are tested there
  (tests/actors/test_weight_comm.py, tests/actors/test_weight_broadcast.py). The group's own timeout is the
  sync's, so even the transport thread of an abandoned broadcast ends by then.
- `nccl`: vLLM's `PyNcclCommunicator` on a `StatelessProcessGroup` (vLLM's RLHF example). The broadcast is
  enqueued on the current stream and an event is polled until `deadline`; a miss calls the communicator's
  `destroy()` (`ncclCommAbort`), so no host thread stays inside NCCL. Needs two GPUs; not run here.
"""
from __future__ import annotations

import datetime
import time

BACKENDS = ("gloo", "nccl")
_POLL_S = 0.001


class BroadcastTimeout(TimeoutError):
    """A broadcast (or the group's set-up) missed its deadline; the group has been closed."""


class WeightComm:
    """Base of the two backends: `rank`, `world_size`, `backend`, `broadcast`, `close`."""

    backend = ""

    def __init__(self, rank: int, world_size: int):
        self.rank, self.world_size = rank, world_size
        self.closed = False

    def broadcast(self, tensor, src: int, deadline: float) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.closed = True

    def _check_open(self, deadline: float) -> float:
        """Seconds left before `deadline`; raises when the group is closed or the deadline has passed."""
        if self.closed:
            raise RuntimeError(f"the {self.backend} weight group was closed (a missed deadline or a rebuilt group); "
                               f"form a new one")
        left = deadline - time.monotonic()
        if left <= 0:
            self.close()
            raise BroadcastTimeout(f"{self.backend} weight broadcast: the deadline had passed before the next tensor "
                                   f"(rank {self.rank} of {self.world_size}); group closed")
        return left


class GlooWeightComm(WeightComm):
    """torch ProcessGroupGloo on its own TCPStore (rank 0 hosts the store at host:port)."""

    backend = "gloo"

    def __init__(self, host: str, port: int, rank: int, world_size: int, timeout_s: float):
        import torch.distributed as dist

        super().__init__(rank, world_size)
        timeout = datetime.timedelta(seconds=timeout_s)
        try:
            self._store = dist.TCPStore(host, port, world_size, rank == 0, timeout=timeout,
                                        wait_for_workers=False)
            self._pg = dist.ProcessGroupGloo(dist.PrefixStore("genselect-weights", self._store), rank, world_size,
                                             timeout)
        except RuntimeError as err:  # a peer that never joined: the store's wait timed out
            raise BroadcastTimeout(f"gloo weight group at {host}:{port}: rank {rank} of {world_size} could not form "
                                   f"the group within {timeout_s:g} s ({str(err).splitlines()[0][:200]})") from err

    def broadcast(self, tensor, src: int, deadline: float) -> None:
        import torch.distributed as dist

        left = self._check_open(deadline)
        host = tensor if tensor.device.type == "cpu" else tensor.to("cpu")
        opts = dist.BroadcastOptions()
        opts.rootRank = src
        try:
            self._pg.broadcast([host], opts).wait(datetime.timedelta(seconds=left))
        except RuntimeError as err:
            self.close()
            raise BroadcastTimeout(f"gloo weight broadcast of a {list(tensor.shape)} {tensor.dtype} tensor missed its "
                                   f"deadline on rank {self.rank} of {self.world_size} "
                                   f"({str(err).splitlines()[0][:200]}); group closed") from err
        if host is not tensor:
            tensor.copy_(host)

    def close(self) -> None:
        if self.closed:
            return
        super().close()
        try:
            self._pg.abort()
        except Exception:  # an older torch without abort(): dropping the group closes its sockets
            pass
        self._pg = self._store = None


class NcclWeightComm(WeightComm):
    """vLLM's PyNcclCommunicator on a StatelessProcessGroup, on `device` (a CUDA device)."""

    backend = "nccl"

    def __init__(self, host: str, port: int, rank: int, world_size: int, timeout_s: float, device):
        import torch
        from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
        from vllm.distributed.utils import StatelessProcessGroup

        super().__init__(rank, world_size)
        if torch.device(device).type != "cuda":
            raise ValueError(f"the nccl weight group needs a CUDA device, got {device}; use gloo on CPU")
        try:
            group = StatelessProcessGroup.create(host=host, port=port, rank=rank, world_size=world_size,
                                                 store_timeout=max(1, int(timeout_s)))
            self._comm = PyNcclCommunicator(group, device=device)
        except Exception as err:
            raise BroadcastTimeout(f"nccl weight group at {host}:{port}: rank {rank} of {world_size} could not form "
                                   f"the group within {timeout_s:g} s ({str(err).splitlines()[0][:200]})") from err

    def broadcast(self, tensor, src: int, deadline: float) -> None:
        import torch

        self._check_open(deadline)
        stream = torch.cuda.current_stream()
        self._comm.broadcast(tensor, src=src, stream=stream)
        done = torch.cuda.Event()
        done.record(stream)
        while not done.query():
            if time.monotonic() >= deadline:
                self.close()
                raise BroadcastTimeout(f"nccl weight broadcast of a {list(tensor.shape)} {tensor.dtype} tensor missed "
                                       f"its deadline on rank {self.rank} of {self.world_size}; communicator aborted")
            time.sleep(_POLL_S)

    def close(self) -> None:
        if self.closed:
            return
        super().close()
        self._comm.destroy()  # ncclCommAbort in a daemon thread, joined for at most 5 s


def open_group(backend: str, host: str, port: int, rank: int, world_size: int, timeout_s: float,
               device=None) -> WeightComm:
    """Form (or join) the weight group; every member calls this with the same host, port, world_size, backend."""
    if backend not in BACKENDS:
        raise ValueError(f"weight group backend {backend!r} is not one of {list(BACKENDS)}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside a weight group of {world_size}")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    if backend == "gloo":
        return GlooWeightComm(host, port, rank, world_size, timeout_s)
    return NcclWeightComm(host, port, rank, world_size, timeout_s, device)


def send_tensors(comm: WeightComm, tensors, deadline: float) -> dict:
    """Rank 0's side of one sync: broadcast each tensor of `tensors` (an iterable of [any shape] tensors, in the
    order of the metadata the receivers were given). Returns {"tensors", "bytes"}."""
    count, nbytes = 0, 0
    for tensor in tensors:
        comm.broadcast(tensor.contiguous(), 0, deadline)
        count += 1
        nbytes += tensor.numel() * tensor.element_size()
    return {"tensors": count, "bytes": nbytes}


def receive_tensors(comm: WeightComm, metadata: list, device, deadline: float):
    """A receiver's side: yields (name, tensor) for each (name, dtype name, shape) of `metadata`, in order, each
    tensor received into a fresh buffer on `device` just before it is yielded (one tensor in memory at a time)."""
    import torch

    for name, dtype, shape in metadata:
        if not hasattr(torch, dtype) or not isinstance(getattr(torch, dtype), torch.dtype):
            raise ValueError(f"weight metadata for {name!r}: {dtype!r} is not a torch dtype")
        buffer = torch.empty(list(shape), dtype=getattr(torch, dtype), device=device)
        comm.broadcast(buffer, 0, deadline)
        yield name, buffer
