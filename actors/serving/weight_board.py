"""The weight board: the policy version every serving replica should serve, and where its weights are.

A small named Ray actor (namespace `genselect`). The trainer's weight sync (`serve.live`) and the admin reload
publish to it; every replica of actors/serving/selector_server.py long-polls it and loads what is newer
(docs/serving.md).
"""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Optional

BOARD_NAMESPACE = "genselect"


class WeightBoard:
    """The weights the service should serve: the latest (version, source). A named Ray actor.

    source: {"kind": "path", "path": model folder} or {"kind": "object_ref", "ref": [ObjectRef of the
    exported name -> numpy dict]} (the ref inside a list, so Ray does not resolve it on the way). Only the
    latest entry is kept (one copy of the weights pinned in the object store).
    """

    def __init__(self):
        self.version: Optional[int] = None
        self.source: Optional[dict] = None
        self.published_at = 0.0
        self._cond: Optional[asyncio.Condition] = None

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    async def publish(self, version: int, source: dict) -> int:
        """Set the latest weights (a version not above the current one is refused: ValueError)."""
        cond = self._condition()
        async with cond:
            if self.version is not None and version < self.version:
                raise ValueError(f"version {version} is older than the served version {self.version}")
            if version == self.version:  # a repeated sync (a restarted rollout actor): nothing new
                return self.version
            self.version, self.source, self.published_at = int(version), source, time.time()
            cond.notify_all()
        return self.version

    async def latest(self) -> tuple:
        return self.version, self.source

    async def wait_newer(self, version: Optional[int], timeout_s: float) -> tuple:
        """(version, source) as soon as the board holds a version newer than `version`, else after
        `timeout_s` (None, None)."""
        cond = self._condition()
        newer = lambda: self.version is not None and (version is None or self.version > version)  # noqa: E731
        async with cond:
            try:
                await asyncio.wait_for(cond.wait_for(newer), timeout_s)
            except asyncio.TimeoutError:
                return None, None
            return self.version, self.source


def read_model_weights(path: str) -> dict:
    """A model folder's safetensors weights as name -> numpy array (bf16 as marked uint16, unwidened)."""
    from safetensors.torch import load_file

    from actors.learner.checkpoint_io import to_numpy

    files = sorted(Path(path).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {path}")
    state = {}
    for f in files:
        state.update(load_file(str(f)))
    return to_numpy(state, widen=False)


_SHAPE_KEYS = ("architectures", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
               "intermediate_size", "vocab_size", "tie_word_embeddings")


def check_same_shape(current: str, new: str) -> None:
    """ValueError unless the model folder `new` has the architecture of `current` (a different model needs a
    new deployment, not a weight swap)."""
    def shape(p):
        try:
            cfg = json.loads((Path(p) / "config.json").read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"cannot read {p}/config.json: {e}") from None
        return {k: cfg.get(k) for k in _SHAPE_KEYS}

    a, b = shape(current), shape(new)
    diff = [k for k in _SHAPE_KEYS if a[k] != b[k]]
    if diff:
        raise ValueError(f"{new} is another architecture ({', '.join(f'{k}: {a[k]} -> {b[k]}' for k in diff)})")
    if not list(Path(new).glob("*.safetensors")):
        raise ValueError(f"no *.safetensors in {new}")
