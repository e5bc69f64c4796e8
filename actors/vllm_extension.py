"""Worker extension: the code that runs *inside* vLLM's worker process to receive new weights.

vLLM mixes this class into its worker class when the engine is started with
`worker_extension_cls="actors.vllm_extension.WeightReceiver"`; the rollout actor drives the methods with
`engine.collective_rpc(method_name, args=...)`. Method names must not collide with the worker's own
(vLLM asserts that), hence the explicit prefixes.

Why files and not tensors: `collective_rpc` serialises its arguments, and tensors arrive as nested lists.
Weights therefore travel through a safetensors file on a tmpfs (`/dev/shm`) that the worker
memory-maps, and only the path and the tensor names go through the RPC.

Why `initialize_layerwise_reload` / `model.load_weights` / `finalize_layerwise_reload` and not a bare
`model.load_weights`: on CPU vLLM repacks linear weights after loading, so loading into the live
parameters breaks the model. The layerwise-reload lifecycle (the one vLLM's own weight-transfer engines
use, and the one `Worker.reload_weights` wraps) buffers each layer's checkpoint-format tensors and
re-runs the layer's post-load processing once all of them have arrived. A session may span several
`load_weights_from_file` calls (buckets); a layer whose tensors are split over two buckets is
processed when its last tensor arrives.

Tied embeddings (small Qwen3): vLLM's `lm_head.weight` *is* `embed_tokens.weight` (one Parameter), so
loading either updates both; the sender still sends `lm_head.weight` explicitly (harmless when tied,
required when untied). tests/actors/test_weight_sync.py checks the output layer against transformers.

Broadcast path (`weight_sync.backend` gloo or nccl): `init_weight_update_group` + `genselect_receive_broadcast`
follow vLLM's RLHF example: a weight group shared with the trainer, which broadcasts from rank 0, one tensor at a
time, each loaded as it arrives (actors/weight_comm.py: gloo over TCP, run by tests on CPU; vLLM's PyNccl on GPUs,
whose test is marked `gpu`).
"""
from __future__ import annotations

import hashlib
import time
from typing import Optional


