"""The object-store transport (`weight_sync.transport.name=object_store`, the CPU default).

Coordinator: the learner exports its full HF-named state dict as numpy arrays in its training dtype
(`export_weights(rank0_only=True, widen=False) -> dict[str, np.ndarray]`; bf16 as marked uint16 bit patterns, never
widened to float32, `lm_head.weight` included for tied models) into Ray's object store once; the coordinator hands the
same ObjectRef to every rollout actor's `update_weights_from_object_store(ref, version)`. Ray resolves a top-level
ObjectRef argument before the call, and numpy arrays are read zero-copy from shared memory on the same node, so the
driver never touches the weights and there is no per-parameter `ray.get`. The same ref is what the serving board
publishes. The learner side is its `export_weights` (no sender object).

Rollout side: the arrays are written, bucket by bucket (`weight_sync.transport.bucket_mb`), as safetensors files on
/dev/shm (the file channel below: `collective_rpc` serialises its arguments, and tensors arrive as nested lists, so
only the path and the names go through the RPC) and loaded by the worker extension's `load_weights_from_file` inside
one reload session (engine_update.py); files are deleted on every path. It works colocated too, as the fallback.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path

from actors.weight_sync.transport import Delivery, Transport, timed_transfer


class ObjectStoreReceiver:
    """The rollout side: `update_weights_from_object_store` (the serving replicas load a board's weights the same
    way, actors/serving/selector_server.py)."""

    def __init__(self, update):
        """update: the worker's EngineUpdate (engine_update.py)."""
        self.update = update

    async def update_weights_from_object_store(self, weights: dict, version: int) -> dict:
        """Load a full HF-named state dict (name -> numpy array) and set the policy version.

        Pauses generation (waits for in-flight requests), loads the weights bucket by bucket
        (weight_sync.transport.bucket_mb) through safetensors files on /dev/shm, resets the prefix cache,
        sets `version`, resumes. Returns {"version", "bytes", "tensors", "buckets", "seconds", "pause_s",
        "load_s", "write_s", "engine_load_s", "worker_index"}. Raises WeightUpdateError (weights left
        inconsistent: generate refuses until a later update succeeds).
        """
        from actors.weight_sync.buckets import plan_buckets
        from core.weight_transports import bucket_bytes

        worker = self.update.worker
        weights = with_output_layer(weights, worker.tied_embeddings)
        buckets = plan_buckets({k: int(v.nbytes) for k, v in weights.items()}, bucket_bytes(worker.sync_cfg.transport))
        parts = {"write_s": 0.0, "engine_load_s": 0.0}

        async def load():
            workdir = Path(tempfile.mkdtemp(prefix=f"genselect-w{worker.worker_index}-", dir=_shm_dir()))
            try:
                for i, names in enumerate(buckets):
                    await self._load_bucket(workdir / f"bucket{i}.safetensors", {k: weights[k] for k in names},
                                            parts)
            finally:
                shutil.rmtree(workdir, ignore_errors=True)

        stats = await self.update.run(version, load)
        return {**stats, **parts, "bytes": sum(int(v.nbytes) for v in weights.values()), "tensors": len(weights),
                "buckets": len(buckets)}

    async def _load_bucket(self, path: Path, arrays: dict, parts: dict) -> None:
        """Write one bucket file, have the engine load it, delete it (on every path)."""
        try:
            start = time.perf_counter()
            await asyncio.to_thread(write_safetensors, path, arrays)
            written = time.perf_counter()
            await self.update.worker._rpc("load_weights_from_file", str(path), list(arrays))
            parts["write_s"] += written - start
            parts["engine_load_s"] += time.perf_counter() - written
        finally:
            path.unlink(missing_ok=True)


class ObjectStoreTransport(Transport):
    """One export into Ray's object store, one ref to every engine."""

    name = "object_store"
    receiver = ObjectStoreReceiver

    def deliver(self, sync, version: int, start: float, deadline: float) -> Delivery:
        refs = [learner.export_weights.remote(rank0_only=True, widen=False) for learner in sync.learners]
        sync.wait(refs, [f"learner[{r}].export_weights" for r in range(len(refs))], deadline, fetch_local=False)
        ref = refs[0]
        export_s = time.perf_counter() - start
        sent = time.perf_counter()
        calls = [h.update_weights_from_object_store.remote(ref, version) for h in sync.rollouts]
        workers, ends = sync.wait_engines(calls, "update_weights_from_object_store", deadline, version)
        return Delivery(workers, export_s, timed_transfer(workers, ends, sent), [w.get("load_s", 0.0) for w in workers],
                        board_source={"kind": "object_ref", "ref": [ref]})


def with_output_layer(weights: dict, tied: bool) -> dict:
    """`weights` plus `lm_head.weight` = `model.embed_tokens.weight` for a tied model that lacks it.

    vLLM's reload un-ties the two (each layer is reloaded on its own), so an update without
    `lm_head.weight` leaves the output layer on the OLD weights (measured: logprob error 0.77).
    """
    if tied and "lm_head.weight" not in weights and "model.embed_tokens.weight" in weights:
        return {**weights, "lm_head.weight": weights["model.embed_tokens.weight"]}
    return weights


def _shm_dir() -> str:
    """tmpfs for the weight files: /dev/shm when present (Linux), else the temp dir."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


# ---- the file channel (runs in the rollout actor; the worker extension's `load_weights_from_file` reads it) ----
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
