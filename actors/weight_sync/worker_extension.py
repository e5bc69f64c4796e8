"""Worker extension: the code that runs *inside* vLLM's worker process to receive new weights.

vLLM mixes this class into its worker class when the engine is started with
`worker_extension_cls="actors.weight_sync.worker_extension.WeightReceiver"`; the rollout actor drives the methods with
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

A transport's own engine-side code (the broadcast's group and receive, the colocated path's IPC buckets) lives in its
file (broadcast.py, ipc.py) and runs here through `genselect_call`; the object store's file channel is
`load_weights_from_file`.
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

    # ---- a transport's engine side ------------------------------------------------------------------------
    def genselect_call(self, function: str, *args):
        """Run a transport's engine-side function ("package.module:function", e.g. broadcast.py's `worker_receive`)
        as function(this worker, *args): a transport's engine code lives in its own file, and a new transport adds
        no method here."""
        import importlib

        module, _, name = function.partition(":")
        return getattr(importlib.import_module(module), name)(self, *args)