class WeightReceiver:
    """Mixed into vLLM's worker; `self.model_runner`, `self.vllm_config`, `self.device` come from it."""

    # ---- session: one weight update = begin, N x load, finish ------------------------------------
    def genselect_begin_update(self) -> None:
        """Start a weight-update session (layerwise reload: layers wait for all their tensors)."""
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        if getattr(self, "_genselect_session", False):
            raise RuntimeError("a weight-update session is already open; finish it first")
        with set_current_vllm_config(self.vllm_config):
            initialize_layerwise_reload(self.model_runner.get_model())
        self._genselect_session = True
        self._genselect_loaded = set()

    def load_weights_from_file(self, path: str, names: Optional[list] = None) -> dict:
        """Load the tensors `names` (default: all) of the safetensors file `path` into the model.

        Inside a session (`genselect_begin_update` ... `genselect_finish_update`) the tensors are
        buffered layer by layer; outside one, this is a complete `reload_weights` of those tensors
        (layers not in the file keep their weights). Returns {"tensors", "bytes", "seconds"}.
        """
        from safetensors import safe_open
        from vllm.config import set_current_vllm_config

        start = time.perf_counter()
        count, nbytes = 0, 0

        def weights():
            nonlocal count, nbytes
            with safe_open(path, framework="pt", device="cpu") as f:
                for name in (names if names is not None else list(f.keys())):
                    tensor = f.get_tensor(name)
                    count += 1
                    nbytes += tensor.numel() * tensor.element_size()
                    yield name, tensor.to(self.device) if str(self.device) != "cpu" else tensor

        if getattr(self, "_genselect_session", False):
            with set_current_vllm_config(self.vllm_config):
                loaded = self.model_runner.get_model().load_weights(weights())
            self._genselect_loaded.update(loaded or ())
        else:
            self.reload_weights(weights_iterator=weights(), is_checkpoint_format=True)  # the worker's own
        return {"tensors": count, "bytes": nbytes, "seconds": time.perf_counter() - start}

    def genselect_finish_update(self) -> dict:
        """Close the session: process layers that are still buffered, restore untouched ones.

        Returns {"loaded": number of model parameters written, "missing": names of model parameters
        that received nothing in this session}.
        """
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        if not getattr(self, "_genselect_session", False):
            raise RuntimeError("no weight-update session is open")
        model = self.model_runner.get_model()
        try:
            with set_current_vllm_config(self.vllm_config):
                finalize_layerwise_reload(model, self.vllm_config.model_config)
        finally:
            self._genselect_session = False
        for reset in ("reset_lora_state", "reset_encoder_cache", "reset_mm_cache"):
            if hasattr(self.model_runner, reset):
                getattr(self.model_runner, reset)()
        expected = {name for name, _ in model.named_parameters()}
        missing = sorted(expected - self._genselect_loaded)
        return {"loaded": len(self._genselect_loaded), "missing": missing}

    # ---- debugging ---------------------------------------------------------------------------------
    def weights_checksum(self) -> dict:
        """{"sha256": digest over every parameter's bytes (name order), "sum": float sum} of the live model.

        Names are vLLM's (fused: `qkv_proj`, `gate_up_proj`), values after any repacking; use it to
        tell whether two engines hold identical weights, not to compare with a checkpoint.
        """
        import torch

        digest, total = hashlib.sha256(), 0.0
        for name, param in sorted(self.model_runner.get_model().named_parameters()):
            data = param.detach().to("cpu").contiguous()
            digest.update(name.encode())
            digest.update(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"")
            total += float(data.double().sum())
        return {"sha256": digest.hexdigest(), "sum": total}

    # ---- broadcast path (weight_sync.backend gloo or nccl; vLLM's RLHF example) ------------------------
    def init_weight_update_group(self, master_address: str, master_port: int, rank_offset: int,
                                 world_size: int, backend: str = "nccl", timeout_s: float = 300.0) -> None:
        """Join the trainer's weight group (actors/weight_comm.py): trainer rank 0 broadcasts, this worker is rank
        offset+local. Closes the group this worker held before. `world_size` = 1 + total number of vLLM workers
        across engines; `timeout_s`: how long the other members may take to join."""
        from vllm.distributed.parallel_state import get_world_group

        from actors.weight_comm import open_group

        self.genselect_close_group()
        rank = get_world_group().rank + rank_offset
        self._genselect_comm = open_group(backend, master_address, master_port, rank, world_size, timeout_s,
                                          self.device)

    def genselect_close_group(self) -> None:
        """Abort and forget this worker's weight group (nothing when there is none)."""
        comm, self._genselect_comm = getattr(self, "_genselect_comm", None), None
        if comm is not None:
            comm.close()

    def genselect_receive_broadcast(self, names: list, dtypes: list, shapes: list, timeout_s: float) -> dict:
        """Receive the tensors the trainer broadcasts (src 0), in this order, loading each as it arrives, inside a
        session (`genselect_begin_update` ... `genselect_finish_update`). Past `timeout_s` the group is closed and
        BroadcastTimeout raised (the session then reports what is missing); a new group is needed after that."""
        from vllm.config import set_current_vllm_config

        from actors.weight_comm import receive_tensors

        comm = getattr(self, "_genselect_comm", None)
        if comm is None:
            raise RuntimeError("no weight group: init_weight_update_group was not called, or the last broadcast "
                               "missed its deadline and closed it")
        if not getattr(self, "_genselect_session", False):
            raise RuntimeError("genselect_receive_broadcast outside a weight-update session")
        start, count, nbytes = time.perf_counter(), 0, 0
        model = self.model_runner.get_model()
        try:
            for name, weight in receive_tensors(comm, list(zip(names, dtypes, shapes)), self.device,
                                                time.monotonic() + timeout_s):
                with set_current_vllm_config(self.vllm_config):
                    self._genselect_loaded.update(model.load_weights(weights=[(name, weight)]) or ())
                count += 1
                nbytes += weight.numel() * weight.element_size()
                del weight
        except BaseException:
            self.genselect_close_group()
            raise
        return {"tensors": count, "bytes": nbytes, "seconds": time.perf_counter() - start}

    # ---- colocated path (weight_sync.backend=ipc; actors/ipc_buckets.py) ------------------------------------
    def genselect_load_ipc(self, exported: list) -> dict:
        """Open each CUDA IPC bucket the learner exported on this worker's device index, load its tensors (the
        model's load_weights copies them) inside a session, drop it. Returns {"tensors", "bytes", "buckets",
        "seconds"}."""
        from vllm.config import set_current_vllm_config

        from actors.ipc_buckets import load_all

        if not getattr(self, "_genselect_session", False):
            raise RuntimeError("genselect_load_ipc outside a weight-update session")
        start = time.perf_counter()
        model = self.model_runner.get_model()

        def load(pairs):
            with set_current_vllm_config(self.vllm_config):
                self._genselect_loaded.update(model.load_weights(weights=pairs) or ())

        stats = load_all(exported, self.device.index, load)
        return {**stats, "seconds": time.perf_counter() - start}


# ---- sender side: the file channel (runs in the rollout actor, not in the worker) ------------------
#: numpy has no bfloat16: bf16 weights travel as their raw 16-bit patterns in a uint16 array whose dtype
#: carries this metadata (kept through pickling, hence through Ray's object store), never widened to float32.
BF16_METADATA = {"torch_dtype": "bfloat16"}


def is_bf16_bits(array) -> bool:
    """True for a uint16 array that holds bfloat16 bit patterns (see BF16_METADATA)."""
    return array.dtype.name == "uint16" and (array.dtype.metadata or {}).get("torch_dtype") == "bfloat16"


_SAFETENSORS_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64",
                       "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8",
                       "bool": "BOOL"}


def write_safetensors(path, arrays: dict) -> int:
    """Write numpy arrays as a safetensors file without an intermediate copy; returns bytes written.

    Format: 8-byte little-endian header length, JSON header (dtype, shape, data_offsets per tensor),
    then the raw C-order data. bfloat16 arrays (ml_dtypes, or uint16 bit patterns marked by BF16_METADATA) are
    written as BF16.
    """
    import json

    import numpy as np

    header, offset, views = {}, 0, []
    for name, array in arrays.items():
        array = np.ascontiguousarray(array)
        dtype = "BF16" if is_bf16_bits(array) else _SAFETENSORS_DTYPES.get(array.dtype.name)
        if dtype is None:
            raise TypeError(f"tensor {name!r}: dtype {array.dtype} has no safetensors equivalent")
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
        views.append(array)
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(len(blob).to_bytes(8, "little"))
        f.write(blob)
        for array in views:
            if array.nbytes:
                f.write(memoryview(array.reshape(-1).view(np.uint8)))
    return 8 + len(blob) + offset
