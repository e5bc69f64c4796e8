"""Colocated weight sync (`weight_sync.transport.name=ipc`): the learner's weights flattened into buckets that an
engine on the same GPU reads through CUDA IPC, one handle per bucket (not per tensor).

A bucket is one contiguous uint8 buffer [total bytes] on the learner's GPU holding several tensors back to back,
each at an offset aligned to ALIGN bytes, and its entries [(name, dtype name, shape, offset, nbytes)]. The learner
exports one IPC handle per bucket (`share(buffer)`), keeps every buffer alive until every engine has said it copied
it (`ExportLedger`), and the engine rebuilds the buffer on its own device index (`rebuild(handle, device_index)`),
views each tensor out of it (`unflatten`) and loads it inside its usual drain / load / resume path, with the
sync's deadline and the missing-parameter check (ipc.py, engine_update.py).

Two channels carry a bucket, each a pair share(buffer) -> handle / rebuild(handle, device_index) -> buffer:
- `cuda`: torch's `reduce_tensor` / `rebuild_cuda_tensor`, keyed by the GPU's UUID, with argument 6 of the rebuild,
  the device index, replaced by the receiver's (what vLLM 0.32's `IPCWeightTransferEngine` does);
- `shm`: a learner on CPU writes each bucket to a file on /dev/shm that the engine on the same node maps; the
  learner deletes the files when the ledger frees the buckets. It runs the whole colocated path on CPU, in CI.
Everything else is plain torch on any device.

Why not vLLM's own `IPCWeightTransferEngine` (vllm/distributed/weight_transfer/ipc_engine.py, packed mode): it
drives its own update session (`start_weight_update` / `receive_weights` / `finish_weight_update` through
`LLM.update_weights`), outside this project's drain / version / resume path, and reports no missing parameters;
the wire format here is the same idea (one packed uint8 buffer per chunk, tensors viewed out of it, the device index
overridden), kept inside the existing session.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from actors.weight_sync.buckets import plan_buckets

ALIGN = 256  # bytes; every tensor starts at a multiple (any dtype's view of the uint8 buffer is aligned)


@dataclass
class Bucket:
    """buffer: uint8 [total bytes]; entries: [(name, dtype name, shape, offset, nbytes)] in the order packed."""
    buffer: object
    entries: list = field(default_factory=list)


def flatten(state: dict, bucket_bytes: int) -> list:
    """Pack `state` (name -> tensor, all on one device) into Buckets of about `bucket_bytes` each, in name order of
    `state`; a tensor larger than a bucket gets a bucket of its own. Returns [Bucket]."""
    import torch

    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be > 0, got {bucket_bytes}")
    sizes = {name: _aligned(tensor.numel() * tensor.element_size()) for name, tensor in state.items()}
    buckets = []
    for names in plan_buckets(sizes, bucket_bytes):
        group = [(name, state[name]) for name in names]
        device = group[0][1].device
        buffer = torch.empty(sum(sizes[name] for name in names), dtype=torch.uint8, device=device)
        entries, offset = [], 0
        for name, tensor in group:
            if tensor.device != device:
                raise ValueError(f"tensor {name!r} is on {tensor.device}, the bucket on {device}")
            nbytes = tensor.numel() * tensor.element_size()
            if nbytes:
                buffer[offset:offset + nbytes].copy_(tensor.detach().contiguous().reshape(-1).view(torch.uint8))
            entries.append((name, str(tensor.dtype).removeprefix("torch."), list(tensor.shape), offset, nbytes))
            offset += _aligned(nbytes)
        buckets.append(Bucket(buffer, entries))
    return buckets


def unflatten(buffer, entries: list) -> list:
    """[(name, tensor)] viewed out of `buffer` (uint8 [total bytes]) per `entries`; views share its memory."""
    import torch

    out = []
    for name, dtype, shape, offset, nbytes in entries:
        if not isinstance(getattr(torch, dtype, None), torch.dtype):
            raise ValueError(f"bucket entry {name!r}: {dtype!r} is not a torch dtype")
        if offset % ALIGN or offset + nbytes > buffer.numel():
            raise ValueError(f"bucket entry {name!r}: bytes [{offset}, {offset + nbytes}) are outside a "
                             f"{buffer.numel()}-byte bucket or unaligned")
        out.append((name, buffer[offset:offset + nbytes].view(getattr(torch, dtype)).view(shape)))
    return out


def share_cuda(buffer) -> dict:
    """{GPU UUID: the arguments of torch's rebuild_cuda_tensor} for a CUDA buffer (torch's reduce_tensor)."""
    import torch
    from torch.multiprocessing.reductions import reduce_tensor

    uuid = str(torch.cuda.get_device_properties(buffer.device.index).uuid)
    _, args = reduce_tensor(buffer)
    return {uuid: args}


def rebuild_cuda(handle: dict, device_index: int):
    """The buffer of `handle` (from share_cuda) opened on this process's `device_index` (which may number the same
    GPU differently from the learner's: CUDA_VISIBLE_DEVICES differs per actor)."""
    import torch
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    uuid = str(torch.cuda.get_device_properties(device_index).uuid)
    if uuid not in handle:
        raise ValueError(f"the IPC handle is for GPU {list(handle)}, this engine runs on {uuid}: weight_sync.backend="
                         f"ipc needs the learner and the engine on the same GPU")
    args = list(handle[uuid])
    args[6] = device_index  # rebuild_cuda_tensor's device argument
    return rebuild_cuda_tensor(*args)


def share_shm(buffer) -> dict:
    """{"path", "bytes"}: `buffer` (a CPU uint8 tensor) written to a new file on /dev/shm (the temp dir without it)."""
    import os
    import tempfile

    directory = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    fd, path = tempfile.mkstemp(prefix="genselect-ipc-", suffix=".bucket", dir=directory)
    with os.fdopen(fd, "wb") as f:
        f.write(memoryview(buffer.numpy()))
    return {"path": path, "bytes": buffer.numel()}


def rebuild_shm(handle: dict, device_index) -> object:
    """The bucket file of `handle` mapped as a CPU uint8 tensor (read by the loader, which copies)."""
    import os

    import torch

    if not os.path.exists(handle["path"]):
        raise ValueError(f"bucket file {handle['path']} does not exist here: weight_sync.backend=ipc on CPU needs the "
                         f"engine on the learner's node (or the learner freed it: the sync's deadline passed)")
    return torch.from_file(handle["path"], shared=False, size=handle["bytes"], dtype=torch.uint8)


def remove_shm(exported: list) -> None:
    """Delete the bucket files of a `shm` export (missing ones are fine)."""
    import os

    for item in exported:
        try:
            os.unlink(item["handle"]["path"])
        except FileNotFoundError:
            pass


CHANNELS = {"cuda": (share_cuda, rebuild_cuda), "shm": (share_shm, rebuild_shm)}


def export(state: dict, bucket_bytes: int, channel: str = "cuda", channels: dict = CHANNELS) -> tuple:
    """(buckets kept alive by the caller, [{"channel", "handle": share(buffer), "entries"}] for the engines)."""
    if channel not in channels:
        raise ValueError(f"IPC channel {channel!r} is not one of {sorted(channels)}")
    share = channels[channel][0]
    buckets = flatten(state, bucket_bytes)
    return buckets, [{"channel": channel, "handle": share(b.buffer), "entries": b.entries} for b in buckets]


def load_all(exported: list, device_index, load, channels: dict = CHANNELS) -> dict:
    """Receiver side: for each exported bucket, open it (its channel's rebuild), hand its tensors to
    `load([(name, tensor)])` (which must copy them: the views die with the bucket), drop it.
    Returns {"tensors", "bytes", "buckets"}."""
    count = nbytes = 0
    for item in exported:
        if item.get("channel") not in channels:
            raise ValueError(f"IPC channel {item.get('channel')!r} is not one of {sorted(channels)}")
        buffer = channels[item["channel"]][1](item["handle"], device_index)
        tensors = unflatten(buffer, item["entries"])
        load(tensors)
        count += len(tensors)
        nbytes += sum(e[4] for e in item["entries"])
        del tensors, buffer
    return {"tensors": count, "bytes": nbytes, "buckets": len(exported)}


class ExportLedger:
    """The learner's exported buckets, kept alive until every engine has copied them.

    `add(export_id, buckets, engines)` holds `buckets` for the engines named; `release(export_id, engine)` drops one
    engine's claim and frees the buckets once none is left; `drop(export_id)` frees them at once (the sync is over:
    an engine that did not answer by the deadline is marked failed and gets a new export next time). At most
    `keep` exports are held: an older one is freed when a newer one is added."""

    def __init__(self, keep: int = 1):
        self.keep = keep
        self._held: dict = {}  # export_id -> (buckets, set of engines still reading)

    def add(self, export_id: str, buckets: list, engines: list, free=None) -> None:
        """Hold `buckets` for `engines`; `free()` (optional) runs when they are freed (the shm channel's files)."""
        if export_id in self._held:
            raise ValueError(f"export {export_id!r} is already held")
        while len(self._held) >= self.keep:
            self._free(next(iter(self._held)))
        self._held[export_id] = (buckets, set(engines), free)

    def release(self, export_id: str, engine) -> bool:
        """True when this was the last engine reading `export_id` (its buckets are freed)."""
        if export_id not in self._held:
            return False
        readers = self._held[export_id][1]
        readers.discard(engine)
        if not readers:
            self._free(export_id)
            return True
        return False

    def drop(self, export_id: str) -> None:
        if export_id in self._held:
            self._free(export_id)

    def held(self) -> dict:
        """{export_id: sorted engines still reading} (for tests and logs)."""
        return {k: sorted(v[1]) for k, v in self._held.items()}

    def _free(self, export_id: str) -> None:
        _, _, free = self._held.pop(export_id)
        if free is not None:
            free()


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN
